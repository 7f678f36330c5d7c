//! A call's checkout: an idle worker, in arrival order, or a place behind a
//! busy worker's running call (pipelining), within the queue-wait limit.

use std::sync::Arc;

use tokio::time::Instant;

use super::pipelined::{MakeQueued, Ticket, TicketEnd};
use super::{Gauge, Lease, Shared};
use crate::duration_text::format_secs;
use crate::error::{ErrorKind, ToolError};
use crate::worker::{QueuedOnWire, Worker};

impl Shared {
    /// Waits for a worker for a call of `session`, within the queue-wait
    /// limit: an idle one, or a busy one the call is queued behind
    /// (`encode` makes its request under that worker's id).
    pub(super) async fn checkout(
        self: &Arc<Self>,
        tool: &str,
        session: &str,
        encode: &MakeQueued<'_>,
    ) -> Result<Checkout, ToolError> {
        let started = Instant::now();
        let limit = self.queue_wait.map(|limit| started + limit);
        let busy_error = || {
            ToolError::new(
                tool,
                ErrorKind::PoolBusy,
                format!(
                    "no worker became free within {} s ({} workers, all busy)",
                    format_secs(started.elapsed()),
                    self.size
                ),
            )
        };
        loop {
            let ticket = match self.wait_for_worker(tool, session, encode, limit).await? {
                Some(Got::Idle(worker)) => {
                    return Ok(Checkout {
                        lease: Lease::new(worker, self),
                        queued: None,
                    })
                }
                Some(Got::Queued(ticket)) => ticket,
                None => return Err(busy_error()),
            };
            let queued = Gauge::up(&self.counters.queued);
            let end = ticket.wait(limit).await;
            drop(queued);
            return match end {
                TicketEnd::Queued { lease, queued } => Ok(Checkout { lease, queued }),
                TicketEnd::Rescued(lease) => Ok(Checkout {
                    lease,
                    queued: None,
                }),
                // The worker it was queued on died before it started.
                TicketEnd::Retry => continue,
                TicketEnd::TimedOut => Err(busy_error()),
            };
        }
    }

    /// An idle worker, or a place behind a busy one; `None` when `limit` passed first.
    async fn wait_for_worker(
        self: &Arc<Self>,
        tool: &str,
        session: &str,
        encode: &MakeQueued<'_>,
        limit: Option<Instant>,
    ) -> Result<Option<Got>, ToolError> {
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
        // Nobody waiting and a worker idle: take it without queueing.
        if let Some(worker) = self.workers.try_take_idle() {
            return Ok(Some(Got::Idle(worker)));
        }
        if let Some(ticket) = self.try_queue(session, encode) {
            return Ok(Some(Got::Queued(ticket)));
        }
        let queued = Gauge::up(&self.counters.queued);
        let _leaving = LeavingTheLine(self);
        // In line for the next idle worker (the place is kept while this
        // waits), or a running call's slot as it frees up.
        let take = async {
            let idle = self.workers.take_idle();
            tokio::pin!(idle);
            loop {
                tokio::select! {
                    worker = &mut idle => return worker.map(Got::Idle),
                    () = self.queueing.slot_freed().notified() => {
                        if let Some(ticket) = self.try_queue(session, encode) {
                            return Some(Got::Queued(ticket));
                        }
                    }
                }
            }
        };
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

/// Leaving the line for an idle worker (with one or not): a worker kept
/// idle for this caller while calls wait queued behind running ones goes to
/// the first of them (see [`Shared::make_idle`]).
struct LeavingTheLine<'a>(&'a Arc<Shared>);

impl Drop for LeavingTheLine<'_> {
    fn drop(&mut self) {
        let shared = self.0;
        if shared.has_queued_calls() {
            if let Some(worker) = shared.workers.try_take_idle() {
                shared.make_idle(worker);
            }
        }
    }
}

/// What a caller waiting for a worker got.
pub(super) enum Got {
    Idle(Worker),
    Queued(Ticket),
}

/// A worker checked out for a call.
pub(super) struct Checkout {
    pub(super) lease: Lease,
    /// The call's request is on the wire already (queued behind the
    /// worker's call before).
    pub(super) queued: Option<QueuedOnWire>,
}
