//! How a call ended, as one typed value ([`Ending`]), and the one place
//! that turns it into what the caller gets: the value, or the [`ToolError`]
//! whose `Display` is the agent's text. Every front end (the CLI, MCP, the
//! Python module through `toolpool host`) shows that text as it is.

use std::time::Duration;

use serde_json::Value;

use super::{CallOutcome, CallTime, Grace, Termination};
use crate::duration_text::format_secs;
use crate::error::{ErrorKind, ToolError};
use crate::protocol::{RemoteError, WireBlock};

/// How one call ended.
#[derive(Debug)]
pub(crate) enum Ending {
    /// The tool returned: its value, and an attachment result's blocks.
    Returned {
        value: Value,
        content: Option<Vec<WireBlock>>,
    },
    /// The tool raised (or the worker refused its arguments).
    Raised(RemoteError),
    /// The deadline passed; the worker was killed.
    TimedOut {
        stuck_at: Option<String>,
        grace: Grace,
        time: CallTime,
    },
    /// The worker died under the call.
    Died(Termination),
    /// The pool shut down under the call; its worker was killed.
    ShutDown,
    /// Two workers in a row were found broken before they read the request
    /// (the second's end): the call ran nowhere.
    BrokenTwice(Termination),
    /// The call's state machine refused a step: a bug in the pool, never a
    /// reason to run the call again.
    Lost,
    /// The call reached no worker.
    Refused(Refusal),
    /// Its arguments could not be encoded for the worker (nothing was sent;
    /// the worker serves on).
    Unsent(String),
}

/// Why a call reached no worker.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The pool (or the server in front of it) is shutting down.
    Closing,
    /// No worker became free within the queue-wait limit.
    Busy { waited: Duration, workers: usize },
    /// No worker runs, and the last start failed for `reason`.
    CannotStart { reason: String },
    /// The sandboxed worker of `session` could not start.
    SandboxCannotStart { session: String, reason: String },
}

impl Refusal {
    /// The refusal as the caller of `tool` gets it.
    pub(crate) fn into_error(self, tool: &str) -> ToolError {
        let (kind, message) = match self {
            Refusal::Closing => (ErrorKind::PoolClosed, "the pool is shutting down".into()),
            Refusal::Busy { waited, workers } => (
                ErrorKind::PoolBusy,
                format!(
                    "no worker became free within {} s ({workers} workers, all busy)",
                    format_secs(waited)
                ),
            ),
            Refusal::CannotStart { reason } => (
                ErrorKind::WorkerDied,
                format!("no worker is running and none can start: {reason}"),
            ),
            Refusal::SandboxCannotStart { session, reason } => (
                ErrorKind::WorkerDied,
                format!("cannot start a sandboxed worker for session '{session}': {reason}"),
            ),
        };
        ToolError::new(tool, kind, message)
    }
}

impl Ending {
    /// The ending of an attempt that ran on a worker, and how the call
    /// ended that worker (`None`: it serves on); `Err` for a worker lost
    /// before it read the request (the call may run elsewhere). `closing`:
    /// the pool is shutting down.
    pub(crate) fn of_attempt(
        outcome: CallOutcome,
        time: CallTime,
        closing: bool,
    ) -> Result<(Ending, Option<Termination>), Termination> {
        Ok(match outcome {
            CallOutcome::Reply {
                result,
                left_running,
            } => {
                let ended = left_running.map(|left| Termination::LeftRunning { what: left.what });
                let ending = match result {
                    Ok(reply) => Ending::Returned {
                        value: reply.value,
                        content: reply.content,
                    },
                    Err(remote) => Ending::Raised(remote),
                };
                (ending, ended)
            }
            CallOutcome::TimedOut { stuck_at, grace } => (
                Ending::TimedOut {
                    stuck_at,
                    grace,
                    time,
                },
                Some(Termination::TimedOut),
            ),
            CallOutcome::Died(_) if closing => (Ending::ShutDown, Some(Termination::ShutDown)),
            CallOutcome::Died(how) => (Ending::Died(how.clone()), Some(how)),
            CallOutcome::NotStarted(how) => return Err(how),
            CallOutcome::Unsent(why) => (Ending::Unsent(why), None),
        })
    }

    /// The call's result as its caller gets it, and an attachment result's
    /// blocks. `pid`: the worker's; `memory_limit`: the pool's
    /// `--memory-limit` in bytes, named when a worker dies under it.
    pub(crate) fn into_result(
        self,
        name: &str,
        pid: Option<i32>,
        memory_limit: Option<u64>,
    ) -> (Result<Value, ToolError>, Option<Vec<WireBlock>>) {
        let pid = pid.map_or_else(|| "?".to_string(), |pid| pid.to_string());
        let error = |kind: ErrorKind, message: String| Err(ToolError::new(name, kind, message));
        let result = match self {
            Ending::Returned { value, content } => return (Ok(value), content),
            Ending::Raised(remote) => {
                let mut error = ToolError::new(name, remote.kind, remote.message);
                error.traceback = remote.traceback;
                Err(error)
            }
            Ending::TimedOut {
                stuck_at,
                grace,
                time,
            } => {
                let place = match stuck_at {
                    Some(at) => format!("; it was at {at}"),
                    None => "; no stack dump was received".to_string(),
                };
                let ending = match grace {
                    Grace::None => place,
                    Grace::CleanedUp(took) => format!("; cleaned up in {} ms", took.as_millis()),
                    Grace::RanOut => format!(
                        "; killed after the {} s grace{place}",
                        format_secs(time.grace)
                    ),
                };
                error(
                    ErrorKind::Timeout,
                    format!(
                        "function '{name}' timed out after {} s; its worker (pid {pid}) was killed{ending}",
                        format_secs(time.timeout)
                    ),
                )
            }
            Ending::Died(how) => {
                let mut message = format!("the worker (pid {pid}) running '{name}' {how}");
                if let Some(bytes) = memory_limit {
                    message.push_str(&format!(
                        " (workers may use {} MB of address space: --memory-limit)",
                        bytes / (1024 * 1024)
                    ));
                }
                error(ErrorKind::WorkerDied, message)
            }
            Ending::ShutDown => error(
                ErrorKind::PoolClosed,
                "the pool shut down before the call finished; its worker was killed".into(),
            ),
            Ending::BrokenTwice(how) => error(
                ErrorKind::WorkerDied,
                format!(
                    "the worker (pid {pid}) was found broken before it read '{name}', twice: it {how}"
                ),
            ),
            Ending::Lost => error(
                ErrorKind::WorkerDied,
                "the pool lost track of the call (a bug in toolpool); it was not run again".into(),
            ),
            Ending::Refused(refusal) => Err(refusal.into_error(name)),
            Ending::Unsent(why) => error(
                ErrorKind::InvalidArguments,
                format!("arguments cannot be sent to the worker: {why}"),
            ),
        };
        (result, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(ending: Ending) -> String {
        let (result, _) = ending.into_result("wait", Some(42), Some(256 * 1024 * 1024));
        result.map_or_else(|e| e.to_string(), |v| v.to_string())
    }

    #[test]
    fn each_ending_has_its_agent_text() {
        let time = CallTime {
            timeout: Duration::from_millis(1500),
            grace: Duration::from_secs(2),
        };
        let timed_out = |grace| Ending::TimedOut {
            stuck_at: Some("tools.py:3 in wait".into()),
            grace,
            time,
        };
        assert_eq!(
            text(timed_out(Grace::None)),
            "Tool wait error: TimeoutError: function 'wait' timed out after 1.5 s; its worker (pid 42) was killed; it was at tools.py:3 in wait"
        );
        assert!(text(timed_out(Grace::RanOut))
            .ends_with("was killed; killed after the 2 s grace; it was at tools.py:3 in wait"));
        assert!(text(timed_out(Grace::CleanedUp(Duration::from_millis(12))))
            .ends_with("was killed; cleaned up in 12 ms"));
        assert_eq!(
            text(Ending::Died(Termination::Exited { code: 7 })),
            "Tool wait error: WorkerDied: the worker (pid 42) running 'wait' exited with code 7 (workers may use 256 MB of address space: --memory-limit)"
        );
        assert_eq!(
            text(Ending::BrokenTwice(Termination::HungUp)),
            "Tool wait error: WorkerDied: the worker (pid 42) was found broken before it read 'wait', twice: it closed its end of the channel without exiting, and was killed"
        );
        assert!(
            text(Ending::ShutDown).starts_with("Tool wait error: PoolClosed: the pool shut down")
        );
        assert!(text(Ending::Lost).contains("it was not run again"));
        assert_eq!(
            text(Ending::Unsent("a value nested too deep".into())),
            "Tool wait error: InvalidArguments: arguments cannot be sent to the worker: a value nested too deep"
        );
        let refused = |refusal| text(Ending::Refused(refusal));
        assert_eq!(
            refused(Refusal::Closing),
            "Tool wait error: PoolClosed: the pool is shutting down"
        );
        assert_eq!(
            refused(Refusal::Busy {
                waited: Duration::from_millis(250),
                workers: 2
            }),
            "Tool wait error: PoolBusy: no worker became free within 0.25 s (2 workers, all busy)"
        );
        assert!(refused(Refusal::CannotStart {
            reason: "python3: not found".into()
        })
        .ends_with("WorkerDied: no worker is running and none can start: python3: not found"));
        assert!(refused(Refusal::SandboxCannotStart {
            session: "s1".into(),
            reason: "no cgroup".into()
        })
        .ends_with("cannot start a sandboxed worker for session 's1': no cgroup"));
        let raised = Ending::Raised(RemoteError {
            kind: ErrorKind::Raised("ValueError".into()),
            message: "no".into(),
            traceback: Some("Traceback".into()),
        });
        let (result, _) = raised.into_result("wait", Some(42), None);
        let error = result.unwrap_err();
        assert_eq!(
            (error.to_string(), error.traceback.as_deref()),
            (
                "Tool wait error: ValueError: no".to_string(),
                Some("Traceback")
            )
        );
    }

    #[test]
    fn a_reply_keeps_its_value_and_blocks_and_a_lost_worker_may_run_it_elsewhere() {
        let time = CallTime {
            timeout: Duration::from_secs(1),
            grace: Duration::ZERO,
        };
        let reply = CallOutcome::Reply {
            result: Ok(crate::protocol::ReplyValue {
                value: serde_json::json!(3),
                content: None,
            }),
            left_running: None,
        };
        let (ending, ended) = Ending::of_attempt(reply, time, false).unwrap();
        assert!(ended.is_none());
        assert_eq!(ending.into_result("f", None, None).0.unwrap(), 3);
        let lost = CallOutcome::NotStarted(Termination::HungUp);
        assert_eq!(
            Ending::of_attempt(lost, time, false).unwrap_err(),
            Termination::HungUp
        );
        let died = CallOutcome::Died(Termination::Exited { code: 1 });
        let (ending, ended) = Ending::of_attempt(died, time, true).unwrap();
        assert!(matches!(ending, Ending::ShutDown));
        assert_eq!(ended, Some(Termination::ShutDown));
    }
}
