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

/// What the stderr pump tags tool output with: the call running now.
pub(super) type CallTag = Arc<Mutex<Option<String>>>;

/// Logs a worker's stderr line by line (tagged with the call) and keeps its tail.
pub(super) async fn pump_stderr(
    stderr: pipe::Receiver,
    guardian_pid: u32,
    tail: Arc<Mutex<StderrTail>>,
    tag: CallTag,
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
        if let Ok(mut tail) = tail.lock() {
            tail.push_line(text);
        }
        let call = tag.lock().ok().and_then(|t| t.clone());
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
