//! Workers started, made idle, replaced and retired: where a new worker
//! goes ([`Destination`]), the warm spare, and the back-off of failing
//! starts.

use super::build::warm;
use super::{Shared, MAX_RESTART_BACKOFF, SPARE_REFILL_DELAY};
use crate::outcome::Termination;
use crate::worker::{Worker, WorkerSpec};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Where a newly started worker goes.
pub(super) enum Destination {
    Idle,
    Spare,
    /// To the call waiting for it (a sandboxed worker of the call's
    /// session); idle if that call was given up. A failed start is not
    /// retried: the call gets why, and a worker of the pool's session
    /// takes the place of the one retired for it.
    Caller(tokio::sync::oneshot::Sender<Result<Worker, String>>),
}

impl Shared {
    /// Retires a healthy worker in the background (it exits when its stdin
    /// closes), counted as having ended `how`.
    pub(super) fn retire(&self, worker: Worker, how: Termination) {
        self.counters.count_end(&how);
        self.workers.unregister(worker.id());
        tokio::spawn(worker.retire());
    }

    /// Finishes killing a worker in the background (its guardian's clean-up,
    /// the sweep of what is left, the reaping); shutdown waits for it.
    pub(super) fn finish_off(&self, mut worker: Worker) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                self.dying.spawn_on(
                    async move {
                        worker.kill().await;
                    },
                    &runtime,
                );
            }
            Err(_) => drop(worker),
        }
    }

    pub(super) fn make_idle(self: &Arc<Self>, worker: Worker) {
        let stale = self.workers.returned_stale(&worker);
        let closed = self.workers.is_closed();
        if stale && !closed {
            // Runs code from before a reload: new calls go to fresh workers.
            self.counters.recycled.fetch_add(1, Ordering::Relaxed);
            self.retire(worker, Termination::Retired);
            self.replace();
            return;
        }
        if closed {
            self.retire(worker, Termination::ShutDown);
            return;
        }
        if let Some(worker) = self.workers.put_idle(worker) {
            // Closed meanwhile.
            self.retire(worker, Termination::ShutDown);
        }
    }

    /// Puts a worker in place of one that died, timed out or retired: a
    /// warm spare at once when there is one (then the spare is refilled),
    /// else a newly started worker.
    pub(super) fn replace(self: &Arc<Self>) {
        self.counters.respawns.fetch_add(1, Ordering::Relaxed);
        self.add_worker();
    }

    /// One more idle worker: the warm spare if there is one (and a new
    /// spare started), else a new start.
    pub(super) fn add_worker(self: &Arc<Self>) {
        match self.workers.pop_spare() {
            Some(worker) => {
                self.make_idle(worker);
                // Not urgent: let the call the spare is about to take start
                // before a new Python process competes with it for the CPU.
                self.start_worker(Destination::Spare, SPARE_REFILL_DELAY);
            }
            None => self.start_worker(Destination::Idle, Duration::ZERO),
        }
    }

    /// Starts one worker in the background, backing off while starts keep
    /// failing, and sends it to `destination`. Every worker started after
    /// the pool is built starts here.
    pub(super) fn start_worker(self: &Arc<Self>, destination: Destination, delay: Duration) {
        self.start_worker_with(self.spec.clone(), destination, delay);
    }

    /// [`Shared::start_worker`] with `spec` (under `--sandbox`, one of
    /// another session: [`Shared::replace_like`]).
    pub(super) fn start_worker_with(
        self: &Arc<Self>,
        spec: Arc<WorkerSpec>,
        destination: Destination,
        delay: Duration,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let shared = self.clone();
        // A call waiting for this worker is in flight: its start goes on
        // through the shutdown's grace period like the call itself.
        let for_a_call = matches!(destination, Destination::Caller(_));
        let closed = self.workers.closed_token();
        let start = async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            loop {
                if shared.workers.is_closed() {
                    return;
                }
                let failures = shared.restart_failures.load(Ordering::Relaxed);
                if failures > 0 {
                    let backoff = Duration::from_millis(100)
                        .saturating_mul(1 << failures.min(10))
                        .min(MAX_RESTART_BACKOFF);
                    tokio::time::sleep(backoff).await;
                }
                let generation = shared.workers.generation();
                // Not quarantining: the catalog lists every module these
                // workers must serve; one that breaks them now is a failed start.
                match Worker::start(&shared.spawner, spec.clone()).await {
                    Ok(mut worker) => {
                        if let Destination::Spare = &destination {
                            if !warm(&mut worker).await {
                                // Backs off like a failed start: never a spawn loop.
                                tracing::error!("a new spare worker failed its warm-up");
                                shared.restart_failures.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                        }
                        shared.restart_failures.store(0, Ordering::Relaxed);
                        if let Ok(mut failure) = shared.start_failure.lock() {
                            *failure = None;
                        }
                        shared.enlist(&worker, generation);
                        match destination {
                            Destination::Idle => shared.make_idle(worker),
                            Destination::Spare => shared.add_spare(worker),
                            Destination::Caller(caller) => {
                                if let Err(Ok(worker)) = caller.send(Ok(worker)) {
                                    shared.make_idle(worker);
                                }
                            }
                        }
                        return;
                    }
                    Err(e) if matches!(destination, Destination::Caller(_)) => {
                        shared.replace();
                        if let Destination::Caller(caller) = destination {
                            let _ = caller.send(Err(e.to_string()));
                        }
                        return;
                    }
                    Err(e) => {
                        tracing::error!("replacement worker failed to start: {e}");
                        shared.restart_failures.fetch_add(1, Ordering::Relaxed);
                        if let Ok(mut failure) = shared.start_failure.lock() {
                            *failure = Some(e.to_string());
                        }
                        shared.start_failed.notify_waiters();
                    }
                }
            }
        };
        self.starting.spawn_on(
            async move {
                if for_a_call {
                    return start.await;
                }
                tokio::select! {
                    () = start => {}
                    () = closed.cancelled() => {}
                }
            },
            &runtime,
        );
    }

    pub(super) fn add_spare(self: &Arc<Self>, worker: Worker) {
        if self.workers.is_stale(worker.id()) && !self.workers.is_closed() {
            // Started before a reload finished: start a spare on the new code.
            self.retire(worker, Termination::Retired);
            self.start_worker(Destination::Spare, Duration::ZERO);
            return;
        }
        if let Some(worker) = self.workers.keep_spare(worker) {
            self.retire(worker, Termination::ShutDown);
        }
    }
}
