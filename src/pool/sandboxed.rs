//! The pool's part of `--sandbox` over several sessions.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::{Destination, Lease, Shared};
use crate::context::{Session, SessionPaths};
use crate::outcome::{Refusal, Termination};
use crate::worker::WorkerSpec;

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
    pub(super) async fn sandboxed_lease(
        self: &Arc<Self>,
        mut lease: Lease,
        session: Option<&Session>,
    ) -> Result<Lease, Refusal> {
        let paths = session.map_or(&self.session, |session| &session.paths);
        let mut taken = 1;
        loop {
            let bound = lease.worker().spec().session_dir();
            if bound == paths.dir {
                return Ok(lease);
            }
            // A worker of a swept session.
            let orphaned = !bound.exists();
            if orphaned || taken >= self.size {
                return self.cold_lease(lease, paths).await;
            }
            taken += 1;
            if let Some(worker) = lease.worker.take() {
                self.make_idle(worker);
            }
            lease = self.checkout(&paths.id).await?;
        }
    }

    /// Retires the worker of `lease` (another session's) and starts one
    /// for the session of `paths` in its place.
    async fn cold_lease(
        self: &Arc<Self>,
        mut lease: Lease,
        paths: &SessionPaths,
    ) -> Result<Lease, Refusal> {
        let cannot_start = |reason: String| Refusal::SandboxCannotStart {
            session: paths.id.to_string(),
            reason,
        };
        if self.workers.is_closed() {
            // Handed back, it is retired: no new worker for a closing pool.
            if let Some(worker) = lease.worker.take() {
                self.make_idle(worker);
            }
            return Err(Refusal::Closing);
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
        self.start_worker_with(spec, Destination::Caller(started_tx), Duration::ZERO);
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
    pub(super) fn replace_like(self: &Arc<Self>, spec: &Arc<WorkerSpec>) {
        let dir = spec.session_dir();
        if Arc::ptr_eq(spec, &self.spec) || dir == self.session.dir || !dir.exists() {
            self.replace();
            return;
        }
        self.counters.respawns.fetch_add(1, Ordering::Relaxed);
        self.start_worker_with(spec.clone(), Destination::Idle, Duration::ZERO);
    }
}
