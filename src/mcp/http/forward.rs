//! A request for state another replica holds, forwarded there
//! ([`crate::mcp::replicas`]): the balancer in front may send any request
//! anywhere (round-robin), and the replica that gets one naming another's
//! task, question or MCP session (whose `Mcp-Session-Id` is tagged too: its
//! subscriptions and its stream live there) passes it on, headers and body
//! as they came, and streams the answer back. The client never routes.
//!
//! A forwarded request carries [`FORWARDED_HEADER`]; a replica never
//! forwards such a request again, so two replicas that disagree on who
//! holds an id cannot pass it around. When the replica that held the state
//! does not answer, or answers as another instance (it restarted), the
//! client gets a JSON-RPC error naming the task or question lost, which it
//! can act on: call the tool again.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::HeaderValue;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;

use super::requests::{Body, Bound, BoundKind, RequestBody};
use super::sessions::{Sessions, SESSION_HEADER};
use crate::mcp::replicas::{local_part, Place, Replica};

/// Marks a request one replica forwarded to another.
pub(super) const FORWARDED_HEADER: &str = "toolpool-forwarded";

/// How long connecting to the replica may take before it counts as gone.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The client replicas forward with: its connections are kept and reused.
pub(super) type PeerClient = Client<HttpConnector, Full<Bytes>>;

pub(super) fn peer_client() -> PeerClient {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
    connector.set_nodelay(true);
    Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector)
}

/// Headers that belong to one connection, not to the request.
fn hop_by_hop(name: &hyper::header::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "proxy-authorization"
            | "proxy-authenticate"
    )
}

/// Where a request naming replica-bound state goes: on here (`Ok`, its
/// session id made this replica's own again, in the request and in
/// `session`), or elsewhere (`Err`: the answer of the replica that holds
/// it, or the error naming what is lost). `body` is the request's, read.
pub(super) async fn route(
    replica: &Replica,
    client: &PeerClient,
    mut request: Request<RequestBody>,
    body: Bytes,
    bound: Option<&Bound>,
    session: &mut Option<String>,
) -> Result<Request<RequestBody>, Response<Body>> {
    let forwarded = request.headers().contains_key(FORWARDED_HEADER);
    if let Some(id) = session.clone() {
        match replica.locate(&id) {
            Place::Here => {
                let local = local_part(&id).to_string();
                if let Ok(value) = HeaderValue::from_str(&local) {
                    request.headers_mut().insert(SESSION_HEADER, value);
                }
                *session = Some(local);
            }
            Place::Peer(address) if !forwarded => {
                return Err(match forward(client, request, body, &address).await {
                    Ok(response) => response,
                    Err(why) => {
                        tracing::warn!("the MCP session {id} was held by the replica at {address}, which is gone: {why}");
                        Sessions::unknown()
                    }
                });
            }
            // Gone, made up, or sent round: as a session that never was
            // (the client opens a new one).
            _ => return Err(Sessions::unknown()),
        }
    }
    let Some(bound) = bound else {
        return Ok(request);
    };
    match replica.locate(&bound.id) {
        Place::Here | Place::Forged => Ok(request),
        Place::Peer(address) if !forwarded => Err(forward(client, request, body, &address)
            .await
            .unwrap_or_else(|why| lost(bound, &address, &why))),
        Place::Peer(address) => Err(lost(bound, &address, "it answers as another instance")),
        Place::Gone => Err(lost(bound, replica.address(), "this replica restarted")),
    }
}

/// An `initialize`'s answer with its new session's id tagged with this
/// replica.
pub(super) fn tag_session(replica: &Replica, mut response: Response<Body>) -> Response<Body> {
    let tagged = response
        .headers()
        .get(SESSION_HEADER)
        .and_then(|id| id.to_str().ok())
        .and_then(|id| HeaderValue::from_str(&replica.tag(id)).ok());
    if let Some(tagged) = tagged {
        response.headers_mut().insert(SESSION_HEADER, tagged);
    }
    response
}

/// `request` (whose body is `body`) sent to the replica at `address`, and
/// its answer; or why there is none.
async fn forward(
    client: &PeerClient,
    request: Request<RequestBody>,
    body: Bytes,
    address: &str,
) -> Result<Response<Body>, String> {
    let (parts, _) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/mcp", |p| p.as_str());
    let mut outgoing = Request::builder()
        .method(parts.method)
        .uri(format!("http://{address}{path}"));
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            outgoing = outgoing.header(name, value);
        }
    }
    let outgoing = outgoing
        .header(FORWARDED_HEADER, "1")
        .body(Full::new(body))
        .map_err(|e| format!("the request cannot be forwarded: {e}"))?;
    match client.request(outgoing).await {
        Ok(response) => {
            tracing::debug!(address, "forwarded a request to its replica");
            Ok(response.map(|body| BodyExt::boxed(EndOnError(body))))
        }
        Err(e) => Err(format!("it does not answer ({e})")),
    }
}

/// The answer to a request for state whose replica is gone: a JSON-RPC
/// error naming it, marked retryable (calling the tool again is the way on).
fn lost(bound: &Bound, address: &str, why: &str) -> Response<Body> {
    let (what, again) = match bound.kind {
        BoundKind::Task => ("task", "create it again (call the tool again)"),
        BoundKind::Question => ("question (requestState)", "call the tool again"),
    };
    let message = format!(
        "the {what} {} was held by the replica at {address}, which is gone: {why}; it is lost: {again}",
        bound.id
    );
    tracing::warn!("{message}");
    let answer = serde_json::json!({
        "jsonrpc": "2.0",
        "id": bound.rpc_id,
        "error": {
            "code": -32603,
            "message": message,
            "data": {"retryable": true, "lost": what, "id": bound.id, "replica": address},
        },
    });
    let mut response = Response::new(Full::new(Bytes::from(answer.to_string())).boxed());
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A peer's answer as it streams: an error mid-stream (the replica died
/// while answering) ends it, as the client would see the connection end.
struct EndOnError(Incoming);

impl hyper::body::Body for EndOnError {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match Pin::new(&mut self.0).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
            Poll::Ready(Some(Err(e))) => {
                tracing::warn!("a forwarded answer broke off: {e}");
                Poll::Ready(None)
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }
}
