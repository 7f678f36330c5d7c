//! A worker checked out for one call, and what happens to it afterwards.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::call::{worker_after, WorkerAfter};
use super::Shared;
use crate::outcome::Termination;
use crate::worker::Worker;

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
        // A sound worker that the call left over the resident-memory limit
        // (`/proc/<worker>/statm`; the call's leftovers check leaves no
        // other process of it).
        let over_rss = ended.is_none()
            && shared.max_worker_rss.is_some_and(|limit| {
                crate::procfs::rss_bytes(worker.pid()).is_some_and(|rss| rss > limit)
            });
        // Stale and closing workers are sorted out by `make_idle`.
        let after = worker_after(
            ended,
            worker.calls_served(),
            shared.max_calls_per_worker,
            false,
            false,
        );
        match after {
            WorkerAfter::Replace(how) => {
                shared.counters.count_end(&how);
                let spec = worker.spec().clone();
                shared.workers.unregister(worker.id());
                shared.finish_off(worker);
                shared.replace_like(&spec);
            }
            WorkerAfter::Retire(how) => {
                // Its replacement was started when this last call began.
                shared.counters.recycled.fetch_add(1, Ordering::Relaxed);
                shared.retire(worker, how);
            }
            WorkerAfter::Idle if over_rss => {
                tracing::info!(
                    worker = worker.pid(),
                    "over --max-worker-rss after its call: retiring it"
                );
                shared.counters.recycled.fetch_add(1, Ordering::Relaxed);
                shared.counters.over_rss.fetch_add(1, Ordering::Relaxed);
                let spec = worker.spec().clone();
                shared.retire(worker, Termination::Retired);
                shared.replace_like(&spec);
            }
            WorkerAfter::Idle => shared.make_idle(worker),
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
            self.shared.counters.count_end(&Termination::Cancelled);
            let spec = worker.spec().clone();
            self.shared.workers.unregister(worker.id());
            worker.pull_kill_switch();
            self.shared.finish_off(worker);
            self.shared.replace_like(&spec);
        }
    }
}
