//! MCP over streamable HTTP (`serve --http ADDR`), served with hyper.
//!
//! Every HTTP session gets a handle on the same server (one pool, one tool
//! set). The endpoint is `/mcp`. In front of rmcp's handler, each request
//! passes [`Access`]: the `Host` and `Origin` checks and, when a token is
//! set, bearer authentication (a request with two `Host` or `Origin`
//! headers, or whose absolute target names another authority than its
//! `Host`, is refused before). Connections are capped and must send their
//! header in time and their body at a least rate ([`crate::http::conn`]);
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
//! ([`crate::http::health`]); on SIGTERM `/readyz` turns 503 at once, new
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

pub(super) mod access;
mod answers;
mod forward;
mod gateway;
mod jwt;
pub(super) mod options;
mod protected_resource;
mod requests;
mod sessions;
mod tenant_limits;
mod tokens;

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Method, Request, Response, StatusCode};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::replicas::Replica;
use super::splice::{Spliced, Splices};
use super::{ServeError, ToolpoolServer};
use crate::context::SessionsRoot;
use crate::http::conn::{serve_connection, ConnectionCap};
use access::{authority_and_origin, Access, Refusal};
use answers::AnswersInFlight;
use options::HttpOptions;
use protected_resource::refused;
use requests::{read_request, text};
pub(super) use requests::{Body, McpService, RequestBody};
pub(super) use sessions::SessionCalls;
use sessions::Sessions;
use sessions::SESSION_HEADER;
use tenant_limits::{Over, TenantLimits};
use tokens::Tenant;

/// The path the MCP endpoint is served at.
pub(super) const ENDPOINT: &str = "/mcp";

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

/// Where the HTTP sessions' folders live: by default beside the pool's own
/// session (`.toolpool/sessions/default`).
fn sessions_root(
    server: &ToolpoolServer,
    options: &HttpOptions,
) -> Result<SessionsRoot, crate::pool_error::PoolError> {
    let own = server.pool().session().dir.clone();
    let root_dir = match &options.sessions_root {
        Some(dir) => dir.clone(),
        None => own
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| own.clone()),
    };
    SessionsRoot::new(&root_dir, options.keep_sessions, &[&own])
}

fn warn_public(local: SocketAddr, requires_token: bool) {
    tracing::warn!(
        "serving MCP on {local}, which is not a loopback address{}",
        if requires_token {
            ""
        } else {
            " and without a token (--no-auth): anyone who can reach it can call the tools"
        }
    );
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
    let root = match sessions_root(&server, &options) {
        Ok(root) => Arc::new(root),
        Err(e) => {
            server.pool().shutdown_with_grace(Duration::ZERO).await;
            return Err(ServeError::Sessions(e));
        }
    };
    let sweeper = tokio_util::task::AbortOnDropHandle::new(root.sweep_periodically());
    let _reloads = options.access.tenant_tokens().map(|tokens| {
        tokio_util::task::AbortOnDropHandle::new(tokio::spawn(tokens::reload_on_hangup(
            tokens.clone(),
        )))
    });
    if let Some(check) = options.access.jwt() {
        // A URL's key set, fetched now rather than at the first token.
        let check = check.clone();
        tokio::spawn(async move { check.refresh().await });
    }
    let sessions_ct = CancellationToken::new();
    let answers = AnswersInFlight::new();
    let front = make_front(&server, options.clone(), &root, &sessions_ct, &answers);
    let cap = ConnectionCap::new(options.max_connections, "--max-connections");
    if !local.ip().is_loopback() {
        warn_public(local, front.access.requires_token());
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
                connections.spawn(connection(stream, peer, permit, front.clone(), closing.clone()));
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
    let spent = drain_started.map_or(Duration::ZERO, |started| started.elapsed());
    let unsent = Unsent {
        answers,
        requests: requests.clone(),
        sessions_ct,
    };
    unsent
        .flush(closing, connections, grace.saturating_sub(spent))
        .await;
    Ok(())
}

/// Serves one accepted connection, holding its place under
/// `--max-connections`, until it ends or `closing` has it close once its
/// response is sent.
async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    _permit: tokio::sync::OwnedSemaphorePermit,
    front: Arc<Front>,
    closing: CancellationToken,
) {
    let route = hyper::service::service_fn(move |request: Request<Incoming>| {
        let front = front.clone();
        async move { Ok::<_, Infallible>(front.handle(request, peer.ip()).await) }
    });
    if let Err(e) = serve_connection(stream, route, closing.cancelled_owned()).await {
        tracing::debug!(%peer, "HTTP connection ended: {e}");
    }
}

/// What a stopped server still owes its clients.
struct Unsent {
    answers: AnswersInFlight,
    requests: crate::stop::StopRequests,
    sessions_ct: CancellationToken,
}

impl Unsent {
    /// Every call has been answered to rmcp; the answers may still be on
    /// their way to the clients (in a session's worker, in an SSE
    /// stream's buffer, in a socket a client reads slowly). Each is sent
    /// before the sessions end, within `left` of the grace (at least
    /// [`ANSWER_FLUSH`]); a second stop request ends the wait.
    async fn flush(self, closing: CancellationToken, mut connections: JoinSet<()>, left: Duration) {
        // Every call has been answered to rmcp; the answers may still be on
        // their way to the clients (in a session's worker, in an SSE stream's
        // buffer, in a socket a client reads slowly). Each is sent before the
        // sessions end, within the rest of the grace (at least ANSWER_FLUSH).
        // A second stop request ends the wait.
        closing.cancel();
        let sent = tokio::select! {
            sent = self.answers.wait_none(left.max(ANSWER_FLUSH)) => sent,
            () = self.requests.again() => self.answers.count() == 0,
        };
        if !sent {
            tracing::warn!(
                unsent = self.answers.count(),
                "answers still unsent at the end of the grace period: their connections are closed"
            );
        }
        // Ends every session (and so the SSE streams of their GETs); give the
        // connections a moment to flush what they were sending.
        self.sessions_ct.cancel();
        let flushed = tokio::time::timeout(ANSWER_FLUSH, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if flushed.is_err() {
            connections.abort_all();
        }
    }
}

/// The front end in front of rmcp: its session manager (each session's
/// handler kept in `root`'s sessions), the access checks of `options`, and
/// the answers still being sent.
fn make_front(
    server: &ToolpoolServer,
    options: HttpOptions,
    root: &Arc<SessionsRoot>,
    sessions_ct: &CancellationToken,
    answers: &AnswersInFlight,
) -> Arc<Front> {
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
        owners: Mutex::default(),
    });
    let registry = sessions.calls.clone();
    let by_credential = options.access.requires_token();
    let splices = Splices::replayable();
    let handler_splices = splices.clone();
    let handler = server.clone();
    let handler_root = root.clone();
    // rmcp makes one handler for each new session.
    let service = StreamableHttpService::new(
        move || {
            Ok(handler.for_session(SessionCalls::new(
                registry.clone(),
                handler_root.clone(),
                by_credential,
                handler_splices.clone(),
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
    Arc::new(Front {
        service,
        access: options.access,
        sessions,
        pool: server.pool().clone(),
        bodies: Arc::new(tokio::sync::Semaphore::new(BODIES_IN_FLIGHT / 1024)),
        answers: answers.clone(),
        tenant_limits: options.tenant_limits.clone(),
        replica: server.inner.replica.clone(),
        peers: forward::peer_client(),
        splices,
    })
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
    /// `--tenant-max-calls`, `--tenant-calls-per-second`.
    tenant_limits: Option<Arc<TenantLimits>>,
    /// This replica, when several serve behind one balancer, and the client
    /// it forwards with.
    replica: Option<Arc<Replica>>,
    peers: forward::PeerClient,
    /// Large texts of answers, spliced into the bodies as they are sent.
    splices: Splices,
}

/// The tenant the access check put in `request`'s extensions.
fn tenant_of<B>(request: &Request<B>) -> Option<&Tenant> {
    request.extensions().get::<Tenant>()
}

/// 429 for a tenant's call past its limits, with when to come back.
fn too_many(tenant: &str, over: &Over) -> Response<Body> {
    tracing::info!(tenant, "refused a call: {over}");
    let mut response = text(StatusCode::TOO_MANY_REQUESTS, format!("{over}\n"));
    response.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        HeaderValue::from(over.retry_after_secs()),
    );
    response
}

use super::BODIES_IN_FLIGHT;

impl Front {
    async fn handle(&self, request: Request<Incoming>, peer: IpAddr) -> Response<Body> {
        let header = |name: &str| {
            request
                .headers()
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
        };
        // Before the access checks: probes send no token, and the answer
        // tells nothing but the state.
        if let Some((status, body)) =
            crate::http::health::respond(request.method(), request.uri().path(), &self.pool)
        {
            return text(status, body);
        }
        let (host, origin) = match authority_and_origin(&request) {
            Ok(found) => found,
            Err(why) => return refused(Refusal::Forbidden(why), None),
        };
        let jwt = self.access.jwt().map(|check| (check, host));
        if let Some((check, host)) = jwt {
            // The protected resource's metadata needs no token.
            if protected_resource::is_metadata_path(request.uri().path()) {
                return match self.access.check_host_and_origin((host, origin)) {
                    Ok(()) => protected_resource::metadata(check, host),
                    Err(refusal) => refused(refusal, jwt),
                };
            }
        }
        let mut checked = self.access.check((host, origin), Some(peer), &header);
        if let (Err(Refusal::UnknownKey(_)), Some((check, _))) = (&checked, jwt) {
            // A key the issuer added since the set was read.
            check.refresh().await;
            checked = self.access.check((host, origin), Some(peer), &header);
        }
        let tenant = match checked {
            Ok(tenant) => tenant,
            Err(refusal) => return refused(refusal, jwt),
        };
        if request.uri().path() != ENDPOINT {
            return text(
                StatusCode::NOT_FOUND,
                format!("not found: the MCP endpoint is {ENDPOINT}\n"),
            );
        }
        let session = header(SESSION_HEADER).map(str::to_string);
        let mut request = request;
        if let Some(tenant) = tenant {
            // Where the handler finds it (with the request's parts).
            request.extensions_mut().insert(tenant);
        }
        let counts_calls = self.tenant_limits.is_some();
        let read =
            match read_request(request, &self.bodies, counts_calls, self.replica.is_some()).await {
                Ok(read) => read,
                Err(response) => return response,
            };
        let (mut request, _held) = (read.request, read.held);
        let mut session = session;
        if let Some(replica) = &self.replica {
            // Another replica's state: forwarded there, or lost.
            let body = read.body.unwrap_or_default();
            let bound = read.bound.as_ref();
            request = match forward::route(replica, &self.peers, request, body, bound, &mut session)
                .await
            {
                Ok(request) => request,
                Err(response) => return response,
            };
        }
        // A tenant's call within its limits holds its place until its
        // answer is sent.
        let permit = match (&self.tenant_limits, tenant_of(&request), read.is_call) {
            (Some(limits), Some(tenant), true) => {
                match limits.admit(&tenant.0, std::time::Instant::now()) {
                    Ok(permit) => Some(permit),
                    Err(over) => return too_many(&tenant.0, &over),
                }
            }
            _ => None,
        };
        let post = request.method() == Method::POST;
        let response = self.route(request, session).await;
        let (parts, body) = response.into_parts();
        // A POST's answer, or the events a GET stream replays.
        let body = BodyExt::boxed(Spliced::new(body, self.splices.clone()));
        if !post {
            return Response::from_parts(parts, body);
        }
        Response::from_parts(
            parts,
            BodyExt::boxed(self.answers.track_holding(body, permit)),
        )
    }

    async fn route(
        &self,
        request: Request<RequestBody>,
        session: Option<String>,
    ) -> Response<Body> {
        if let Some(id) = &session {
            if !self.sessions.may_use(id, tenant_of(&request)) {
                return Sessions::unknown();
            }
        }
        match (request.method(), session) {
            (&Method::POST, None) if self.pool.is_draining() => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "draining: this server is shutting down and takes no new sessions; \
                 open the session on another replica\n"
                    .into(),
            ),
            (&Method::POST, None) => {
                let response = self.sessions.open(&self.service, request).await;
                match &self.replica {
                    Some(replica) => forward::tag_session(replica, response),
                    None => response,
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

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
