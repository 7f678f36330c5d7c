//! One worker: a guardian `python3` process and the worker it forks (see
//! `docs/protocol.md`), driven by an actor task of its own (`actor`) that
//! this module's [`Worker`] handle sends commands to. Its spec (`spec`),
//! spawn (`spawn`), handshake (`actor`), exchanges (`exchange`), one
//! request's state (`request`), what a call left running (`leftovers`),
//! stack dumps (`dump`), stderr (`stderr`), its kill, reaping and
//! retirement (`lifecycle`), and how it ended (`termination`).

use std::future::Future;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};

mod actor;
mod deadline;
mod dump;
mod exchange;
mod guardian;
mod launch;
mod leftovers;
mod lifecycle;
pub(crate) mod request;
mod spawn;
mod spec;
mod stderr;
mod switches;
mod template;

pub(crate) use self::actor::JobParts;
use self::actor::{Actor, Command, Job, JobEnd};
use self::guardian::GuardianProcess;
use self::launch::Spawned;
pub(crate) use self::leftovers::kernel_lists_children;
use self::leftovers::{FileId, Leftovers};
use self::request::{unread_in_pipe, RequestState};
pub(crate) use self::spawn::Spawner;
pub(crate) use self::spec::{BootConfig, WorkerSpec};
use self::stderr::StderrLog;
pub(crate) use self::stderr::StderrText;
pub(crate) use self::switches::{EndNotice, KillSwitch};
use crate::outcome::{describe_exit, CallOutcome, CallTime, Grace, Termination};
use crate::process::KillMechanism;
use crate::protocol::{
    encode_frame, encode_invoke_frame, message_reader, CallContext, ProtocolError, Request,
    PROTOCOL_VERSION,
};

/// The fd on which the worker's `faulthandler` writes stack dumps.
const DUMP_FD: i32 = 3;
/// How long to wait for the first bytes of a stack dump before killing
/// anyway. `faulthandler` answers from its signal handler, in C, within a
/// millisecond on a quiet machine; the wait is for a busy one, where the
/// worker may not run for tens of milliseconds. Only a tool that blocks the
/// request waits it out, and has its own timeout told that much later.
const DUMP_FIRST_BYTE_WAIT: Duration = Duration::from_millis(200);
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
pub(crate) struct CallbackError {
    pub kind: String,
    pub message: String,
}

impl CallbackError {
    pub(crate) fn new(kind: &str, message: impl Into<String>) -> CallbackError {
        CallbackError {
            kind: kind.to_string(),
            message: message.into(),
        }
    }
}

/// What serves a running tool's callbacks (`{"t": "call"}`: the context
/// services). The worker knows only this; `context` implements it.
pub(crate) trait CallbackService: Send + Sync {
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

/// What a worker said about itself in its hello, and how it is killed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WorkerInfo {
    /// The interpreter's version, e.g. `3.12.3`.
    pub python_version: String,
    /// The interpreter's `sys.executable`.
    pub executable: String,
    /// `msgpack` (the C extension) or `builtin` (the shim's own codec).
    pub codec: String,
    /// How the processes of a call are killed in this worker.
    pub kill_mechanism: KillMechanism,
    /// Whether the worker was cloned from the template or spawned fresh.
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
/// A worker's identity for the pool's records. Pids are the kernel's and
/// come back once reaped; an id is never given twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct WorkerId(u64);

impl WorkerId {
    fn next() -> WorkerId {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        WorkerId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl std::fmt::Display for WorkerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "w{}", self.0)
    }
}

pub(crate) struct Worker {
    /// Which worker this is, for the pool's records (a pid can be reused).
    id: WorkerId,
    /// The actor's mailbox; closed when this handle is dropped, and the
    /// actor then ends the worker.
    mailbox: mpsc::UnboundedSender<Command>,
    /// Ends the worker: its actor, the only holder of its processes' pidfds,
    /// kills it once pulled.
    switch: KillSwitch,
    /// Given once the worker ended while it waited, or its actor ended.
    end: EndNotice,
    /// The worker's pid (the guardian's when the guardian is the worker),
    /// for messages and operators: never signalled from here.
    pid: i32,
    /// Its stderr: each request is named there before it is written.
    stderr: Arc<StderrLog>,
    spec: Arc<WorkerSpec>,
    /// The worker's stdin while no request is in flight. Whoever holds it
    /// alone writes to the worker: this handle between requests (it writes
    /// a request's first bytes itself), the actor during one (the rest, and
    /// the callbacks' answers), which gives it back when the request leaves
    /// the worker sound. `None` once the worker is lost.
    stdin: Option<pipe::Sender>,
    /// The id of the next request (ids are never reused on a worker).
    next_id: u64,
    calls_served: u64,
    info: WorkerInfo,
}

impl Worker {
    /// Spawns a worker, waits for its hello (sent once it imported the
    /// tools) and starts its actor.
    pub(crate) async fn start(
        spawner: &Spawner,
        spec: Arc<WorkerSpec>,
    ) -> Result<Worker, StartError> {
        let Spawned {
            guardian: guardian_process,
            stdin,
            stdout,
            stderr,
            dump,
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
        let stderr = Arc::new(StderrLog::new(stderr, guardian.raw() as u32));
        let pump = tokio::spawn(stderr.clone().pump());
        let started = match &guardian_process {
            GuardianProcess::Cloned(_) => StartMethod::Template,
            GuardianProcess::Spawned(_) => StartMethod::Spawned,
        };
        // The pipes of the protocol, as this end holds them: the worker's
        // ends of the same pipes must stay where they are.
        let pipes: Vec<FileId> = [stdin.as_fd(), stdout.as_fd(), dump.as_fd()]
            .into_iter()
            .filter_map(FileId::of)
            .collect();
        let mut actor = Actor::new(
            (guardian_process, guardian),
            message_reader(stdout, spec.max_frame),
            dump,
            stderr.clone(),
            spec.clone(),
            cgroup,
        );
        let (switch, end) = (actor.switch.clone(), actor.end.clone());
        let hello = actor.handshake(pump).await?;
        let pid = actor.pid();
        actor.leftovers = Some(Leftovers::new(pid, guardian.raw(), &pipes));
        let (mailbox, commands) = mpsc::unbounded_channel();
        let worker = Worker {
            id: WorkerId::next(),
            mailbox,
            switch,
            end,
            pid,
            stderr,
            spec,
            stdin: Some(stdin),
            next_id: 1,
            calls_served: 0,
            info: WorkerInfo {
                python_version: hello.python,
                executable: hello.executable,
                codec: hello.codec,
                kill_mechanism: hello.kill_mechanism,
                started,
            },
        };
        tokio::spawn(actor.serve(commands));
        Ok(worker)
    }

    pub(crate) fn info(&self) -> &WorkerInfo {
        &self.info
    }

    /// The worker's kill switch, for ending it from elsewhere (shutdown).
    pub(crate) fn kill_switch(&self) -> KillSwitch {
        self.switch.clone()
    }

    /// Given once the worker ends while it waits (killed from outside, out
    /// of memory, a crash in a thread a tool left running), or its actor
    /// ends: how the pool notices a dead idle worker before a call picks it.
    pub(crate) fn end_notice(&self) -> EndNotice {
        self.end.clone()
    }

    /// The worker's pid as the kernel names it (the guardian's when the
    /// guardian is the worker), for messages and operators.
    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// The pool's name for this worker: unique for the life of the process.
    pub(crate) fn id(&self) -> WorkerId {
        self.id
    }

    /// What it was started with (under `--sandbox`, for one session).
    pub(crate) fn spec(&self) -> &Arc<WorkerSpec> {
        &self.spec
    }

    pub(crate) fn calls_served(&self) -> u64 {
        self.calls_served
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Asks the worker for the catalog it built when importing the tools.
    pub(crate) async fn catalog(&mut self) -> CallOutcome {
        let id = self.take_id();
        let time = CallTime {
            timeout: self.spec.start_timeout,
            grace: Duration::ZERO,
        };
        let (run, answer) = JobParts::new("catalog", time, None);
        let frame = encode_frame(&Request::Catalog { id }, self.spec.max_frame);
        self.run(frame, id, run, answer).await
    }

    /// A round trip through the worker's whole request path. The first
    /// requests a fresh worker serves are several times slower than later
    /// ones; a spare is pinged before it waits, so the call it takes over is not.
    pub(crate) async fn ping(&mut self) -> CallOutcome {
        let id = self.take_id();
        let time = CallTime {
            timeout: self.spec.start_timeout,
            grace: Duration::ZERO,
        };
        let (run, answer) = JobParts::new("ping", time, None);
        let frame = encode_frame(&Request::Ping { id }, self.spec.max_frame);
        self.run(frame, id, run, answer).await
    }

    /// Runs one tool call; on anything but a `Reply` that left nothing
    /// running, the worker is gone. `callbacks` serves the tool's context
    /// services while it runs (without it every callback fails in the
    /// tool); time spent waiting for a human does not count against
    /// `timeout`, which runs from the moment the request is written.
    pub(crate) async fn invoke(
        &mut self,
        name: &str,
        args: &Value,
        context: &CallContext,
        time: CallTime,
        callbacks: Option<&Arc<dyn CallbackService>>,
    ) -> CallOutcome {
        let id = self.take_id();
        let frame = encode_invoke_frame(id, name, args, context, self.spec.max_frame);
        let (run, answer) = JobParts::new(name, time, callbacks.cloned());
        let outcome = self.run(frame, id, run, answer).await;
        if !matches!(outcome, CallOutcome::NotStarted(_)) {
            self.calls_served += 1;
        }
        outcome
    }

    /// Has the actor run the request in `frame` (id `id`) to its end. Its first bytes
    /// are written here, at once, by the holder of the worker's stdin (a
    /// caller outside the runtime's threads then pays no hop before the
    /// worker starts); the actor writes the rest and reads the reply.
    async fn run(
        &mut self,
        frame: Result<Vec<u8>, ProtocolError>,
        id: u64,
        run: JobParts,
        answer: oneshot::Receiver<JobEnd>,
    ) -> CallOutcome {
        let frame = match frame {
            Ok(frame) => frame,
            // Nothing was sent: the worker is still usable.
            Err(e) => return CallOutcome::Unsent(e.to_string()),
        };
        let Some(stdin) = self.stdin.take() else {
            return CallOutcome::NotStarted(Termination::StatusUnknown);
        };
        let mut state = match RequestState::start(frame.len(), unread_in_pipe(&stdin)) {
            Ok(state) => state,
            // Nothing of this request was written: it never started here.
            Err(refused) => {
                return CallOutcome::NotStarted(Termination::BrokeProtocol {
                    error: refused.to_string(),
                })
            }
        };
        self.stderr.name(format!("{}#{id}", run.label));
        let written_at = tokio::time::Instant::now();
        state.wrote(write_now(&stdin, &frame));
        let job = Job {
            id,
            frame,
            state,
            stdin,
            written_at,
            run,
        };
        if self.mailbox.send(Command::Run(job)).is_err() {
            return CallOutcome::NotStarted(Termination::StatusUnknown);
        }
        match answer.await {
            Ok(JobEnd { outcome, stdin }) => {
                self.stdin = stdin;
                outcome
            }
            // The actor ended with its worker before it answered.
            Err(_) => CallOutcome::Died(Termination::StatusUnknown),
        }
    }

    /// Has the actor kill the worker now, without waiting for it: SIGKILL
    /// to the worker (by pidfd) and to its group, which in a PID namespace
    /// ends every process of the call; otherwise what left the group is
    /// killed by the guardian, the tree's subreaper, when it sees the worker
    /// gone (and by [`Worker::kill`]'s sweep).
    pub(crate) fn pull_kill_switch(&self) {
        self.switch.pull();
    }

    /// Kills every process of the worker and reaps the guardian (see
    /// [`Actor::kill`](actor::Actor)); its status, mirrored from the worker.
    pub(crate) async fn kill(&mut self) -> Option<ExitStatus> {
        let (answer, status) = oneshot::channel();
        self.mailbox.send(Command::Kill(answer)).ok()?;
        status.await.ok().flatten()
    }

    /// Retires a healthy worker: closes its stdin (it exits at once), reaps it.
    pub(crate) async fn retire(mut self) {
        // Dropping the only write end of stdin is the worker's signal to exit.
        drop(self.stdin.take());
        let (answer, done) = oneshot::channel();
        if self.mailbox.send(Command::Retire(answer)).is_ok() {
            let _ = done.await;
        }
    }

    /// How a worker that died while it waited ended, once its guardian is
    /// reaped (it mirrors the worker's exit status); logged against the
    /// call it ran last, as a death found by the next call is.
    pub(crate) async fn how_it_ended(&mut self) -> Termination {
        let (answer, how) = oneshot::channel();
        if self.mailbox.send(Command::HowItEnded(answer)).is_err() {
            return Termination::StatusUnknown;
        }
        how.await.unwrap_or(Termination::StatusUnknown)
    }
}

/// Writes as much of `frame` as the pipe takes now, without waiting (the
/// descriptor is non-blocking); how many bytes went. A failed write writes
/// nothing: the actor's own write then meets the error and reports it.
fn write_now(stdin: &pipe::Sender, frame: &[u8]) -> usize {
    loop {
        match nix::unistd::write(stdin, frame) {
            Ok(written) => return written,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return 0,
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A worker dropped mid-call (a cancelled call, a dropped pool) must
        // not outlive its owner: killed now by its actor, which then reaps
        // it (its mailbox just closed).
        self.pull_kill_switch();
    }
}
