//! toolpool: runs Python function tools for LLM agents in a pool of isolated
//! `python3` workers, with timeouts that are enforced by killing the worker.
//!
//! Modules, dependencies pointing one way: [`protocol`] ← [`worker`] ←
//! [`pool`] ← [`cli`]; [`catalog`], [`config`] (workflow files) and
//! [`context`] beside them.

pub mod bench;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod content;
pub mod context;
pub mod control_chars;
pub mod doctor;
pub mod duration_text;
pub mod embedded;
pub mod env;
pub mod error;
pub mod health;
mod http_conn;
pub mod logging;
pub mod mcp;
pub mod metrics;
mod node_calls;
pub mod pool;
pub mod pool_error;
pub mod process;
mod procfs;
pub mod protocol;
pub mod reaper;
pub mod sandbox;
pub mod stop;
pub mod watch;
pub mod worker;

pub use catalog::{Catalog, FunctionSpec, ListOption, LoadError, LoadWarning};
pub use config::{
    validate, ConfigError, NodeTools, ResolvedWorkflow, ToolFormat, ToolSpec, Workflow,
    WorkflowError,
};
pub use content::{Attachment, BlockKind, ContentBlock};
pub use context::{
    AttachmentRecord, AttachmentStore, HumanPrompt, PromptAnswer, PromptError, PromptRequest,
    Session, SessionsRoot, TerminalPrompt,
};
pub use error::{ErrorKind, ToolError};
pub use pool::{
    CallReport, InvokeContext, InvokeOptions, LatencyHistogram, Limits, Pool, PoolBuilder,
    PoolStats, SessionIsolation, WorkerStats,
};
pub use pool_error::PoolError;
