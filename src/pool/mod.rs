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

use tokio::task::JoinSet;
use tokio::time::Instant;

mod build;
mod builder;
mod call;
#[cfg(test)]
mod call_model;
mod checkout;
mod describe;
mod dispatch;
mod idle_deaths;
mod lease;
mod limits;
mod options;
mod parking;
mod run;
mod sandboxed;
mod sizing;
mod starts;
mod stats;

pub use self::build::resolve_interpreter;
use self::build::{catalog_from, start_quarantining};
pub use self::builder::PoolBuilder;
use self::call::Placement;
use self::dispatch::Dispatcher;
use self::lease::Lease;
pub use self::limits::Limits;
pub use self::options::{CallReport, InvokeContext, InvokeOptions, SessionIsolation};
use self::starts::Destination;
use self::stats::{Counters, Gauge};
pub use self::stats::{LatencyHistogram, PoolStats, TenantCalls, WorkerStats};
use crate::catalog::Catalog;
use crate::context::{AttachmentStore, SessionPaths, SessionServices};
use crate::outcome::Termination;
use crate::pool_error::PoolError;
use crate::sandbox::Sandbox;
use crate::worker::{Spawner, Worker, WorkerInfo, WorkerSpec};

/// The tracing target of the log line of each failed call (and, at debug
/// level, its traceback).
pub const CALL_LOG_TARGET: &str = "toolpool::calls";
/// How long a promoted spare's successor waits before it starts.
const SPARE_REFILL_DELAY: Duration = Duration::from_millis(50);
/// Longest back-off between attempts to start a worker that keeps failing.
const MAX_RESTART_BACKOFF: Duration = Duration::from_secs(10);
/// Default bound on one tool module's import (`--import-timeout`).
pub(crate) const DEFAULT_IMPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default bound on the workers parked for their sessions
/// ([`PoolBuilder::parked_workers`]).
pub(crate) const DEFAULT_PARKED_WORKERS: usize = 64;
/// Most modules one start may quarantine before it gives up.
const MAX_QUARANTINED: usize = 1000;

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
            worker.switch.pull();
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
