//! What a call left behind in its worker after it answered, against the
//! fingerprint the worker had while idle: threads (by thread id, not by
//! count), processes below its guardian besides the worker, POSIX timers
//! (`/proc/<worker>/timers`), and pending, blocked and caught signals
//! (`/proc/<worker>/status`). A worker that is not as it was is never
//! trusted with another call (a thread that writes into the frame pipe 0.3 s
//! later, a forked child that returned into the shim and reads the request
//! pipe, a timer that raises in the next call): the call gets its answer,
//! and the worker is killed.
//!
//! Read from the kernel, never from the worker, through files opened while
//! the worker was identified and kept open (they stay bound to that process
//! even if its pid is reused), after every call, with no counter deciding
//! how much: the thread ids are listed, and whether a process is left is
//! each thread's `children` in `/proc` (the worker's, and the guardian's
//! besides the worker). Every process below the guardian has a parent
//! there (an orphan is adopted by the worker, the init of its PID
//! namespace, or by the guardian, the subreaper), so none is left when
//! those are empty; only when one is not is `/proc` scanned, to name them.
//! A kernel without `children` files is scanned every time. Interval timers
//! (`setitimer`, `alarm`) have no /proc file: the shim disarms them after
//! every call, and a handler they would run is a caught signal here.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Mutex;

use nix::dir::Dir;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use crate::outcome::LeftBehind;

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

/// The worker as it was, idle.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    /// Thread ids, sorted.
    threads: Vec<i32>,
    signals: Signals,
    /// `/proc/<worker>/timers` as it reads.
    timers: Vec<u8>,
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
    /// The `children` of each thread of the idle worker, by thread id.
    children: Vec<(i32, File)>,
    /// The worker as it was, idle.
    idle: Option<Fingerprint>,
}

impl Leftovers {
    /// Watches `worker` (below `guardian`; the same pid when the guardian
    /// is the worker), idle now: how it is now is how it must stay.
    pub(super) fn new(worker: i32, guardian: i32) -> Leftovers {
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
            idle: None,
        };
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
            .filter_map(|&tid| {
                let file = File::open(format!("/proc/self/fd/{dir}/{tid}/children")).ok()?;
                Some((tid, file))
            })
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
        if self
            .children
            .iter()
            .any(|(_, file)| has_children(file, None))
        {
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
        Some(Fingerprint {
            threads,
            signals,
            timers,
        })
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
mod tests {
    use super::*;

    /// A python3 that plays the worker, alone in its process (the test
    /// binary's own threads come and go with the other tests): it does
    /// what it is told on stdin, and says when it has.
    struct PlayedWorker {
        child: std::process::Child,
        lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    }

    impl PlayedWorker {
        fn start() -> PlayedWorker {
            use std::io::BufRead;
            const SCRIPT: &str = "import ctypes, os, signal, subprocess, sys, threading\n\
                stop = threading.Event()\n\
                placeholder = threading.Event()\n\
                threading.Thread(target=placeholder.wait).start()\n\
                print('idle', flush=True)\n\
                for line in sys.stdin:\n\
                \x20   if line == 'start\\n':\n\
                \x20       t = threading.Thread(target=stop.wait); t.start()\n\
                \x20   elif line == 'stop\\n':\n\
                \x20       stop.set(); t.join()\n\
                \x20   elif line == 'brief\\n':\n\
                \x20       b = threading.Thread(target=lambda: None); b.start(); b.join()\n\
                \x20   elif line == 'swap\\n':\n\
                \x20       t = threading.Thread(target=stop.wait); t.start(); placeholder.set()\n\
                \x20   elif line == 'handler\\n':\n\
                \x20       signal.signal(signal.SIGALRM, lambda *a: None)\n\
                \x20   elif line == 'pending\\n':\n\
                \x20       signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2]); signal.pthread_kill(threading.get_ident(), signal.SIGUSR2)\n\
                \x20   elif line == 'timer\\n':\n\
                \x20       timer = ctypes.c_void_p(); ctypes.CDLL(None, use_errno=True).timer_create(1, None, ctypes.byref(timer))\n\
                \x20   elif line == 'child\\n':\n\
                \x20       c = subprocess.Popen(['sleep', '30'])\n\
                \x20   elif line == 'reap\\n':\n\
                \x20       c.kill(); c.wait()\n\
                \x20   elif line == 'ran\\n':\n\
                \x20       subprocess.run(['true'])\n\
                \x20   print('done', flush=True)\n";
            let mut child = std::process::Command::new("python3")
                .args(["-c", SCRIPT])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("python3 runs");
            let stdout = child.stdout.take().expect("piped");
            let mut worker = PlayedWorker {
                child,
                lines: std::io::BufReader::new(stdout).lines(),
            };
            worker.expect("idle");
            worker
        }

        fn pid(&self) -> i32 {
            self.child.id() as i32
        }

        fn tell(&mut self, what: &str) {
            use std::io::Write;
            let stdin = self.child.stdin.as_mut().expect("piped");
            writeln!(stdin, "{what}").expect("the played worker reads");
            self.expect("done");
        }

        fn expect(&mut self, line: &str) {
            let got = self.lines.next().expect("a line").expect("text");
            assert_eq!(got, line);
        }

        /// What a call that does `what` leaves behind, seen from outside.
        async fn after(&mut self, what: &str) -> Option<LeftBehind> {
            let mut leftovers = Leftovers::new(self.pid(), self.pid());
            self.tell(what);
            leftovers.after_reply().await
        }
    }

    /// The last pid the kernel gave out: the last field of /proc/loadavg.
    fn last_pid() -> String {
        let loadavg = std::fs::read_to_string("/proc/loadavg").expect("/proc/loadavg");
        loadavg
            .split_whitespace()
            .last()
            .expect("a field")
            .to_string()
    }

    impl PlayedWorker {
        /// As [`after`](Self::after), with the kernel's last pid put back
        /// where it was before the call, as `pid_max` forks would put it: a
        /// counter that came round again must hide nothing.
        async fn after_with_pids_wrapped(&mut self, what: &str) -> Option<LeftBehind> {
            let mut leftovers = Leftovers::new(self.pid(), self.pid());
            let before = last_pid();
            self.tell(what);
            std::fs::write("/proc/sys/kernel/ns_last_pid", before)
                .expect("ns_last_pid, as root of the namespace");
            leftovers.after_reply().await
        }
    }

    impl Drop for PlayedWorker {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn cause(left: &Option<LeftBehind>) -> Option<&'static str> {
        left.as_ref().map(|l| l.cause)
    }

    #[tokio::test]
    async fn a_thread_left_running_is_found_and_one_joined_is_not() {
        let mut worker = PlayedWorker::start();
        let found = worker.after("start").await;
        assert_eq!(
            found.map(|l| l.what).as_deref(),
            Some("1 thread still running")
        );
        worker.tell("stop");
        assert_eq!(worker.after("brief").await, None);
    }

    #[tokio::test]
    async fn a_thread_in_place_of_one_that_ended_is_found() {
        // The count comes back to the idle figure: the thread ids do not.
        let mut worker = PlayedWorker::start();
        assert_eq!(cause(&worker.after("swap").await), Some("threads"));
    }

    #[tokio::test]
    async fn what_is_left_is_found_when_the_last_pid_came_round_again() {
        let mut worker = PlayedWorker::start();
        let found = worker.after_with_pids_wrapped("child").await;
        worker.tell("reap");
        let found = found.map(|l| l.what).unwrap_or_default();
        assert!(found.contains("sleep"), "{found}");
        let mut worker = PlayedWorker::start();
        assert_eq!(
            cause(&worker.after_with_pids_wrapped("swap").await),
            Some("threads")
        );
    }

    #[tokio::test]
    async fn a_child_that_ended_leaves_nothing() {
        let mut worker = PlayedWorker::start();
        assert_eq!(worker.after("ran").await, None);
    }

    #[tokio::test]
    async fn a_signal_handler_a_pending_signal_and_a_posix_timer_are_found() {
        let mut worker = PlayedWorker::start();
        let handler = worker.after("handler").await;
        assert_eq!(cause(&handler), Some("signal_handlers"));
        assert!(handler.unwrap().what.contains("SIGALRM"));
        let pending = worker.after("pending").await;
        assert_eq!(cause(&pending), Some("pending_signals"));
        assert!(pending.unwrap().what.contains("SIGUSR2"));
        assert_eq!(cause(&worker.after("timer").await), Some("posix_timers"));
        // What it is now is its idle state from here on.
        assert_eq!(worker.after("brief").await, None);
    }

    #[tokio::test]
    async fn a_worker_reaped_is_gone_not_idle() {
        let mut worker = PlayedWorker::start();
        let mut leftovers = Leftovers::new(worker.pid(), worker.pid());
        assert_eq!(leftovers.threads().map(|t| t.len()), Some(2));
        worker
            .child
            .kill()
            .expect("the played worker is ours to kill");
        worker.child.wait().expect("and to reap");
        assert_eq!(cause(&leftovers.after_reply().await), Some("unreadable"));
    }

    #[tokio::test]
    async fn a_child_process_left_running_is_found() {
        let me = std::process::id() as i32;
        let leftovers = Leftovers::new(me, me);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let found = leftovers.processes_left().await;
        child.kill().unwrap();
        child.wait().unwrap();
        let found = found.map(|l| l.what).unwrap_or_default();
        assert!(found.contains("sleep"), "{found}");
    }

    #[test]
    fn the_signal_sets_are_read_from_status() {
        let status = b"Name:\tpython3\nSigQ:\t0/1\nSigPnd:\t0000000000000000\n\
            ShdPnd:\t0000000000000800\nSigBlk:\t0000000000000000\nSigIgn:\t0000000001001000\n\
            SigCgt:\t0000000180004002\n";
        let signals = parse_signals(status).unwrap();
        assert_eq!(signals.shared_pending, 0x800);
        assert_eq!(signals.caught, 0x1_8000_4002);
        assert_eq!(signal_names(0x800), "SIGUSR2");
        assert_eq!(parse_signals(b"SigPnd:\t0\n"), None);
    }
}
