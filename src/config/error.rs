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
    /// What is wrong there.
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
    /// The file does not exist.
    #[error("workflow file {file} does not exist")]
    NotFound {
        /// The path as given.
        file: String,
    },
    /// The file cannot be read: it is a directory, it is not UTF-8, or
    /// reading it failed.
    #[error("cannot read workflow file {file}: {reason}")]
    Unreadable {
        /// The path as given.
        file: String,
        /// Which of those, with the system's error.
        reason: String,
    },
    /// The file is not valid YAML, or its aliases expand to too much, or it
    /// is nested too deeply.
    #[error("{file}: not valid YAML{}: {message}", at_line(*line, *column))]
    Yaml {
        /// The file, as [`Workflow::source`](crate::workflow::Workflow::source) names it.
        file: String,
        /// 1-based line of the error, when the parser could tell.
        line: Option<usize>,
        /// 1-based column of the error, when the parser could tell.
        column: Option<usize>,
        /// The parser's message.
        message: String,
    },
    /// The file is YAML but not a usable workflow: keys of the wrong shape,
    /// unknown functions, tool names that clash (every problem, by line).
    #[error("{file}: {}", invalid_summary(errors))]
    Invalid {
        /// The file, as [`Workflow::source`](crate::workflow::Workflow::source) names it.
        file: String,
        /// Every problem found, sorted by line.
        errors: Vec<ConfigError>,
    },
    /// No node has the id asked for.
    #[error("{file}: {}", unknown_node(id, available))]
    UnknownNode {
        /// The file, as [`Workflow::source`](crate::workflow::Workflow::source) names it.
        file: String,
        /// The id asked for.
        id: String,
        /// The ids of the nodes that have function tooling.
        available: Vec<String>,
    },
    /// The node asked for exists but has no function tooling (it is not an
    /// agent node, or its tooling is all of other types).
    #[error("{file}: node '{id}' has no function tooling{}", node_kind(node_type.as_deref()))]
    NoFunctionTooling {
        /// The file, as [`Workflow::source`](crate::workflow::Workflow::source) names it.
        file: String,
        /// The node's id.
        id: String,
        /// The node's `type`; `None` when it has none.
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
