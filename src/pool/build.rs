//! The pool's start ([`PoolBuilder::build`]): the functions directory and
//! the interpreter resolved, the workers' spec (boot configuration, memory
//! limit, sandbox), the first workers started in parallel — quarantining
//! tool modules that break them — and the catalog read from the first one
//! up, then the rest of the workers and the spares.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::task::JoinSet;

use super::{Counters, Destination, Dispatcher, Pool, PoolBuilder, Shared, MAX_QUARANTINED};
use crate::catalog::Catalog;
use crate::context::{AttachmentStore, SessionPaths, SessionServices};
use crate::embedded::PrivateInstall;
use crate::outcome::CallOutcome;
use crate::pool_error::PoolError;
use crate::sandbox::{Sandbox, SandboxMode, SandboxPaths};
use crate::worker::{BootConfig, Spawner, StartError, Worker, WorkerSpec};

impl PoolBuilder {
    /// Starts the workers (in parallel) and builds the catalog.
    pub async fn build(self) -> Result<Pool, PoolError> {
        // The shim (and the bundled tools, and the code cache) of this pool
        // alone, removed with it.
        let install = Arc::new(PrivateInstall::new()?);
        let (functions_dir, bundled_tools_hidden) = self.resolve_functions_dir(&install)?;
        let session = SessionPaths::prepare(&self.session_id, self.session_dir.as_deref())?;
        let spec = self
            .worker_spec(
                &install,
                functions_dir.clone(),
                bundled_tools_hidden,
                &session,
            )
            .await?;
        let spawner = Spawner::new(self.fork_template).map_err(|e| PoolError::Interpreter {
            python: self.python.clone(),
            reason: format!("cannot start the spawner thread: {e}"),
        })?;
        let spawner = Arc::new(spawner);
        let (workers, catalog, info) = self.first_workers(&spawner, &spec, functions_dir).await?;
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

    /// The functions directory (canonical), and whether the bundled tools
    /// were passed over for `./functions/function_calling` (so NotFound
    /// says the bundled tools are not there).
    fn resolve_functions_dir(
        &self,
        install: &PrivateInstall,
    ) -> Result<(PathBuf, bool), PoolError> {
        let (dir, hidden) = match &self.functions_dir {
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
        let canonical = dir
            .canonicalize()
            .ok()
            .filter(|d| d.is_dir())
            .ok_or_else(|| PoolError::FunctionsDir(dir.clone()))?;
        Ok((canonical, hidden))
    }

    /// `--memory-limit` in bytes, refused when no 64-bit number holds it.
    fn memory_limit_bytes(&self) -> Result<Option<u64>, PoolError> {
        let Some(mb) = self.memory_limit_mb else {
            return Ok(None);
        };
        mb.checked_mul(1024 * 1024)
            .filter(|bytes| *bytes < libc::RLIM_INFINITY)
            .map(Some)
            .ok_or_else(|| {
                PoolError::Setting(format!(
                    "memory limit of {mb} MB is more bytes than a 64-bit number holds"
                ))
            })
    }

    /// What every worker of the pool is started with.
    async fn worker_spec(
        &self,
        install: &PrivateInstall,
        functions_dir: PathBuf,
        bundled_tools_hidden: bool,
        session: &SessionPaths,
    ) -> Result<Arc<WorkerSpec>, PoolError> {
        let python = resolve_interpreter(&self.python).await?;
        let shim_dir = install.shim()?;
        if self.sandbox.mode != SandboxMode::Off {
            // Sandboxed workers see the shim read-only and cannot cache its
            // compiled code: compiled once here instead of at every start.
            compile_shim(&python, &shim_dir).await;
        }
        let memory_limit_bytes = self.memory_limit_bytes()?;
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
        let boot = self.boot_config(
            install,
            &functions_dir,
            bundled_tools_hidden,
            session,
            sandbox.as_deref(),
        )?;
        // Under the sandbox with a memory cgroup, the cgroup is the limit.
        let memory_limit_bytes =
            memory_limit_bytes.filter(|_| !sandbox.as_ref().is_some_and(|s| s.limits_memory()));
        Ok(Arc::new(WorkerSpec {
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
            functions_dir,
            sandbox,
        }))
    }

    /// What the shim is told at its start.
    fn boot_config(
        &self,
        install: &PrivateInstall,
        functions_dir: &Path,
        bundled_tools_hidden: bool,
        session: &SessionPaths,
        sandbox: Option<&Sandbox>,
    ) -> Result<BootConfig, PoolError> {
        let boot = BootConfig {
            functions_dir: functions_dir.to_path_buf(),
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
            sandbox: sandbox.map(|s| s.shim_config()),
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
        Ok(boot)
    }

    /// The pool's workers started in parallel; the first one up builds the
    /// catalog while the others still start. Fails only when none starts.
    async fn first_workers(
        &self,
        spawner: &Arc<Spawner>,
        spec: &Arc<WorkerSpec>,
        functions_dir: PathBuf,
    ) -> Result<(Vec<Worker>, Catalog, crate::worker::WorkerInfo), PoolError> {
        let mut starting = JoinSet::new();
        for _ in 0..self.workers {
            let (spawner, spec) = (spawner.clone(), spec.clone());
            starting.spawn(async move { start_quarantining(&spawner, &spec).await });
        }
        let mut workers = Vec::new();
        let mut first_error = None;
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
        Ok((workers, catalog, info))
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
        CallOutcome::Unsent(why) => Err(PoolError::Catalog(format!(
            "the request cannot be sent to the worker: {why}"
        ))),
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
