//! A worker's stderr: logged line by line, tagged with the call running,
//! and its tail kept to explain a failed start.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::unix::pipe;

use super::{STDERR_LINE_MAX, STDERR_TAIL_BYTES};

/// A worker's last stderr output, shown after an error message.
#[derive(Debug, Default)]
pub struct StderrText(pub String);

impl std::fmt::Display for StderrText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.0.trim_end();
        if text.is_empty() {
            write!(f, " (it wrote nothing to stderr)")
        } else {
            write!(f, "; its stderr:\n{text}")
        }
    }
}

/// The last bytes a worker wrote to stderr.
#[derive(Default)]
pub(super) struct StderrTail(VecDeque<u8>);

impl StderrTail {
    fn push_line(&mut self, line: &[u8]) {
        self.0.extend(line);
        self.0.push_back(b'\n');
        let excess = self.0.len().saturating_sub(STDERR_TAIL_BYTES);
        self.0.drain(..excess);
    }

    pub(super) fn text(&self) -> StderrText {
        let (a, b) = self.0.as_slices();
        StderrText(String::from_utf8_lossy(&[a, b].concat()).into_owned())
    }
}

/// What the stderr pump tags tool output with. The worker marks where each
/// request's output ends on stderr itself (`_mark_end` in the shim's
/// worker.py), and the handle names each request before it is written; a
/// worker runs one request at a time, so a line belongs to the oldest
/// request named and not yet ended, however late the pump reads it.
#[derive(Clone, Default)]
pub(super) struct CallTags(Arc<Mutex<Tags>>);

#[derive(Default)]
struct Tags {
    /// Requests written and not yet ended on stderr: their tags, by id (ids
    /// grow, so the first is the oldest).
    named: std::collections::BTreeMap<u64, String>,
}

/// The start of an end marker line (then the request's id).
const END_MARKER: &[u8] = b"\x1e\x1etoolpool-call end ";

impl CallTags {
    /// Names request `id` (`tool#id`) before it is written.
    pub(super) fn name(&self, id: u64, tag: String) {
        if let Ok(mut tags) = self.0.lock() {
            tags.named.insert(id, tag);
        }
    }

    /// An end marker ends its request (and any older one, which ended
    /// without its marker); `true` when `line` was one (not logged).
    fn follow(&self, line: &[u8]) -> bool {
        let Some(id) = line
            .strip_prefix(END_MARKER)
            .and_then(|id| std::str::from_utf8(id).ok()?.parse::<u64>().ok())
        else {
            return false;
        };
        if let Ok(mut tags) = self.0.lock() {
            tags.named = tags.named.split_off(&(id + 1));
        }
        true
    }

    /// The tag of the request whose output the pump reads now.
    fn current(&self) -> Option<String> {
        let tags = self.0.lock().ok()?;
        tags.named.values().next().cloned()
    }
}

/// Logs a worker's stderr line by line (tagged with the call) and keeps its tail.
pub(super) async fn pump_stderr(
    stderr: pipe::Receiver,
    guardian_pid: u32,
    tail: Arc<Mutex<StderrTail>>,
    tags: CallTags,
) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        // Bounded: a tool writing gigabytes without a newline is logged in pieces.
        let read = (&mut reader)
            .take(STDERR_LINE_MAX as u64)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        if tags.follow(text) {
            continue;
        }
        if let Ok(mut tail) = tail.lock() {
            tail.push_line(text);
        }
        let call = tags.current();
        let text = String::from_utf8_lossy(text);
        // Logs end up on terminals: a tool's `\r` or escape sequence is shown, not obeyed.
        let text = crate::control_chars::escape_controls(&text);
        match call {
            Some(call) => {
                tracing::info!(target: "toolpool::tool_output", worker = guardian_pid, call = %call, "{text}")
            }
            None => {
                tracing::info!(target: "toolpool::tool_output", worker = guardian_pid, "{text}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CallTags;

    #[test]
    fn lines_are_tagged_by_the_markers_in_the_stream_not_by_when_they_are_read() {
        let tags = CallTags::default();
        assert_eq!(tags.current(), None);
        tags.name(1, "slow#1".into());
        assert_eq!(tags.current().as_deref(), Some("slow#1"));
        // Request 2 is already named (written), but a line of request 1
        // read now is still request 1's.
        tags.name(2, "next#2".into());
        assert!(!tags.follow(b"a line the tool printed"));
        assert_eq!(tags.current().as_deref(), Some("slow#1"));
        assert!(tags.follow(b"\x1e\x1etoolpool-call end 1"));
        assert_eq!(tags.current().as_deref(), Some("next#2"));
        // An end marker also ends older requests that never wrote theirs.
        tags.name(3, "third#3".into());
        assert!(tags.follow(b"\x1e\x1etoolpool-call end 3"));
        assert_eq!(tags.current(), None);
        // Not a marker: a near miss is an ordinary line.
        assert!(!tags.follow(b"\x1e\x1etoolpool-call end x"));
    }
}
