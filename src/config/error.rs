//! What goes wrong with a workflow file: one [`ConfigError`] a problem, one
//! [`WorkflowError`] for what stops the file from being used.

use std::fmt;

use crate::catalog::close_matches;

/// One problem in a workflow file: `<path>: <message>`, plus ` (line N)` when
/// the YAML parser could tell the line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConfigError {
    /// Where in the document, e.g. `nodes[0].config.tooling[0].config.tools[1].name`.
    pub path: String,
    /// 1-based line in the file.
    pub line: Option<usize>,
    pub message: String,
}

impl ConfigError {
    pub(super) fn new(
        path: impl Into<String>,
        line: Option<usize>,
        message: impl Into<String>,
    ) -> Self {
        ConfigError {
            path: path.into(),
            line,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)?;
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// What stops a workflow file from being used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkflowError {
    #[error("workflow file {file} does not exist")]
    NotFound { file: String },
    #[error("cannot read workflow file {file}: {reason}")]
    Unreadable { file: String, reason: String },
    #[error("{file}: not valid YAML{}: {message}", at_line(*line, *column))]
    Yaml {
        file: String,
        line: Option<usize>,
        column: Option<usize>,
        message: String,
    },
    #[error("{file}: {}", invalid_summary(errors))]
    Invalid {
        file: String,
        errors: Vec<ConfigError>,
    },
    #[error("{file}: {}", unknown_node(id, available))]
    UnknownNode {
        file: String,
        id: String,
        /// The ids of the nodes that have function tooling.
        available: Vec<String>,
    },
    #[error("{file}: node '{id}' has no function tooling{}", node_kind(node_type.as_deref()))]
    NoFunctionTooling {
        file: String,
        id: String,
        node_type: Option<String>,
    },
}

fn at_line(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" at line {l}, column {c}"),
        (Some(l), None) => format!(" at line {l}"),
        _ => String::new(),
    }
}

fn invalid_summary(errors: &[ConfigError]) -> String {
    let noun = if errors.len() == 1 { "error" } else { "errors" };
    let mut text = format!("{} {noun}", errors.len());
    for e in errors {
        text.push_str("\n  ");
        text.push_str(&e.to_string());
    }
    text
}

fn unknown_node(id: &str, available: &[String]) -> String {
    let mut text = format!("no node '{id}'");
    let matches = close_matches(id, available.iter().map(String::as_str));
    if let Some(best) = matches.first() {
        text.push_str(&format!(" (did you mean '{best}'?)"));
    }
    if available.is_empty() {
        text.push_str("; no node has function tooling");
    } else {
        text.push_str(&format!(
            "; nodes with function tooling: {}",
            available.join(", ")
        ));
    }
    text
}

fn node_kind(node_type: Option<&str>) -> String {
    match node_type {
        Some("agent") => String::new(),
        Some(t) => format!(" (it is a '{t}' node; only agent nodes carry tooling)"),
        None => " (it has no type; only agent nodes carry tooling)".to_string(),
    }
}

/// Appends ` (did you mean '<best><suffix>'?)` when a candidate is close.
pub(super) fn push_did_you_mean<'a>(
    message: &mut String,
    name: &str,
    candidates: impl Iterator<Item = &'a str>,
    suffix: &str,
) {
    if let Some(best) = close_matches(name, candidates).first() {
        message.push_str(&format!(" (did you mean '{best}{suffix}'?)"));
    }
}
