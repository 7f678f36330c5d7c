//! A pool that sizes itself (`--min-workers`, `--worker-idle`): idle workers
//! beyond the minimum are retired once they have been idle that long, and
//! a call that finds no idle worker starts one back, up to `--workers`.
//!
//! `shrunk` counts the workers retired this way and not yet started again:
//! the pool keeps `size - shrunk` workers. A retirement takes the worker
//! idle longest, only while no call waits (it needs a free permit of the
//! idle queue); a start back takes the warm spare first, as a replacement
//! does, so a call that wakes a shrunk pool waits no longer than one that
//! finds its worker dead.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::Shared;
use crate::outcome::Termination;

/// How the pool sizes itself.
pub(super) struct Sizing {
    /// Workers kept however long they are idle.
    pub(super) min: usize,
    /// How long a worker beyond `min` may be idle; `None`: forever.
    pub(super) idle: Option<Duration>,
    /// Workers retired for being idle and not started again.
    shrunk: AtomicUsize,
}

impl Sizing {
    pub(super) fn new(min: usize, idle: Option<Duration>) -> Sizing {
        Sizing {
            min,
            idle,
            shrunk: AtomicUsize::new(0),
        }
    }

    /// Workers retired for being idle and not started again.
    pub(super) fn shrunk(&self) -> usize {
        self.shrunk.load(Ordering::Acquire)
    }
}

/// How often idle workers are looked at: a quarter of the idle time, so a
/// worker goes within 1.25 × of it, between 50 ms and 10 s.
fn check_every(idle: Duration) -> Duration {
    (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(10))
}

impl Shared {
    /// Starts the task that retires idle workers, when the pool may shrink.
    pub(super) fn watch_idle_workers(self: &Arc<Self>) {
        let Some(idle) = self.sizing.idle else {
            return;
        };
        if self.sizing.min >= self.size {
            return;
        }
        // Weak: the task does not keep a dropped pool alive.
        let shared: Weak<Shared> = Arc::downgrade(self);
        let closed = self.workers.closed_token();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(check_every(idle));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = closed.cancelled() => return,
                    _ = ticks.tick() => {}
                }
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                shared.retire_idle_workers(idle);
            }
        });
    }

    /// Retires the workers idle `idle` or longer, down to the minimum.
    fn retire_idle_workers(&self, idle: Duration) {
        let most = self.size - self.sizing.min;
        while self.sizing.shrunk() < most {
            let Some(worker) = self.workers.take_idle_for(idle) else {
                return;
            };
            self.sizing.shrunk.fetch_add(1, Ordering::AcqRel);
            self.counters.retired_idle.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                worker = worker.pid(),
                "idle past --worker-idle: retiring it"
            );
            self.retire(worker, Termination::Retired);
        }
    }

    /// A call found no idle worker: if the pool has shrunk, one more starts.
    pub(super) fn grow_for_a_waiting_call(self: &Arc<Self>) {
        let taken = self
            .sizing
            .shrunk
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if taken.is_ok() {
            self.add_worker();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_workers_are_looked_at_often_enough_and_not_too_often() {
        assert_eq!(
            check_every(Duration::from_secs(60)),
            Duration::from_secs(10)
        );
        assert_eq!(
            check_every(Duration::from_secs(2)),
            Duration::from_millis(500)
        );
        assert_eq!(
            check_every(Duration::from_millis(10)),
            Duration::from_millis(50)
        );
    }
}
