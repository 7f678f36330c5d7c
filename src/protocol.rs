//! Frames and messages between the supervisor and a worker (see `docs/protocol.md`).
//!
//! A frame is a 4-byte big-endian length followed by a MessagePack body. The
//! length is checked against a limit *before* anything is allocated, so a
//! worker announcing a 4 GB frame costs nothing but its own death.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Version of the wire protocol; the worker's hello must carry the same.
pub const PROTOCOL_VERSION: u32 = 1;

/// Default largest frame body either side sends or accepts (64 MiB).
pub const DEFAULT_MAX_FRAME: usize = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("the worker closed its end of the channel")]
    Closed,
    #[error("frame of {len} bytes is over the {limit}-byte limit")]
    TooLarge { len: usize, limit: usize },
    #[error("i/o error on the worker channel: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed message from the worker: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    #[error("unexpected message from the worker: {0}")]
    Unexpected(&'static str),
    #[error("cannot encode message: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
}

/// Context a call carries into the worker; the worker adds the paths.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CallContext {
    pub session_id: String,
    pub node_id: Option<String>,
    pub vars: serde_json::Map<String, Value>,
}

/// Supervisor → worker.
#[derive(Debug, Serialize)]
#[serde(tag = "t", rename_all = "lowercase")]
pub enum Request<'a> {
    Catalog {
        id: u64,
    },
    Invoke {
        id: u64,
        name: &'a str,
        args: &'a Value,
        context: &'a CallContext,
    },
}

/// Supervisor → worker: the answer to a worker's callback (`Message::Call`).
#[derive(Debug, Serialize)]
pub struct CallbackReply {
    t: &'static str,
    pub id: u64,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<RemoteError>,
}

impl CallbackReply {
    pub fn value(id: u64, value: Value) -> CallbackReply {
        CallbackReply {
            t: "reply",
            id,
            ok: true,
            value: Some(value),
            error: None,
        }
    }

    pub fn error(id: u64, kind: &str, message: &str) -> CallbackReply {
        CallbackReply {
            t: "reply",
            id,
            ok: false,
            value: None,
            error: Some(RemoteError {
                kind: kind.to_string(),
                message: message.to_string(),
                traceback: None,
            }),
        }
    }
}

/// An exception as the worker reports it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RemoteError {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    #[serde(default)]
    pub traceback: Option<String>,
}

/// Worker → supervisor.
#[derive(Debug, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase")]
pub enum Message {
    Hello {
        protocol: u32,
        pid: i32,
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
    },
    /// A callback from a running tool (context services); answered by a reply.
    Call {
        id: u64,
        method: String,
        #[serde(default)]
        params: Value,
    },
}

/// Reads one frame body, refusing lengths over `limit` before allocating.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    limit: usize,
) -> Result<Vec<u8>, ProtocolError> {
    let mut len_bytes = [0u8; 4];
    match reader.read_exact(&mut len_bytes).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(ProtocolError::Closed)
        }
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len_bytes) as usize;
    if len > limit {
        return Err(ProtocolError::TooLarge { len, limit });
    }
    let mut body = vec![0u8; len];
    match reader.read_exact(&mut body).await {
        Ok(_) => Ok(body),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(ProtocolError::Closed),
        Err(e) => Err(e.into()),
    }
}

/// Reads and decodes one message.
pub async fn read_message<R: AsyncRead + Unpin>(
    reader: &mut R,
    limit: usize,
) -> Result<Message, ProtocolError> {
    let body = read_frame(reader, limit).await?;
    decode_message(&body)
}

pub fn decode_message(body: &[u8]) -> Result<Message, ProtocolError> {
    Ok(rmp_serde::from_slice(body)?)
}

/// Encodes a message as one frame (length prefix included), ready to write.
pub fn encode_frame<T: Serialize>(message: &T, limit: usize) -> Result<Vec<u8>, ProtocolError> {
    let mut frame = vec![0u8; 4];
    rmp_serde::encode::write_named(&mut frame, message)?;
    let len = frame.len() - 4;
    if len > limit {
        return Err(ProtocolError::TooLarge { len, limit });
    }
    frame[..4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(frame)
}

pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frame: &[u8],
) -> Result<(), ProtocolError> {
    writer.write_all(frame).await?;
    writer.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn request_round_trips_through_a_frame() {
        let args = serde_json::json!({"a": 1, "b": [true, null, "x"]});
        let ctx = CallContext::default();
        let frame = encode_frame(
            &Request::Invoke {
                id: 7,
                name: "add",
                args: &args,
                context: &ctx,
            },
            DEFAULT_MAX_FRAME,
        )
        .unwrap();
        let mut cursor = std::io::Cursor::new(frame);
        let body = read_frame(&mut cursor, DEFAULT_MAX_FRAME).await.unwrap();
        let value: Value = rmp_serde::from_slice(&body).unwrap();
        assert_eq!(value["t"], "invoke");
        assert_eq!(value["id"], 7);
        assert_eq!(value["args"], args);
    }

    #[tokio::test]
    async fn oversized_length_is_refused_before_allocating() {
        let mut cursor = std::io::Cursor::new(vec![0xff, 0xff, 0xff, 0xff]);
        match read_frame(&mut cursor, 1024).await {
            Err(ProtocolError::TooLarge { len, limit }) => {
                assert_eq!(len, u32::MAX as usize);
                assert_eq!(limit, 1024);
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn truncated_frame_is_closed_not_a_hang() {
        let mut cursor = std::io::Cursor::new(vec![0, 0, 0, 10, 1, 2]);
        assert!(matches!(
            read_frame(&mut cursor, 1024).await,
            Err(ProtocolError::Closed)
        ));
    }

    #[test]
    fn garbage_body_is_a_decode_error() {
        assert!(matches!(
            decode_message(&[0xc1, 0x00, 0x13]),
            Err(ProtocolError::Decode(_))
        ));
        let hello_missing_fields =
            rmp_serde::to_vec_named(&serde_json::json!({"t": "hello"})).unwrap();
        assert!(decode_message(&hello_missing_fields).is_err());
    }

    #[test]
    fn reply_decodes_from_a_python_style_map() {
        let body = rmp_serde::to_vec_named(&serde_json::json!({
            "t": "reply", "id": 3, "ok": false,
            "error": {"type": "ValueError", "message": "bad", "traceback": null}
        }))
        .unwrap();
        match decode_message(&body).unwrap() {
            Message::Reply { id, ok, error, .. } => {
                assert_eq!(id, 3);
                assert!(!ok);
                assert_eq!(error.unwrap().kind, "ValueError");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
