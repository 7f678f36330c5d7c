//! What stands between stdin and rmcp on the stdio transport: every line is
//! looked at before rmcp sees it, because rmcp drops bad input without a
//! word (invalid JSON, an over-long line) and lets a request whose id is
//! already in flight silently replace the first. Here:
//!
//! - a line that is not JSON (a lone surrogate escape included) is answered
//!   `-32700 Parse error` with id null;
//! - JSON that is not a JSON-RPC 2.0 message (an array, a wrong `jsonrpc`, an
//!   id that is neither string nor integer, no method and no result) is
//!   answered `-32600 Invalid request`, with its id when it has a usable one
//!   (a batch: one error for each member that has an id);
//! - a line longer than the frame limit (64 MiB) is not kept: it is answered
//!   `-32600` naming the limit, with the id when its first bytes show one;
//! - a request whose id is still in flight is answered `-32600` (the first
//!   one goes on and gets its own answer);
//! - a request that reuses the id of a request the client cancelled (the
//!   first reuse and every later one: when the cancelled call ends is not
//!   seen here) goes to rmcp under an id of its own (an alias), and its
//!   response comes back under the client's id. rmcp keys a request's cancellation by its id
//!   alone: the cancelled call, still ending, would otherwise take the new
//!   request's place — its "cancelled" answer sent for it, and the new call
//!   cancelled with it.
//!
//! Other good lines are passed on to rmcp unchanged. The writer side calls
//! [`Gate::answered`] on every line rmcp writes, so an id leaves the
//! in-flight set as its response goes out (or when the client cancels it).

use std::sync::Arc;

use dashmap::{DashMap, DashSet};
use rmcp::model::{ClientJsonRpcMessage, ClientNotification, JsonRpcMessage};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Value};

/// How many bytes of an over-long line are kept, to look for its id.
const OVERSIZED_PREFIX: usize = 64 * 1024;

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
/// A JSON-RPC server error: the request is fine, the server cannot take it now.
const SERVER_BUSY: i64 = -32000;

/// What to do with one line read from stdin.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Hand the line to rmcp.
    Pass,
    /// Hand rmcp this line instead (a reused id given its alias).
    PassAs(Vec<u8>),
    /// Answer it with these lines (JSON-RPC errors, each ending in `\n`); rmcp never sees it.
    Reply(Vec<u8>),
    /// Nothing to do (an empty line, a notification rmcp would ignore).
    Skip,
}

/// The in-flight request ids, shared by the reading and the writing side
/// (and the tasks rmcp runs each request on).
#[derive(Clone)]
pub(super) struct Gate {
    in_flight: Arc<DashSet<String>>,
    /// Ids the client cancelled, whose calls may still be ending in rmcp
    /// (it sends them no response, so when they end is not seen here).
    cancelled: Arc<DashSet<String>>,
    /// The client's id of each alias, and the alias of each client id now
    /// running under one (for its cancellation).
    original_of: Arc<DashMap<String, Value>>,
    alias_of: Arc<DashMap<String, Value>>,
    aliases_made: Arc<std::sync::atomic::AtomicU64>,
    /// Bytes of requests in flight, in KiB (as over HTTP: a budget shared
    /// by every request until it is answered or cancelled).
    budget: Arc<tokio::sync::Semaphore>,
    held: Arc<DashMap<String, tokio::sync::OwnedSemaphorePermit>>,
    limit: usize,
}

/// Cancelled ids remembered for aliasing; past it the set starts over (a
/// call cancelled that long ago has ended).
const CANCELLED_REMEMBERED: usize = 4096;

impl Gate {
    /// `limit`: the longest line accepted, newline not counted.
    pub(super) fn new(limit: usize) -> Gate {
        Gate {
            in_flight: Arc::default(),
            cancelled: Arc::default(),
            original_of: Arc::default(),
            alias_of: Arc::default(),
            aliases_made: Arc::default(),
            budget: Arc::new(tokio::sync::Semaphore::new(
                crate::mcp::BODIES_IN_FLIGHT / 1024,
            )),
            held: Arc::default(),
            limit,
        }
    }

    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    /// Judges one whole line (its newline stripped).
    pub(super) fn line(&self, line: &[u8]) -> Verdict {
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return Verdict::Skip;
        }
        let values = crate::protocol::count_values(line);
        if values > crate::protocol::MAX_VALUES {
            let id = id_in_prefix(&line[..line.len().min(OVERSIZED_PREFIX)]).unwrap_or(Value::Null);
            let why = crate::protocol::json_values::too_many(values);
            return Verdict::Reply(error_line(
                &id,
                INVALID_REQUEST,
                &format!("Invalid request: {why}"),
            ));
        }
        match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
            Ok(message) => self.admit(message, line),
            Err(typed) => self.explain(line, &typed),
        }
    }

    /// A line longer than the limit, of which `prefix` are the first bytes.
    pub(super) fn oversized(&self, prefix: &[u8]) -> Vec<u8> {
        let id = id_in_prefix(prefix).unwrap_or(Value::Null);
        error_line(
            &id,
            INVALID_REQUEST,
            &format!(
                "Invalid request: the message is longer than the limit of {} ({} bytes) and was not read",
                human_bytes(self.limit),
                self.limit
            ),
        )
    }

    /// Called with each whole line the server writes: a response takes its
    /// id out of flight. The response of an aliased request is given back
    /// under the client's id: `Some(line)` to write instead. (The writer
    /// looks at a line's head only, with [`Gate::answered_id`]; this is for
    /// a line whose head it could not read.)
    pub(super) fn answered(&self, line: &[u8]) -> Option<Vec<u8>> {
        #[derive(Deserialize)]
        struct Head {
            id: Option<Value>,
            method: Option<IgnoredAny>,
        }
        let Ok(Head {
            id: Some(id),
            method: None,
        }) = serde_json::from_slice::<Head>(line)
        else {
            return None;
        };
        let original = self.answered_id(&id)?;
        rewrite(line, |message| message["id"] = original)
    }

    /// Takes the id of a response the server writes out of flight; the
    /// client's own id when `id` is an alias (the response must go out
    /// under it).
    pub(super) fn answered_id(&self, id: &Value) -> Option<Value> {
        let Some((_, original)) = self.original_of.remove(&id_key(id)) else {
            self.land(id);
            return None;
        };
        self.alias_of
            .remove_if(&id_key(&original), |_, alias| alias == id);
        self.land(&original);
        Some(original)
    }

    fn land(&self, id: &Value) {
        let key = id_key(id);
        self.in_flight.remove(&key);
        self.held.remove(&key);
    }

    /// `line`, a request the client sent with `id`, given an alias of its own.
    fn under_alias(&self, line: &[u8], id: Value) -> Verdict {
        let made = self
            .aliases_made
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let alias = json!(format!("toolpool-alias-{made}"));
        let Some(rewritten) = rewrite(line, |message| message["id"] = alias.clone()) else {
            return Verdict::Pass;
        };
        self.original_of.insert(id_key(&alias), id.clone());
        self.alias_of.insert(id_key(&id), alias);
        Verdict::PassAs(rewritten)
    }

    /// The client cancelled `id`: it leaves flight, is remembered (its call
    /// may still be ending), and reaches rmcp under its alias if it has one.
    fn cancel(&self, line: &[u8], id: Value) -> Verdict {
        let key = id_key(&id);
        self.land(&id);
        if self.cancelled.len() >= CANCELLED_REMEMBERED {
            self.cancelled.clear();
        }
        self.cancelled.insert(key.clone());
        let Some((_, alias)) = self.alias_of.remove(&key) else {
            return Verdict::Pass;
        };
        match rewrite(line, |message| message["params"]["requestId"] = alias) {
            Some(rewritten) => Verdict::PassAs(rewritten),
            None => Verdict::Pass,
        }
    }

    /// A well-formed message: a request must not reuse an id in flight, and
    /// runs under an alias if it reuses a cancelled one; a cancellation
    /// frees its id (rmcp sends no response to it).
    fn admit(&self, message: ClientJsonRpcMessage, line: &[u8]) -> Verdict {
        match message {
            JsonRpcMessage::Request(request) => {
                let id = serde_json::to_value(&request.id).unwrap_or(Value::Null);
                let key = id_key(&id);
                let kib = u32::try_from(line.len().div_ceil(1024)).unwrap_or(u32::MAX);
                let Ok(permit) = self.budget.clone().try_acquire_many_owned(kib.max(1)) else {
                    return Verdict::Reply(error_line(
                        &id,
                        SERVER_BUSY,
                        &format!(
                            "Server busy: the requests in flight hold {} MiB, the most this server keeps at once; retry once some are answered",
                            crate::mcp::BODIES_IN_FLIGHT >> 20
                        ),
                    ));
                };
                if self.in_flight.insert(key.clone()) {
                    self.held.insert(key.clone(), permit);
                    // Not only the first reuse: a cancelled call may still
                    // be ending when its id comes back a second time, and
                    // its end would take that request's place in rmcp.
                    if self.cancelled.contains(&key) {
                        return self.under_alias(line, id);
                    }
                    Verdict::Pass
                } else {
                    Verdict::Reply(error_line(
                        &id,
                        INVALID_REQUEST,
                        &format!(
                            "Invalid request: id {id} is already in flight; wait for its answer (or cancel it) before reusing it"
                        ),
                    ))
                }
            }
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                {
                    if let Some(id) = &cancelled.params.request_id {
                        if let Ok(id) = serde_json::to_value(id) {
                            return self.cancel(line, id);
                        }
                    }
                }
                Verdict::Pass
            }
            _ => Verdict::Pass,
        }
    }

    /// Why a line is not a message rmcp can take, as the answer to send.
    fn explain(&self, line: &[u8], typed: &serde_json::Error) -> Verdict {
        let value: Value = match serde_json::from_slice(line) {
            Ok(value) => value,
            Err(e) => {
                return Verdict::Reply(error_line(
                    &Value::Null,
                    PARSE_ERROR,
                    &format!("Parse error: {e}"),
                ))
            }
        };
        let reply = match &value {
            Value::Array(members) => {
                let message = "Invalid request: batches are not supported (MCP has no JSON-RPC batching since 2025-06-18); send each message on a line of its own";
                let mut out: Vec<u8> = members
                    .iter()
                    .filter_map(|m| m.get("id").filter(|id| usable_id(id)))
                    .flat_map(|id| error_line(id, INVALID_REQUEST, message))
                    .collect();
                if out.is_empty() {
                    out = error_line(&Value::Null, INVALID_REQUEST, message);
                }
                out
            }
            Value::Object(object) => {
                let id = object.get("id");
                let reply_id = id
                    .filter(|id| usable_id(id))
                    .cloned()
                    .unwrap_or(Value::Null);
                let problem = if object.get("jsonrpc") != Some(&json!("2.0")) {
                    "\"jsonrpc\" must be \"2.0\"".to_string()
                } else if id.is_some_and(|id| !usable_id(id)) {
                    "\"id\" must be a string or an integer".to_string()
                } else if object.get("method").is_some_and(|m| !m.is_string()) {
                    "\"method\" must be a string".to_string()
                } else if object.get("method").is_none()
                    && !object.contains_key("result")
                    && !object.contains_key("error")
                {
                    "a message needs \"method\" (a request or notification), or \"result\" or \"error\" (a response)".to_string()
                } else if id.is_none() {
                    // A notification rmcp cannot read gets no answer, as
                    // JSON-RPC has it; rmcp would drop it too.
                    tracing::debug!("dropped a notification rmcp cannot read: {typed}");
                    return Verdict::Skip;
                } else {
                    format!("the message does not match its method's schema: {typed}")
                };
                error_line(
                    &reply_id,
                    INVALID_REQUEST,
                    &format!("Invalid request: {problem}"),
                )
            }
            _ => error_line(
                &Value::Null,
                INVALID_REQUEST,
                "Invalid request: a message must be a JSON object",
            ),
        };
        Verdict::Reply(reply)
    }
}

/// JSON-RPC ids are strings or integers (null and fractions are not used).
/// `line` (one JSON message) as `edit` leaves it, every other member as it
/// was (in order); a newline ends it.
fn rewrite(line: &[u8], edit: impl FnOnce(&mut Value)) -> Option<Vec<u8>> {
    let mut message: Value = serde_json::from_slice(line).ok()?;
    edit(&mut message);
    let mut rewritten = serde_json::to_vec(&message).ok()?;
    rewritten.push(b'\n');
    Some(rewritten)
}

fn usable_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

fn id_key(id: &Value) -> String {
    id.to_string()
}

fn error_line(id: &Value, code: i64, message: &str) -> Vec<u8> {
    let mut line = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message},
    })
    .to_string()
    .into_bytes();
    line.push(b'\n');
    line
}

fn human_bytes(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// The top-level `"id"` of a JSON object of which only the first bytes are
/// at hand: walks the members in order, skipping each value, until `id` or
/// the end of what is there.
fn id_in_prefix(prefix: &[u8]) -> Option<Value> {
    let mut rest = prefix.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(prefix);
    let skip_ws = |s: &[u8]| -> usize { s.iter().take_while(|b| b.is_ascii_whitespace()).count() };
    rest = &rest[skip_ws(rest)..];
    rest = rest.strip_prefix(b"{")?;
    loop {
        rest = &rest[skip_ws(rest)..];
        let mut keys = serde_json::Deserializer::from_slice(rest).into_iter::<String>();
        let key = keys.next()?.ok()?;
        rest = &rest[keys.byte_offset()..];
        rest = &rest[skip_ws(rest)..];
        rest = rest.strip_prefix(b":")?;
        rest = &rest[skip_ws(rest)..];
        if key == "id" {
            let mut values = serde_json::Deserializer::from_slice(rest).into_iter::<Value>();
            return values.next()?.ok().filter(usable_id);
        }
        let mut values = serde_json::Deserializer::from_slice(rest).into_iter::<IgnoredAny>();
        values.next()?.ok()?;
        rest = &rest[values.byte_offset()..];
        rest = &rest[skip_ws(rest)..];
        rest = rest.strip_prefix(b",")?;
    }
}

/// Splits what stdin gives into lines of at most `limit` bytes; a longer
/// line is not kept (only its first bytes, to find its id).
pub(super) struct LineSplitter {
    limit: usize,
    line: Vec<u8>,
    /// Set while the current line is over the limit: its first bytes.
    oversized: Option<Vec<u8>>,
}

/// One line from [`LineSplitter`].
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Piece {
    Line(Vec<u8>),
    /// A line over the limit: its first bytes.
    Oversized(Vec<u8>),
}

impl LineSplitter {
    pub(super) fn new(limit: usize) -> LineSplitter {
        LineSplitter {
            limit,
            line: Vec::new(),
            oversized: None,
        }
    }

    /// Feeds bytes; calls `out` for every line they complete.
    pub(super) fn push(&mut self, mut data: &[u8], out: &mut impl FnMut(Piece)) {
        while !data.is_empty() {
            let newline = data.iter().position(|b| *b == b'\n');
            let (part, rest) = match newline {
                Some(at) => (&data[..at], &data[at + 1..]),
                None => (data, &[][..]),
            };
            match &mut self.oversized {
                Some(prefix) => {
                    let room = OVERSIZED_PREFIX.saturating_sub(prefix.len());
                    prefix.extend_from_slice(&part[..part.len().min(room)]);
                }
                None if self.line.len() + part.len() > self.limit => {
                    let mut prefix = std::mem::take(&mut self.line);
                    prefix.truncate(OVERSIZED_PREFIX);
                    let room = OVERSIZED_PREFIX.saturating_sub(prefix.len());
                    prefix.extend_from_slice(&part[..part.len().min(room)]);
                    self.oversized = Some(prefix);
                }
                None => self.line.extend_from_slice(part),
            }
            if newline.is_some() {
                out(self.take());
            }
            data = rest;
        }
    }

    /// At the end of input: the last line, when it has no newline.
    pub(super) fn finish(&mut self) -> Option<Piece> {
        (self.oversized.is_some() || !self.line.is_empty()).then(|| self.take())
    }

    fn take(&mut self) -> Piece {
        match self.oversized.take() {
            Some(prefix) => {
                self.line = Vec::new();
                Piece::Oversized(prefix)
            }
            None => Piece::Line(std::mem::take(&mut self.line)),
        }
    }
}

#[cfg(test)]
pub(in crate::mcp) mod tests;
