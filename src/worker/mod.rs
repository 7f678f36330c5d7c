//! One worker: a guardian `python3` process and the worker it forks (see
//! `docs/protocol.md`). Spawn, handshake, exchange frames, dump the stack,
//! kill and reap.
//!
//! Every worker is spawned from one long-lived thread (the [`Spawner`]):
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked a child exits, so
//! forking from tokio's short-lived blocking threads would kill idle workers.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::future::Future;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio::time::{timeout, timeout_at, Instant};

pub mod pipeline;

use self::pipeline::Slot;
use crate::process::{kill_descendants, KillMechanism, ProcessId, Tracked};
use crate::protocol::{
    encode_frame, write_frame, CallContext, CallbackReply, FrameReader, Message, ProtocolError,
    RemoteError, ReplyValue, Request, PROTOCOL_VERSION,
};
use crate::sandbox::{SessionMounts, WorkerCgroup};

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

/// A tool module that broke a worker's start, as the boot config's
/// `skip_modules` lists it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct QuarantinedModule {
    pub module: String,
    pub file: String,
    /// The catalog error reported for it.
    pub error: String,
}

/// What a worker is started with, set by the pool (the shim's
/// `toolpool_boot.py` and `worker.main` read it). The worker adds what is
/// its own: the protocol version, the stack-dump descriptor and the
/// modules quarantined so far.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BootConfig {
    pub functions_dir: PathBuf,
    /// The default directory was chosen (./functions/function_calling), so
    /// NotFound says the bundled tools are not there.
    pub bundled_tools_hidden: bool,
    pub session_dir: PathBuf,
    pub workspace: PathBuf,
    pub session_id: String,
    pub max_frame: usize,
    /// Put on `sys.path` before the tools are imported.
    pub extra_sys_path: Vec<PathBuf>,
    /// The session's packages directory (`install_python_packages`).
    pub packages_dir: PathBuf,
    /// Seconds each tool module's import may take.
    pub import_timeout: Option<f64>,
    /// Make the worker init of a PID namespace of its own where the kernel allows.
    pub pid_namespace: bool,
    /// What the shim finishes of the sandbox before any tool code runs
    /// (`crate::sandbox`; `toolpool_shim/sandbox.py`).
    pub sandbox: Option<serde_json::Value>,
}

/// Everything needed to launch a worker; shared by all workers of a pool.
#[derive(Debug)]
pub struct WorkerSpec {
    pub python: PathBuf,
    pub boot_script: PathBuf,
    /// What the boot script is told (its one argument, as JSON).
    pub boot: BootConfig,
    pub workspace: PathBuf,
    pub env: Vec<(OsString, OsString)>,
    pub memory_limit_bytes: Option<u64>,
    pub max_frame: usize,
    pub start_timeout: Duration,
    /// Bound on one human wait (`--human-timeout`); `None`: unbounded.
    pub human_timeout: Option<Duration>,
    /// Modules that killed or hung a worker at import, with why: the next
    /// workers report them as load errors instead of importing them.
    pub quarantined: Mutex<Vec<QuarantinedModule>>,
    /// Canonical functions directory, to report stack frames relative to it.
    pub functions_dir: PathBuf,
    /// `--sandbox`: entered by each guardian before exec.
    pub sandbox: Option<Arc<crate::sandbox::Sandbox>>,
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

/// A worker's last stderr output, shown after an error message.
#[derive(Debug, Default)]
pub struct StderrText(pub String);

impl std::fmt::Display for StderrText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.0.trim_end();
        if text.is_empty() {
            write!(f, " (it wrote nothing to stderr)")
        } else {
            write!(f, "; its stderr:\n{text}")
        }
    }
}

/// The one thread every worker is forked from; lives as long as its pool.
pub struct Spawner {
    jobs: std::sync::mpsc::Sender<SpawnJob>,
}

struct SpawnJob {
    spec: Arc<WorkerSpec>,
    reply: oneshot::Sender<std::io::Result<Spawned>>,
}

struct Spawned {
    child: Child,
    dump: OwnedFd,
    cgroup: Arc<WorkerCgroup>,
}

impl Spawner {
    /// Starts the spawner thread; must be called inside a tokio runtime.
    pub fn new() -> std::io::Result<Spawner> {
        let handle = tokio::runtime::Handle::current();
        let (jobs, queue) = std::sync::mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("toolpool-spawner".into())
            .spawn(move || {
                // tokio::process needs a runtime context to register the child.
                let _runtime = handle.enter();
                for job in queue {
                    let _ = job.reply.send(spawn_process(&job.spec));
                }
            })?;
        Ok(Spawner { jobs })
    }

    async fn spawn(&self, spec: Arc<WorkerSpec>) -> Result<std::io::Result<Spawned>, StartError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(SpawnJob { spec, reply })
            .map_err(|_| StartError::SpawnerGone)?;
        answer.await.map_err(|_| StartError::SpawnerGone)
    }
}

fn spawn_process(spec: &WorkerSpec) -> std::io::Result<Spawned> {
    let (dump_read, dump_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let mut command = tokio::process::Command::new(&spec.python);
    command
        .arg("-I")
        .arg(&spec.boot_script)
        .arg(spec.boot_json())
        .current_dir(&spec.workspace)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let supervisor_pid = nix::unistd::getpid().as_raw();
    let dump_fd = dump_write.as_raw_fd();
    let memory_limit = spec.memory_limit_bytes;
    let sandbox = spec.sandbox.clone();
    let cgroup = Arc::new(match &sandbox {
        Some(sandbox) => sandbox.worker_cgroup()?,
        None => WorkerCgroup::none(),
    });
    let child_cgroup = cgroup.clone();
    // SAFETY: the closure runs between fork and exec and only makes
    // async-signal-safe system calls (prctl, getppid, fcntl, dup2, setrlimit,
    // close_range, _exit; the sandbox's are listed in `sandbox::enter`).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The supervisor may have died before prctl took effect.
            if libc::getppid() != supervisor_pid {
                libc::_exit(1);
            }
            if dump_fd == DUMP_FD {
                if libc::fcntl(DUMP_FD, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(dump_fd, DUMP_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            close_other_fds_on_exec();
            if let Some(bytes) = memory_limit {
                let limit = libc::rlimit {
                    rlim_cur: bytes as libc::rlim_t,
                    rlim_max: bytes as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(sandbox) = &sandbox {
                crate::sandbox::enter(sandbox, &child_cgroup)?;
            }
            Ok(())
        });
    }
    let child = crate::reaper::spawn_known(&mut command)?;
    drop(dump_write);
    Ok(Spawned {
        child,
        dump: dump_read,
        cgroup,
    })
}

/// Marks every descriptor above the dump fd close-on-exec, so that only
/// stdio and the dump pipe reach the worker, whatever toolpool's process
/// (or the program embedding it) left inheritable. Runs between fork and exec.
fn close_other_fds_on_exec() {
    // SAFETY: plain system calls on integers.
    unsafe {
        let first = (DUMP_FD + 1) as libc::c_uint;
        if libc::syscall(
            libc::SYS_close_range,
            first,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        ) == 0
        {
            return;
        }
        // Kernels before 5.11: one fcntl per possible descriptor.
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(65_536) as i32
        } else {
            1024
        };
        for fd in (DUMP_FD + 1)..top {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

impl WorkerSpec {
    /// The boot script's argument: the pool's config, with what is the
    /// worker's own.
    fn boot_json(&self) -> String {
        #[derive(serde::Serialize)]
        struct Boot<'a> {
            #[serde(flatten)]
            config: &'a BootConfig,
            protocol: u32,
            dump_fd: i32,
            skip_modules: Vec<QuarantinedModule>,
        }
        let skip_modules = self
            .quarantined
            .lock()
            .map(|q| q.clone())
            .unwrap_or_default();
        let boot = Boot {
            config: &self.boot,
            protocol: PROTOCOL_VERSION,
            dump_fd: DUMP_FD,
            skip_modules,
        };
        // Paths that are not UTF-8 cannot be JSON: refused when the pool is built.
        serde_json::to_string(&boot).unwrap_or_default()
    }

    /// Records a module that broke a worker's start.
    pub fn quarantine(&self, module: &str, file: &str, error: String) {
        if let Ok(mut quarantined) = self.quarantined.lock() {
            if !quarantined.iter().any(|q| q.module == module) {
                quarantined.push(QuarantinedModule {
                    module: module.to_string(),
                    file: file.to_string(),
                    error,
                });
            }
        }
    }

    /// This spec for a worker started for session `id` (under `--sandbox`,
    /// where a worker's mount view holds one session's directories): its
    /// boot config, working directory, packages directory and sandbox name
    /// that session instead of the pool's. The quarantine so far is copied.
    pub fn for_session(
        &self,
        id: &str,
        session: &SessionMounts,
    ) -> Result<WorkerSpec, crate::sandbox::SandboxError> {
        let sandbox = match &self.sandbox {
            Some(sandbox) => Some(Arc::new(sandbox.for_session(session)?)),
            None => None,
        };
        let boot = BootConfig {
            session_dir: session.dir.clone(),
            workspace: session.workspace.clone(),
            session_id: id.to_string(),
            extra_sys_path: vec![session.packages_dir.clone()],
            packages_dir: session.packages_dir.clone(),
            sandbox: sandbox.as_ref().map(|s| s.shim_config()),
            ..self.boot.clone()
        };
        Ok(WorkerSpec {
            python: self.python.clone(),
            boot_script: self.boot_script.clone(),
            boot,
            workspace: session.workspace.clone(),
            env: self.env.clone(),
            memory_limit_bytes: self.memory_limit_bytes,
            max_frame: self.max_frame,
            start_timeout: self.start_timeout,
            human_timeout: self.human_timeout,
            quarantined: Mutex::new(
                self.quarantined
                    .lock()
                    .map(|q| q.clone())
                    .unwrap_or_default(),
            ),
            functions_dir: self.functions_dir.clone(),
            sandbox,
        })
    }

    /// The session folder this spec's workers are started for.
    pub fn session_dir(&self) -> &Path {
        &self.boot.session_dir
    }

    /// Forgets the quarantine (the code may have been fixed: a reload).
    pub fn clear_quarantine(&self) {
        if let Ok(mut quarantined) = self.quarantined.lock() {
            quarantined.clear();
        }
    }
}

/// The last bytes a worker wrote to stderr.
#[derive(Default)]
struct StderrTail(VecDeque<u8>);

impl StderrTail {
    fn push_line(&mut self, line: &[u8]) {
        self.0.extend(line);
        self.0.push_back(b'\n');
        let excess = self.0.len().saturating_sub(STDERR_TAIL_BYTES);
        self.0.drain(..excess);
    }

    fn text(&self) -> StderrText {
        let (a, b) = self.0.as_slices();
        StderrText(String::from_utf8_lossy(&[a, b].concat()).into_owned())
    }
}

/// What the stderr pump tags tool output with: the call running now.
type CallTag = Arc<Mutex<Option<String>>>;

/// Logs a worker's stderr line by line (tagged with the call) and keeps its tail.
async fn pump_stderr(
    stderr: ChildStderr,
    guardian_pid: u32,
    tail: Arc<Mutex<StderrTail>>,
    tag: CallTag,
) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        // Bounded: a tool writing gigabytes without a newline is logged in pieces.
        let read = (&mut reader)
            .take(STDERR_LINE_MAX as u64)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        if let Ok(mut tail) = tail.lock() {
            tail.push_line(text);
        }
        let call = tag.lock().ok().and_then(|t| t.clone());
        let text = String::from_utf8_lossy(text);
        match call {
            Some(call) => {
                tracing::info!(target: "toolpool::tool_output", worker = guardian_pid, call = %call, "{text}")
            }
            None => {
                tracing::info!(target: "toolpool::tool_output", worker = guardian_pid, "{text}")
            }
        }
    }
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
    Died { reason: String },
    /// The request, queued behind the call before (pipelining), was given
    /// back unstarted; the worker is sound and the call may run anywhere.
    Withdrawn,
    /// The worker was found dead or broken before it started the request
    /// (it never acknowledged it): an earlier call damaged it. It is gone;
    /// the request may run elsewhere.
    NotStarted { reason: String },
}

/// What a worker said about itself in its hello, and how it is killed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WorkerInfo {
    pub python_version: String,
    pub executable: String,
    /// `msgpack` (the C extension) or `builtin` (the shim's own codec).
    pub codec: String,
    pub kill_mechanism: KillMechanism,
}

/// A running worker, exclusively owned by whoever is using it.
pub struct Worker {
    child: Child,
    /// What `spawn` returned; it leads its own process group.
    guardian: ProcessId,
    /// The guardian's child as the kernel lists it, once it said hello; it
    /// leads its own group. `None` for a guardian that forked no worker:
    /// then the guardian itself speaks the protocol.
    process: Option<Tracked>,
    /// The call it ran last, blamed when the next finds it broken.
    last_call: Option<String>,
    /// `None` once the worker is being retired (closing stdin tells it to exit).
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Frames from `stdout`, read so that a read can race a callback.
    frames: FrameReader,
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
            mut child,
            dump,
            cgroup,
        } = spawner
            .spawn(spec.clone())
            .await?
            .map_err(|source| StartError::Spawn {
                python: spec.python.display().to_string(),
                source,
            })?;
        let Some(guardian) = child.id().and_then(ProcessId::from_u32) else {
            return Err(StartError::Handshake(
                "the guardian has no process id".into(),
            ));
        };
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(StartError::Handshake("stdio pipes missing".into()));
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
        let mut worker = Worker {
            child,
            guardian,
            process: None,
            last_call: None,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
            frames: FrameReader::default(),
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
            },
            reaped: false,
            _cgroup: cgroup,
        };
        // The module being imported, from the worker's `importing` messages.
        let mut importing: Option<(String, String)> = None;
        let deadline = Instant::now() + spec.start_timeout;
        let failure = loop {
            let message = timeout_at(
                deadline,
                worker
                    .frames
                    .read_message(&mut worker.stdout, spec.max_frame),
            )
            .await;
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

    async fn run(
        &mut self,
        id: u64,
        request: &Request<'_>,
        label: &str,
        deadline: Instant,
        callbacks: Option<&Arc<dyn CallbackService>>,
        sent: bool,
    ) -> CallOutcome {
        let encoded = match sent {
            // Queued behind the call before: on the wire already.
            true => Ok(None),
            false => encode_frame(request, self.spec.max_frame).map(Some),
        };
        let frame = match encoded {
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
        let call = format!("{label}#{id}");
        if let Ok(mut tag) = self.call_tag.lock() {
            *tag = Some(call.clone());
        }
        let acknowledged = !matches!(request, Request::Invoke { .. });
        let outcome = self
            .exchange(
                id,
                frame.as_deref(),
                deadline,
                label,
                callbacks,
                acknowledged,
            )
            .await;
        if let Ok(mut tag) = self.call_tag.lock() {
            *tag = None;
        }
        let previous = self.last_call.replace(call);
        match outcome {
            Exchange::Reply(reply) => CallOutcome::Reply(reply),
            Exchange::Withdrawn => CallOutcome::Withdrawn,
            Exchange::Timeout => {
                let stuck_at = self.stack_dump().await;
                // Every process of the call dies now (the worker by pidfd,
                // its group, and in a PID namespace everything in it); the
                // guardian's clean-up and its reaping are finished by
                // `kill`, which the pool awaits before it shuts down.
                self.kill_now();
                CallOutcome::TimedOut { stuck_at }
            }
            Exchange::NotStarted(e) => {
                let reason = match e {
                    ProtocolError::Closed | ProtocolError::Io(_) => {
                        match self.exited_within(HANGUP_EXIT_WAIT).await {
                            Some(status) => describe_exit(Some(status), false),
                            None => {
                                self.kill().await;
                                "closed its end of the channel without exiting".into()
                            }
                        }
                    }
                    e => {
                        self.kill().await;
                        format!("broke the protocol ({e})")
                    }
                };
                let after = previous.as_deref().unwrap_or("its start");
                tracing::warn!(
                    worker = self.pid(),
                    "the worker was found broken after {after}, before it started {label}: it {reason}"
                );
                CallOutcome::NotStarted { reason }
            }
            Exchange::Broken(ProtocolError::Closed) | Exchange::Broken(ProtocolError::Io(_)) => {
                // A worker that died leaves a guardian that exits at once with
                // its status; one still running closed its channel by itself.
                let reason = match self.exited_within(HANGUP_EXIT_WAIT).await {
                    Some(status) => describe_exit(Some(status), false),
                    None => {
                        self.kill().await;
                        "closed its end of the channel without exiting, and was killed".into()
                    }
                };
                CallOutcome::Died { reason }
            }
            Exchange::Broken(e) => {
                self.kill().await;
                CallOutcome::Died {
                    reason: format!("broke the protocol ({e}) and was killed"),
                }
            }
        }
    }

    /// Sends a request and reads until its reply, serving the tool's
    /// callbacks meanwhile. Callbacks run as tasks of their own, concurrently
    /// with the read: a tool may wait for a human while another of its
    /// threads registers files, and a worker that dies while a prompt is
    /// open is noticed at once. While any callback waits for a human the
    /// deadline is suspended and the worker's processes are stopped; they
    /// resume, the deadline pushed back by the wait, before the answer is
    /// written.
    async fn exchange(
        &mut self,
        id: u64,
        frame: Option<&[u8]>,
        deadline: Instant,
        label: &str,
        callbacks: Option<&Arc<dyn CallbackService>>,
        acknowledged: bool,
    ) -> Exchange {
        // Dropped with the exchange (the call was cancelled): any callback
        // still running, a human prompt say, is aborted with it. Otherwise
        // they are over (aborted if need be) before the call returns.
        let mut pending = JoinSet::new();
        let mut paused = false;
        let outcome = self
            .exchange_serving(
                id,
                frame,
                deadline,
                label,
                callbacks,
                &mut pending,
                acknowledged,
                &mut paused,
            )
            .await;
        if !pending.is_empty() {
            pending.shutdown().await;
        }
        if paused {
            // Still stopped for a human when the call ended: let it go (it is
            // being killed, or it answered meanwhile).
            self.pause(false);
        }
        outcome
    }

    #[allow(clippy::too_many_arguments)]
    async fn exchange_serving(
        &mut self,
        id: u64,
        frame: Option<&[u8]>,
        mut deadline: Instant,
        label: &str,
        callbacks: Option<&Arc<dyn CallbackService>>,
        pending: &mut JoinSet<Result<Value, CallbackError>>,
        mut acknowledged: bool,
        paused: &mut bool,
    ) -> Exchange {
        let Some(stdin) = self.stdin.as_mut() else {
            return Exchange::Broken(ProtocolError::Closed);
        };
        // None: queued behind the call before, and written already.
        if let Some(frame) = frame {
            match timeout_at(deadline, write_frame(stdin, frame)).await {
                Err(_) => return Exchange::Timeout,
                Ok(Err(e)) if !acknowledged => return Exchange::NotStarted(e),
                Ok(Err(e)) => return Exchange::Broken(e),
                Ok(Ok(())) => {}
            }
        }
        let slot = self.slot.clone();
        // The worker's callback id, and whether it waits for a human, per task.
        let mut in_flight: std::collections::HashMap<tokio::task::Id, (u64, bool)> =
            std::collections::HashMap::new();
        let mut humans = 0usize;
        let mut paused_since = Instant::now();
        // Set once the deadline passed: what is already readable is still read.
        let mut draining = false;
        loop {
            let event = tokio::select! {
                biased;
                message = self.frames.read_message(&mut self.stdout, self.spec.max_frame) => {
                    Event::Message(message)
                }
                Some(done) = pending.join_next_with_id(), if !pending.is_empty() => {
                    Event::Answered(done)
                }
                () = tokio::time::sleep_until(deadline), if humans == 0 => Event::Deadline,
                // Not while the worker is stopped for a human: a write could fill the pipe.
                () = slot.wake().notified(), if humans == 0 => Event::Queue,
            };
            let (call_id, result) = match event {
                Event::Deadline if draining => return Exchange::Timeout,
                Event::Deadline => {
                    // A reply already in the pipe is the call's result: the
                    // worker finished in time even if this process (stopped,
                    // or starved of CPU) reads it late.
                    draining = true;
                    deadline = Instant::now() + DEADLINE_DRAIN;
                    continue;
                }
                Event::Queue => {
                    let frames = match slot.frames_to_write(self.spec.max_frame) {
                        Ok(frames) => frames,
                        Err(e) => return Exchange::Broken(e),
                    };
                    for frame in frames {
                        let Some(stdin) = self.stdin.as_mut() else {
                            return Exchange::Broken(ProtocolError::Closed);
                        };
                        match timeout_at(deadline, write_frame(stdin, &frame)).await {
                            Err(_) => return Exchange::Timeout,
                            // The worker is gone (its end of the pipe is
                            // closed) — but this call's reply may be in the
                            // pipe already, ahead of the end: read on. The
                            // queued requests are lost with the worker.
                            Ok(Err(_)) => break,
                            Ok(Ok(())) => {}
                        }
                    }
                    continue;
                }
                Event::Message(Ok(Message::Withdrawn { id: got })) if got == id => {
                    // This call's own request, queued behind the call before:
                    // given back unstarted. The worker is sound (it may
                    // hold requests queued behind this one); the call checks
                    // out again.
                    return Exchange::Withdrawn;
                }
                Event::Message(Ok(Message::Withdrawn { id: got })) => {
                    slot.withdrawn(got);
                    continue;
                }
                Event::Message(Err(e)) if !acknowledged => return Exchange::NotStarted(e),
                Event::Message(Err(e)) => return Exchange::Broken(e),
                Event::Message(Ok(Message::Started { id: got })) if got == id => {
                    acknowledged = true;
                    continue;
                }
                Event::Message(Ok(Message::Reply {
                    id: got,
                    ok,
                    value,
                    error,
                    value_json,
                    value_marshal,
                    content,
                })) if got == id => {
                    return Exchange::Reply(if ok {
                        ReplyValue::decode(value, value_json, value_marshal, content)
                    } else {
                        Err(error.unwrap_or_else(|| RemoteError {
                            kind: "WorkerDied".into(),
                            message: "the worker reported a failure without an error".into(),
                            traceback: None,
                        }))
                    });
                }
                Event::Message(Ok(Message::Reply { id: got, .. }))
                | Event::Message(Ok(Message::Started { id: got })) => {
                    tracing::warn!(
                        worker = self.pid(),
                        id = got,
                        "dropping a reply whose request is not in flight"
                    );
                    continue;
                }
                Event::Message(Ok(Message::Hello { .. })) => {
                    let e = ProtocolError::Unexpected("a second hello");
                    return if acknowledged {
                        Exchange::Broken(e)
                    } else {
                        Exchange::NotStarted(e)
                    };
                }
                Event::Message(Ok(Message::Importing { .. })) => {
                    let e = ProtocolError::Unexpected("an import after the hello");
                    return if acknowledged {
                        Exchange::Broken(e)
                    } else {
                        Exchange::NotStarted(e)
                    };
                }
                Event::Message(Ok(Message::Call {
                    id: call_id,
                    method,
                    params,
                })) => match callbacks {
                    None => {
                        let error = CallbackError::new(
                            "NotImplementedError",
                            format!("context services are not available here ('{method}')"),
                        );
                        (call_id, Err(error))
                    }
                    Some(_) if pending.len() >= MAX_OPEN_CALLBACKS => {
                        let error = CallbackError::new(
                            "RuntimeError",
                            format!(
                                "more than {MAX_OPEN_CALLBACKS} context service calls open at once"
                            ),
                        );
                        (call_id, Err(error))
                    }
                    Some(handler) => {
                        tracing::debug!(worker = self.pid(), call_id, %method, "callback");
                        let human = handler.waits_for_human(&method);
                        if human {
                            if humans == 0 {
                                paused_since = Instant::now();
                                // The whole frame has arrived: the tool's
                                // processes stop here, so nothing of the
                                // tool runs while its timer is paused.
                                self.pause(true);
                                *paused = true;
                            }
                            humans += 1;
                        }
                        let (handler, tool) = (handler.clone(), label.to_string());
                        let limit = self.spec.human_timeout.filter(|_| human);
                        let task = pending.spawn(async move {
                            let answer = handler.handle(&tool, &method, params);
                            match limit {
                                None => answer.await,
                                Some(limit) => timeout(limit, answer).await.unwrap_or_else(|_| {
                                    Err(CallbackError::new(
                                        "HumanPromptUnavailable",
                                        format!(
                                            "no answer within {} s (--human-timeout)",
                                            crate::duration_text::format_secs(limit)
                                        ),
                                    ))
                                }),
                            }
                        });
                        in_flight.insert(task.id(), (call_id, human));
                        continue;
                    }
                },
                Event::Answered(done) => {
                    let (task, result) = match done {
                        Ok((task, result)) => (task, result),
                        Err(e) => (
                            e.id(),
                            Err(CallbackError::new(
                                "RuntimeError",
                                format!("the supervisor failed while serving the callback: {e}"),
                            )),
                        ),
                    };
                    let Some((call_id, human)) = in_flight.remove(&task) else {
                        continue;
                    };
                    if human {
                        humans -= 1;
                        if humans == 0 {
                            // The time spent waiting for a human is not the tool's.
                            deadline += paused_since.elapsed();
                            // Running again before the answer is written, so
                            // the thread waiting for it can read it.
                            self.pause(false);
                            *paused = false;
                        }
                    }
                    (call_id, result)
                }
            };
            let reply = match result {
                Ok(value) => CallbackReply::value(call_id, value),
                Err(error) => CallbackReply::error(call_id, &error.kind, &error.message),
            };
            let frame = match encode_frame(&reply, self.spec.max_frame) {
                Ok(frame) => frame,
                Err(e) => {
                    let message = format!("the answer cannot be sent to the worker: {e}");
                    match encode_frame(
                        &CallbackReply::error(call_id, "OverflowError", &message),
                        self.spec.max_frame,
                    ) {
                        Ok(frame) => frame,
                        Err(e) => return Exchange::Broken(e),
                    }
                }
            };
            let Some(stdin) = self.stdin.as_mut() else {
                return Exchange::Broken(ProtocolError::Closed);
            };
            // While a human is being asked the deadline is suspended.
            let written = if humans > 0 {
                Ok(write_frame(stdin, &frame).await)
            } else {
                timeout_at(deadline, write_frame(stdin, &frame)).await
            };
            match written {
                Err(_) => return Exchange::Timeout,
                Ok(Err(e)) => return Exchange::Broken(e),
                Ok(Ok(())) => {}
            }
        }
    }

    /// Stops (`true`) or resumes every process of the worker's tree: the
    /// worker, its group, and every other descendant of the guardian.
    fn pause(&self, stop: bool) {
        let signal = if stop {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        };
        if let Some(process) = &self.process {
            process.signal(signal);
            let _ = process.pid.group().signal(signal);
        }
        for found in crate::procfs::descendants_of(self.guardian.raw()) {
            if let Some(pid) = ProcessId::new(found.pid) {
                let _ = pid.signal(signal);
            }
        }
    }

    /// Asks the worker for a stack dump and returns where the tool's code was.
    async fn stack_dump(&mut self) -> Option<String> {
        let process = self.process.clone()?;
        // Discard anything stale from an earlier dump.
        let mut chunk = vec![0u8; 8192];
        while matches!(self.dump.try_read(&mut chunk), Ok(n) if n > 0) {}
        process.signal(Signal::SIGUSR1);
        self.read_dump().await
    }

    /// Reads a stack dump from the dump pipe (asked for, or written by the
    /// worker's import watchdog) and returns where the tool's code was.
    async fn read_dump(&mut self) -> Option<String> {
        // On the heap: an array here would make every call's future 8 KiB larger.
        let mut chunk = vec![0u8; 8192];
        let mut dump = Vec::new();
        let mut until = Instant::now() + DUMP_FIRST_BYTE_WAIT;
        while dump.len() < 256 * 1024 {
            match timeout_at(until, self.dump.readable()).await {
                Ok(Ok(())) => match self.dump.try_read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => {
                        dump.extend_from_slice(&chunk[..n]);
                        until = Instant::now() + DUMP_IDLE;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    Err(_) => break,
                },
                _ => break,
            }
        }
        let text = String::from_utf8_lossy(&dump);
        tracing::debug!(worker = self.pid(), "stack dump:\n{text}");
        locate_in_dump(&text, &self.spec.functions_dir)
    }

    /// SIGKILL to the worker (by pidfd) and to its group, at once: in a PID
    /// namespace that ends every process of the call; otherwise what left
    /// the group is killed by the guardian, the tree's subreaper, when it
    /// sees the worker gone (and by [`Worker::kill`]'s sweep).
    pub fn kill_now(&self) {
        if self.reaped {
            return;
        }
        self.killer().kill();
    }

    /// Kills every process of the worker and reaps the guardian: the worker
    /// and its group at once; the guardian then reaps the worker, kills what
    /// the worker's tree left (it is their subreaper) and exits. A guardian
    /// that does not exit in time has its descendants and its group killed.
    pub async fn kill(&mut self) -> Option<ExitStatus> {
        if !self.reaped {
            self.kill_now();
            if let Some(status) = self.exited_within(GUARDIAN_EXIT_WAIT).await {
                return Some(status);
            }
        }
        self.kill_tree();
        self.reap().await
    }

    /// The backstop: every descendant of the guardian, its group, itself.
    fn kill_tree(&self) {
        if self.reaped {
            return;
        }
        kill_descendants(self.guardian);
        let _ = self.guardian.group().signal(Signal::SIGKILL);
        let _ = self.guardian.signal(Signal::SIGKILL);
    }

    /// The guardian's exit status if it ends within `limit` (it mirrors the
    /// worker's own), else `None` with the worker left as it is.
    async fn exited_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let status = timeout(limit, self.child.wait()).await.ok()?.ok()?;
        self.reaped = true;
        // The guardian kills the worker's tree before it exits; this covers
        // a guardian that was itself killed.
        if let Some(process) = &self.process {
            process.signal(Signal::SIGKILL);
        }
        Some(status)
    }

    /// Waits for the guardian, which mirrors the worker's own exit status.
    async fn reap(&mut self) -> Option<ExitStatus> {
        if let Some(status) = self.exited_within(Duration::from_secs(5)).await {
            return Some(status);
        }
        self.kill_tree();
        self.child.wait().await.ok().inspect(|_| self.reaped = true)
    }

    /// Retires a healthy worker: closes its stdin (it exits at once), reaps it.
    pub async fn retire(mut self) {
        if let Some(process) = &self.killer().process {
            // Its guardian may end first and leave it to this process's
            // reaper for a moment: it is going, not left behind.
            crate::reaper::expect_death(process.pid.raw());
        }
        // Dropping our end of stdin is the worker's signal to exit.
        drop(self.stdin.take());
        if self.exited_within(Duration::from_secs(2)).await.is_none() {
            let _ = self.kill().await;
        }
    }
}

/// What kills a worker from outside the call that owns it (shutdown).
#[derive(Debug, Clone)]
pub struct WorkerKiller {
    guardian: ProcessId,
    process: Option<Tracked>,
}

impl WorkerKiller {
    /// SIGKILL to the worker and its group (to the guardian's group when
    /// the guardian is the worker).
    pub fn kill(&self) {
        match &self.process {
            Some(process) => {
                crate::reaper::expect_death(process.pid.raw());
                process.signal(Signal::SIGKILL);
                let _ = process.pid.group().signal(Signal::SIGKILL);
            }
            None => {
                let _ = self.guardian.group().signal(Signal::SIGKILL);
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        // A worker dropped mid-call (a cancelled call, a dropped pool) must not
        // outlive its owner; tokio reaps the guardian in the background.
        // Nothing can wait here for the guardian: SIGTERM asks it to kill the
        // worker's group (done already), kill what the tree left elsewhere,
        // and exit; SIGCONT in case a tool stopped it.
        self.kill_now();
        let _ = self.guardian.signal(Signal::SIGTERM);
        let _ = self.guardian.signal(Signal::SIGCONT);
    }
}

enum Exchange {
    Reply(Result<ReplyValue, RemoteError>),
    /// The request, queued behind the call before, was given back unstarted.
    Withdrawn,
    Timeout,
    Broken(ProtocolError),
    /// Broken before it acknowledged the request.
    NotStarted(ProtocolError),
}

/// What woke an exchange up.
enum Event {
    Message(Result<Message, ProtocolError>),
    Answered(Result<(tokio::task::Id, Result<Value, CallbackError>), tokio::task::JoinError>),
    Deadline,
    /// The pool queued a request behind this call, or wants it back.
    Queue,
}

/// Describes how a worker ended, for `WorkerDied` messages.
pub fn describe_exit(status: Option<ExitStatus>, killed_by_us: bool) -> String {
    let Some(status) = status else {
        return "ended (its exit status could not be read)".into();
    };
    if let Some(code) = status.code() {
        return format!("exited with code {code}");
    }
    match status.signal() {
        Some(sig) => {
            let name = Signal::try_from(sig)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| format!("signal {sig}"));
            if sig == libc::SIGKILL && !killed_by_us {
                format!("was killed by {name} (possibly out of memory)")
            } else {
                format!("was killed by {name}")
            }
        }
        None => format!("ended ({status})"),
    }
}

/// Finds where the tool's code was in a `faulthandler` dump: the innermost
/// frame of the thread running a tool, with the innermost frame of the
/// functions directory when they differ. Paths under the functions directory
/// are shown relative to it.
pub fn locate_in_dump(dump: &str, functions_dir: &Path) -> Option<String> {
    struct Frame {
        file: String,
        line: String,
        function: String,
    }
    let mut threads: Vec<Vec<Frame>> = Vec::new();
    for raw in dump.lines() {
        if raw.starts_with("Thread ") || raw.starts_with("Current thread ") {
            threads.push(Vec::new());
            continue;
        }
        let Some(rest) = raw.trim_start().strip_prefix("File \"") else {
            continue;
        };
        let Some((file, rest)) = rest.split_once("\", line ") else {
            continue;
        };
        let (line, function) = rest.split_once(" in ").unwrap_or((rest, "?"));
        if threads.is_empty() {
            threads.push(Vec::new());
        }
        if let Some(frames) = threads.last_mut() {
            frames.push(Frame {
                file: file.to_string(),
                line: line.trim().to_string(),
                function: function.trim().to_string(),
            });
        }
    }
    let in_tools = |f: &Frame| Path::new(&f.file).starts_with(functions_dir);
    let thread = threads
        .iter()
        .find(|frames| frames.iter().any(in_tools))
        .or_else(|| threads.iter().find(|frames| !frames.is_empty()))?;
    let show = |f: &Frame| {
        let file = Path::new(&f.file)
            .strip_prefix(functions_dir)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| f.file.clone());
        format!("{file}:{} in {}", f.line, f.function)
    };
    let innermost = thread.first()?;
    match thread.iter().find(|f| in_tools(f)) {
        Some(tool) if std::ptr::eq(tool, innermost) => Some(show(tool)),
        Some(tool) => Some(format!("{}, called from {}", show(innermost), show(tool))),
        None => Some(show(innermost)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = r#"Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/shim/toolpool_shim/worker.py", line 40 in _read_loop

Current thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/subprocess.py", line 1959 in _wait
  File "/proj/functions/function_calling/slow.py", line 12 in spawn_and_wait
  File "/shim/toolpool_shim/invoke.py", line 88 in run
"#;

    #[test]
    fn dump_locates_the_tool_frame_and_what_it_called() {
        let at = locate_in_dump(DUMP, Path::new("/proj/functions/function_calling")).unwrap();
        assert_eq!(
            at,
            "/usr/lib/python3.11/subprocess.py:1959 in _wait, called from slow.py:12 in spawn_and_wait"
        );
    }

    #[test]
    fn dump_with_the_tool_frame_innermost_names_only_it() {
        let dump = "Current thread 0x1 (most recent call first):\n  File \"/f/busy.py\", line 3 in loop\n  File \"/shim/invoke.py\", line 9 in run\n";
        assert_eq!(
            locate_in_dump(dump, Path::new("/f")).unwrap(),
            "busy.py:3 in loop"
        );
    }

    #[test]
    fn empty_dump_locates_nothing() {
        assert_eq!(locate_in_dump("", Path::new("/f")), None);
    }

    #[test]
    fn exit_descriptions_name_code_and_signal() {
        assert_eq!(
            describe_exit(Some(ExitStatus::from_raw(3 << 8)), false),
            "exited with code 3"
        );
        assert_eq!(
            describe_exit(Some(ExitStatus::from_raw(libc::SIGSEGV)), false),
            "was killed by SIGSEGV"
        );
        assert_eq!(
            describe_exit(Some(ExitStatus::from_raw(libc::SIGKILL)), false),
            "was killed by SIGKILL (possibly out of memory)"
        );
    }
}
