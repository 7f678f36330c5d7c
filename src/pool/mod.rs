//! The pool: a set of workers, a queue in front of them, timeouts, replacement
//! of dead workers, recycling, stats and shutdown.
//!
//! Idle workers wait in the dispatcher (`dispatch`); a call takes one out
//! (waiting in FIFO order, no lock held), owns it for the call, and gives it
//! back, or is queued behind a busy one (`pipelined`). A
//! worker that timed out or died is already reaped when the call returns; a
//! replacement is started in the background with exponential back-off, so a
//! worker that cannot start never turns into a spawn loop.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};
use tokio::task::JoinSet;
use tokio::time::Instant;

mod dispatch;
mod pipelined;

use self::dispatch::Dispatcher;
use self::pipelined::{Queueing, Ticket, TicketEnd};
use crate::catalog::Catalog;
use crate::content::ContentBlock;
use crate::context::{
    AttachmentStore, CallbackHandler, CallbackService, HumanPrompt, Session, SessionPaths,
    SessionServices,
};
use crate::duration_text::format_secs;
use crate::error::{ErrorKind, PoolError, ToolError};
use crate::protocol::{
    encode_frame, CallContext, Request, SessionDirs, WireBlock, DEFAULT_MAX_FRAME,
};
use crate::sandbox::{Sandbox, SandboxMode, SandboxOptions, SandboxPaths};
use crate::worker::{
    BootConfig, CallOutcome, Spawner, StartError, Termination, Worker, WorkerInfo, WorkerSpec,
};

/// The tracing target of the log line of each failed call (and, at debug
/// level, its traceback).
pub const CALL_LOG_TARGET: &str = "toolpool::calls";
/// How long a promoted spare's successor waits before it starts.
const SPARE_REFILL_DELAY: Duration = Duration::from_millis(50);
/// Longest back-off between attempts to start a worker that keeps failing.
const MAX_RESTART_BACKOFF: Duration = Duration::from_secs(10);
/// Default bound on one tool module's import (`--import-timeout`).
pub const DEFAULT_IMPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most modules one start may quarantine before it gives up.
const MAX_QUARANTINED: usize = 1000;

/// Per-call options.
#[derive(Debug, Clone, Default)]
pub struct InvokeOptions {
    /// Overrides the pool's default timeout.
    pub timeout: Option<Duration>,
    pub context: InvokeContext,
    /// Who answers this call's human prompts, instead of the pool's
    /// ([`PoolBuilder::human_prompt`]); e.g. the MCP client that made the call.
    pub human_prompt: Option<Arc<dyn HumanPrompt>>,
    /// The session the call runs in (its workspace, attachments and
    /// packages), instead of the pool's ([`Pool::session`]).
    pub session: Option<Arc<Session>>,
}

/// Whether a worker may serve calls of more than one session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionIsolation {
    /// Any worker serves any session (module globals, threads and imported
    /// packages are shared between them).
    #[default]
    Shared,
    /// A worker serves one session; before it would serve another it is
    /// recycled (a warm spare takes its place), so nothing in a worker's
    /// memory passes from one session to the next.
    Process,
}

/// What a caller tells the tool about itself (`_context` keys).
#[derive(Debug, Clone, Default)]
pub struct InvokeContext {
    pub node_id: Option<String>,
    pub vars: serde_json::Map<String, Value>,
}

/// A successful call, with what the CLI's `--json` envelope reports.
#[derive(Debug, Clone)]
pub struct CallReport {
    pub result: Result<Value, ToolError>,
    /// For an attachment result (the tool returned message blocks or an
    /// attachment record), its blocks, checked against the session's store.
    pub content: Option<Vec<ContentBlock>>,
    pub elapsed: Duration,
    /// How long the call waited for a free worker.
    pub queue_wait: Duration,
    pub worker_pid: Option<i32>,
}

/// Builds a [`Pool`]; the defaults are those of the command line (README, "Command line").
#[derive(Debug, Clone)]
pub struct PoolBuilder {
    functions_dir: Option<PathBuf>,
    python: String,
    workers: usize,
    timeout: Duration,
    session_id: String,
    session_dir: Option<PathBuf>,
    max_calls_per_worker: Option<u64>,
    memory_limit_mb: Option<u64>,
    pass_env: Vec<String>,
    set_env: Vec<(String, String)>,
    queue_wait: Option<Duration>,
    max_frame: usize,
    start_timeout: Duration,
    spare_workers: usize,
    human_prompt: Option<Arc<dyn HumanPrompt>>,
    subreaper: bool,
    human_timeout: Option<Duration>,
    import_timeout: Option<Duration>,
    pid_namespace: bool,
    isolation: SessionIsolation,
    sandbox: SandboxOptions,
}

impl Default for PoolBuilder {
    fn default() -> Self {
        PoolBuilder {
            functions_dir: None,
            python: "python3".into(),
            workers: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            timeout: Duration::from_secs(60),
            session_id: "default".into(),
            session_dir: None,
            max_calls_per_worker: None,
            memory_limit_mb: None,
            pass_env: Vec::new(),
            set_env: Vec::new(),
            queue_wait: None,
            max_frame: DEFAULT_MAX_FRAME,
            spare_workers: 1,
            human_prompt: None,
            start_timeout: Duration::from_secs(60),
            subreaper: false,
            human_timeout: None,
            import_timeout: Some(DEFAULT_IMPORT_TIMEOUT),
            pid_namespace: true,
            isolation: SessionIsolation::Shared,
            sandbox: SandboxOptions::default(),
        }
    }
}

impl PoolBuilder {
    /// The tools' directory; by default `functions/function_calling` when it
    /// exists here, else the bundled tools embedded in the binary.
    pub fn functions_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.functions_dir = Some(dir.into());
        self
    }
    pub fn python(mut self, python: impl Into<String>) -> Self {
        self.python = python.into();
        self
    }
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n.max(1);
        self
    }
    /// Default per-call timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
    pub fn session_id(mut self, id: impl Into<String>) -> Self {
        self.session_id = id.into();
        self
    }
    pub fn session_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.session_dir = Some(dir.into());
        self
    }
    /// Recycle a worker after this many calls.
    /// See [`SessionIsolation`]; `Shared` by default.
    pub fn session_isolation(mut self, isolation: SessionIsolation) -> Self {
        self.isolation = isolation;
        self
    }

    pub fn max_calls_per_worker(mut self, n: Option<u64>) -> Self {
        self.max_calls_per_worker = n.filter(|n| *n > 0);
        self
    }
    /// Per-worker address-space limit (`RLIMIT_AS`), in MB.
    pub fn memory_limit_mb(mut self, mb: Option<u64>) -> Self {
        self.memory_limit_mb = mb;
        self
    }
    /// Inherited variables workers get besides the minimal set: names, or
    /// glob patterns (`SERPER_*`).
    pub fn pass_env(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.pass_env.extend(names);
        self
    }

    /// Variables set for every worker (an `--env-file`'s); they win over
    /// inherited ones.
    pub fn set_env(mut self, vars: impl IntoIterator<Item = (String, String)>) -> Self {
        self.set_env.extend(vars);
        self
    }
    /// How long a call may wait for a free worker before `PoolBusy`.
    pub fn queue_wait(mut self, wait: Option<Duration>) -> Self {
        self.queue_wait = wait;
        self
    }
    /// Largest frame either side sends or accepts (results included).
    /// Warm spare workers kept started but idle, so a killed or recycled
    /// worker is replaced at once instead of after a Python start-up.
    pub fn spare_workers(mut self, n: usize) -> Self {
        self.spare_workers = n;
        self
    }
    pub fn max_frame(mut self, bytes: usize) -> Self {
        self.max_frame = bytes;
        self
    }
    /// Who answers the tools' human prompts (`_context["human_prompt"]`);
    /// without one, tools find `None` there. A call can bring its own
    /// ([`InvokeOptions::human_prompt`]).
    pub fn human_prompt(mut self, prompt: Arc<dyn HumanPrompt>) -> Self {
        self.human_prompt = Some(prompt);
        self
    }
    /// How long a worker may take to import the tools and say hello.
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }
    /// Make this process the child subreaper while the pool runs, and kill
    /// and reap what a worker's tree leaves behind when even its guardian
    /// was killed (see [`crate::reaper`]). Only for programs that start no
    /// child processes of their own other than through toolpool: those
    /// would be killed as leftovers. The `toolpool` command enables it.
    pub fn subreaper(mut self, on: bool) -> Self {
        self.subreaper = on;
        self
    }
    /// Bound on each human wait of a call (then the tool gets
    /// `HumanPromptUnavailable: no answer within ...`); `None`: unbounded.
    pub fn human_timeout(mut self, limit: Option<Duration>) -> Self {
        self.human_timeout = limit;
        self
    }
    /// Run each worker as init of a PID namespace of its own where the
    /// kernel allows (the default): killing it then kills every process of
    /// its calls. `false` keeps workers in this namespace, killed by their
    /// group and a sweep of their guardian's descendants (`toolpool doctor`
    /// says which is in use).
    pub fn pid_namespace(mut self, on: bool) -> Self {
        self.pid_namespace = on;
        self
    }
    /// `--sandbox`: every worker in namespaces of its own, with a mount view
    /// of the session only, a process limit, seccomp and Landlock (see
    /// [`crate::sandbox`]). `Strict` refuses to build when the kernel lacks
    /// a piece (naming it); `BestEffort` uses what there is.
    pub fn sandbox(mut self, mode: SandboxMode) -> Self {
        self.sandbox.mode = mode;
        self
    }
    /// Under the sandbox, keep the host's network (default: loopback of
    /// the worker's own only).
    pub fn allow_net(mut self, on: bool) -> Self {
        self.sandbox.allow_net = on;
        self
    }
    /// Under the sandbox, processes and threads one worker may have at once.
    pub fn max_procs(mut self, n: u32) -> Self {
        self.sandbox.max_procs = n.max(1);
        self
    }
    /// Bound on each tool module's import (default 10 s): a module that
    /// takes longer is a catalog error naming where it was, and the others
    /// are served. `None`: only the start timeout bounds the imports.
    pub fn import_timeout(mut self, limit: Option<Duration>) -> Self {
        self.import_timeout = limit;
        self
    }

    /// Starts the workers (in parallel) and builds the catalog.
    pub async fn build(self) -> Result<Pool, PoolError> {
        // `bundled_tools_hidden`: the default chose ./functions/function_calling,
        // so NotFound says the bundled tools are not there.
        let (functions_dir, bundled_tools_hidden) = match &self.functions_dir {
            Some(dir) => (dir.clone(), false),
            None => {
                let here = PathBuf::from("functions/function_calling");
                if here.is_dir() {
                    (here, true)
                } else {
                    tracing::debug!("no functions/function_calling here: using the bundled tools");
                    (crate::embedded::install_bundled_functions()?, false)
                }
            }
        };
        let functions_dir = functions_dir
            .canonicalize()
            .ok()
            .filter(|d| d.is_dir())
            .ok_or_else(|| PoolError::FunctionsDir(functions_dir.clone()))?;
        let session = SessionPaths::prepare(&self.session_id, self.session_dir.as_deref())?;
        let python = resolve_interpreter(&self.python).await?;
        let shim_dir = crate::embedded::install_shim()?;
        let memory_limit_bytes = match self.memory_limit_mb {
            None => None,
            Some(mb) => Some(
                mb.checked_mul(1024 * 1024)
                    .filter(|bytes| *bytes < libc::RLIM_INFINITY)
                    .ok_or_else(|| {
                        PoolError::Setting(format!(
                            "memory limit of {mb} MB is more bytes than a 64-bit number holds"
                        ))
                    })?,
            ),
        };
        let sandbox = Sandbox::prepare(
            &self.sandbox,
            &SandboxPaths {
                python: python.clone(),
                shim_dir: shim_dir.clone(),
                functions_dir: functions_dir.clone(),
                session: session.sandbox_mounts(),
            },
            memory_limit_bytes,
        )?
        .map(Arc::new);
        let boot = BootConfig {
            functions_dir: functions_dir.clone(),
            bundled_tools_hidden,
            session_dir: session.dir.clone(),
            workspace: session.workspace.clone(),
            session_id: session.id.clone(),
            max_frame: self.max_frame,
            // The session's packages (install_python_packages): on every
            // worker's sys.path from the start, so later installs are seen.
            extra_sys_path: vec![session.site_packages.clone()],
            packages_dir: session.site_packages.clone(),
            import_timeout: self.import_timeout.map(|t| t.as_secs_f64()),
            // Each worker is made init of a PID namespace of its own where
            // the kernel allows: killing it then kills everything it started.
            // (always under the sandbox: it is what makes the worker's /proc its own).
            pid_namespace: self.pid_namespace || sandbox.is_some(),
            sandbox: sandbox.as_ref().map(|s| s.shim_config()),
        };
        if let Err(e) = serde_json::to_string(&boot) {
            return Err(PoolError::Setting(format!(
                "the functions or session directory cannot be given to a worker: {e}"
            )));
        }
        // Under the sandbox with a memory cgroup, the cgroup is the limit.
        let memory_limit_bytes =
            memory_limit_bytes.filter(|_| !sandbox.as_ref().is_some_and(|s| s.limits_memory()));
        let spec = Arc::new(WorkerSpec {
            python,
            boot_script: shim_dir.join("toolpool_boot.py"),
            boot,
            workspace: session.workspace.clone(),
            env: crate::env::worker_env(&self.pass_env, &self.set_env),
            memory_limit_bytes,
            max_frame: self.max_frame,
            start_timeout: self.start_timeout,
            human_timeout: self.human_timeout,
            quarantined: Mutex::new(Vec::new()),
            functions_dir: functions_dir.clone(),
            sandbox,
        });
        let spawner = Spawner::new().map_err(|e| PoolError::Interpreter {
            python: self.python.clone(),
            reason: format!("cannot start the spawner thread: {e}"),
        })?;

        let mut starting = JoinSet::new();
        let spawner = Arc::new(spawner);
        for _ in 0..self.workers {
            let (spawner, spec) = (spawner.clone(), spec.clone());
            starting.spawn(async move { start_quarantining(&spawner, &spec).await });
        }
        let mut workers = Vec::new();
        let mut first_error = None;
        // The first worker up builds the catalog while the others still start.
        let mut cataloguing = None;
        while let Some(started) = starting.join_next().await {
            match started {
                Ok(Ok(mut worker)) if cataloguing.is_none() => {
                    cataloguing = Some(tokio::spawn(async move {
                        let outcome = worker.catalog().await;
                        (worker, outcome)
                    }));
                }
                Ok(Ok(worker)) => workers.push(worker),
                Ok(Err(e)) => {
                    tracing::warn!("a worker failed to start: {e}");
                    first_error.get_or_insert(e);
                }
                Err(join) => {
                    first_error.get_or_insert(StartError::Handshake(join.to_string()));
                }
            }
        }
        let Some(cataloguing) = cataloguing else {
            return Err(PoolError::WorkerStart(
                first_error.unwrap_or(StartError::SpawnerGone),
            ));
        };
        let (first, outcome) = cataloguing
            .await
            .map_err(|e| PoolError::Catalog(e.to_string()))?;
        let catalog = catalog_from(outcome, functions_dir)?;
        let info = first.info().clone();
        // Debug, not info: every one-shot command (`catalog`, `call`) starts
        // a pool, and `toolpool doctor` prints the same (`-v` shows it here).
        tracing::debug!(
            python = %info.python_version,
            codec = %info.codec,
            kill = %info.kill_mechanism,
            "workers started; kill mechanism: {}",
            info.kill_mechanism
        );
        workers.push(first);
        for error in &catalog.errors {
            tracing::warn!(module = %error.module, "tool module not loaded: {}", error.error);
        }

        let shared = Arc::new(Shared {
            spec,
            spawner,
            services: Arc::new(SessionServices {
                session_id: session.id.clone(),
                attachments: Arc::new(AttachmentStore::open(&session.workspace, &session.dir)),
                human_prompt: self.human_prompt.clone(),
            }),
            session,
            workers: Dispatcher::new(),
            draining: AtomicBool::new(false),
            default_timeout: self.timeout,
            queue_wait: self.queue_wait,
            max_calls_per_worker: self.max_calls_per_worker,
            size: self.workers,
            catalog: RwLock::new(Arc::new(catalog)),
            counters: Counters::default(),
            queueing: Queueing::default(),
            start_failure: Mutex::new(None),
            start_failed: tokio::sync::Notify::new(),
            restart_failures: AtomicU64::new(0),
            dying: tokio_util::task::TaskTracker::new(),
            info,
            import_timeout: self.import_timeout,
            subreaper: self.subreaper,
            isolation: self.isolation,
        });
        let missing = self.workers - workers.len();
        for worker in workers {
            shared.workers.register(&worker, 0);
            shared.make_idle(worker);
        }
        for _ in 0..missing {
            shared.replace();
        }
        // Spares start after the pool is ready, so they never delay it.
        for _ in 0..self.spare_workers {
            shared.start_worker(Destination::Spare, Duration::ZERO);
        }
        if self.subreaper {
            if let Err(e) = crate::reaper::start(shared.workers.closed_token()) {
                tracing::warn!("cannot become the child subreaper: {e}");
            }
        }
        Ok(Pool { shared })
    }
}

/// Starts a worker; a tool module that kills or hangs it at import is
/// quarantined (reported as a load error by the next workers, not imported)
/// and the start tried again.
async fn start_quarantining(
    spawner: &Spawner,
    spec: &Arc<WorkerSpec>,
) -> Result<Worker, StartError> {
    for _ in 0..MAX_QUARANTINED {
        match Worker::start(spawner, spec.clone()).await {
            Err(StartError::Import {
                module,
                file,
                reason,
            }) => {
                tracing::warn!(%module, "tool module not loaded: importing it {reason}");
                spec.quarantine(
                    &module,
                    &file,
                    format!("ImportHazard: importing {file} {reason}"),
                );
            }
            other => return other,
        }
    }
    Err(StartError::Handshake(format!(
        "more than {MAX_QUARANTINED} tool modules broke the worker at import"
    )))
}

/// Pings a fresh worker twice (see [`Worker::ping`]); false if it failed.
async fn warm(worker: &mut Worker) -> bool {
    for _ in 0..2 {
        if !matches!(worker.ping().await, CallOutcome::Reply(Ok(_))) {
            return false;
        }
    }
    true
}

/// The catalog from a worker's answer to a `catalog` request.
fn catalog_from(outcome: CallOutcome, functions_dir: PathBuf) -> Result<Catalog, PoolError> {
    match outcome {
        CallOutcome::Reply(Ok(reply)) => {
            Catalog::from_worker(functions_dir, reply.value).map_err(PoolError::Catalog)
        }
        CallOutcome::Reply(Err(e)) => Err(PoolError::Catalog(format!("{}: {}", e.kind, e.message))),
        CallOutcome::TimedOut { .. } => Err(PoolError::Catalog(
            "the worker did not answer in time".into(),
        )),
        CallOutcome::Died(how) | CallOutcome::NotStarted(how) => {
            Err(PoolError::Catalog(format!("the worker {how}")))
        }
        // Only a queued invoke is ever given back.
        CallOutcome::Withdrawn => Err(PoolError::Catalog(
            "the worker gave the catalog request back".into(),
        )),
    }
}

/// Runs the interpreter once to learn its real path: launcher scripts such
/// as pyenv shims cost tens of milliseconds on every spawn.
pub async fn resolve_interpreter(python: &str) -> Result<PathBuf, PoolError> {
    let error = |reason: String| PoolError::Interpreter {
        python: python.to_string(),
        reason,
    };
    let mut command = tokio::process::Command::new(python);
    command
        .args(["-I", "-c", "import sys; sys.stdout.write(sys.executable)"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let output = crate::reaper::spawn_known(&mut command)
        .map_err(|e| error(e.to_string()))?
        .wait_with_output()
        .await
        .map_err(|e| error(e.to_string()))?;
    if !output.status.success() {
        return Err(error(format!(
            "it exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if path.as_os_str().is_empty() {
        return Err(error("it does not report sys.executable".into()));
    }
    Ok(path)
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    succeeded: AtomicU64,
    timeouts: AtomicU64,
    worker_deaths: AtomicU64,
    respawns: AtomicU64,
    recycled: AtomicU64,
    /// Workers recycled because a call of another session came to them.
    session_recycles: AtomicU64,
    cancelled: AtomicU64,
    /// Calls queued behind a running call that ran where they were queued.
    pipelined: AtomicU64,
    /// Calls queued behind a running call, taken back to run on a worker
    /// that came free.
    withdrawn: AtomicU64,
    queued: AtomicUsize,
    busy: AtomicUsize,
    errors_by_type: Mutex<BTreeMap<String, u64>>,
    latency: Mutex<LatencyHistogram>,
    /// Workers that ended, by [`Termination::index`].
    terminations: [AtomicU64; Termination::KINDS.len()],
}

impl Counters {
    fn count_end(&self, how: &Termination) {
        self.terminations[how.index()].fetch_add(1, Ordering::Relaxed);
    }
}

/// Upper bounds (seconds) of the call latency histogram's buckets.
const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0, 300.0,
];

/// Call latencies (from the call's start, queueing included), cumulative
/// buckets as Prometheus counts them.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LatencyHistogram {
    /// `(upper bound in seconds, calls that took at most that long)`; the
    /// last bound is infinite and counts every call.
    pub buckets: Vec<(f64, u64)>,
    pub sum_seconds: f64,
    pub count: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        let mut buckets: Vec<(f64, u64)> = LATENCY_BUCKETS.iter().map(|b| (*b, 0)).collect();
        buckets.push((f64::INFINITY, 0));
        LatencyHistogram {
            buckets,
            sum_seconds: 0.0,
            count: 0,
        }
    }
}

impl LatencyHistogram {
    fn record(&mut self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        for (bound, count) in &mut self.buckets {
            if secs <= *bound {
                *count += 1;
            }
        }
        self.sum_seconds += secs;
        self.count += 1;
    }
}

/// One live worker, for operators.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WorkerStats {
    pub pid: i32,
    /// Calls it had finished when it last came back to the pool.
    pub calls_served: u64,
    /// Resident memory of the worker process, when /proc tells it.
    pub rss_bytes: Option<u64>,
}

/// A snapshot of the pool for operators.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PoolStats {
    pub size: usize,
    pub live_workers: usize,
    pub busy: usize,
    pub idle: usize,
    pub queued: usize,
    pub calls: u64,
    pub succeeded: u64,
    pub timeouts: u64,
    pub worker_deaths: u64,
    pub respawns: u64,
    pub recycled: u64,
    /// Workers recycled before serving another session
    /// ([`SessionIsolation::Process`]).
    pub session_recycles: u64,
    /// Warm spares ready to replace a worker.
    pub spares: usize,
    pub cancelled: u64,
    /// Calls whose request was queued behind a busy worker's running call
    /// and ran there as soon as it ended (pipelining).
    pub pipelined: u64,
    /// Calls queued behind a running call that were taken back to run on a
    /// worker that came free first.
    pub withdrawn: u64,
    /// Workers the supervisor killed: at a timeout, or under an abandoned call.
    pub kills: u64,
    /// Workers that ended, by how ([`Termination::kind`]: `exited`,
    /// `signalled`, `timed_out`, `cancelled`, `shut_down`, `retired`,
    /// `broke_protocol`, `hung_up`, `status_unknown`); every kind is listed.
    pub terminations: BTreeMap<String, u64>,
    pub errors_by_type: BTreeMap<String, u64>,
    pub latency: LatencyHistogram,
    /// Every live worker (spares included), by pid.
    pub workers: Vec<WorkerStats>,
}

/// One unit of a gauge (calls queued, workers busy), given back on drop so
/// that a call abandoned mid-flight does not leave it counted.
struct Gauge<'a>(&'a AtomicUsize);

impl<'a> Gauge<'a> {
    fn up(gauge: &'a AtomicUsize) -> Gauge<'a> {
        gauge.fetch_add(1, Ordering::Relaxed);
        Gauge(gauge)
    }
}

impl Drop for Gauge<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where a newly started worker goes.
#[derive(Debug, Clone, Copy)]
enum Destination {
    Idle,
    Spare,
}

struct Shared {
    spec: Arc<WorkerSpec>,
    spawner: Arc<Spawner>,
    session: SessionPaths,
    /// The attachment store and default human prompt the tools call back to.
    services: Arc<SessionServices>,
    /// Idle workers and spares, every live worker's record, the reload
    /// generation, whether the pool closed.
    workers: Dispatcher,
    /// Set by [`Pool::drain`]: the pool is about to shut down.
    draining: AtomicBool,
    default_timeout: Duration,
    queue_wait: Option<Duration>,
    max_calls_per_worker: Option<u64>,
    size: usize,
    /// Replaced as a whole by [`Pool::reload`].
    catalog: RwLock<Arc<Catalog>>,
    counters: Counters,
    /// Calls queued behind busy workers' running calls (pipelining).
    queueing: Queueing,
    /// Why the last attempt to start a worker failed, while none is running.
    start_failure: Mutex<Option<String>>,
    /// Wakes queued calls when a start fails, to fail fast if none can run.
    start_failed: tokio::sync::Notify,
    restart_failures: AtomicU64,
    /// Killed workers whose trees are being finished off and reaped;
    /// shutdown waits for them, so no process of a call outlives the pool.
    dying: tokio_util::task::TaskTracker,
    /// What the first worker said about itself (for `toolpool doctor`).
    info: WorkerInfo,
    import_timeout: Option<Duration>,
    subreaper: bool,
    isolation: SessionIsolation,
}

impl Shared {
    /// Under [`SessionIsolation::Process`]: whether the worker of `lease`
    /// may serve a call of `session`. One that served another session is
    /// recycled instead (a warm spare takes its place) and the call checks
    /// out again; a fresh one is tagged with the session.
    fn admits(self: &Arc<Self>, lease: &mut Lease, session: &str) -> bool {
        if self.isolation != SessionIsolation::Process {
            return true;
        }
        let pid = lease.worker().pid();
        let admitted = self
            .workers
            .with_live(pid, |entry| match &entry.session {
                Some(served) => served == session,
                None => {
                    entry.session = Some(session.to_string());
                    true
                }
            })
            .unwrap_or(true);
        if !admitted {
            if let Some(worker) = lease.worker.take() {
                tracing::debug!(
                    worker = pid,
                    session,
                    "recycling a worker of another session"
                );
                self.counters
                    .session_recycles
                    .fetch_add(1, Ordering::Relaxed);
                self.lose_queued(&worker);
                self.retire(worker, Termination::Retired);
                self.replace();
            }
        }
        admitted
    }

    /// Retires a healthy worker in the background (it exits when its stdin
    /// closes), counted as having ended `how`.
    fn retire(&self, worker: Worker, how: Termination) {
        self.counters.count_end(&how);
        self.workers.unregister(worker.pid());
        tokio::spawn(worker.retire());
    }

    /// Finishes killing a worker in the background (its guardian's clean-up,
    /// the sweep of what is left, the reaping); shutdown waits for it.
    fn finish_off(&self, mut worker: Worker) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                self.dying.spawn_on(
                    async move {
                        worker.kill().await;
                    },
                    &runtime,
                );
            }
            Err(_) => drop(worker),
        }
    }

    fn make_idle(self: &Arc<Self>, worker: Worker) {
        let stale = self.workers.returned_stale(&worker);
        let closed = self.workers.is_closed();
        if stale && !closed {
            // Runs code from before a reload: new calls go to fresh workers.
            self.counters.recycled.fetch_add(1, Ordering::Relaxed);
            self.retire(worker, Termination::Retired);
            self.replace();
            return;
        }
        if closed {
            self.retire(worker, Termination::ShutDown);
            return;
        }
        // A call queued behind a running one takes it first.
        let Some(worker) = self.rescue(worker) else {
            return;
        };
        self.workers.put_idle(worker);
        if self.workers.is_closed() {
            // Closed meanwhile: shutdown takes it from the queue.
            self.workers.nudge();
        }
    }

    /// Puts a worker in place of one that died, timed out or retired: a
    /// warm spare at once when there is one (then the spare is refilled),
    /// else a newly started worker.
    fn replace(self: &Arc<Self>) {
        self.counters.respawns.fetch_add(1, Ordering::Relaxed);
        match self.workers.pop_spare() {
            Some(worker) => {
                self.make_idle(worker);
                // Not urgent: let the call the spare is about to take start
                // before a new Python process competes with it for the CPU.
                self.start_worker(Destination::Spare, SPARE_REFILL_DELAY);
            }
            None => self.start_worker(Destination::Idle, Duration::ZERO),
        }
    }

    /// Starts one worker in the background, backing off while starts keep
    /// failing, and sends it to `destination`.
    fn start_worker(self: &Arc<Self>, destination: Destination, delay: Duration) {
        self.start_worker_with(self.spec.clone(), destination, delay);
    }

    /// [`Shared::start_worker`] with `spec` (under `--sandbox`, one of
    /// another session: [`Shared::replace_like`]).
    fn start_worker_with(
        self: &Arc<Self>,
        spec: Arc<WorkerSpec>,
        destination: Destination,
        delay: Duration,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let shared = self.clone();
        runtime.spawn(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            loop {
                if shared.workers.is_closed() {
                    return;
                }
                let failures = shared.restart_failures.load(Ordering::Relaxed);
                if failures > 0 {
                    let backoff = Duration::from_millis(100)
                        .saturating_mul(1 << failures.min(10))
                        .min(MAX_RESTART_BACKOFF);
                    tokio::time::sleep(backoff).await;
                }
                let generation = shared.workers.generation();
                // Not quarantining: the catalog lists every module these
                // workers must serve; one that breaks them now is a failed start.
                match Worker::start(&shared.spawner, spec.clone()).await {
                    Ok(mut worker) => {
                        if let Destination::Spare = destination {
                            if !warm(&mut worker).await {
                                // Backs off like a failed start: never a spawn loop.
                                tracing::error!("a new spare worker failed its warm-up");
                                shared.restart_failures.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                        }
                        shared.restart_failures.store(0, Ordering::Relaxed);
                        if let Ok(mut failure) = shared.start_failure.lock() {
                            *failure = None;
                        }
                        shared.workers.register(&worker, generation);
                        match destination {
                            Destination::Idle => shared.make_idle(worker),
                            Destination::Spare => shared.add_spare(worker),
                        }
                        return;
                    }
                    Err(e) => {
                        tracing::error!("replacement worker failed to start: {e}");
                        shared.restart_failures.fetch_add(1, Ordering::Relaxed);
                        if let Ok(mut failure) = shared.start_failure.lock() {
                            *failure = Some(e.to_string());
                        }
                        shared.start_failed.notify_waiters();
                    }
                }
            }
        });
    }

    fn add_spare(self: &Arc<Self>, worker: Worker) {
        if self.workers.is_stale(worker.pid()) && !self.workers.is_closed() {
            // Started before a reload finished: start a spare on the new code.
            self.retire(worker, Termination::Retired);
            self.start_worker(Destination::Spare, Duration::ZERO);
            return;
        }
        if let Some(worker) = self.workers.keep_spare(worker) {
            self.retire(worker, Termination::ShutDown);
        }
    }

    /// An attachment result's blocks as the session's store knows them (the
    /// store reads files: on a blocking thread).
    async fn check_content(
        &self,
        blocks: Vec<WireBlock>,
        store: Arc<AttachmentStore>,
    ) -> Vec<ContentBlock> {
        tokio::task::spawn_blocking(move || {
            blocks
                .into_iter()
                .map(|block| ContentBlock::from_wire(block, &store))
                .collect()
        })
        .await
        .unwrap_or_default()
    }

    fn count_error(&self, error: &ToolError) {
        match error.kind {
            ErrorKind::Timeout => self.counters.timeouts.fetch_add(1, Ordering::Relaxed),
            ErrorKind::WorkerDied => self.counters.worker_deaths.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        if let Ok(mut by_type) = self.counters.errors_by_type.lock() {
            *by_type
                .entry(error.kind.type_name().to_string())
                .or_default() += 1;
        }
    }

    /// Waits for a worker for a call of `session`, within the queue-wait
    /// limit: an idle one, or a busy one the call is queued behind
    /// (`encode` makes its request frame under that worker's id).
    async fn checkout(
        self: &Arc<Self>,
        tool: &str,
        session: &str,
        encode: &(dyn Fn(u64) -> Option<Vec<u8>> + Sync),
    ) -> Result<Checkout, ToolError> {
        let started = Instant::now();
        let limit = self.queue_wait.map(|limit| started + limit);
        let busy_error = || {
            ToolError::new(
                tool,
                ErrorKind::PoolBusy,
                format!(
                    "no worker became free within {} s ({} workers, all busy)",
                    format_secs(started.elapsed()),
                    self.size
                ),
            )
        };
        loop {
            let ticket = match self.wait_for_worker(tool, session, encode, limit).await? {
                Some(Got::Idle(worker)) => {
                    return Ok(Checkout {
                        lease: Lease::new(worker, self),
                        queued: None,
                    })
                }
                Some(Got::Queued(ticket)) => ticket,
                None => return Err(busy_error()),
            };
            let queued = Gauge::up(&self.counters.queued);
            let end = ticket.wait(limit).await;
            drop(queued);
            return match end {
                TicketEnd::Queued { lease, id, sent } => Ok(Checkout {
                    lease,
                    queued: sent.then_some(id),
                }),
                TicketEnd::Rescued(lease) => Ok(Checkout {
                    lease,
                    queued: None,
                }),
                // The worker it was queued on died before it started.
                TicketEnd::Retry => continue,
                TicketEnd::TimedOut => Err(busy_error()),
            };
        }
    }

    /// An idle worker, or a place behind a busy one; `None` when `limit` passed first.
    async fn wait_for_worker(
        self: &Arc<Self>,
        tool: &str,
        session: &str,
        encode: &(dyn Fn(u64) -> Option<Vec<u8>> + Sync),
        limit: Option<Instant>,
    ) -> Result<Option<Got>, ToolError> {
        let closed_error =
            || ToolError::new(tool, ErrorKind::PoolClosed, "the pool is shutting down");
        if self.workers.is_closed() {
            return Err(closed_error());
        }
        let fail_fast = || {
            let reason = self.start_failure.lock().ok()?.clone()?;
            (self.workers.live_count() == 0).then(|| {
                ToolError::new(
                    tool,
                    ErrorKind::WorkerDied,
                    format!("no worker is running and none can start: {reason}"),
                )
            })
        };
        if let Some(error) = fail_fast() {
            return Err(error);
        }
        // Nobody waiting and a worker idle: take it without queueing.
        if let Some(worker) = self.workers.try_take_idle() {
            return Ok(Some(Got::Idle(worker)));
        }
        if let Some(ticket) = self.try_queue(session, encode) {
            return Ok(Some(Got::Queued(ticket)));
        }
        let queued = Gauge::up(&self.counters.queued);
        // In line for the next idle worker (the place is kept while this
        // waits), or a running call's slot as it frees up.
        let take = async {
            let idle = self.workers.take_idle();
            tokio::pin!(idle);
            loop {
                tokio::select! {
                    worker = &mut idle => return worker.map(Got::Idle),
                    () = self.queueing.slot_freed().notified() => {
                        if let Some(ticket) = self.try_queue(session, encode) {
                            return Some(Got::Queued(ticket));
                        }
                    }
                }
            }
        };
        let waited = async {
            match limit {
                Some(limit) => tokio::time::timeout_at(limit, take).await.ok(),
                None => Some(take.await),
            }
        };
        // A call queued while the last worker died must not wait for a
        // worker that cannot start: it fails when the next start fails.
        let cannot_start = async {
            loop {
                let failed = self.start_failed.notified();
                if let Some(error) = fail_fast() {
                    return error;
                }
                failed.await;
            }
        };
        let outcome = tokio::select! {
            waited = waited => waited,
            () = self.workers.closed() => Some(None),
            error = cannot_start => return Err(error),
        };
        drop(queued);
        match outcome {
            Some(Some(got)) => Ok(Some(got)),
            Some(None) => Err(closed_error()),
            None => Ok(None),
        }
    }
}

/// Under `--sandbox` a worker's mount view holds the directories of the one
/// session it was started for ([`WorkerSpec::for_session`]), so it serves
/// that session only, whatever [`SessionIsolation`] says. The pool's whole
/// part of it is these two functions:
/// - [`Shared::sandboxed_lease`], right after a checkout: keeps the worker
///   if it is the call's session's; else hands it back and takes the next
///   idle one, each idle worker once at most; else retires the idle worker
///   of another session it holds (or one whose session folder is gone) and
///   starts one for the call's session, which the call waits for (a cold
///   start; the pool keeps its size);
/// - [`Shared::replace_like`], when a worker is killed (a timeout, a death,
///   a cancelled call): its replacement is started for the same session.
impl Shared {
    async fn sandboxed_lease(
        self: &Arc<Self>,
        mut lease: Lease,
        session: Option<&Session>,
        tool: &str,
    ) -> Result<Lease, ToolError> {
        let paths = session.map_or(&self.session, |session| &session.paths);
        let mut taken = 1;
        loop {
            let bound = lease.worker().spec().session_dir();
            if bound == paths.dir {
                return Ok(lease);
            }
            // A one-request session's worker, or one of a swept session.
            let orphaned = !bound.exists();
            if orphaned || taken >= self.size {
                return self.cold_lease(lease, paths, tool).await;
            }
            taken += 1;
            if let Some(worker) = lease.worker.take() {
                self.make_idle(worker);
            }
            // Not queued behind a busy worker: that one may be another session's.
            lease = self.checkout(tool, &paths.id, &|_| None).await?.lease;
        }
    }

    /// Retires the worker of `lease` (another session's) and starts one
    /// for the session of `paths` in its place.
    async fn cold_lease(
        self: &Arc<Self>,
        mut lease: Lease,
        paths: &SessionPaths,
        tool: &str,
    ) -> Result<Lease, ToolError> {
        let cannot_start = |reason: String| {
            ToolError::new(
                tool,
                ErrorKind::WorkerDied,
                format!(
                    "cannot start a sandboxed worker for session '{}': {reason}",
                    paths.id
                ),
            )
        };
        if self.workers.is_closed() {
            // Handed back, it is retired: no new worker for a closing pool.
            if let Some(worker) = lease.worker.take() {
                self.make_idle(worker);
            }
            return Err(ToolError::new(
                tool,
                ErrorKind::PoolClosed,
                "the pool is shutting down",
            ));
        }
        let spec = if paths.dir == self.session.dir {
            self.spec.clone()
        } else {
            match self.spec.for_session(&paths.id, &paths.sandbox_mounts()) {
                Ok(spec) => Arc::new(spec),
                // The worker it holds stays the pool's.
                Err(e) => return Err(cannot_start(e.to_string())),
            }
        };
        if let Some(worker) = lease.worker.take() {
            tracing::debug!(
                worker = worker.pid(),
                session = %paths.id,
                "retiring an idle worker of another session for a sandboxed one of this session"
            );
            self.counters
                .session_recycles
                .fetch_add(1, Ordering::Relaxed);
            self.retire(worker, Termination::Retired);
        }
        // Started in a task of its own: if the call is given up meanwhile,
        // the new worker still takes the retired one's place (idle).
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let shared = self.clone();
        tokio::spawn(async move {
            let generation = shared.workers.generation();
            match Worker::start(&shared.spawner, spec).await {
                Ok(worker) => {
                    shared.workers.register(&worker, generation);
                    if let Err(Ok(worker)) = started_tx.send(Ok(worker)) {
                        shared.make_idle(worker);
                    }
                }
                Err(e) => {
                    // The retired worker's place: a worker of the pool's session.
                    shared.replace();
                    let _ = started_tx.send(Err(e.to_string()));
                }
            }
        });
        match started.await {
            Ok(Ok(worker)) => Ok(Lease {
                worker: Some(worker),
                shared: self.clone(),
            }),
            Ok(Err(reason)) => Err(cannot_start(reason)),
            Err(_) => Err(cannot_start("its start was abandoned".into())),
        }
    }

    /// Starts a worker in place of one started from `spec` that was killed:
    /// for the same session under `--sandbox` (while its folder is there),
    /// else as [`Shared::replace`] does.
    fn replace_like(self: &Arc<Self>, spec: &Arc<WorkerSpec>) {
        let dir = spec.session_dir();
        if Arc::ptr_eq(spec, &self.spec) || dir == self.session.dir || !dir.exists() {
            self.replace();
            return;
        }
        self.counters.respawns.fetch_add(1, Ordering::Relaxed);
        self.start_worker_with(spec.clone(), Destination::Idle, Duration::ZERO);
    }
}

/// What a caller waiting for a worker got.
enum Got {
    Idle(Worker),
    Queued(Ticket),
}

/// A worker checked out for a call.
struct Checkout {
    lease: Lease,
    /// The call's request is on the wire already under this id (queued
    /// behind the worker's call before).
    queued: Option<u64>,
}

/// One call, as [`Pool::run_on`] runs it.
struct Call<'a> {
    name: &'a str,
    args: &'a Value,
    context: &'a CallContext,
    session: &'a str,
    callbacks: &'a Arc<dyn CallbackService>,
    timeout: Duration,
}

/// How one attempt of a call on a worker ended.
enum Attempt {
    /// The call's result, an attachment result's blocks, the worker's pid.
    Done(Result<Value, ToolError>, Option<Vec<WireBlock>>, i32),
    /// The worker was broken before it started the call.
    NotStarted { pid: i32, how: Termination },
    /// Queued behind the call before, it was given back unstarted.
    Withdrawn,
}

/// A worker checked out for one call. Dropped mid-call (the caller gave up),
/// it kills the worker — a call in flight leaves it in an unknown state — and
/// starts a replacement.
struct Lease {
    worker: Option<Worker>,
    shared: Arc<Shared>,
}

impl Lease {
    fn new(worker: Worker, shared: &Arc<Shared>) -> Lease {
        Lease {
            worker: Some(worker),
            shared: shared.clone(),
        }
    }

    fn worker(&mut self) -> &mut Worker {
        self.worker
            .as_mut()
            .expect("a lease holds its worker until finished")
    }

    /// Hands the worker back after its call; `ended`: how the call ended
    /// it (it is gone, and replaced), `None` when it is still sound.
    fn finish(mut self, ended: Option<Termination>) {
        let Some(worker) = self.worker.take() else {
            return;
        };
        let shared = &self.shared;
        if let Some(how) = ended {
            shared.counters.count_end(&how);
            shared.lose_queued(&worker);
            let spec = worker.spec().clone();
            shared.workers.unregister(worker.pid());
            shared.finish_off(worker);
            shared.replace_like(&spec);
            return;
        }
        // The call queued behind this one (pipelining) takes the worker.
        let Some(worker) = shared.hand_over(worker) else {
            return;
        };
        let worn_out = shared
            .max_calls_per_worker
            .is_some_and(|max| worker.calls_served() >= max);
        if worn_out {
            // Its replacement was started when this last call began.
            shared.counters.recycled.fetch_add(1, Ordering::Relaxed);
            shared.retire(worker, Termination::Retired);
        } else {
            shared.make_idle(worker);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(worker) = self.worker.take() {
            // Info: the caller gave up (an MCP cancellation, a dropped
            // future), an ordinary end of a call, not a fault.
            tracing::info!(
                worker = worker.pid(),
                "call abandoned mid-flight: killing its worker"
            );
            self.shared.lose_queued(&worker);
            self.shared
                .counters
                .cancelled
                .fetch_add(1, Ordering::Relaxed);
            self.shared.counters.count_end(&Termination::Cancelled);
            let spec = worker.spec().clone();
            self.shared.workers.unregister(worker.pid());
            worker.kill_now();
            self.shared.finish_off(worker);
            self.shared.replace_like(&spec);
        }
    }
}

/// A pool of Python workers running the tools of one functions directory.
#[derive(Clone)]
pub struct Pool {
    shared: Arc<Shared>,
}

impl Pool {
    pub fn builder() -> PoolBuilder {
        PoolBuilder::default()
    }

    /// A handle that does not keep the pool alive (for background watchers).
    pub(crate) fn downgrade(&self) -> WeakPool {
        WeakPool(Arc::downgrade(&self.shared))
    }

    /// True once shutdown has begun.
    pub fn is_closed(&self) -> bool {
        self.shared.workers.is_closed()
    }

    /// Whether the pool can take calls: not shutting down, and some worker
    /// is running (the catalog was loaded when the pool was built).
    pub fn is_ready(&self) -> bool {
        !self.is_closed() && !self.is_draining() && self.shared.workers.live_count() > 0
    }

    /// Marks the pool as about to shut down (a front end got SIGTERM): it
    /// still runs calls, but [`Pool::is_ready`] is false from now on, so a
    /// load balancer sends new work elsewhere.
    pub fn drain(&self) {
        self.shared.draining.store(true, Ordering::Release);
    }

    /// True once [`Pool::drain`] was called.
    pub fn is_draining(&self) -> bool {
        self.shared.draining.load(Ordering::Acquire)
    }

    /// Live worker processes, spares included.
    pub fn live_workers(&self) -> usize {
        self.shared.workers.live_count()
    }

    /// The catalog as last built (at start, or by [`Pool::reload`]).
    pub fn catalog(&self) -> Arc<Catalog> {
        match self.shared.catalog.read() {
            Ok(catalog) => catalog.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The session's attachment store (what tools register through
    /// `_context["attachment_store"]`).
    pub fn attachments(&self) -> &Arc<AttachmentStore> {
        &self.shared.services.attachments
    }

    pub fn session(&self) -> &SessionPaths {
        &self.shared.session
    }

    pub fn default_timeout(&self) -> Duration {
        self.shared.default_timeout
    }

    /// `--human-timeout`: the bound on one human wait, if any.
    pub fn human_timeout(&self) -> Option<Duration> {
        self.shared.spec.human_timeout
    }

    /// Calls a tool; the error's `Display` is the agent-facing text.
    pub async fn invoke(
        &self,
        name: &str,
        args: Value,
        options: InvokeOptions,
    ) -> Result<Value, ToolError> {
        self.invoke_report(name, args, options).await.result
    }

    /// Like [`Pool::invoke`], with the elapsed time and the worker's pid.
    pub async fn invoke_report(
        &self,
        name: &str,
        args: Value,
        options: InvokeOptions,
    ) -> CallReport {
        let shared = &self.shared;
        shared.counters.calls.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let (result, content, worker_pid, queue_wait) = self.run_call(name, &args, options).await;
        match &result {
            Ok(_) => {
                shared.counters.succeeded.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                shared.count_error(error);
                // Under their own target, so that `toolpool call`, which prints
                // the text itself, can leave it out of the log; the traceback
                // only at debug level (`-v`).
                tracing::warn!(target: CALL_LOG_TARGET, tool = name, "{error}");
                if let Some(traceback) = &error.traceback {
                    tracing::debug!(target: CALL_LOG_TARGET, tool = name, "{traceback}");
                }
            }
        }
        let elapsed = started.elapsed();
        if let Ok(mut latency) = shared.counters.latency.lock() {
            latency.record(elapsed);
        }
        CallReport {
            result,
            content,
            elapsed,
            queue_wait,
            worker_pid,
        }
    }

    async fn run_call(
        &self,
        name: &str,
        args: &Value,
        options: InvokeOptions,
    ) -> (
        Result<Value, ToolError>,
        Option<Vec<ContentBlock>>,
        Option<i32>,
        Duration,
    ) {
        let shared = &self.shared;
        let timeout = options.timeout.unwrap_or(shared.default_timeout);
        let services = match &options.session {
            Some(session) => session.services().clone(),
            None => shared.services.clone(),
        };
        let handler = CallbackHandler::new(services.clone(), options.human_prompt);
        let human_prompt = handler.has_human_prompt();
        let callbacks: Arc<dyn CallbackService> = Arc::new(handler);
        let context = CallContext {
            session_id: services.session_id.clone(),
            node_id: options.context.node_id,
            vars: options.context.vars,
            human_prompt,
            session: options.session.as_ref().map(|session| SessionDirs {
                dir: session.paths.dir.clone(),
                workspace: session.paths.workspace.clone(),
                packages_dir: session.paths.site_packages.clone(),
            }),
        };
        // The request as queued behind a busy worker's call, under its id.
        let encode = |id| {
            let request = Request::Invoke {
                id,
                name,
                args,
                context: &context,
            };
            encode_frame(&request, shared.spec.max_frame).ok()
        };
        let queued = Instant::now();
        let mut moved = false;
        loop {
            let checkout = shared.checkout(name, &services.session_id, &encode).await;
            let queue_wait = queued.elapsed();
            let Checkout {
                mut lease,
                queued: on_wire,
            } = match checkout {
                Ok(checkout) => checkout,
                Err(e) => return (Err(e), None, None, queue_wait),
            };
            if shared.spec.sandbox.is_some() {
                lease = match shared
                    .sandboxed_lease(lease, options.session.as_deref(), name)
                    .await
                {
                    Ok(lease) => lease,
                    Err(e) => return (Err(e), None, None, queued.elapsed()),
                };
            } else if !shared.admits(&mut lease, &services.session_id) {
                continue;
            }
            let call = Call {
                name,
                args,
                context: &context,
                session: &services.session_id,
                callbacks: &callbacks,
                timeout,
            };
            match self.run_on(lease, call, on_wire).await {
                // An earlier call broke that worker: this one moves to a
                // fresh worker, once.
                Attempt::NotStarted { .. } if !moved => moved = true,
                Attempt::Withdrawn => {}
                Attempt::NotStarted { pid, how } => {
                    let message = format!(
                        "the worker (pid {pid}) was found broken before it started '{name}', twice: it {how}"
                    );
                    let error = ToolError::new(name, ErrorKind::WorkerDied, message);
                    return (Err(error), None, Some(pid), queue_wait);
                }
                Attempt::Done(result, content, pid) => {
                    let content = match content {
                        Some(blocks) => Some(
                            shared
                                .check_content(blocks, services.attachments.clone())
                                .await,
                        ),
                        None => None,
                    };
                    return (result, content, Some(pid), queue_wait);
                }
            }
        }
    }

    /// One attempt of a call on the worker of `lease`; `queued`: the id
    /// its request was written under behind the worker's call before.
    async fn run_on(&self, mut lease: Lease, call: Call<'_>, queued: Option<u64>) -> Attempt {
        let Call {
            name,
            args,
            context,
            session,
            callbacks,
            timeout,
        } = call;
        let shared = &self.shared;
        let worker = lease.worker();
        let pid = worker.pid();
        if shared
            .max_calls_per_worker
            .is_some_and(|max| worker.calls_served() + 1 == max)
        {
            // Start the successor now so capacity does not dip when this one retires.
            shared.replace();
        }
        let busy = Gauge::up(&shared.counters.busy);
        // From here a call may be queued behind this one.
        let listed = shared.mark_busy(worker, session);
        let deadline = Instant::now() + timeout;
        // Boxed: the exchange's state is large, and a call's future is moved
        // whenever a task is spawned around it.
        let outcome =
            Box::pin(worker.invoke(queued, name, args, context, deadline, Some(callbacks))).await;
        drop(listed);
        drop(busy);
        let closing = shared.workers.is_closed();
        let mut content = None;
        // `ended`: how the worker ended, when the call ended it.
        let (result, ended) = match outcome {
            CallOutcome::Reply(Ok(reply)) => {
                content = reply.content;
                (Ok(reply.value), None)
            }
            CallOutcome::Reply(Err(remote)) => {
                let mut error =
                    ToolError::new(name, ErrorKind::from_remote(&remote.kind), remote.message);
                error.traceback = remote.traceback;
                (Err(error), None)
            }
            CallOutcome::TimedOut { stuck_at } => {
                let place = match stuck_at {
                    Some(at) => format!("; it was at {at}"),
                    None => "; no stack dump was received".to_string(),
                };
                let message = format!(
                    "function '{name}' timed out after {} s; its worker (pid {pid}) was killed{place}",
                    format_secs(timeout)
                );
                (
                    Err(ToolError::new(name, ErrorKind::Timeout, message)),
                    Some(Termination::TimedOut),
                )
            }
            CallOutcome::Died(_) if closing => (
                Err(ToolError::new(
                    name,
                    ErrorKind::PoolClosed,
                    "the pool shut down before the call finished; its worker was killed",
                )),
                Some(Termination::ShutDown),
            ),
            CallOutcome::NotStarted(how) => {
                lease.finish(Some(how.clone()));
                return Attempt::NotStarted { pid, how };
            }
            CallOutcome::Withdrawn => {
                lease.finish(None);
                return Attempt::Withdrawn;
            }
            CallOutcome::Died(how) => {
                let mut message = format!("the worker (pid {pid}) running '{name}' {how}");
                if let Some(bytes) = shared.spec.memory_limit_bytes {
                    message.push_str(&format!(
                        " (workers may use {} MB of address space: --memory-limit)",
                        bytes / (1024 * 1024)
                    ));
                }
                (
                    Err(ToolError::new(name, ErrorKind::WorkerDied, message)),
                    Some(how),
                )
            }
        };
        lease.finish(ended);
        Attempt::Done(result, content, pid)
    }

    pub fn stats(&self) -> PoolStats {
        let c = &self.shared.counters;
        // /proc is read outside the dispatcher's lock.
        let mut workers: Vec<WorkerStats> = self
            .shared
            .workers
            .live()
            .into_iter()
            .map(|(pid, worker)| WorkerStats {
                pid,
                calls_served: worker.calls_served,
                rss_bytes: crate::procfs::rss_bytes(pid),
            })
            .collect();
        workers.sort_by_key(|w| w.pid);
        let live = workers.len();
        let busy = c.busy.load(Ordering::Relaxed);
        let spares = self.shared.workers.spare_count();
        PoolStats {
            size: self.shared.size,
            live_workers: live,
            busy,
            idle: live.saturating_sub(busy + spares),
            queued: c.queued.load(Ordering::Relaxed),
            calls: c.calls.load(Ordering::Relaxed),
            succeeded: c.succeeded.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
            worker_deaths: c.worker_deaths.load(Ordering::Relaxed),
            respawns: c.respawns.load(Ordering::Relaxed),
            recycled: c.recycled.load(Ordering::Relaxed),
            session_recycles: c.session_recycles.load(Ordering::Relaxed),
            spares,
            cancelled: c.cancelled.load(Ordering::Relaxed),
            pipelined: c.pipelined.load(Ordering::Relaxed),
            withdrawn: c.withdrawn.load(Ordering::Relaxed),
            kills: c.timeouts.load(Ordering::Relaxed) + c.cancelled.load(Ordering::Relaxed),
            terminations: Termination::KINDS
                .iter()
                .zip(&c.terminations)
                .map(|(kind, count)| (kind.to_string(), count.load(Ordering::Relaxed)))
                .collect(),
            errors_by_type: c
                .errors_by_type
                .lock()
                .map(|m| m.clone())
                .unwrap_or_default(),
            latency: c.latency.lock().map(|h| h.clone()).unwrap_or_default(),
            workers,
        }
    }

    /// Rebuilds the catalog from a freshly started worker and recycles every
    /// worker onto the new code: idle ones and spares at once, busy ones
    /// when their call returns (calls in flight are not disturbed).
    pub async fn reload(&self) -> Result<Arc<Catalog>, PoolError> {
        let shared = &self.shared;
        shared.workers.bump_generation();
        // The modules quarantined may have been fixed: every one is tried again.
        shared.spec.clear_quarantine();
        let mut probe = start_quarantining(&shared.spawner, &shared.spec).await?;
        let outcome = probe.catalog().await;
        tokio::spawn(probe.retire());
        let catalog = Arc::new(catalog_from(outcome, shared.spec.functions_dir.clone())?);
        match shared.catalog.write() {
            Ok(mut current) => *current = catalog.clone(),
            Err(poisoned) => *poisoned.into_inner() = catalog.clone(),
        }
        for spare in shared.workers.take_spares() {
            shared.retire(spare, Termination::Retired);
            shared.start_worker(Destination::Spare, Duration::ZERO);
        }
        // Idle workers pass through make_idle, which recycles the stale ones.
        for worker in shared.workers.take_all_idle() {
            shared.make_idle(worker);
        }
        tracing::info!(
            functions = catalog.functions.len(),
            errors = catalog.errors.len(),
            "catalog rebuilt; workers recycled onto the new code"
        );
        Ok(catalog)
    }

    /// Stops taking calls, lets calls in flight finish within `grace`, then
    /// kills what is left and reaps every worker.
    pub async fn shutdown_with_grace(&self, grace: Duration) {
        let shared = &self.shared;
        shared.workers.close();
        let deadline = Instant::now() + grace;
        let mut retiring = JoinSet::new();
        // Idle workers and spares retire at once; those coming back from
        // calls retire as they come back (`make_idle` on a closed pool).
        shared
            .workers
            .retire_idle_until_gone(deadline, |worker| {
                shared.counters.count_end(&Termination::ShutDown);
                retiring.spawn(worker.retire());
            })
            .await;
        // Whatever is still busy after the grace period is killed; its call
        // returns PoolClosed.
        for (_, worker) in shared.workers.live() {
            worker.killer.kill();
        }
        while retiring.join_next().await.is_some() {}
        // The calls just killed hand their workers to `dying` as they return.
        shared
            .workers
            .all_gone_by(deadline + Duration::from_secs(5))
            .await;
        shared.dying.close();
        shared.dying.wait().await;
    }

    /// What the workers run on and how they are killed (`toolpool doctor`).
    pub fn worker_info(&self) -> &WorkerInfo {
        &self.shared.info
    }

    /// The limits in force, for `toolpool doctor`.
    pub fn limits(&self) -> Value {
        let shared = &self.shared;
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        json!({
            "workers": shared.size,
            "timeout_secs": shared.default_timeout.as_secs_f64(),
            "import_timeout_secs": secs(shared.import_timeout),
            "human_timeout_secs": secs(shared.spec.human_timeout),
            "start_timeout_secs": shared.spec.start_timeout.as_secs_f64(),
            "queue_wait_secs": secs(shared.queue_wait),
            "memory_limit_bytes": shared.spec.memory_limit_bytes,
            "max_calls_per_worker": shared.max_calls_per_worker,
            "max_frame_bytes": shared.spec.max_frame,
            "subreaper": shared.subreaper,
            "sandbox": shared.spec.sandbox.is_some(),
            "allow_net": shared.spec.sandbox.as_ref().is_some_and(|s| s.options().allow_net),
        })
    }

    /// The sandbox its workers run in (`--sandbox`), if any.
    pub fn sandbox(&self) -> Option<&Sandbox> {
        self.shared.spec.sandbox.as_deref()
    }

    /// [`Pool::shutdown_with_grace`] with a 10 s grace period.
    pub async fn shutdown(&self) {
        self.shutdown_with_grace(Duration::from_secs(10)).await
    }
}

/// A [`Pool`] that may have been dropped.
pub(crate) struct WeakPool(std::sync::Weak<Shared>);

impl WeakPool {
    pub(crate) fn upgrade(&self) -> Option<Pool> {
        self.0.upgrade().map(|shared| Pool { shared })
    }
}
