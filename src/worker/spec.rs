//! What a worker is started with: the boot config the shim reads, and the
//! spec every worker of a pool shares (under `--sandbox`, one per session).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::DUMP_FD;
use crate::protocol::PROTOCOL_VERSION;
use crate::sandbox::SessionMounts;

/// A tool module that broke a worker's start, as the boot config's
/// `skip_modules` lists it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct QuarantinedModule {
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
pub(crate) struct BootConfig {
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
    /// Where the shim keeps the tool modules' compiled code, keyed by a hash
    /// of each file's path and source (`toolpool_shim/discovery.py`); none:
    /// compiled at every start (under the sandbox, which cannot write there).
    pub code_cache: Option<PathBuf>,
    /// Without `--sandbox`: a seccomp program (hex) that makes the terminal
    /// `ioctl`s fail (`crate::sandbox::terminal_program_hex`); the sandbox's
    /// own filter holds the same rules.
    pub terminal_filter: Option<String>,
}

/// Everything needed to launch a worker; shared by all workers of a pool.
#[derive(Debug)]
pub(crate) struct WorkerSpec {
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

impl WorkerSpec {
    /// The boot script's argument: the pool's config, with what is the
    /// worker's own.
    pub(super) fn boot_json(&self) -> String {
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
    pub(crate) fn quarantine(&self, module: &str, file: &str, error: String) {
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
    pub(crate) fn for_session(
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
    pub(crate) fn session_dir(&self) -> &Path {
        &self.boot.session_dir
    }

    /// Forgets the quarantine (the code may have been fixed: a reload).
    pub(crate) fn clear_quarantine(&self) {
        if let Ok(mut quarantined) = self.quarantined.lock() {
            quarantined.clear();
        }
    }
}
