//! A worker checked out for one call, and what happens to it afterwards.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Shared;
use crate::worker::{Termination, Worker};

/// A worker checked out for one call. Dropped mid-call (the caller gave up),
/// it kills the worker — a call in flight leaves it in an unknown state — and
/// starts a replacement.
pub(super) struct Lease {
    pub(super) worker: Option<Worker>,
    pub(super) shared: Arc<Shared>,
}

impl Lease {
    pub(super) fn new(worker: Worker, shared: &Arc<Shared>) -> Lease {
        Lease {
            worker: Some(worker),
            shared: shared.clone(),
        }
    }

    pub(super) fn worker(&mut self) -> &mut Worker {
        self.worker
            .as_mut()
            .expect("a lease holds its worker until finished")
    }

    /// Hands the worker back after its call; `ended`: how the call ended
    /// it (it is gone, and replaced), `None` when it is still sound.
    pub(super) fn finish(mut self, ended: Option<Termination>) {
        let Some(worker) = self.worker.take() else {
            return;
        };
        let shared = &self.shared;
        if let Some(how) = ended {
            shared.counters.count_end(&how);
            shared.lose_queued(&worker);
            let spec = worker.spec().clone();
            shared.workers.unregister(worker.pid());
            shared.finish_off(worker);
            shared.replace_like(&spec);
            return;
        }
        // The call queued behind this one (pipelining) takes the worker.
        let Some(worker) = shared.hand_over(worker) else {
            return;
        };
        let worn_out = shared
            .max_calls_per_worker
            .is_some_and(|max| worker.calls_served() >= max);
        if worn_out {
            // Its replacement was started when this last call began.
            shared.counters.recycled.fetch_add(1, Ordering::Relaxed);
            shared.retire(worker, Termination::Retired);
        } else {
            shared.make_idle(worker);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(worker) = self.worker.take() {
            // Info: the caller gave up (an MCP cancellation, a dropped
            // future), an ordinary end of a call, not a fault.
            tracing::info!(
                worker = worker.pid(),
                "call abandoned mid-flight: killing its worker"
            );
            self.shared.lose_queued(&worker);
            self.shared.counters.count_end(&Termination::Cancelled);
            let spec = worker.spec().clone();
            self.shared.workers.unregister(worker.pid());
            worker.kill_now();
            self.shared.finish_off(worker);
            self.shared.replace_like(&spec);
        }
    }
}
