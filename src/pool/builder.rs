//! A pool's options ([`PoolBuilder`], with the command line's defaults);
//! the start they are given to is `build.rs`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{SessionIsolation, DEFAULT_IMPORT_TIMEOUT, DEFAULT_PARKED_WORKERS};
use crate::context::HumanPrompt;
use crate::protocol::DEFAULT_MAX_FRAME;
use crate::sandbox::{SandboxMode, SandboxOptions};

/// Builds a [`crate::Pool`]; the defaults are those of the command line (docs/cli.md).
#[derive(Debug, Clone)]
pub struct PoolBuilder {
    pub(super) functions_dir: Option<PathBuf>,
    pub(super) python: String,
    pub(super) workers: usize,
    pub(super) timeout: Duration,
    pub(super) timeout_grace: Duration,
    pub(super) min_workers: Option<usize>,
    pub(super) worker_idle: Option<Duration>,
    pub(super) session_id: String,
    pub(super) session_dir: Option<PathBuf>,
    pub(super) max_calls_per_worker: Option<u64>,
    pub(super) max_worker_rss_mb: Option<u64>,
    pub(super) memory_limit_mb: Option<u64>,
    pub(super) pass_env: Vec<String>,
    pub(super) set_env: Vec<(String, String)>,
    pub(super) queue_wait: Option<Duration>,
    pub(super) max_frame: usize,
    pub(super) start_timeout: Duration,
    pub(super) spare_workers: usize,
    pub(super) human_prompt: Option<Arc<dyn HumanPrompt>>,
    pub(super) subreaper: bool,
    pub(super) fork_template: bool,
    pub(super) human_timeout: Option<Duration>,
    pub(super) import_timeout: Option<Duration>,
    pub(super) pid_namespace: bool,
    pub(super) isolation: SessionIsolation,
    pub(super) parked_workers: usize,
    pub(super) sandbox: SandboxOptions,
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
    /// Idle workers kept for their sessions beyond the pool size, unless
    /// [`PoolBuilder::parked_workers`] says otherwise.
    pub const DEFAULT_PARKED_WORKERS: usize = super::DEFAULT_PARKED_WORKERS;
    /// The largest frame (a request or a reply) a worker may send or be
    /// sent, unless [`PoolBuilder::max_frame`] says otherwise.
    pub const DEFAULT_MAX_FRAME: usize = crate::protocol::DEFAULT_MAX_FRAME;
    /// The processes a sandboxed worker may have at once, unless
    /// [`PoolBuilder::max_procs`] says otherwise.
    pub const DEFAULT_MAX_PROCS: u32 = crate::sandbox::DEFAULT_MAX_PROCS;

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
}
