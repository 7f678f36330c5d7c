//! Spawning a worker's guardian process.
//!
//! Every worker is spawned from one long-lived thread (the [`Spawner`]):
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked a child exits, so
//! forking from tokio's short-lived blocking threads would kill idle workers.

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::Arc;

use tokio::process::Child;
use tokio::sync::oneshot;

use super::{StartError, WorkerSpec, DUMP_FD};
use crate::sandbox::WorkerCgroup;

/// The one thread every worker is forked from; lives as long as its pool.
pub struct Spawner {
    jobs: std::sync::mpsc::Sender<SpawnJob>,
}

struct SpawnJob {
    spec: Arc<WorkerSpec>,
    reply: oneshot::Sender<std::io::Result<Spawned>>,
}

pub(super) struct Spawned {
    pub(super) child: Child,
    pub(super) dump: OwnedFd,
    pub(super) cgroup: Arc<WorkerCgroup>,
}

impl Spawner {
    /// Starts the spawner thread; must be called inside a tokio runtime.
    pub fn new() -> std::io::Result<Spawner> {
        let handle = tokio::runtime::Handle::current();
        let (jobs, queue) = std::sync::mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("toolpool-spawner".into())
            .spawn(move || {
                // tokio::process needs a runtime context to register the child.
                let _runtime = handle.enter();
                for job in queue {
                    let _ = job.reply.send(spawn_process(&job.spec));
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
            .send(SpawnJob { spec, reply })
            .map_err(|_| StartError::SpawnerGone)?;
        answer.await.map_err(|_| StartError::SpawnerGone)
    }
}

fn spawn_process(spec: &WorkerSpec) -> std::io::Result<Spawned> {
    let (dump_read, dump_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let mut command = tokio::process::Command::new(&spec.python);
    command
        .arg("-I")
        .arg(&spec.boot_script)
        .arg(spec.boot_json())
        .current_dir(&spec.workspace)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let supervisor_pid = nix::unistd::getpid().as_raw();
    let dump_fd = dump_write.as_raw_fd();
    let memory_limit = spec.memory_limit_bytes;
    let sandbox = spec.sandbox.clone();
    let cgroup = Arc::new(match &sandbox {
        Some(sandbox) => sandbox.worker_cgroup()?,
        None => WorkerCgroup::none(),
    });
    let child_cgroup = cgroup.clone();
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
            if dump_fd == DUMP_FD {
                if libc::fcntl(DUMP_FD, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(dump_fd, DUMP_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            close_other_fds_on_exec();
            if let Some(bytes) = memory_limit {
                let limit = libc::rlimit {
                    rlim_cur: bytes as libc::rlim_t,
                    rlim_max: bytes as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(sandbox) = &sandbox {
                crate::sandbox::enter(sandbox, &child_cgroup)?;
            }
            Ok(())
        });
    }
    let child = crate::reaper::spawn_known(&mut command)?;
    drop(dump_write);
    Ok(Spawned {
        child,
        dump: dump_read,
        cgroup,
    })
}

/// Marks every descriptor above the dump fd close-on-exec, so that only
/// stdio and the dump pipe reach the worker, whatever toolpool's process
/// (or the program embedding it) left inheritable. Runs between fork and exec.
fn close_other_fds_on_exec() {
    // SAFETY: plain system calls on integers.
    unsafe {
        let first = (DUMP_FD + 1) as libc::c_uint;
        if libc::syscall(
            libc::SYS_close_range,
            first,
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
        for fd in (DUMP_FD + 1)..top {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}
