//! Calls queued behind a busy worker's running call (pipelining; the
//! worker's side is `crate::worker::pipeline`).
//!
//! When no worker is idle, a call may be queued on a busy one: its request
//! is written behind the running call, and the worker starts it the moment
//! that call ends, without a round trip through the supervisor. A queued
//! call never waits behind a running one while another worker is idle: a
//! worker that comes free is handed to the oldest queued call, which asks
//! its request back and runs there ([`Ticket::wait`]). If the running call
//! is killed, the queued one was never started and checks out again.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Lease, SessionIsolation, Shared};
use crate::worker::pipeline::{Handover, Slot, Withdrawal};
use crate::worker::{CallOutcome, JobParts, QueuedOnWire, Worker};

/// A call's request as queued behind a busy worker's call: its frame, what
/// the worker's actor needs to run it, and where its outcome arrives.
pub(super) struct Queueable {
    pub(super) frame: Vec<u8>,
    pub(super) parts: JobParts,
    pub(super) outcome: oneshot::Receiver<CallOutcome>,
}

/// Makes a call's [`Queueable`] under a worker's request id (`None`: the
/// request cannot be encoded; it is not queued).
pub(super) type MakeQueued<'a> = dyn Fn(u64) -> Option<Queueable> + Sync + 'a;

/// A worker running a call, as the queue sees it.
pub(super) struct BusyWorker {
    pid: i32,
    slot: Arc<Slot>,
    /// Under [`SessionIsolation::Process`]: the only session it may serve.
    session: Option<String>,
    /// Whether it may take a call after this one (not about to retire
    /// after `--max-calls-per-worker`).
    takes_more: bool,
    /// The reload generation whose code it runs: after a reload no call
    /// is queued behind it (it is recycled when its call ends).
    generation: u64,
}

/// A queued call waiting for a worker to come free (see [`Shared::rescue`]).
pub(super) struct Rescuer {
    ticket: u64,
    session: String,
    worker: oneshot::Sender<Worker>,
}

/// The pool's part of pipelining.
#[derive(Default)]
pub(super) struct Queueing {
    /// Workers running a call, oldest first.
    busy: Mutex<Vec<BusyWorker>>,
    /// Queued calls, oldest first.
    rescuers: Mutex<VecDeque<Rescuer>>,
    /// Wakes the first call waiting for a worker: a running call's slot is free.
    slot_freed: tokio::sync::Notify,
    next_ticket: std::sync::atomic::AtomicU64,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these; a poisoned lock's data is whole.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Queueing {
    pub(super) fn slot_freed(&self) -> &tokio::sync::Notify {
        &self.slot_freed
    }
}

/// Keeps a worker listed as busy while its call runs.
pub(super) struct BusyGuard<'a> {
    queueing: &'a Queueing,
    pid: i32,
}

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        locked(&self.queueing.busy).retain(|busy| busy.pid != self.pid);
    }
}

impl Shared {
    /// Lists `worker` as busy with a call of `session` until the guard drops:
    /// from then on a call may be queued behind it.
    pub(super) fn mark_busy(&self, worker: &Worker, session: &str) -> BusyGuard<'_> {
        let calls_left = self
            .max_calls_per_worker
            .is_none_or(|max| worker.calls_served() + 2 <= max);
        let entry = BusyWorker {
            pid: worker.pid(),
            slot: worker.slot().clone(),
            session: (self.isolation == SessionIsolation::Process).then(|| session.to_string()),
            takes_more: calls_left,
            generation: self
                .workers
                .with_live(worker.pid(), |live| live.generation)
                .unwrap_or(0),
        };
        locked(&self.queueing.busy).push(entry);
        self.queueing.slot_freed.notify_one();
        BusyGuard {
            queueing: &self.queueing,
            pid: worker.pid(),
        }
    }

    /// Queues a call of `session` behind a busy worker whose slot is free;
    /// `encode` makes its request under the worker's id.
    pub(super) fn try_queue(
        self: &Arc<Self>,
        session: &str,
        encode: &MakeQueued<'_>,
    ) -> Option<Ticket> {
        // Under the sandbox a worker's view holds one session's folders and
        // the call's worker is chosen for it after the checkout: no queueing.
        if self.workers.is_closed() || self.spec.sandbox.is_some() {
            return None;
        }
        let current = self.workers.generation();
        let busy = locked(&self.queueing.busy);
        for worker in busy.iter() {
            let admits = worker.session.as_deref().is_none_or(|s| s == session);
            let fresh = worker.generation >= current;
            if !worker.takes_more || !fresh || !admits || !worker.slot.has_room() {
                continue;
            }
            // Encoded and queued while the worker is listed busy: once its
            // call ends (and it leaves the list) nothing would write the
            // request or hand the worker over.
            let id = worker.slot.take_id();
            let Queueable {
                frame,
                parts,
                outcome,
            } = encode(id)?;
            let Some(handover) = worker.slot.queue(id, frame, parts) else {
                continue;
            };
            let slot = worker.slot.clone();
            drop(busy);
            let ticket = self.queueing.next_ticket.fetch_add(1, Ordering::Relaxed);
            let (rescue_tx, rescue) = oneshot::channel();
            locked(&self.queueing.rescuers).push_back(Rescuer {
                ticket,
                session: session.to_string(),
                worker: rescue_tx,
            });
            return Some(Ticket {
                shared: self.clone(),
                slot,
                id,
                ticket,
                handover,
                outcome: Some(outcome),
                rescue,
                rescue_closed: false,
                rescued: None,
                done: false,
            });
        }
        None
    }

    /// Whether a call waits queued behind a running one.
    pub(super) fn has_queued_calls(&self) -> bool {
        !locked(&self.queueing.rescuers).is_empty()
    }

    /// A worker come free goes to the oldest queued call it may serve, if
    /// any; otherwise it is given back.
    pub(super) fn rescue(&self, mut worker: Worker) -> Option<Worker> {
        let tag = match self.isolation {
            SessionIsolation::Process => self.session_of(worker.pid()),
            SessionIsolation::Shared => None,
        };
        let mut rescuers = locked(&self.queueing.rescuers);
        let mut index = 0;
        while index < rescuers.len() {
            if tag
                .as_deref()
                .is_some_and(|tag| rescuers[index].session != tag)
            {
                index += 1;
                continue;
            }
            let Some(rescuer) = rescuers.remove(index) else {
                break;
            };
            match rescuer.worker.send(worker) {
                Ok(()) => return None,
                Err(back) => worker = back,
            }
        }
        Some(worker)
    }

    /// At the end of a call that kept its worker: the first call queued
    /// behind it, if any, takes the worker (the others stay queued).
    /// `Some` when nobody does.
    pub(super) fn hand_over(self: &Arc<Self>, mut worker: Worker) -> Option<Worker> {
        loop {
            let Some(taken) = worker.slot().take() else {
                return Some(worker);
            };
            let sent = taken.sent;
            if taken.skipped {
                tracing::error!(
                    worker = worker.pid(),
                    "a request on the wire was not run in its turn: replacing the worker"
                );
                if let Some(caller) = taken.handover {
                    let _ = caller.send(Handover::Lost);
                }
                self.lose_queued(&worker);
                self.replace_orphaned(worker);
                return None;
            }
            let unclaimed = match taken.handover {
                Some(caller) => match caller.send(Handover::Worker {
                    worker: Box::new(worker),
                    sent,
                }) {
                    Ok(()) => return None,
                    Err(Handover::Worker { worker, .. }) => *worker,
                    Err(_) => return None,
                },
                None => worker,
            };
            if sent {
                self.lose_queued(&unclaimed);
                self.replace_orphaned(unclaimed);
                return None;
            }
            // Its caller gave up before the request was written: the next one.
            worker = unclaimed;
        }
    }

    /// A worker whose queued request's caller gave up after the request was
    /// written: it may be running it for nobody. It is killed like a call
    /// abandoned mid-flight.
    fn replace_orphaned(self: &Arc<Self>, worker: Worker) {
        tracing::debug!(
            worker = worker.pid(),
            "a queued call was abandoned on the wire: replacing its worker"
        );
        self.workers.unregister(worker.pid());
        worker.kill_now();
        self.finish_off(worker);
        self.replace();
    }

    /// The worker is gone: the calls queued behind it never started.
    pub(super) fn lose_queued(&self, worker: &Worker) {
        for taken in worker.slot().take_all() {
            if let Some(caller) = taken.handover {
                let _ = caller.send(Handover::Lost);
            }
        }
    }

    fn session_of(&self, pid: i32) -> Option<String> {
        self.workers
            .with_live(pid, |worker| worker.session.clone())
            .flatten()
    }
}

/// A call queued behind a busy worker's running call.
pub(super) struct Ticket {
    shared: Arc<Shared>,
    slot: Arc<Slot>,
    /// Its request's id on that worker.
    id: u64,
    ticket: u64,
    handover: oneshot::Receiver<Handover>,
    /// Where the outcome of its request arrives, once it runs where it was queued.
    outcome: Option<oneshot::Receiver<CallOutcome>>,
    rescue: oneshot::Receiver<Worker>,
    rescue_closed: bool,
    /// A worker that came free for it while its request is being asked back.
    rescued: Option<Worker>,
    done: bool,
}

/// How a queued call got its worker.
pub(super) enum TicketEnd {
    /// The worker it was queued on, its call over; `queued`: the request
    /// is on the wire (and may be running already, or be over).
    Queued {
        lease: Lease,
        queued: Option<QueuedOnWire>,
    },
    /// Asked back from the busy worker: it runs on this one, come free.
    Rescued(Lease),
    /// The worker it was queued on is gone; it never started: check out again.
    Retry,
    /// The queue-wait limit passed and the request was taken back.
    TimedOut,
}

impl Ticket {
    /// Waits for the worker the call was queued on, or for another that
    /// comes free first, or for `limit` (the queue-wait limit).
    pub(super) async fn wait(mut self, limit: Option<Instant>) -> TicketEnd {
        let mut timed_out = false;
        let end = loop {
            tokio::select! {
                handover = &mut self.handover => break self.settle(handover.ok(), timed_out),
                worker = &mut self.rescue, if !self.rescue_closed && self.rescued.is_none() => {
                    let Ok(worker) = worker else {
                        self.rescue_closed = true;
                        continue;
                    };
                    if self.slot.withdraw(self.id) == Withdrawal::TakenBack {
                        break TicketEnd::Rescued(Lease::new(worker, &self.shared));
                    }
                    // Asked back, or already on its way here: the handover decides.
                    self.rescued = Some(worker);
                }
                () = sleep_until_some(limit), if !timed_out && self.rescued.is_none() => {
                    timed_out = true;
                    if self.slot.withdraw(self.id) == Withdrawal::TakenBack {
                        break TicketEnd::TimedOut;
                    }
                }
            }
        };
        self.done = true;
        let counter = match &end {
            TicketEnd::Queued { .. } => &self.shared.counters.pipelined,
            TicketEnd::Rescued(_) => &self.shared.counters.withdrawn,
            _ => return end,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        end
    }

    fn settle(&mut self, handover: Option<Handover>, timed_out: bool) -> TicketEnd {
        let rescued = self.rescued.take();
        match handover {
            Some(Handover::Worker { worker, sent }) => {
                if let Some(free) = rescued {
                    // Too late to take the request back: it runs where it was queued.
                    self.shared.make_idle(free);
                }
                let queued = match (sent, self.outcome.take()) {
                    (true, Some(outcome)) => Some(QueuedOnWire { outcome }),
                    _ => None,
                };
                TicketEnd::Queued {
                    lease: Lease::new(*worker, &self.shared),
                    queued,
                }
            }
            Some(Handover::Withdrawn) | Some(Handover::Lost) | None => match rescued {
                Some(worker) => TicketEnd::Rescued(Lease::new(worker, &self.shared)),
                None if timed_out => TicketEnd::TimedOut,
                None => TicketEnd::Retry,
            },
        }
    }
}

async fn sleep_until_some(limit: Option<Instant>) {
    match limit {
        Some(limit) => tokio::time::sleep_until(limit).await,
        None => std::future::pending().await,
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        locked(&self.shared.queueing.rescuers).retain(|r| r.ticket != self.ticket);
        if !self.done {
            // The caller gave up while queued.
            self.slot.abandon(self.id);
        }
        // No worker is sent from here on; one sent before is given back.
        let late = self.rescue.try_recv().ok();
        for worker in self.rescued.take().into_iter().chain(late) {
            self.shared.make_idle(worker);
        }
        if let Ok(Handover::Worker { worker, sent }) = self.handover.try_recv() {
            match sent {
                true => self.shared.replace_orphaned(*worker),
                false => self.shared.make_idle(*worker),
            }
        }
    }
}
