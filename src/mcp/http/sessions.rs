//! Which toolpool session an HTTP request runs in (its `Toolpool-Session`
//! header or `_meta`, else its credential's), and the MCP sessions rmcp
//! keeps, as the front end counts, opens and cancels them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use http_body_util::BodyExt;
use hyper::header::AUTHORIZATION;
use hyper::{Request, Response, StatusCode};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::CancellationToken;

use super::requests::{text, Body, McpService, RequestBody};
use super::tokens::Tenant;
use crate::context::{Session, SessionsRoot};
use crate::mcp::splice::Splices;

/// The header that names a request's MCP session (whose calls a DELETE
/// cancels; it never names a toolpool session).
pub(in crate::mcp) const SESSION_HEADER: &str = "mcp-session-id";

/// The header a client names its toolpool session with (instead of its
/// credential's: to keep the files of agents sharing a token apart).
pub(in crate::mcp) const SESSION_NAME_HEADER: &str = "toolpool-session";

/// The same, as a key of a request's `_meta` (2026-07-28 clients, which may
/// send no session header at all).
pub(in crate::mcp) const SESSION_NAME_META: &str = "toolpool/session";

/// The session of a request that names none, on a server without tokens.
const ANONYMOUS: &str = "anonymous";
/// The session of a tenant's request that names none.
const DEFAULT: &str = "default";

/// Each live session's calls, by session id: cancelling the token cancels
/// them. A session's handler registers its token the first time it runs a
/// call, under the session id that call's request carries.
pub(in crate::mcp) type Registry = Mutex<HashMap<String, CancellationToken>>;

/// What one session's handler knows of its session (on stdio: nothing; its
/// token is never cancelled, its calls run in the pool's session).
#[derive(Clone, Default)]
pub(in crate::mcp) struct SessionCalls {
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
    /// Large texts of direct answers, spliced into the response's body.
    splices: Option<Splices>,
}

impl SessionCalls {
    pub(in crate::mcp) fn new(
        registry: Arc<Registry>,
        root: Arc<SessionsRoot>,
        by_credential: bool,
        splices: Splices,
    ) -> SessionCalls {
        SessionCalls {
            token: CancellationToken::new(),
            registry: Some(registry),
            root: Some(root),
            held: Arc::default(),
            by_credential,
            splices: Some(splices),
        }
    }

    /// A connection's calls (stdio's) whose large texts go out spliced.
    pub(in crate::mcp) fn with_splices(splices: Splices) -> SessionCalls {
        SessionCalls {
            splices: Some(splices),
            ..SessionCalls::default()
        }
    }

    /// A direct answer's text as it goes out: a large one stood in for,
    /// and spliced into the response's body as it is sent ([`Splices`]).
    pub(in crate::mcp) fn stand_in(&self, text: String) -> String {
        match &self.splices {
            Some(splices) => splices.stand_in(text),
            None => text,
        }
    }

    /// The toolpool session the request in `context` runs in (see
    /// [`session_name`]). `None` on stdio: the pool's session. An invalid
    /// name is an error naming what is wrong.
    pub(in crate::mcp) fn session(
        &self,
        context: &rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<Option<Arc<Session>>, String> {
        let Some(root) = &self.root else {
            return Ok(None);
        };
        let parts = context.extensions.get::<hyper::http::request::Parts>();
        let headers = parts.map(|parts| &parts.headers);
        let tenant = parts.and_then(|parts| parts.extensions.get::<Tenant>());
        let session = match tenant {
            // A tenant's names are its own: looked up among its sessions
            // only; without one, its session `default`.
            Some(tenant) => {
                let name = session_name(headers, &context.meta.0, false)?;
                let name = if name == ANONYMOUS { DEFAULT } else { &name };
                root.for_tenant(&tenant.0).and_then(|root| root.open(name))
            }
            None => {
                let name = session_name(headers, &context.meta.0, self.by_credential)?;
                root.open(&name)
            }
        }
        .map_err(|e| e.to_string())?;
        let _ = self.held.set(session.clone());
        Ok(Some(session))
    }

    /// The tenant the request in `context` authenticated as
    /// (`--auth-tokens`): the owner of the tasks and questions it starts.
    pub(in crate::mcp) fn tenant(
        &self,
        context: &rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Option<String> {
        let parts = context.extensions.get::<hyper::http::request::Parts>()?;
        parts.extensions.get::<Tenant>().map(|t| t.0.clone())
    }

    /// How the requests this handle serves arrive (a span's
    /// `network.transport`): HTTP, unless it is stdio's handle.
    pub(in crate::mcp) fn transport(&self) -> crate::mcp::calls::spans::Transport {
        match self.root {
            Some(_) => crate::mcp::calls::spans::Transport::Tcp,
            None => crate::mcp::calls::spans::Transport::Pipe,
        }
    }

    /// The MCP session (`Mcp-Session-Id`) the request in `context` belongs
    /// to, if any.
    pub(in crate::mcp) fn mcp_session_id(
        &self,
        context: &rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Option<String> {
        let parts = context.extensions.get::<hyper::http::request::Parts>()?;
        let id = parts.headers.get(SESSION_HEADER)?.to_str().ok()?;
        Some(id.to_string())
    }

    /// Resolves when the session of the request in `context` is closed by
    /// its client (HTTP DELETE).
    pub(in crate::mcp) fn closed(
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
pub(in crate::mcp) fn session_name(
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
pub(in crate::mcp) fn credential_session_name(authorization: Option<&str>) -> String {
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
        None => ANONYMOUS.to_string(),
    }
}

/// The sessions rmcp keeps, as far as the front end counts and cancels them.
pub(in crate::mcp) struct Sessions {
    pub(in crate::mcp) manager: Arc<LocalSessionManager>,
    pub(in crate::mcp) max: usize,
    /// Requests without a session id under way: each may be creating one,
    /// so they count against the cap until they are answered.
    pub(in crate::mcp) opening: Mutex<usize>,
    pub(in crate::mcp) calls: Arc<Registry>,
    /// The tenant each MCP session was opened by (with tenants): no other
    /// tenant's request reaches it.
    pub(in crate::mcp) owners: Mutex<HashMap<String, Tenant>>,
}

/// Counts one request in `Sessions::opening` while it lives.
pub(in crate::mcp) struct Opening<'a>(&'a Mutex<usize>);

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
    pub(in crate::mcp) async fn open(
        &self,
        service: &McpService,
        request: Request<RequestBody>,
    ) -> Response<Body> {
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
        if let Ok(mut owners) = self.owners.lock() {
            owners.retain(|id, _| ids.contains(id));
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
        let tenant = request.extensions().get::<Tenant>().cloned();
        let mut service = service.clone();
        let response = match tower_service::Service::call(&mut service, request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let opened = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|id| id.to_str().ok());
        if let (Some(tenant), Some(id)) = (tenant, opened) {
            if let Ok(mut owners) = self.owners.lock() {
                owners.insert(id.to_string(), tenant);
            }
        }
        response
    }

    /// Whether a request of `tenant` may use the MCP session `id`: one a
    /// tenant opened is that tenant's alone.
    pub(in crate::mcp) fn may_use(&self, id: &str, tenant: Option<&Tenant>) -> bool {
        match self.owners.lock() {
            Ok(owners) => owners.get(id).is_none_or(|owner| Some(owner) == tenant),
            Err(_) => false,
        }
    }

    /// What rmcp answers for a session it does not know, to the letter: a
    /// session of another tenant is answered so, whether it exists or not.
    pub(in crate::mcp) fn unknown() -> Response<Body> {
        let mut response = Response::new(
            http_body_util::Full::new(hyper::body::Bytes::from("Not Found: Session not found"))
                .map_err(|never| match never {})
                .boxed(),
        );
        *response.status_mut() = StatusCode::NOT_FOUND;
        response
    }

    /// Cancels every call of session `id` (their workers are killed).
    pub(in crate::mcp) fn cancel_calls(&self, id: &str) {
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

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

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
}
