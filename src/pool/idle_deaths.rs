//! A worker that dies while it waits (idle, parked, or a warm spare) — killed from
//! outside, by the kernel out of memory, a crash in a thread a tool left
//! running — is noticed at once: taken out of the pool, its end counted by
//! how it ended, and a replacement started, before any call would pick it.
//!
//! Each live worker has a task waiting for its end notice, which its actor
//! gives when the kernel says the guardian ended (it mirrors the worker's
//! end) while the actor waited for a command, or when the actor ends. The
//! task wakes only then; a worker busy with a call when it dies is the
//! call's to report, and one that was retired is already gone from the pool.

use std::sync::{Arc, Weak};

use super::dispatch::Waiting;
use super::{Destination, Shared};
use crate::worker::{EndNotice, Worker, WorkerId};

impl Shared {
    /// Lists `worker` as live (it imported the code of `generation`) and
    /// watches for its death while it waits.
    pub(super) fn enlist(self: &Arc<Self>, worker: &Worker, generation: u64) {
        self.workers.register(worker, generation);
        let pool = Arc::downgrade(self);
        tokio::spawn(watch(worker.end_notice(), pool, worker.id()));
    }

    /// The worker `id` ended: if it was waiting, it leaves the pool now.
    async fn died_waiting(self: &Arc<Self>, id: WorkerId) {
        let Some((mut worker, waited)) = self.workers.take_waiting(id) else {
            return; // busy (its call reports it), retired, or promised to a caller
        };
        let how = worker.how_it_ended().await;
        self.counters.count_end(&how);
        self.workers.unregister(id);
        match waited {
            Waiting::Spare => self.start_worker(Destination::Spare, std::time::Duration::ZERO),
            Waiting::Idle => self.replace_like(&worker.spec().clone()),
            // Beyond the pool's size: its session's next call starts afresh.
            Waiting::Parked => {}
        }
    }
}

async fn watch(end: EndNotice, pool: Weak<Shared>, id: WorkerId) {
    end.given().await;
    if let Some(shared) = pool.upgrade() {
        if !shared.workers.is_closed() {
            shared.died_waiting(id).await;
        }
    }
}
