//! The supervisor as child subreaper (opt-in: [`crate::PoolBuilder::subreaper`]).
//!
//! Each worker's guardian is already the subreaper of the worker's tree and
//! kills whatever the tree leaves (see `docs/protocol.md`). What escapes that
//! is what a guardian leaves when it is itself killed: with
//! `PR_SET_CHILD_SUBREAPER` set on the supervisor, those processes become the
//! supervisor's children instead of init's, and the sweep here kills and reaps
//! them.
//!
//! A child this process started on purpose is spawned through
//! [`spawn_known`], which records it (pid and start time, so a reused pid is
//! not mistaken for it); every other child is a leftover. That is why the
//! option is opt-in: a program that starts child processes of its own in
//! other ways must not enable it, or the sweep would kill them. `toolpool`'s
//! command line enables it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use crate::procfs::{children_of, stat};

/// How often leftovers are looked for while a subreaper pool runs.
const SWEEP_EVERY: Duration = Duration::from_millis(250);

/// Children started on purpose: pid → start time (clock ticks after boot).
/// Held while spawning, so a sweep never sees a child not yet recorded.
static KNOWN: Mutex<Option<HashMap<i32, u64>>> = Mutex::new(None);
/// Pools that asked for the subreaper and are still running.
static ACTIVE: Mutex<usize> = Mutex::new(0);
/// Workers being killed on purpose (pid, start time): one whose guardian
/// dies first is adopted here for a moment on its way out, and is no
/// leftover of a tool. Swept all the same, without a warning.
static DOOMED: Mutex<Vec<(i32, u64)>> = Mutex::new(Vec::new());
/// Enough for every worker of a large pool being killed at once.
const MAX_DOOMED: usize = 1024;

/// Records that the worker process `pid` is being killed by its pool.
pub(crate) fn expect_death(pid: i32) {
    let Some(started) = stat(pid).map(|s| s.start_time) else {
        return; // already gone
    };
    let mut doomed = DOOMED.lock().unwrap_or_else(|e| e.into_inner());
    if doomed.len() >= MAX_DOOMED {
        doomed.remove(0);
    }
    doomed.push((pid, started));
}

/// Spawns `command`, recording the child as one this process started on
/// purpose (never swept).
pub(crate) fn spawn_known(
    command: &mut tokio::process::Command,
) -> std::io::Result<tokio::process::Child> {
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    let child = command.spawn()?;
    if let Some(pid) = child.id() {
        remember(&mut known, pid as i32);
    }
    Ok(child)
}

fn remember(known: &mut Option<HashMap<i32, u64>>, pid: i32) {
    if let Some(started) = stat(pid).map(|s| s.start_time) {
        known.get_or_insert_with(HashMap::new).insert(pid, started);
    }
}

/// Records a child started some other way than by spawning it (a guardian
/// the template clones as this process's child): `start` makes it and
/// returns its pid, under the same lock as [`spawn_known`].
pub(crate) fn start_known(start: impl FnOnce() -> std::io::Result<i32>) -> std::io::Result<i32> {
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    let pid = start()?;
    remember(&mut known, pid);
    Ok(pid)
}

/// Makes this process the child subreaper and sweeps for leftovers until
/// `closed` turns true (or its pool is dropped); the last pool to stop turns
/// the subreaper off again. Must be called inside a tokio runtime.
pub(crate) fn start(closed: tokio_util::sync::CancellationToken) -> std::io::Result<()> {
    {
        let mut active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
        if *active == 0 {
            set_subreaper(true)?;
        }
        *active += 1;
    }
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(SWEEP_EVERY) => {}
                () = closed.cancelled() => break,
            }
            let _ = tokio::task::spawn_blocking(sweep).await;
        }
        // Leftovers of the last workers: killed now, reaped once they died.
        for _ in 0..10 {
            let handled = tokio::task::spawn_blocking(sweep).await.unwrap_or(0);
            if handled == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
        *active = active.saturating_sub(1);
        if *active == 0 {
            let _ = set_subreaper(false);
        }
    });
    Ok(())
}

fn set_subreaper(on: bool) -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_CHILD_SUBREAPER,
            libc::c_ulong::from(on),
            0,
            0,
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Kills every child that is not known (a leftover adopted from a worker's
/// tree) and reaps those that have died; returns how many it handled.
pub(crate) fn sweep() -> usize {
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    let known = known.get_or_insert_with(HashMap::new);
    let me = std::process::id() as i32;
    let children = children_of(me);
    // Known children that are gone (reaped by their owner) are forgotten.
    known.retain(|pid, started| {
        children
            .iter()
            .any(|c| c.pid == *pid && c.start_time == *started)
    });
    let mut doomed = DOOMED.lock().unwrap_or_else(|e| e.into_inner());
    // A doomed process that is gone (or whose pid was reused) is forgotten.
    doomed.retain(|(pid, started)| stat(*pid).is_some_and(|s| s.start_time == *started));
    let mut handled = 0;
    for child in children {
        if known.get(&child.pid) == Some(&child.start_time) {
            continue;
        }
        handled += 1;
        let pid = Pid::from_raw(child.pid);
        if child.state == 'Z' {
            let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
        } else {
            if doomed.contains(&(child.pid, child.start_time)) {
                tracing::debug!(pid = child.pid, "killing a worker adopted on its way out");
            } else if child.is_dying() {
                // Already dying as it was adopted (a worker whose guardian
                // ended first gets its parent-death signal): nothing a tool
                // left running.
                tracing::debug!(pid = child.pid, "killing a process adopted as it died");
            } else {
                tracing::warn!(
                    pid = child.pid,
                    "killing a process a worker left behind: {}",
                    child.command
                );
            }
            let _ = kill(pid, Signal::SIGKILL);
        }
    }
    handled
}
