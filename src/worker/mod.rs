//! One worker: a guardian `python3` process and the worker it forks (see
//! `docs/protocol.md`). Its spec (`spec`), spawn (`spawn`), handshake
//! (here), exchanges (`exchange`), the requests queued behind its call
//! (`pipeline`), stack dumps (`dump`), stderr (`stderr`), its kill, reaping
//! and retirement (`lifecycle`), and how it ended (`termination`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::net::unix::pipe;
use tokio::time::{timeout, timeout_at, Instant};

mod deadline;
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
use crate::process::{KillMechanism, ProcessId, Tracked};
use crate::protocol::{
    message_reader, next_message, CallContext, Message, MessageReader, ProtocolError, RemoteError,
    ReplyValue, Request, PROTOCOL_VERSION,
};
use crate::sandbox::WorkerCgroup;

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

/// A running worker, exclusively owned by whoever is using it.
pub struct Worker {
    /// The guardian, this process's child (spawned, or cloned by the template).
    guardian_process: GuardianProcess,
    /// Its pid, as the kernel gave it; it leads its own process group.
    guardian: ProcessId,
    /// The guardian's child as the kernel lists it, once it said hello; it
    /// leads its own group. `None` for a guardian that forked no worker:
    /// then the guardian itself speaks the protocol.
    process: Option<Tracked>,
    /// The call it ran last, blamed when the next finds it broken.
    last_call: Option<String>,
    /// `None` once the worker is being retired (closing stdin tells it to exit).
    stdin: Option<pipe::Sender>,
    /// Messages from its stdout; a read can race a callback (cancel-safe).
    messages: MessageReader<pipe::Receiver>,
    dump: pipe::Receiver,
    stderr_tail: Arc<Mutex<StderrTail>>,
    call_tag: CallTag,
    spec: Arc<WorkerSpec>,
    /// The request queued behind the running call (pipelining), and the
    /// worker's request ids.
    slot: Arc<Slot>,
    calls_served: u64,
    info: WorkerInfo,
    reaped: bool,
    /// Removed once the worker's processes are gone (`--sandbox`).
    _cgroup: Arc<WorkerCgroup>,
}

impl Worker {
    /// Spawns a worker and waits for its hello (sent once it imported the tools).
    pub async fn start(spawner: &Spawner, spec: Arc<WorkerSpec>) -> Result<Worker, StartError> {
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
        let mut worker = Worker {
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
            slot: Arc::new(Slot::new()),
            calls_served: 0,
            info: WorkerInfo {
                python_version: String::new(),
                executable: String::new(),
                codec: String::new(),
                kill_mechanism: KillMechanism::ProcessTree,
                started,
            },
            reaped: false,
            _cgroup: cgroup,
        };
        // The module being imported, from the worker's `importing` messages.
        let mut importing: Option<(String, String)> = None;
        let deadline = Instant::now() + spec.start_timeout;
        let failure = loop {
            let message = timeout_at(deadline, next_message(&mut worker.messages)).await;
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
                    worker.identify();
                    worker.info.python_version = python;
                    worker.info.codec = codec;
                    worker.info.executable = executable;
                    return Ok(worker);
                }
                Ok(Ok(other)) => {
                    break StartError::Handshake(format!("expected hello, got {other:?}"))
                }
                Ok(Err(ProtocolError::Closed)) | Ok(Err(ProtocolError::Io(_))) => {
                    let status = worker.reap().await;
                    // Let the pump collect what the worker said on its way out.
                    let _ = timeout(Duration::from_millis(500), pump).await;
                    if let Some((module, file)) = importing {
                        let reason = match worker.read_dump().await {
                            Some(at) => format!(
                                "took longer than the import timeout and was stopped; it was at {at}"
                            ),
                            None => format!(
                                "made the worker end: it {}{}",
                                describe_exit(status, true),
                                worker.stderr_text()
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
                        stderr: worker.stderr_text(),
                    });
                }
                Ok(Err(e)) => break StartError::Handshake(e.to_string()),
                Err(_) => {
                    let stuck_at = match importing {
                        Some(_) => {
                            worker.identify();
                            worker.stack_dump().await
                        }
                        None => None,
                    };
                    worker.kill().await;
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
                        stderr: worker.stderr_text(),
                    });
                }
            }
        };
        worker.kill().await;
        Err(failure)
    }

    /// Learns the worker process from the kernel (the guardian's child) and
    /// how its tree can be killed.
    fn identify(&mut self) {
        self.process = Tracked::child_of(self.guardian);
        self.info.kill_mechanism = match &self.process {
            Some(process) if process.own_pid_namespace(self.guardian) => {
                KillMechanism::PidNamespace
            }
            _ => KillMechanism::ProcessTree,
        };
    }

    pub fn info(&self) -> &WorkerInfo {
        &self.info
    }

    /// The worker's process as the kernel knows it, for killing it from
    /// elsewhere (shutdown). `None` when the guardian is the worker.
    pub fn killer(&self) -> WorkerKiller {
        WorkerKiller {
            guardian: self.guardian,
            process: self.process.clone(),
        }
    }

    /// The worker's pid as the kernel names it (the guardian's when the
    /// guardian is the worker).
    pub fn pid(&self) -> i32 {
        self.process
            .as_ref()
            .map_or(self.guardian.raw(), |p| p.pid.raw())
    }

    /// What it was started with (under `--sandbox`, for one session).
    pub fn spec(&self) -> &Arc<WorkerSpec> {
        &self.spec
    }

    /// The guardian's pid, as the kernel gave it (it ends when the worker does).
    pub fn guardian_pid(&self) -> ProcessId {
        self.guardian
    }

    pub fn calls_served(&self) -> u64 {
        self.calls_served
    }

    fn stderr_text(&self) -> StderrText {
        self.stderr_tail
            .lock()
            .map(|t| t.text())
            .unwrap_or_default()
    }

    fn take_id(&mut self) -> u64 {
        self.slot.take_id()
    }

    /// Where the pool queues a request behind the running call.
    pub fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    /// Asks the worker for the catalog it built when importing the tools.
    pub async fn catalog(&mut self) -> CallOutcome {
        let id = self.take_id();
        let deadline = Instant::now() + self.spec.start_timeout;
        self.run(
            id,
            &Request::Catalog { id },
            "catalog",
            deadline,
            None,
            false,
        )
        .await
    }

    /// A round trip through the worker's whole request path. The first
    /// requests a fresh worker serves are several times slower than later
    /// ones; a spare is pinged before it waits, so the call it takes over is not.
    pub async fn ping(&mut self) -> CallOutcome {
        let id = self.take_id();
        let deadline = Instant::now() + self.spec.start_timeout;
        self.run(id, &Request::Ping { id }, "ping", deadline, None, false)
            .await
    }

    /// Runs one tool call; on `TimedOut` or `Died` the worker is gone.
    /// `callbacks` serves the tool's context services while it runs (without
    /// it every callback fails in the tool); time spent waiting for a human
    /// pushes `deadline` back by as much. `queued`: the id the call's request
    /// was written under behind the call before (pipelining), already on the
    /// wire.
    pub async fn invoke(
        &mut self,
        queued: Option<u64>,
        name: &str,
        args: &Value,
        context: &CallContext,
        deadline: Instant,
        callbacks: Option<&Arc<dyn CallbackService>>,
    ) -> CallOutcome {
        let id = queued.unwrap_or_else(|| self.take_id());
        let request = Request::Invoke {
            id,
            name,
            args,
            context,
        };
        let outcome = self
            .run(id, &request, name, deadline, callbacks, queued.is_some())
            .await;
        if !matches!(outcome, CallOutcome::Withdrawn) {
            self.calls_served += 1;
        }
        outcome
    }
}
