//! One worker: a guardian `python3` process and the worker it forks (see
//! `docs/protocol.md`), driven by an actor task of its own (`actor`) that
//! this module's [`Worker`] handle sends commands to. Its spec (`spec`),
//! spawn (`spawn`), handshake (`actor`), exchanges (`exchange`), the
//! requests queued behind its call (`pipeline`), stack dumps (`dump`),
//! stderr (`stderr`), its kill, reaping and retirement (`lifecycle`), and
//! how it ended (`termination`).

use std::future::Future;
use std::pin::Pin;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};

mod ack;
mod actor;
mod deadline;
mod direct;
mod dump;
mod exchange;
mod guardian;
mod lifecycle;
pub mod pipeline;
mod spawn;
mod spec;
mod stderr;
mod template;
mod termination;

pub use self::actor::JobParts;
use self::actor::{Actor, Command, Job};
use self::direct::{ActorIdle, DirectWriter};
pub use self::dump::locate_in_dump;
use self::guardian::GuardianProcess;
pub use self::lifecycle::WorkerKiller;
use self::spawn::Spawned;
pub use self::spawn::Spawner;
pub use self::spec::{BootConfig, QuarantinedModule, WorkerSpec};
pub use self::stderr::StderrText;
use self::stderr::{pump_stderr, CallTag, StderrTail};
pub use self::termination::{describe_exit, Termination};

use self::pipeline::Slot;
use crate::process::{KillMechanism, ProcessId};
use crate::protocol::{
    encode_frame, message_reader, CallContext, RemoteError, ReplyValue, Request, PROTOCOL_VERSION,
};

/// The fd on which the worker's `faulthandler` writes stack dumps.
const DUMP_FD: i32 = 3;
/// How long to wait for the first bytes of a stack dump before killing anyway.
const DUMP_FIRST_BYTE_WAIT: Duration = Duration::from_millis(50);
/// A dump is complete when nothing more arrived for this long.
const DUMP_IDLE: Duration = Duration::from_millis(3);
/// How much of a worker's stderr is kept to explain a failed start.
const STDERR_TAIL_BYTES: usize = 8 * 1024;
/// How long a worker whose channel broke may take to exit by itself (its
/// guardian then reports how it ended) before it is killed.
const HANGUP_EXIT_WAIT: Duration = Duration::from_secs(2);
/// How long a guardian may take to exit once its worker's group is killed
/// (it reaps the worker and kills the tree's leftovers first) before it is
/// killed too.
const GUARDIAN_EXIT_WAIT: Duration = Duration::from_millis(500);
/// Most callbacks (context service calls) one call may have open at once;
/// more are refused, so a runaway tool cannot queue unbounded work here.
const MAX_OPEN_CALLBACKS: usize = 256;
/// Longest stderr line logged as one event; longer ones are split.
const STDERR_LINE_MAX: usize = 16 * 1024;
/// At a deadline, how long a reply already on its way may take to be read
/// (it was readable, or the supervisor was not running to read it).
/// Short: the select below reads what is readable before the timer, so the
/// window only has to cover one turn of the reactor (it may see the pipe's
/// readiness after the timer fired, e.g. when this process was stopped).
const DEADLINE_DRAIN: Duration = Duration::from_millis(5);

/// An error a callback answers with; the tool gets it as an exception named
/// `kind` (a Python builtin such as `ValueError`, or one of the shim's own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackError {
    pub kind: String,
    pub message: String,
}

impl CallbackError {
    pub fn new(kind: &str, message: impl Into<String>) -> CallbackError {
        CallbackError {
            kind: kind.to_string(),
            message: message.into(),
        }
    }
}

/// What serves a running tool's callbacks (`{"t": "call"}`: the context
/// services). The worker knows only this; `context` implements it.
pub trait CallbackService: Send + Sync {
    /// Whether `method` waits for a human: that time is not the tool's, so
    /// the call's deadline pauses (and its processes are stopped) meanwhile.
    fn waits_for_human(&self, method: &str) -> bool;

    /// Answers one callback of the call of `tool`.
    fn handle<'a>(
        &'a self,
        tool: &'a str,
        method: &'a str,
        params: Value,
    ) -> Pin<Box<dyn Future<Output = Result<Value, CallbackError>> + Send + 'a>>;
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    #[error("cannot spawn {python}: {source}")]
    Spawn {
        python: String,
        source: std::io::Error,
    },
    #[error("the worker {status} during startup{stderr}")]
    Died { status: String, stderr: StderrText },
    #[error("the worker did not finish starting within {secs} s{stderr}")]
    Timeout { secs: f64, stderr: StderrText },
    #[error("the worker speaks protocol {got}, this supervisor speaks {PROTOCOL_VERSION}")]
    Protocol { got: u32 },
    #[error("the worker broke the handshake: {0}")]
    Handshake(String),
    #[error("the spawner thread is gone (the pool is shutting down)")]
    SpawnerGone,
    /// The worker died or hung while importing one tool module; the next
    /// start skips it (see [`WorkerSpec::quarantined`]).
    #[error("importing {file} {reason}")]
    Import {
        module: String,
        file: String,
        reason: String,
    },
}

/// How a call on a worker ended, seen from the worker's side.
#[derive(Debug)]
pub enum CallOutcome {
    /// The worker answered; it is still usable.
    Reply(Result<ReplyValue, RemoteError>),
    /// The deadline passed; the worker's group was killed (the guardian
    /// finishes the clean-up, and is reaped, when the `Worker` is dropped).
    TimedOut {
        /// Where the code was, from the stack dump (`file:line in function`).
        stuck_at: Option<String>,
    },
    /// The worker died or broke the protocol; it is gone.
    Died(Termination),
    /// The request, queued behind the call before (pipelining), was given
    /// back unstarted; the worker is sound and the call may run anywhere.
    Withdrawn,
    /// The worker was found dead or broken before it started the request
    /// (it never acknowledged it): an earlier call damaged it. It is gone;
    /// the request may run elsewhere.
    NotStarted(Termination),
}

/// What a worker said about itself in its hello, and how it is killed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WorkerInfo {
    pub python_version: String,
    pub executable: String,
    /// `msgpack` (the C extension) or `builtin` (the shim's own codec).
    pub codec: String,
    pub kill_mechanism: KillMechanism,
    pub started: StartMethod,
}

/// How a worker's guardian was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum StartMethod {
    /// Cloned from the pool's template, which imported the shim once.
    Template,
    /// A fresh interpreter (the template is off, cannot run, or cannot serve
    /// this sandbox).
    Spawned,
}

/// A running worker: the handle to its actor (`actor`), exclusively owned
/// by whoever is using it (a call, the idle queue, the spares).
pub struct Worker {
    /// The actor's mailbox; closed when this handle is dropped, and the
    /// actor then ends the worker.
    mailbox: mpsc::UnboundedSender<Command>,
    /// The guardian and the worker process, as the kernel names them.
    killer: WorkerKiller,
    spec: Arc<WorkerSpec>,
    /// The requests queued behind the running call (pipelining), and the
    /// worker's request ids; shared with the actor.
    slot: Arc<Slot>,
    calls_served: u64,
    info: WorkerInfo,
    /// Set by the actor once the guardian is reaped.
    reaped: Arc<AtomicBool>,
    /// Writes a request without the actor when it is idle; dropped before
    /// the worker is retired (closing stdin is what tells it to exit).
    direct: Option<DirectWriter>,
}

impl Worker {
    /// Spawns a worker, waits for its hello (sent once it imported the
    /// tools) and starts its actor.
    pub async fn start(spawner: &Spawner, spec: Arc<WorkerSpec>) -> Result<Worker, StartError> {
        let Spawned {
            guardian: guardian_process,
            stdin,
            stdout,
            stderr,
            dump,
            ack,
            cgroup,
        } = spawner
            .spawn(spec.clone())
            .await?
            .map_err(|source| StartError::Spawn {
                python: spec.python.display().to_string(),
                source,
            })?;
        let Some(guardian) = guardian_process.pid() else {
            return Err(StartError::Handshake(
                "the guardian has no process id".into(),
            ));
        };
        let dump = pipe::Receiver::from_owned_fd(dump)
            .map_err(|e| StartError::Handshake(format!("dump pipe: {e}")))?;
        let stderr_tail = Arc::new(Mutex::new(StderrTail::default()));
        let call_tag: CallTag = Arc::new(Mutex::new(None));
        let pump = tokio::spawn(pump_stderr(
            stderr,
            guardian.raw() as u32,
            stderr_tail.clone(),
            call_tag.clone(),
        ));
        let started = match &guardian_process {
            GuardianProcess::Cloned(_) => StartMethod::Template,
            GuardianProcess::Spawned(_) => StartMethod::Spawned,
        };
        let reaped = Arc::new(AtomicBool::new(false));
        let slot = Arc::new(Slot::new());
        let idle = ActorIdle::default();
        let direct = DirectWriter::new(&stdin, idle.clone());
        let mut actor = Actor {
            guardian_process,
            guardian,
            process: None,
            last_call: None,
            stdin: Some(stdin),
            messages: message_reader(stdout, spec.max_frame),
            dump,
            stderr_tail,
            call_tag,
            spec: spec.clone(),
            slot: slot.clone(),
            reaped: reaped.clone(),
            _cgroup: cgroup,
            idle,
            ack,
        };
        let hello = actor.handshake(pump).await?;
        let (mailbox, commands) = mpsc::unbounded_channel();
        let worker = Worker {
            mailbox,
            killer: actor.killer(),
            spec,
            slot,
            calls_served: 0,
            info: WorkerInfo {
                python_version: hello.python,
                executable: hello.executable,
                codec: hello.codec,
                kill_mechanism: hello.kill_mechanism,
                started,
            },
            reaped,
            direct,
        };
        tokio::spawn(actor.serve(commands));
        Ok(worker)
    }

    pub fn info(&self) -> &WorkerInfo {
        &self.info
    }

    /// The worker's process as the kernel knows it, for killing it from
    /// elsewhere (shutdown). `None` when the guardian is the worker.
    pub fn killer(&self) -> WorkerKiller {
        self.killer.clone()
    }

    /// The worker's pid as the kernel names it (the guardian's when the
    /// guardian is the worker).
    pub fn pid(&self) -> i32 {
        self.killer.pid()
    }

    /// What it was started with (under `--sandbox`, for one session).
    pub fn spec(&self) -> &Arc<WorkerSpec> {
        &self.spec
    }

    /// The guardian's pid, as the kernel gave it (it ends when the worker does).
    pub fn guardian_pid(&self) -> ProcessId {
        self.killer.guardian
    }

    pub fn calls_served(&self) -> u64 {
        self.calls_served
    }

    /// Where the pool queues a request behind the running call.
    pub fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    /// Asks the worker for the catalog it built when importing the tools.
    pub async fn catalog(&mut self) -> CallOutcome {
        let id = self.slot.take_id();
        let (run, answer) = JobParts::new("catalog", self.spec.start_timeout, None, false);
        self.run(&Request::Catalog { id }, id, run, answer).await
    }

    /// A round trip through the worker's whole request path. The first
    /// requests a fresh worker serves are several times slower than later
    /// ones; a spare is pinged before it waits, so the call it takes over is not.
    pub async fn ping(&mut self) -> CallOutcome {
        let id = self.slot.take_id();
        let (run, answer) = JobParts::new("ping", self.spec.start_timeout, None, false);
        self.run(&Request::Ping { id }, id, run, answer).await
    }

    /// Runs one tool call; on `TimedOut` or `Died` the worker is gone.
    /// `callbacks` serves the tool's context services while it runs (without
    /// it every callback fails in the tool); time spent waiting for a human
    /// does not count against `timeout`, which runs from the moment the
    /// worker's actor starts the request. `queued`: the call's request was
    /// queued behind the call before (pipelining) and is on the wire.
    pub async fn invoke(
        &mut self,
        queued: Option<QueuedOnWire>,
        name: &str,
        args: &Value,
        context: &CallContext,
        timeout: Duration,
        callbacks: Option<&Arc<dyn CallbackService>>,
    ) -> CallOutcome {
        let outcome = match queued {
            // The actor runs it already, right after the call before.
            Some(QueuedOnWire { outcome }) => await_outcome(outcome).await,
            None => {
                let id = self.slot.take_id();
                let request = Request::Invoke {
                    id,
                    name,
                    args,
                    context,
                };
                let (run, answer) = JobParts::invoke(name, timeout, callbacks.cloned());
                self.run(&request, id, run, answer).await
            }
        };
        if !matches!(outcome, CallOutcome::Withdrawn) {
            self.calls_served += 1;
        }
        outcome
    }

    /// Has the actor run `request` (id `id`) to its end.
    async fn run(
        &mut self,
        request: &Request<'_>,
        id: u64,
        run: JobParts,
        answer: oneshot::Receiver<CallOutcome>,
    ) -> CallOutcome {
        let frame = match encode_frame(request, self.spec.max_frame) {
            Ok(frame) => frame,
            Err(e) => {
                // Nothing was sent: the worker is still usable.
                return CallOutcome::Reply(Err(RemoteError {
                    kind: "InvalidArguments".into(),
                    message: format!("arguments cannot be sent to the worker: {e}"),
                    traceback: None,
                }));
            }
        };
        let Some(direct) = self.direct.as_ref().filter(|d| d.actor_is_idle()) else {
            let job = Job {
                id,
                frame: Some(frame),
                written_at: None,
                run,
            };
            return self.send_job(job, answer).await;
        };
        let written_at = tokio::time::Instant::now();
        // As much as the pipe takes now (all of a small request); the rest by the actor.
        let mut frame = frame;
        let written = direct.write_now(&frame);
        frame.drain(..written);
        let job = Job {
            id,
            frame: (!frame.is_empty()).then_some(frame),
            written_at: (written > 0).then_some(written_at),
            run,
        };
        self.send_job(job, answer).await
    }

    /// Hands `job` to the actor and awaits its outcome.
    async fn send_job(&self, job: Job, answer: oneshot::Receiver<CallOutcome>) -> CallOutcome {
        if self.mailbox.send(Command::Run(job)).is_err() {
            return CallOutcome::NotStarted(Termination::StatusUnknown);
        }
        await_outcome(answer).await
    }

    /// SIGKILL to the worker (by pidfd) and to its group, at once: in a PID
    /// namespace that ends every process of the call; otherwise what left
    /// the group is killed by the guardian, the tree's subreaper, when it
    /// sees the worker gone (and by [`Worker::kill`]'s sweep).
    pub fn kill_now(&self) {
        if !self.reaped.load(Ordering::Acquire) {
            self.killer.kill();
        }
    }

    /// Kills every process of the worker and reaps the guardian (see
    /// [`Actor::kill`](actor::Actor)); its status, mirrored from the worker.
    pub async fn kill(&mut self) -> Option<ExitStatus> {
        let (answer, status) = oneshot::channel();
        self.mailbox.send(Command::Kill(answer)).ok()?;
        status.await.ok().flatten()
    }

    /// Retires a healthy worker: closes its stdin (it exits at once), reaps it.
    pub async fn retire(mut self) {
        drop(self.direct.take());
        let (answer, done) = oneshot::channel();
        if self.mailbox.send(Command::Retire(answer)).is_ok() {
            let _ = done.await;
        }
    }

    /// How a worker that died while it waited ended, once its guardian is
    /// reaped (it mirrors the worker's exit status); logged against the
    /// call it ran last, as a death found by the next call is.
    pub async fn how_it_ended(&mut self) -> Termination {
        let (answer, how) = oneshot::channel();
        if self.mailbox.send(Command::HowItEnded(answer)).is_err() {
            return Termination::StatusUnknown;
        }
        how.await.unwrap_or(Termination::StatusUnknown)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A worker dropped mid-call (a cancelled call, a dropped pool) must
        // not outlive its owner: killed now; its actor, whose mailbox just
        // closed, finishes the clean-up and the reaping.
        self.kill_now();
    }
}

/// A call's request queued behind the call before on a worker it was then
/// handed (pipelining): the worker's actor ran it (or runs it) right after
/// that call, and its outcome arrives here.
pub struct QueuedOnWire {
    pub outcome: oneshot::Receiver<CallOutcome>,
}

/// The actor's answer; an actor gone without one ended with its worker.
async fn await_outcome(answer: oneshot::Receiver<CallOutcome>) -> CallOutcome {
    answer
        .await
        .unwrap_or(CallOutcome::NotStarted(Termination::StatusUnknown))
}
