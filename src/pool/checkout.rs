//! A call's checkout: an idle worker, in arrival order, within the
//! queue-wait limit. A call never waits behind a running one: it waits in
//! line for the next worker that comes free, whichever it is.

use std::sync::Arc;

use tokio::time::Instant;

use super::{Gauge, Lease, Shared};
use crate::outcome::Refusal;
use crate::worker::Worker;

impl Shared {
    /// Waits for a worker for a call in `session`, within the queue-wait
    /// limit.
    pub(super) async fn checkout(self: &Arc<Self>, session: &str) -> Result<Lease, Refusal> {
        let started = Instant::now();
        let limit = self.queue_wait.map(|limit| started + limit);
        match self.wait_for_worker(session, limit).await? {
            Some(worker) => Ok(Lease::new(worker, self)),
            None => Err(Refusal::Busy {
                waited: started.elapsed(),
                workers: self.size,
            }),
        }
    }

    /// An idle worker; `None` when `limit` passed first.
    async fn wait_for_worker(
        self: &Arc<Self>,
        session: &str,
        limit: Option<Instant>,
    ) -> Result<Option<Worker>, Refusal> {
        let placement = self.placement();
        if self.workers.is_closed() {
            return Err(Refusal::Closing);
        }
        let fail_fast = || {
            let reason = self.start_failure.lock().ok()?.clone()?;
            (self.workers.live_count() == 0).then_some(Refusal::CannotStart { reason })
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
            Some(None) => Err(Refusal::Closing),
            None => Ok(None),
        }
    }
}
