//! What every HTTP front end (`serve --http`, `serve --metrics`) does to a
//! connection before it reads a request: a cap on connections open at once
//! and a time limit for a request's header, so that clients that connect and
//! then send half a header (or nothing) cannot hold sockets and memory.

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
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// An HTTP/1 connection builder with the header timeout in force.
pub fn http1_builder() -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
}

/// At most `max` connections open at once; one past that is answered 503
/// and closed.
#[derive(Clone)]
pub struct ConnectionCap {
    permits: Arc<Semaphore>,
    max: usize,
    /// What the 503 says (names the option that sets the cap).
    what: &'static str,
}

impl ConnectionCap {
    pub fn new(max: usize, what: &'static str) -> ConnectionCap {
        ConnectionCap {
            permits: Arc::new(Semaphore::new(max)),
            max,
            what,
        }
    }

    /// Answers a connection over the cap with 503 and closes it.
    pub fn refuse(&self, mut stream: TcpStream) {
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
    pub fn try_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }
}
