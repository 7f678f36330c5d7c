//! Stopping, killing, reaping and retiring a worker's processes (the
//! signals themselves are [`WorkerProcesses`]'s alone).

use std::process::ExitStatus;
use std::time::Duration;

use tokio::time::timeout;

use super::actor::Actor;
use super::GUARDIAN_EXIT_WAIT;

/// How many times, and how far apart (the n-th poll waits n times as
/// long: 210 ms in all), `cgroup.events` is read for `frozen 1`.
const FREEZE_POLLS: u32 = 20;
const FREEZE_POLL: Duration = Duration::from_millis(1);

impl Actor {
    /// Stops every process of the worker's tree while a human is asked, and
    /// makes sure of it by the kernel before the call's timer may stop:
    /// the worker's cgroup frozen (`cgroup.events` says `frozen 1`) where
    /// it has one, else stopped by signals until a full scan finds each
    /// one stopped. `false` when that cannot be made sure: the caller
    /// resumes them, and the timer runs on.
    pub(super) async fn freeze(&self) -> bool {
        if self.is_reaped() {
            return false;
        }
        match self._cgroup.freeze(true) {
            Some(Ok(())) => {
                for round in 0..FREEZE_POLLS {
                    if self._cgroup.is_frozen() {
                        return true;
                    }
                    tokio::time::sleep(FREEZE_POLL * (round + 1)).await;
                }
                false
            }
            Some(Err(e)) => {
                tracing::warn!(
                    worker = self.pid(),
                    "cannot freeze the worker's cgroup: {e}"
                );
                self.processes.stop_settled().await
            }
            None => self.processes.stop_settled().await,
        }
    }

    /// Lets every process of the worker's tree run again.
    pub(super) fn thaw(&self) {
        if self.is_reaped() {
            return;
        }
        match self._cgroup.freeze(false) {
            Some(Ok(())) => {}
            _ => self.processes.pause(false),
        }
    }

    /// SIGKILL to the worker and its group, at once (see
    /// [`WorkerProcesses::kill`]); once: a second ask (a caller that gave
    /// up, then its pulled switch) sends nothing more.
    pub(super) fn kill_now(&mut self) {
        if self.may_kill() {
            self.killed = true;
            self.processes.kill();
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

    fn kill_tree(&self) {
        if !self.is_reaped() {
            self.processes.kill_tree();
        }
    }

    /// The guardian's exit status if it ends within `limit` (it mirrors the
    /// worker's own), else `None` with the worker left as it is.
    pub(super) async fn exited_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let status = timeout(limit, self.guardian_process.wait())
            .await
            .ok()?
            .ok()?;
        self.reaped = true;
        // The guardian kills the worker's tree before it exits; this covers
        // a guardian that was itself killed.
        self.processes.kill_worker();
        Some(status)
    }

    /// Waits for the guardian, which mirrors the worker's own exit status.
    pub(super) async fn reap(&mut self) -> Option<ExitStatus> {
        if let Some(status) = self.exited_within(Duration::from_secs(5)).await {
            return Some(status);
        }
        self.kill_tree();
        let status = self.guardian_process.wait().await.ok();
        self.reaped |= status.is_some();
        status
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
        // Its guardian may end first and leave it to this process's reaper
        // for a moment: it is going, not left behind.
        crate::reaper::expect_death(self.processes.pid());
        if self.exited_within(Duration::from_secs(2)).await.is_none() {
            let _ = self.kill().await;
        }
    }
}

impl Drop for Actor {
    fn drop(&mut self) {
        self.end.give();
        if self.is_reaped() {
            return;
        }
        // A worker whose handle is gone (a dropped pool, a failed start)
        // must not outlive it; tokio reaps the guardian in the background.
        // Nothing can wait here for the guardian: it is asked to kill what
        // the tree left elsewhere and exit.
        self.kill_now();
        self.processes.ask_guardian_to_end();
    }
}
