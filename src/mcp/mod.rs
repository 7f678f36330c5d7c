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
//!   or a multi-round-trip result (2026-07-28, see `src/mcp/mrtr.rs`), when it
//!   declared the capability; otherwise the tool is told no human is
//!   available (see `src/mcp/elicit.rs`). The pool does not count the wait against
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

mod content;
mod elicit;
#[cfg(feature = "http")]
mod http;
#[cfg(not(feature = "http"))]
#[path = "stdio_sessions.rs"]
mod http;
#[cfg(feature = "http")]
mod http_access;
mod listeners;
mod mrtr;
// MCP deprecates logging (SEP-2577, rmcp marks its types so); 2025-11-25
// clients and the conformance suite still use it.
#[allow(deprecated)]
mod call_notices;
mod resource_functions;
mod resources;
mod stdio;
mod stdio_gate;
mod task_input;
mod tasks;
mod tracing_spans;

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

#[allow(deprecated)] // LoggingLevel, SetLevelRequestParams: see `call_notices`
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
use content::call_result;
use tasks::TaskEnd;
use tracing_spans::{CallTrace, Outcome, RequestSpan};

#[cfg(feature = "http")]
pub use http::parse_http_addr;
#[cfg(feature = "metrics")]
pub(crate) use http_access::{authority_and_origin, is_loopback_host};
#[cfg(feature = "http")]
pub use http_access::{HttpArgs, HttpOptions, TOKEN_ENV as AUTH_TOKEN_ENV};

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
    if let Some(after) = options.task_after {
        server = server.with_tasks(after, options.task_keep);
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
    session: http::SessionCalls,
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
    round_trips: Arc<mrtr::RoundTrips>,
    /// `--task-after`, and the calls that became tasks.
    task_after: Option<Duration>,
    tasks: Arc<tasks::Tasks>,
    calls: CallCounter,
    /// Set at shutdown: calls arriving after it are refused.
    closing: AtomicBool,
    /// The embedding program's stop requests: the first drains, the second
    /// ends the grace period.
    stop: StopRequests,
    /// Where each request's span goes, if anywhere.
    spans: tracing_spans::Tracing,
}

impl ToolpoolServer {
    /// A server of `tools` on `pool`, stopped only by its transport's end
    /// (see [`with_stop`](Self::with_stop)).
    pub fn new(pool: Pool, tools: ToolSet) -> ToolpoolServer {
        let round_trips = mrtr::RoundTrips::new(pool.human_timeout());
        ToolpoolServer {
            inner: Arc::new(Inner {
                pool,
                tools: RwLock::new(tools),
                list_changes: AtomicBool::new(false),
                listeners: listeners::Listeners::default(),
                round_trips,
                task_after: None,
                tasks: Arc::new(tasks::Tasks::new(tasks::DEFAULT_KEEP)),
                calls: CallCounter::default(),
                closing: AtomicBool::new(false),
                stop: StopRequests::never(),
                spans: tracing_spans::Tracing::default(),
            }),
            session: http::SessionCalls::default(),
            log_level: Arc::default(),
            listener: Arc::default(),
        }
    }

    /// A handle for one HTTP session.
    #[cfg(feature = "http")]
    fn for_session(&self, session: http::SessionCalls) -> ToolpoolServer {
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
            inner.tasks = Arc::new(tasks::Tasks::new(keep));
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
    /// `src/mcp/tracing_spans.rs`). Before the server is shared.
    #[cfg(feature = "otel")]
    pub fn with_telemetry(mut self, telemetry: &crate::telemetry::Telemetry) -> ToolpoolServer {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.spans = tracing_spans::Tracing::exporting(telemetry.tracer().clone());
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
        let request = tracing_spans::Request {
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

    /// After each reload: re-resolves the node (in node mode) and, when the
    /// tool list changed, tells every listener. Runs until the watcher ends.
    fn follow_reloads(
        &self,
        mut reloads: tokio::sync::watch::Receiver<u64>,
        workflow: Option<Workflow>,
    ) {
        self.inner.list_changes.store(true, Ordering::Release);
        let server = self.clone();
        tokio::spawn(async move {
            let mut listed = server.tools();
            let mut resources = server.resource_uris();
            while reloads.changed().await.is_ok() {
                listed = server.reloaded(workflow.as_ref(), listed).await;
                resources = server.resources_reloaded(resources).await;
            }
        });
    }

    /// The URIs and URI templates the functions serve.
    fn resource_uris(&self) -> Vec<String> {
        let catalog = self.inner.pool.catalog();
        let listed = resource_functions::listed(&catalog)
            .into_iter()
            .map(|r| r.uri);
        let templates = resource_functions::templates(&catalog)
            .into_iter()
            .map(|t| t.uri_template);
        listed.chain(templates).collect()
    }

    /// After a reload: each subscription to a resource a function serves is
    /// told that it may have changed (its code was reloaded), then a changed
    /// resource list (`before`: its URIs before it) is told to every
    /// listener of lists. Returns the URIs after it.
    async fn resources_reloaded(&self, before: Vec<String>) -> Vec<String> {
        let catalog = self.inner.pool.catalog();
        let told = self
            .inner
            .listeners
            .notify_updated(|uri| resource_functions::find(&catalog, uri).is_some())
            .await;
        if told > 0 {
            tracing::info!(
                notices = told,
                "subscribed resources reloaded; clients told"
            );
        }
        let after = self.resource_uris();
        if after != before {
            let told = self
                .inner
                .listeners
                .notify_list_changed(listeners::Change::Resources)
                .await;
            tracing::info!(clients = told, "the resource list changed; clients told");
        }
        after
    }

    /// `before`: the list before the reload; returns the list after it.
    async fn reloaded(&self, workflow: Option<&Workflow>, before: Vec<Tool>) -> Vec<Tool> {
        if let (Some(workflow), ToolSet::Node(node)) = (workflow, self.tool_set()) {
            let resolved = workflow
                .resolve(&self.inner.pool.catalog())
                .and_then(|resolved| resolved.node_tools(&node.id).cloned());
            match resolved {
                Ok(resolved) => match self.inner.tools.write() {
                    Ok(mut tools) => *tools = ToolSet::Node(resolved),
                    Err(poisoned) => *poisoned.into_inner() = ToolSet::Node(resolved),
                },
                Err(error) => tracing::warn!(
                    node = %node.id,
                    "after the reload the workflow no longer resolves, so the node keeps its tools: {error}"
                ),
            }
        }
        let after = self.tools();
        if after == before {
            tracing::debug!("reloaded; the tool list is unchanged");
        } else {
            let told = self
                .inner
                .listeners
                .notify_list_changed(listeners::Change::Tools)
                .await;
            tracing::info!(clients = told, "the tool list changed; clients told");
        }
        after
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
        listeners: call_notices::Listeners,
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

    /// [`Self::shut_down`] once stdin has ended. Nothing new can arrive then,
    /// but requests read just before the end may still be on their way from
    /// rmcp's read loop to their handlers: refusing them would fail calls the
    /// client sent in time. So this first waits until no call has run for
    /// [`EOF_SETTLE`] (within `grace`).
    async fn shut_down_after_eof(&self, grace: Duration) {
        let started = tokio::time::Instant::now();
        loop {
            let left = grace.saturating_sub(started.elapsed());
            if !self.inner.calls.wait_idle(left).await {
                break;
            }
            tokio::time::sleep(EOF_SETTLE).await;
            if self.inner.calls.count() == 0 || started.elapsed() >= grace {
                break;
            }
        }
        self.shut_down(grace.saturating_sub(started.elapsed()))
            .await;
    }

    /// Stops taking calls, lets those already received (running or queued)
    /// finish within `grace`, kills the rest, reaps every worker, and waits
    /// until every call has been answered (handed to the transport).
    async fn shut_down(&self, grace: Duration) {
        let inner = &self.inner;
        let started = tokio::time::Instant::now();
        // `/readyz` (on `--metrics` too) says so from now on.
        inner.pool.drain();
        inner.closing.store(true, Ordering::Release);
        tracing::info!(
            in_flight = inner.calls.count(),
            grace_secs = grace.as_secs_f64(),
            "shutting down: finishing the calls received"
        );
        let mut left_now = false;
        tokio::select! {
            _ = inner.calls.wait_idle(grace) => {}
            _ = inner.stop.again() => {
                tracing::warn!("asked to stop again: killing the calls in flight");
                left_now = true;
            }
        }
        // Whatever still runs is killed now and answered as shut down.
        let left = if left_now {
            Duration::ZERO
        } else {
            grace.saturating_sub(started.elapsed())
        };
        inner.pool.shutdown_with_grace(left).await;
        // Killed calls return at once; this bound only guards against a
        // handler that never returns.
        if !inner.calls.wait_idle(Duration::from_secs(5)).await {
            tracing::warn!(
                in_flight = inner.calls.count(),
                "calls still unanswered after the pool shut down"
            );
        }
        tracing::info!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            "pool shut down"
        );
    }
}

/// The `tools/list` entries.
fn list_tools(pool: &Pool, tools: &ToolSet) -> Vec<Tool> {
    let default_timeout = pool.default_timeout();
    let catalog = pool.catalog();
    let function_of = |function: &str| catalog.functions.iter().find(|f| f.name == function);
    match tools {
        ToolSet::Catalog => catalog
            .functions
            .iter()
            // Functions that serve resources are read, not called.
            .filter(|f| f.resource.is_none())
            .map(|f| {
                let meta = json!({
                    "toolpool/function": f.name,
                    "toolpool/module": f.module,
                    "toolpool/timeout": seconds(default_timeout),
                });
                tool(&f.name, &f.description, &f.parameters, meta, Some(f), None)
            })
            .collect(),
        ToolSet::Node(node) => node
            .tools
            .iter()
            .map(|t| {
                let meta = json!({
                    "toolpool/function": t.function,
                    "toolpool/node": node.id,
                    "toolpool/timeout": seconds(t.timeout.unwrap_or(default_timeout)),
                });
                tool(
                    &t.name,
                    &t.description,
                    &t.parameters,
                    meta,
                    function_of(&t.function),
                    Some((t.title.as_deref(), t.annotations.as_ref())),
                )
            })
            .collect(),
    }
}

/// A function's MCP `outputSchema`. A wrapped one (`{"result": ...}`) is
/// marked the way fastmcp marks its own, so that its client (and others that
/// follow it) hands the caller the result itself rather than the wrapper.
fn output_schema(function: &FunctionSpec) -> Option<Value> {
    let mut schema = function.output_schema.clone()?;
    if let (true, Value::Object(fields)) = (function.output_wrapped, &mut schema) {
        fields.insert("x-fastmcp-wrap-result".into(), Value::Bool(true));
    }
    Some(schema)
}

/// The MCP tool for `name`, with what its catalog `function` (when known)
/// says of its result, title and behaviour.
fn tool(
    name: &str,
    description: &str,
    parameters: &Value,
    meta: Value,
    function: Option<&FunctionSpec>,
    // A workflow entry's own title and hints, in place of the function's.
    entry: Option<(Option<&str>, Option<&ToolHints>)>,
) -> Tool {
    let output = function.and_then(output_schema);
    // The catalog and `resolve` only produce object schemas; anything else
    // would be rejected by clients, so fall back to "no parameters".
    let schema: JsonObject = match parameters {
        Value::Object(schema) => schema.clone(),
        _ => json!({"type": "object", "properties": {}})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    };
    let meta = match meta {
        Value::Object(meta) => MetaObject(meta),
        _ => MetaObject(JsonObject::new()),
    };
    let tool = Tool::new_with_raw(
        name.to_string(),
        Some(Cow::Owned(description.to_string())),
        Arc::new(schema),
    )
    .with_meta(meta);
    // The shim only makes object schemas (a non-object result is wrapped).
    let mut tool = match output {
        Some(Value::Object(output)) => tool.with_raw_output_schema(Arc::new(output)),
        _ => tool,
    };
    let (entry_title, entry_hints) = entry.unwrap_or_default();
    let title = entry_title
        .map(str::to_string)
        .or_else(|| function.and_then(|f| f.title.clone()));
    let hints = entry_hints.or_else(|| function.and_then(|f| f.annotations.as_ref()));
    tool.title = title.clone();
    tool.annotations = hints.map(|hints| {
        let mut annotations = rmcp::model::ToolAnnotations::default();
        // The title here too: clients of versions before `Tool.title` read it here.
        annotations.title = title.clone();
        annotations.read_only_hint = hints.read_only_hint;
        annotations.destructive_hint = hints.destructive_hint;
        annotations.idempotent_hint = hints.idempotent_hint;
        annotations.open_world_hint = hints.open_world_hint;
        annotations
    });
    tool
}

/// Seconds as a JSON number: `30`, not `30.0`, when whole.
fn seconds(duration: Duration) -> Value {
    if duration.subsec_nanos() == 0 {
        Value::from(duration.as_secs())
    } else {
        json!(duration.as_secs_f64())
    }
}

impl ServerHandler for ToolpoolServer {
    #[allow(deprecated)] // enable_logging: see `call_notices`
    fn get_info(&self) -> ServerConfig {
        let capabilities = if self.inner.list_changes.load(Ordering::Acquire) {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .enable_logging()
                .build()
        } else {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_logging()
                .build()
        };
        let mut capabilities = capabilities;
        if self.inner.task_after.is_some() {
            capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .insert(rmcp::model::TASKS_EXTENSION_ID.into(), JsonObject::new());
        }
        let mut info = ServerConfig::new(capabilities);
        let mut implementation = Implementation::new("toolpool", env!("CARGO_PKG_VERSION"));
        implementation.title = Some("toolpool".into());
        implementation.website_url = option_env!("CARGO_PKG_REPOSITORY")
            .filter(|url| !url.is_empty())
            .map(str::to_string);
        implementation.icons = Some(vec![server_icon()]);
        implementation.description = Some(
            "Python function tools run in a pool of isolated workers, with enforced timeouts"
                .into(),
        );
        info.server_info = implementation;
        info.protocol_version = HANDSHAKE_PROTOCOL;
        info.instructions = Some(
            "Each tool is a Python function run in an isolated worker. A call that runs past \
             its timeout is killed and reported as a tool error (TimeoutError); failures are \
             tool results with isError set, as 'Tool <name> error: <Type>: <message>'."
                .into(),
        );
        info
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&MAX_PROTOCOL))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        traced(self.span(&context, "tools/list", None, None), async {
            let cursor = request.and_then(|r| r.cursor);
            let (tools, next) = page(self.tools(), cursor.as_deref())?;
            let mut result = ListToolsResult::with_all_items(tools);
            result.next_cursor = next;
            Ok(result)
        })
        .await
    }

    /// The files of the request's session (its attachments).
    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        traced(self.span(&context, "resources/list", None, None), async {
            let store = self.store_for(&context)?;
            let listed = tokio::task::spawn_blocking(move || resources::list(&store))
                .await
                .map_err(|e| McpError::internal_error(format!("listing failed: {e}"), None))?;
            let mut all = resource_functions::listed(&self.inner.pool.catalog());
            all.extend(listed.resources);
            let cursor = request.and_then(|r| r.cursor);
            let (items, next) = page(all, cursor.as_deref())?;
            Ok(ListResourcesResult {
                resources: items,
                next_cursor: next,
                ..listed
            })
        })
        .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        traced(
            self.span(&context, "resources/templates/list", None, None),
            async {
                let attachments = resources::templates();
                let mut all = resource_functions::templates(&self.inner.pool.catalog());
                all.extend(attachments.resource_templates);
                let cursor = request.and_then(|r| r.cursor);
                let (items, next) = page(all, cursor.as_deref())?;
                Ok(ListResourceTemplatesResult {
                    resource_templates: items,
                    next_cursor: next,
                    ..attachments
                })
            },
        )
        .await
    }

    /// A resource a function serves (run in the request's session), or one
    /// file of the request's session by its `toolpool://attachments/` URI.
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri;
        let span = self.span(&context, "resources/read", None, Some(&uri));
        let trace = span.call();
        traced(span, async {
            let catalog = self.inner.pool.catalog();
            if let Some((function, args)) = resource_functions::find(&catalog, &uri) {
                let session = self
                    .session
                    .session(&context)
                    .map_err(|e| McpError::invalid_params(e, None))?;
                let options = InvokeOptions {
                    human_prompt: Some(Arc::new(elicit::NoHuman(
                        "a resource is read without a human to ask",
                    ))),
                    session,
                    trace: trace.for_tool(),
                    ..InvokeOptions::default()
                };
                let name = function.name.clone();
                let report = tokio::select! {
                    report = self.inner.pool.invoke_report(&name, Value::Object(args), options) => report,
                    _ = context.ct.cancelled() => {
                        trace.cancelled();
                        return Err(McpError::internal_error("the read was cancelled", None));
                    }
                };
                trace.call_ended(&report);
                return resource_functions::contents(function, &uri, report.result)
                    .map(ReadResourceResponse::Complete);
            }
            let store = self.store_for(&context)?;
            let uri = uri.clone();
            tokio::task::spawn_blocking(move || resources::read(&store, &uri))
                .await
                .map_err(|e| McpError::internal_error(format!("reading failed: {e}"), None))?
                .map(ReadResourceResponse::Complete)
        })
        .await
    }

    /// `resources/subscribe` (2025-11-25 sessions): the URI must name a
    /// resource this session can read; its client is then told
    /// (`notifications/resources/updated`) when a reload changes the code
    /// that serves it. An attachment's file is not watched.
    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let span = self.span(&context, "resources/subscribe", None, Some(&request.uri));
        traced(span, async {
            self.check_resource(&request.uri, &context).await?;
            let listeners = &self.inner.listeners;
            let id = *self
                .listener
                .get_or_init(|| listeners.add_session(context.peer.clone(), false));
            if !listeners.subscription(id, &request.uri, true) {
                // Its connection was found closed and dropped: a new entry.
                let id = listeners.add_session(context.peer.clone(), false);
                listeners.subscription(id, &request.uri, true);
            }
            Ok(())
        })
        .await
    }

    /// `resources/unsubscribe`: the URI is no longer watched for this session.
    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let span = self.span(&context, "resources/unsubscribe", None, Some(&request.uri));
        if let Some(id) = self.listener.get() {
            self.inner.listeners.subscription(*id, &request.uri, false);
        }
        span.end(Outcome::Ok);
        Ok(())
    }

    /// The level from which this session's calls' log records reach the
    /// client (`notifications/message`).
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let span = self.span(&context, "logging/setLevel", None, None);
        if let Ok(mut level) = self.log_level.lock() {
            *level = Some(request.level);
        }
        span.end(Outcome::Ok);
        Ok(())
    }

    async fn ping(&self, context: RequestContext<RoleServer>) -> Result<(), McpError> {
        self.span(&context, "ping", None, None).end(Outcome::Ok);
        Ok(())
    }

    /// rmcp's own, in a span.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let span = self.span(&context, "initialize", None, None);
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request);
        span.end(Outcome::of(&result));
        result
    }

    /// rmcp's own, in a span.
    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        self.span(&context, "server/discover", None, None)
            .end(Outcome::Ok);
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools().into_iter().find(|t| t.name == name)
    }

    /// A session from `initialize` is told of list changes on its connection.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if self.inner.list_changes.load(Ordering::Acquire) {
            let id = self.inner.listeners.add_session(context.peer, true);
            let _ = self.listener.set(id);
        }
    }

    /// 2026-07-28 `subscriptions/listen`: tool list changes, with `--watch`.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut filter = SubscriptionFilter::new();
        if self.inner.list_changes.load(Ordering::Acquire) {
            filter.tools_list_changed = Some(true);
            filter.resources_list_changed = Some(true);
        }
        // Resources a function serves: the ones a reload can change.
        let catalog = self.inner.pool.catalog();
        let served: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| resource_functions::find(&catalog, uri).is_some())
            .cloned()
            .collect();
        if !served.is_empty() {
            filter.resource_subscriptions = Some(served);
        }
        (filter != SubscriptionFilter::new()).then_some(filter)
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let span = self.span(&context, "tasks/get", None, None);
        let result = match self.inner.tasks.get(&request.task_id) {
            Some(task) => Ok(GetTaskResult::new(task)),
            None => Err(self.no_task(&request.task_id)),
        };
        span.end(Outcome::of(&result));
        result
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let span = self.span(&context, "tasks/cancel", None, None);
        let result = if self.inner.tasks.cancel(&request.task_id) {
            Ok(())
        } else {
            Err(self.no_task(&request.task_id))
        };
        span.end(Outcome::of(&result));
        result
    }

    /// The client's answers to a task's questions.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let span = self.span(&context, "tasks/update", None, None);
        let result = if self
            .inner
            .tasks
            .update(&request.task_id, &request.input_responses)
        {
            Ok(())
        } else {
            Err(self.no_task(&request.task_id))
        };
        span.end(Outcome::of(&result));
        result
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let uris = context
            .accepted()
            .resource_subscriptions
            .iter()
            .flatten()
            .cloned()
            .collect();
        let id = self
            .inner
            .listeners
            .add_stream(context.sink().clone(), uris);
        context.cancelled().await;
        self.inner.listeners.remove(id);
        Ok(())
    }

    /// A `tools/call` whose params rmcp could not read (arguments that are
    /// not an object, a name that is not a string) lands here; answer it as
    /// a tool error when it names a tool, as a bad-params error otherwise.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let tool = request
            .params
            .as_ref()
            .and_then(|params| params.get("name"))
            .and_then(Value::as_str);
        let span =
            (request.method == "tools/call").then(|| self.span(&context, "tools/call", tool, None));
        let result = self.custom_request(request);
        if let Some(span) = span {
            span.end(match &result {
                // Always an `isError` result (see below).
                Ok(_) => Outcome::ToolError("the arguments must be a JSON object"),
                Err(_) => Outcome::of(&result),
            });
        }
        result
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let span = self.span(&context, "tools/call", Some(&request.name), None);
        // Where every path of the call finds it (see `CallTrace::of`).
        let mut context = context;
        context.extensions.insert(span.call());
        let result = self.call_tool_in(request, context).await;
        span.end(Outcome::of_call(&result));
        result
    }
}

impl ToolpoolServer {
    /// A `tools/call` whose params rmcp could not read (arguments that are
    /// not an object, a name that is not a string) lands here; answer it as
    /// a tool error when it names a tool, as a bad-params error otherwise.
    fn custom_request(&self, request: CustomRequest) -> Result<CustomResult, McpError> {
        if request.method != "tools/call" {
            return Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("method not found: {}", request.method),
                None,
            ));
        }
        let params = request.params.unwrap_or(Value::Null);
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return Err(McpError::invalid_params(
                "tools/call needs `name`, the tool's name as a string",
                None,
            ));
        };
        let got = match params.get("arguments") {
            Some(Value::Array(_)) => "an array",
            Some(Value::String(_)) => "a string",
            Some(Value::Number(_)) => "a number",
            Some(Value::Bool(_)) => "a boolean",
            _ => "something else",
        };
        let error = ToolError::new(
            name,
            ErrorKind::InvalidArguments,
            format!("the arguments must be a JSON object, got {got}"),
        );
        let mut result = call_result(Err(error), None, None);
        result.result_type = None;
        let result = serde_json::to_value(result)
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(CustomResult(result))
    }

    /// A `tools/call`, continuing the trace in its context.
    async fn call_tool_in(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let trace = CallTrace::of(&context);
        let _in_flight = self.inner.calls.enter();
        let name = request.name.to_string();
        if self.inner.closing.load(Ordering::Acquire) {
            let error = ToolError::new(&name, ErrorKind::PoolClosed, "the server is shutting down");
            return Ok(CallToolResponse::Complete(call_result(
                Err(error),
                None,
                None,
            )));
        }
        if matches!(self.tool_set(), ToolSet::Catalog) {
            if let Some(resource) = self.function_of(&name).and_then(|f| f.resource) {
                return Err(McpError::invalid_params(
                    format!(
                        "no tool '{name}': the function serves the resource {} (resources/read)",
                        resource.uri
                    ),
                    None,
                ));
            }
        }
        // Taken, not copied: a large argument is held once.
        let args = Value::Object(request.arguments.take().unwrap_or_default());
        // The toolpool session the call runs in (HTTP: the one the client
        // names, else its credential's).
        let session = self
            .session
            .session(&context)
            .map_err(|e| McpError::invalid_params(e, None))?;
        // The tasks extension (with --task-after): what the tool's author
        // declared, and whether this client takes tasks.
        let (task_support, tool_task_after) = self.task_support_of(&name);
        let takes_tasks = self.task_after_for(&context);
        if task_support == Some(TaskSupport::Required) && takes_tasks.is_none() {
            return Err(tasks_required(&name));
        }
        // A task-supporting tool is a task from the start (the server
        // decides, SEP-2663), even for a client that could also be asked in
        // round trips.
        let directed = takes_tasks.is_some()
            && matches!(
                task_support,
                Some(TaskSupport::Optional | TaskSupport::Required)
            );
        let asks_by_round_trips = elicit::is_modern(&context)
            && (request.request_state.is_some()
                || context
                    .client_capabilities()
                    .is_some_and(|c| c.elicitation.is_some()));
        if asks_by_round_trips {
            let as_task = directed.then_some(tool_task_after);
            return self
                .call_in_round_trips(name, args, session, &request, &context, as_task)
                .await;
        }
        let notices = call_notices::for_request(&context, self.log_level());
        let task_after = match task_support {
            _ if directed => Some(tool_task_after),
            Some(TaskSupport::Forbidden) => None,
            _ => takes_tasks,
        };
        if let Some(after) = task_after {
            return Ok(self
                .call_maybe_as_task(name, args, notices, session, after, &context)
                .await);
        }
        // Only 2025-11-25 HTTP sessions can be ended (DELETE) under a call.
        let session_closed = self.session.closed(&context);
        let call = self.invoke(
            &name,
            args,
            notices.prompt(elicit::for_request(&context)),
            notices.listeners.clone(),
            session.clone(),
            trace.clone(),
        );
        tokio::select! {
            report = call => {
                // Its last notices before its answer.
                notices.flushed().await;
                if let Err(error) = &report.result {
                    if error.kind == ErrorKind::NotFound {
                        // No such tool (here, or for this workflow node): a
                        // protocol error, as MCP has it, with the same text.
                        return Err(McpError::invalid_params(error.to_string(), None));
                    }
                }
                Ok(CallToolResponse::Complete(self.result_of(&name, report, session.as_deref())))
            }
            _ = context.ct.cancelled() => {
                // Dropping `call` killed its worker (or took it out of the
                // queue).
                trace.cancelled();
                tracing::info!(tool = %name, id = %context.id, "call cancelled by the client");
                Ok(CallToolResponse::Complete(cancelled()))
            }
            _ = session_closed => {
                // As above: the client ended the session (HTTP DELETE).
                tracing::info!(tool = %name, id = %context.id, "call cancelled: its session was closed");
                Err(McpError::internal_error("the session was closed", None))
            }
        }
    }
}

/// Runs a request's `body` and ends its `span` with how it ended.
async fn traced<T>(
    span: RequestSpan,
    body: impl std::future::Future<Output = Result<T, McpError>>,
) -> Result<T, McpError> {
    let result = body.await;
    span.end(Outcome::of(&result));
    result
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

impl ToolpoolServer {
    /// Whether the tool `name` may run as a task, as its author declared
    /// it (`None` when tasks are not served — no `--task-after` — or the
    /// author said nothing), and how long a call of it runs before it
    /// becomes one (its `mcp_task_after`, else at once).
    fn task_support_of(&self, name: &str) -> (Option<TaskSupport>, Duration) {
        let function = self.inner.task_after.and_then(|_| self.function_of(name));
        let after = function
            .as_ref()
            .and_then(|f| f.task_after)
            .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
            .unwrap_or(Duration::ZERO);
        (function.and_then(|f| f.task_support), after)
    }

    /// `--task-after`, when this request may be answered with a task: on
    /// 2026-07-28, from a client that declares the tasks extension.
    fn task_after_for(&self, context: &RequestContext<RoleServer>) -> Option<Duration> {
        let declares = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        self.inner
            .task_after
            .filter(|_| declares && elicit::is_modern(context))
    }

    /// Runs the call in its own task; answers with its result if it ends
    /// within `after`, else with a task it goes on running in.
    async fn call_maybe_as_task(
        &self,
        name: String,
        args: Value,
        notices: call_notices::CallNotices,
        session: Option<Arc<Session>>,
        after: Duration,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let trace = CallTrace::of(context);
        let server = self.clone();
        let tool = name.clone();
        let human = notices.prompt(elicit::for_request(context));
        let listeners = notices.listeners.clone();
        let on_cancel = trace.clone();
        let mut call = tokio::spawn(async move {
            let report = server
                .invoke(&tool, args, human, listeners, session.clone(), trace)
                .await;
            server.task_end(&tool, report, session.as_deref())
        });
        let abort = call.abort_handle();
        let finished = tokio::select! {
            result = &mut call => Some(result),
            _ = tokio::time::sleep(after) => None,
            _ = context.ct.cancelled() => {
                // Aborting drops the call future: its worker is killed.
                abort.abort();
                on_cancel.cancelled();
                tracing::info!(tool = %name, id = %context.id, "call cancelled by the client");
                return CallToolResponse::Complete(cancelled());
            }
        };
        match finished {
            Some(Ok(TaskEnd::Answered(result))) => {
                notices.flushed().await;
                CallToolResponse::Complete(result)
            }
            // Not a task yet: the death is the call's tool error, as for
            // any call.
            Some(Ok(TaskEnd::Failed { message, .. })) => {
                CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(message)]))
            }
            Some(Err(e)) => {
                CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(
                    format!("Tool {name} error: WorkerDied: the call's task failed: {e}"),
                )]))
            }
            None => {
                let task = self.inner.tasks.adopt(call, None);
                tracing::info!(tool = %name, task = %task.task.task_id, "the call runs on as a task");
                CallToolResponse::Task(task)
            }
        }
    }

    /// How a call that ended becomes a task's end: its result, or — when it
    /// could not answer (its worker died) — a failed task.
    fn task_end(&self, tool: &str, report: CallReport, session: Option<&Session>) -> TaskEnd {
        match &report.result {
            Err(error) if error.kind == ErrorKind::WorkerDied => TaskEnd::Failed {
                code: ErrorCode::INTERNAL_ERROR.0,
                message: error.to_string(),
            },
            _ => TaskEnd::Answered(self.result_of(tool, report, session)),
        }
    }

    /// `running` goes on as a task: its later questions wait in the task
    /// (`input_required`) for `tasks/update`.
    fn as_task(
        &self,
        name: &str,
        running: mrtr::Running,
        session: Option<Arc<Session>>,
    ) -> CallToolResponse {
        let questions = Arc::new(task_input::Questions::default());
        let (report, mut asked) = running.into_parts();
        let (server, tool, open) = (self.clone(), name.to_string(), questions.clone());
        let call = tokio::spawn(async move {
            let forward = async move {
                while let Some(question) = asked.recv().await {
                    open.open(&question.request, question.answer);
                }
                std::future::pending::<()>().await
            };
            tokio::select! {
                report = report => match report {
                    Ok(report) => server.task_end(&tool, report, session.as_deref()),
                    Err(e) => TaskEnd::Failed {
                        code: ErrorCode::INTERNAL_ERROR.0,
                        message: format!("the call's task failed: {e}"),
                    },
                },
                _ = forward => unreachable!("the forwarding loop never ends"),
            }
        });
        let task = self.inner.tasks.adopt(call, Some(questions));
        tracing::info!(tool = %name, task = %task.task.task_id, "the call runs on as a task");
        CallToolResponse::Task(task)
    }

    /// A call on 2026-07-28 whose tool may ask a human: the first request
    /// starts it, each retry (with `requestState`) resumes it; either way it
    /// runs until it finishes or asks (see [`mrtr`]). With `as_task` (a
    /// task-supporting tool, a client that takes tasks: the tool's
    /// `mcp_task_after`) a call that has not asked within that time, and one
    /// resumed with its answer, goes on as a task (SEP-2663: round trips
    /// first, then the task).
    async fn call_in_round_trips(
        &self,
        name: String,
        args: Value,
        session: Option<Arc<Session>>,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        as_task: Option<Duration>,
    ) -> Result<CallToolResponse, McpError> {
        let trace = CallTrace::of(context);
        let binding = mrtr::binding(context.client_info().as_ref(), &name, &args);
        let mut notices = None;
        let running = match &request.request_state {
            Some(state) => match self.inner.round_trips.resume(
                state,
                &binding,
                request.input_responses.as_ref(),
            ) {
                Ok(running) => running,
                // The client did its part; the human was too late. The
                // call's end is a tool error, as it would have been had the
                // client still been waiting.
                Err(late @ mrtr::StateError::Expired { .. }) => {
                    let error = ToolError::new(
                        &name,
                        ErrorKind::Raised("HumanPromptUnavailable".into()),
                        late.to_string(),
                    );
                    return Ok(CallToolResponse::Complete(call_result(
                        Err(error),
                        None,
                        None,
                    )));
                }
                Err(refused) => return Err(McpError::invalid_params(refused.to_string(), None)),
            },
            None => {
                let server = self.clone();
                let tool = name.clone();
                let session = session.clone();
                // Its progress goes to the request that started it; the
                // client's human is asked in round trips, so no heartbeats.
                let started = call_notices::for_request(context, self.log_level());
                let listeners = started.listeners.clone();
                notices = Some(started);
                let trace = trace.clone();
                mrtr::Running::start(move |human| async move {
                    server
                        .invoke(&tool, args, human, listeners, session, trace)
                        .await
                })
            }
        };
        let until = as_task.map(|after| match request.request_state {
            Some(_) => Duration::ZERO,
            None => after,
        });
        let step = self
            .inner
            .round_trips
            .drive(running, binding, &context.ct, until)
            .await;
        Ok(match step {
            mrtr::Step::Done(report) => {
                if let Some(notices) = notices {
                    notices.flushed().await;
                }
                CallToolResponse::Complete(self.result_of(&name, report, session.as_deref()))
            }
            mrtr::Step::Asks(input) => CallToolResponse::InputRequired(input),
            mrtr::Step::Failed(error) => {
                CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(
                    format!("Tool {name} error: WorkerDied: {error}"),
                )]))
            }
            mrtr::Step::Cancelled => {
                trace.cancelled();
                tracing::info!(tool = %name, id = %context.id, "call cancelled by the client");
                CallToolResponse::Complete(cancelled())
            }
            mrtr::Step::Working(running) => self.as_task(&name, running, session),
        })
    }

    /// The answer to `tasks/get` or `tasks/cancel` for an id not (or no
    /// longer) in the table.
    fn no_task(&self, id: &str) -> McpError {
        McpError::invalid_params(
            format!(
                "no task '{id}': none was made here, or it finished more than {} s ago and was forgotten (--task-keep)",
                crate::duration_text::format_secs(self.inner.tasks.keep())
            ),
            None,
        )
    }

    /// The MCP result of a finished call: its content, and its value as
    /// `structuredContent` when the function has an output schema.
    /// The log level this MCP session's client set, if it did.
    #[allow(deprecated)]
    fn log_level(&self) -> Option<LoggingLevel> {
        self.log_level.lock().ok().and_then(|level| *level)
    }

    /// Whether `uri` names a resource the session of `context` can read: one
    /// a function serves, or one of its attachments.
    async fn check_resource(
        &self,
        uri: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if resource_functions::find(&self.inner.pool.catalog(), uri).is_some() {
            return Ok(());
        }
        let store = self.store_for(context)?;
        let uri_owned = uri.to_string();
        tokio::task::spawn_blocking(move || resources::attachment(&store, &uri_owned).map(drop))
            .await
            .map_err(|e| McpError::internal_error(format!("looking it up failed: {e}"), None))?
    }

    /// The attachment store of the session the request in `context` runs in.
    fn store_for(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<Arc<AttachmentStore>, McpError> {
        let session = self
            .session
            .session(context)
            .map_err(|e| McpError::invalid_params(e, None))?;
        Ok(match session {
            Some(session) => session.attachments().clone(),
            None => self.inner.pool.attachments().clone(),
        })
    }

    fn result_of(
        &self,
        name: &str,
        report: CallReport,
        session: Option<&Session>,
    ) -> CallToolResult {
        let structured = match (&report.result, &report.content) {
            (Ok(value), None) => self
                .function_of(name)
                .and_then(|f| f.structured_result(value)),
            _ => None,
        };
        let store = match session {
            Some(session) => session.attachments(),
            None => self.inner.pool.attachments(),
        };
        // With structuredContent the text block is the result's serialized
        // JSON (as MCP suggests), compact: a large table is not sent a
        // second time at its indented size.
        // (Built here rather than indented by `call_result` and replaced.)
        let mut result = match (&structured, &report.result) {
            (Some(_), Ok(value)) if !value.is_string() => {
                CallToolResult::success(vec![ContentBlock::text(value.to_string())])
            }
            _ => call_result(report.result, report.content.as_deref(), Some(store)),
        };
        result.structured_content = structured;
        result
    }
}

/// The refusal of a call of a tool that runs only as a task, from a client
/// that does not take tasks: -32021 (Missing Required Client Capability)
/// naming the extension, as SEP-2575 and SEP-2663 have it.
fn tasks_required(name: &str) -> McpError {
    McpError::new(
        ErrorCode(-32021),
        format!(
            "the tool '{name}' runs only as a task: the client must declare the {} extension",
            rmcp::model::TASKS_EXTENSION_ID
        ),
        Some(json!({
            "requiredCapabilities": {
                "extensions": {rmcp::model::TASKS_EXTENSION_ID: {}}
            }
        })),
    )
}

/// The answer to a cancelled call. rmcp drops it (the client gave up on the
/// request); it is a result, not an error, because rmcp logs every error
/// answer as a warning and a cancellation is no fault.
fn cancelled() -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text("the call was cancelled")])
}

/// Counts `tools/call` handlers running, so shutdown can wait until every
/// call has been answered.
#[derive(Default)]
struct CallCounter {
    running: AtomicUsize,
    idle: Notify,
}

impl CallCounter {
    fn enter(&self) -> CallGuard<'_> {
        self.running.fetch_add(1, Ordering::AcqRel);
        CallGuard(self)
    }

    fn count(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Waits until no call runs, at most `limit`; false when some still do.
    async fn wait_idle(&self, limit: Duration) -> bool {
        let wait = async {
            loop {
                let idle = self.idle.notified();
                if self.count() == 0 {
                    return;
                }
                idle.await;
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }
}

struct CallGuard<'a>(&'a CallCounter);

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
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
