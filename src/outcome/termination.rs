//! How a worker ended: one variant per way, each with the words a
//! `WorkerDied` message uses, counted by variant for operators
//! (`PoolStats::terminations`, `toolpool_worker_terminations_total`).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::signal::Signal;

/// How a worker ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Termination {
    /// It exited by itself with this code (`os._exit(3)`).
    Exited { code: i32 },
    /// A signal the supervisor did not send ended it (a segfault; SIGKILL
    /// from elsewhere, usually the kernel out of memory).
    Signalled { signal: i32 },
    /// The supervisor killed it at its call's deadline.
    TimedOut,
    /// The supervisor killed it because the caller gave its call up.
    Cancelled,
    /// The pool shut down while it was running a call.
    ShutDown,
    /// The pool retired it, healthy: recycled after its calls, onto new
    /// code after a reload, or before it served another session.
    Retired,
    /// It sent what is not the protocol; the supervisor killed it.
    BrokeProtocol { error: String },
    /// It closed its end of the channel without exiting; the supervisor
    /// killed it.
    HungUp,
    /// It ended and its exit status could not be read.
    StatusUnknown,
    /// Its call answered but left threads or processes running in it; the
    /// supervisor killed it so that nothing left behind reaches another call.
    LeftRunning { what: String },
}

impl Termination {
    /// Every [`Termination::kind`], in the order operators see them.
    pub(crate) const KINDS: [&'static str; 10] = [
        "exited",
        "signalled",
        "timed_out",
        "cancelled",
        "shut_down",
        "retired",
        "broke_protocol",
        "hung_up",
        "status_unknown",
        "left_running",
    ];

    /// How it ended by itself, from the status its guardian mirrored.
    pub(crate) fn from_status(status: Option<ExitStatus>) -> Termination {
        let Some(status) = status else {
            return Termination::StatusUnknown;
        };
        match (status.code(), status.signal()) {
            (Some(code), _) => Termination::Exited { code },
            (None, Some(signal)) => Termination::Signalled { signal },
            (None, None) => Termination::StatusUnknown,
        }
    }

    /// The variant's position in [`Termination::KINDS`].
    pub(crate) fn index(&self) -> usize {
        match self {
            Termination::Exited { .. } => 0,
            Termination::Signalled { .. } => 1,
            Termination::TimedOut => 2,
            Termination::Cancelled => 3,
            Termination::ShutDown => 4,
            Termination::Retired => 5,
            Termination::BrokeProtocol { .. } => 6,
            Termination::HungUp => 7,
            Termination::StatusUnknown => 8,
            Termination::LeftRunning { .. } => 9,
        }
    }
}

fn signal_name(signal: i32) -> String {
    Signal::try_from(signal)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {signal}"))
}

/// What the worker did, as the end of "the worker (pid N) running 'f' …".
impl std::fmt::Display for Termination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Termination::Exited { code } => write!(f, "exited with code {code}"),
            Termination::Signalled { signal } if *signal == libc::SIGKILL => {
                write!(f, "was killed by SIGKILL (possibly out of memory)")
            }
            Termination::Signalled { signal } => {
                write!(f, "was killed by {}", signal_name(*signal))
            }
            Termination::TimedOut => write!(f, "was killed at its call's deadline"),
            Termination::Cancelled => write!(f, "was killed: its call was given up"),
            Termination::ShutDown => write!(f, "was killed by the pool's shutdown"),
            Termination::Retired => write!(f, "was retired"),
            Termination::BrokeProtocol { error } => {
                write!(f, "broke the protocol ({error}) and was killed")
            }
            Termination::HungUp => write!(
                f,
                "closed its end of the channel without exiting, and was killed"
            ),
            Termination::StatusUnknown => write!(f, "ended (its exit status could not be read)"),
            Termination::LeftRunning { what } => {
                write!(f, "was killed: its call left {what} after it answered")
            }
        }
    }
}

/// Describes an exit status for a failed start; `killed_by_us`: the
/// supervisor may have sent the SIGKILL, so it is not blamed on memory.
pub(crate) fn describe_exit(status: Option<ExitStatus>, killed_by_us: bool) -> String {
    match Termination::from_status(status) {
        Termination::Signalled { signal } if killed_by_us => {
            format!("was killed by {}", signal_name(signal))
        }
        termination => termination.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_descriptions_name_code_and_signal() {
        let exited = ExitStatus::from_raw(3 << 8);
        assert_eq!(
            Termination::from_status(Some(exited)),
            Termination::Exited { code: 3 }
        );
        assert_eq!(describe_exit(Some(exited), false), "exited with code 3");
        let segv = ExitStatus::from_raw(libc::SIGSEGV);
        assert_eq!(describe_exit(Some(segv), false), "was killed by SIGSEGV");
        let kill = ExitStatus::from_raw(libc::SIGKILL);
        assert_eq!(
            describe_exit(Some(kill), false),
            "was killed by SIGKILL (possibly out of memory)"
        );
        assert_eq!(describe_exit(Some(kill), true), "was killed by SIGKILL");
        assert_eq!(
            describe_exit(None, false),
            "ended (its exit status could not be read)"
        );
    }

    #[test]
    fn every_variant_has_its_own_kind() {
        let all = [
            Termination::Exited { code: 1 },
            Termination::Signalled { signal: 11 },
            Termination::TimedOut,
            Termination::Cancelled,
            Termination::ShutDown,
            Termination::Retired,
            Termination::BrokeProtocol { error: "x".into() },
            Termination::HungUp,
            Termination::StatusUnknown,
            Termination::LeftRunning {
                what: "1 thread".into(),
            },
        ];
        for (i, t) in all.iter().enumerate() {
            assert_eq!(t.index(), i);
        }
    }
}
