//! The worker's actor: one task per worker that owns its processes (the
//! guardian, as this process's child, and the worker it forked), its channel
//! (stdin, the framed stdout, the dump pipe) and the requests in flight on
//! it. The [`Worker`](super::Worker) handle the pool moves around sends it
//! [`Command`]s and awaits the answers; nothing else touches the pipes.
//!
//! A call's job runs to its end here: its request written, its callbacks
//! served, its deadline kept, the worker killed at the deadline (or when
//! its caller gives up: the job's answer channel closes). When a reply
//! leaves the worker sound and the next request is already queued on the
//! wire behind it (pipelining, [`Slot`]), the actor runs that one next at
//! once, without waiting for its caller to be handed the worker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{timeout, timeout_at, Instant};

use super::ack::AckCell;
use super::direct::ActorIdle;
use super::guardian::GuardianProcess;
use super::pipeline::Slot;
use super::stderr::{CallTag, StderrTail};
use super::{
    describe_exit, CallOutcome, CallbackService, StartError, StderrText, Termination, WorkerSpec,
};
use crate::process::{KillMechanism, ProcessId, Tracked};
use crate::protocol::{next_message, Message, MessageReader, ProtocolError, PROTOCOL_VERSION};
use crate::sandbox::WorkerCgroup;

/// What the handle asks of its actor.
pub(super) enum Command {
    /// Run one request to its end and answer with how it ended.
    Run(Job),
    /// Kill every process of the worker and reap the guardian; answers with
    /// the guardian's status (it mirrors the worker's).
    Kill(oneshot::Sender<Option<std::process::ExitStatus>>),
    /// Close the worker's stdin (it exits), reap it; killed if it lingers.
    Retire(oneshot::Sender<()>),
    /// The worker died while it waited: reap it and say how it ended.
    HowItEnded(oneshot::Sender<Termination>),
}

/// One request as the actor runs it.
pub(super) struct Job {
    pub(super) id: u64,
    /// What is left to write of the request's frame; `None` when it is on
    /// the wire already (queued behind the call before, or written by the
    /// handle).
    pub(super) frame: Option<Vec<u8>>,
    /// When the handle began writing it itself (the call's deadline runs
    /// from then); `None`: from when the actor starts it.
    pub(super) written_at: Option<Instant>,
    pub(super) run: JobParts,
}

/// What the actor needs to run a request beyond its frame; kept in the
/// slot with a request queued behind a running call.
pub struct JobParts {
    /// The tool's name (or `catalog`, `ping`), for logs and the stderr tag.
    pub(super) label: String,
    /// From the moment the request starts running here.
    pub(super) timeout: Duration,
    pub(super) callbacks: Option<Arc<dyn CallbackService>>,
    /// Whether the worker says `started` before it runs it (tool calls do:
    /// until then a broken worker never ran it).
    pub(super) acknowledges: bool,
    /// Where the outcome goes; closed when the caller gave up.
    pub(super) outcome: oneshot::Sender<CallOutcome>,
}

impl JobParts {
    /// A tool call's parts and where its outcome arrives.
    pub fn invoke(
        name: &str,
        timeout: Duration,
        callbacks: Option<Arc<dyn CallbackService>>,
    ) -> (JobParts, oneshot::Receiver<CallOutcome>) {
        JobParts::new(name, timeout, callbacks, true)
    }

    pub(super) fn new(
        label: &str,
        timeout: Duration,
        callbacks: Option<Arc<dyn CallbackService>>,
        acknowledges: bool,
    ) -> (JobParts, oneshot::Receiver<CallOutcome>) {
        let (outcome, receiver) = oneshot::channel();
        let parts = JobParts {
            label: label.to_string(),
            timeout,
            callbacks,
            acknowledges,
            outcome,
        };
        (parts, receiver)
    }
}

/// The worker's processes and channel, owned by its actor task.
pub(super) struct Actor {
    /// The guardian, this process's child (spawned, or cloned by the template).
    pub(super) guardian_process: GuardianProcess,
    /// Its pid, as the kernel gave it; it leads its own process group.
    pub(super) guardian: ProcessId,
    /// The guardian's child as the kernel lists it, once it said hello; it
    /// leads its own group. `None` for a guardian that forked no worker:
    /// then the guardian itself speaks the protocol.
    pub(super) process: Option<Tracked>,
    /// The call it ran last, blamed when the next finds it broken.
    pub(super) last_call: Option<String>,
    /// `None` once the worker is being retired (closing stdin tells it to exit).
    pub(super) stdin: Option<pipe::Sender>,
    /// Messages from its stdout; a read can race a callback (cancel-safe).
    pub(super) messages: MessageReader<pipe::Receiver>,
    pub(super) dump: pipe::Receiver,
    pub(super) stderr_tail: Arc<Mutex<StderrTail>>,
    pub(super) call_tag: CallTag,
    pub(super) spec: Arc<WorkerSpec>,
    /// The requests queued behind the running call (pipelining).
    pub(super) slot: Arc<Slot>,
    /// Set once the guardian is reaped; the handle reads it too, so that
    /// nothing signals a pid the kernel may have given to another process.
    pub(super) reaped: Arc<AtomicBool>,
    /// Removed once the worker's processes are gone (`--sandbox`).
    pub(super) _cgroup: Arc<WorkerCgroup>,
    /// Tells the handle when it may write a request itself (`direct`).
    pub(super) idle: ActorIdle,
    /// Which request the worker started last, in memory it shares.
    pub(super) ack: AckCell,
}

/// What the worker said in its hello.
pub(super) struct Hello {
    pub(super) python: String,
    pub(super) codec: String,
    pub(super) executable: String,
    pub(super) kill_mechanism: KillMechanism,
}

impl Actor {
    pub(super) fn is_reaped(&self) -> bool {
        self.reaped.load(Ordering::Acquire)
    }

    pub(super) fn stderr_text(&self) -> StderrText {
        self.stderr_tail
            .lock()
            .map(|t| t.text())
            .unwrap_or_default()
    }

    /// The worker's pid as the kernel names it (for the log).
    pub(super) fn pid(&self) -> i32 {
        self.killer().pid()
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
        self.process = Tracked::child_of(self.guardian);
        match &self.process {
            Some(process) if process.own_pid_namespace(self.guardian) => {
                KillMechanism::PidNamespace
            }
            _ => KillMechanism::ProcessTree,
        }
    }

    /// The actor's life: commands until the handle is gone. Then the
    /// worker goes with it (`Drop`).
    pub(super) async fn serve(mut self, mut mailbox: mpsc::UnboundedReceiver<Command>) {
        loop {
            self.idle.waiting();
            let Some(command) = mailbox.recv().await else {
                break;
            };
            self.idle.busy();
            match command {
                Command::Run(job) => {
                    let mut next = Some(job);
                    while let Some(job) = next.take() {
                        next = self.run_job(job).await;
                    }
                }
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

    /// Runs one job and delivers its outcome; the next job when the worker
    /// is sound and its request is on the wire behind this one.
    async fn run_job(&mut self, job: Job) -> Option<Job> {
        let Job {
            id,
            frame,
            written_at,
            run: mut job,
        } = job;
        let outcome = self.run(id, frame.as_deref(), written_at, &mut job).await;
        // Chosen before the outcome is delivered: the pool hands the
        // worker to that request's caller only once this one has its answer.
        let next = match outcome {
            Some(CallOutcome::Reply(_)) | Some(CallOutcome::Withdrawn) => {
                self.slot.next_on_wire().map(|(id, run)| Job {
                    id,
                    frame: None,
                    written_at: None,
                    run,
                })
            }
            _ => None,
        };
        match outcome {
            Some(outcome) => {
                if let Err(outcome) = job.outcome.send(outcome) {
                    // The caller gave up as the answer came: it kills the
                    // worker (its lease's drop); nothing more runs here.
                    drop(outcome);
                    self.kill_now();
                    return None;
                }
            }
            // The caller gave up: the worker was killed.
            None => return None,
        }
        next
    }
}
