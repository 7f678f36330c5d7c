//! A worker's stderr: logged line by line, tagged with the call running,
//! and its tail kept to explain a failed start.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

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
struct StderrTail(VecDeque<u8>);

impl StderrTail {
    fn push_line(&mut self, line: &[u8]) {
        self.0.extend(line);
        self.0.push_back(b'\n');
        let excess = self.0.len().saturating_sub(STDERR_TAIL_BYTES);
        self.0.drain(..excess);
    }

    fn text(&self) -> StderrText {
        let (a, b) = self.0.as_slices();
        StderrText(String::from_utf8_lossy(&[a, b].concat()).into_owned())
    }
}

/// A worker's stderr, logged line by line and tagged with the call whose
/// output it is. Read by the pump task as it arrives and, once a call has
/// answered, by the actor to the pipe's end: the shim flushes a call's
/// output before it writes the reply, so after the reply everything the
/// call printed is in the pipe or already logged, and the kernel (a read
/// that finds the pipe empty) says when it is all logged. The call's tag
/// ends only then, whenever the pump happens to run.
pub(super) struct StderrLog {
    pipe: pipe::Receiver,
    /// The guardian's pid, for the log's `worker` field.
    worker: u32,
    /// Bytes read and not yet logged (a line without its newline). Held
    /// while reading and logging, so that whoever holds it has logged all
    /// it read: the actor ends a call's tag holding it.
    unlogged: tokio::sync::Mutex<Vec<u8>>,
    /// The call whose output is read now: named by the handle before its
    /// request is written, ended by the actor once its output is logged.
    current: Mutex<Option<String>>,
    /// Its last lines, to explain a failed start.
    tail: Mutex<StderrTail>,
}

/// What a call's end reads at most: a tool's leftover that writes
/// without end must not keep the actor reading (that worker is killed as
/// soon as the leftover is seen).
const END_READ_LIMIT: usize = 1 << 20;

/// One read of the pipe.
const READ_CHUNK: usize = 8 * 1024;

impl StderrLog {
    pub(super) fn new(pipe: pipe::Receiver, worker: u32) -> Self {
        StderrLog {
            pipe,
            worker,
            unlogged: tokio::sync::Mutex::new(Vec::new()),
            current: Mutex::new(None),
            tail: Mutex::default(),
        }
    }

    /// The last bytes the worker wrote, for an error message.
    pub(super) fn tail_text(&self) -> StderrText {
        self.tail.lock().map(|t| t.text()).unwrap_or_default()
    }

    /// Names the call (`tool#id`) whose request is about to be written.
    pub(super) fn name(&self, tag: String) {
        if let Ok(mut current) = self.current.lock() {
            *current = Some(tag);
        }
    }

    /// After a call's reply: logs what it printed that the pump has not
    /// (to the pipe's end, and a last line without its newline), then
    /// ends its tag. Its worker is idle: nothing else writes there now but
    /// what the call left running.
    pub(super) async fn end_call(&self) {
        let mut unlogged = self.unlogged.lock().await;
        let mut buffer = [0u8; READ_CHUNK];
        let mut read_in_all = 0;
        while read_in_all < END_READ_LIMIT {
            // Straight from the kernel: tokio's readiness may not have seen
            // the bytes yet, and would answer "would block" without reading.
            match read_now(&self.pipe, &mut buffer) {
                Ok(0) => break,
                Ok(read) => {
                    read_in_all += read;
                    self.log_lines(&mut unlogged, &buffer[..read]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break, // empty (would block) or closed
            }
        }
        self.log_unfinished(&mut unlogged);
        if let Ok(mut current) = self.current.lock() {
            *current = None;
        }
    }

    /// The pump: logs the worker's stderr as it arrives, until it closes.
    pub(super) async fn pump(self: Arc<Self>) {
        while self.pipe.readable().await.is_ok() && self.read_some().await {}
        self.log_unfinished(&mut *self.unlogged.lock().await);
    }

    /// Logs a last line the worker wrote without its newline.
    fn log_unfinished(&self, unlogged: &mut Vec<u8>) {
        if !unlogged.is_empty() {
            let line = std::mem::take(unlogged);
            self.log_line(&line);
        }
    }

    /// One read of what the pipe holds, logged; `false` once it closed.
    async fn read_some(&self) -> bool {
        let mut unlogged = self.unlogged.lock().await;
        let mut buffer = [0u8; READ_CHUNK];
        match self.pipe.try_io(|| read_now(&self.pipe, &mut buffer)) {
            Ok(0) => false,
            Ok(read) => {
                self.log_lines(&mut unlogged, &buffer[..read]);
                true
            }
            Err(e) => matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
            ),
        }
    }

    /// Logs every whole line of `unlogged` + `bytes` (and pieces of
    /// `STDERR_LINE_MAX` of a longer one); keeps the rest.
    fn log_lines(&self, unlogged: &mut Vec<u8>, bytes: &[u8]) {
        unlogged.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(end) = unlogged[start..].iter().position(|&b| b == b'\n') {
            let end = start + end;
            self.log_pieces(&unlogged[start..end]);
            start = end + 1;
        }
        // A tool writing gigabytes without a newline is logged in pieces.
        while unlogged.len() - start >= STDERR_LINE_MAX {
            self.log_line(&unlogged[start..start + STDERR_LINE_MAX]);
            start += STDERR_LINE_MAX;
        }
        unlogged.drain(..start);
    }

    fn log_pieces(&self, line: &[u8]) {
        if line.is_empty() {
            self.log_line(line);
        }
        for piece in line.chunks(STDERR_LINE_MAX) {
            self.log_line(piece);
        }
    }

    fn log_line(&self, line: &[u8]) {
        if let Ok(mut tail) = self.tail.lock() {
            tail.push_line(line);
        }
        let call = self.current.lock().ok().and_then(|current| current.clone());
        let text = String::from_utf8_lossy(line);
        // Logs end up on terminals: a tool's `\r` or escape sequence is shown, not obeyed.
        let text = crate::control_chars::escape_controls(&text);
        let worker = self.worker;
        match call {
            Some(call) => {
                tracing::info!(target: "toolpool::tool_output", worker, call = %call, "{text}")
            }
            None => tracing::info!(target: "toolpool::tool_output", worker, "{text}"),
        }
    }
}

/// One `read(2)` of the (non-blocking) pipe.
fn read_now(pipe: &pipe::Receiver, buffer: &mut [u8]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: the fd is the pipe's, open while `pipe` is borrowed; the
    // kernel writes at most `buffer.len()` bytes into `buffer`.
    let read = unsafe {
        libc::read(
            pipe.as_raw_fd(),
            buffer.as_mut_ptr().cast::<libc::c_void>(),
            buffer.len(),
        )
    };
    if read < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(read as usize)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::StderrLog;

    /// The log's text, as a subscriber writes it.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// `(call, line)` of each tool output line logged.
    fn tagged_lines(captured: &Captured) -> Vec<(String, String)> {
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .filter_map(|line| {
                let rest = line.split("toolpool::tool_output: ").nth(1)?;
                let (text, fields) = rest.split_once(" worker=")?;
                let call = fields.split(" call=").nth(1).unwrap_or("-").to_string();
                Some((call, text.to_string()))
            })
            .collect()
    }

    /// A worker's stderr as the shim writes it: `writes` of each call, in
    /// order, then its reply; the pump reads at whatever points
    /// `pump_reads[i]` says (how many reads it makes after write `i`).
    async fn run_calls(calls: &[&[&[u8]]], pump_reads: &[usize]) -> Vec<(String, String)> {
        let (receiver, sender) = std::io::pipe().unwrap();
        let mut sender = std::fs::File::from(std::os::fd::OwnedFd::from(sender));
        let receiver = std::os::fd::OwnedFd::from(receiver);
        nix::fcntl::fcntl(
            &receiver,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .unwrap();
        let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(receiver).unwrap();
        let log = StderrLog::new(pipe, 7);
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let mut step = 0;
        for (index, writes) in calls.iter().enumerate() {
            log.name(format!("tool#{}", index + 1));
            for write in writes.iter() {
                sender.write_all(write).unwrap();
                for _ in 0..pump_reads[step % pump_reads.len()] {
                    // As the pump does: a read once the pipe is readable
                    // (an empty pipe would not wake it).
                    if crate::worker::request::unread_in_pipe(&log.pipe).unwrap_or(0) > 0 {
                        log.pipe.readable().await.unwrap();
                        log.read_some().await;
                    }
                }
                step += 1;
            }
            // The reply: read by the actor, which then ends the call.
            log.end_call().await;
        }
        tagged_lines(&captured)
    }

    #[tokio::test]
    async fn every_line_is_tagged_with_the_call_that_wrote_it_however_the_pump_reads() {
        let calls: &[&[&[u8]]] = &[
            &[b"one\n", b"two, in ", b"two writes\nthree\n"],
            &[],
            &[b"four\n", b"five without a newline"],
            &[b"six\n"],
        ];
        let expected: Vec<(String, String)> = [
            ("tool#1", "one"),
            ("tool#1", "two, in two writes"),
            ("tool#1", "three"),
            ("tool#3", "four"),
            ("tool#3", "five without a newline"),
            ("tool#4", "six"),
        ]
        .iter()
        .map(|(call, text)| (call.to_string(), text.to_string()))
        .collect();
        // The pump reads 0, 1 or 2 times after each of the six writes: every
        // interleaving of its reads with the writes and the calls' ends.
        for schedule in 0..3usize.pow(6) {
            let reads: Vec<usize> = (0..6).map(|i| schedule / 3usize.pow(i) % 3).collect();
            let logged = run_calls(calls, &reads).await;
            assert_eq!(logged, expected, "pump reads after each write: {reads:?}");
        }
    }

    #[tokio::test]
    async fn a_long_line_is_logged_in_pieces() {
        let long = vec![b'y'; super::STDERR_LINE_MAX * 2 + 5];
        let mut line = long.clone();
        line.push(b'\n');
        let logged = run_calls(&[&[&line]], &[1]).await;
        let lengths: Vec<usize> = logged.iter().map(|(_, text)| text.len()).collect();
        assert_eq!(lengths, [super::STDERR_LINE_MAX, super::STDERR_LINE_MAX, 5]);
        assert!(logged.iter().all(|(call, _)| call == "tool#1"));
    }
}
