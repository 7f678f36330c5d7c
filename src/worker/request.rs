//! One request's life on a worker, as the supervisor knows it: a state
//! machine whose transitions are decided by what the kernel says (bytes
//! written, bytes left unread in the pipe, the deadline's clock), never by
//! what the worker says about itself.
//!
//! ```text
//!            wrote(n)                  reply()
//!  Writing ───────────▶ Sent ───────────────────▶ Answered
//!     │                  │  │
//!     │                  │  │ timed_out(grace)            reply(), timed_out()
//!     │                  │  └──────────────────▶ Grace ─────────▶ Ended(TimedOut)
//!     │ timed_out()      │ timed_out()            ──▶ Ended(TimedOut)
//!     │ abandoned()      │ abandoned()            ──▶ Ended(Abandoned)
//!     │ lost(unread)     │ lost(unread)           ──▶ Ended(Lost(fate))
//! ```
//!
//! (`Grace` ends as `Sent` does when abandoned or lost.) A reply in the
//! grace is the end of the tool's clean-up, never a result: the call timed
//! out.
//!
//! The one question that decides exactly-once is what happens when the
//! worker is lost: the call may move to another worker only when not one
//! byte of its request left the pipe ([`Fate::NeverRead`]). The pipe is
//! empty when a request is written (checked: [`RequestState::start`]), and
//! a pipe's unread bytes are counted by the kernel (`FIONREAD`), read once
//! every process of the worker is dead. A worker that read any of it may
//! have run it: [`Fate::MayHaveRun`], and the call fails.

use std::os::fd::AsRawFd;

/// Where one request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestState {
    /// `written` of its frame's `len` bytes are in the worker's stdin pipe.
    Writing {
        written: usize,
        len: usize,
    },
    /// The whole frame is in the pipe; the worker may have read it.
    Sent {
        len: usize,
    },
    /// Past its deadline, the tool was asked to clean up.
    Grace {
        len: usize,
    },
    /// Its reply was read.
    Answered,
    Ended(Ending),
}

/// How a request that got no reply ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Its deadline passed with no reply readable.
    TimedOut,
    /// Its caller gave up.
    Abandoned,
    /// The worker died or broke the protocol.
    Lost(Fate),
}

/// Whether a request on a lost worker may have run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// No process read a byte of it: it never started, and may run elsewhere.
    NeverRead,
    /// The worker may have read it, and run it: it must not run again.
    MayHaveRun,
}

/// What the worker's actor does after a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Hand the reply to the caller (once the worker's leftovers are checked).
    Deliver,
    /// Ask for a stack dump, then kill every process of the worker.
    DumpAndKill,
    /// Ask the tool to clean up (it has a grace), and wait on.
    AskToCleanUp,
    /// Kill every process of the worker now.
    Kill,
    /// The worker is gone and the request never started: run it elsewhere.
    MoveElsewhere,
    /// The worker is gone and may have run the request: the call fails.
    FailWorkerDied,
}

/// A transition that the state does not allow (a worker that answers a
/// request it has not been sent whole, say): the worker broke the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    #[error("the worker answered a request before it was sent whole")]
    ReplyBeforeSent,
    #[error("{0} bytes were left unread in the worker's request pipe")]
    PipeNotEmpty(usize),
    #[error("the kernel cannot say what is left in the worker's request pipe")]
    PipeUnknown,
    #[error("the request has ended already")]
    Ended,
}

impl RequestState {
    /// A request of `len` bytes about to be written into a pipe that holds
    /// `unread` bytes (`None`: the kernel could not say). Anything left in
    /// the pipe would make [`RequestState::lost`]'s count meaningless, and
    /// means something other than the shim reads or leaves requests there.
    pub(crate) fn start(len: usize, unread: Option<usize>) -> Result<RequestState, Refused> {
        match unread {
            Some(0) => Ok(RequestState::Writing { written: 0, len }),
            Some(left) => Err(Refused::PipeNotEmpty(left)),
            None => Err(Refused::PipeUnknown),
        }
    }

    /// Bytes of the frame still to write.
    pub(crate) fn unwritten(&self) -> usize {
        match *self {
            RequestState::Writing { written, len } => len - written,
            _ => 0,
        }
    }

    /// `n` more bytes of the frame went into the pipe.
    pub(crate) fn wrote(&mut self, n: usize) {
        if let RequestState::Writing { written, len } = *self {
            let written = (written + n).min(len);
            *self = if written == len {
                RequestState::Sent { len }
            } else {
                RequestState::Writing { written, len }
            };
        }
    }

    /// Bytes of the frame in the pipe, read or not.
    fn written(&self) -> usize {
        match *self {
            RequestState::Writing { written, .. } => written,
            RequestState::Sent { len } | RequestState::Grace { len } => len,
            _ => 0,
        }
    }

    /// Its reply arrived: the result, or in the grace the end of the
    /// tool's clean-up ([`Action::Kill`]: the call timed out).
    pub(crate) fn reply(&mut self) -> Result<Action, Refused> {
        match *self {
            RequestState::Sent { .. } => {
                *self = RequestState::Answered;
                Ok(Action::Deliver)
            }
            RequestState::Grace { .. } => {
                *self = RequestState::Ended(Ending::TimedOut);
                Ok(Action::Kill)
            }
            RequestState::Writing { .. } => Err(Refused::ReplyBeforeSent),
            RequestState::Answered | RequestState::Ended(_) => Err(Refused::Ended),
        }
    }

    /// Its deadline passed with no reply readable (a readable one is the
    /// result: the exchange reads it before it calls this). `grace`: the
    /// tool may clean up first — once, and only a tool that has its whole
    /// request; its grace ending is this again, without.
    pub(crate) fn timed_out(&mut self, grace: bool) -> Action {
        match *self {
            RequestState::Sent { len } if grace => {
                *self = RequestState::Grace { len };
                Action::AskToCleanUp
            }
            _ => {
                self.end(Ending::TimedOut);
                Action::DumpAndKill
            }
        }
    }

    /// Its caller gave up: the worker is in an unknown state.
    pub(crate) fn abandoned(&mut self) -> Action {
        self.end(Ending::Abandoned);
        Action::Kill
    }

    /// The worker was lost; `unread`: the bytes the kernel says are left in
    /// its stdin pipe, read once every process of the worker is dead.
    pub(crate) fn lost(&mut self, unread: Option<usize>) -> Action {
        let fate = match unread {
            Some(unread) if unread == self.written() => Fate::NeverRead,
            _ => Fate::MayHaveRun,
        };
        let answered = *self == RequestState::Answered;
        self.end(Ending::Lost(fate));
        match fate {
            Fate::NeverRead if !answered => Action::MoveElsewhere,
            _ => Action::FailWorkerDied,
        }
    }

    fn end(&mut self, ending: Ending) {
        if !matches!(self, RequestState::Ended(_)) {
            *self = RequestState::Ended(ending);
        }
    }
}

/// The bytes waiting unread in the pipe `fd` belongs to (either end), as
/// the kernel counts them; `None` when it cannot say.
pub(crate) fn unread_in_pipe(fd: &impl AsRawFd) -> Option<usize> {
    let mut unread: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which is valid.
    let done = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut unread) };
    (done == 0)
        .then_some(unread)
        .and_then(|n| usize::try_from(n).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_sent_once_every_byte_is_written() {
        let mut request = RequestState::start(10, Some(0)).unwrap();
        assert_eq!(request.unwritten(), 10);
        request.wrote(4);
        assert_eq!(
            request,
            RequestState::Writing {
                written: 4,
                len: 10
            }
        );
        assert_eq!(request.reply(), Err(Refused::ReplyBeforeSent));
        request.wrote(6);
        assert_eq!(request, RequestState::Sent { len: 10 });
        assert_eq!(request.reply(), Ok(Action::Deliver));
        assert_eq!(
            request.reply(),
            Err(Refused::Ended),
            "one reply per request"
        );
    }

    #[test]
    fn a_request_is_never_written_into_a_pipe_that_holds_something() {
        assert_eq!(
            RequestState::start(10, Some(3)),
            Err(Refused::PipeNotEmpty(3))
        );
        assert!(
            RequestState::start(10, None).is_err(),
            "unknown is not empty"
        );
    }

    #[test]
    fn a_lost_request_moves_only_when_the_kernel_says_none_of_it_was_read() {
        // Every byte still in the pipe: it never started.
        let mut request = RequestState::start(10, Some(0)).unwrap();
        request.wrote(10);
        assert_eq!(request.lost(Some(10)), Action::MoveElsewhere);
        assert_eq!(request, RequestState::Ended(Ending::Lost(Fate::NeverRead)));
        // One byte read: it may have run.
        let mut request = RequestState::start(10, Some(0)).unwrap();
        request.wrote(10);
        assert_eq!(request.lost(Some(9)), Action::FailWorkerDied);
        // The kernel could not say: it may have run.
        let mut request = RequestState::start(10, Some(0)).unwrap();
        request.wrote(10);
        assert_eq!(request.lost(None), Action::FailWorkerDied);
        // Half written and none read (the worker died during the write).
        let mut request = RequestState::start(10, Some(0)).unwrap();
        request.wrote(5);
        assert_eq!(request.lost(Some(5)), Action::MoveElsewhere);
        // Nothing written at all (the pipe was closed).
        let mut request = RequestState::start(10, Some(0)).unwrap();
        assert_eq!(request.lost(Some(0)), Action::MoveElsewhere);
    }

    #[test]
    fn a_request_that_was_answered_or_timed_out_never_moves() {
        let mut answered = RequestState::start(4, Some(0)).unwrap();
        answered.wrote(4);
        answered.reply().unwrap();
        assert_eq!(answered.lost(Some(0)), Action::FailWorkerDied);
        let mut timed_out = RequestState::start(4, Some(0)).unwrap();
        timed_out.wrote(4);
        assert_eq!(timed_out.timed_out(false), Action::DumpAndKill);
        assert_eq!(timed_out.lost(Some(4)), Action::FailWorkerDied);
        assert_eq!(timed_out, RequestState::Ended(Ending::TimedOut));
    }

    #[test]
    fn a_grace_is_given_once_and_a_reply_in_it_is_a_timeout_not_a_result() {
        let mut request = RequestState::start(4, Some(0)).unwrap();
        request.wrote(2);
        // Not all of it written: no tool is running to clean up.
        assert_eq!(request.timed_out(true), Action::DumpAndKill);
        let mut request = RequestState::start(4, Some(0)).unwrap();
        request.wrote(4);
        assert_eq!(request.timed_out(true), Action::AskToCleanUp);
        assert_eq!(request, RequestState::Grace { len: 4 });
        // The reply is the clean-up's end: the worker is killed, nothing delivered.
        assert_eq!(request.reply(), Ok(Action::Kill));
        assert_eq!(request, RequestState::Ended(Ending::TimedOut));
        assert_eq!(request.reply(), Err(Refused::Ended));
        // The grace running out ends it, however often a grace is asked for.
        let mut request = RequestState::start(4, Some(0)).unwrap();
        request.wrote(4);
        assert_eq!(request.timed_out(true), Action::AskToCleanUp);
        assert_eq!(request.timed_out(true), Action::DumpAndKill);
        assert_eq!(request, RequestState::Ended(Ending::TimedOut));
        // A worker lost in its grace read the request: it never moves.
        let mut request = RequestState::start(4, Some(0)).unwrap();
        request.wrote(4);
        request.timed_out(true);
        assert_eq!(request.lost(Some(0)), Action::FailWorkerDied);
    }

    #[test]
    fn the_kernel_counts_what_is_left_in_a_pipe_from_either_end() {
        let (read, write) = nix::unistd::pipe().unwrap();
        assert_eq!(unread_in_pipe(&write), Some(0));
        nix::unistd::write(&write, b"hello").unwrap();
        assert_eq!(unread_in_pipe(&write), Some(5));
        let mut two = [0u8; 2];
        nix::unistd::read(&read, &mut two).unwrap();
        assert_eq!(unread_in_pipe(&write), Some(3));
        drop(read);
        assert_eq!(
            unread_in_pipe(&write),
            Some(3),
            "still counted once the reader is gone"
        );
    }
}
