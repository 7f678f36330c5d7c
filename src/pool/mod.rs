//! The pool: a set of workers, a queue in front of them, timeouts, replacement
//! of dead workers, recycling, stats and shutdown.
//!
//! Idle workers wait in the dispatcher (`dispatch`); a call takes one out
//! (waiting in FIFO order, no lock held), owns it for the call, and gives it
//! back; each call's life is the state machine of `call`. A
//! worker that timed out or died is already reaped when the call returns; a
//! replacement is started in the background with exponential back-off, so a
//! worker that cannot start never turns into a spawn loop.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinSet;
use tokio::time::Instant;

mod builder;
mod call;
#[cfg(test)]
mod call_model;
mod checkout;
mod dispatch;
mod idle_deaths;
mod lease;
mod limits;
mod parking;
mod sandboxed;
mod sizing;
mod stats;

use self::builder::{catalog_from, start_quarantining, warm};
pub use self::builder::{resolve_interpreter, PoolBuilder};
use self::call::{AttemptEnd, CallNext, CallState, Placement};
use self::dispatch::Dispatcher;
use self::lease::Lease;
pub use self::limits::Limits;
use self::stats::{Counters, Gauge};
pub use self::stats::{LatencyHistogram, PoolStats, WorkerStats};
use crate::catalog::Catalog;
use crate::content::ContentBlock;
use crate::context::{
    AttachmentStore, CallbackHandler, CallbackService, HumanPrompt, LogSubscription,
    ProgressListener, Session, SessionPaths, SessionServices,
};
use crate::duration_text::format_secs;
use crate::error::{ErrorKind, ToolError};
use crate::pool_error::PoolError;
use crate::protocol::{CallContext, SessionDirs, WireBlock};
use crate::sandbox::Sandbox;
use crate::trace_context::TraceContext;
use crate::worker::{
    CallOutcome, CallTime, Grace, Spawner, Termination, Worker, WorkerInfo, WorkerSpec,
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
/// Default bound on the workers parked for their sessions
/// ([`PoolBuilder::parked_workers`]).
pub const DEFAULT_PARKED_WORKERS: usize = 64;
/// Most modules one start may quarantine before it gives up.
const MAX_QUARANTINED: usize = 1000;

/// Per-call options.
#[derive(Debug, Clone, Default)]
pub struct InvokeOptions {
    /// Overrides the pool's default timeout.
    pub timeout: Option<Duration>,
    /// Overrides the pool's grace after a timeout ([`PoolBuilder::timeout_grace`]).
    pub timeout_grace: Option<Duration>,
    /// What the tool is told about its caller.
    pub context: InvokeContext,
    /// Who answers this call's human prompts, instead of the pool's
    /// ([`PoolBuilder::human_prompt`]); e.g. the MCP client that made the call.
    pub human_prompt: Option<Arc<dyn HumanPrompt>>,
    /// Who hears the tool's progress reports (`_context["progress"]`); with
    /// none, the tool's reports go nowhere.
    pub progress: Option<Arc<dyn ProgressListener>>,
    /// Who hears the tool's log records (Python's `logging`), and from
    /// which level; with none, records go where the tool's logging sends
    /// them (the worker's stderr, in the supervisor's log).
    pub logs: Option<LogSubscription>,
    /// The session the call runs in (its workspace, attachments and
    /// packages), instead of the pool's ([`Pool::session`]).
    pub session: Option<Arc<Session>>,
    /// The W3C trace context the tool continues (`_context["traceparent"]`,
    /// `TRACEPARENT` in its environment while it runs); see
    /// [`InvokeOptions::with_trace`].
    pub trace: Option<TraceContext>,
}

impl InvokeOptions {
    /// The call continues `trace`: the tool sees its `traceparent` as
    /// `_context["traceparent"]` and as `TRACEPARENT` in `os.environ` while
    /// the call runs (and `tracestate` likewise, when there is one), so
    /// that its own OpenTelemetry code makes its spans children of the
    /// caller's. Make one with [`TraceContext::parse`].
    pub fn with_trace(mut self, trace: TraceContext) -> InvokeOptions {
        self.trace = Some(trace);
        self
    }
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
    /// parked for its session (kept idle beyond the pool's size, up to
    /// [`PoolBuilder::parked_workers`]; retired past that) and a worker of
    /// the new session — one parked for it, a warm spare, or a new one —
    /// takes its place, so nothing in a worker's memory passes from one
    /// session to the next.
    Process,
}

/// What a caller tells the tool about itself (`_context` keys).
#[derive(Debug, Clone, Default)]
pub struct InvokeContext {
    /// The calling agent node's id (`_context["node_id"]`); `None` when the
    /// caller is not a workflow node.
    pub node_id: Option<String>,
    /// Free-form values for the tool (`_context["vars"]`).
    pub vars: serde_json::Map<String, Value>,
    /// Keys of the host program's own `_context` (the original runtime's
    /// `global_state`), given to the tool as they are; the keys toolpool
    /// sets itself (`python_workspace_root`, `session_id`, ...) keep
    /// toolpool's values.
    pub host: serde_json::Map<String, Value>,
}

/// A successful call, with what the CLI's `--json` envelope reports.
#[derive(Debug, Clone)]
pub struct CallReport {
    /// The tool's JSON value, or the error the agent gets.
    pub result: Result<Value, ToolError>,
    /// For an attachment result (the tool returned message blocks or an
    /// attachment record), its blocks, checked against the session's store.
    pub content: Option<Vec<ContentBlock>>,
    /// From the call's start to its end, the wait for a worker included.
    pub elapsed: Duration,
    /// How long the call waited for a free worker.
    pub queue_wait: Duration,
    /// The pid of the worker the call last went to; `None` when it got none
    /// (the pool busy or shutting down, a sandboxed worker that could not
    /// start).
    pub worker_pid: Option<i32>,
}

/// Where a newly started worker goes.
enum Destination {
    Idle,
    Spare,
    /// To the call waiting for it (a sandboxed worker of the call's
    /// session); idle if that call was given up. A failed start is not
    /// retried: the call gets why, and a worker of the pool's session
    /// takes the place of the one retired for it.
    Caller(tokio::sync::oneshot::Sender<Result<Worker, String>>),
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
    default_grace: Duration,
    queue_wait: Option<Duration>,
    max_calls_per_worker: Option<u64>,
    /// `--max-worker-rss`, in bytes.
    max_worker_rss: Option<u64>,
    size: usize,
    /// `--min-workers`, `--worker-idle`, and how far the pool has shrunk.
    sizing: sizing::Sizing,
    /// Replaced as a whole by [`Pool::reload`].
    catalog: RwLock<Arc<Catalog>>,
    counters: Counters,
    /// Why the last attempt to start a worker failed, while none is running.
    start_failure: Mutex<Option<String>>,
    /// Wakes queued calls when a start fails, to fail fast if none can run.
    start_failed: tokio::sync::Notify,
    restart_failures: AtomicU64,
    /// Killed workers whose trees are being finished off and reaped;
    /// shutdown waits for them, so no process of a call outlives the pool.
    dying: tokio_util::task::TaskTracker,
    /// Workers being started; shutdown waits for them. A start for no call
    /// (an idle worker, a spare) ends when the pool closes, and what it
    /// had started is killed as the pool's own while the pool still runs.
    starting: tokio_util::task::TaskTracker,
    /// What the first worker said about itself (for `toolpool doctor`).
    info: WorkerInfo,
    import_timeout: Option<Duration>,
    subreaper: bool,
    isolation: SessionIsolation,
    /// The shim, bundled tools and code cache of this pool alone; last, so
    /// that it is removed after the template and the workers are gone.
    install: Arc<crate::embedded::PrivateInstall>,
}

impl Shared {
    /// Under [`SessionIsolation::Process`]: whether the worker of `lease`
    /// may serve a call of `session`. One that served another session is
    /// parked for it (`parking`; retired when there is no room) and its
    /// place in the lease taken by a worker of this session that was parked,
    /// else by a warm spare (then `true`); with neither, a new worker is
    /// started and the call checks out again (`false`). A fresh one is
    /// tagged with the session.
    fn admits(self: &Arc<Self>, lease: &mut Lease, session: &str) -> bool {
        let placement = self.placement();
        if placement == Placement::Shared {
            return true;
        }
        let (id, pid) = (lease.worker().id(), lease.worker().pid());
        let admitted = self
            .workers
            .with_live(id, |entry| {
                let admitted = placement.admits(entry.session.as_deref(), session);
                if admitted {
                    entry.session = Some(session.to_string());
                }
                admitted
            })
            .unwrap_or(true);
        if admitted {
            return true;
        }
        let Some(worker) = lease.worker.take() else {
            return false;
        };
        // Taken out before the other is parked, which could push it out.
        let own = self.resume(session);
        self.park(worker);
        if let Some(own) = own {
            self.counters.parked_resumes.fetch_add(1, Ordering::Relaxed);
            lease.worker = Some(own);
            return true;
        }
        tracing::debug!(worker = pid, session, "a worker of another session parked");
        // A warm spare takes its place for this very call, rather than
        // joining the queue where another call might take it first.
        match self.workers.pop_spare() {
            Some(spare) if !self.workers.is_stale(spare.id()) => {
                self.counters.respawns.fetch_add(1, Ordering::Relaxed);
                self.workers.with_live(spare.id(), |entry| {
                    entry.session = Some(session.to_string());
                });
                lease.worker = Some(spare);
                self.start_worker(Destination::Spare, SPARE_REFILL_DELAY);
                true
            }
            stale => {
                if let Some(stale) = stale {
                    self.retire(stale, Termination::Retired);
                }
                self.replace();
                false
            }
        }
    }

    /// Parks `worker` (idle, tagged with the session it served) for its
    /// session; retires the workers that no longer fit, each counted as a
    /// worker recycled for another session.
    fn park(&self, worker: Worker) {
        let session = self
            .workers
            .with_live(worker.id(), |entry| entry.session.clone())
            .flatten()
            .unwrap_or_default();
        for worker in self.workers.park(session, worker) {
            if self.workers.is_closed() {
                self.retire(worker, Termination::ShutDown);
            } else {
                self.counters
                    .session_recycles
                    .fetch_add(1, Ordering::Relaxed);
                self.retire(worker, Termination::Retired);
            }
        }
    }

    /// A worker of `session` parked for it and still on the current code
    /// (a stale one is retired; then none).
    fn resume(&self, session: &str) -> Option<Worker> {
        let worker = self.workers.resume(session)?;
        if self.workers.is_stale(worker.id()) {
            self.retire(worker, Termination::Retired);
            return None;
        }
        Some(worker)
    }

    /// Where a call's workers come from.
    fn placement(&self) -> Placement {
        match (self.spec.sandbox.is_some(), self.isolation) {
            (true, _) => Placement::Sandboxed,
            (false, SessionIsolation::Process) => Placement::PerSession,
            (false, SessionIsolation::Shared) => Placement::Shared,
        }
    }

    /// Retires a healthy worker in the background (it exits when its stdin
    /// closes), counted as having ended `how`.
    fn retire(&self, worker: Worker, how: Termination) {
        self.counters.count_end(&how);
        self.workers.unregister(worker.id());
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
        if let Some(worker) = self.workers.put_idle(worker) {
            // Closed meanwhile.
            self.retire(worker, Termination::ShutDown);
        }
    }

    /// Puts a worker in place of one that died, timed out or retired: a
    /// warm spare at once when there is one (then the spare is refilled),
    /// else a newly started worker.
    fn replace(self: &Arc<Self>) {
        self.counters.respawns.fetch_add(1, Ordering::Relaxed);
        self.add_worker();
    }

    /// One more idle worker: the warm spare if there is one (and a new
    /// spare started), else a new start.
    fn add_worker(self: &Arc<Self>) {
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
    /// failing, and sends it to `destination`. Every worker started after
    /// the pool is built starts here.
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
        // A call waiting for this worker is in flight: its start goes on
        // through the shutdown's grace period like the call itself.
        let for_a_call = matches!(destination, Destination::Caller(_));
        let closed = self.workers.closed_token();
        let start = async move {
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
                        if let Destination::Spare = &destination {
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
                        shared.enlist(&worker, generation);
                        match destination {
                            Destination::Idle => shared.make_idle(worker),
                            Destination::Spare => shared.add_spare(worker),
                            Destination::Caller(caller) => {
                                if let Err(Ok(worker)) = caller.send(Ok(worker)) {
                                    shared.make_idle(worker);
                                }
                            }
                        }
                        return;
                    }
                    Err(e) if matches!(destination, Destination::Caller(_)) => {
                        shared.replace();
                        if let Destination::Caller(caller) = destination {
                            let _ = caller.send(Err(e.to_string()));
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
        };
        self.starting.spawn_on(
            async move {
                if for_a_call {
                    return start.await;
                }
                tokio::select! {
                    () = start => {}
                    () = closed.cancelled() => {}
                }
            },
            &runtime,
        );
    }

    fn add_spare(self: &Arc<Self>, worker: Worker) {
        if self.workers.is_stale(worker.id()) && !self.workers.is_closed() {
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
}

/// One call, as [`Pool::run_on`] runs it.
struct Call<'a> {
    name: &'a str,
    args: &'a Value,
    context: &'a CallContext,
    callbacks: &'a Arc<dyn CallbackService>,
    time: CallTime,
}

/// How one attempt of a call on a worker ended.
enum Attempt {
    /// The call's result, an attachment result's blocks, the worker's pid.
    Done(Result<Value, ToolError>, Option<Vec<WireBlock>>, i32),
    /// The worker was broken before it started the call.
    NotStarted { pid: i32, how: Termination },
}

/// The error of a call whose state machine refused a transition: a bug in
/// the pool, never a reason to run the call again.
fn illegal(name: &str) -> ToolError {
    ToolError::new(
        name,
        ErrorKind::WorkerDied,
        "the pool lost track of the call (a bug in toolpool); it was not run again",
    )
}

/// A pool of Python workers running the tools of one functions directory.
#[derive(Clone)]
pub struct Pool {
    shared: Arc<Shared>,
}

impl Pool {
    /// A [`PoolBuilder`] with the command line's defaults.
    pub fn builder() -> PoolBuilder {
        PoolBuilder::default()
    }

    #[cfg(feature = "watch")]
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

    /// The directories of the pool's session ([`PoolBuilder::session_id`]).
    pub fn session(&self) -> &SessionPaths {
        &self.shared.session
    }

    /// The timeout of a call that sets none ([`PoolBuilder::timeout`]).
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
        // The caller's (a workflow file's) timeout, else the tool's own,
        // else the pool's.
        let catalog = self.catalog();
        let time = CallTime {
            timeout: options
                .timeout
                .or_else(|| catalog.own_timeout(name))
                .unwrap_or(shared.default_timeout),
            grace: options
                .timeout_grace
                .or_else(|| catalog.own_timeout_grace(name))
                .unwrap_or(shared.default_grace),
        };
        drop(catalog);
        let services = match &options.session {
            Some(session) => session.services().clone(),
            None => shared.services.clone(),
        };
        let handler = CallbackHandler::new(
            services.clone(),
            options.human_prompt,
            options.progress,
            options.logs,
        );
        let human_prompt = handler.has_human_prompt();
        let progress = handler.has_progress();
        let log_level = handler.log_threshold();
        let callbacks: Arc<dyn CallbackService> = Arc::new(handler);
        let context = CallContext {
            session_id: services.session_id.clone(),
            node_id: options.context.node_id,
            vars: options.context.vars,
            host: options.context.host,
            human_prompt,
            progress,
            log_level,
            session: options.session.as_ref().map(|session| SessionDirs {
                dir: session.paths.dir.clone(),
                workspace: session.paths.workspace.clone(),
                packages_dir: session.paths.site_packages.clone(),
            }),
            trace: options.trace,
        };
        let queued = Instant::now();
        let mut state = CallState::new();
        loop {
            let checkout = shared.checkout(name, &services.session_id).await;
            let queue_wait = queued.elapsed();
            let mut lease = match checkout {
                Ok(lease) => lease,
                Err(e) => {
                    state.abandoned();
                    return (Err(e), None, None, queue_wait);
                }
            };
            if state.got_worker().is_err() {
                return (Err(illegal(name)), None, None, queue_wait);
            }
            if shared.spec.sandbox.is_some() {
                lease = match shared
                    .sandboxed_lease(lease, options.session.as_deref(), name)
                    .await
                {
                    Ok(lease) => lease,
                    Err(e) => return (Err(e), None, None, queued.elapsed()),
                };
            } else if !shared.admits(&mut lease, &services.session_id) {
                if state.refused_by_worker().is_err() {
                    return (Err(illegal(name)), None, None, queue_wait);
                }
                continue;
            }
            let call = Call {
                name,
                args,
                context: &context,
                callbacks: &callbacks,
                time,
            };
            let attempt = self.run_on(lease, call).await;
            let end = match &attempt {
                Attempt::NotStarted { .. } => AttemptEnd::NeverStarted,
                Attempt::Done(..) => AttemptEnd::Ran,
            };
            match (state.attempt_ended(&end), attempt) {
                (Err(_), _) => return (Err(illegal(name)), None, None, queue_wait),
                // An earlier call broke that worker before it read this
                // call's request: the call moves to a fresh worker, once.
                (Ok(CallNext::CheckOutAgain), _) => {}
                (Ok(_), Attempt::NotStarted { pid, how }) => {
                    let message = format!(
                        "the worker (pid {pid}) was found broken before it read '{name}', twice: it {how}"
                    );
                    let error = ToolError::new(name, ErrorKind::WorkerDied, message);
                    return (Err(error), None, Some(pid), queue_wait);
                }
                (Ok(_), Attempt::Done(result, content, pid)) => {
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

    /// One attempt of a call on the worker of `lease`.
    async fn run_on(&self, mut lease: Lease, call: Call<'_>) -> Attempt {
        let Call {
            name,
            args,
            context,
            callbacks,
            time,
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
        let outcome = worker
            .invoke(name, args, context, time, Some(callbacks))
            .await;
        drop(busy);
        let closing = shared.workers.is_closed();
        let mut content = None;
        // `ended`: how the worker ended, when the call ended it.
        let (result, ended) = match outcome {
            CallOutcome::Reply {
                result,
                left_running,
            } => {
                let ended = left_running.map(|left| {
                    shared.counters.count_left_behind(left.cause);
                    Termination::LeftRunning { what: left.what }
                });
                match result {
                    Ok(reply) => {
                        content = reply.content;
                        (Ok(reply.value), ended)
                    }
                    Err(remote) => {
                        let mut error = ToolError::new(name, remote.kind, remote.message);
                        error.traceback = remote.traceback;
                        (Err(error), ended)
                    }
                }
            }
            CallOutcome::TimedOut { stuck_at, grace } => {
                let place = match stuck_at {
                    Some(at) => format!("; it was at {at}"),
                    None => "; no stack dump was received".to_string(),
                };
                let ending = match grace {
                    Grace::None => place,
                    Grace::CleanedUp(took) => format!("; cleaned up in {} ms", took.as_millis()),
                    Grace::RanOut => format!(
                        "; killed after the {} s grace{place}",
                        format_secs(time.grace)
                    ),
                };
                let message = format!(
                    "function '{name}' timed out after {} s; its worker (pid {pid}) was killed{ending}",
                    format_secs(time.timeout)
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
        for worker in shared.workers.take_parked() {
            shared.counters.recycled.fetch_add(1, Ordering::Relaxed);
            shared.retire(worker, Termination::Retired);
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
        for worker in shared.workers.take_all_waiting() {
            shared.counters.count_end(&Termination::ShutDown);
            shared.workers.unregister(worker.id());
            retiring.spawn(worker.retire());
        }
        // Starts for no call end now (their workers killed); those for a
        // call in flight have the grace period (a worker that comes of one
        // meets a closed pool and retires, or runs its call).
        shared.starting.close();
        let _ = tokio::time::timeout_at(deadline, shared.starting.wait()).await;
        shared.workers.all_gone_by(deadline).await;
        // Whatever is still busy after the grace period is killed; its call
        // returns PoolClosed.
        for worker in shared.workers.live() {
            worker.processes.kill();
        }
        while retiring.join_next().await.is_some() {}
        // The calls just killed hand their workers to `dying` as they return.
        shared
            .workers
            .all_gone_by(deadline + Duration::from_secs(5))
            .await;
        shared.dying.close();
        shared.dying.wait().await;
        shared.spawner.end_template();
    }

    /// What the workers run on and how they are killed (`toolpool doctor`).
    pub fn worker_info(&self) -> &WorkerInfo {
        &self.shared.info
    }

    /// The limits in force, for `toolpool doctor`.
    pub fn limits(&self) -> Limits {
        let shared = &self.shared;
        Limits {
            workers: shared.size,
            parked_workers: shared.workers.park_limit(),
            timeout: shared.default_timeout,
            timeout_grace: shared.default_grace,
            min_workers: shared.sizing.min,
            worker_idle: shared.sizing.idle,
            import_timeout: shared.import_timeout,
            human_timeout: shared.spec.human_timeout,
            start_timeout: shared.spec.start_timeout,
            queue_wait: shared.queue_wait,
            memory_limit_bytes: shared.spec.memory_limit_bytes,
            max_calls_per_worker: shared.max_calls_per_worker,
            max_worker_rss_bytes: shared.max_worker_rss,
            max_frame_bytes: shared.spec.max_frame,
            subreaper: shared.subreaper,
            sandbox: shared.spec.sandbox.is_some(),
            allow_net: shared
                .spec
                .sandbox
                .as_ref()
                .is_some_and(|s| s.options().allow_net),
            private_dir: shared.install.path().to_path_buf(),
            code_cache: shared.spec.boot.code_cache.clone(),
        }
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

#[cfg(feature = "watch")]
/// A [`Pool`] that may have been dropped.
pub(crate) struct WeakPool(std::sync::Weak<Shared>);

#[cfg(feature = "watch")]
impl WeakPool {
    pub(crate) fn upgrade(&self) -> Option<Pool> {
        self.0.upgrade().map(|shared| Pool { shared })
    }
}
