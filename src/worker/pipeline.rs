//! Pipelining: the next request written to a busy worker behind its running
//! call, so that the worker starts it the moment the running one ends,
//! without waiting for the supervisor to read the reply and send more.
//!
//! Each worker has one [`Slot`] (up to [`MAX_QUEUED`] requests), shared by
//! the worker's actor (which alone writes to the worker) and the pool. A
//! queued request is in one of these states, and every change is made under
//! the slot's lock:
//! - **unsent**: its frame waits here; the running call's exchange writes it;
//! - **on the wire**: the worker has it, behind the running call; once the
//!   call before it ends, the actor takes its parts and runs it;
//! - **withdrawing**: a worker came free elsewhere, so the pool asked for it
//!   back; the worker answers `withdrawn` (it never started it) or, too late,
//!   starts it — never both, since it decides under its own lock;
//! - handed over with the worker when the running call ends, withdrawn, or
//!   lost with a worker that died (it never started: one call runs at a time).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::{oneshot, Notify};

use super::{JobParts, Worker};
use crate::protocol::{encode_frame, ProtocolError, Request};

/// Requests a worker may hold queued behind its running call: enough to keep
/// its pipe full of short calls while the supervisor hands the worker over
/// and refills it, a few task hand-offs (a worker's cProfile under P2: with
/// two it spent ~40 % of its time waiting for a request; with four, < 10 %).
pub const MAX_QUEUED: usize = 4;
/// The largest request queued behind a running call. A bigger one waits for
/// a free worker instead: its write could fill the pipe while the worker
/// is busy (or stopped for a human) and stall the running call's exchange.
/// A full slot holds at most 32 KiB, half a pipe's default capacity.
pub const MAX_QUEUED_FRAME: usize = 8 * 1024;

/// How the queued request of a slot ended, as its caller learns it.
pub enum Handover {
    /// The running call ended and the worker is now the queued call's. Its
    /// request is on the wire (`sent`: the worker's actor runs it, or has
    /// run it, and answers on the call's outcome channel) or still to be
    /// written.
    Worker { worker: Box<Worker>, sent: bool },
    /// The worker gave the request back unstarted.
    Withdrawn,
    /// The worker is gone (its running call was killed, or it died) and the
    /// request never started.
    Lost,
}

/// What [`Slot::withdraw`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Withdrawal {
    /// The request had not been written: it is taken back, and no answer comes.
    TakenBack,
    /// The worker was asked; the answer comes as a [`Handover`].
    Asked,
    /// The request is no longer queued here (it was handed over, or lost).
    Gone,
}

struct Queued {
    id: u64,
    /// The request's frame, until the running call's exchange writes it.
    unsent: Option<Vec<u8>>,
    /// A withdraw to write (`Some(false)`) or written (`Some(true)`).
    withdraw: Option<bool>,
    /// To the waiting caller; `None` once it gave up.
    handover: Option<oneshot::Sender<Handover>>,
    /// What the worker's actor needs to run it; taken by the actor when
    /// it runs it (right after the call before, the request on the wire).
    parts: Option<JobParts>,
}

/// One worker's queue of at most [`MAX_QUEUED`] requests behind its running call.
#[derive(Default)]
pub struct Slot {
    queued: Mutex<VecDeque<Queued>>,
    /// Wakes the running call's exchange: something to write.
    wake: Notify,
    next_id: AtomicU64,
}

impl Slot {
    pub(crate) fn new() -> Slot {
        Slot {
            next_id: AtomicU64::new(1),
            ..Slot::default()
        }
    }

    fn state(&self) -> MutexGuard<'_, VecDeque<Queued>> {
        // Nothing panics while holding it; a poisoned lock's state is whole.
        self.queued.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request id of this worker, never used before.
    pub fn take_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Queues request `id` (its `frame` written by the running call's
    /// exchange; `parts` for the actor to run it) unless the slot is full.
    pub fn queue(
        &self,
        id: u64,
        frame: Vec<u8>,
        parts: JobParts,
    ) -> Option<oneshot::Receiver<Handover>> {
        let mut queued = self.state();
        if queued.len() >= MAX_QUEUED || frame.len() > MAX_QUEUED_FRAME {
            return None;
        }
        let (handover, receiver) = oneshot::channel();
        queued.push_back(Queued {
            id,
            unsent: Some(frame),
            withdraw: None,
            handover: Some(handover),
            parts: Some(parts),
        });
        drop(queued);
        self.wake.notify_one();
        Some(receiver)
    }

    /// Asks for request `id` back.
    pub fn withdraw(&self, id: u64) -> Withdrawal {
        let mut state = self.state();
        let Some(index) = state.iter().position(|q| q.id == id) else {
            return Withdrawal::Gone;
        };
        if state[index].unsent.is_some() {
            state.remove(index);
            return Withdrawal::TakenBack;
        }
        if state[index].withdraw.is_none() {
            state[index].withdraw = Some(false);
            drop(state);
            self.wake.notify_one();
        }
        Withdrawal::Asked
    }

    /// The caller of request `id` gave up: forgotten if it was never
    /// written, else asked back (if it starts anyway, the worker is not
    /// handed to anyone: see [`Slot::take`]).
    pub fn abandon(&self, id: u64) {
        if self.withdraw(id) == Withdrawal::Asked {
            if let Some(queued) = self.state().iter_mut().find(|q| q.id == id) {
                queued.handover = None;
            }
        }
    }

    /// Woken when there is something to write (see [`Slot::frames_to_write`]).
    pub(super) fn wake(&self) -> &Notify {
        &self.wake
    }

    /// The frames the running call's exchange is to write now, one after
    /// the other in one buffer (one write): queued requests in order, and
    /// withdraws; marked as written.
    pub(super) fn frames_to_write(&self, max_frame: usize) -> Result<Vec<u8>, ProtocolError> {
        let mut frames = Vec::new();
        for queued in self.state().iter_mut() {
            if let Some(frame) = queued.unsent.take() {
                frames.extend_from_slice(&frame);
            }
            if queued.withdraw == Some(false) {
                queued.withdraw = Some(true);
                let withdraw = Request::Withdraw { id: queued.id };
                frames.extend_from_slice(&encode_frame(&withdraw, max_frame)?);
            }
        }
        Ok(frames)
    }

    /// The worker gave request `id` back: its caller learns it.
    pub(super) fn withdrawn(&self, id: u64) {
        let taken = {
            let mut state = self.state();
            let index = state.iter().position(|q| q.id == id);
            index.and_then(|index| state.remove(index))
        };
        if let Some(handover) = taken.and_then(|q| q.handover) {
            let _ = handover.send(Handover::Withdrawn);
        }
    }

    /// As a request ends with the worker sound: the first queued request
    /// the actor has not run yet, when it is on the wire (the worker runs
    /// it next); its parts are taken, the request stays queued until the
    /// pool hands the worker to its caller ([`Slot::take`]). Called before
    /// the ended request's outcome is delivered, so the pool, which hands
    /// the worker on only after that, never takes a request on the wire
    /// that the actor has not taken up. (A request given back by the worker
    /// leaves the slot here only while it is behind the one running.)
    pub(super) fn next_on_wire(&self) -> Option<(u64, JobParts)> {
        let mut state = self.state();
        let queued = state.iter_mut().find(|q| q.parts.is_some())?;
        if queued.unsent.is_some() {
            return None;
        }
        Some((queued.id, queued.parts.take()?))
    }

    /// At the end of the running call: the first queued request, if any,
    /// leaves the slot (the worker runs it next). `None` as the sender:
    /// nobody waits for it any more.
    pub(crate) fn take(&self) -> Option<TakenRequest> {
        self.state().pop_front().map(|queued| TakenRequest {
            sent: queued.unsent.is_none(),
            handover: queued.handover,
            skipped: queued.unsent.is_none() && queued.parts.is_some(),
        })
    }

    /// Every queued request (the worker is gone).
    pub(crate) fn take_all(&self) -> Vec<TakenRequest> {
        std::iter::from_fn(|| self.take()).collect()
    }

    /// Whether another request may be queued.
    pub fn has_room(&self) -> bool {
        self.state().len() < MAX_QUEUED
    }
}

/// A queued request taken from its slot as the running call ended.
pub(crate) struct TakenRequest {
    /// On the wire: the worker may run it next.
    pub sent: bool,
    pub handover: Option<oneshot::Sender<Handover>>,
    /// On the wire, yet the actor did not run it after the request before
    /// it: nothing reads its answer. Never so while requests leave the slot
    /// only in their order (see [`Slot::next_on_wire`]); such a worker
    /// cannot be trusted.
    pub skipped: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(slot: &Slot) -> u64 {
        let id = slot.take_id();
        let (parts, _outcome) = JobParts::invoke("t", std::time::Duration::from_secs(1), None);
        slot.queue(id, vec![0; 8], parts).expect("room");
        id
    }

    #[test]
    fn the_actor_takes_requests_up_in_order_and_only_once_on_the_wire() {
        let slot = Slot::new();
        let (a, b) = (queue(&slot), queue(&slot));
        assert!(slot.next_on_wire().is_none(), "nothing is written yet");
        assert_eq!(slot.frames_to_write(1 << 20).unwrap().len(), 16);
        assert_eq!(slot.next_on_wire().map(|(id, _)| id), Some(a));
        assert_eq!(slot.next_on_wire().map(|(id, _)| id), Some(b));
        assert!(slot.next_on_wire().is_none(), "each is taken up once");
        // The pool hands them over in the same order, each taken up.
        let first = slot.take().expect("a");
        assert!(first.sent && !first.skipped);
        assert!(!slot.take().expect("b").skipped);
    }

    #[test]
    fn a_request_on_the_wire_handed_over_before_the_actor_took_it_up_is_skipped() {
        let slot = Slot::new();
        queue(&slot);
        slot.frames_to_write(1 << 20).unwrap();
        let taken = slot.take().expect("queued");
        assert!(taken.sent && taken.skipped);
        // Unsent, it is not: its caller writes it afresh.
        queue(&slot);
        let taken = slot.take().expect("queued");
        assert!(!taken.sent && !taken.skipped);
    }
}
