//! Frames and messages between the supervisor and a worker (see `docs/protocol.md`).
//!
//! A frame is a 4-byte big-endian length followed by a MessagePack body. The
//! length is checked against a limit *before* anything is allocated, so a
//! worker announcing a 4 GB frame costs nothing but its own death.

use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncWrite, AsyncWriteExt};

#[cfg(test)]
mod frame_decoder_tests;
mod framing;
pub(crate) mod json_values;
pub(crate) mod marshal;
pub(crate) mod marshal_writer;
mod messages;
mod python_text;

pub(crate) use self::framing::{message_reader, next_message, MessageReader};
pub(crate) use self::json_values::{count_values, MAX_VALUES};
pub use self::messages::CallContext;
pub(crate) use self::messages::{
    CallbackReply, Message, RemoteError, ReplyValue, Request, SessionDirs, WireBlock,
    MAX_RESULT_DEPTH,
};

/// Version of the wire protocol; the worker's hello must carry the same.
pub const PROTOCOL_VERSION: u32 = 7;

/// Default largest frame body either side sends or accepts (64 MiB).
pub const DEFAULT_MAX_FRAME: usize = 64 * 1024 * 1024;

/// What went wrong on a worker's channel.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The worker closed its end: it died, or was killed.
    #[error("the worker closed its end of the channel")]
    Closed,
    /// A frame longer than the frame limit, sent or announced.
    #[error("frame of {len} bytes is over the {limit}-byte limit")]
    TooLarge {
        /// The frame's length.
        len: usize,
        /// The limit it passed.
        limit: usize,
    },
    /// Reading or writing the pipe failed.
    #[error("i/o error on the worker channel: {0}")]
    Io(#[from] std::io::Error),
    /// A frame that is not MessagePack of a message.
    #[error("malformed message from the worker: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    /// A frame too deep, or otherwise not what a message may be.
    #[error("malformed message from the worker: {0}")]
    Malformed(String),
    /// A message the worker may not send at this point.
    #[error("unexpected message from the worker: {0}")]
    Unexpected(&'static str),
    /// A message that cannot be encoded.
    #[error("cannot encode message: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    /// Arguments that cannot be sent as they are.
    #[error("{0}")]
    Arguments(String),
}

/// Decodes one frame body. The body's structure is checked first (see
/// [`check_structure`]), so that no body makes the decoder reserve memory
/// for items it does not hold or recurse deeper than [`MAX_DEPTH`].
pub(crate) fn decode_message(body: &[u8]) -> Result<Message, ProtocolError> {
    check_structure(body)?;
    Ok(rmp_serde::from_slice(body)?)
}

/// Deepest nesting of maps and arrays a message may have: the reply map plus
/// a result nested 100 levels deep (the shim refuses deeper results) fit with
/// room to spare, and decoding stays far from the end of a 2 MiB stack.
pub(crate) const MAX_DEPTH: usize = 128;

/// Walks one MessagePack value without decoding it: every length must fit in
/// the bytes that follow, and every map or array must claim no more items than
/// bytes remain (each item takes at least one). Without this a 5-byte body
/// announcing a map of 65 535 entries at each of 1 000 levels would make the
/// decoder reserve memory for all of them (serde buffers tagged enums), and
/// deep nesting would overflow the stack. Afterwards the decoded message
/// holds at most one item per byte of its frame, and at most
/// [`MAX_VALUES`] values in all (a 64 MiB frame of nils would otherwise
/// decode into gigabytes: the shim sends large results as marshal or JSON
/// text, which are held to the same count).
pub(crate) fn check_structure(body: &[u8]) -> Result<(), ProtocolError> {
    fn malformed(what: String) -> ProtocolError {
        ProtocolError::Malformed(what)
    }
    let mut pos = 0usize;
    // Items left in each open map or array, outermost first.
    let mut open: Vec<u64> = Vec::new();
    // Items still expected, all levels together (the top-level value first).
    let mut pending: u64 = 1;
    let mut values = 0usize;
    while pending > 0 {
        while open.last() == Some(&0) {
            open.pop();
        }
        values += 1;
        if values > MAX_VALUES {
            return Err(malformed(format!(
                "the message holds more than {MAX_VALUES} values"
            )));
        }
        let Some(&marker) = body.get(pos) else {
            return Err(malformed(format!(
                "the message ends after {pos} bytes, inside a value"
            )));
        };
        pos += 1;
        pending -= 1;
        if let Some(left) = open.last_mut() {
            *left -= 1;
        }
        let mut length = |bytes: usize| -> Result<u64, ProtocolError> {
            let field = body.get(pos..pos + bytes).ok_or_else(|| {
                malformed(format!(
                    "the message ends inside a length field at byte {pos}"
                ))
            })?;
            pos += bytes;
            Ok(field.iter().fold(0u64, |n, b| (n << 8) | u64::from(*b)))
        };
        // (bytes of payload to skip, items that follow)
        let (skip, items) = match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
            0x80..=0x8f => (0, 2 * u64::from(marker & 0x0f)),
            0x90..=0x9f => (0, u64::from(marker & 0x0f)),
            0xa0..=0xbf => (u64::from(marker & 0x1f), 0),
            0xc1 => {
                return Err(malformed(format!(
                    "byte 0xc1 (never used in MessagePack) at byte {}",
                    pos - 1
                )))
            }
            0xc4 | 0xd9 => (length(1)?, 0),
            0xc5 | 0xda => (length(2)?, 0),
            0xc6 | 0xdb => (length(4)?, 0),
            0xc7 => (length(1)? + 1, 0),
            0xc8 => (length(2)? + 1, 0),
            0xc9 => (length(4)? + 1, 0),
            0xcc | 0xd0 => (1, 0),
            0xcd | 0xd1 => (2, 0),
            0xca | 0xce | 0xd2 => (4, 0),
            0xcb | 0xcf | 0xd3 => (8, 0),
            0xd4 => (2, 0),
            0xd5 => (3, 0),
            0xd6 => (5, 0),
            0xd7 => (9, 0),
            0xd8 => (17, 0),
            0xdc => (0, length(2)?),
            0xdd => (0, length(4)?),
            0xde => (0, 2 * length(2)?),
            0xdf => (0, 2 * length(4)?),
        };
        let remaining = (body.len() - pos) as u64;
        if skip > remaining {
            return Err(malformed(format!(
                "a value at byte {pos} claims {skip} bytes, but only {remaining} follow"
            )));
        }
        pos += skip as usize;
        if items > 0 {
            let remaining = remaining - skip;
            if pending + items > remaining {
                return Err(malformed(format!(
                    "a map or array at byte {pos} claims {items} items, but only {remaining} bytes follow"
                )));
            }
            if open.len() >= MAX_DEPTH {
                return Err(malformed(format!(
                    "maps and arrays nested deeper than {MAX_DEPTH} levels"
                )));
            }
            open.push(items);
            pending += items;
        }
    }
    Ok(())
}

/// Encodes a message as one frame (length prefix included), ready to write.
pub(crate) fn encode_frame<T: Serialize>(
    message: &T,
    limit: usize,
) -> Result<Vec<u8>, ProtocolError> {
    let mut frame = vec![0u8; 4];
    rmp_serde::encode::write_named(&mut frame, message)?;
    let len = frame.len() - 4;
    if len > limit {
        return Err(ProtocolError::TooLarge { len, limit });
    }
    frame[..4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(frame)
}

/// An invoke request's frame: a map of `t` (`invoke`), `id`, `name`,
/// `args_marshal` (the arguments as one marshal blob, see
/// `src/protocol/marshal_writer.rs`: the shim makes its Python objects with
/// `marshal.loads`, in C, not value by value) and `context_json` (JSON
/// text, parsed in C; the shim reuses the parsed context while the text
/// repeats), in that order, where the shim reads them; then, for a call
/// that continues a trace, `traceparent` and (when there is one)
/// `tracestate`. Written by hand so
/// that the blob goes straight into the frame (made apart and copied in, a
/// large argument would be held twice more), allocated once at its
/// estimated size.
pub fn encode_invoke_frame(
    id: u64,
    name: &str,
    args: &Value,
    context: &CallContext,
    limit: usize,
) -> Result<Vec<u8>, ProtocolError> {
    let trace = context.trace.as_ref();
    let context =
        serde_json::to_string(context).map_err(|e| ProtocolError::Arguments(e.to_string()))?;
    let trace_len = trace.map_or(0, |t| {
        t.traceparent().len() + t.tracestate().map_or(0, str::len) + 32
    });
    let estimate =
        64 + name.len() + context.len() + trace_len + marshal_writer::estimated_len(args);
    let mut frame = Vec::with_capacity(4 + estimate.min(limit));
    frame.extend_from_slice(&[0u8; 4]);
    let trace_fields = trace.map_or(0, |t| 1 + u8::from(t.tracestate().is_some()));
    frame.push(0x85 + trace_fields); // a map of five to seven
    msgpack_str(&mut frame, "t");
    msgpack_str(&mut frame, "invoke");
    msgpack_str(&mut frame, "id");
    msgpack_uint(&mut frame, id);
    msgpack_str(&mut frame, "name");
    msgpack_str(&mut frame, name);
    msgpack_str(&mut frame, "args_marshal");
    frame.push(0xc6); // bin 32, its length filled in once written
    let length_at = frame.len();
    frame.extend_from_slice(&[0u8; 4]);
    marshal_writer::write_marshal(args, &mut frame)
        .map_err(|e| ProtocolError::Arguments(e.to_string()))?;
    let too_large = |len| ProtocolError::TooLarge { len, limit };
    let blob = u32::try_from(frame.len() - length_at - 4).map_err(|_| too_large(frame.len()))?;
    frame[length_at..length_at + 4].copy_from_slice(&blob.to_be_bytes());
    msgpack_str(&mut frame, "context_json");
    msgpack_str(&mut frame, &context);
    if let Some(trace) = trace {
        msgpack_str(&mut frame, "traceparent");
        msgpack_str(&mut frame, trace.traceparent());
        if let Some(state) = trace.tracestate() {
            msgpack_str(&mut frame, "tracestate");
            msgpack_str(&mut frame, state);
        }
    }
    let len = frame.len() - 4;
    if len > limit {
        return Err(too_large(len));
    }
    frame[..4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(frame)
}

/// A MessagePack string, in the smallest form (as rmp writes it).
fn msgpack_str(out: &mut Vec<u8>, text: &str) {
    let len = text.len();
    match len {
        0..=31 => out.push(0xa0 | len as u8),
        32..=0xff => out.extend_from_slice(&[0xd9, len as u8]),
        0x100..=0xffff => {
            out.push(0xda);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(0xdb);
            out.extend_from_slice(&(len as u32).to_be_bytes());
        }
    }
    out.extend_from_slice(text.as_bytes());
}

/// A MessagePack unsigned integer, in the smallest form (as rmp writes it).
fn msgpack_uint(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=0x7f => out.push(n as u8),
        0x80..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
        0x100..=0xffff => {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        _ => {
            out.push(0xcf);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// Writes a whole frame (length prefix included, as the `encode_*`
/// functions make it) and flushes.
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
    use crate::error::ErrorKind;

    #[test]
    fn a_result_sent_as_json_text_is_parsed_and_held_to_the_depth_limit() {
        let parsed =
            ReplyValue::decode(Value::Null, Some(r#"{"a":[1,2.5,"x"]}"#.into()), None, None)
                .unwrap();
        assert_eq!(parsed.value, serde_json::json!({"a": [1, 2.5, "x"]}));
        let plain = ReplyValue::decode(serde_json::json!(7), None, None, None).unwrap();
        assert_eq!(plain.value, serde_json::json!(7));
        let nest = |levels: usize| "[".repeat(levels) + &"]".repeat(levels);
        assert!(ReplyValue::decode(Value::Null, Some(nest(MAX_RESULT_DEPTH)), None, None).is_ok());
        for levels in [MAX_RESULT_DEPTH + 1, 5000] {
            let error =
                ReplyValue::decode(Value::Null, Some(nest(levels)), None, None).unwrap_err();
            assert_eq!(error.kind, ErrorKind::Raised("ValueError".into()));
            assert_eq!(
                error.message,
                "the result is nested deeper than 100 levels of lists and dicts"
            );
        }
        let error =
            ReplyValue::decode(Value::Null, Some("{not json".into()), None, None).unwrap_err();
        assert!(
            error.message.starts_with("the result is not valid JSON"),
            "{}",
            error.message
        );
    }

    #[test]
    fn invoke_arguments_travel_as_one_marshal_blob() {
        let args = serde_json::json!({"rows": [{"id": 1}]});
        let context = CallContext::default();
        let frame = encode_invoke_frame(3, "t", &args, &context, DEFAULT_MAX_FRAME).unwrap();
        let decoded = rmpv::decode::read_value(&mut &frame[4..]).unwrap();
        let field = |name: &str| {
            decoded
                .as_map()
                .unwrap()
                .iter()
                .find(|(key, _)| key.as_str() == Some(name))
                .map(|(_, value)| value.clone())
        };
        let blob = field("args_marshal").expect("args_marshal is sent");
        assert_eq!(
            blob.as_slice().expect("a bin field"),
            b"{\xda\x04rows[\x01\x00\x00\x00{\xda\x02idi\x01\x00\x00\x0000"
        );
        assert!(field("args").is_none() && field("args_json").is_none());
    }

    #[test]
    fn a_trace_travels_beside_the_context_text() {
        let field = |frame: &[u8], name: &str| {
            let decoded = rmpv::decode::read_value(&mut &frame[4..]).unwrap();
            let map = decoded.as_map().unwrap().clone();
            map.into_iter()
                .find(|(key, _)| key.as_str() == Some(name))
                .map(|(_, value)| value.as_str().unwrap_or_default().to_string())
        };
        let args = serde_json::json!({});
        let plain = CallContext::default();
        let frame = encode_invoke_frame(1, "t", &args, &plain, DEFAULT_MAX_FRAME).unwrap();
        assert_eq!(field(&frame, "traceparent"), None);
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        for state in [None, Some("k=v")] {
            let context = CallContext {
                trace: crate::trace_context::TraceContext::parse(parent, state),
                ..CallContext::default()
            };
            let frame = encode_invoke_frame(1, "t", &args, &context, DEFAULT_MAX_FRAME).unwrap();
            assert_eq!(field(&frame, "traceparent").as_deref(), Some(parent));
            assert_eq!(field(&frame, "tracestate").as_deref(), state);
            // The context text is the same as without a trace: the shim's
            // parsed copy is reused.
            assert_eq!(
                field(&frame, "context_json"),
                field(&frame_of(&plain), "context_json")
            );
        }

        fn frame_of(context: &CallContext) -> Vec<u8> {
            encode_invoke_frame(1, "t", &serde_json::json!({}), context, DEFAULT_MAX_FRAME).unwrap()
        }
    }

    #[tokio::test]
    async fn request_round_trips_through_a_frame() {
        let args = serde_json::json!({"a": 1, "b": [true, null, "x"]});
        let ctx = CallContext::default();
        let frame = encode_invoke_frame(7, "add", &args, &ctx, DEFAULT_MAX_FRAME).unwrap();
        let (prefix, body) = frame.split_at(4);
        assert_eq!(
            u32::from_be_bytes(prefix.try_into().unwrap()) as usize,
            body.len()
        );
        let value = rmpv::decode::read_value(&mut &body[..]).unwrap();
        let field = |name: &str| {
            value
                .as_map()
                .unwrap()
                .iter()
                .find(|(key, _)| key.as_str() == Some(name))
                .map(|(_, value)| value.clone())
        };
        assert_eq!(field("t").unwrap().as_str(), Some("invoke"));
        assert_eq!(field("id").unwrap().as_u64(), Some(7));
        let blob = field("args_marshal").unwrap();
        assert_eq!(
            blob.as_slice().unwrap(),
            marshal_writer::to_marshal(&args).unwrap().as_slice()
        );
    }

    #[test]
    fn garbage_body_is_a_decode_error() {
        assert!(matches!(
            decode_message(&[0xc1, 0x00, 0x13]),
            Err(ProtocolError::Malformed(_))
        ));
        assert!(matches!(
            decode_message(&[0x93, 0x01, 0x02, 0x03]),
            Err(ProtocolError::Decode(_))
        ));
        let hello_missing_fields =
            rmp_serde::to_vec_named(&serde_json::json!({"t": "hello"})).unwrap();
        assert!(decode_message(&hello_missing_fields).is_err());
    }

    #[test]
    fn containers_claiming_more_items_than_bytes_are_refused() {
        // A map16 of 287 entries in a 3-byte body.
        assert!(matches!(
            decode_message(&[0xde, 0x01, 0x1f]),
            Err(ProtocolError::Malformed(_))
        ));
        // 1 000 nested map16s of 65 535 entries, one key each.
        let bomb: Vec<u8> = [0xde, 0xff, 0xff, 0x00].repeat(1000);
        assert!(matches!(
            decode_message(&bomb),
            Err(ProtocolError::Malformed(_))
        ));
        // A str32 longer than the body.
        assert!(matches!(
            check_structure(&[0xdb, 0xff, 0xff, 0xff, 0xff, b'x']),
            Err(ProtocolError::Malformed(_))
        ));
    }

    #[test]
    fn nesting_past_the_depth_limit_is_refused_without_recursing() {
        let reply_around = |depth: usize| {
            let mut body = b"\x84\xa1t\xa5reply\xa2id\x01\xa2ok\xc3\xa5value".to_vec();
            body.extend(std::iter::repeat_n(0x91u8, depth));
            body.push(0xc0);
            body
        };
        assert!(decode_message(&reply_around(MAX_DEPTH - 1)).is_ok());
        match decode_message(&reply_around(100_000)) {
            Err(ProtocolError::Malformed(why)) => assert!(why.contains("nested deeper"), "{why}"),
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn structure_check_accepts_what_the_encoder_writes() {
        let value = serde_json::json!({
            "t": "reply", "id": 9, "ok": true,
            "value": {"list": [1, -1, 300, -300, 70000, 1.5, "ü", null, true, [], {}],
                      "big": u64::MAX, "neg": i64::MIN, "text": "x".repeat(70000)}
        });
        let body = rmp_serde::to_vec_named(&value).unwrap();
        check_structure(&body).unwrap();
        assert!(matches!(
            decode_message(&body),
            Ok(Message::Reply { id: 9, .. })
        ));
    }

    #[test]
    fn a_message_of_more_values_than_the_server_takes_is_refused_unparsed() {
        // A reply whose value is an array of MAX_VALUES nils (one byte each).
        let mut body = rmp_serde::to_vec_named(&serde_json::json!({
            "t": "reply", "id": 1, "ok": true
        }))
        .unwrap();
        body[0] += 1; // one more entry: "value"
        body.extend_from_slice(&[0xa5, b'v', b'a', b'l', b'u', b'e', 0xdd]);
        body.extend_from_slice(&(MAX_VALUES as u32).to_be_bytes());
        body.extend(std::iter::repeat_n(0xc0, MAX_VALUES));
        match check_structure(&body) {
            Err(ProtocolError::Malformed(why)) => {
                assert!(why.contains("more than 2000000 values"), "{why}")
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
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
                assert_eq!(error.unwrap().kind, ErrorKind::Raised("ValueError".into()));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
