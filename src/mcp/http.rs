//! MCP over streamable HTTP (`serve --http ADDR`), served with hyper.
//!
//! Every HTTP session gets a handle on the same server (one pool, one tool
//! set). The endpoint is `/mcp`. In front of rmcp's handler, each request
//! passes [`Access`]: the `Host` and `Origin` checks and, when a token is
//! set, bearer authentication (a request with two `Host` or `Origin`
//! headers, or whose absolute target names another authority than its
//! `Host`, is refused before). Connections are capped and must send their
//! header in time and their body at a least rate ([`crate::http_conn`]);
//! sessions are capped (`--max-sessions`) and end after `--session-idle`
//! without traffic; a request body may be as large as a frame (64 MiB), no
//! larger.
//!
//! DELETE of a session cancels its calls at once — running, queued or
//! waiting for an elicitation answer; their workers are killed and replaced
//! — and is answered 200, which MCP clients take as success. Sessions exist
//! only before 2026-07-28: rmcp serves a 2026-07-28 request on its own and
//! refuses a DELETE that names that version (405), which cancels nothing.
//! Multi-round-trip calls and tasks (2026-07-28 only) so never belong to a
//! session; they end by their expiry and `tasks/cancel`.
//!
//! A request runs its call in a toolpool session (a workspace, attachments
//! and packages) under `--sessions-root`: the one the client names (the
//! `Toolpool-Session` header or the `toolpool/session` key of a request's
//! `_meta`), else the one of its credential, in either protocol version —
//! a client is its credential, whatever MCP sessions it opens. Ending an
//! MCP session cancels its own calls and leaves the files to the others.
//! `GET /healthz` and `GET /readyz` are served beside `/mcp`
//! ([`crate::health`]); on SIGTERM `/readyz` turns 503 at once, new
//! sessions are refused, and the calls in flight finish within `--grace`
//! while the listener still answers; the sessions end once every answer has
//! been sent ([`http_answers`](super::http_answers)).
//!
//! rmcp 3.11 requires the `Mcp-Name` header (the task id, SEP-2663's binding
//! of SEP-2243) on `tasks/get`, `tasks/update` and `tasks/cancel`; the Python
//! `mcp` 2.3 client, which fastmcp-tasks sends them through, mirrors
//! `Mcp-Name` only for the base protocol's `tools/call`, `prompts/get` and
//! `resources/read` (the names 2026-07-28 itself requires it on). A task
//! request without the header gets it here, from its body's `taskId`, as
//! fastmcp-tasks' own server accepts it; one that carries it is left to
//! rmcp, which refuses a header that disagrees with the body.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, AUTHORIZATION, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::http_access::{authority_and_origin, Access, HttpOptions, Refusal};
use super::http_answers::AnswersInFlight;
use super::{ServeError, ToolpoolServer};
use crate::context::{Session, SessionsRoot};
use crate::http_conn::{read_body, serve_connection, BodyError, ConnectionCap};

/// The path the MCP endpoint is served at.
pub const ENDPOINT: &str = "/mcp";

/// The header that names a request's MCP session (whose calls a DELETE
/// cancels; it never names a toolpool session).
const SESSION_HEADER: &str = "mcp-session-id";

/// The header a client names its toolpool session with (instead of its
/// credential's: to keep the files of agents sharing a token apart).
pub const SESSION_NAME_HEADER: &str = "toolpool-session";

/// The same, as a key of a request's `_meta` (2026-07-28 clients, which may
/// send no session header at all).
pub const SESSION_NAME_META: &str = "toolpool/session";

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;
/// A request's body as rmcp's handler is given it: a POST's as the front end
/// read it, whole (any other's as it arrives).
type RequestBody = http_body_util::combinators::UnsyncBoxBody<Bytes, hyper::Error>;
type McpService = StreamableHttpService<ToolpoolServer, LocalSessionManager>;

/// How long a stopping server waits at least for the answers still being
/// sent, and then for the connections to flush.
const ANSWER_FLUSH: Duration = Duration::from_secs(2);

/// `PORT`, `:PORT`, `HOST:PORT` or `[IPv6]:PORT`; a bare port is on the
/// loopback address, `localhost` is 127.0.0.1.
pub fn parse_http_addr(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    let port_only = text.strip_prefix(':').unwrap_or(text);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!(
            "'{text}' is not an address: give PORT, HOST:PORT or [IPv6]:PORT"
        ));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("'{port}' in '{text}' is not a port number"))?;
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve '{host}': {e}"))?
        .next()
        .ok_or_else(|| format!("'{host}' resolves to no address"))
}

pub(super) async fn serve(
    server: ToolpoolServer,
    options: HttpOptions,
    grace: Duration,
) -> Result<(), ServeError> {
    let addr = options.addr;
    let listener = match TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(source) => {
            server.pool().shutdown_with_grace(Duration::ZERO).await;
            return Err(ServeError::Bind { addr, source });
        }
    };
    let local = listener.local_addr().unwrap_or(addr);
    // By default beside the pool's own session (`.toolpool/sessions/default`).
    let own = server.pool().session().dir.clone();
    let root_dir = match &options.sessions_root {
        Some(dir) => dir.clone(),
        None => own
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| own.clone()),
    };
    let root = match SessionsRoot::new(&root_dir, options.keep_sessions, &[&own]) {
        Ok(root) => Arc::new(root),
        Err(e) => {
            server.pool().shutdown_with_grace(Duration::ZERO).await;
            return Err(ServeError::Sessions(e));
        }
    };
    let sweeper = tokio_util::task::AbortOnDropHandle::new(root.sweep_periodically());
    let sessions_ct = CancellationToken::new();
    // Host and Origin are checked by `Access`, before rmcp sees a request.
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(sessions_ct.clone())
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(crate::protocol::DEFAULT_MAX_FRAME);
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(options.session_idle);
    let manager = Arc::new(manager);
    let sessions = Arc::new(Sessions {
        manager: manager.clone(),
        max: options.max_sessions,
        opening: Mutex::new(0),
        calls: Arc::default(),
    });
    let registry = sessions.calls.clone();
    let by_credential = options.access.requires_token();
    let handler = server.clone();
    let handler_root = root.clone();
    // rmcp makes one handler for each new session.
    let service = StreamableHttpService::new(
        move || {
            Ok(handler.for_session(SessionCalls::new(
                registry.clone(),
                handler_root.clone(),
                by_credential,
            )))
        },
        manager,
        config,
    );
    if options.session_idle < server.pool().default_timeout() {
        tracing::warn!(
            "--session-idle {} s is shorter than the tools' timeout: a session whose only call runs longer ends, and the call is cancelled",
            options.session_idle.as_secs_f64()
        );
    }
    let answers = AnswersInFlight::new();
    let front = Arc::new(Front {
        service,
        access: options.access,
        sessions,
        pool: server.pool().clone(),
        bodies: Arc::new(tokio::sync::Semaphore::new(BODIES_IN_FLIGHT / 1024)),
        answers: answers.clone(),
    });
    let cap = ConnectionCap::new(options.max_connections, "--max-connections");
    if !local.ip().is_loopback() {
        tracing::warn!(
            "serving MCP on {local}, which is not a loopback address{}",
            if front.access.requires_token() {
                ""
            } else {
                " and without a token (--no-auth): anyone who can reach it can call the tools"
            }
        );
    }
    let requests = server.inner.stop.clone();
    let stop = requests.first();
    tokio::pin!(stop);
    // Tests and scripts that ask for port 0 learn the port from this line.
    eprintln!("toolpool: serving MCP (streamable HTTP) at http://{local}{ENDPOINT}");
    tracing::info!(%local, sessions_root = %root.root().display(), "serving MCP over streamable HTTP");

    // After the stop signal: the shutdown, run while the listener goes on
    // answering (readyz 503, the sessions' own requests, new ones refused).
    let mut draining: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>> =
        None;
    let mut drain_started = None;
    // Tells the connections to close once their response is sent.
    let closing = CancellationToken::new();
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, go on.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Some(permit) = cap.try_permit() else {
                    cap.refuse(stream);
                    continue;
                };
                let front = front.clone();
                let closing = closing.clone().cancelled_owned();
                connections.spawn(async move {
                    let _permit = permit;
                    let route = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let front = front.clone();
                        async move { Ok::<_, Infallible>(front.handle(request).await) }
                    });
                    if let Err(e) = serve_connection(stream, route, closing).await {
                        tracing::debug!(%peer, "HTTP connection ended: {e}");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = &mut stop, if draining.is_none() => {
                server.pool().drain();
                tracing::info!("draining: /readyz answers 503, new sessions are refused");
                drain_started = Some(tokio::time::Instant::now());
                draining = Some(Box::pin(server.shut_down(grace)));
            }
            _ = async {
                match draining.as_mut() {
                    Some(drain) => drain.await,
                    None => std::future::pending().await,
                }
            }, if draining.is_some() => break,
        }
    }
    drop(listener);
    drop(sweeper);
    // Every call has been answered to rmcp; the answers may still be on
    // their way to the clients (in a session's worker, in an SSE stream's
    // buffer, in a socket a client reads slowly). Each is sent before the
    // sessions end, within the rest of the grace (at least ANSWER_FLUSH).
    // A second stop request ends the wait.
    closing.cancel();
    let spent = drain_started.map_or(Duration::ZERO, |started| started.elapsed());
    let sent = tokio::select! {
        sent = answers.wait_none(grace.saturating_sub(spent).max(ANSWER_FLUSH)) => sent,
        () = requests.again() => answers.count() == 0,
    };
    if !sent {
        tracing::warn!(
            unsent = answers.count(),
            "answers still unsent at the end of the grace period: their connections are closed"
        );
    }
    // Ends every session (and so the SSE streams of their GETs); give the
    // connections a moment to flush what they were sending.
    sessions_ct.cancel();
    let flushed = tokio::time::timeout(ANSWER_FLUSH, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if flushed.is_err() {
        connections.abort_all();
    }
    Ok(())
}

/// What stands in front of rmcp's handler.
struct Front {
    service: McpService,
    access: Access,
    sessions: Arc<Sessions>,
    pool: crate::pool::Pool,
    /// Request bodies held at once, in KiB (see [`BODIES_IN_FLIGHT`]).
    bodies: Arc<tokio::sync::Semaphore>,
    /// POST responses (answers) not yet sent.
    answers: AnswersInFlight,
}

use super::BODIES_IN_FLIGHT;

impl Front {
    async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let header = |name: &str| {
            request
                .headers()
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
        };
        // Before the access checks: probes send no token, and the answer
        // tells nothing but the state.
        if let Some((status, body)) =
            crate::health::respond(request.method(), request.uri().path(), &self.pool)
        {
            return text(status, body);
        }
        let (host, origin) = match authority_and_origin(&request) {
            Ok(found) => found,
            Err(why) => return refused(Refusal::Forbidden(why)),
        };
        if let Err(refusal) = self
            .access
            .check(host, origin, header(AUTHORIZATION.as_str()))
        {
            return refused(refusal);
        }
        if request.uri().path() != ENDPOINT {
            return text(
                StatusCode::NOT_FOUND,
                format!("not found: the MCP endpoint is {ENDPOINT}\n"),
            );
        }
        let session = header(SESSION_HEADER).map(str::to_string);
        let (request, _held) = match read_request(request, &self.bodies).await {
            Ok(read) => read,
            Err(response) => return response,
        };
        let post = request.method() == Method::POST;
        let response = self.route(request, session).await;
        if !post {
            return response;
        }
        let (parts, body) = response.into_parts();
        Response::from_parts(parts, BodyExt::boxed(self.answers.track(body)))
    }

    async fn route(
        &self,
        request: Request<RequestBody>,
        session: Option<String>,
    ) -> Response<Body> {
        match (request.method(), session) {
            (&Method::POST, None) if self.pool.is_draining() => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "draining: this server is shutting down and takes no new sessions; \
                 open the session on another replica\n"
                    .into(),
            ),
            (&Method::POST, None) => self.sessions.open(&self.service, request).await,
            (&Method::DELETE, Some(id)) => {
                let mut response = self.call(request).await;
                // Only a DELETE rmcp accepted ended the session (one that
                // names 2026-07-28, which has no sessions, is refused).
                if response.status().is_success() {
                    self.sessions.cancel_calls(&id);
                }
                // rmcp answers 202; clients expect 200 or 204 from a DELETE.
                if response.status() == StatusCode::ACCEPTED {
                    *response.status_mut() = StatusCode::OK;
                }
                response
            }
            _ => self.call(request).await,
        }
    }

    async fn call(&self, request: Request<RequestBody>) -> Response<Body> {
        let mut service = self.service.clone();
        match tower_service::Service::call(&mut service, request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

/// Each live session's calls, by session id: cancelling the token cancels
/// them. A session's handler registers its token the first time it runs a
/// call, under the session id that call's request carries.
type Registry = Mutex<HashMap<String, CancellationToken>>;

/// What one session's handler knows of its session (on stdio: nothing; its
/// token is never cancelled, its calls run in the pool's session).
#[derive(Clone, Default)]
pub(super) struct SessionCalls {
    token: CancellationToken,
    registry: Option<Arc<Registry>>,
    /// Where toolpool sessions live (HTTP only).
    root: Option<Arc<SessionsRoot>>,
    /// The toolpool session of this MCP session's first call, held while
    /// the MCP session lives: the sweep keeps a session a handle holds, and
    /// so ending one MCP session (DELETE, idle) never sweeps the session
    /// another one (of the same credential, say) still works in.
    held: Arc<OnceLock<Arc<Session>>>,
    /// Whether the server checks tokens, so that a request's credential
    /// names its session (else every such request is `anonymous`).
    by_credential: bool,
}

impl SessionCalls {
    fn new(registry: Arc<Registry>, root: Arc<SessionsRoot>, by_credential: bool) -> SessionCalls {
        SessionCalls {
            token: CancellationToken::new(),
            registry: Some(registry),
            root: Some(root),
            held: Arc::default(),
            by_credential,
        }
    }

    /// The toolpool session the request in `context` runs in (see
    /// [`session_name`]). `None` on stdio: the pool's session. An invalid
    /// name is an error naming what is wrong.
    pub(super) fn session(
        &self,
        context: &rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<Option<Arc<Session>>, String> {
        let Some(root) = &self.root else {
            return Ok(None);
        };
        let headers = context
            .extensions
            .get::<hyper::http::request::Parts>()
            .map(|parts| &parts.headers);
        let name = session_name(headers, &context.meta.0, self.by_credential)?;
        let session = root.open(&name).map_err(|e| e.to_string())?;
        let _ = self.held.set(session.clone());
        Ok(Some(session))
    }

    /// How the requests this handle serves arrive (a span's
    /// `network.transport`): HTTP, unless it is stdio's handle.
    pub(super) fn transport(&self) -> super::tracing_spans::Transport {
        match self.root {
            Some(_) => super::tracing_spans::Transport::Tcp,
            None => super::tracing_spans::Transport::Pipe,
        }
    }

    /// The MCP session (`Mcp-Session-Id`) the request in `context` belongs
    /// to, if any.
    pub(super) fn mcp_session_id(
        &self,
        context: &rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Option<String> {
        let parts = context.extensions.get::<hyper::http::request::Parts>()?;
        let id = parts.headers.get(SESSION_HEADER)?.to_str().ok()?;
        Some(id.to_string())
    }

    /// Resolves when the session of the request in `context` is closed by
    /// its client (HTTP DELETE).
    pub(super) fn closed(
        &self,
        context: &rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> tokio_util::sync::WaitForCancellationFutureOwned {
        let id = context
            .extensions
            .get::<hyper::http::request::Parts>()
            .and_then(|parts| parts.headers.get(SESSION_HEADER))
            .and_then(|v| v.to_str().ok());
        if let (Some(registry), Some(id)) = (&self.registry, id) {
            if let Ok(mut calls) = registry.lock() {
                calls
                    .entry(id.to_string())
                    .or_insert_with(|| self.token.clone());
            }
        }
        self.token.clone().cancelled_owned()
    }
}

/// The name of the toolpool session a request runs in: the name the client
/// gives (the `Toolpool-Session` header, then the `toolpool/session` key of
/// `_meta`), else the session of its credential ([`credential_session_name`])
/// — whether or not the request belongs to an MCP session, so that a client
/// that opens an MCP session per call (langchain-mcp-adapters, Google ADK)
/// finds its files in the next. An MCP session's id never names one.
fn session_name(
    headers: Option<&hyper::HeaderMap>,
    meta: &serde_json::Map<String, serde_json::Value>,
    by_credential: bool,
) -> Result<String, String> {
    let header = |name: &str| headers.and_then(|h| h.get(name));
    if let Some(value) = header(SESSION_NAME_HEADER) {
        let name = value
            .to_str()
            .map_err(|_| "the Toolpool-Session header must be ASCII text".to_string())?;
        return Ok(name.to_string());
    }
    match meta.get(SESSION_NAME_META) {
        Some(serde_json::Value::String(name)) => Ok(name.clone()),
        Some(other) => Err(format!(
            "_meta \"{SESSION_NAME_META}\" must be a string (a session name), got {other}"
        )),
        None => {
            // Without tokens a credential is not checked: whatever a
            // client sends there names nothing.
            let authorization = header(AUTHORIZATION.as_str())
                .filter(|_| by_credential)
                .and_then(|v| v.to_str().ok());
            Ok(credential_session_name(authorization))
        }
    }
}

/// The session of a request that names none: keyed by the credential it
/// authenticated with (`client-` and the first 16 hex digits of the SHA-256
/// of its `Authorization` header's credential — the scheme's spelling and
/// surrounding spaces aside, so `Bearer x` and `bearer x` are one client),
/// so that a client's files survive between
/// its calls and its MCP sessions, and clients with different credentials
/// never share; on a server without tokens (one user), the one session
/// `anonymous` (not `default`: the pool's own session directory may hold
/// that name under the sessions root).
fn credential_session_name(authorization: Option<&str>) -> String {
    use sha2::Digest;
    match authorization {
        Some(header) => {
            let header = header.trim();
            let credential = match header.split_once(' ') {
                Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
                _ => header,
            };
            let digest = sha2::Sha256::digest(credential.as_bytes());
            let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            format!("client-{hex}")
        }
        None => "anonymous".to_string(),
    }
}

/// The sessions rmcp keeps, as far as the front end counts and cancels them.
struct Sessions {
    manager: Arc<LocalSessionManager>,
    max: usize,
    /// Requests without a session id under way: each may be creating one,
    /// so they count against the cap until they are answered.
    opening: Mutex<usize>,
    calls: Arc<Registry>,
}

/// Counts one request in `Sessions::opening` while it lives.
struct Opening<'a>(&'a Mutex<usize>);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        if let Ok(mut opening) = self.0.lock() {
            *opening = opening.saturating_sub(1);
        }
    }
}

impl Sessions {
    /// A POST without a session id (an `initialize`, which opens a session):
    /// served when there is room for one more session.
    async fn open(&self, service: &McpService, request: Request<RequestBody>) -> Response<Body> {
        let (live, ids): (usize, Vec<String>) = {
            let sessions = self.manager.sessions.read().await;
            (
                sessions.len(),
                sessions.keys().map(|id| id.to_string()).collect(),
            )
        };
        if let Ok(mut calls) = self.calls.lock() {
            // Sessions that ended by themselves (idle, closed) go.
            calls.retain(|id, _| ids.contains(id));
        }
        let admitted = match self.opening.lock() {
            Ok(mut opening) if live + *opening < self.max => {
                *opening += 1;
                Some(Opening(&self.opening))
            }
            _ => None,
        };
        let Some(_opening) = admitted else {
            tracing::warn!(live, "refused a new session: the cap is reached");
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "too many sessions: this server keeps at most {} open at once (--max-sessions); \
                     close one (DELETE) or wait until one has been idle long enough to end (--session-idle)\n",
                    self.max
                ),
            );
        };
        let mut service = service.clone();
        match tower_service::Service::call(&mut service, request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }

    /// Cancels every call of session `id` (their workers are killed).
    fn cancel_calls(&self, id: &str) {
        let token = self
            .calls
            .lock()
            .ok()
            .and_then(|mut calls| calls.remove(id));
        if let Some(token) = token {
            tracing::info!(session = %id, "session closed by the client: cancelling its calls");
            token.cancel();
        }
    }
}

/// The methods whose `Mcp-Name` rmcp takes from `params.taskId`.
const TASK_METHODS: [&str; 3] = ["tasks/get", "tasks/update", "tasks/cancel"];

/// `request` with its body read whole, if it is a POST: within the frame
/// limit and the least rate of [`crate::http_conn::read_body`] (a client
/// that trickles a body is cut off, as one that trickles a header is), and
/// within `bodies`, the budget of bodies held at once, whose share it holds
/// until dropped; a JSON text of more than `MAX_VALUES` values is refused.
/// A task method's POST (by its `Mcp-Method` header) without an `Mcp-Name`
/// gets one from its body's `params.taskId` (see the module's
/// documentation). Other requests are passed on unread.
async fn read_request(
    request: Request<Incoming>,
    bodies: &Arc<tokio::sync::Semaphore>,
) -> Result<
    (
        Request<RequestBody>,
        Option<tokio::sync::OwnedSemaphorePermit>,
    ),
    Response<Body>,
> {
    if request.method() != Method::POST {
        return Ok((request.map(BodyExt::boxed_unsync), None));
    }
    let names_task = request
        .headers()
        .get("mcp-method")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|method| TASK_METHODS.contains(&method))
        && !request.headers().contains_key("mcp-name");
    let expected = request
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let busy = || {
        tracing::warn!("refused a request: the bodies in flight are at the budget");
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "too many request bodies in flight: this server holds at most {} MiB of them at once; retry\n",
                BODIES_IN_FLIGHT >> 20
            ),
        )
    };
    let held = |bytes: u64| {
        let kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .max(1);
        bodies.clone().try_acquire_many_owned(kib).ok()
    };
    // Known ahead: held before the body is read. Else (chunked): once read.
    let mut permit = match expected {
        Some(length) if length <= crate::protocol::DEFAULT_MAX_FRAME as u64 => {
            Some(held(length).ok_or_else(busy)?)
        }
        _ => None,
    };
    let (mut parts, body) = request.into_parts();
    let bytes = match read_body(body, crate::protocol::DEFAULT_MAX_FRAME, expected).await {
        Ok(bytes) => bytes,
        Err(error) => {
            let status = match error {
                BodyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
                BodyError::TooSlow { .. } => StatusCode::REQUEST_TIMEOUT,
                BodyError::Broken(_) => StatusCode::BAD_REQUEST,
            };
            tracing::info!("refused a request: {error}");
            return Err(text(status, format!("{error}\n")));
        }
    };
    if permit.is_none() {
        permit = Some(held(bytes.len() as u64).ok_or_else(busy)?);
    }
    let values = crate::protocol::count_values(&bytes);
    if values > crate::protocol::MAX_VALUES {
        tracing::info!(values, "refused a request holding too many JSON values");
        return Err(text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("{}\n", crate::protocol::json_values::too_many(values)),
        ));
    }
    if names_task {
        if let Some(value) = task_name(&bytes) {
            parts.headers.insert("mcp-name", value);
        }
    }
    let body = Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync();
    Ok((Request::from_parts(parts, body), permit))
}

/// The `Mcp-Name` a task request's body names (`params.taskId`), when it
/// is a header as it is (a task id this server made is hex); any other is
/// left for rmcp to refuse as a missing header.
fn task_name(body: &[u8]) -> Option<HeaderValue> {
    let message = serde_json::from_slice::<serde_json::Value>(body).ok()?;
    let id = message.pointer("/params/taskId")?.as_str()?;
    let plain = !id.starts_with("=?base64?")
        && id.trim() == id
        && id.bytes().all(|b| (0x20..0x7f).contains(&b));
    plain.then(|| HeaderValue::from_str(id).ok()).flatten()
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn refused(refusal: Refusal) -> Response<Body> {
    match refusal {
        Refusal::Forbidden(message) => {
            tracing::warn!("refused a request: {message}");
            text(StatusCode::FORBIDDEN, format!("forbidden: {message}\n"))
        }
        Refusal::Unauthorized { message, invalid } => {
            tracing::info!("refused a request: {message}");
            let mut response = text(
                StatusCode::UNAUTHORIZED,
                format!("unauthorized: {message}\n"),
            );
            let challenge = if invalid {
                r#"Bearer realm="toolpool", error="invalid_token""#
            } else {
                r#"Bearer realm="toolpool""#
            };
            response
                .headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The session a request with `headers` (name, value) and `meta` runs in.
    fn name_of(headers: &[(&str, &str)], meta: serde_json::Value) -> Result<String, String> {
        let mut map = hyper::HeaderMap::new();
        for (name, value) in headers {
            map.append(
                hyper::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let serde_json::Value::Object(meta) = meta else {
            panic!("meta must be an object");
        };
        session_name(Some(&map), &meta, true)
    }

    #[test]
    fn a_client_is_kept_in_the_session_of_its_credential() {
        let alice = credential_session_name(Some("Bearer alice-token-0123456789"));
        let bob = credential_session_name(Some("Bearer bob-token-0123456789ab"));
        assert_ne!(alice, bob);
        assert_eq!(
            alice,
            credential_session_name(Some("Bearer alice-token-0123456789"))
        );
        // The scheme's spelling does not make another client.
        assert_eq!(
            alice,
            credential_session_name(Some(" bearer  alice-token-0123456789 "))
        );
        assert!(alice.starts_with("client-") && alice.len() == "client-".len() + 16);
        assert_eq!(crate::context::sessions::check_session_name(&alice), Ok(()));
        assert_eq!(credential_session_name(None), "anonymous");
    }

    #[test]
    fn mcp_sessions_of_one_credential_share_its_session_and_names_come_first() {
        let token = ("authorization", "Bearer alice-token-0123456789");
        let alice = credential_session_name(Some(token.1));
        let none = serde_json::json!({});
        // Two MCP sessions (2025-11-25) and a stateless request (2026-07-28)
        // of one credential: one session. The MCP session's id names none.
        for id in [Some("0123abcd"), Some("4567ef01"), None] {
            let headers: Vec<_> = id.map(|id| (SESSION_HEADER, id)).into_iter().collect();
            assert_eq!(
                name_of(&[&headers[..], &[token]].concat(), none.clone()),
                Ok(alice.clone())
            );
            assert_eq!(name_of(&headers, none.clone()), Ok("anonymous".into()));
        }
        // A name, from the header before `_meta`, whatever the credential.
        let meta = serde_json::json!({ SESSION_NAME_META: "from-meta" });
        assert_eq!(name_of(&[token], meta.clone()), Ok("from-meta".into()));
        assert_eq!(
            name_of(&[token, (SESSION_NAME_HEADER, "from-header")], meta),
            Ok("from-header".into())
        );
        let refused = name_of(&[token], serde_json::json!({ SESSION_NAME_META: 7 }));
        assert!(refused.is_err_and(|e| e.contains("must be a string")));
    }

    #[test]
    fn on_a_server_without_tokens_a_credential_names_no_session() {
        let mut headers = hyper::HeaderMap::new();
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_static("Bearer for-a-proxy-0123456789"),
        );
        let meta = serde_json::Map::new();
        assert_eq!(
            session_name(Some(&headers), &meta, false),
            Ok("anonymous".into())
        );
        assert!(session_name(Some(&headers), &meta, true).is_ok_and(|n| n.starts_with("client-")));
    }

    #[test]
    fn the_credential_session_is_not_the_pools_own_under_the_default_layout() {
        // `serve --http` with no options: the pool's session is
        // `.toolpool/sessions/default` and the sessions root its parent.
        let dir = tempfile::tempdir().unwrap();
        let own = dir.path().join("default");
        crate::context::SessionPaths::prepare("default", Some(&own)).unwrap();
        let root = crate::context::SessionsRoot::new(
            dir.path(),
            crate::context::sessions::DEFAULT_KEEP,
            &[&own],
        )
        .unwrap();
        let session = root.open(&credential_session_name(None));
        assert!(
            session.is_ok(),
            "{:?}",
            session.err().map(|e| e.to_string())
        );
    }

    #[test]
    fn addresses_default_to_loopback() {
        let loopback = |port| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        assert_eq!(parse_http_addr("8080"), Ok(loopback(8080)));
        assert_eq!(parse_http_addr(":8080"), Ok(loopback(8080)));
        assert_eq!(parse_http_addr("localhost:0"), Ok(loopback(0)));
        assert_eq!(
            parse_http_addr("0.0.0.0:9000"),
            Ok("0.0.0.0:9000".parse().unwrap())
        );
        assert_eq!(
            parse_http_addr("[::1]:9000"),
            Ok("[::1]:9000".parse().unwrap())
        );
        assert!(parse_http_addr("nonsense").is_err());
        assert!(parse_http_addr("host:port").is_err());
    }
}
