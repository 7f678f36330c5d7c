//! A request's body read within the frame limit, the least rate and the
//! budget of bodies held at once; a task method given its `Mcp-Name`; and
//! the front end's own plain answers.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::HeaderValue;
use hyper::{Method, Request, Response, StatusCode};

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::StreamableHttpService;

use crate::http::conn::{read_body, BodyError};
use crate::mcp::{ToolpoolServer, BODIES_IN_FLIGHT};

/// A response's body, as the front end hands it to hyper.
pub(in crate::mcp) type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;
/// A request's body as rmcp's handler is given it: a POST's as the front end
/// read it, whole (any other's as it arrives).
pub(in crate::mcp) type RequestBody =
    http_body_util::combinators::UnsyncBoxBody<Bytes, hyper::Error>;
pub(in crate::mcp) type McpService = StreamableHttpService<ToolpoolServer, LocalSessionManager>;

/// The methods whose `Mcp-Name` rmcp takes from `params.taskId`.
pub(in crate::mcp) const TASK_METHODS: [&str; 3] = ["tasks/get", "tasks/update", "tasks/cancel"];

/// `request` with its body read whole, if it is a POST: within the frame
/// limit and the least rate of [`crate::http::conn::read_body`] (a client
/// that trickles a body is cut off, as one that trickles a header is), and
/// within `bodies`, the budget of bodies held at once, whose share it holds
/// until dropped; a JSON text of more than `MAX_VALUES` values is refused.
/// A task method's POST (by its `Mcp-Method` header) without an `Mcp-Name`
/// gets one from its body's `params.taskId` (see the module's
/// documentation). With `counts_calls`, whether it is a `tools/call` is
/// read too; with `finds_bound`, the task or question it names, and its
/// body is kept (it may be forwarded). Other requests are passed on unread.
pub(in crate::mcp) async fn read_request(
    request: Request<Incoming>,
    bodies: &Arc<tokio::sync::Semaphore>,
    counts_calls: bool,
    finds_bound: bool,
) -> Result<ReadRequest, Response<Body>> {
    if request.method() != Method::POST {
        return Ok(ReadRequest {
            request: request.map(BodyExt::boxed_unsync),
            held: None,
            is_call: false,
            bound: None,
            body: None,
        });
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
    // Read only where it is needed: a scan of the body.
    let head = (counts_calls || finds_bound)
        .then(|| Head::of(&bytes))
        .flatten();
    let is_call = counts_calls && head.as_ref().is_some_and(Head::is_tool_call);
    let bound = match head {
        Some(head) if finds_bound => bound_of(&head, &bytes).map(|(kind, id)| Bound {
            kind,
            id,
            rpc_id: head.id.unwrap_or(serde_json::Value::Null),
        }),
        _ => None,
    };
    let kept = finds_bound.then(|| bytes.clone());
    let body = Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync();
    Ok(ReadRequest {
        request: Request::from_parts(parts, body),
        held: permit,
        is_call,
        bound,
        body: kept,
    })
}

/// The state of one replica a request names: a task, or a suspended
/// question (`requestState`).
pub(in crate::mcp) struct Bound {
    pub(in crate::mcp) kind: BoundKind,
    pub(in crate::mcp) id: String,
    /// The request's JSON-RPC id, for an error answered in its place.
    pub(in crate::mcp) rpc_id: serde_json::Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::mcp) enum BoundKind {
    Task,
    Question,
}

/// A request as [`read_request`] passes it on.
pub(in crate::mcp) struct ReadRequest {
    pub(in crate::mcp) request: Request<RequestBody>,
    /// Its body's share of the budget, held until dropped.
    pub(in crate::mcp) held: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Whether it is one `tools/call` (the calls `--tenant-max-calls` and
    /// `--tenant-calls-per-second` count; asked only when they are set).
    pub(in crate::mcp) is_call: bool,
    /// The task or question it names (asked only of replicas).
    pub(in crate::mcp) bound: Option<Bound>,
    /// Its body, should it go to another replica (kept only by replicas).
    pub(in crate::mcp) body: Option<Bytes>,
}

/// What a single JSON-RPC request's body says of itself: its method and
/// id, read without building the rest (the params are skipped over).
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    id: Option<serde_json::Value>,
}

/// The params a task or question is named by. Read apart from [`Head`]:
/// whatever they hold, the method is still read (a call that names a
/// "taskId" of another type is still counted as a call).
#[derive(serde::Deserialize)]
struct BoundParams<'a> {
    #[serde(borrow)]
    params: Option<NamedBy<'a>>,
}

#[derive(serde::Deserialize)]
struct NamedBy<'a> {
    #[serde(borrow, rename = "taskId")]
    task_id: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, rename = "requestState")]
    request_state: Option<std::borrow::Cow<'a, str>>,
}

/// The task a task method's `body` names, or the question a `tools/call`
/// retry answers.
fn bound_of(head: &Head<'_>, body: &[u8]) -> Option<(BoundKind, String)> {
    let method = head.method.as_deref()?;
    let is_task = TASK_METHODS.contains(&method);
    if !is_task && method != "tools/call" {
        return None;
    }
    // A first call (no requestState, the most common request by far) is not
    // parsed a second time: its arguments may be large. (A key spelled with
    // escapes is then served here, and refused as a state never made.)
    if !is_task && memchr::memmem::find(body, b"\"requestState\"").is_none() {
        return None;
    }
    let params = serde_json::from_slice::<BoundParams<'_>>(body)
        .ok()?
        .params?;
    match is_task {
        true => Some((BoundKind::Task, params.task_id?.into_owned())),
        false => Some((BoundKind::Question, params.request_state?.into_owned())),
    }
}

impl<'a> Head<'a> {
    fn of(body: &'a [u8]) -> Option<Head<'a>> {
        serde_json::from_slice(body).ok()
    }

    fn is_tool_call(&self) -> bool {
        self.method.as_deref() == Some("tools/call")
    }
}

/// The `Mcp-Name` a task request's body names (`params.taskId`), when it
/// is a header as it is (a task id this server made is hex); any other is
/// left for rmcp to refuse as a missing header.
pub(in crate::mcp) fn task_name(body: &[u8]) -> Option<HeaderValue> {
    let message = serde_json::from_slice::<serde_json::Value>(body).ok()?;
    let id = message.pointer("/params/taskId")?.as_str()?;
    let plain = !id.starts_with("=?base64?")
        && id.trim() == id
        && id.bytes().all(|b| (0x20..0x7f).contains(&b));
    plain.then(|| HeaderValue::from_str(id).ok()).flatten()
}

pub(in crate::mcp) fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(body: &str) -> Option<(BoundKind, String)> {
        bound_of(&Head::of(body.as_bytes())?, body.as_bytes())
    }

    #[test]
    fn a_body_names_the_task_or_question_it_is_for() {
        for method in TASK_METHODS {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"taskId":"ab~cd"}}}}"#
            );
            assert_eq!(
                bound(&body),
                Some((BoundKind::Task, "ab~cd".into())),
                "{method}"
            );
        }
        let retry = r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"t","arguments":{"a":[1,2,{"b":"c"}]},"requestState":"s~t"}}"#;
        assert_eq!(bound(retry), Some((BoundKind::Question, "s~t".into())));
        assert!(Head::of(retry.as_bytes()).unwrap().is_tool_call());
        assert_eq!(
            Head::of(retry.as_bytes()).unwrap().id,
            Some(serde_json::json!("x"))
        );
        for none in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"taskId":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get"}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"x"}}]"#,
            "not json",
        ] {
            assert_eq!(bound(none), None, "{none}");
        }
        // A call naming a "taskId" of another type is a call all the same.
        let odd = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","taskId":7,"requestState":[1]}}"#;
        assert!(Head::of(odd.as_bytes()).unwrap().is_tool_call());
        assert_eq!(bound(odd), None);
    }
}
