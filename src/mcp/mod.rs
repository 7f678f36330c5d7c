//! `toolpool serve`: the pool as an MCP server (docs/mcp.md), built on the
//! official Rust SDK, `rmcp`.
//!
//! - `tools/list` is the whole catalog, or one workflow node's tools (the
//!   specs `resolve` prints: prefixed names, descriptions, parameters; each
//!   tool's timeout and Python function are in its `_meta`).
//! - `tools/call` runs through the pool. Every failure of a call — timeout,
//!   exception, dead worker, bad arguments, pool shut down — is a result with
//!   `isError: true` and the agent-facing text; an unknown tool is a
//!   protocol error (-32602), as MCP has it.
//!   rmcp runs every request in its own task, so many calls are in flight at
//!   once; the pool runs as many as it has workers and queues the rest.
//! - `notifications/cancelled` cancels the request's token; the call future
//!   is dropped, which kills the worker it was running on (the pool starts a
//!   replacement) or, for a queued call, just takes it out of the queue.
//! - A tool's result is also `structuredContent` when its function has an
//!   output schema (from its return annotation; see `FunctionSpec`).
//! - A tool's human prompt (`_context["human_prompt"].request(...)`) becomes
//!   an elicitation request to the client that made the call (2025-11-25),
//!   or a multi-round-trip result (2026-07-28, see `src/mcp/calls/mrtr.rs`), when it
//!   declared the capability; otherwise the tool is told no human is
//!   available (see `src/mcp/calls/elicit.rs`). The pool does not count the wait against
//!   the call's timeout.
//! - With `--watch`, a reload that changes the tool list is told to every
//!   client (see `src/mcp/listeners.rs`); in node mode the node is re-resolved.
//! - Shutdown (stdin EOF on stdio, SIGTERM/SIGINT on either transport): stop
//!   taking calls, let the calls already received (running or queued) finish
//!   within the grace period, kill the rest, reap every worker, answer every
//!   call, exit 0.
//!
//! Protocol versions: 2026-07-28 (no `initialize`; each request carries its
//! version and capabilities in `_meta`, negotiated per request by rmcp) beside
//! 2025-11-25 and every older version rmcp speaks (the `initialize`
//! handshake).
//!
//! stdout carries only the MCP transport; logs, including what tools print,
//! go to stderr.

mod calls;
mod handler;
#[cfg(feature = "http")]
mod http;
mod listeners;
mod reloads;
mod replicas;
mod resources;
mod sealing;
mod shutdown;
mod splice;
mod stdio;
mod tool_list;

use calls::{traced, CallCounter};
#[cfg(feature = "http")]
use http::SessionCalls;
#[cfg(not(feature = "http"))]
use stdio::sessions::SessionCalls;
use tool_list::list_tools;

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

#[allow(deprecated)] // LoggingLevel, SetLevelRequestParams: see `calls::notices`
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
    CustomResult, ErrorCode, Implementation, JsonObject, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, LoggingLevel, MetaObject, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig, SetLevelRequestParams, SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::model::{
    CancelTaskParams, DiscoverResult, GetTaskParams, GetTaskResult, InitializeRequestParams,
    InitializeResult, SubscriptionFilter, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::catalog::{FunctionSpec, TaskSupport, ToolHints};
use crate::config::{NodeTools, Workflow};
use crate::context::{AttachmentStore, HumanPrompt, Session};
use crate::error::{ErrorKind, ToolError};
use crate::pool::{CallReport, InvokeOptions, Pool};
use crate::stop::StopRequests;
use calls::content::{call_result, plain_result};
use calls::spans::{CallTrace, Outcome, RequestSpan};
use calls::tasks::TaskEnd;

#[cfg(feature = "metrics")]
pub(crate) use http::access::{authority_and_origin, is_loopback_host};
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use http::options::{HttpArgs, HttpOptions, TOKEN_ENV as AUTH_TOKEN_ENV};
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use http::parse_http_addr;
pub use replicas::Replica;

/// The most bytes of request bodies the server holds at once, across every
/// connection (four bodies of the largest size; on stdio, of lines read and
/// not yet answered): past it a request is refused before it is read whole.
/// A body costs a few times its size while it is parsed and sent on to a
/// worker, so this bounds the memory that requests take, whatever clients
/// send.
const BODIES_IN_FLIGHT: usize = 4 * crate::protocol::DEFAULT_MAX_FRAME;

/// After stdin ends: how long no call may have run before the server takes
/// every request read before the end as answered.
const EOF_SETTLE: Duration = Duration::from_millis(200);

/// The newest protocol version served (see the module docs).
const MAX_PROTOCOL: ProtocolVersion = ProtocolVersion::V_2026_07_28;

/// The version an `initialize` handshake settles on when the client asks for
/// one without a handshake (2026-07-28) or one rmcp does not know.
const HANDSHAKE_PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// Which tools the server offers.
#[derive(Debug, Clone)]
pub enum ToolSet {
    /// Every function of the pool's catalog, with the pool's default timeout.
    Catalog,
    /// One workflow node's tools, by their exposed (possibly prefixed) names,
    /// each with its tooling's timeout and the node id in `_context`.
    Node(NodeTools),
}

/// How `serve` runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Which tools the server offers.
    pub tools: ToolSet,
    /// `None`: stdio. `Some(options)`: streamable HTTP on their address.
    #[cfg(feature = "http")]
    pub http: Option<HttpOptions>,
    /// How long calls in flight may run on at shutdown before they are killed.
    pub grace: Duration,
    /// `--watch`: told (a new count) after each reload of the catalog; the
    /// server then declares `tools.listChanged` and tells its clients when
    /// their tool list changed.
    pub reloads: Option<tokio::sync::watch::Receiver<u64>>,
    /// With [`ToolSet::Node`]: the workflow the node is re-resolved against
    /// after a reload.
    pub workflow: Option<Workflow>,
    /// `--task-after`: a call from a 2026-07-28 client that declares the
    /// tasks extension becomes a task once it has run this long.
    pub task_after: Option<Duration>,
    /// `--task-keep`: how long a finished task is kept for `tasks/get`.
    pub task_keep: Duration,
    /// `--progress-heartbeat`: while a call runs for a request that sent a
    /// `progressToken`, a progress notification this often when the tool
    /// reported none.
    pub progress_heartbeat: Option<Duration>,
    /// Where each request's span goes (`OTEL_EXPORTER_OTLP_*`:
    /// [`crate::telemetry::Telemetry::from_env`]); flushed and shut down
    /// when the server stops. `None`: no spans (the tools still get the
    /// client's `traceparent`).
    #[cfg(feature = "otel")]
    pub telemetry: Option<crate::telemetry::Telemetry>,
}

/// What stops the server from starting; after it started, `serve` always
/// ends cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The HTTP server cannot listen on its address.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// The system's error.
        source: std::io::Error,
    },
    /// The directory of the HTTP sessions (`--sessions-root`) cannot be made.
    #[error("--sessions-root: {0}")]
    Sessions(#[source] crate::pool_error::PoolError),
}

/// Serves the pool over MCP until the client goes away (stdin EOF) or `stop`
/// is requested (the binary requests it on SIGTERM and SIGINT); then shuts
/// the pool down.
pub async fn serve(
    pool: Pool,
    options: ServeOptions,
    stop: StopRequests,
) -> Result<(), ServeError> {
    let mut server = ToolpoolServer::new(pool, options.tools).with_stop(stop);
    if let Some(every) = options.progress_heartbeat {
        server = server.with_progress_heartbeat(every);
    }
    if let Some(after) = options.task_after {
        server = server.with_tasks(after, options.task_keep);
    }
    #[cfg(feature = "http")]
    if let Some(replica) = options.http.as_ref().and_then(|h| h.replica.clone()) {
        server = server.with_replica(replica);
    }
    #[cfg(feature = "otel")]
    if let Some(telemetry) = &options.telemetry {
        server = server.with_telemetry(telemetry);
    }
    if let Some(reloads) = options.reloads {
        server.follow_reloads(reloads, options.workflow);
    }
    let served = async {
        #[cfg(feature = "http")]
        if let Some(http) = options.http {
            return http::serve(server, http, options.grace).await;
        }
        stdio::serve(server, options.grace).await
    }
    .await;
    // Every call has been answered: the last spans go out.
    #[cfg(feature = "otel")]
    if let Some(telemetry) = options.telemetry {
        telemetry.shutdown().await;
    }
    served
}

/// The MCP server handler: one per stdio connection; shared by every HTTP
/// session (it is a cheap handle on the same pool and tool set).
#[derive(Clone)]
pub struct ToolpoolServer {
    inner: Arc<Inner>,
    /// The HTTP session this handle serves: when it is closed, its calls
    /// are cancelled (on stdio, never).
    session: SessionCalls,
    /// The log level this MCP session's client set (`logging/setLevel`):
    /// its calls' log records from there up reach it.
    #[allow(deprecated)]
    log_level: Arc<std::sync::Mutex<Option<LoggingLevel>>>,
    /// This MCP session's entry among the listeners, once it has one
    /// (initialized under `--watch`, or its first `resources/subscribe`).
    listener: Arc<std::sync::OnceLock<u64>>,
}

struct Inner {
    pool: Pool,
    /// Replaced after a reload in node mode (the node re-resolved).
    tools: RwLock<ToolSet>,
    /// Set by [`ToolpoolServer::follow_reloads`]: the tool list can change.
    list_changes: AtomicBool,
    listeners: listeners::Listeners,
    /// Calls suspended while a 2026-07-28 client asks its human.
    round_trips: Arc<calls::mrtr::RoundTrips>,
    /// `--task-after`, and the calls that became tasks.
    task_after: Option<Duration>,
    /// `--progress-heartbeat`.
    progress_heartbeat: Option<Duration>,
    tasks: Arc<calls::tasks::Tasks>,
    /// This replica, when several serve behind one balancer: the tag of
    /// its tasks' ids and `requestState`s.
    replica: Option<Arc<Replica>>,
    calls: CallCounter,
    /// Set at shutdown: calls arriving after it are refused.
    closing: AtomicBool,
    /// The embedding program's stop requests: the first drains, the second
    /// ends the grace period.
    stop: StopRequests,
    /// Where each request's span goes, if anywhere.
    spans: calls::spans::Tracing,
}

impl ToolpoolServer {
    /// A server of `tools` on `pool`, stopped only by its transport's end
    /// (see [`with_stop`](Self::with_stop)).
    pub fn new(pool: Pool, tools: ToolSet) -> ToolpoolServer {
        let round_trips = calls::mrtr::RoundTrips::new(pool.human_timeout(), None);
        ToolpoolServer {
            inner: Arc::new(Inner {
                pool,
                tools: RwLock::new(tools),
                list_changes: AtomicBool::new(false),
                listeners: listeners::Listeners::default(),
                round_trips,
                task_after: None,
                progress_heartbeat: None,
                tasks: Arc::new(calls::tasks::Tasks::new(calls::tasks::DEFAULT_KEEP, None)),
                replica: None,
                calls: CallCounter::default(),
                closing: AtomicBool::new(false),
                stop: StopRequests::never(),
                spans: calls::spans::Tracing::default(),
            }),
            session: SessionCalls::default(),
            log_level: Arc::default(),
            listener: Arc::default(),
        }
    }

    /// The server with `session` as what its calls know of their session
    /// (stdio's, whose large texts go out spliced).
    fn with_session(mut self, session: SessionCalls) -> ToolpoolServer {
        self.session = session;
        self
    }

    /// A handle for one HTTP session.
    #[cfg(feature = "http")]
    fn for_session(&self, session: SessionCalls) -> ToolpoolServer {
        ToolpoolServer {
            inner: self.inner.clone(),
            session,
            log_level: Arc::default(),
            listener: Arc::default(),
        }
    }

    /// Calls running longer than `after` become tasks (see `src/mcp/tasks.rs`), for
    /// clients that declare the tasks extension; a finished one is kept for
    /// `keep`. Before the server is shared.
    pub fn with_tasks(mut self, after: Duration, keep: Duration) -> ToolpoolServer {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.task_after = Some(after);
            inner.tasks = Arc::new(calls::tasks::Tasks::new(keep, inner.replica.clone()));
        }
        self
    }

    /// One of several replicas behind a balancer: the ids of its tasks and
    /// questions name it ([`Replica`]). Before the server is shared.
    pub fn with_replica(mut self, replica: Replica) -> ToolpoolServer {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            let replica = Arc::new(replica);
            inner.round_trips =
                calls::mrtr::RoundTrips::new(inner.pool.human_timeout(), Some(replica.clone()));
            inner.tasks = Arc::new(calls::tasks::Tasks::new(
                inner.tasks.keep(),
                Some(replica.clone()),
            ));
            inner.replica = Some(replica);
        }
        self
    }

    /// While a call runs for a request that sent a `progressToken`, a
    /// progress notification every `every` when the tool reported none (its
    /// message says how long the call has run), for clients that reset
    /// their timeout on progress. Before the server is shared.
    pub fn with_progress_heartbeat(mut self, every: Duration) -> ToolpoolServer {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.progress_heartbeat = Some(every);
        }
        self
    }

    /// Stops on `stop`'s requests: the first drains (no new calls, those
    /// in flight finish within the grace period), the second kills what
    /// still runs. Without it, only the transport's end stops the server.
    /// Before the server is shared.
    pub fn with_stop(mut self, stop: StopRequests) -> ToolpoolServer {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.stop = stop;
        }
        self
    }

    /// Makes a SERVER span of each request, with `telemetry`'s tracer (see
    /// `src/mcp/calls/spans.rs`). Before the server is shared.
    #[cfg(feature = "otel")]
    pub fn with_telemetry(mut self, telemetry: &crate::telemetry::Telemetry) -> ToolpoolServer {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.spans = calls::spans::Tracing::exporting(telemetry.tracer().clone());
        }
        self
    }

    /// The span of the request in `context` (without an exporter, nothing
    /// but the client's trace context for its tool).
    fn span(
        &self,
        context: &RequestContext<RoleServer>,
        method: &'static str,
        tool: Option<&str>,
        resource: Option<&str>,
    ) -> RequestSpan {
        let spans = &self.inner.spans;
        let session_id = spans
            .is_exporting()
            .then(|| self.session.mcp_session_id(context))
            .flatten();
        let request = calls::spans::Request {
            method,
            tool,
            resource,
            session_id: session_id.as_deref(),
            transport: self.session.transport(),
        };
        RequestSpan::start(spans, context, request)
    }

    /// The pool the calls run on.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The tools as `tools/list` gives them: built on each request, so that
    /// a rebuilt catalog shows.
    pub fn tools(&self) -> Vec<Tool> {
        list_tools(&self.inner.pool, &self.tool_set())
    }

    fn tool_set(&self) -> ToolSet {
        match self.inner.tools.read() {
            Ok(tools) => tools.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The catalog function behind the tool the client calls `name`.
    fn function_of(&self, name: &str) -> Option<FunctionSpec> {
        let function = match self.tool_set() {
            ToolSet::Catalog => name.to_string(),
            ToolSet::Node(node) => node.tools.into_iter().find(|t| t.name == name)?.function,
        };
        let catalog = self.inner.pool.catalog();
        catalog
            .functions
            .iter()
            .find(|f| f.name == function)
            .cloned()
    }

    /// Calls one tool by the name the client sees, in `session` (`None`:
    /// the pool's); its human prompts go to `human`, its progress reports and
    /// log records to `listeners`; it continues `trace`, on whose span its
    /// end is recorded.
    async fn invoke(
        &self,
        name: &str,
        args: Value,
        human: Arc<dyn HumanPrompt>,
        listeners: calls::notices::Listeners,
        session: Option<Arc<Session>>,
        trace: CallTrace,
    ) -> CallReport {
        let inner = &self.inner;
        let options = InvokeOptions {
            human_prompt: Some(human),
            progress: listeners.progress,
            logs: listeners.logs,
            session,
            trace: trace.for_tool(),
            ..InvokeOptions::default()
        };
        let report = match self.tool_set() {
            ToolSet::Catalog => inner.pool.invoke_report(name, args, options).await,
            ToolSet::Node(node) => node.invoke_report(&inner.pool, name, args, options).await,
        };
        trace.call_ended(&report);
        report
    }
}

/// The server's icon (`serverInfo.icons`): four workers in a pool, as an SVG
/// data URI, so a client shows it without fetching anything.
fn server_icon() -> rmcp::model::Icon {
    use base64::Engine as _;
    const SVG: &str = include_str!("../../assets/icon.svg");
    let mut icon = rmcp::model::Icon::new(format!(
        "data:image/svg+xml;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(SVG.trim_end())
    ));
    icon.mime_type = Some("image/svg+xml".into());
    icon.sizes = Some(vec!["any".into()]);
    icon
}

/// Tools (or other items) a list page holds. Large enough that a catalog
/// rarely needs a second page: clients that read only the first page (some
/// agent runtimes do) then still see every tool.
const PAGE_SIZE: usize = 1000;

/// The page of `items` that `cursor` names (none: the first), and the cursor
/// of the next one. A cursor is one this server gave (`page-<offset>`); any
/// other is an invalid-params error, as MCP has it.
fn page<T>(items: Vec<T>, cursor: Option<&str>) -> Result<(Vec<T>, Option<String>), McpError> {
    let start = match cursor {
        None => 0,
        Some(cursor) => cursor
            .strip_prefix("page-")
            .and_then(|offset| offset.parse::<usize>().ok())
            .filter(|offset| *offset > 0 && *offset < items.len())
            .ok_or_else(|| {
                McpError::invalid_params(
                    format!(
                        "invalid cursor {cursor:?}: not one this server gave (or the list changed)"
                    ),
                    None,
                )
            })?,
    };
    let end = (start + PAGE_SIZE).min(items.len());
    let next = (end < items.len()).then(|| format!("page-{end}"));
    Ok((
        items.into_iter().skip(start).take(end - start).collect(),
        next,
    ))
}

#[cfg(test)]
mod tests {
    use super::{page, PAGE_SIZE};

    #[test]
    fn lists_are_paged_by_the_cursors_given_and_a_bad_cursor_is_invalid_params() {
        let (first, next) = page((0..PAGE_SIZE + 5).collect::<Vec<_>>(), None).unwrap();
        assert_eq!(first.len(), PAGE_SIZE);
        let next = next.expect("a second page");
        let (second, last) = page((0..PAGE_SIZE + 5).collect::<Vec<_>>(), Some(&next)).unwrap();
        assert_eq!(second, (PAGE_SIZE..PAGE_SIZE + 5).collect::<Vec<_>>());
        assert_eq!(last, None);
        assert_eq!(page(vec![1, 2], None).unwrap(), (vec![1, 2], None));
        for bad in ["", "page-0", "page-2", "page-x", "nonsense"] {
            let error = page(vec![1, 2], Some(bad)).unwrap_err();
            assert_eq!(error.code.0, -32602, "{bad}");
        }
    }
}
