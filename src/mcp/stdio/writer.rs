//! What the server sends on stdio, written by a thread of its own: each of
//! rmcp's messages is serialized straight into a 64 KiB buffer that goes to
//! stdout as it fills, so a result of tens of MiB is never encoded whole in
//! memory (a control character takes 6 bytes as JSON, and a typed result is
//! there twice: as text and as `structuredContent`). Each response takes its
//! id out of flight at the [`Gate`] as it is written, and goes out under the
//! client's own id where the gate gave its request an alias. The gate's own
//! answers, and the few rmcp writes as bytes, come as whole lines, and go
//! out between messages.

use std::future::Future;
use std::io::Write;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::task::{Context, Poll};

use rmcp::model::{ErrorData, JsonRpcMessage};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::Transport;
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::{CancellationToken, PollSender};

use super::gate::Gate;
use crate::mcp::splice::{SpliceWriter, Splices};

/// One thing to write to stdout.
pub(in crate::mcp) enum Out {
    /// A message of rmcp's, serialized as it is written.
    Message(Box<TxJsonRpcMessage<RoleServer>>),
    /// A whole line, its `\n` included: the gate's answer to a line it
    /// refused, or a protocol error rmcp wrote as bytes.
    Line(Vec<u8>),
    /// The end: written once everything sent before it is (the stdin
    /// thread may hold a sender for as long as stdin stays open).
    End,
}

/// How many messages may wait for stdout before rmcp waits in turn.
const QUEUED: usize = 64;
/// The write buffer: a message larger than this goes out in pieces of it.
const BUFFER: usize = 64 * 1024;

/// The channel to stdout, and the thread that writes it: `done` is told
/// once everything sent before [`Out::End`] (or before every sender was
/// dropped) is written, or stdout failed (then `stdout_gone` is cancelled).
/// `splices`: the large texts stood in for, written in their stand-ins'
/// place ([`SpliceWriter`]).
pub(in crate::mcp) fn spawn_writer(
    gate: Gate,
    stdout_gone: CancellationToken,
    splices: Splices,
) -> (mpsc::Sender<Out>, oneshot::Receiver<()>) {
    let (out, queue) = mpsc::channel(QUEUED);
    let (done_tx, done) = oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("toolpool-stdout".into())
        .spawn(move || {
            write_stdout(queue, &gate, &stdout_gone, &splices);
            let _ = done_tx.send(());
        });
    if let Err(e) = spawned {
        // The queue went with the closure: every send fails, as with a
        // stdout that is gone.
        tracing::error!("cannot start the stdout thread: {e}");
    }
    (out, done)
}

fn write_stdout(
    mut queue: mpsc::Receiver<Out>,
    gate: &Gate,
    stdout_gone: &CancellationToken,
    splices: &Splices,
) {
    let mut stdout = std::io::BufWriter::with_capacity(BUFFER, Stdout);
    while let Some(item) = queue.blocking_recv() {
        if matches!(item, Out::End) {
            break;
        }
        let mut written = write_one(&mut stdout, item, gate, splices);
        // Flushed once nothing else is waiting: a burst goes out together.
        if written.is_ok() && queue.is_empty() {
            written = stdout.flush();
        }
        if let Err(e) = written {
            tracing::info!("cannot write to stdout: {e}");
            stdout_gone.cancel();
            return;
        }
    }
    let _ = stdout.flush();
}

/// Writes `item` as one line; a response leaves flight here.
fn write_one(
    stdout: &mut impl Write,
    item: Out,
    gate: &Gate,
    splices: &Splices,
) -> std::io::Result<()> {
    let message = match item {
        Out::Line(line) => {
            // A line rmcp wrote may be a response too (an error of its own).
            return stdout.write_all(&gate.answered(&line).unwrap_or(line));
        }
        Out::Message(message) => message,
        Out::End => return Ok(()),
    };
    let original = match message.as_ref() {
        JsonRpcMessage::Response(response) => answered(gate, &response.id),
        JsonRpcMessage::Error(error) => error.id.as_ref().and_then(|id| answered(gate, id)),
        JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => None,
    };
    let mut spliced = SpliceWriter::new(stdout, splices);
    match (original, message.as_ref()) {
        (Some(id), JsonRpcMessage::Response(response)) => serde_json::to_writer(
            &mut spliced,
            &UnderId {
                jsonrpc: "2.0",
                id: &id,
                result: Some(&response.result),
                error: None,
            },
        ),
        (Some(id), JsonRpcMessage::Error(error)) => serde_json::to_writer(
            &mut spliced,
            &UnderId::<()> {
                jsonrpc: "2.0",
                id: &id,
                result: None,
                error: Some(&error.error),
            },
        ),
        _ => serde_json::to_writer(&mut spliced, &message),
    }
    .map_err(std::io::Error::from)?;
    spliced.finish()?;
    stdout.write_all(b"\n")
}

/// Takes the response's id out of flight: the client's own id when it was
/// an alias.
fn answered(gate: &Gate, id: &rmcp::model::RequestId) -> Option<Value> {
    let id = serde_json::to_value(id).ok()?;
    gate.answered_id(&id)
}

/// A response given back under the client's id, in rmcp's field order.
#[derive(Serialize)]
struct UnderId<'a, R: Serialize> {
    jsonrpc: &'static str,
    id: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a R>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorData>,
}

/// File descriptor 1, written without a buffer of std's (the writer has its
/// own); a stdout another process left non-blocking is waited for.
struct Stdout;

impl Write for Stdout {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        use nix::errno::Errno;
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let stdout = std::io::stdout();
        loop {
            match nix::unistd::write(stdout.as_fd(), bytes) {
                Ok(n) => return Ok(n),
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => {
                    let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::POLLOUT)];
                    poll(&mut fds, PollTimeout::NONE).map_err(std::io::Error::from)?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// rmcp's transport on stdio: messages read by rmcp's own line reader (from
/// the gate's [`AsyncRead`]), messages sent handed to the writer thread.
pub(in crate::mcp) struct StdioTransport<R: AsyncRead> {
    read: AsyncRwTransport<RoleServer, R, LineSender>,
    out: mpsc::Sender<Out>,
}

impl<R: AsyncRead + Send + Unpin> StdioTransport<R> {
    /// `max_line`: the longest line rmcp reads (the gate refused longer).
    pub(in crate::mcp) fn new(reader: R, out: mpsc::Sender<Out>, max_line: usize) -> Self {
        let read = AsyncRwTransport::new_server(reader, LineSender::new(out.clone()))
            .with_max_line_length(max_line);
        StdioTransport { read, out }
    }
}

impl<R: AsyncRead + Send + Unpin> Transport<RoleServer> for StdioTransport<R> {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let out = self.out.clone();
        async move {
            out.send(Out::Message(Box::new(item)))
                .await
                .map_err(|_| stdout_closed())
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.read.receive()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.read.close().await
    }
}

fn stdout_closed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdout is closed")
}

/// The bytes rmcp's reader writes (an "Invalid request" error for a
/// message of the wrong shape), passed on a whole line at a time.
pub(in crate::mcp) struct LineSender {
    out: PollSender<Out>,
    pending: Vec<u8>,
    /// Whole lines of `pending` not yet sent.
    whole: usize,
}

impl LineSender {
    fn new(out: mpsc::Sender<Out>) -> Self {
        LineSender {
            out: PollSender::new(out),
            pending: Vec::new(),
            whole: 0,
        }
    }
}

impl AsyncWrite for LineSender {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.pending.extend_from_slice(bytes);
        if let Some(end) = this.pending.iter().rposition(|&b| b == b'\n') {
            this.whole = end + 1;
        }
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        while this.whole > 0 {
            if std::task::ready!(this.out.poll_reserve(cx)).is_err() {
                return Poll::Ready(Err(stdout_closed()));
            }
            let rest = this.pending.split_off(this.whole);
            let line = std::mem::replace(&mut this.pending, rest);
            this.whole = 0;
            if this.out.send_item(Out::Line(line)).is_err() {
                return Poll::Ready(Err(stdout_closed()));
            }
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.poll_flush(cx)
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{JsonRpcResponse, JsonRpcVersion2_0, NumberOrString, ServerResult};
    use serde_json::json;

    use super::*;
    use crate::mcp::stdio::gate::tests::reused_under_alias;
    use crate::mcp::stdio::gate::Verdict;

    fn response(id: NumberOrString) -> Out {
        Out::Message(Box::new(JsonRpcMessage::Response(JsonRpcResponse {
            jsonrpc: JsonRpcVersion2_0,
            id,
            result: ServerResult::empty(()),
        })))
    }

    fn written(item: Out, gate: &Gate) -> Value {
        let mut bytes = Vec::new();
        write_one(&mut bytes, item, gate, &Splices::once()).unwrap();
        assert_eq!(bytes.pop(), Some(b'\n'));
        serde_json::from_slice(&bytes).unwrap()
    }

    /// A response to a request the gate renamed goes out under the client's
    /// id; every written response's id leaves flight (the client may use it
    /// again).
    #[test]
    fn responses_go_out_under_the_clients_id_and_land() {
        let gate = Gate::new(1 << 20);
        let (alias, _) = reused_under_alias(&gate);
        let b = br#"{"jsonrpc":"2.0","id":"b","method":"ping"}"#;
        assert_eq!(gate.line(b), Verdict::Pass);
        let alias = serde_json::from_value::<NumberOrString>(alias).unwrap();
        assert_eq!(
            written(response(alias), &gate),
            json!({"jsonrpc": "2.0", "id": 700, "result": {}})
        );
        assert_eq!(
            written(response(NumberOrString::String("b".into())), &gate),
            json!({"jsonrpc": "2.0", "id": "b", "result": {}})
        );
        for id in [&br#""b""#[..], b"700"] {
            let again = [
                &br#"{"jsonrpc":"2.0","id":"#[..],
                id,
                br#","method":"ping"}"#,
            ]
            .concat();
            assert!(!matches!(gate.line(&again), Verdict::Reply(_)));
        }
    }

    /// A line is written as it is, and its response id lands too.
    #[test]
    fn lines_go_out_as_they_are() {
        let gate = Gate::new(1 << 20);
        let line =
            b"{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32600,\"message\":\"x\"}}\n".to_vec();
        let mut bytes = Vec::new();
        write_one(&mut bytes, Out::Line(line.clone()), &gate, &Splices::once()).unwrap();
        assert_eq!(bytes, line);
    }
}
