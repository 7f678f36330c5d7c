//! Stopping, killing, reaping and retiring a worker's processes.

use std::process::ExitStatus;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::time::timeout;

use super::actor::Actor;
use super::GUARDIAN_EXIT_WAIT;
use crate::process::{kill_descendants, ProcessId, Tracked};

impl Actor {
    /// Stops (`true`) or resumes every process of the worker's tree: the
    /// worker, its group, and every other descendant of the guardian.
    pub(super) fn pause(&self, stop: bool) {
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

    /// SIGKILL to the worker (by pidfd) and to its group, at once: in a PID
    /// namespace that ends every process of the call; otherwise what left
    /// the group is killed by the guardian, the tree's subreaper, when it
    /// sees the worker gone (and by [`Worker::kill`]'s sweep).
    pub(super) fn kill_now(&self) {
        if self.is_reaped() {
            return;
        }
        self.killer().kill();
    }

    pub(super) fn killer(&self) -> WorkerKiller {
        WorkerKiller {
            guardian: self.guardian,
            process: self.process.clone(),
        }
    }

    /// Kills every process of the worker and reaps the guardian: the worker
    /// and its group at once; the guardian then reaps the worker, kills what
    /// the worker's tree left (it is their subreaper) and exits. A guardian
    /// that does not exit in time has its descendants and its group killed.
    pub(super) async fn kill(&mut self) -> Option<ExitStatus> {
        if !self.is_reaped() {
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
        if self.is_reaped() {
            return;
        }
        kill_descendants(self.guardian);
        let _ = self.guardian.group().signal(Signal::SIGKILL);
        let _ = self.guardian.signal(Signal::SIGKILL);
    }

    /// The guardian's exit status if it ends within `limit` (it mirrors the
    /// worker's own), else `None` with the worker left as it is.
    pub(super) async fn exited_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let status = timeout(limit, self.guardian_process.wait())
            .await
            .ok()?
            .ok()?;
        self.reaped.store(true, Ordering::Release);
        // The guardian kills the worker's tree before it exits; this covers
        // a guardian that was itself killed.
        if let Some(process) = &self.process {
            process.signal(Signal::SIGKILL);
        }
        Some(status)
    }

    /// Waits for the guardian, which mirrors the worker's own exit status.
    pub(super) async fn reap(&mut self) -> Option<ExitStatus> {
        if let Some(status) = self.exited_within(Duration::from_secs(5)).await {
            return Some(status);
        }
        self.kill_tree();
        self.guardian_process
            .wait()
            .await
            .ok()
            .inspect(|_| self.reaped.store(true, Ordering::Release))
    }

    /// How a worker that died while it waited ended, once its guardian is
    /// reaped (it mirrors the worker's exit status); logged against the
    /// call it ran last, as a death found by the next call is.
    pub(super) async fn how_it_ended(&mut self) -> super::Termination {
        let how = super::Termination::from_status(self.reap().await);
        let after = self.last_call.as_deref().unwrap_or("its start");
        tracing::warn!(
            worker = self.pid(),
            "the worker was found broken after {after}, while it waited: it {how}"
        );
        how
    }

    /// Retires a healthy worker whose stdin the handle closed (it exits at
    /// once): reaps it, killed if it lingers.
    pub(super) async fn retire(&mut self) {
        if let Some(process) = &self.killer().process {
            // Its guardian may end first and leave it to this process's
            // reaper for a moment: it is going, not left behind.
            crate::reaper::expect_death(process.pid.raw());
        }
        if self.exited_within(Duration::from_secs(2)).await.is_none() {
            let _ = self.kill().await;
        }
    }
}

/// What kills a worker from outside the call that owns it (shutdown).
#[derive(Debug, Clone)]
pub struct WorkerKiller {
    pub(super) guardian: ProcessId,
    pub(super) process: Option<Tracked>,
}

impl WorkerKiller {
    /// The worker's pid as the kernel names it (the guardian's when the
    /// guardian is the worker).
    pub fn pid(&self) -> i32 {
        self.process
            .as_ref()
            .map_or(self.guardian.raw(), |p| p.pid.raw())
    }

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

impl Drop for Actor {
    fn drop(&mut self) {
        if self.is_reaped() {
            return;
        }
        // A worker whose handle is gone (a dropped pool, a failed start)
        // must not outlive it; tokio reaps the guardian in the background.
        // Nothing can wait here for the guardian: SIGTERM asks it to kill the
        // worker's group (done already), kill what the tree left elsewhere,
        // and exit; SIGCONT in case a tool stopped it.
        self.kill_now();
        let _ = self.guardian.signal(Signal::SIGTERM);
        let _ = self.guardian.signal(Signal::SIGCONT);
    }
}
