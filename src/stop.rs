//! Asking a server to stop, from whatever the embedding program listens to.
//!
//! The library installs no signal handler: the program that owns the process
//! owns its signals (the `toolpool` binary turns SIGTERM and SIGINT into
//! [`StopHandle::request_stop`]). A server drains on the first request
//! (no new calls; calls in flight finish within the grace period) and ends
//! the grace period at once on the second.

use tokio::sync::watch;

/// Asks the server holding the matching [`StopRequests`] to stop. Cheap to
/// clone; every request from any clone counts.
#[derive(Debug, Clone)]
pub struct StopHandle(std::sync::Arc<watch::Sender<u32>>);

/// What a server watches for stop requests.
#[derive(Debug, Clone)]
pub struct StopRequests(Option<watch::Receiver<u32>>);

/// A handle and the requests it sends.
pub fn stop_channel() -> (StopHandle, StopRequests) {
    let (sender, receiver) = watch::channel(0);
    (
        StopHandle(std::sync::Arc::new(sender)),
        StopRequests(Some(receiver)),
    )
}

impl StopHandle {
    /// The first request drains the server; the second kills what still
    /// runs. Returns how many requests have been made, this one included.
    pub fn request_stop(&self) -> u32 {
        let mut made = 0;
        self.0.send_modify(|count| {
            *count = count.saturating_add(1);
            made = *count;
        });
        made
    }
}

impl StopRequests {
    /// Requests that never come: the server stops only when its transport
    /// ends (stdin's end for stdio).
    pub fn never() -> StopRequests {
        StopRequests(None)
    }

    /// Resolves once the first stop has been requested.
    pub async fn first(&self) {
        self.nth(1).await
    }

    /// Resolves once a second stop has been requested.
    pub async fn again(&self) {
        self.nth(2).await
    }

    /// Waits until `n` requests have been made; forever once every handle
    /// is gone before that.
    async fn nth(&self, n: u32) {
        let Some(receiver) = &self.0 else {
            return std::future::pending().await;
        };
        let mut receiver = receiver.clone();
        if receiver.wait_for(|count| *count >= n).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn resolves(future: impl std::future::Future<Output = ()>) -> bool {
        tokio::time::timeout(Duration::from_millis(50), future)
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn the_first_request_is_first_and_the_second_is_again() {
        let (handle, requests) = stop_channel();
        assert!(!resolves(requests.first()).await);
        assert_eq!(handle.clone().request_stop(), 1);
        assert!(resolves(requests.first()).await);
        assert!(!resolves(requests.again()).await);
        assert_eq!(handle.request_stop(), 2);
        assert!(resolves(requests.again()).await);
        // Requests made before anyone waits are kept.
        assert!(resolves(requests.clone().first()).await);
    }

    #[tokio::test]
    async fn without_a_handle_or_with_none_left_nothing_resolves() {
        assert!(!resolves(StopRequests::never().first()).await);
        let (handle, requests) = stop_channel();
        drop(handle);
        assert!(!resolves(requests.first()).await);
    }
}
