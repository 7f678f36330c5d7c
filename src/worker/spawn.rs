//! Starting a worker's guardian process: cloned from a template
//! (`template`) where one runs, else spawned from nothing.
//!
//! Every worker is started from one long-lived thread (the [`Spawner`]):
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked a child exits, so
//! forking from tokio's short-lived blocking threads would kill idle workers.
//! A guardian the template clones is that thread's child too (`CLONE_PARENT`).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::process::Stdio;
use std::sync::Arc;

use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use super::guardian::GuardianProcess;
use super::template::Template;
use super::{StartError, WorkerSpec, DUMP_FD};
use crate::sandbox::WorkerCgroup;

/// The one thread every worker is started from; lives as long as its pool.
pub struct Spawner {
    jobs: std::sync::mpsc::Sender<Job>,
}

enum Job {
    Spawn {
        spec: Arc<WorkerSpec>,
        reply: oneshot::Sender<std::io::Result<Spawned>>,
    },
    /// The pool has shut down: its template ends, and no other starts.
    EndTemplate,
}

/// A started guardian and this process's ends of its pipes.
pub(super) struct Spawned {
    pub(super) guardian: GuardianProcess,
    pub(super) stdin: pipe::Sender,
    pub(super) stdout: pipe::Receiver,
    pub(super) stderr: pipe::Receiver,
    pub(super) dump: OwnedFd,
    pub(super) cgroup: Arc<WorkerCgroup>,
}

impl Spawner {
    /// Starts the spawner thread; must be called inside a tokio runtime.
    /// `use_template`: clone workers from a template process (see `template`).
    pub fn new(use_template: bool) -> std::io::Result<Spawner> {
        let handle = tokio::runtime::Handle::current();
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("toolpool-spawner".into())
            .spawn(move || {
                // tokio::process and pipes need a runtime context to register.
                let _runtime = handle.enter();
                let mut templates = Templates::new(use_template);
                for job in queue {
                    match job {
                        Job::Spawn { spec, reply } => {
                            let _ = reply.send(templates.start_guardian(&spec));
                        }
                        Job::EndTemplate => templates = Templates::new(false),
                    }
                }
            })?;
        Ok(Spawner { jobs })
    }

    pub(super) async fn spawn(
        &self,
        spec: Arc<WorkerSpec>,
    ) -> Result<std::io::Result<Spawned>, StartError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job::Spawn { spec, reply })
            .map_err(|_| StartError::SpawnerGone)?;
        answer.await.map_err(|_| StartError::SpawnerGone)
    }

    /// Ends the template (the pool has shut down); later workers are spawned.
    pub fn end_template(&self) {
        let _ = self.jobs.send(Job::EndTemplate);
    }
}

/// The spawner thread's templates, one per spec (a sandboxed pool has one
/// spec per session: each worker's view holds its session's folders), each
/// started at the spec's first worker.
struct Templates {
    enabled: bool,
    running: Vec<Template>,
    /// Starts or clones that failed in a row: after
    /// [`MAX_TEMPLATE_FAILURES`] the pool spawns every worker (an
    /// interpreter that cannot be a template).
    failures: u32,
}

/// Failed template starts or clones after which a pool stops trying.
const MAX_TEMPLATE_FAILURES: u32 = 3;
/// Templates kept running at once; past it the one used least recently ends.
const MAX_TEMPLATES: usize = 4;

impl Templates {
    fn new(enabled: bool) -> Templates {
        Templates {
            enabled,
            running: Vec::new(),
            failures: 0,
        }
    }

    fn start_guardian(&mut self, spec: &Arc<WorkerSpec>) -> std::io::Result<Spawned> {
        if !self.enabled || !Template::can_serve(spec) || self.failures >= MAX_TEMPLATE_FAILURES {
            return spawn_process(spec);
        }
        match self.clone_from_template(spec) {
            Ok(spawned) => {
                self.failures = 0;
                Ok(spawned)
            }
            Err(e) => {
                self.failures += 1;
                self.running.retain(|t| !t.serves(spec));
                if self.failures >= MAX_TEMPLATE_FAILURES {
                    tracing::warn!("workers are spawned from now on: the template failed: {e}");
                } else {
                    tracing::debug!("spawning a worker: the template failed: {e}");
                }
                spawn_process(spec)
            }
        }
    }

    fn clone_from_template(&mut self, spec: &Arc<WorkerSpec>) -> std::io::Result<Spawned> {
        // A template whose spec nobody else holds serves no one any more (a
        // session that ended); a dead one, or one tampered with, is started
        // again (dropped, it is killed).
        self.running
            .retain_mut(|t| Arc::strong_count(t.spec()) > 1 && t.is_sound());
        let index = match self.running.iter().position(|t| t.serves(spec)) {
            Some(index) => index,
            None => {
                if self.running.len() >= MAX_TEMPLATES {
                    self.running.remove(0);
                }
                self.running.push(Template::start(spec)?);
                self.running.len() - 1
            }
        };
        // Most recently used last.
        let mut template = self.running.remove(index);
        let spawned = template.clone_guardian(spec);
        self.running.push(template);
        spawned
    }
}

/// A cgroup for the next process of `spec` (a guardian, or a template):
/// under `--sandbox` a fresh one, else none.
pub(super) fn worker_cgroup(spec: &WorkerSpec) -> std::io::Result<Arc<WorkerCgroup>> {
    Ok(Arc::new(match &spec.sandbox {
        Some(sandbox) => sandbox.worker_cgroup()?,
        None => WorkerCgroup::none(),
    }))
}

fn spawn_process(spec: &WorkerSpec) -> std::io::Result<Spawned> {
    let (dump_read, dump_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let cgroup = worker_cgroup(spec)?;
    let boot_json = spec.boot_json();
    let mut command =
        guardian_command(spec, &[&boot_json], [dump_write.as_raw_fd()], Some(&cgroup));
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = crate::reaper::spawn_known(&mut command)?;
    drop(dump_write);
    let missing = || std::io::Error::other("a stdio pipe of the guardian is missing");
    let stdin = child.stdin.take().ok_or_else(missing)?.into_owned_fd()?;
    let stdout = child.stdout.take().ok_or_else(missing)?.into_owned_fd()?;
    let stderr = child.stderr.take().ok_or_else(missing)?.into_owned_fd()?;
    Ok(Spawned {
        guardian: GuardianProcess::Spawned(child),
        stdin: pipe::Sender::from_owned_fd(stdin)?,
        stdout: pipe::Receiver::from_owned_fd(stdout)?,
        stderr: pipe::Receiver::from_owned_fd(stderr)?,
        dump: dump_read,
        cgroup,
    })
}

/// `python3 -I <boot script> <args>` as a guardian (or the template) is
/// started: the spec's environment and workspace, a process group of its
/// own, the parent-death signal, `inherited` as fds 3, 4, ... and nothing
/// else above stdio, the memory limit, and (with `cgroup`) the spec's sandbox.
pub(super) fn guardian_command<const N: usize>(
    spec: &WorkerSpec,
    args: &[&str],
    inherited: [RawFd; N],
    cgroup: Option<&Arc<WorkerCgroup>>,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(&spec.python);
    command
        .arg("-I")
        .arg(&spec.boot_script)
        .args(args)
        .current_dir(&spec.workspace)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .process_group(0);
    let supervisor_pid = nix::unistd::getpid().as_raw();
    let memory_limit = spec.memory_limit_bytes;
    let sandbox = spec.sandbox.clone().zip(cgroup.cloned());
    // SAFETY: the closure runs between fork and exec and only makes
    // async-signal-safe system calls (prctl, getppid, fcntl, dup2, setrlimit,
    // close_range, _exit; the sandbox's are listed in `sandbox::enter`).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The supervisor may have died before prctl took effect.
            if libc::getppid() != supervisor_pid {
                libc::_exit(1);
            }
            place_inherited(inherited)?;
            close_other_fds_on_exec(FIRST_INHERITED_FD + N as RawFd);
            if let Some(bytes) = memory_limit {
                let limit = libc::rlimit {
                    rlim_cur: bytes as libc::rlim_t,
                    rlim_max: bytes as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some((sandbox, cgroup)) = &sandbox {
                crate::sandbox::enter(sandbox, cgroup)?;
            }
            Ok(())
        });
    }
    command
}

/// The first descriptor a guardian inherits above stdio (the dump pipe's).
const FIRST_INHERITED_FD: RawFd = DUMP_FD;

/// Puts `fds` on 3, 4, ... (inheritable) between fork and exec. A source
/// that sits on another's target is first moved above them all, so no dup2
/// overwrites a descriptor still to be placed.
fn place_inherited<const N: usize>(mut fds: [RawFd; N]) -> std::io::Result<()> {
    let end = FIRST_INHERITED_FD + N as RawFd;
    // SAFETY: plain system calls on integers, async-signal-safe.
    unsafe {
        for (index, fd) in fds.iter_mut().enumerate() {
            let target = FIRST_INHERITED_FD + index as RawFd;
            if *fd != target && (FIRST_INHERITED_FD..end).contains(fd) {
                *fd = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, end);
                if *fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        for (index, fd) in fds.iter().enumerate() {
            let target = FIRST_INHERITED_FD + index as RawFd;
            let placed = if *fd == target {
                libc::fcntl(target, libc::F_SETFD, 0)
            } else {
                libc::dup2(*fd, target)
            };
            if placed < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Marks every descriptor from `first` up close-on-exec, so that only stdio
/// and the inherited descriptors reach the worker, whatever toolpool's
/// process (or the program embedding it) left inheritable. Runs between
/// fork and exec.
fn close_other_fds_on_exec(first: RawFd) {
    // SAFETY: plain system calls on integers.
    unsafe {
        if libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        ) == 0
        {
            return;
        }
        // Kernels before 5.11: one fcntl per possible descriptor.
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(65_536) as i32
        } else {
            1024
        };
        for fd in first..top {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}
