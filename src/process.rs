//! Processes toolpool started, as the kernel names them.
//!
//! A worker's own messages never say which process to signal: a tool can make
//! `os.getpid()` return anything, and inside a PID namespace a worker's pid is
//! local (the worker may be 1 there, and `killpg(1)` is `kill(-1)`: every
//! process of the user). The guardian's pid is what `spawn` returned; the
//! worker's is the guardian's child as `/proc` lists it, held through a pidfd
//! so that a reused pid is never signalled. [`ProcessId`] and
//! [`ProcessGroup`] cannot hold 0, 1 or a negative number, so no signal of
//! toolpool's can reach a process group it did not create, or every process.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// A process id above 1 (never "my group", "every process" or init).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessId(i32);

impl ProcessId {
    pub fn new(raw: i32) -> Option<ProcessId> {
        (raw > 1).then_some(ProcessId(raw))
    }

    pub fn from_u32(raw: u32) -> Option<ProcessId> {
        i32::try_from(raw).ok().and_then(ProcessId::new)
    }

    pub fn raw(self) -> i32 {
        self.0
    }

    pub fn signal(self, signal: Signal) -> nix::Result<()> {
        kill(Pid::from_raw(self.0), signal)
    }

    /// The process group this process leads (workers and guardians lead their own).
    pub fn group(self) -> ProcessGroup {
        ProcessGroup(self.0)
    }
}

impl std::fmt::Display for ProcessId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A process group id above 1: `killpg` of it never means "every process".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessGroup(i32);

impl ProcessGroup {
    pub fn signal(self, signal: Signal) -> nix::Result<()> {
        killpg(Pid::from_raw(self.0), signal)
    }
}

/// A worker process found through its guardian, held by a pidfd where the
/// kernel has them (Linux 5.3+), so signals never reach a reused pid.
#[derive(Debug, Clone)]
pub struct Tracked {
    pub pid: ProcessId,
    pidfd: Option<Arc<OwnedFd>>,
}

impl Tracked {
    /// The guardian's worker: its oldest child, which it forked first.
    pub fn child_of(guardian: ProcessId) -> Option<Tracked> {
        // The guardian is single-threaded: its main thread's children are
        // all of them. Without that file (CONFIG_PROC_CHILDREN), scan /proc.
        let listed = std::fs::read_to_string(format!("/proc/{guardian}/task/{guardian}/children"));
        let children: Vec<crate::procfs::Stat> = match listed {
            Ok(text) => text
                .split_whitespace()
                .filter_map(|pid| crate::procfs::stat(pid.parse().ok()?))
                .collect(),
            Err(_) => crate::procfs::children_of(guardian.raw()),
        };
        let oldest = children.iter().min_by_key(|c| c.start_time)?;
        let pid = ProcessId::new(oldest.pid)?;
        let pidfd = pidfd_open(pid);
        // Opened after the pid was read: check it still names the guardian's child.
        if crate::procfs::parent_of(pid.raw()) != Some(guardian.raw()) {
            return None;
        }
        Some(Tracked {
            pid,
            pidfd: pidfd.map(Arc::new),
        })
    }

    pub fn signal(&self, signal: Signal) {
        match &self.pidfd {
            Some(fd) => {
                // SAFETY: a raw syscall with a valid fd and a null siginfo.
                unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        fd.as_raw_fd(),
                        signal as libc::c_int,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    );
                }
            }
            None => {
                let _ = self.pid.signal(signal);
            }
        }
    }

    /// Whether the worker runs in a PID namespace of its own (as its init).
    pub fn own_pid_namespace(&self, guardian: ProcessId) -> bool {
        let ns = |pid: ProcessId| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
        match (ns(self.pid), ns(guardian)) {
            (Some(worker), Some(guardian)) => worker != guardian,
            _ => false,
        }
    }
}

/// A pidfd on `pid` (Linux 5.3+), `None` where the kernel has none or `pid` is gone.
pub(crate) fn pidfd_open(pid: ProcessId) -> Option<OwnedFd> {
    // SAFETY: a raw syscall with integer arguments; a non-negative result is a new fd we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.raw(), 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the kernel just returned this fd, owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// How the processes of a call are killed, as `toolpool doctor` and the
/// start-up log name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KillMechanism {
    /// The worker is init of its own PID namespace: when it is killed the
    /// kernel kills every process of the namespace, whatever their group or
    /// session.
    PidNamespace,
    /// No PID namespace could be made: the worker's group, then every
    /// descendant of its guardian (the subreaper of the tree), are killed.
    ProcessTree,
}

impl std::fmt::Display for KillMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KillMechanism::PidNamespace => "pid-namespace",
            KillMechanism::ProcessTree => "process-tree",
        })
    }
}

/// Kills every descendant of `root` (not `root` itself), until none is left
/// or a few rounds passed (a tree that forks as fast as it is killed);
/// returns how many processes were signalled.
pub fn kill_descendants(root: ProcessId) -> usize {
    let mut signalled = 0;
    for _ in 0..20 {
        let found = crate::procfs::descendants_of(root.raw());
        let alive: Vec<i32> = found
            .into_iter()
            .filter(|s| s.state != 'Z')
            .map(|s| s.pid)
            .collect();
        if alive.is_empty() {
            break;
        }
        for pid in alive {
            if let Some(pid) = ProcessId::new(pid) {
                let _ = pid.signal(Signal::SIGKILL);
                signalled += 1;
            }
        }
    }
    signalled
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_mean_more_than_one_process_cannot_be_made() {
        for raw in [-5, -1, 0, 1] {
            assert_eq!(ProcessId::new(raw), None, "{raw}");
        }
        assert_eq!(ProcessId::from_u32(u32::MAX), None);
        assert_eq!(ProcessId::new(2).map(ProcessId::raw), Some(2));
    }
}
