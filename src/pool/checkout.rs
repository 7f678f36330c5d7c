//! A call's checkout: an idle worker, in arrival order, within the
//! queue-wait limit. A call never waits behind a running one: it waits in
//! line for the next worker that comes free, whichever it is.

use std::sync::Arc;

use tokio::time::Instant;

use super::{Gauge, Lease, Shared};
use crate::duration_text::format_secs;
use crate::error::{ErrorKind, ToolError};
use crate::worker::Worker;

impl Shared {
    /// Waits for a worker for a call of `tool` in `session`, within the
    /// queue-wait limit.
    pub(super) async fn checkout(
        self: &Arc<Self>,
        tool: &str,
        session: &str,
    ) -> Result<Lease, ToolError> {
        let started = Instant::now();
        let limit = self.queue_wait.map(|limit| started + limit);
        match self.wait_for_worker(tool, session, limit).await? {
            Some(worker) => Ok(Lease::new(worker, self)),
            None => Err(ToolError::new(
                tool,
                ErrorKind::PoolBusy,
                format!(
                    "no worker became free within {} s ({} workers, all busy)",
                    format_secs(started.elapsed()),
                    self.size
                ),
            )),
        }
    }

    /// An idle worker; `None` when `limit` passed first.
    async fn wait_for_worker(
        self: &Arc<Self>,
        tool: &str,
        session: &str,
        limit: Option<Instant>,
    ) -> Result<Option<Worker>, ToolError> {
        let placement = self.placement();
        let closed_error =
            || ToolError::new(tool, ErrorKind::PoolClosed, "the pool is shutting down");
        if self.workers.is_closed() {
            return Err(closed_error());
        }
        let fail_fast = || {
            let reason = self.start_failure.lock().ok()?.clone()?;
            (self.workers.live_count() == 0).then(|| {
                ToolError::new(
                    tool,
                    ErrorKind::WorkerDied,
                    format!("no worker is running and none can start: {reason}"),
                )
            })
        };
        if let Some(error) = fail_fast() {
            return Err(error);
        }
        // Nobody waiting and a worker idle: take it at once.
        if let Some(worker) = self.workers.try_take_idle(placement, session) {
            return Ok(Some(worker));
        }
        self.grow_for_a_waiting_call();
        let queued = Gauge::up(&self.counters.queued);
        // In line for the next idle worker (the place is kept while this waits).
        let take = self.workers.take_idle(placement, session);
        let waited = async {
            match limit {
                Some(limit) => tokio::time::timeout_at(limit, take).await.ok(),
                None => Some(take.await),
            }
        };
        // A call queued while the last worker died must not wait for a
        // worker that cannot start: it fails when the next start fails.
        let cannot_start = async {
            loop {
                let failed = self.start_failed.notified();
                if let Some(error) = fail_fast() {
                    return error;
                }
                failed.await;
            }
        };
        let outcome = tokio::select! {
            waited = waited => waited,
            () = self.workers.closed() => Some(None),
            error = cannot_start => return Err(error),
        };
        drop(queued);
        match outcome {
            Some(Some(got)) => Ok(Some(got)),
            Some(None) => Err(closed_error()),
            None => Ok(None),
        }
    }
}
