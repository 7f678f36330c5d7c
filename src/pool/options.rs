//! What a caller gives a call ([`InvokeOptions`], [`InvokeContext`]), how
//! sessions share workers ([`SessionIsolation`]), and what it gets back
//! ([`CallReport`]).

use crate::content::ContentBlock;
use crate::context::{HumanPrompt, LogSubscription, ProgressListener, Session};
use crate::error::ToolError;
use crate::trace_context::TraceContext;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Per-call options.
#[derive(Debug, Clone, Default)]
pub struct InvokeOptions {
    /// Overrides the pool's default timeout.
    pub timeout: Option<Duration>,
    /// Overrides the pool's grace after a timeout ([`crate::PoolBuilder::timeout_grace`]).
    pub timeout_grace: Option<Duration>,
    /// What the tool is told about its caller.
    pub context: InvokeContext,
    /// Who answers this call's human prompts, instead of the pool's
    /// ([`crate::PoolBuilder::human_prompt`]); e.g. the MCP client that made the call.
    pub human_prompt: Option<Arc<dyn HumanPrompt>>,
    /// Who hears the tool's progress reports (`_context["progress"]`); with
    /// none, the tool's reports go nowhere.
    pub progress: Option<Arc<dyn ProgressListener>>,
    /// Who hears the tool's log records (Python's `logging`), and from
    /// which level; with none, records go where the tool's logging sends
    /// them (the worker's stderr, in the supervisor's log).
    pub logs: Option<LogSubscription>,
    /// The session the call runs in (its workspace, attachments and
    /// packages), instead of the pool's ([`crate::Pool::session`]).
    pub session: Option<Arc<Session>>,
    /// The W3C trace context the tool continues (`_context["traceparent"]`,
    /// `TRACEPARENT` in its environment while it runs); see
    /// [`InvokeOptions::with_trace`].
    pub trace: Option<TraceContext>,
}

impl InvokeOptions {
    /// The call continues `trace`: the tool sees its `traceparent` as
    /// `_context["traceparent"]` and as `TRACEPARENT` in `os.environ` while
    /// the call runs (and `tracestate` likewise, when there is one), so
    /// that its own OpenTelemetry code makes its spans children of the
    /// caller's. Make one with [`TraceContext::parse`].
    pub fn with_trace(mut self, trace: TraceContext) -> InvokeOptions {
        self.trace = Some(trace);
        self
    }
}

/// Whether a worker may serve calls of more than one session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionIsolation {
    /// Any worker serves any session (module globals, threads and imported
    /// packages are shared between them).
    #[default]
    Shared,
    /// A worker serves one session; before it would serve another it is
    /// parked for its session (kept idle beyond the pool's size, up to
    /// [`crate::PoolBuilder::parked_workers`]; retired past that) and a worker of
    /// the new session — one parked for it, a warm spare, or a new one —
    /// takes its place, so nothing in a worker's memory passes from one
    /// session to the next.
    Process,
}

/// What a caller tells the tool about itself (`_context` keys).
#[derive(Debug, Clone, Default)]
pub struct InvokeContext {
    /// The calling agent node's id (`_context["node_id"]`); `None` when the
    /// caller is not a workflow node.
    pub node_id: Option<String>,
    /// Free-form values for the tool (`_context["vars"]`).
    pub vars: serde_json::Map<String, Value>,
    /// Keys of the host program's own `_context` (the original runtime's
    /// `global_state`), given to the tool as they are; the keys toolpool
    /// sets itself (`python_workspace_root`, `session_id`, ...) keep
    /// toolpool's values.
    pub host: serde_json::Map<String, Value>,
}

/// A successful call, with what the CLI's `--json` envelope reports.
#[derive(Debug, Clone)]
pub struct CallReport {
    /// The tool's JSON value, or the error the agent gets.
    pub result: Result<Value, ToolError>,
    /// For an attachment result (the tool returned message blocks or an
    /// attachment record), its blocks, checked against the session's store.
    pub content: Option<Vec<ContentBlock>>,
    /// From the call's start to its end, the wait for a worker included.
    pub elapsed: Duration,
    /// How long the call waited for a free worker.
    pub queue_wait: Duration,
    /// The pid of the worker the call last went to; `None` when it got none
    /// (the pool busy or shutting down, a sandboxed worker that could not
    /// start).
    pub worker_pid: Option<i32>,
}
