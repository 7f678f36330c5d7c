//! Building a pool: the options (`PoolBuilder`, the command line's
//! defaults) and the start — the interpreter resolved, the first worker
//! started (quarantining tool modules that break it), the catalog read, the
//! rest of the workers and the spares started.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::task::JoinSet;

use super::{
    Counters, Destination, Dispatcher, Pool, SessionIsolation, Shared, DEFAULT_IMPORT_TIMEOUT,
    DEFAULT_PARKED_WORKERS, MAX_QUARANTINED,
};
use crate::catalog::Catalog;
use crate::context::{AttachmentStore, HumanPrompt, SessionPaths, SessionServices};
use crate::embedded::PrivateInstall;
use crate::pool_error::PoolError;
use crate::protocol::DEFAULT_MAX_FRAME;
use crate::sandbox::{Sandbox, SandboxMode, SandboxOptions, SandboxPaths};
use crate::worker::{BootConfig, CallOutcome, Spawner, StartError, Worker, WorkerSpec};

/// Builds a [`Pool`]; the defaults are those of the command line (docs/cli.md).
#[derive(Debug, Clone)]
pub struct PoolBuilder {
    functions_dir: Option<PathBuf>,
    python: String,
    workers: usize,
    timeout: Duration,
    timeout_grace: Duration,
    min_workers: Option<usize>,
    worker_idle: Option<Duration>,
    session_id: String,
    session_dir: Option<PathBuf>,
    max_calls_per_worker: Option<u64>,
    max_worker_rss_mb: Option<u64>,
    memory_limit_mb: Option<u64>,
    pass_env: Vec<String>,
    set_env: Vec<(String, String)>,
    queue_wait: Option<Duration>,
    max_frame: usize,
    start_timeout: Duration,
    spare_workers: usize,
    human_prompt: Option<Arc<dyn HumanPrompt>>,
    subreaper: bool,
    fork_template: bool,
    human_timeout: Option<Duration>,
    import_timeout: Option<Duration>,
    pid_namespace: bool,
    isolation: SessionIsolation,
    parked_workers: usize,
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
            timeout_grace: Duration::ZERO,
            min_workers: None,
            worker_idle: None,
            session_id: "default".into(),
            session_dir: None,
            max_calls_per_worker: None,
            max_worker_rss_mb: None,
            memory_limit_mb: None,
            pass_env: Vec::new(),
            set_env: Vec::new(),
            queue_wait: None,
            max_frame: DEFAULT_MAX_FRAME,
            spare_workers: 1,
            human_prompt: None,
            start_timeout: Duration::from_secs(60),
            subreaper: false,
            fork_template: true,
            human_timeout: None,
            import_timeout: Some(DEFAULT_IMPORT_TIMEOUT),
            pid_namespace: true,
            isolation: SessionIsolation::Shared,
            parked_workers: DEFAULT_PARKED_WORKERS,
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
    /// The Python interpreter the workers run, a command name or a path
    /// (`python3` by default); resolved once to its real path.
    pub fn python(mut self, python: impl Into<String>) -> Self {
        self.python = python.into();
        self
    }
    /// How many workers run calls at once (at least 1; spares come on top);
    /// by default the number of CPUs.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n.max(1);
        self
    }
    /// Default per-call timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Workers kept however long they are idle (default: all of
    /// [`Self::workers`]); with [`Self::worker_idle`], the pool shrinks to
    /// this many and grows back as calls wait. More than `workers` is
    /// taken as `workers`.
    pub fn min_workers(mut self, n: usize) -> Self {
        self.min_workers = Some(n);
        self
    }

    /// How long a worker beyond [`Self::min_workers`] may be idle before it
    /// is retired; default: forever.
    pub fn worker_idle(mut self, idle: Option<Duration>) -> Self {
        self.worker_idle = idle;
        self
    }

    /// How long a timed-out tool may clean up (`TimeoutError` is raised in
    /// its main thread, so `finally` and `with` run) before its worker is
    /// killed; default zero: killed at the deadline. A call's own
    /// ([`crate::InvokeOptions::timeout_grace`]) or its tool's wins.
    pub fn timeout_grace(mut self, grace: Duration) -> Self {
        self.timeout_grace = grace;
        self
    }
    /// The pool's session (`default` by default): `session_id` in the
    /// tools' `_context`, and the name of its directory. It must be one path
    /// component, else [`build`](Self::build) fails.
    pub fn session_id(mut self, id: impl Into<String>) -> Self {
        self.session_id = id.into();
        self
    }
    /// The pool's session directory, instead of `.toolpool/sessions/<id>`
    /// under the current directory (or under the user's state directory when
    /// that cannot be made).
    pub fn session_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.session_dir = Some(dir.into());
        self
    }
    /// See [`SessionIsolation`]; `Shared` by default.
    pub fn session_isolation(mut self, isolation: SessionIsolation) -> Self {
        self.isolation = isolation;
        self
    }
    /// Under [`SessionIsolation::Process`]: how many idle workers are kept
    /// for their sessions beyond [`workers`](Self::workers), so that a
    /// session whose worker another session's call displaced resumes it
    /// rather than starting a new one (64 by default; 0: every displaced
    /// worker is recycled). Each holds its memory (a few MB) while parked;
    /// past the limit the one parked longest ago is retired. At most
    /// `workers` run calls at once either way.
    pub fn parked_workers(mut self, n: usize) -> Self {
        self.parked_workers = n;
        self
    }

    /// Recycle a worker after this many calls; `None` (or 0): never.
    pub fn max_calls_per_worker(mut self, n: Option<u64>) -> Self {
        self.max_calls_per_worker = n.filter(|n| *n > 0);
        self
    }
    /// Retire a worker after a call that leaves it with more resident
    /// memory than this, in MB (a leaky C extension, a cache that grows);
    /// the call keeps its answer, and a fresh worker takes the place.
    /// `None`: never.
    pub fn max_worker_rss_mb(mut self, mb: Option<u64>) -> Self {
        self.max_worker_rss_mb = mb.filter(|mb| *mb > 0);
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
    /// Warm spare workers kept started but idle, so a killed or recycled
    /// worker is replaced at once instead of after a Python start-up.
    pub fn spare_workers(mut self, n: usize) -> Self {
        self.spare_workers = n;
        self
    }
    /// Largest frame either side sends or accepts (results included), in
    /// bytes; 64 MiB by default.
    pub fn max_frame(mut self, bytes: usize) -> Self {
        self.max_frame = bytes;
        self
    }
    /// Who answers the tools' human prompts (`_context["human_prompt"]`);
    /// without one, tools find `None` there. A call can bring its own
    /// ([`InvokeOptions::human_prompt`](super::InvokeOptions::human_prompt)).
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
    /// was killed (see `src/reaper.rs`). Only for programs that start no
    /// child processes of their own other than through toolpool: those
    /// would be killed as leftovers. The `toolpool` command enables it.
    pub fn subreaper(mut self, on: bool) -> Self {
        self.subreaper = on;
        self
    }
    /// Clone unsandboxed workers from a template process that has started
    /// the interpreter and imported the shim once (on by default; see
    /// `docs/protocol.md`). Off: every worker is a fresh interpreter. A
    /// template that cannot start or clone is given up, and workers spawned.
    pub fn fork_template(mut self, on: bool) -> Self {
        self.fork_template = on;
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
    /// docs/security.md). `Strict` refuses to build when the kernel lacks
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
        // The shim (and the bundled tools, and the code cache) of this pool
        // alone, removed with it.
        let install = Arc::new(PrivateInstall::new()?);
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
                    (install.bundled_functions()?, false)
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
        let shim_dir = install.shim()?;
        if self.sandbox.mode != SandboxMode::Off {
            // Sandboxed workers see the shim read-only and cannot cache its
            // compiled code: compiled once here instead of at every start.
            compile_shim(&python, &shim_dir).await;
        }
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
            code_cache: sandbox.is_none().then(|| install.code_cache()),
            terminal_filter: match sandbox {
                Some(_) => None,
                None => Some(crate::sandbox::terminal_program_hex().map_err(|e| {
                    PoolError::Setting(format!("the terminal filter cannot be built: {e}"))
                })?),
            },
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
        let spawner = Spawner::new(self.fork_template).map_err(|e| PoolError::Interpreter {
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
            workers: Dispatcher::new(self.parked_workers),
            draining: AtomicBool::new(false),
            default_timeout: self.timeout,
            default_grace: self.timeout_grace,
            queue_wait: self.queue_wait,
            max_calls_per_worker: self.max_calls_per_worker,
            max_worker_rss: self
                .max_worker_rss_mb
                .map(|mb| mb.saturating_mul(1024 * 1024)),
            size: self.workers,
            sizing: super::sizing::Sizing::new(
                self.min_workers.unwrap_or(self.workers).min(self.workers),
                self.worker_idle,
            ),
            catalog: RwLock::new(Arc::new(catalog)),
            counters: Counters::default(),
            start_failure: Mutex::new(None),
            start_failed: tokio::sync::Notify::new(),
            restart_failures: AtomicU64::new(0),
            dying: tokio_util::task::TaskTracker::new(),
            starting: tokio_util::task::TaskTracker::new(),
            info,
            import_timeout: self.import_timeout,
            subreaper: self.subreaper,
            isolation: self.isolation,
            install,
        });
        let missing = self.workers - workers.len();
        for worker in workers {
            shared.enlist(&worker, 0);
            shared.make_idle(worker);
        }
        for _ in 0..missing {
            shared.replace();
        }
        shared.watch_idle_workers();
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

/// Compiles the shim's modules into its `__pycache__` (a failure only costs
/// each sandboxed worker a compile, so it is logged, not fatal).
async fn compile_shim(python: &Path, shim_dir: &Path) {
    let compiled = tokio::process::Command::new(python)
        .args(["-I", "-m", "compileall", "-q"])
        .arg(shim_dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .await;
    match compiled {
        Ok(out) if out.status.success() => {}
        Ok(out) => tracing::warn!(
            "compiling the shim failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => tracing::warn!("compiling the shim failed: {e}"),
    }
}

/// Starts a worker; a tool module that kills or hangs it at import is
/// quarantined (reported as a load error by the next workers, not imported)
/// and the start tried again.
pub(super) async fn start_quarantining(
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
pub(super) async fn warm(worker: &mut Worker) -> bool {
    for _ in 0..2 {
        let sound = matches!(
            worker.ping().await,
            CallOutcome::Reply {
                result: Ok(_),
                left_running: None
            }
        );
        if !sound {
            return false;
        }
    }
    true
}

/// The catalog from a worker's answer to a `catalog` request.
pub(super) fn catalog_from(
    outcome: CallOutcome,
    functions_dir: PathBuf,
) -> Result<Catalog, PoolError> {
    match outcome {
        CallOutcome::Reply {
            result: Ok(reply), ..
        } => Catalog::from_worker(functions_dir, reply.value).map_err(PoolError::Catalog),
        CallOutcome::Reply { result: Err(e), .. } => Err(PoolError::Catalog(format!(
            "{}: {}",
            e.kind.type_name(),
            e.message
        ))),
        CallOutcome::TimedOut { .. } => Err(PoolError::Catalog(
            "the worker did not answer in time".into(),
        )),
        CallOutcome::Died(how) | CallOutcome::NotStarted(how) => {
            Err(PoolError::Catalog(format!("the worker {how}")))
        }
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
