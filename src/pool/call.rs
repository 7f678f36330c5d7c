//! One call's life in the pool, as a state machine without processes: the
//! worker it waits for, the attempt it runs, and what happens to the
//! worker after each attempt. [`Pool`](super::Pool) drives it; the tests
//! here, and the model-based test in `call_model.rs`, drive it through
//! random interleavings.
//!
//! ```text
//!             got_worker()              attempt_ended(outcome)
//!  Waiting ───────────────▶ Running ───────────────────────────▶ Answered
//!     ▲                        │
//!     └── never started (once) ┘  never started twice ──────────▶ Answered (WorkerDied)
//! ```
//!
//! A call moves to another worker only on [`AttemptEnd::NeverStarted`],
//! which the worker layer gives only when the kernel showed that no byte of
//! the request left the pipe; and only once, so that a pool whose workers
//! keep breaking fails the call instead of cycling through them.

use crate::outcome::Termination;

/// Where a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallState {
    /// Waiting for a worker; `moved`: a worker was lost under it before.
    Waiting { moved: bool },
    /// Its request is on a worker.
    Running { moved: bool },
    /// Its caller has its answer (or gave up): nothing more happens to it.
    Answered,
}

/// How one attempt on a worker ended, as the call sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AttemptEnd {
    /// The tool ran (answered, raised, timed out, or died while it may
    /// have run): this is the call's answer.
    Ran,
    /// The worker was lost before it read the request.
    NeverStarted,
}

/// What the pool does next with the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallNext {
    /// Answer the caller with the attempt's result.
    Answer,
    /// Check out another worker and run it there.
    CheckOutAgain,
    /// A second worker was lost before it read the request: fail the call.
    FailBrokenTwice,
}

/// A transition the state does not allow: a bug in the pool, reported
/// rather than acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a call cannot {event} while it is {state:?}")]
pub(crate) struct Illegal {
    event: &'static str,
    state: CallState,
}

impl CallState {
    pub(crate) fn new() -> CallState {
        CallState::Waiting { moved: false }
    }

    /// A worker was checked out for it.
    pub(crate) fn got_worker(&mut self) -> Result<(), Illegal> {
        match *self {
            CallState::Waiting { moved } => {
                *self = CallState::Running { moved };
                Ok(())
            }
            state => Err(Illegal {
                event: "get a worker",
                state,
            }),
        }
    }

    /// A worker was checked out, but may not serve it (another session's,
    /// under `process` isolation): back in line, nothing was written.
    pub(crate) fn refused_by_worker(&mut self) -> Result<(), Illegal> {
        match *self {
            CallState::Running { moved } => {
                *self = CallState::Waiting { moved };
                Ok(())
            }
            state => Err(Illegal {
                event: "be refused by a worker",
                state,
            }),
        }
    }

    /// Its attempt on a worker ended.
    pub(crate) fn attempt_ended(&mut self, end: &AttemptEnd) -> Result<CallNext, Illegal> {
        let CallState::Running { moved } = *self else {
            return Err(Illegal {
                event: "end an attempt",
                state: *self,
            });
        };
        let next = match (end, moved) {
            (AttemptEnd::Ran, _) => CallNext::Answer,
            (AttemptEnd::NeverStarted, false) => CallNext::CheckOutAgain,
            (AttemptEnd::NeverStarted, true) => CallNext::FailBrokenTwice,
        };
        *self = match next {
            CallNext::CheckOutAgain => CallState::Waiting { moved: true },
            _ => CallState::Answered,
        };
        Ok(next)
    }

    /// Its caller gave up, or the pool closed under it.
    pub(crate) fn abandoned(&mut self) {
        *self = CallState::Answered;
    }
}

/// Where a worker goes once a call is done with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WorkerAfter {
    /// Sound: back to the idle queue for the next call.
    Idle,
    /// Sound but done (`--max-calls-per-worker`, a reload's old code, the
    /// pool closing): its stdin is closed and it exits.
    Retire(Termination),
    /// Gone or untrustworthy (killed at a deadline, died, left threads or
    /// processes running): finished off, and replaced.
    Replace(Termination),
}

/// What a sound worker's state asks for, after a call: `ended` is how the
/// call ended the worker, if it did.
pub(crate) fn worker_after(
    ended: Option<Termination>,
    calls_served: u64,
    max_calls: Option<u64>,
    stale: bool,
    closing: bool,
) -> WorkerAfter {
    if let Some(how) = ended {
        return WorkerAfter::Replace(how);
    }
    if closing {
        return WorkerAfter::Retire(Termination::ShutDown);
    }
    if stale || max_calls.is_some_and(|max| calls_served >= max) {
        return WorkerAfter::Retire(Termination::Retired);
    }
    WorkerAfter::Idle
}

/// Where the workers a call may run on come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Any worker serves any session.
    Shared,
    /// A worker serves the session whose call it ran first, and no other
    /// (`--session-isolation process`).
    PerSession,
    /// Each session's workers run in a sandbox made for its folders; a
    /// call runs on one of its session's (`--sandbox`).
    Sandboxed,
}

impl Placement {
    /// Whether a worker that has served `served` (none yet: `None`) may run
    /// a call of `session`. Never another session's worker, except when
    /// every session shares the workers.
    pub(crate) fn admits(self, served: Option<&str>, session: &str) -> bool {
        match self {
            Placement::Shared => true,
            Placement::PerSession | Placement::Sandboxed => {
                served.is_none_or(|served| served == session)
            }
        }
    }

    /// Which idle worker a call of `session` takes, given the session each
    /// has served, longest idle first, and whether one of the session's
    /// workers is parked (`parking`): under per-session placement one of
    /// its own session's; else, with one of its own parked, the longest
    /// idle of another session (parked in its turn while the session's own
    /// resumes); else a fresh one; else the longest idle (parked, and a
    /// fresh one takes its place). Otherwise simply the longest idle. A
    /// session so keeps its worker between its calls.
    pub(crate) fn choose<'a>(
        self,
        served: impl IntoIterator<Item = Option<&'a str>> + Clone,
        session: &str,
        parked_here: bool,
    ) -> usize {
        if self != Placement::PerSession {
            return 0;
        }
        let position =
            |wanted: &dyn Fn(Option<&str>) -> bool| served.clone().into_iter().position(wanted);
        position(&|s| s == Some(session))
            .or_else(|| parked_here.then(|| position(&|s| s.is_some())).flatten())
            .or_else(|| position(&|s| s.is_none()))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_takes_its_own_sessions_idle_worker_then_a_fresh_one_then_the_oldest() {
        let idle = [Some("b"), None, Some("a"), Some("a")];
        assert_eq!(Placement::PerSession.choose(idle, "a", false), 2);
        assert_eq!(Placement::PerSession.choose(idle, "a", true), 2);
        assert_eq!(Placement::PerSession.choose(idle, "c", false), 1);
        assert_eq!(
            Placement::PerSession.choose([Some("b"), Some("c")], "a", false),
            0
        );
        assert_eq!(Placement::Shared.choose(idle, "a", false), 0);
        assert_eq!(Placement::Sandboxed.choose(idle, "a", false), 0);
    }

    #[test]
    fn a_session_with_a_parked_worker_displaces_another_sessions_rather_than_a_fresh_one() {
        // The other session's worker is parked and the session's own
        // resumes: the fresh one stays for a session that has none.
        let idle = [None, Some("b"), Some("c")];
        assert_eq!(Placement::PerSession.choose(idle, "a", true), 1);
        assert_eq!(Placement::PerSession.choose(idle, "a", false), 0);
        // Only fresh ones idle: one of them serves (the parked one waits on).
        assert_eq!(Placement::PerSession.choose([None, None], "a", true), 0);
    }

    #[test]
    fn a_call_that_ran_is_answered_whatever_happened_to_its_worker() {
        let mut call = CallState::new();
        call.got_worker().unwrap();
        assert_eq!(call.attempt_ended(&AttemptEnd::Ran), Ok(CallNext::Answer));
        assert_eq!(call, CallState::Answered);
        assert!(call.got_worker().is_err(), "an answered call runs no more");
        assert!(call.attempt_ended(&AttemptEnd::Ran).is_err());
    }

    #[test]
    fn a_call_moves_once_when_its_worker_never_read_it_and_fails_the_second_time() {
        let mut call = CallState::new();
        call.got_worker().unwrap();
        assert_eq!(
            call.attempt_ended(&AttemptEnd::NeverStarted),
            Ok(CallNext::CheckOutAgain)
        );
        assert_eq!(call, CallState::Waiting { moved: true });
        call.got_worker().unwrap();
        assert_eq!(
            call.attempt_ended(&AttemptEnd::NeverStarted),
            Ok(CallNext::FailBrokenTwice)
        );
        assert_eq!(call, CallState::Answered);
    }

    #[test]
    fn a_call_refused_by_a_worker_of_another_session_waits_again_unmoved() {
        let mut call = CallState::new();
        call.got_worker().unwrap();
        call.refused_by_worker().unwrap();
        assert_eq!(call, CallState::Waiting { moved: false });
        assert!(call.refused_by_worker().is_err());
    }

    #[test]
    fn a_worker_goes_back_only_when_sound_fresh_and_not_worn_out() {
        assert_eq!(worker_after(None, 3, None, false, false), WorkerAfter::Idle);
        assert_eq!(
            worker_after(None, 3, Some(4), false, false),
            WorkerAfter::Idle
        );
        assert_eq!(
            worker_after(None, 4, Some(4), false, false),
            WorkerAfter::Retire(Termination::Retired)
        );
        assert_eq!(
            worker_after(None, 1, None, true, false),
            WorkerAfter::Retire(Termination::Retired)
        );
        assert_eq!(
            worker_after(None, 1, None, false, true),
            WorkerAfter::Retire(Termination::ShutDown)
        );
        assert_eq!(
            worker_after(Some(Termination::TimedOut), 1, None, false, false),
            WorkerAfter::Replace(Termination::TimedOut)
        );
    }

    #[test]
    fn only_shared_placement_lets_a_worker_serve_two_sessions() {
        assert!(Placement::Shared.admits(Some("a"), "b"));
        for placement in [Placement::PerSession, Placement::Sandboxed] {
            assert!(placement.admits(None, "b"));
            assert!(placement.admits(Some("b"), "b"));
            assert!(!placement.admits(Some("a"), "b"));
        }
    }
}
