//! The pool's workers and who gets them: the idle ones (answering
//! checkouts in arrival order), the warm spares, the workers parked for
//! their sessions (`parking`), every live worker's record, the reload
//! generation, and whether the pool has closed.
//!
//! No lock here is held across an await. A checkout waits on a fair
//! [`Semaphore`] whose permits count the idle workers, then pops one from
//! the queue under a plain mutex; closing the pool closes the semaphore,
//! which wakes every waiter at once.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use super::call::Placement;
use super::parking::Parked;
use crate::worker::{KillSwitch, Worker, WorkerId};

/// What the pool tracks of each live worker.
#[derive(Debug, Clone)]
pub(super) struct LiveWorker {
    pub(super) calls_served: u64,
    /// The reload generation whose code it imported.
    pub(super) generation: u64,
    /// Its pid, for the stats (never signalled from the pool).
    pub(super) pid: i32,
    /// Kills it at the end of a shutdown's grace period.
    pub(super) switch: KillSwitch,
    /// The session whose calls it has served (none yet: `None`).
    pub(super) session: Option<String>,
}

/// Where a waiting worker waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waiting {
    Idle,
    Spare,
    Parked,
}

/// An idle worker, and since when it is.
struct Idle {
    worker: Worker,
    since: Instant,
}

pub(super) struct Dispatcher {
    /// Idle workers, the longest idle first.
    idle: Mutex<VecDeque<Idle>>,
    /// As many permits as `idle` holds workers; FIFO, so the first caller
    /// in line gets the next worker that comes back.
    idle_permits: Semaphore,
    /// Started workers waiting to replace one that is killed or retired.
    spares: Mutex<Vec<Worker>>,
    /// Idle workers kept for their sessions beyond the pool's size.
    parked: Mutex<Parked<Worker>>,
    /// Live workers (spares included), by id.
    live: Mutex<HashMap<WorkerId, LiveWorker>>,
    /// Notified whenever a worker leaves `live` (shutdown waits on it).
    left: Notify,
    /// Bumped by every reload; a worker started before it runs old code.
    generation: AtomicU64,
    closed: CancellationToken,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these; a poisoned lock's data is whole.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Dispatcher {
    /// `park_limit`: how many workers may be parked for their sessions.
    pub(super) fn new(park_limit: usize) -> Dispatcher {
        Dispatcher {
            idle: Mutex::new(VecDeque::new()),
            idle_permits: Semaphore::new(0),
            spares: Mutex::new(Vec::new()),
            parked: Mutex::new(Parked::new(park_limit)),
            live: Mutex::new(HashMap::new()),
            left: Notify::new(),
            generation: AtomicU64::new(0),
            closed: CancellationToken::new(),
        }
    }

    /// How many workers may be parked for their sessions.
    pub(super) fn park_limit(&self) -> usize {
        locked(&self.parked).limit()
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Resolves once the pool has closed.
    pub(super) fn closed(&self) -> WaitForCancellationFuture<'_> {
        self.closed.cancelled()
    }

    /// A token cancelled when the pool closes (for background tasks).
    pub(super) fn closed_token(&self) -> CancellationToken {
        self.closed.clone()
    }

    /// Closes the pool: every caller waiting for a worker is woken (and
    /// gets none).
    pub(super) fn close(&self) {
        self.closed.cancel();
        self.idle_permits.close();
    }

    /// Hands `worker` to the first caller waiting, or keeps it idle; gives
    /// it back when the pool has closed. Checked under the queue's lock,
    /// which [`Dispatcher::take_all_waiting`] takes after closing: a worker
    /// is either drained by it or given back here, never left behind.
    pub(super) fn put_idle(&self, worker: Worker) -> Option<Worker> {
        let mut idle = locked(&self.idle);
        if self.is_closed() {
            return Some(worker);
        }
        idle.push_back(Idle {
            worker,
            since: Instant::now(),
        });
        drop(idle);
        self.idle_permits.add_permits(1);
        None
    }

    /// The worker idle longest, if it has been idle `limit` at least and no
    /// caller is waiting for a worker (one would hold every permit).
    pub(super) fn take_idle_for(&self, limit: std::time::Duration) -> Option<Worker> {
        let permit = self.idle_permits.try_acquire().ok()?;
        let mut idle = locked(&self.idle);
        if idle
            .front()
            .is_none_or(|first| first.since.elapsed() < limit)
        {
            return None; // the permit goes back as it drops
        }
        permit.forget();
        idle.pop_front().map(|idle| idle.worker)
    }

    /// An idle worker now, if one is idle and nobody is waiting for it;
    /// which one: [`Placement::choose`] for a call of `session`.
    pub(super) fn try_take_idle(&self, placement: Placement, session: &str) -> Option<Worker> {
        let permit = self.idle_permits.try_acquire().ok()?;
        permit.forget();
        self.pop_idle(placement, session)
    }

    /// The next idle worker, in the order callers asked (which one:
    /// [`Placement::choose`]); `None` once the pool has closed.
    /// Cancel-safe: dropped, it gives its place up, and a worker already
    /// assigned to it goes to the next in line.
    pub(super) async fn take_idle(&self, placement: Placement, session: &str) -> Option<Worker> {
        let permit = self.idle_permits.acquire().await.ok()?;
        permit.forget();
        self.pop_idle(placement, session)
    }

    /// Takes the idle worker a call of `session` prefers; the caller holds
    /// (and has forgotten) a permit, and every permit was added after its
    /// worker was queued, so one is there. Locks the queue, then the parked
    /// workers, then the live records (nothing locks them in another order).
    fn pop_idle(&self, placement: Placement, session: &str) -> Option<Worker> {
        let mut idle = locked(&self.idle);
        let index = if placement == Placement::PerSession {
            let parked_here = locked(&self.parked).holds(session);
            let live = locked(&self.live);
            let served = idle.iter().map(|idle| {
                live.get(&idle.worker.id())
                    .and_then(|entry| entry.session.as_deref())
            });
            placement.choose(served, session, parked_here)
        } else {
            0
        };
        idle.remove(index).map(|idle| idle.worker)
    }

    /// Every idle worker, taken out of the pool's queue.
    pub(super) fn take_all_idle(&self) -> Vec<Worker> {
        std::iter::from_fn(|| self.try_take_idle(Placement::Shared, "")).collect()
    }

    /// Worker `id`, if it is waiting and no caller has been promised it,
    /// with where it waited. Every idle worker may be promised to a caller
    /// in line already (all permits taken): then that caller finds it dead.
    pub(super) fn take_waiting(&self, id: WorkerId) -> Option<(Worker, Waiting)> {
        {
            let mut spares = locked(&self.spares);
            if let Some(index) = spares.iter().position(|w| w.id() == id) {
                return Some((spares.swap_remove(index), Waiting::Spare));
            }
        }
        if let Some(worker) = locked(&self.parked).take_where(|w| w.id() == id) {
            return Some((worker, Waiting::Parked));
        }
        let mut idle = locked(&self.idle);
        let index = idle.iter().position(|idle| idle.worker.id() == id)?;
        // One permit fewer for the one worker fewer (never blocks: under
        // the queue's lock, as put_idle adds them after it).
        self.idle_permits.try_acquire().ok()?.forget();
        idle.remove(index).map(|idle| (idle.worker, Waiting::Idle))
    }

    /// Parks `worker` for `session` (see `parking`); gives back what is to
    /// be retired: the workers parked longest ago that no longer fit, or
    /// `worker` itself once the pool has closed (checked under the lock, as
    /// [`Dispatcher::put_idle`] does).
    pub(super) fn park(&self, session: String, worker: Worker) -> Vec<Worker> {
        let mut parked = locked(&self.parked);
        if self.is_closed() {
            return vec![worker];
        }
        parked.park(session, worker)
    }

    /// The worker of `session` parked last, if one is.
    pub(super) fn resume(&self, session: &str) -> Option<Worker> {
        locked(&self.parked).resume(session)
    }

    /// Every parked worker, taken out.
    pub(super) fn take_parked(&self) -> Vec<Worker> {
        locked(&self.parked).take_all()
    }

    pub(super) fn parked_count(&self) -> usize {
        locked(&self.parked).len()
    }

    pub(super) fn pop_spare(&self) -> Option<Worker> {
        locked(&self.spares).pop()
    }

    /// Keeps `worker` as a spare; gives it back when the pool has closed
    /// (checked under the lock, as [`Dispatcher::put_idle`] does).
    pub(super) fn keep_spare(&self, worker: Worker) -> Option<Worker> {
        let mut spares = locked(&self.spares);
        if self.is_closed() {
            return Some(worker);
        }
        spares.push(worker);
        None
    }

    /// Every waiting spare, removed from the pool's reserve.
    pub(super) fn take_spares(&self) -> Vec<Worker> {
        std::mem::take(&mut *locked(&self.spares))
    }

    pub(super) fn spare_count(&self) -> usize {
        locked(&self.spares).len()
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Starts a new reload generation: every live worker is now stale.
    pub(super) fn bump_generation(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn register(&self, worker: &Worker, generation: u64) {
        locked(&self.live).insert(
            worker.id(),
            LiveWorker {
                calls_served: worker.calls_served(),
                generation,
                pid: worker.pid(),
                switch: worker.kill_switch(),
                session: None,
            },
        );
    }

    pub(super) fn unregister(&self, id: WorkerId) {
        locked(&self.live).remove(&id);
        self.left.notify_waiters();
    }

    /// Runs `f` on the record of the live worker `id`, if it is live.
    pub(super) fn with_live<T>(
        &self,
        id: WorkerId,
        f: impl FnOnce(&mut LiveWorker) -> T,
    ) -> Option<T> {
        locked(&self.live).get_mut(&id).map(f)
    }

    /// Records that `worker` came back from a call; whether it runs code
    /// from before the latest reload.
    pub(super) fn returned_stale(&self, worker: &Worker) -> bool {
        let current = self.generation();
        self.with_live(worker.id(), |entry| {
            entry.calls_served = worker.calls_served();
            entry.generation < current
        })
        .unwrap_or(false)
    }

    /// True when the worker imported the tools before the latest reload.
    pub(super) fn is_stale(&self, id: WorkerId) -> bool {
        let current = self.generation();
        self.with_live(id, |entry| entry.generation < current)
            .unwrap_or(false)
    }

    pub(super) fn live_count(&self) -> usize {
        locked(&self.live).len()
    }

    /// A copy of every live worker's record.
    pub(super) fn live(&self) -> Vec<LiveWorker> {
        locked(&self.live).values().cloned().collect()
    }

    /// Every idle, parked and spare worker, out of the pool's reserve.
    /// After [`Dispatcher::close`] none can come back in (see `put_idle`).
    pub(super) fn take_all_waiting(&self) -> Vec<Worker> {
        let mut waiting = self.take_spares();
        waiting.extend(self.take_parked());
        waiting.extend(locked(&self.idle).drain(..).map(|idle| idle.worker));
        waiting
    }

    /// Waits until no worker is live, or `deadline`.
    pub(super) async fn all_gone_by(&self, deadline: Instant) {
        loop {
            let left = self.left.notified();
            tokio::pin!(left);
            left.as_mut().enable();
            if self.live_count() == 0 || tokio::time::timeout_at(deadline, left).await.is_err() {
                return;
            }
        }
    }
}
