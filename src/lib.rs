#![warn(missing_docs)]
// `pub` only where the crate's users reach it: inside a private module, `pub(crate)`.
#![warn(unreachable_pub)]
// docs.rs shows which feature each gated item needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
//! toolpool: runs Python function tools for LLM agents in a pool of isolated
//! `python3` workers, with timeouts that are enforced by killing the worker.
//!
//! What nearly every program uses is at the root: a [`Pool`] built with
//! [`PoolBuilder`] and called with [`Pool::invoke`] / [`Pool::invoke_report`],
//! the [`Catalog`] of its tools, and how a call failed ([`ToolError`]). The
//! rest is by area: [`workflow`] files, the [`context`] a tool reaches
//! (sessions, human prompts, progress, logs, attachments), [`content`]
//! blocks, the pool's [`stats`], and, with the `mcp` feature, the MCP
//! server as a value ([`mcp`]), stopped by the program through [`stop`].
//!
//! ```
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # // The README's tool, in a folder of its own (the example's `my_tools`).
//! # let folder = tempfile::tempdir()?;
//! # std::env::set_current_dir(folder.path())?;
//! # std::fs::create_dir("my_tools")?;
//! # std::fs::write(
//! #     "my_tools/temperature.py",
//! #     "def convert_temperature(value: float, unit: str = 'C') -> str:\n    \"\"\"Convert a temperature.\"\"\"\n    return f'{value * 9 / 5 + 32:.1f} °F'\n",
//! # )?;
//! use std::time::Duration;
//! use toolpool::{InvokeOptions, Pool};
//!
//! let pool = Pool::builder()
//!     .functions_dir("my_tools")
//!     .workers(4)
//!     .timeout(Duration::from_secs(30))
//!     .build()
//!     .await?;
//! let result = pool
//!     .invoke("convert_temperature", serde_json::json!({"value": 100}), InvokeOptions::default())
//!     .await; // Ok(value), or Err(ToolError) whose Display is the agent-facing text
//! pool.shutdown().await;
//! # assert_eq!(result?, serde_json::json!("212.0 °F"));
//! # Ok(())
//! # }
//! ```
//!
//! Modules inside point one way: `protocol` ← `worker` ← `pool` ← the front
//! ends (`mcp`, and the `toolpool` binary, which stands on this crate's
//! public API alone); `catalog`, `config` (workflow files) and `context`
//! beside them (docs/architecture.md).

pub mod catalog;
mod config;
pub mod content;
pub mod context;
mod control_chars;
mod duration_text;
mod embedded;
pub mod env;
mod error;
#[cfg(feature = "http")]
mod http;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp;
pub mod metrics;
mod node_calls;
mod outcome;
mod pool;
mod pool_error;
mod process;
mod procfs;
mod protocol;
mod reaper;
mod sandbox;
pub mod stop;
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub mod telemetry;
pub mod trace_context;
#[cfg(feature = "watch")]
#[cfg_attr(docsrs, doc(cfg(feature = "watch")))]
pub mod watch;
mod worker;

// What nearly every program uses: the pool, a call and how it failed.
pub use catalog::Catalog;
pub use error::{ErrorKind, ToolError};
pub use pool::{
    CallReport, InvokeContext, InvokeOptions, Limits, Pool, PoolBuilder, SessionIsolation,
    CALL_LOG_TARGET,
};
pub use pool_error::PoolError;
pub use sandbox::SandboxMode;

/// Workflow files (docs/workflows.md): ChatDev's YAML read strictly, checked
/// against a catalog, and each agent node's tools resolved.
pub mod workflow {
    pub use crate::config::{
        nodes_json, validate, ConfigError, FunctionToolConfig, FunctionToolEntryConfig,
        FunctionTooling, Located, NodeConfig, NodeTools, OtherNode, ResolvedWorkflow, ToolFormat,
        ToolSpec, ToolingConfig, ToolingKind, Workflow, WorkflowError,
    };
}

/// What a pool says about itself: its counters ([`Pool::stats`]) and how
/// its workers run ([`Pool::worker_info`]).
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let tools = tempfile::tempdir()?;
/// # std::fs::write(
/// #     tools.path().join("ping.py"),
/// #     "def ping() -> str:\n    \"\"\"Answer pong.\"\"\"\n    return 'pong'\n",
/// # )?;
/// use toolpool::stats::{KillMechanism, PoolStats};
/// use toolpool::{InvokeOptions, Pool};
///
/// let pool = Pool::builder().functions_dir(tools.path()).workers(1).build().await?;
/// pool.invoke("ping", serde_json::json!({}), InvokeOptions::default()).await?;
/// let stats: PoolStats = pool.stats();
/// assert_eq!((stats.calls, stats.succeeded, stats.timeouts), (1, 1, 0));
/// let info = pool.worker_info();
/// assert!(matches!(
///     info.kill_mechanism,
///     KillMechanism::PidNamespace | KillMechanism::ProcessTree
/// ));
/// pool.shutdown().await;
/// # Ok(())
/// # }
/// ```
pub mod stats {
    pub use crate::pool::{LatencyHistogram, PoolStats, TenantCalls, WorkerStats};
    pub use crate::process::KillMechanism;
    pub use crate::worker::{StartMethod, WorkerInfo};
}

/// Text as toolpool reads and writes it: seconds as operators give them
/// and read them, and what a tool printed made safe for a terminal.
pub mod text {
    pub use crate::control_chars::escape_controls;
    pub use crate::duration_text::{format_secs, parse_seconds};
}

/// The worker protocol (docs/protocol.md), for a program that drives one
/// worker itself: the crate's floor benchmark measures with it what a call
/// costs below the pool. [`PrivateInstall`](wire::PrivateInstall) puts the
/// shim a worker runs in a directory of its own.
pub mod wire {
    pub use crate::embedded::{InstallError, PrivateInstall};
    pub use crate::pool::resolve_interpreter;
    pub use crate::protocol::{
        encode_invoke_frame, write_frame, CallContext, ProtocolError, DEFAULT_MAX_FRAME,
        PROTOCOL_VERSION,
    };
}
