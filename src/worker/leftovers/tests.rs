//! What a call leaves behind, seen from outside a python3 that plays the
//! worker.

use std::io::BufRead;

use super::*;

/// A python3 that plays the worker, alone in its process (the test
/// binary's own threads come and go with the other tests): it does
/// what it is told on stdin, and says when it has.
struct PlayedWorker {
    child: std::process::Child,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl PlayedWorker {
    fn start() -> PlayedWorker {
        const SCRIPT: &str = "import ctypes, os, signal, subprocess, sys, threading\n\
            stop = threading.Event()\n\
            placeholder = threading.Event()\n\
            keep = os.dup(1)\n\
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
            \x20   elif line == 'redirect\\n':\n\
            \x20       os.dup2(os.open(os.devnull, os.O_WRONLY), keep)\n\
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
            stdout: std::io::BufReader::new(stdout),
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
        let mut got = String::new();
        self.stdout.read_line(&mut got).expect("text");
        assert_eq!(got.trim_end(), line);
    }

    /// The pipe it writes to, as the protocol's (it keeps a copy of
    /// its end, as the shim does).
    fn pipes(&self) -> Vec<FileId> {
        use std::os::fd::AsFd;
        FileId::of(self.stdout.get_ref().as_fd())
            .into_iter()
            .collect()
    }

    /// Watches it, idle now.
    fn watched(&self) -> Leftovers {
        Leftovers::new(self.pid(), self.pid(), &self.pipes())
    }

    /// What a call that does `what` leaves behind, seen from outside.
    async fn after(&mut self, what: &str) -> Option<LeftBehind> {
        let mut leftovers = self.watched();
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
        let mut leftovers = self.watched();
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
async fn a_protocol_descriptor_put_elsewhere_is_found() {
    let mut worker = PlayedWorker::start();
    assert_eq!(worker.watched().protocol_fds.len(), 2, "fd 1 and its copy");
    assert_eq!(
        cause(&worker.after("redirect").await),
        Some("protocol_descriptors")
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
    let mut leftovers = worker.watched();
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
    let leftovers = Leftovers::new(me, me, &[]);
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
