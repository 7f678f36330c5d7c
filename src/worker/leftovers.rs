//! What a call left running in its worker after it answered: threads
//! beyond those the worker had while idle, and processes below its guardian
//! besides the worker. A worker with leftovers is never trusted with another
//! call (a thread that writes into the frame pipe 0.3 s later, a forked
//! child that returned into the shim and reads the request pipe): the call
//! gets its answer, and the worker is killed.
//!
//! Read from the kernel, never from the worker: the thread count from the
//! link count of `/proc/<worker>/task` (2 + one per thread: an `fstat` of a
//! directory kept open, where re-reading `/proc/<worker>/stat` formats 52
//! fields every call); processes by a scan of
//! `/proc` for the guardian's descendants, made only when the kernel gave
//! out a pid since the call started (the last field of `/proc/loadavg`:
//! every process or thread created anywhere below this one moves it), so a
//! call that started nothing costs two small reads.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Duration;

/// How often, and how far apart, a thread count above the idle one is read
/// again: a thread the tool joined may take a moment to leave the kernel's
/// list after its Python side ended.
const RECHECKS: u32 = 5;
const RECHECK_EVERY: Duration = Duration::from_millis(1);

pub(super) struct Leftovers {
    worker: i32,
    guardian: i32,
    /// `/proc/<worker>/task`, open for as long as the worker lives.
    task_dir: Option<File>,
    /// The fewest threads the worker was seen with, idle.
    idle_threads: Option<u64>,
    /// The last pid the kernel gave out when the running call started.
    last_pid_at_start: Option<u64>,
}

impl Leftovers {
    /// Watches `worker` (below `guardian`; the same pid when the guardian
    /// is the worker), idle now: its thread count now is its idle one.
    pub(super) fn new(worker: i32, guardian: i32) -> Leftovers {
        let mut leftovers = Leftovers {
            worker,
            guardian,
            task_dir: File::open(format!("/proc/{worker}/task")).ok(),
            idle_threads: None,
            last_pid_at_start: None,
        };
        leftovers.idle_threads = leftovers.threads();
        leftovers
    }

    /// A call starts on the worker: `last_pid` is [`last_pid`] read before
    /// its request's first byte was written (read once the actor runs, the
    /// worker may already have forked: its pid would count as "before").
    pub(super) fn call_starts(&mut self, last_pid: Option<u64>) {
        self.last_pid_at_start = last_pid;
    }

    /// After the call's reply: what it left running, described, or `None`.
    pub(super) async fn after_reply(&mut self) -> Option<String> {
        let Some(idle) = self.idle_threads else {
            return Some("its thread count cannot be read".into());
        };
        let mut threads = self.threads();
        for _ in 0..RECHECKS {
            match threads {
                Some(now) if now <= idle => break,
                None => break,
                Some(_) => {}
            }
            tokio::time::sleep(RECHECK_EVERY).await;
            threads = self.threads();
        }
        match threads {
            None => return Some("it is gone".into()),
            Some(now) if now > idle => {
                let extra = now - idle;
                let plural = if extra == 1 { "" } else { "s" };
                return Some(format!("{extra} thread{plural} still running"));
            }
            Some(now) => self.idle_threads = Some(now),
        }
        let moved = match (self.last_pid_at_start, last_pid()) {
            (Some(before), Some(now)) => before != now,
            _ => true,
        };
        if !moved {
            return None;
        }
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
        Some(format!(
            "{} process{plural} still running ({})",
            processes.len(),
            processes.join(", ")
        ))
    }

    /// The worker's threads now; `None` once it is reaped (no thread left)
    /// or the directory cannot be read.
    fn threads(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        let links = self.task_dir.as_ref()?.metadata().ok()?.nlink();
        links.checked_sub(2).filter(|&threads| threads > 0)
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

/// The last pid the kernel gave out (the last field of `/proc/loadavg`,
/// kept open for the process's life and read again each time).
pub(super) fn last_pid() -> Option<u64> {
    static LOADAVG: std::sync::OnceLock<Option<File>> = std::sync::OnceLock::new();
    let file = LOADAVG.get_or_init(|| File::open("/proc/loadavg").ok());
    let text = read_again(file.as_ref()?)?;
    text.split_whitespace().last()?.parse().ok()
}

/// A /proc file's text, read afresh from its start.
fn read_again(file: &File) -> Option<String> {
    let mut buffer = [0u8; 1024];
    let read = file.read_at(&mut buffer, 0).ok()?;
    Some(String::from_utf8_lossy(&buffer[..read]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A python3 that plays the worker, alone in its process (the test
    /// binary's own thread count moves with the other tests): it starts a
    /// thread that keeps running, stops and joins it, or runs one briefly,
    /// as told on stdin, and says when it has.
    struct PlayedWorker {
        child: std::process::Child,
        lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    }

    impl PlayedWorker {
        fn start() -> PlayedWorker {
            use std::io::BufRead;
            const SCRIPT: &str = "import sys, threading\n\
                stop = threading.Event()\n\
                print('idle', flush=True)\n\
                for line in sys.stdin:\n\
                \x20   if line == 'start\\n':\n\
                \x20       t = threading.Thread(target=stop.wait); t.start()\n\
                \x20   elif line == 'stop\\n':\n\
                \x20       stop.set(); t.join()\n\
                \x20   elif line == 'brief\\n':\n\
                \x20       b = threading.Thread(target=lambda: None); b.start(); b.join()\n\
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
    }

    impl Drop for PlayedWorker {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    #[tokio::test]
    async fn a_thread_left_running_is_found_and_one_joined_is_not() {
        let mut worker = PlayedWorker::start();
        let pid = worker.pid();
        let mut leftovers = Leftovers::new(pid, pid);
        leftovers.call_starts(last_pid());
        worker.tell("start");
        let found = leftovers.after_reply().await;
        assert_eq!(found.as_deref(), Some("1 thread still running"));
        worker.tell("stop");
        let mut again = Leftovers::new(pid, pid);
        again.call_starts(last_pid());
        worker.tell("brief");
        assert_eq!(again.after_reply().await, None);
    }

    #[tokio::test]
    async fn a_worker_reaped_is_gone_not_idle() {
        let mut worker = PlayedWorker::start();
        let mut leftovers = Leftovers::new(worker.pid(), worker.pid());
        assert_eq!(leftovers.threads(), Some(1));
        leftovers.call_starts(last_pid());
        worker
            .child
            .kill()
            .expect("the played worker is ours to kill");
        worker.child.wait().expect("and to reap");
        assert_eq!(leftovers.after_reply().await.as_deref(), Some("it is gone"));
    }

    #[tokio::test]
    async fn a_child_process_left_running_is_found() {
        let me = std::process::id() as i32;
        let mut leftovers = Leftovers::new(me, me);
        leftovers.idle_threads = Some(u64::MAX);
        leftovers.call_starts(last_pid());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let found = leftovers.after_reply().await;
        child.kill().unwrap();
        child.wait().unwrap();
        let found = found.unwrap_or_default();
        assert!(found.contains("sleep"), "{found}");
    }
}
