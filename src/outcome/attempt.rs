//! How one attempt at a call on a worker ended, as the worker's actor
//! reports it, and what the call may have left behind in the worker.

use std::time::Duration;

use super::Termination;
use crate::protocol::{RemoteError, ReplyValue};

/// How a call on a worker ended, seen from the worker's side.
#[derive(Debug)]
pub(crate) enum CallOutcome {
    /// The worker answered. `left_running`: what the call left behind in
    /// the worker (threads, processes, signals, timers); then the worker
    /// has been killed and must not serve again. `None`: the worker is as
    /// it was.
    Reply {
        result: Result<ReplyValue, RemoteError>,
        left_running: Option<LeftBehind>,
    },
    /// The deadline passed; the worker's group was killed (the guardian
    /// finishes the clean-up, and is reaped, when the `Worker` is dropped).
    TimedOut {
        /// Where the code was, from the stack dump (`file:line in function`).
        stuck_at: Option<String>,
        /// What the tool did with a grace after its deadline.
        grace: Grace,
    },
    /// The worker died or broke the protocol, and may have run the request
    /// (it read some of it): it is gone, and the call must not run again.
    Died(Termination),
    /// The worker was lost before it read a byte of the request (the
    /// kernel counted every byte still in the pipe): an earlier call damaged
    /// it. It is gone; the request may run elsewhere.
    NotStarted(Termination),
    /// The request could not be encoded (too large, nested too deep), so
    /// nothing was sent: the worker serves on.
    Unsent(String),
}

/// A timed-out call's grace: how long its tool may clean up after the
/// deadline (`TimeoutError` raised in its main thread) before it is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grace {
    /// It had none: killed at the deadline.
    None,
    /// It answered this long after it was asked to clean up.
    CleanedUp(Duration),
    /// It was still running when the grace ran out.
    RanOut,
}

/// How long a call may run: its timeout, then (for a tool asked to clean
/// up) its grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallTime {
    pub timeout: Duration,
    pub grace: Duration,
}

/// What a call left behind, and which kind of thing it is (the cause the
/// pool counts retirements by, `PoolStats::left_running`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeftBehind {
    /// One of [`LeftBehind::CAUSES`].
    pub cause: &'static str,
    /// What, for the log and the worker's termination.
    pub what: String,
}

impl LeftBehind {
    /// Every cause, in the order operators see them.
    pub(crate) const CAUSES: [&'static str; 8] = [
        "threads",
        "processes",
        "pending_signals",
        "blocked_signals",
        "signal_handlers",
        "posix_timers",
        "protocol_descriptors",
        "unreadable",
    ];

    pub(crate) fn new(cause: &'static str, what: impl Into<String>) -> LeftBehind {
        LeftBehind {
            cause,
            what: what.into(),
        }
    }
}
