//! MCP over stdio: JSON-RPC messages on stdin and stdout, one client.
//!
//! stdin is read by a plain thread of its own, not by Tokio's blocking pool:
//! a blocking read cannot be cancelled, and a runtime waits for its blocking
//! tasks when it shuts down, so after SIGTERM the process would hang until the
//! client wrote something or closed stdin.
//!
//! The end of stdin is the client saying goodbye, but calls in flight still
//! deserve their answers (the client may only have closed its writing end).
//! So the reader holds the EOF back from rmcp until the pool has finished or
//! killed those calls and their results have been handed to the transport.
//!
//! Every line read is judged by a [`Gate`] before rmcp gets it: bad input is
//! answered with a JSON-RPC error there (rmcp would drop it silently), and a
//! line over the frame limit (64 MiB) is never held in memory. A writer
//! thread ([`writer`]) serializes rmcp's messages to stdout a
//! buffer at a time, the gate's answers between them, and tells the gate
//! which ids got their response. When stdout goes away (the client closed
//! it, or a write fails), the server shuts down and exits even if stdin
//! stays open.

mod gate;
#[cfg(not(feature = "http"))]
pub(super) mod sessions;
mod writer;

use std::future::Future;
use std::io::Read;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::ServiceExt;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{ServeError, ToolpoolServer};
use crate::protocol::DEFAULT_MAX_FRAME;
use gate::{Gate, LineSplitter, Piece, Verdict};
use writer::{spawn_writer, Out, StdioTransport};

use super::splice::Splices;
use super::SessionCalls;

/// How long rmcp may take to flush its last messages after the pool is down.
const TRANSPORT_DRAIN: Duration = Duration::from_secs(10);

pub(super) async fn serve(server: ToolpoolServer, grace: Duration) -> Result<(), ServeError> {
    let gate = Gate::new(DEFAULT_MAX_FRAME);
    let stdout_gone = CancellationToken::new();
    watch_stdout(stdout_gone.clone());
    // Large texts go out in their stand-ins' place, never encoded whole.
    let splices = Splices::once();
    let server = server.with_session(SessionCalls::with_splices(splices.clone()));
    let (out, written) = spawn_writer(gate.clone(), stdout_gone.clone(), splices);
    let (reader, mut stdin_closed, release_eof) = StdinReader::spawn(gate.clone(), out.clone());
    let mut release_eof = Some(release_eof);
    let ct = CancellationToken::new();
    let requests = server.inner.stop.clone();
    let stop = requests.first();
    tokio::pin!(stop);

    // The gate already refused longer lines; rmcp's own cap (16 MiB by
    // default) must not drop the ones it let through.
    let end = out.clone();
    let transport = StdioTransport::new(reader, out, gate.limit() + 2);
    let init = server.clone().serve_with_ct(transport, ct.clone());
    tokio::pin!(init);
    let running = loop {
        tokio::select! {
            running = &mut init => break running,
            _ = stdout_gone.cancelled() => {
                tracing::info!("stdout closed before the handshake: exiting");
                ct.cancel();
                server.shut_down(Duration::ZERO).await;
                return Ok(());
            }
            // Nothing runs before the handshake: let the EOF through at once.
            _ = &mut stdin_closed, if release_eof.is_some() => {
                if let Some(release) = release_eof.take() {
                    let _ = release.send(());
                }
            }
            _ = &mut stop => {
                ct.cancel();
                server.shut_down(grace).await;
                return Ok(());
            }
        }
    };
    let running = match running {
        Ok(running) => running,
        Err(error) => {
            tracing::warn!("the MCP client went away before initializing: {error}");
            server.shut_down(Duration::ZERO).await;
            return Ok(());
        }
    };
    tracing::info!("serving MCP on stdio");

    let waiting = running.waiting();
    tokio::pin!(waiting);
    tokio::select! {
        _ = stdout_gone.cancelled() => {
            // Nothing can reach the client any more: kill the calls at once.
            tracing::info!("stdout closed by the client: shutting down");
            server.shut_down(Duration::ZERO).await;
            ct.cancel();
        }
        quit = &mut waiting => {
            // The transport ended by itself (stdout closed, a read error).
            tracing::info!("MCP transport ended: {quit:?}");
            server.shut_down(grace).await;
            return Ok(());
        }
        _ = &mut stdin_closed, if release_eof.is_some() => {
            tracing::info!("stdin closed by the client");
            server.shut_down_after_eof(grace).await;
            if let Some(release) = release_eof.take() {
                let _ = release.send(());
            }
        }
        _ = &mut stop => {
            server.shut_down(grace).await;
            ct.cancel();
        }
    }
    match tokio::time::timeout(TRANSPORT_DRAIN, &mut waiting).await {
        Ok(quit) => tracing::debug!("MCP transport ended: {quit:?}"),
        Err(_) => tracing::warn!("the MCP transport did not finish flushing in time"),
    }
    // rmcp is done sending: the writer writes what came before the end and
    // stops (the stdin thread may still hold a sender, for its replies).
    let drained = async {
        let _ = end.send(Out::End).await;
        let _ = written.await;
    };
    if tokio::time::timeout(TRANSPORT_DRAIN, drained)
        .await
        .is_err()
    {
        tracing::warn!("stdout did not take the last messages in time");
    }
    Ok(())
}

/// Cancels `stdout_gone` when stdout can no longer be written: a pipe whose
/// reader closed it, a socket shut down (the kernel reports POLLERR or
/// POLLHUP). A thread, since it waits with no deadline.
fn watch_stdout(stdout_gone: CancellationToken) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let spawned = std::thread::Builder::new()
        .name("toolpool-stdout-watch".into())
        .spawn(move || {
            let stdout = std::io::stdout();
            loop {
                // No events asked for: only errors and hang-ups wake it.
                let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::empty())];
                match poll(&mut fds, PollTimeout::NONE) {
                    Ok(_) => {
                        let gone = fds[0].revents().is_some_and(|r| {
                            r.intersects(
                                PollFlags::POLLERR | PollFlags::POLLHUP | PollFlags::POLLNVAL,
                            )
                        });
                        if gone {
                            stdout_gone.cancel();
                            return;
                        }
                    }
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => {
                        tracing::debug!("cannot watch stdout: {e}");
                        return;
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the stdout watcher: {e}");
    }
}

/// stdin as an [`AsyncRead`], fed by a thread with the lines the gate lets
/// through; its EOF is passed on only once released.
struct StdinReader {
    chunks: mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    pos: usize,
    /// Told once when stdin reaches its end (or fails).
    closed: Option<oneshot::Sender<()>>,
    at_eof: bool,
    /// EOF is reported to the reader's user once this resolves.
    release: oneshot::Receiver<()>,
    released: bool,
}

impl StdinReader {
    /// The reader, a receiver told when stdin ends, and the sender that
    /// releases the EOF.
    /// Lines the gate refuses are answered through `replies`.
    fn spawn(
        gate: Gate,
        replies: mpsc::Sender<Out>,
    ) -> (StdinReader, oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (tx, chunks) = mpsc::channel::<Vec<u8>>(16);
        let spawned = std::thread::Builder::new()
            .name("toolpool-stdin".into())
            .spawn(move || {
                let stdin = std::io::stdin();
                let mut stdin = stdin.lock();
                let mut buf = vec![0u8; 64 * 1024];
                let mut lines = LineSplitter::new(gate.limit());
                // False once rmcp or the writer is gone: nothing to feed.
                let open = std::cell::Cell::new(true);
                let mut judge = |piece: Piece| {
                    let sent = match piece {
                        Piece::Line(mut line) => match gate.line(&line) {
                            Verdict::Pass => {
                                line.push(b'\n');
                                tx.blocking_send(line).is_ok()
                            }
                            Verdict::PassAs(instead) => tx.blocking_send(instead).is_ok(),
                            Verdict::Reply(reply) => {
                                replies.blocking_send(Out::Line(reply)).is_ok()
                            }
                            Verdict::Skip => true,
                        },
                        Piece::Oversized(prefix) => {
                            tracing::warn!(
                                limit = gate.limit(),
                                "refused a message over the size limit"
                            );
                            replies
                                .blocking_send(Out::Line(gate.oversized(&prefix)))
                                .is_ok()
                        }
                    };
                    open.set(open.get() && sent);
                };
                loop {
                    match stdin.read(&mut buf) {
                        Ok(0) => {
                            if let Some(last) = lines.finish() {
                                judge(last);
                            }
                            return;
                        }
                        Ok(n) => lines.push(&buf[..n], &mut judge),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            tracing::warn!("cannot read stdin: {e}");
                            return;
                        }
                    }
                    if !open.get() {
                        return;
                    }
                }
            });
        if let Err(e) = spawned {
            // The sender went with the closure: the reader sees EOF at once.
            tracing::error!("cannot start the stdin thread: {e}");
        }
        let (closed_tx, closed_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel();
        let reader = StdinReader {
            chunks,
            chunk: Vec::new(),
            pos: 0,
            closed: Some(closed_tx),
            at_eof: false,
            release: release_rx,
            released: false,
        };
        (reader, closed_rx, release_tx)
    }
}

impl AsyncRead for StdinReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.pos < this.chunk.len() {
                let n = buf.remaining().min(this.chunk.len() - this.pos);
                buf.put_slice(&this.chunk[this.pos..this.pos + n]);
                this.pos += n;
                return Poll::Ready(Ok(()));
            }
            if this.at_eof {
                if !this.released {
                    // Ready on release, and also when the releasing side is
                    // gone: either way nothing holds the EOF any more.
                    if Pin::new(&mut this.release).poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    this.released = true;
                }
                return Poll::Ready(Ok(()));
            }
            match this.chunks.poll_recv(cx) {
                Poll::Ready(Some(chunk)) => {
                    this.chunk = chunk;
                    this.pos = 0;
                }
                Poll::Ready(None) => {
                    this.at_eof = true;
                    if let Some(closed) = this.closed.take() {
                        let _ = closed.send(());
                    }
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
