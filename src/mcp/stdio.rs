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

use std::future::Future;
use std::io::Read;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::ServiceExt;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{stop_signal, ServeError, ToolpoolServer};

/// How long rmcp may take to flush its last messages after the pool is down.
const TRANSPORT_DRAIN: Duration = Duration::from_secs(10);

pub(super) async fn serve(server: ToolpoolServer, grace: Duration) -> Result<(), ServeError> {
    let (reader, mut stdin_closed, release_eof) = StdinReader::spawn();
    let mut release_eof = Some(release_eof);
    let ct = CancellationToken::new();
    let stop = stop_signal();
    tokio::pin!(stop);

    let init = server
        .clone()
        .serve_with_ct((reader, tokio::io::stdout()), ct.clone());
    tokio::pin!(init);
    let running = loop {
        tokio::select! {
            running = &mut init => break running,
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
    Ok(())
}

/// stdin as an [`AsyncRead`], fed by a thread; its EOF is passed on only
/// once released.
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
    fn spawn() -> (StdinReader, oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (tx, chunks) = mpsc::channel::<Vec<u8>>(16);
        let spawned = std::thread::Builder::new()
            .name("toolpool-stdin".into())
            .spawn(move || {
                let stdin = std::io::stdin();
                let mut stdin = stdin.lock();
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match stdin.read(&mut buf) {
                        Ok(0) => return,
                        Ok(n) => {
                            if tx.blocking_send(buf[..n].to_vec()).is_err() {
                                return;
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            tracing::warn!("cannot read stdin: {e}");
                            return;
                        }
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
