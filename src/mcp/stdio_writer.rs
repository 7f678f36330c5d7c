//! rmcp's output copied to stdout a chunk at a time, never a whole line: a
//! result of tens of MiB is on its way out while rmcp still writes it, and
//! is not held a second time here. Only a line's head is looked at — enough
//! to see that it is a response and to which id ([`Gate::answered_id`] takes
//! it out of flight, and gives back the client's id for an alias). The gate's
//! own answers go out between lines, never inside one.

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::stdio_gate::Gate;

/// What rmcp writes first on every message (serde_json, compact).
const VERSION: &[u8] = br#"{"jsonrpc":"2.0","#;
const ID: &[u8] = br#""id":"#;

/// What the first bytes of a line rmcp writes say about it.
#[derive(Debug, PartialEq)]
enum Head {
    /// Not enough bytes yet to tell.
    Partial,
    /// A response to `id`, whose value is at `span` of the line.
    Response {
        id: Value,
        span: std::ops::Range<usize>,
    },
    /// A request or notification of the server's: nothing to do.
    Message,
    /// Not the shape rmcp writes: the whole line is read, and judged whole.
    Unknown,
}

/// Where `prefix` ends when `bytes` start with it; else the verdict.
fn expect(bytes: &[u8], prefix: &[u8]) -> Result<usize, Head> {
    if bytes.len() < prefix.len() {
        return Err(match prefix.starts_with(bytes) {
            true => Head::Partial,
            false => Head::Unknown,
        });
    }
    match bytes.starts_with(prefix) {
        true => Ok(prefix.len()),
        false => Err(Head::Unknown),
    }
}

fn head_of(line: &[u8]) -> Head {
    let after_version = match expect(line, VERSION) {
        Ok(at) => at,
        Err(verdict) => return verdict,
    };
    let rest = &line[after_version..];
    if rest.starts_with(br#""method""#) {
        return Head::Message;
    }
    let id_at = match expect(rest, ID) {
        Ok(at) => after_version + at,
        Err(verdict) => return verdict,
    };
    let mut values = serde_json::Deserializer::from_slice(&line[id_at..]).into_iter::<Value>();
    let id = match values.next() {
        Some(Ok(id)) => id,
        Some(Err(e)) if e.is_eof() => return Head::Partial,
        None => return Head::Partial,
        Some(Err(_)) => return Head::Unknown,
    };
    let id_end = id_at + values.byte_offset();
    let tail = &line[id_end..];
    for (member, response) in [
        (&br#","result""#[..], true),
        (&br#","error""#[..], true),
        (&br#","method""#[..], false),
    ] {
        if tail.starts_with(member) {
            return match response {
                true => Head::Response {
                    id,
                    span: id_at..id_end,
                },
                false => Head::Message,
            };
        }
        if tail.len() < member.len() && member.starts_with(tail) {
            // A number id may go on in the next chunk, too.
            return Head::Partial;
        }
    }
    Head::Unknown
}

/// Where the copy is in rmcp's stream.
enum Place {
    /// At a line's start, its first bytes read (not yet written).
    Head(Vec<u8>),
    /// Inside a line whose head is written: bytes go straight out.
    Body,
    /// Inside a line whose head could not be read: kept until its end, and
    /// judged whole.
    Whole(Vec<u8>),
}

/// The longest head looked at: past it (an id of many KiB) the line is
/// read whole, rather than its head parsed again at every chunk.
const LONGEST_HEAD: usize = 64 * 1024;

/// Copies rmcp's output and the gate's answers to stdout; each response
/// written takes its id out of flight. Ends when rmcp's side is closed, or
/// when stdout fails (then `stdout_gone` is cancelled).
pub(super) async fn write_stdout(
    mut from_rmcp: tokio::io::DuplexStream,
    mut replies: mpsc::Receiver<Vec<u8>>,
    gate: Gate,
    stdout_gone: CancellationToken,
) {
    let mut stdout = tokio::io::stdout();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut place = Place::Head(Vec::new());
    let mut replies_open = true;
    loop {
        let between_lines = matches!(&place, Place::Head(head) if head.is_empty());
        let out: Vec<u8> = tokio::select! {
            // `read` is cancel-safe: a lost race reads nothing.
            read = from_rmcp.read(&mut chunk) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => copy(&mut place, &chunk[..n], &gate),
            },
            reply = replies.recv(), if replies_open && between_lines => match reply {
                Some(reply) => reply,
                None => {
                    replies_open = false;
                    continue;
                }
            },
        };
        if out.is_empty() {
            continue;
        }
        let written = async {
            stdout.write_all(&out).await?;
            stdout.flush().await
        };
        if let Err(e) = written.await {
            tracing::info!("cannot write to stdout: {e}");
            stdout_gone.cancel();
            return;
        }
    }
    // The gate's last answers, if stdin ended after rmcp (it does not).
    while let Ok(reply) = replies.try_recv() {
        if stdout.write_all(&reply).await.is_err() {
            break;
        }
    }
    let _ = stdout.flush().await;
}

/// What of `bytes` (the next ones rmcp wrote) goes out now, `place` moved on.
fn copy(place: &mut Place, mut bytes: &[u8], gate: &Gate) -> Vec<u8> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let end = bytes.iter().position(|&b| b == b'\n');
        let taken = end.map_or(bytes.len(), |end| end + 1);
        let (now, rest) = bytes.split_at(taken);
        bytes = rest;
        *place = match std::mem::replace(place, Place::Body) {
            Place::Body => {
                out.extend_from_slice(now);
                match end {
                    Some(_) => Place::Head(Vec::new()),
                    None => Place::Body,
                }
            }
            Place::Head(mut head) | Place::Whole(mut head) if end.is_some() => {
                // A whole line, before its head said what it is.
                head.extend_from_slice(now);
                out.extend(gate.answered(&head).unwrap_or(head));
                Place::Head(Vec::new())
            }
            Place::Whole(mut line) => {
                line.extend_from_slice(now);
                Place::Whole(line)
            }
            Place::Head(mut head) => {
                head.extend_from_slice(now);
                match head_of(&head) {
                    Head::Partial if head.len() <= LONGEST_HEAD => Place::Head(head),
                    Head::Partial | Head::Unknown => Place::Whole(head),
                    Head::Message => {
                        out.extend(head);
                        Place::Body
                    }
                    Head::Response { id, span } => {
                        match gate.answered_id(&id) {
                            Some(original) => {
                                out.extend_from_slice(&head[..span.start]);
                                out.extend_from_slice(original.to_string().as_bytes());
                                out.extend_from_slice(&head[span.end..]);
                            }
                            None => out.extend(head),
                        }
                        Place::Body
                    }
                }
            }
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::{copy, head_of, Head, Place};
    use crate::mcp::stdio_gate::tests::reused_under_alias;
    use crate::mcp::stdio_gate::{Gate, Verdict};

    /// A gate with request 700 cancelled and reused (so running under an
    /// alias, which is returned) and request "b" in flight.
    fn gate_with_alias() -> (Gate, Value) {
        let gate = Gate::new(1 << 20);
        let (alias, _) = reused_under_alias(&gate);
        let b = br#"{"jsonrpc":"2.0","id":"b","method":"ping"}"#;
        assert_eq!(gate.line(b), Verdict::Pass);
        (gate, alias)
    }

    #[test]
    fn heads_are_told_apart_from_their_first_bytes() {
        let response = br#"{"jsonrpc":"2.0","id":12,"result":{}}"#;
        assert_eq!(
            head_of(response),
            Head::Response {
                id: json!(12),
                span: 22..24
            }
        );
        // `12` cut after `1` is not the id 1.
        assert_eq!(head_of(&response[..23]), Head::Partial);
        assert_eq!(head_of(&response[..25]), Head::Partial);
        assert_eq!(head_of(br#"{"jsonrpc":"2.0","method":"x"}"#), Head::Message);
        assert_eq!(
            head_of(br#"{"jsonrpc":"2.0","id":"s","method":"x"}"#),
            Head::Message
        );
        assert!(matches!(
            head_of(br#"{"jsonrpc":"2.0","id":"s","error":{}}"#),
            Head::Response { .. }
        ));
        assert_eq!(head_of(br#"{"id":1,"jsonrpc":"2.0"}"#), Head::Unknown);
        assert_eq!(head_of(br#"{"jsonr"#), Head::Partial);
    }

    /// However rmcp's output is cut into reads, what goes out is the same
    /// bytes, the alias given back as the client's id, and every response's
    /// id out of flight (so the client may use it again).
    #[test]
    fn every_cut_of_the_stream_writes_the_same_and_lands_every_id() {
        let (_, alias) = gate_with_alias();
        let big = "\u{1}".repeat(300);
        let stream = format!(
            "{}\n{}\n{}\n",
            json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"p": 1}}),
            json!({"jsonrpc": "2.0", "id": alias, "result": {"content": [{"type": "text", "text": big}]}}),
            json!({"jsonrpc": "2.0", "id": "b", "result": {}}),
        );
        let expected = stream.replace(&alias.to_string(), "700");
        let bytes = stream.as_bytes();
        for first in 0..bytes.len() {
            for size in [1, 7, 64] {
                let (gate, _) = gate_with_alias();
                let mut place = Place::Head(Vec::new());
                let mut out = copy(&mut place, &bytes[..first], &gate);
                for piece in bytes[first..].chunks(size) {
                    out.extend(copy(&mut place, piece, &gate));
                }
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    expected,
                    "cut at {first} by {size}"
                );
                assert!(matches!(&place, Place::Head(head) if head.is_empty()));
                // Both ids landed: each may be sent again as a new request.
                for id in [&br#""b""#[..], b"700"] {
                    let again = [
                        &br#"{"jsonrpc":"2.0","id":"#[..],
                        id,
                        br#","method":"ping"}"#,
                    ]
                    .concat();
                    assert!(
                        !matches!(gate.line(&again), Verdict::Reply(_)),
                        "cut at {first}"
                    );
                    assert!(
                        matches!(gate.line(&again), Verdict::Reply(_)),
                        "in flight again"
                    );
                }
            }
        }
    }
}
