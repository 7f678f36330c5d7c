//! What every HTTP front end (`serve --http`, `serve --metrics`) does to a
//! connection: a cap on connections open at once, a time limit for a
//! request's header and a least rate for its body, so that clients that
//! connect and then send half a request (or nothing) cannot hold sockets and
//! memory; and no Nagle delay, so an answer written in pieces (an SSE
//! stream) does not wait for the client's delayed ACK.

use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::TokioTimer;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a client has to send a whole request header, from the moment
/// the server starts waiting for one (also between requests on a kept-alive
/// connection): past it the connection is closed.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A request body may take this long whatever its size...
pub(crate) const BODY_GRACE: Duration = Duration::from_secs(10);
/// ...and then must keep up this many bytes a second on average.
pub(crate) const BODY_MIN_RATE: u64 = 64 * 1024;

/// Serves HTTP/1 on `stream` with the header timeout in force and
/// `TCP_NODELAY` set; returns when the connection ends. Once `closing`
/// resolves, the response being sent is finished and the connection closed
/// (an idle kept-alive one at once), as a server that stops does.
pub(crate) async fn serve_connection<S, B>(
    stream: TcpStream,
    service: S,
    closing: impl std::future::Future<Output = ()>,
) -> hyper::Result<()>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // Without it the second piece of a response waits ~40 ms for the ACK
    // of the first (Nagle and delayed ACK); failing to set it is not fatal.
    let _ = stream.set_nodelay(true);
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(hyper_util::rt::TokioIo::new(QuickAck(stream)), service);
    tokio::pin!(connection, closing);
    tokio::select! {
        served = connection.as_mut() => return served,
        () = &mut closing => {}
    }
    connection.as_mut().graceful_shutdown();
    connection.await
}

/// A connection that acknowledges what it reads at once. A client that
/// leaves Nagle's algorithm on and writes a request in two pieces (headers,
/// then body) holds the second until the first is acknowledged; with
/// delayed ACKs that is ~40 ms per request. `TCP_QUICKACK` is not sticky
/// (the kernel goes back to delaying), so it is set again after each read
/// that brought data: setting it sends the pending ACK.
struct QuickAck(TcpStream);

impl tokio::io::AsyncRead for QuickAck {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = std::pin::Pin::new(&mut self.0).poll_read(cx, buf);
        if matches!(read, std::task::Poll::Ready(Ok(()))) && buf.filled().len() > before {
            // Failing to set it costs latency, not correctness.
            let _ = socket2::SockRef::from(&self.0).set_tcp_quickack(true);
        }
        read
    }
}

impl tokio::io::AsyncWrite for QuickAck {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write_vectored(cx, data)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Why a request body could not be read whole.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("the request body is over {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the request body came too slowly: {received} bytes in {seconds:.0} s (a body may take {grace} s, then must keep up {rate} KiB/s)", grace = BODY_GRACE.as_secs(), rate = BODY_MIN_RATE / 1024)]
    TooSlow { received: usize, seconds: f64 },
    #[error("the request body could not be read: {0}")]
    Broken(String),
}

/// Reads `body` whole: at most `limit` bytes, arriving no slower than
/// [`BODY_MIN_RATE`] after [`BODY_GRACE`] (measured from the first byte
/// asked for, so a client trickling bytes is cut off as one sending half a
/// header is). `expected`: the Content-Length, to allocate once.
pub(crate) async fn read_body<B>(
    body: B,
    limit: usize,
    expected: Option<u64>,
) -> Result<hyper::body::Bytes, BodyError>
where
    B: hyper::body::Body<Data = hyper::body::Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    use http_body_util::BodyExt;
    if expected.is_some_and(|length| length > limit as u64) {
        return Err(BodyError::TooLarge { limit });
    }
    let started = tokio::time::Instant::now();
    let mut body = body;
    let mut bytes = Vec::with_capacity(expected.map_or(0, |length| length as usize).min(limit));
    loop {
        let allowed =
            BODY_GRACE + Duration::from_secs_f64(bytes.len() as f64 / BODY_MIN_RATE as f64);
        let frame = match tokio::time::timeout_at(started + allowed, body.frame()).await {
            Err(_) => {
                return Err(BodyError::TooSlow {
                    received: bytes.len(),
                    seconds: started.elapsed().as_secs_f64(),
                })
            }
            Ok(None) => return Ok(bytes.into()),
            Ok(Some(Err(e))) => return Err(BodyError::Broken(e.to_string())),
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > limit {
                return Err(BodyError::TooLarge { limit });
            }
            bytes.extend_from_slice(&data);
        }
    }
}

/// At most `max` connections open at once; one past that is answered 503
/// and closed.
#[derive(Clone)]
pub(crate) struct ConnectionCap {
    permits: Arc<Semaphore>,
    max: usize,
    /// What the 503 says (names the option that sets the cap).
    what: &'static str,
}

impl ConnectionCap {
    pub(crate) fn new(max: usize, what: &'static str) -> ConnectionCap {
        ConnectionCap {
            permits: Arc::new(Semaphore::new(max)),
            max,
            what,
        }
    }

    /// Answers a connection over the cap with 503 and closes it.
    pub(crate) fn refuse(&self, mut stream: TcpStream) {
        let body = format!(
            "too many connections: this server keeps at most {} open at once ({})\n",
            self.max, self.what
        );
        tracing::warn!("refused a connection: {} open, the cap", self.max);
        tokio::spawn(async move {
            let response = format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            })
            .await;
        });
    }

    /// A permit for one more connection, if the cap allows.
    pub(crate) fn try_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }
}
