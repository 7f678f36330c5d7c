//! What a call left behind in its worker after it answered, against the
//! fingerprint the worker had while idle: threads (by thread id, not by
//! count), processes below its guardian besides the worker, POSIX timers
//! (`/proc/<worker>/timers`), pending, blocked and caught signals
//! (`/proc/<worker>/status`), and its descriptors of the protocol's pipes.
//! A worker that is not as it was is never trusted with another call (a
//! thread that writes into the frame pipe 0.3 s later, a forked child that
//! returned into the shim and reads the request pipe, a timer that raises
//! in the next call, a pipe of the tool's own in place of the request
//! pipe): the call gets its answer, and the worker is killed.
//!
//! Read from the kernel, never from the worker, through files opened while
//! the worker was identified and kept open (they stay bound to that process
//! even if its pid is reused), in full after every call: no counter decides
//! how much is read.
//!
//! - Threads: the `task` directory listed again.
//! - Processes: each thread's `children` (the worker's, and the guardian's
//!   besides the worker). Every process below the guardian has a parent
//!   there (an orphan is adopted by the worker, init of its PID namespace,
//!   or by the guardian, the subreaper), so none is left when those are
//!   empty; only when one is not is `/proc` scanned, to name them. A kernel
//!   without `children` files is scanned every time.
//! - Descriptors: the worker's ends of the request, frame and dump pipes,
//!   found among its descriptors while it is idle by the pipes' device and
//!   inode at this end, must still be those pipes.
//! - Interval timers (`setitimer`, `alarm`) have no /proc file: the shim
//!   disarms them after every call, and a handler they would run is a
//!   caught signal here.

use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use std::time::Duration;

use nix::dir::Dir;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::outcome::LeftBehind;

/// Whether this kernel lists each thread's children in `/proc` (without
/// those lists a call's leftover processes are looked for by a scan of
/// `/proc` after every call).
pub(crate) fn kernel_lists_children() -> bool {
    let tid = nix::unistd::gettid();
    std::path::Path::new(&format!("/proc/self/task/{tid}/children")).exists()
}

/// How often, and how far apart, a thread the idle worker did not have is
/// looked for again: a thread the tool joined may take a moment to leave
/// the kernel's list after its Python side ended.
const RECHECKS: u32 = 5;
const RECHECK_EVERY: Duration = Duration::from_millis(1);

/// The worker's signal sets, from `/proc/<worker>/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Signals {
    /// `SigPnd` and `ShdPnd`: pending for the thread, and for the process.
    pending: u64,
    shared_pending: u64,
    /// `SigBlk`: blocked (the main thread's mask).
    blocked: u64,
    /// `SigCgt`: caught, i.e. with a handler.
    caught: u64,
}

/// A file's identity: its device and inode (a pipe's are the same at both
/// ends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileId {
    device: u64,
    inode: u64,
}

impl FileId {
    /// The file `fd` refers to.
    pub(super) fn of(fd: BorrowedFd<'_>) -> Option<FileId> {
        nix::sys::stat::fstat(fd).ok().map(FileId::from)
    }
}

impl From<nix::sys::stat::FileStat> for FileId {
    fn from(stat: nix::sys::stat::FileStat) -> FileId {
        FileId {
            device: stat.st_dev,
            inode: stat.st_ino,
        }
    }
}

/// The worker as it was, idle.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    /// Thread ids, sorted.
    threads: Vec<i32>,
    signals: Signals,
    /// `/proc/<worker>/timers` as it reads.
    timers: Vec<u8>,
    /// What each of the worker's protocol descriptors refers to (`None`:
    /// closed), in the order of [`Leftovers::protocol_fds`].
    protocol: Vec<Option<FileId>>,
}

pub(super) struct Leftovers {
    worker: i32,
    guardian: i32,
    /// `/proc/<worker>/task`, `status` and `timers`, open for as long as the
    /// worker lives (the directory listed again through its descriptor; in
    /// a mutex only because a directory stream is not `Sync`, and the actor
    /// is borrowed across awaits).
    task_dir: Option<Mutex<Dir>>,
    status: Option<File>,
    timers: Option<File>,
    /// The guardian's `children` (`None` when the guardian is the worker).
    guardian_children: Option<File>,
    /// The `children` of each thread of the idle worker.
    children: Vec<File>,
    /// `/proc/<worker>/fd`, open for as long as the worker lives, and the
    /// descriptors in it that were the protocol's pipes while it was idle.
    fd_dir: Option<File>,
    protocol_fds: Vec<String>,
    /// The worker as it was, idle.
    idle: Option<Fingerprint>,
}

impl Leftovers {
    /// Watches `worker` (below `guardian`; the same pid when the guardian
    /// is the worker), idle now: how it is now is how it must stay. `pipes`:
    /// the protocol's pipes, as this end holds them.
    pub(super) fn new(worker: i32, guardian: i32, pipes: &[FileId]) -> Leftovers {
        let open = |name: &str| File::open(format!("/proc/{worker}/{name}")).ok();
        let mut leftovers = Leftovers {
            worker,
            guardian,
            task_dir: Dir::open(
                format!("/proc/{worker}/task").as_str(),
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .ok()
            .map(Mutex::new),
            status: open("status"),
            timers: open("timers"),
            guardian_children: (guardian != worker)
                .then(|| File::open(format!("/proc/{guardian}/task/{guardian}/children")).ok())
                .flatten(),
            children: Vec::new(),
            fd_dir: open("fd"),
            protocol_fds: Vec::new(),
            idle: None,
        };
        leftovers.protocol_fds = leftovers.descriptors_of(pipes);
        leftovers.idle = leftovers.fingerprint();
        leftovers.open_children();
        leftovers
    }

    /// After the call's reply: what it left behind, or `None`.
    pub(super) async fn after_reply(&mut self) -> Option<LeftBehind> {
        let Some(idle) = self.idle.clone() else {
            return Some(LeftBehind::new("unreadable", "a state that cannot be read"));
        };
        let mut now = self.fingerprint();
        for _ in 0..RECHECKS {
            match &now {
                Some(seen) if new_threads(&idle, seen) == 0 => break,
                None => break,
                Some(_) => {}
            }
            tokio::time::sleep(RECHECK_EVERY).await;
            now = self.fingerprint();
        }
        let Some(now) = now else {
            return Some(LeftBehind::new("unreadable", "a worker that is gone"));
        };
        if let Some(left) = compare(&idle, &now) {
            return Some(left);
        }
        // Threads of the idle worker that ended are forgotten: a thread
        // that takes one's place later is a new one.
        let threads_changed = now.threads != idle.threads;
        self.idle = Some(now);
        if threads_changed {
            self.open_children();
        }
        if !self.may_have_children() {
            return None;
        }
        self.processes_left().await
    }

    /// Opens the `children` of each thread of the idle worker, through the
    /// `task` directory kept open (bound to the worker, whatever has its pid
    /// now).
    fn open_children(&mut self) {
        let (Some(dir), Some(idle)) = (self.task_dir.as_ref(), self.idle.as_ref()) else {
            self.children.clear();
            return;
        };
        let dir = dir.lock().unwrap_or_else(|e| e.into_inner()).as_raw_fd();
        self.children = idle
            .threads
            .iter()
            .filter_map(|tid| File::open(format!("/proc/self/fd/{dir}/{tid}/children")).ok())
            .collect();
    }

    /// Whether a process other than the worker may be below the guardian:
    /// a thread of the worker, or the guardian, has a child (besides the
    /// worker), or that cannot be read.
    fn may_have_children(&self) -> bool {
        let Some(idle) = self.idle.as_ref() else {
            return true;
        };
        if self.children.len() != idle.threads.len() {
            return true;
        }
        let has_children = |file: &File, but: Option<i32>| match read_again(file) {
            None => true,
            Some(text) => std::str::from_utf8(&text).map_or(true, |text| {
                text.split_whitespace()
                    .any(|pid| pid.parse::<i32>().ok() != but)
            }),
        };
        if self.children.iter().any(|file| has_children(file, None)) {
            return true;
        }
        match (&self.guardian_children, self.guardian != self.worker) {
            (Some(file), true) => has_children(file, Some(self.worker)),
            (None, true) => true,
            (_, false) => false,
        }
    }

    /// The processes below the guardian besides the worker.
    async fn processes_left(&self) -> Option<LeftBehind> {
        let mut processes = self.processes();
        for _ in 0..RECHECKS {
            if processes.is_empty() {
                return None;
            }
            tokio::time::sleep(RECHECK_EVERY).await;
            processes = self.processes();
        }
        if processes.is_empty() {
            return None;
        }
        let plural = if processes.len() == 1 { "" } else { "es" };
        Some(LeftBehind::new(
            "processes",
            format!(
                "{} process{plural} still running ({})",
                processes.len(),
                processes.join(", ")
            ),
        ))
    }

    /// The worker now; `None` once it is reaped (no thread left) or its
    /// files cannot be read.
    fn fingerprint(&self) -> Option<Fingerprint> {
        let threads = self.threads()?;
        let signals = parse_signals(&read_again(self.status.as_ref()?)?)?;
        // A kernel without the file (or that does not let it be read) has
        // no POSIX timers to show.
        let timers = self
            .timers
            .as_ref()
            .and_then(read_again)
            .unwrap_or_default();
        let protocol = self
            .protocol_fds
            .iter()
            .map(|fd| self.file_at(fd))
            .collect();
        Some(Fingerprint {
            threads,
            signals,
            timers,
            protocol,
        })
    }

    /// What the worker's descriptor `fd` refers to; `None` when it is closed
    /// (or cannot be read).
    fn file_at(&self, fd: &str) -> Option<FileId> {
        let dir = self.fd_dir.as_ref()?;
        nix::sys::stat::fstatat(dir, fd, nix::fcntl::AtFlags::empty())
            .ok()
            .map(FileId::from)
    }

    /// The worker's descriptors that refer to one of `pipes`.
    fn descriptors_of(&self, pipes: &[FileId]) -> Vec<String> {
        let Some(dir) = self.fd_dir.as_ref() else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())) else {
            return Vec::new();
        };
        let mut fds: Vec<String> = entries
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|fd| self.file_at(fd).is_some_and(|file| pipes.contains(&file)))
            .collect();
        fds.sort();
        fds
    }

    /// The worker's thread ids, sorted; `None` when it has none (reaped).
    fn threads(&self) -> Option<Vec<i32>> {
        // The directory kept open, read again from its start: the very
        // directory the descriptor holds, whatever has the pid now.
        let mut dir = self
            .task_dir
            .as_ref()?
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut threads: Vec<i32> = dir
            .iter()
            .filter_map(|entry| entry.ok()?.file_name().to_str().ok()?.parse().ok())
            .collect();
        threads.sort_unstable();
        (!threads.is_empty()).then_some(threads)
    }

    /// The guardian's descendants other than the worker, as `pid (name)`.
    fn processes(&self) -> Vec<String> {
        crate::procfs::descendants_of(self.guardian)
            .into_iter()
            .filter(|found| found.pid != self.worker)
            .map(|found| format!("{} ({})", found.pid, found.command))
            .collect()
    }
}

/// How many of `now`'s threads the idle worker did not have.
fn new_threads(idle: &Fingerprint, now: &Fingerprint) -> usize {
    now.threads
        .iter()
        .filter(|tid| idle.threads.binary_search(tid).is_err())
        .count()
}

/// What differs between the idle worker and the worker now, the first
/// thing found.
fn compare(idle: &Fingerprint, now: &Fingerprint) -> Option<LeftBehind> {
    let extra = new_threads(idle, now);
    if extra > 0 {
        let plural = if extra == 1 { "" } else { "s" };
        return Some(LeftBehind::new(
            "threads",
            format!("{extra} thread{plural} still running"),
        ));
    }
    let (was, is) = (idle.signals, now.signals);
    let pending = (is.pending | is.shared_pending) & !(was.pending | was.shared_pending);
    if pending != 0 {
        return Some(LeftBehind::new(
            "pending_signals",
            format!("a pending signal ({})", signal_names(pending)),
        ));
    }
    if is.blocked != was.blocked {
        return Some(LeftBehind::new(
            "blocked_signals",
            format!(
                "its blocked signals changed ({})",
                signal_names(is.blocked ^ was.blocked)
            ),
        ));
    }
    if is.caught != was.caught {
        return Some(LeftBehind::new(
            "signal_handlers",
            format!(
                "its signal handlers changed ({})",
                signal_names(is.caught ^ was.caught)
            ),
        ));
    }
    if now.timers != idle.timers {
        return Some(LeftBehind::new("posix_timers", "a POSIX timer"));
    }
    if now.protocol != idle.protocol {
        return Some(LeftBehind::new(
            "protocol_descriptors",
            "its descriptors of the protocol's pipes changed",
        ));
    }
    None
}

/// `SigPnd`, `ShdPnd`, `SigBlk` and `SigCgt` of a `/proc/<pid>/status` text.
fn parse_signals(status: &[u8]) -> Option<Signals> {
    let text = std::str::from_utf8(status).ok()?;
    let mut signals = Signals::default();
    let mut found = 0;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let field = match key {
            "SigPnd" => &mut signals.pending,
            "ShdPnd" => &mut signals.shared_pending,
            "SigBlk" => &mut signals.blocked,
            "SigCgt" => &mut signals.caught,
            _ => continue,
        };
        *field = u64::from_str_radix(value.trim(), 16).ok()?;
        found += 1;
    }
    (found == 4).then_some(signals)
}

/// The signals of a mask (bit N-1 is signal N), by name.
fn signal_names(mask: u64) -> String {
    (1..=64)
        .filter(|n| mask & (1u64 << (n - 1)) != 0)
        .map(|n| {
            nix::sys::signal::Signal::try_from(n)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| format!("signal {n}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A /proc file's bytes, read afresh from its start (up to 4 KiB: the
/// files read here are smaller).
fn read_again(file: &File) -> Option<Vec<u8>> {
    let mut buffer = vec![0u8; 4096];
    let read = file.read_at(&mut buffer, 0).ok()?;
    buffer.truncate(read);
    Some(buffer)
}

#[cfg(test)]
mod tests;
