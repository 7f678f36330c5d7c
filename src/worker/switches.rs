//! What passes between a worker's actor and the rest of the pool, besides
//! commands: the actor alone holds the worker's processes (their pidfds),
//! signals them and watches them end. Anything else that wants the worker
//! gone pulls its [`KillSwitch`]; anything that wants to know it ended
//! waits for its [`EndNotice`].

use tokio_util::sync::CancellationToken;

/// A worker's kill switch. Pulled any number of times, by any number of
/// holders (the handle, a call given up, the pool's shutdown), from any
/// thread, inside the runtime or not: the worker's actor kills the worker's
/// processes once, at once. If the actor's task is dropped instead (the
/// runtime ends), the actor's own `Drop` kills.
#[derive(Debug, Clone, Default)]
pub(crate) struct KillSwitch(CancellationToken);

impl KillSwitch {
    /// Asks the actor to kill the worker now. Never blocks.
    pub(crate) fn pull(&self) {
        self.0.cancel();
    }

    /// Resolves once the switch is pulled (at once if it was).
    pub(super) async fn pulled(&self) {
        self.0.cancelled().await
    }
}

/// Given when a worker's guardian ends while its actor waits for a command
/// (the kernel says so through the actor's pidfd), or when the actor itself
/// ends: whoever waits for it is told once, and never waits forever.
#[derive(Debug, Clone, Default)]
pub(crate) struct EndNotice(CancellationToken);

impl EndNotice {
    /// Tells every waiter (the actor's side).
    pub(super) fn give(&self) {
        self.0.cancel();
    }

    /// Resolves once the notice is given (at once if it was).
    pub(crate) async fn given(&self) {
        self.0.cancelled().await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_pull_from_another_thread_wakes_the_waiter_once_for_all_holders() {
        let switch = KillSwitch::default();
        let held = switch.clone();
        let early = tokio::time::timeout(Duration::from_millis(50), switch.pulled());
        assert!(early.await.is_err(), "not pulled yet");
        let waiter = tokio::spawn(async move { held.pulled().await });
        let puller = switch.clone();
        std::thread::spawn(move || {
            puller.pull();
            puller.pull();
        })
        .join()
        .expect("the pulling thread ends");
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter wakes")
            .expect("the waiter ends");
        // Pulled already: resolves at once, for every holder.
        switch.pulled().await;
    }

    #[tokio::test]
    async fn an_end_notice_reaches_a_waiter_that_came_late() {
        let notice = EndNotice::default();
        notice.give();
        tokio::time::timeout(Duration::from_secs(5), notice.clone().given())
            .await
            .expect("given already");
    }
}
