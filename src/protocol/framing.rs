//! The worker channel's framing: frames with a 4-byte big-endian length
//! prefix (tokio-util's `LengthDelimitedCodec`), each one MessagePack
//! message whose structure is checked before it is decoded
//! ([`decode_message`]).
//!
//! A length over the limit is refused as soon as its 4 bytes arrive, before
//! anything is reserved for the body, and the error names the length the
//! worker announced. Read through a `FramedRead`, a read can be cancelled at
//! any await (a branch of `select!` losing) without losing bytes: what
//! arrived stays in the reader's buffer.

use bytes::BytesMut;
use futures_util::StreamExt;
use tokio::io::AsyncRead;
use tokio_util::codec::{Decoder, FramedRead, LengthDelimitedCodec};

use super::{decode_message, Message, ProtocolError};

/// Length-prefixed frames of at most `limit` bytes, decoded as messages.
#[derive(Debug)]
pub(crate) struct MessageCodec {
    frames: LengthDelimitedCodec,
    limit: usize,
    /// The frame's length prefix was consumed; its body is still arriving.
    in_body: bool,
}

impl MessageCodec {
    pub(crate) fn new(limit: usize) -> MessageCodec {
        MessageCodec {
            frames: LengthDelimitedCodec::builder()
                .length_field_length(4)
                .big_endian()
                .max_frame_length(limit)
                .new_codec(),
            limit,
            in_body: false,
        }
    }
}

impl Decoder for MessageCodec {
    type Item = Message;
    type Error = ProtocolError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Message>, ProtocolError> {
        if !self.in_body {
            let Some(head) = src.get(..4) else {
                return Ok(None);
            };
            let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
            if len > self.limit {
                return Err(ProtocolError::TooLarge {
                    len,
                    limit: self.limit,
                });
            }
        }
        match self.frames.decode(src)? {
            Some(body) => {
                self.in_body = false;
                decode_message(&body).map(Some)
            }
            None => {
                // Only a complete prefix is consumed, and it was here.
                self.in_body = true;
                Ok(None)
            }
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Message>, ProtocolError> {
        match self.decode(src)? {
            Some(message) => Ok(Some(message)),
            None if src.is_empty() && !self.in_body => Ok(None),
            // The worker's end closed in the middle of a frame.
            None => Err(ProtocolError::Closed),
        }
    }
}

/// A worker's stdout (or any reader) as a stream of messages.
pub(crate) type MessageReader<R> = FramedRead<R, MessageCodec>;

/// Reads messages of at most `limit` bytes from `reader`.
pub(crate) fn message_reader<R: AsyncRead>(reader: R, limit: usize) -> MessageReader<R> {
    FramedRead::new(reader, MessageCodec::new(limit))
}

/// The next message; [`ProtocolError::Closed`] once the stream ended.
/// Cancel-safe.
pub(crate) async fn next_message<R: AsyncRead + Unpin>(
    reader: &mut MessageReader<R>,
) -> Result<Message, ProtocolError> {
    reader.next().await.unwrap_or(Err(ProtocolError::Closed))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::protocol::{encode_frame, DEFAULT_MAX_FRAME};

    #[tokio::test]
    async fn a_half_read_frame_survives_a_cancelled_read() {
        let frame = encode_frame(
            &serde_json::json!({"t": "reply", "id": 4, "ok": true, "value": "x".repeat(300)}),
            DEFAULT_MAX_FRAME,
        )
        .unwrap();
        let (mut worker, supervisor) = tokio::io::duplex(64);
        let mut messages = message_reader(supervisor, DEFAULT_MAX_FRAME);
        // Half the frame arrives, then the read loses a race and is dropped.
        let (first, rest) = frame.split_at(150);
        let writer = tokio::spawn({
            let (first, rest) = (first.to_vec(), rest.to_vec());
            async move {
                worker.write_all(&first).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
                worker.write_all(&rest).await.unwrap();
                worker
            }
        });
        tokio::select! {
            _ = next_message(&mut messages) => panic!("the frame is not complete yet"),
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        match next_message(&mut messages).await {
            Ok(Message::Reply { id: 4, value, .. }) => assert_eq!(value, "x".repeat(300)),
            other => panic!("unexpected {other:?}"),
        }
        drop(writer.await.unwrap());
        assert!(matches!(
            next_message(&mut messages).await,
            Err(ProtocolError::Closed)
        ));
    }

    #[tokio::test]
    async fn a_length_over_the_limit_is_named_and_a_cut_frame_is_a_close() {
        let mut over = message_reader(&[0xff, 0xff, 0xff, 0xff, 0][..], 1024);
        assert!(matches!(
            next_message(&mut over).await,
            Err(ProtocolError::TooLarge {
                len: 4294967295,
                limit: 1024
            })
        ));
        // A prefix announcing 10 bytes, then 3 and the end.
        let mut cut = message_reader(&[0, 0, 0, 10, 1, 2, 3][..], 1024);
        assert!(matches!(
            next_message(&mut cut).await,
            Err(ProtocolError::Closed)
        ));
        // Two frames back to back, then a clean end.
        let mut two = encode_frame(
            &serde_json::json!({"t": "importing", "module": "a", "file": "a.py"}),
            1024,
        )
        .unwrap();
        two.extend(
            encode_frame(
                &serde_json::json!({"t": "importing", "module": "b", "file": "b.py"}),
                1024,
            )
            .unwrap(),
        );
        let mut both = message_reader(&two[..], 1024);
        assert!(matches!(
            next_message(&mut both).await,
            Ok(Message::Importing { module, .. }) if module == "a"
        ));
        assert!(matches!(
            next_message(&mut both).await,
            Ok(Message::Importing { module, .. }) if module == "b"
        ));
        assert!(matches!(
            next_message(&mut both).await,
            Err(ProtocolError::Closed)
        ));
    }
}
