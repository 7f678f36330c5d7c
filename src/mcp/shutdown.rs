//! The MCP server stopping: the calls received finished within the grace,
//! the rest killed and answered, after stdin's end once the last requests
//! read have reached their handlers.

use super::*;

impl ToolpoolServer {
    /// [`Self::shut_down`] once stdin has ended. Nothing new can arrive then,
    /// but requests read just before the end may still be on their way from
    /// rmcp's read loop to their handlers: refusing them would fail calls the
    /// client sent in time. So this first waits until no call has run for
    /// [`EOF_SETTLE`] (within `grace`).
    pub(super) async fn shut_down_after_eof(&self, grace: Duration) {
        let started = tokio::time::Instant::now();
        loop {
            let left = grace.saturating_sub(started.elapsed());
            if !self.inner.calls.wait_idle(left).await {
                break;
            }
            tokio::time::sleep(EOF_SETTLE).await;
            if self.inner.calls.count() == 0 || started.elapsed() >= grace {
                break;
            }
        }
        self.shut_down(grace.saturating_sub(started.elapsed()))
            .await;
    }

    /// Stops taking calls, lets those already received (running or queued)
    /// finish within `grace`, kills the rest, reaps every worker, and waits
    /// until every call has been answered (handed to the transport).
    pub(super) async fn shut_down(&self, grace: Duration) {
        let inner = &self.inner;
        let started = tokio::time::Instant::now();
        // `/readyz` (on `--metrics` too) says so from now on.
        inner.pool.drain();
        inner.closing.store(true, Ordering::Release);
        tracing::info!(
            in_flight = inner.calls.count(),
            grace_secs = grace.as_secs_f64(),
            "shutting down: finishing the calls received"
        );
        let mut left_now = false;
        tokio::select! {
            _ = inner.calls.wait_idle(grace) => {}
            _ = inner.stop.again() => {
                tracing::warn!("asked to stop again: killing the calls in flight");
                left_now = true;
            }
        }
        // Whatever still runs is killed now and answered as shut down.
        let left = if left_now {
            Duration::ZERO
        } else {
            grace.saturating_sub(started.elapsed())
        };
        inner.pool.shutdown_with_grace(left).await;
        // Killed calls return at once; this bound only guards against a
        // handler that never returns.
        if !inner.calls.wait_idle(Duration::from_secs(5)).await {
            tracing::warn!(
                in_flight = inner.calls.count(),
                "calls still unanswered after the pool shut down"
            );
        }
        tracing::info!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            "pool shut down"
        );
    }
}
