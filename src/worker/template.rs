//! The template: one `python3` per pool (per session under `--sandbox`,
//! inside the sandbox) that has started the interpreter and imported the
//! shim once (no tool), from which each worker's guardian is cloned instead
//! of started from nothing. A worker's
//! start then costs its tools' imports; the interpreter's start and the
//! shim's imports (~110 ms of CPU each on a slow machine) are paid once.
//!
//! The channel is a `SOCK_SEQPACKET` socket pair, the template's end on its
//! fd 3. A request is the guardian's config JSON with five descriptors
//! (stdin, stdout, stderr and dump pipe ends, and a pipe it waits on to
//! go) as `SCM_RIGHTS`; the template clones the
//! guardian with `CLONE_PARENT` and answers its pid (`python_shim/
//! toolpool_boot.py`). The pid is taken only once the kernel says the
//! process is this one's child; from then on it is held by a pidfd and
//! reaped here, like a spawned guardian.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::socket::{
    recv, sendmsg, setsockopt, socketpair, sockopt, AddressFamily, ControlMessage, MsgFlags,
    SockFlag, SockType, UnixAddr,
};
use nix::sys::time::TimeVal;
use tokio::io::AsyncBufReadExt;
use tokio::net::unix::pipe;

use super::guardian::{ClonedGuardian, GuardianProcess};
use super::launch::{guardian_command, worker_cgroup, Spawned};
use super::WorkerSpec;
use crate::process::{pidfd_open, ProcessId};
use crate::sandbox::{ProcessLimit, WorkerCgroup};

/// The longest answer the template gives ("ready", a pid, `error <errno>`, or why it cannot serve).
const MAX_ANSWER: usize = 512;
/// How long a clone may take to be answered (it takes about a millisecond).
const CLONE_WAIT: Duration = Duration::from_secs(5);

/// A running template and the spec whose workers it makes.
pub(super) struct Template {
    process: tokio::process::Child,
    channel: OwnedFd,
    spec: Arc<WorkerSpec>,
    /// Under `--sandbox`, the template's own cgroup (each guardian is moved
    /// into one of its own before it forks its worker).
    _cgroup: Arc<WorkerCgroup>,
}

fn io_error(what: &str) -> impl Fn(nix::errno::Errno) -> std::io::Error + '_ {
    move |errno| std::io::Error::other(format!("{what}: {errno}"))
}

impl Template {
    /// Whether workers of `spec` may come from a template. Under
    /// `--sandbox` a template is inside the sandbox, in its namespaces and
    /// mount view, and each worker cloned from it makes user, IPC, UTS and
    /// network namespaces and a `/tmp` of its own
    /// (`toolpool_shim/sandbox.py`). Not where the process limit is
    /// `RLIMIT_NPROC`: kernels count it per user namespace differently, and
    /// a cgroup's `pids.max` per worker is what holds everywhere.
    pub(super) fn can_serve(spec: &WorkerSpec) -> bool {
        spec.sandbox.as_ref().is_none_or(|sandbox| {
            let pieces = sandbox.pieces();
            // Its worker makes namespaces of its own inside the template's
            // user namespace, from a mount namespace of its own.
            pieces.user_ns
                && pieces.mount_ns
                && pieces.pid_ns
                && pieces.process_limit != ProcessLimit::Rlimit
        })
    }

    /// Starts a template for `spec` (inside its sandbox, if it has one) and
    /// waits until it has imported the shim.
    pub(super) fn start(spec: &Arc<WorkerSpec>) -> std::io::Result<Template> {
        let (channel, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(io_error("socketpair"))?;
        let supervisor = std::process::id().to_string();
        let cgroup = worker_cgroup(spec)?;
        let mut command = guardian_command(
            spec,
            &["--template", &supervisor],
            [theirs.as_raw_fd()],
            Some(&cgroup),
        );
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        let mut process = crate::reaper::spawn_known(&mut command)?;
        drop(theirs);
        if let Some(stderr) = process.stderr.take() {
            tokio::spawn(log_stderr(stderr));
        }
        let template = Template {
            process,
            channel,
            spec: spec.clone(),
            _cgroup: cgroup,
        };
        template.set_answer_wait(spec.start_timeout)?;
        match template.answer()?.as_str() {
            "ready" => {
                template.set_answer_wait(CLONE_WAIT)?;
                Ok(template)
            }
            "" => Err(std::io::Error::other(
                "the template ended before it was ready (see its stderr above)",
            )),
            other => Err(std::io::Error::other(format!("the template said: {other}"))),
        }
    }

    /// Whether it makes workers of `spec`.
    pub(super) fn serves(&self, spec: &Arc<WorkerSpec>) -> bool {
        Arc::ptr_eq(&self.spec, spec)
    }

    pub(super) fn spec(&self) -> &Arc<WorkerSpec> {
        &self.spec
    }

    /// Alive, and still as it was made, as far as the kernel shows: traced
    /// by no one (`TracerPid: 0`), and — where this process is not root —
    /// still not dumpable (its `/proc` files owned by root: owned by this
    /// user, code inside it made it dumpable again). One that is not is
    /// killed and a fresh one started: every later worker would carry what
    /// was done to it. (Root's `/proc/<pid>/mem` writes leave no such mark:
    /// only `--sandbox` keeps them from a tool.)
    pub(super) fn is_sound(&mut self) -> bool {
        if !matches!(self.process.try_wait(), Ok(None)) {
            return false;
        }
        let Some(pid) = self.process.id() else {
            return false;
        };
        let traced = std::fs::read_to_string(format!("/proc/{pid}/status")).map(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("TracerPid:"))
                .is_some_and(|tracer| tracer.trim() != "0")
        });
        let me = nix::unistd::geteuid();
        let dumpable = !me.is_root()
            && std::fs::metadata(format!("/proc/{pid}/mem")).is_ok_and(|meta| {
                use std::os::unix::fs::MetadataExt;
                meta.uid() == me.as_raw()
            });
        match traced {
            Ok(false) if !dumpable => true,
            _ => {
                tracing::warn!(
                    template = pid,
                    traced = traced.unwrap_or(true),
                    dumpable,
                    "the template is no longer as it was made (traced, or made dumpable): starting a fresh one"
                );
                false
            }
        }
    }

    fn set_answer_wait(&self, wait: Duration) -> std::io::Result<()> {
        let wait = TimeVal::new(
            wait.as_secs().try_into().unwrap_or(i64::MAX),
            wait.subsec_micros().into(),
        );
        setsockopt(&self.channel, sockopt::ReceiveTimeout, &wait)
            .map_err(io_error("setting the template's answer timeout"))
    }

    /// The template's next answer; empty when it closed the channel.
    fn answer(&self) -> std::io::Result<String> {
        let mut buffer = [0u8; MAX_ANSWER];
        let read = loop {
            match recv(self.channel.as_raw_fd(), &mut buffer, MsgFlags::empty()) {
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::EAGAIN) => {
                    return Err(std::io::Error::other("the template did not answer in time"))
                }
                other => break other.map_err(io_error("reading the template's answer"))?,
            }
        };
        Ok(String::from_utf8_lossy(&buffer[..read]).into_owned())
    }

    /// Clones a guardian for `spec` (the one this template serves).
    pub(super) fn clone_guardian(&mut self, spec: &WorkerSpec) -> std::io::Result<Spawned> {
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io_error("pipe"));
        let (stdin_read, stdin_write) = pipe()?;
        let (stdout_read, stdout_write) = pipe()?;
        let (stderr_read, stderr_write) = pipe()?;
        let (dump_read, dump_write) = pipe()?;
        // The guardian waits for a byte here before it forks its worker:
        // by then it is in its own cgroup.
        let (go_read, go_write) = pipe()?;
        let theirs = [
            stdin_read.as_raw_fd(),
            stdout_write.as_raw_fd(),
            stderr_write.as_raw_fd(),
            dump_write.as_raw_fd(),
            go_read.as_raw_fd(),
        ];
        let config = spec.boot_json();
        let me = std::process::id() as i32;
        let mut pidfd = None;
        let pid = crate::reaper::start_known(|| {
            sendmsg::<UnixAddr>(
                self.channel.as_raw_fd(),
                &[IoSlice::new(config.as_bytes())],
                &[ControlMessage::ScmRights(&theirs)],
                MsgFlags::MSG_NOSIGNAL,
                None,
            )
            .map_err(io_error("asking the template for a worker"))?;
            let answer = self.answer()?;
            let pid = answer
                .parse::<i32>()
                .ok()
                .and_then(ProcessId::new)
                .ok_or_else(|| match answer.as_str() {
                    "" => std::io::Error::other("the template ended"),
                    _ => std::io::Error::other(format!("the template could not clone: {answer}")),
                })?;
            // The template only names a pid; the kernel says whose child it
            // is (ours, unreaped: the pid cannot be another's meanwhile).
            let fd = pidfd_open(pid).ok_or_else(|| {
                std::io::Error::other(format!("no pidfd for the cloned guardian {pid}"))
            })?;
            if crate::procfs::parent_of(pid.raw()) != Some(me) {
                return Err(std::io::Error::other(format!(
                    "the template named {pid}, which is not this process's child"
                )));
            }
            pidfd = Some(fd);
            Ok(pid.raw())
        })?;
        drop((stdin_read, stdout_write, stderr_write, dump_write, go_read));
        let (Some(pid), Some(pidfd)) = (ProcessId::new(pid), pidfd) else {
            return Err(std::io::Error::other(
                "the cloned guardian was not recorded",
            ));
        };
        // Held from here on: dropped on an error below, it is reaped.
        let guardian = GuardianProcess::Cloned(ClonedGuardian::new(pid, pidfd));
        let cgroup = worker_cgroup(spec)?;
        cgroup.adopt(pid)?;
        nix::unistd::write(&go_write, b"g").map_err(io_error("letting the guardian go"))?;
        Ok(Spawned {
            guardian,
            stdin: pipe::Sender::from_owned_fd(stdin_write)?,
            stdout: pipe::Receiver::from_owned_fd(stdout_read)?,
            stderr: pipe::Receiver::from_owned_fd(stderr_read)?,
            dump: dump_read,
            cgroup,
        })
    }
}

impl Drop for Template {
    /// Closing the channel ends it; the kill covers a template that hangs.
    /// Its guardians are not its children and go on.
    fn drop(&mut self) {
        let _ = self.process.start_kill();
    }
}

/// The template runs no tool: what it writes is a failure of its own start.
async fn log_stderr(stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::warn!("worker template: {line}");
    }
}
