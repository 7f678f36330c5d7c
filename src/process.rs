//! Processes toolpool started, as the kernel names them.
//!
//! A worker's own messages never say which process to signal: a tool can make
//! `os.getpid()` return anything, and inside a PID namespace a worker's pid is
//! local (the worker may be 1 there, and `killpg(1)` is `kill(-1)`: every
//! process of the user). The guardian's pid is what `spawn` returned; the
//! worker's is the guardian's child as `/proc` lists it, held through a pidfd
//! so that a reused pid is never signalled; a group is signalled through its
//! leader's pidfd where the kernel can (6.9+). [`ProcessId`] and
//! [`ProcessGroup`] cannot hold 0, 1 or a negative number, so no signal of
//! toolpool's can reach a process group it did not create, or every process.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

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

    fn signal(self, signal: Signal) -> nix::Result<()> {
        kill(Pid::from_raw(self.0), signal)
    }

    /// The process group this process leads (workers and guardians lead their own).
    fn group(self) -> ProcessGroup {
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
struct ProcessGroup(i32);

impl ProcessGroup {
    fn signal(self, signal: Signal) -> nix::Result<()> {
        killpg(Pid::from_raw(self.0), signal)
    }
}

/// A process held by a pidfd where the kernel has them (Linux 5.3+): a
/// signal through it never reaches a process that reused the pid.
#[derive(Debug, Clone)]
struct Held {
    pid: ProcessId,
    pidfd: Option<Arc<OwnedFd>>,
}

impl Held {
    fn open(pid: ProcessId) -> Held {
        Held {
            pid,
            pidfd: pidfd_open(pid).map(Arc::new),
        }
    }

    /// A process a scan of `/proc` found, held only if the pidfd opened
    /// after the scan names the same process (its start time unchanged): a
    /// pid reused in between is left alone.
    fn found(found: &crate::procfs::Stat) -> Option<Held> {
        let held = Held::open(ProcessId::new(found.pid)?);
        let same =
            crate::procfs::stat(found.pid).is_some_and(|now| now.start_time == found.start_time);
        same.then_some(held)
    }

    fn signal(&self, signal: Signal) {
        match &self.pidfd {
            Some(fd) => {
                // ESRCH: it is gone, and nothing else is reached.
                let _ = pidfd_send_signal(fd, signal, 0);
            }
            None => {
                let _ = self.pid.signal(signal);
            }
        }
    }

    /// Signals the process group this process leads (`group`, its own
    /// pid), through its pidfd (Linux 6.9's `PIDFD_SIGNAL_PROCESS_GROUP`):
    /// the kernel names the group by the process held, even once it is
    /// reaped, so a group id given out again is never reached. Older
    /// kernels, and no pidfd: `killpg(group)`, as before.
    fn signal_group(&self, signal: Signal, group: ProcessId) {
        if let Some(fd) = &self.pidfd {
            match pidfd_send_signal(fd, signal, libc::PIDFD_SIGNAL_PROCESS_GROUP) {
                Ok(()) => return,
                // Gone: nothing of its group is reached through it.
                Err(nix::errno::Errno::ESRCH) => return,
                // A kernel before 6.9: the flag is unknown.
                Err(_) => {}
            }
        }
        let _ = group.group().signal(signal);
    }
}

/// Signals the process group `group`, seen with members a moment ago:
/// through its leader's pidfd when the leader is there, else by `killpg`
/// (a group id cannot be given out again while the group has members).
fn signal_group_of(group: ProcessId, signal: Signal) {
    let leader = Held::open(group);
    // Checked after the pidfd was opened: it holds the leader itself.
    if crate::procfs::stat(group.raw()).is_some_and(|s| s.group == group.raw()) {
        leader.signal_group(signal, group);
    } else {
        let _ = group.group().signal(signal);
    }
}

/// `pidfd_send_signal(2)` with a null siginfo and `flags`.
fn pidfd_send_signal(fd: &OwnedFd, signal: Signal, flags: libc::c_uint) -> nix::Result<()> {
    // SAFETY: a raw syscall with a valid fd, a null siginfo and integer flags.
    let result = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            signal as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            flags,
        )
    };
    nix::errno::Errno::result(result).map(drop)
}

/// A worker's processes, and the one type that signals them: its guardian
/// (this process's child, held from its spawn) and the worker the guardian
/// forked (found through `/proc`, never through what the worker says).
/// Both are held by pidfds, so no signal of it reaches a reused pid; the
/// groups it signals are the ones they lead (`setsid`), never 0 or 1.
/// Not `Clone`: the worker's actor is its one owner, and the one killer.
#[derive(Debug)]
pub(crate) struct WorkerProcesses {
    guardian: Held,
    /// `None` until the worker is found, and for a guardian that forked no
    /// worker (then the guardian itself speaks the protocol).
    worker: Option<Held>,
}

impl WorkerProcesses {
    /// Holds `guardian`, which must be this process's child not yet reaped
    /// (so its pid cannot have been reused).
    pub(crate) fn of_guardian(guardian: ProcessId) -> WorkerProcesses {
        WorkerProcesses {
            guardian: Held::open(guardian),
            worker: None,
        }
    }

    /// Finds the guardian's worker: its oldest child, which it forked first.
    /// `false` when it has none.
    pub(crate) fn find_worker(&mut self) -> bool {
        self.worker = self.look_for_worker();
        self.worker.is_some()
    }

    /// The guardian's oldest child as the kernel lists it now, held.
    fn look_for_worker(&self) -> Option<Held> {
        let guardian = self.guardian.pid;
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
        children
            .iter()
            .min_by_key(|c| c.start_time)
            .and_then(|oldest| ProcessId::new(oldest.pid))
            .map(Held::open)
            // Opened after the pid was read: check it still names the guardian's child.
            .filter(|held| crate::procfs::parent_of(held.pid.raw()) == Some(guardian.raw()))
    }

    /// The worker's pid (the guardian's when the guardian is the worker).
    pub(crate) fn pid(&self) -> i32 {
        self.worker.as_ref().unwrap_or(&self.guardian).pid.raw()
    }

    /// Whether the worker runs in a PID namespace of its own (as its init).
    pub(crate) fn own_pid_namespace(&self) -> bool {
        let Some(worker) = &self.worker else {
            return false;
        };
        let ns = |pid: ProcessId| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
        match (ns(worker.pid), ns(self.guardian.pid)) {
            (Some(worker), Some(guardian)) => worker != guardian,
            _ => false,
        }
    }

    /// SIGKILL to the worker and its group at once (to the guardian's group
    /// when the guardian is the worker). In a PID namespace that ends every
    /// process of the call; otherwise the guardian, the tree's subreaper,
    /// kills what left the group when it sees the worker gone. A worker not
    /// yet identified (killed during its start) is looked for first: killed
    /// with its guardian's group alone, it would be orphaned, alive, into
    /// the supervisor's reaper as if a tool had left it.
    pub(crate) fn kill(&self) {
        let worker = self.worker.clone().or_else(|| self.look_for_worker());
        match &worker {
            Some(worker) => {
                // Its guardian may end first and leave it to this process's
                // reaper for a moment: it is going, not left behind.
                crate::reaper::expect_death(worker.pid.raw());
                worker.signal(Signal::SIGKILL);
                worker.signal_group(Signal::SIGKILL, worker.pid);
            }
            None => {
                self.guardian
                    .signal_group(Signal::SIGKILL, self.guardian.pid);
            }
        }
    }

    /// SIGKILL to the worker alone (once its guardian has exited, nothing of
    /// the tree but the worker can be left).
    pub(crate) fn kill_worker(&self) {
        if let Some(worker) = &self.worker {
            worker.signal(Signal::SIGKILL);
        }
    }

    /// The backstop: every descendant of the guardian, its group, itself.
    pub(crate) fn kill_tree(&self) {
        kill_descendants(self.guardian.pid);
        self.guardian
            .signal_group(Signal::SIGKILL, self.guardian.pid);
        self.guardian.signal(Signal::SIGKILL);
    }

    /// Stops (`true`) or resumes every process of the worker's tree: the
    /// worker, its group, and every other descendant of the guardian.
    ///
    /// The guardian too: stopped, it reaps nothing, so a process of the
    /// tree that exits stays in the table as a zombie, which
    /// [`WorkerProcesses::stop_settled`] relies on. And the group of each
    /// process found: one signal stops every member of a group at once,
    /// also a chain of processes that hop (fork a successor and exit)
    /// faster than a scan finds them, as long as they keep their group.
    pub(crate) fn pause(&self, stop: bool) {
        let signal = if stop {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        };
        self.guardian.signal(signal);
        if let Some(worker) = &self.worker {
            worker.signal(signal);
            worker.signal_group(signal, worker.pid);
        }
        // Never the guardian's group nor the supervisor's own.
        let guardian_group = crate::procfs::stat(self.guardian.pid.raw()).map(|g| g.group);
        let own_group = nix::unistd::getpgrp().as_raw();
        let mut groups = Vec::new();
        for found in crate::procfs::descendants_of(self.guardian.pid.raw()) {
            if let Some(held) = Held::found(&found) {
                held.signal(signal);
            }
            if Some(found.group) != guardian_group
                && found.group != own_group
                && !groups.contains(&found.group)
            {
                groups.push(found.group);
            }
        }
        for group in groups.into_iter().filter_map(ProcessId::new) {
            signal_group_of(group, signal);
        }
    }

    /// Stops every process of the worker's tree and makes sure of it: scans
    /// of `/proc` repeat, each stopping what it finds, until two in a row
    /// find the same processes in the same states, all stopped (or dead).
    /// A process stopped in the first cannot have forked since, and one
    /// that ran, forked, exited or was born between the two changes the
    /// second: so nothing of the tree runs that the scans did not see
    /// stopped (a process forked after one scan, by one not yet stopped,
    /// is found by the next). `false` when the tree has not settled after
    /// [`STOP_ROUNDS`] scans (a tool that forks faster than it is stopped,
    /// a process in an uninterruptible wait): the caller resumes them and
    /// does not count on it.
    pub(crate) async fn stop_settled(&self) -> bool {
        let mut previous: Option<Vec<(i32, char)>> = None;
        for round in 0..STOP_ROUNDS {
            self.pause(true);
            // Time for the signals to be taken: a stopped process's state is
            // `T` only once it has run to the point of stopping.
            tokio::time::sleep(STOP_SETTLE * (round + 1)).await;
            let mut tree: Vec<(i32, char)> = crate::procfs::descendants_of(self.guardian.pid.raw())
                .into_iter()
                .map(|found| (found.pid, found.state))
                .collect();
            tree.sort_unstable();
            let stopped = tree
                .iter()
                .all(|&(_, state)| matches!(state, 'T' | 't' | 'Z' | 'X' | 'x'));
            if stopped && previous.as_ref() == Some(&tree) {
                return true;
            }
            previous = stopped.then_some(tree);
        }
        false
    }

    /// Asks the worker for a `faulthandler` stack dump (SIGUSR1); `false`
    /// when there is no worker to ask.
    pub(crate) fn ask_for_stack_dump(&self) -> bool {
        match &self.worker {
            Some(worker) => {
                worker.signal(Signal::SIGUSR1);
                true
            }
            None => false,
        }
    }

    /// Asks the worker's tool to clean up: the shim raises `TimeoutError` in
    /// its main thread (SIGUSR2). Nothing else depends on it being heard.
    pub(crate) fn ask_to_clean_up(&self) {
        if let Some(worker) = &self.worker {
            worker.signal(Signal::SIGUSR2);
        }
    }

    /// Asks the guardian to kill what its tree left and exit (SIGTERM), and
    /// resumes it in case a tool stopped it.
    pub(crate) fn ask_guardian_to_end(&self) {
        self.guardian.signal(Signal::SIGTERM);
        self.guardian.signal(Signal::SIGCONT);
    }
}

/// How many scans [`WorkerProcesses::stop_settled`] makes before it gives
/// up, and the wait after the first (the n-th waits n times as long: 210
/// ms in all).
const STOP_ROUNDS: u32 = 20;
const STOP_SETTLE: Duration = Duration::from_millis(1);

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
fn kill_descendants(root: ProcessId) -> usize {
    let mut signalled = 0;
    for _ in 0..20 {
        let found = crate::procfs::descendants_of(root.raw());
        let alive: Vec<crate::procfs::Stat> =
            found.into_iter().filter(|s| s.state != 'Z').collect();
        if alive.is_empty() {
            break;
        }
        for held in alive.iter().filter_map(Held::found) {
            held.signal(Signal::SIGKILL);
            signalled += 1;
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

    /// A process held, then killed and reaped; its pid, and with it its
    /// group's id, given by the kernel to a new group leader: nothing sent
    /// through what held the first reaches the second. The pid is reused
    /// deterministically by running `reused_pid_inner` as PID 1 of a PID
    /// namespace of its own (`unshare`), where it sets the next pid.
    #[test]
    fn a_signal_never_reaches_a_reused_pid() {
        let exe = std::env::current_exe().expect("the test binary");
        let run = std::process::Command::new("unshare")
            .args([
                "--user",
                "--map-root-user",
                "--pid",
                "--fork",
                "--mount-proc",
            ])
            .arg(exe)
            .args(["process::tests::reused_pid_inner", "--exact", "--ignored"])
            .args(["--nocapture", "--test-threads", "1"])
            .output()
            .expect("unshare (util-linux) runs");
        let out = String::from_utf8_lossy(&run.stdout);
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{out}\n{err}");
        assert!(out.contains("is alive"), "{out}\n{err}");
    }

    #[test]
    #[ignore = "run by a_signal_never_reaches_a_reused_pid, as PID 1 of a namespace"]
    fn reused_pid_inner() {
        if std::process::id() != 1 {
            eprintln!("not PID 1 of a namespace of its own: nothing to check");
            return;
        }
        let leader = || {
            use std::os::unix::process::CommandExt;
            std::process::Command::new("sleep")
                .arg("60")
                .process_group(0)
                .spawn()
                .expect("sleep starts")
        };
        let mut first = leader();
        let pid = ProcessId::from_u32(first.id()).expect("a pid above 1");
        let held = Held::open(pid);
        assert!(held.pidfd.is_some(), "no pidfd");
        held.signal(Signal::SIGKILL);
        first.wait().expect("reaped");
        // The next pid the namespace gives out is the first's.
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid.raw() - 1).to_string())
            .expect("ns_last_pid, as root of the namespace");
        let mut second = leader();
        assert_eq!(second.id(), pid.raw() as u32, "the pid was not reused");
        held.signal(Signal::SIGKILL);
        held.signal_group(Signal::SIGSTOP, pid);
        held.signal_group(Signal::SIGKILL, pid);
        std::thread::sleep(Duration::from_millis(100));
        let state = crate::procfs::stat(pid.raw()).map(|s| s.state);
        assert_eq!(state, Some('S'), "the new leader was signalled");
        println!("the new leader of pid {pid} is alive");
        let _ = second.kill();
        let _ = second.wait();
    }
}
