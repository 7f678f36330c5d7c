//! The messages of the channel: the supervisor's requests and callback
//! replies, the worker's hello, replies and callbacks, and what a reply's
//! value decodes into (docs/protocol.md has their fields).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::marshal;
use super::{count_values, MAX_VALUES};
use crate::error::ErrorKind;
use crate::trace_context::TraceContext;

/// Context a call carries into the worker; the worker adds the paths.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CallContext {
    /// The call's session (`_context["session_id"]`).
    pub session_id: String,
    /// The calling node's id (`_context["node_id"]`); `None` outside a node.
    pub node_id: Option<String>,
    /// The caller's free-form values (`_context["vars"]`).
    pub vars: serde_json::Map<String, Value>,
    /// The host program's own `_context` keys, merged into the tool's
    /// `_context` under toolpool's. Left out when empty.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub host: serde_json::Map<String, Value>,
    /// Whether the call has a human prompt service (else the tool's
    /// `_context["human_prompt"]` is `None`).
    #[serde(default)]
    pub human_prompt: bool,
    /// Whether someone listens to the call's progress (else the tool's
    /// `_context["progress"]` sends nothing). Left out when false, so the
    /// context text of calls without it stays the same.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub progress: bool,
    /// The lowest Python `levelno` of the log records the caller hears;
    /// `None`: the worker sends none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<u32>,
    /// The call's own session's directories, when it is not the pool's
    /// (over HTTP each credential or session name has its own): the worker
    /// runs the call there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionDirs>,
    /// The W3C trace context the call continues: not in the context's JSON
    /// text (which repeats from call to call, and the shim parses once),
    /// but beside it in the invoke frame (`traceparent`, `tracestate`).
    #[serde(skip)]
    pub trace: Option<TraceContext>,
}

/// Where a call's session lives (`_context`'s paths, the call's cwd, the
/// packages directory on `sys.path`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SessionDirs {
    pub dir: std::path::PathBuf,
    pub workspace: std::path::PathBuf,
    pub packages_dir: std::path::PathBuf,
}

/// Supervisor → worker.
#[derive(Debug, Serialize)]
#[serde(tag = "t", rename_all = "lowercase")]
pub(crate) enum Request {
    Catalog {
        id: u64,
    },
    /// Answered with a null value; warms a fresh worker's request path.
    Ping {
        id: u64,
    },
}

/// Supervisor → worker: the answer to a worker's callback (`Message::Call`).
#[derive(Debug, Serialize)]
pub(crate) struct CallbackReply {
    t: &'static str,
    pub id: u64,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<RemoteError>,
}

impl CallbackReply {
    pub(crate) fn value(id: u64, value: Value) -> CallbackReply {
        CallbackReply {
            t: "reply",
            id,
            ok: true,
            value: Some(value),
            error: None,
        }
    }

    pub(crate) fn error(id: u64, kind: &str, message: &str) -> CallbackReply {
        CallbackReply {
            t: "reply",
            id,
            ok: false,
            value: None,
            error: Some(RemoteError {
                kind: ErrorKind::from_remote(kind),
                message: message.to_string(),
                traceback: None,
            }),
        }
    }
}

/// An exception as the worker reports it. Its type name becomes an
/// [`ErrorKind`] as it is read, so nothing past the wire handles the name:
/// a worker's name only ever decides between the kinds the shim itself
/// reports and [`ErrorKind::Raised`] — never a timeout or a death, which
/// the supervisor alone decides.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct RemoteError {
    #[serde(rename = "type", with = "remote_kind")]
    pub kind: ErrorKind,
    pub message: String,
    #[serde(default)]
    pub traceback: Option<String>,
}

/// The wire form of an [`ErrorKind`]: its type name.
mod remote_kind {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::error::ErrorKind;

    pub(super) fn serialize<S: Serializer>(
        kind: &ErrorKind,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(kind.type_name())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<ErrorKind, D::Error> {
        let name = std::borrow::Cow::<str>::deserialize(deserializer)?;
        Ok(ErrorKind::from_remote(&name))
    }
}

/// One content block of an attachment result, as the worker describes it
/// (a `MessageBlock`: docs/protocol.md, "Content"). Nothing in it is trusted:
/// the supervisor checks each attachment against its own store
/// (`crate::content`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct WireBlock {
    /// `text`, `image`, `audio`, `video`, `file` or `data`.
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
    /// The block's `AttachmentRef.to_dict()`.
    #[serde(default)]
    pub attachment: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub data: serde_json::Map<String, Value>,
    /// What the original runtime shows the model for the block (`describe()`).
    #[serde(default)]
    pub summary: String,
}

/// A successful reply: the result's JSON value and, when the tool returned
/// an attachment result (message blocks, an attachment record), its blocks.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ReplyValue {
    pub value: Value,
    pub content: Option<Vec<WireBlock>>,
}

/// Deepest nesting of lists and maps a result may have (the shim refuses
/// deeper ones it walks; this holds it for the JSON text it does not).
pub(crate) const MAX_RESULT_DEPTH: usize = 100;

impl ReplyValue {
    /// A reply's value: `value_marshal` (one marshal blob, see [`marshal`])
    /// or `value_json` (JSON text, parsed here) when the shim sent one, else
    /// the MessagePack `value`. A result nested deeper than
    /// [`MAX_RESULT_DEPTH`], one inside itself, or text that is not JSON is
    /// the tool's `ValueError`, as the shim names it for what it walks.
    pub(crate) fn decode(
        value: Value,
        value_json: Option<String>,
        value_marshal: Option<MarshalValue>,
        content: Option<Vec<WireBlock>>,
    ) -> Result<ReplyValue, RemoteError> {
        let value_error = |message: String| RemoteError {
            kind: ErrorKind::Raised("ValueError".into()),
            message,
            traceback: None,
        };
        let too_deep = || {
            value_error(format!(
                "the result is nested deeper than {MAX_RESULT_DEPTH} levels of lists and dicts"
            ))
        };
        if let Some(MarshalValue(decoded)) = value_marshal {
            // Held to the depth while it was decoded: no second walk.
            return match decoded {
                Ok(value) => Ok(ReplyValue { value, content }),
                Err(e) => Err(RemoteError {
                    kind: ErrorKind::from_remote(e.python_type()),
                    message: e.to_string(),
                    traceback: None,
                }),
            };
        }
        let value = match value_json {
            None => value,
            Some(text) if count_values(text.as_bytes()) > MAX_VALUES => {
                return Err(RemoteError {
                    kind: ErrorKind::ResultTooLarge,
                    message: marshal::MarshalError::TooManyValues.to_string(),
                    traceback: None,
                })
            }
            Some(text) => match serde_json::from_str(&text) {
                Ok(value) => value,
                // serde_json's own guard (128 levels) trips first on very deep text.
                Err(e) if e.to_string().contains("recursion limit") => return Err(too_deep()),
                Err(e) => return Err(value_error(format!("the result is not valid JSON: {e}"))),
            },
        };
        if depth(&value) > MAX_RESULT_DEPTH {
            return Err(too_deep());
        }
        Ok(ReplyValue { value, content })
    }
}

/// A reply's `value_marshal` blob, decoded where it lies in the frame as
/// the message is read: the blob is never copied out (a large text would
/// otherwise be held three times at once: in the frame, as the blob, and
/// decoded). Whether it decodes is the tool's result, not the channel's.
#[derive(Debug)]
pub(crate) struct MarshalValue(pub(crate) Result<Value, marshal::MarshalError>);

impl<'de> Deserialize<'de> for MarshalValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Blob;
        impl serde::de::Visitor<'_> for Blob {
            type Value = MarshalValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a marshal blob (bytes)")
            }
            // Borrowed bytes and byte buffers come here too.
            fn visit_bytes<E>(self, blob: &[u8]) -> Result<MarshalValue, E> {
                Ok(MarshalValue(marshal::from_marshal(blob)))
            }
        }
        deserializer.deserialize_bytes(Blob)
    }
}

/// Levels of lists and maps in `value` (a scalar is 0), without recursion.
fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((value, level)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(level + 1);
        stack.extend(children.map(|child| (child, level + 1)));
    }
    deepest
}

/// Worker → supervisor.
#[derive(Debug, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase")]
pub(crate) enum Message {
    /// The worker imported its tools. Its `pid` field is ignored: which
    /// process to signal comes from the kernel (`crate::process`).
    Hello {
        protocol: u32,
        python: String,
        codec: String,
        #[serde(default)]
        executable: String,
    },
    Reply {
        id: u64,
        ok: bool,
        #[serde(default)]
        value: Value,
        #[serde(default)]
        error: Option<RemoteError>,
        /// The result as JSON text, instead of `value` (see [`ReplyValue::decode`]).
        #[serde(default)]
        value_json: Option<String>,
        /// The result as one marshal blob, instead of `value`.
        #[serde(default)]
        value_marshal: Option<MarshalValue>,
        #[serde(default)]
        content: Option<Vec<WireBlock>>,
    },
    /// Sent before each tool module's import: a worker that dies or hangs
    /// during its start names the module that did it.
    Importing { module: String, file: String },
    /// A callback from a running tool (context services); answered by a reply.
    Call {
        id: u64,
        method: String,
        #[serde(default)]
        params: Value,
    },
}
