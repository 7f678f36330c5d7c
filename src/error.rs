//! Errors at the library boundary.
//!
//! [`ToolError`] is what a failed call gives back: its `Display` is the
//! agent-facing text `Tool <name> error: <Type>: <message>`, the same through
//! every front end. Nothing here depends on the rest of the crate: the wire
//! (`protocol`) and the workers name their errors with these kinds.

use std::fmt;

use serde::Serialize;

/// Why a call failed; decides the `<Type>` of the agent-facing text and the
/// CLI's exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Ran past its timeout; the worker was killed.
    Timeout,
    /// The tool raised; carries the exception's own type name.
    Raised(String),
    /// The result's reply was over the frame limit (the shim says so and
    /// the worker goes on).
    ResultTooLarge,
    /// The worker did not understand the request (a shim of another
    /// protocol version).
    ProtocolError,
    /// The worker process died (or broke the protocol) during the call.
    WorkerDied,
    /// No such function (or its module failed to import).
    NotFound,
    /// Arguments did not fit the function.
    InvalidArguments,
    /// No worker became free within the queue-wait limit.
    PoolBusy,
    /// The pool is shutting down or shut down.
    PoolClosed,
}

impl ErrorKind {
    /// The `<Type>` in the agent-facing text.
    pub fn type_name(&self) -> &str {
        match self {
            ErrorKind::Timeout => "TimeoutError",
            ErrorKind::Raised(name) => name,
            ErrorKind::ResultTooLarge => "ResultTooLarge",
            ErrorKind::ProtocolError => "ProtocolError",
            ErrorKind::WorkerDied => "WorkerDied",
            ErrorKind::NotFound => "NotFound",
            ErrorKind::InvalidArguments => "InvalidArguments",
            ErrorKind::PoolBusy => "PoolBusy",
            ErrorKind::PoolClosed => "PoolClosed",
        }
    }

    /// Maps an error type reported by the shim to a kind.
    pub fn from_remote(type_name: &str) -> ErrorKind {
        match type_name {
            "NotFound" => ErrorKind::NotFound,
            "InvalidArguments" => ErrorKind::InvalidArguments,
            "ResultTooLarge" => ErrorKind::ResultTooLarge,
            "ProtocolError" => ErrorKind::ProtocolError,
            other => ErrorKind::Raised(other.to_string()),
        }
    }
}

/// A failed call, as the agent sees it: its `Display` is the text every
/// front end gives the agent.
///
/// ```
/// use toolpool::{ErrorKind, ToolError};
///
/// let error = ToolError::new("fetch", ErrorKind::Timeout, "function 'fetch' timed out after 30 s");
/// assert_eq!(
///     error.to_string(),
///     "Tool fetch error: TimeoutError: function 'fetch' timed out after 30 s"
/// );
/// assert!(error.is_timeout());
/// let raised = ToolError::new("fetch", ErrorKind::Raised("ValueError".into()), "no such page");
/// assert_eq!(raised.to_string(), "Tool fetch error: ValueError: no such page");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    /// The tool's name as the agent called it (a workflow node's tool: the
    /// name it exposes, prefix included).
    pub tool: String,
    /// Why the call failed; names the `<Type>` of the text.
    pub kind: ErrorKind,
    /// The explanation after `<Type>: ` (for a raised exception, its message).
    pub message: String,
    /// The Python traceback, when the tool raised.
    pub traceback: Option<String>,
}

impl ToolError {
    /// An error of `tool`, without a traceback.
    pub fn new(tool: &str, kind: ErrorKind, message: impl Into<String>) -> ToolError {
        ToolError {
            tool: tool.to_string(),
            kind,
            message: message.into(),
            traceback: None,
        }
    }

    /// Whether the call ran past its timeout ([`ErrorKind::Timeout`]).
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
    }

    /// The `error` object of the CLI's `--json` envelope.
    pub fn to_json(&self) -> serde_json::Value {
        #[derive(Serialize)]
        struct Json<'a> {
            #[serde(rename = "type")]
            kind: &'a str,
            message: &'a str,
            traceback: Option<&'a str>,
        }
        serde_json::to_value(Json {
            kind: self.kind.type_name(),
            message: &self.message,
            traceback: self.traceback.as_deref(),
        })
        .unwrap_or(serde_json::Value::Null)
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tool {} error: {}: {}",
            self.tool,
            self.kind.type_name(),
            self.message
        )
    }
}

impl std::error::Error for ToolError {}
