//! A workflow file read ([`Workflow::load`], [`Workflow::parse`]) and
//! checked against a catalog ([`Workflow::resolve`]): the steps that use
//! the reader and the validator, apart from the types they fill.

use std::path::Path;

use super::error::WorkflowError;
use super::reader::Reader;
use super::resolved::ResolvedWorkflow;
use super::validate::validate;
use super::workflow::Workflow;
use super::yaml::parse_yaml;
use crate::catalog::Catalog;

impl Workflow {
    /// Reads and parses a workflow file.
    pub fn load(path: impl AsRef<Path>) -> Result<Workflow, WorkflowError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => WorkflowError::NotFound { file: file.clone() },
            _ if path.is_dir() => WorkflowError::Unreadable {
                file: file.clone(),
                reason: "it is a directory".to_string(),
            },
            _ => WorkflowError::Unreadable {
                file: file.clone(),
                reason: e.to_string(),
            },
        })?;
        let text = String::from_utf8(bytes).map_err(|e| WorkflowError::Unreadable {
            file: file.clone(),
            reason: format!(
                "it is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        })?;
        Workflow::parse(&text, &file)
    }

    /// Parses a workflow from text; `source` names it in messages. Problems
    /// of shape are kept, every one with its path and line, and reported
    /// with the catalog's by [`Workflow::resolve`]; only text that is not
    /// YAML fails here.
    ///
    /// ```
    /// use toolpool::workflow::Workflow;
    ///
    /// let text = "nodes:
    /// - id: writer
    ///   type: agent
    ///   config:
    ///     tooling:
    ///     - type: function
    ///       config:
    ///         timeout: 30
    ///         tools:
    ///         - name: wait
    /// ";
    /// let workflow = Workflow::parse(text, "graph.yaml")?;
    /// assert_eq!(workflow.nodes.len(), 1);
    /// assert!(workflow.nodes[0].has_function_tooling());
    /// assert!(workflow.problems.is_empty());
    ///
    /// let error = Workflow::parse("nodes: [", "bad.yaml").unwrap_err();
    /// assert!(error.to_string().starts_with("bad.yaml: not valid YAML at line 1"), "{error}");
    /// # Ok::<(), toolpool::workflow::WorkflowError>(())
    /// ```
    pub fn parse(text: &str, source: &str) -> Result<Workflow, WorkflowError> {
        let root = parse_yaml(text).map_err(|(line, column, message)| WorkflowError::Yaml {
            file: source.to_string(),
            line,
            column,
            message,
        })?;
        let mut reader = Reader::default();
        reader.read_root(&root);
        Ok(Workflow {
            source: source.to_string(),
            nodes: reader.nodes,
            problems: reader.problems,
        })
    }

    /// Validates against `catalog` (see [`validate`]), naming the file in the error.
    pub fn resolve(&self, catalog: &Catalog) -> Result<ResolvedWorkflow, WorkflowError> {
        validate(self, catalog).map_err(|errors| WorkflowError::Invalid {
            file: self.source.clone(),
            errors,
        })
    }
}
