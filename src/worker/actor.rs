//! The worker's actor: one task per worker that owns its processes (the
//! guardian, as this process's child, and the worker it forked: the only
//! holder of their pidfds, and so the only one that kills them), its
//! channel's read side (the framed stdout, the dump pipe) and, while a
//! request runs, the worker's stdin (handed over with the job, handed back
//! with its end). The [`Worker`](super::Worker) handle the pool moves
//! around sends it [`Command`]s and awaits the answers; the handle, a call
//! given up and the pool's shutdown end the worker by pulling its
//! [`KillSwitch`], which this task watches whatever it is doing.
//!
//! A request's job runs to its end here: its request written, its callbacks
//! served, its deadline kept, the worker killed at the deadline (or when
//! its caller gives up: the job's answer channel closes), what the call
//! left running checked before the worker may serve again. One request at
//! a time: nothing is ever written to a worker behind a running call.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{timeout, timeout_at, Instant};

use super::guardian::GuardianProcess;
use super::leftovers::Leftovers;
use super::request::RequestState;
use super::stderr::StderrLog;
use super::switches::{EndNotice, KillSwitch};
use super::{
    describe_exit, CallOutcome, CallbackService, StartError, StderrText, Termination, WorkerSpec,
};
use crate::process::{pidfd_open, KillMechanism, ProcessId, WorkerProcesses};
use crate::protocol::{next_message, Message, MessageReader, ProtocolError, PROTOCOL_VERSION};
use crate::sandbox::WorkerCgroup;

/// What the handle asks of its actor.
pub(super) enum Command {
    /// Run one request to its end and answer with how it ended.
    Run(Job),
    /// Kill every process of the worker and reap the guardian; answers with
    /// the guardian's status (it mirrors the worker's).
    Kill(oneshot::Sender<Option<std::process::ExitStatus>>),
    /// Reap a worker whose stdin the handle closed (it exits); killed if it lingers.
    Retire(oneshot::Sender<()>),
    /// The worker died while it waited: reap it and say how it ended.
    HowItEnded(oneshot::Sender<Termination>),
}

/// One request as the actor runs it.
pub(super) struct Job {
    pub(super) id: u64,
    /// The request's whole frame; `state` says how much of it is written.
    pub(super) frame: Vec<u8>,
    pub(super) state: RequestState,
    /// The worker's stdin, the actor's until the job ends.
    pub(super) stdin: pipe::Sender,
    /// When its first bytes were written: its deadline runs from then.
    pub(super) written_at: Instant,
    pub(super) run: JobParts,
}

/// How a job ended: its outcome, and the worker's stdin when the worker is
/// sound (else `None`: it is being killed).
pub(super) struct JobEnd {
    pub(super) outcome: CallOutcome,
    pub(super) stdin: Option<pipe::Sender>,
}

/// What the actor needs to run a request beyond its frame.
pub(crate) struct JobParts {
    /// The tool's name (or `catalog`, `ping`), for logs and the stderr tag.
    pub(super) label: String,
    /// From the moment the request is written.
    pub(super) timeout: Duration,
    /// After the timeout, for the tool to clean up.
    pub(super) grace: Duration,
    pub(super) callbacks: Option<Arc<dyn CallbackService>>,
    /// Where the end goes; closed when the caller gave up.
    pub(super) end: oneshot::Sender<JobEnd>,
}

impl JobParts {
    pub(super) fn new(
        label: &str,
        time: super::CallTime,
        callbacks: Option<Arc<dyn CallbackService>>,
    ) -> (JobParts, oneshot::Receiver<JobEnd>) {
        let (end, receiver) = oneshot::channel();
        let parts = JobParts {
            label: label.to_string(),
            timeout: time.timeout,
            grace: time.grace,
            callbacks,
            end,
        };
        (parts, receiver)
    }
}

/// The worker's processes and channel, owned by its actor task.
pub(super) struct Actor {
    /// The guardian, this process's child (spawned, or cloned by the template).
    pub(super) guardian_process: GuardianProcess,
    /// The guardian and, once it said hello, the worker it forked, as the
    /// kernel names them: the only way to signal them.
    pub(super) processes: WorkerProcesses,
    /// The call it ran last, blamed when the next finds it broken.
    pub(super) last_call: Option<String>,
    /// Messages from its stdout; a read can race a callback (cancel-safe).
    pub(super) messages: MessageReader<pipe::Receiver>,
    pub(super) dump: pipe::Receiver,
    /// Its stderr, logged to its end after each reply.
    pub(super) stderr: Arc<StderrLog>,
    pub(super) spec: Arc<WorkerSpec>,
    /// Set once the guardian is reaped: nothing is signalled after that (a
    /// group the kernel may have given to another process).
    pub(super) reaped: bool,
    /// Pulled by whoever else wants the worker gone (see [`KillSwitch`]).
    pub(super) switch: KillSwitch,
    /// Set once SIGKILL went to the worker and its group: a worker is
    /// killed once, whoever asked first.
    pub(super) killed: bool,
    /// Given when the guardian ends while this waits for a command, or
    /// when this ends.
    pub(super) end: EndNotice,
    /// A pidfd of the guardian, readable once it ended, watched between
    /// commands (`None` on a kernel without pidfds, and once it fired).
    guardian_end: Option<AsyncFd<OwnedFd>>,
    /// Removed once the worker's processes are gone (`--sandbox`).
    pub(super) _cgroup: Arc<WorkerCgroup>,
    /// What a call left running, checked after each reply (set once the
    /// worker said hello).
    pub(super) leftovers: Option<Leftovers>,
}

/// What the worker said in its hello.
pub(super) struct Hello {
    pub(super) python: String,
    pub(super) codec: String,
    pub(super) executable: String,
    pub(super) kill_mechanism: KillMechanism,
}

/// What woke the actor between commands. Lives for one step on the stack:
/// a job boxed to even the variants out would cost an allocation a call.
#[allow(clippy::large_enum_variant)]
enum Wake {
    Command(Command),
    KillSwitch,
    GuardianEnded,
    /// The handle is gone.
    Orphaned,
}

impl Actor {
    /// The actor of a guardian just spawned (or cloned) as `guardian`,
    /// which must be this process's child not yet reaped.
    pub(super) fn new(
        (guardian_process, guardian): (GuardianProcess, ProcessId),
        messages: MessageReader<pipe::Receiver>,
        dump: pipe::Receiver,
        stderr: Arc<StderrLog>,
        spec: Arc<WorkerSpec>,
        cgroup: Arc<WorkerCgroup>,
    ) -> Actor {
        let guardian_end = pidfd_open(guardian).and_then(|fd| {
            // SAFETY: an OwnedFd's descriptor is open, and stays the same
            // one until the AsyncFd drops it.
            unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.ok()
        });
        Actor {
            guardian_process,
            processes: WorkerProcesses::of_guardian(guardian),
            last_call: None,
            messages,
            dump,
            stderr,
            spec,
            reaped: false,
            switch: KillSwitch::default(),
            killed: false,
            end: EndNotice::default(),
            guardian_end,
            _cgroup: cgroup,
            leftovers: None,
        }
    }

    pub(super) fn is_reaped(&self) -> bool {
        self.reaped
    }

    /// Whether a kill would still do anything: the worker is neither
    /// killed nor reaped (a pulled switch is then answered once).
    pub(super) fn may_kill(&self) -> bool {
        !self.killed && !self.reaped
    }

    pub(super) fn stderr_text(&self) -> StderrText {
        self.stderr.tail_text()
    }

    /// The worker's pid as the kernel names it (for the log).
    pub(super) fn pid(&self) -> i32 {
        self.processes.pid()
    }

    /// Waits for the hello (sent once the worker imported the tools),
    /// naming the module whose import broke or hung the start.
    /// `pump`: the stderr pump, awaited briefly so a failure shows what the
    /// worker said on its way out.
    pub(super) async fn handshake(
        &mut self,
        pump: tokio::task::JoinHandle<()>,
    ) -> Result<Hello, StartError> {
        let spec = self.spec.clone();
        // The module being imported, from the worker's `importing` messages.
        let mut importing: Option<(String, String)> = None;
        let deadline = Instant::now() + spec.start_timeout;
        let failure = loop {
            let message = timeout_at(deadline, next_message(&mut self.messages)).await;
            match message {
                Ok(Ok(Message::Importing { module, file })) => {
                    importing = Some((module, file));
                }
                Ok(Ok(Message::Hello {
                    protocol,
                    python,
                    codec,
                    executable,
                })) => {
                    if protocol != PROTOCOL_VERSION {
                        break StartError::Protocol { got: protocol };
                    }
                    let kill_mechanism = self.identify();
                    return Ok(Hello {
                        python,
                        codec,
                        executable,
                        kill_mechanism,
                    });
                }
                Ok(Ok(other)) => {
                    break StartError::Handshake(format!("expected hello, got {other:?}"))
                }
                Ok(Err(ProtocolError::Closed)) | Ok(Err(ProtocolError::Io(_))) => {
                    let status = self.reap().await;
                    // Let the pump collect what the worker said on its way out.
                    let _ = timeout(Duration::from_millis(500), pump).await;
                    if let Some((module, file)) = importing {
                        let reason = match self.read_dump().await {
                            Some(at) => format!(
                                "took longer than the import timeout and was stopped; it was at {at}"
                            ),
                            None => format!(
                                "made the worker end: it {}{}",
                                describe_exit(status, true),
                                self.stderr_text()
                            ),
                        };
                        return Err(StartError::Import {
                            module,
                            file,
                            reason,
                        });
                    }
                    return Err(StartError::Died {
                        status: describe_exit(status, false),
                        stderr: self.stderr_text(),
                    });
                }
                Ok(Err(e)) => break StartError::Handshake(e.to_string()),
                Err(_) => {
                    let stuck_at = match importing {
                        Some(_) => {
                            self.identify();
                            self.stack_dump().await
                        }
                        None => None,
                    };
                    self.kill().await;
                    let _ = timeout(Duration::from_millis(200), pump).await;
                    if let Some((module, file)) = importing {
                        let place = stuck_at
                            .map(|at| format!("; it was at {at}"))
                            .unwrap_or_default();
                        return Err(StartError::Import {
                            module,
                            file,
                            reason: format!(
                                "did not finish within {} s{place}",
                                spec.start_timeout.as_secs_f64()
                            ),
                        });
                    }
                    return Err(StartError::Timeout {
                        secs: spec.start_timeout.as_secs_f64(),
                        stderr: self.stderr_text(),
                    });
                }
            }
        };
        self.kill().await;
        Err(failure)
    }

    /// Learns the worker process from the kernel (the guardian's child) and
    /// how its tree can be killed.
    fn identify(&mut self) -> KillMechanism {
        if self.processes.find_worker() && self.processes.own_pid_namespace() {
            KillMechanism::PidNamespace
        } else {
            KillMechanism::ProcessTree
        }
    }

    /// The actor's life: commands until the handle is gone. Then the
    /// worker goes with it (`Drop`). A pulled switch kills the worker and
    /// reaps it between commands (during a job, the exchange watches it).
    pub(super) async fn serve(mut self, mut mailbox: mpsc::UnboundedReceiver<Command>) {
        loop {
            let wake = tokio::select! {
                biased;
                () = self.switch.pulled(), if self.may_kill() => Wake::KillSwitch,
                _ = guardian_ended(&self.guardian_end), if !self.reaped => Wake::GuardianEnded,
                command = mailbox.recv() => command.map_or(Wake::Orphaned, Wake::Command),
            };
            let command = match wake {
                Wake::Command(command) => command,
                Wake::KillSwitch => {
                    self.kill().await;
                    // Killed and reaped, or reaped already: the branch
                    // fires once either way.
                    self.killed = true;
                    continue;
                }
                Wake::GuardianEnded => {
                    // Reaped when the pool asks how it ended (or kills it).
                    self.guardian_end = None;
                    self.end.give();
                    continue;
                }
                Wake::Orphaned => break,
            };
            match command {
                Command::Run(job) => self.run_job(job).await,
                Command::Kill(answer) => {
                    let _ = answer.send(self.kill().await);
                }
                Command::Retire(answer) => {
                    self.retire().await;
                    let _ = answer.send(());
                }
                Command::HowItEnded(answer) => {
                    let _ = answer.send(self.how_it_ended().await);
                }
            }
        }
    }

    /// Runs one job and delivers its end.
    async fn run_job(&mut self, job: Job) {
        let Job {
            id,
            frame,
            mut state,
            mut stdin,
            written_at,
            mut run,
        } = job;
        let Some(outcome) = self
            .run(id, &frame, &mut state, &mut stdin, written_at, &mut run)
            .await
        else {
            // The caller gave up: the worker was killed.
            return;
        };
        let sound = matches!(
            outcome,
            CallOutcome::Reply {
                left_running: None,
                ..
            }
        );
        let end = JobEnd {
            outcome,
            stdin: sound.then_some(stdin),
        };
        if run.end.send(end).is_err() {
            // The caller gave up as the answer came: the worker, whose
            // stdin went with the answer, serves nothing more.
            self.kill_now();
        }
    }
}

/// Resolves once the guardian behind `pidfd` has ended (never without one).
async fn guardian_ended(pidfd: &Option<AsyncFd<OwnedFd>>) {
    match pidfd {
        Some(pidfd) => {
            let _ = pidfd.readable().await;
        }
        None => std::future::pending().await,
    }
}
