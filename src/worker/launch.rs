//! What every start of a guardian shares, spawned or cloned by the
//! template: its command line and the setup between fork and exec, its
//! cgroup, and what a start gives back.

use std::os::fd::{OwnedFd, RawFd};
use std::sync::Arc;

use tokio::net::unix::pipe;

use super::guardian::GuardianProcess;
use super::{WorkerSpec, DUMP_FD};
use crate::sandbox::WorkerCgroup;

/// A started guardian and this process's ends of its pipes.
pub(super) struct Spawned {
    pub(super) guardian: GuardianProcess,
    pub(super) stdin: pipe::Sender,
    pub(super) stdout: pipe::Receiver,
    pub(super) stderr: pipe::Receiver,
    pub(super) dump: OwnedFd,
    pub(super) cgroup: Arc<WorkerCgroup>,
}

/// A cgroup for the next process of `spec` (a guardian, or a template):
/// under `--sandbox` a fresh one, else none.
pub(super) fn worker_cgroup(spec: &WorkerSpec) -> std::io::Result<Arc<WorkerCgroup>> {
    Ok(Arc::new(match &spec.sandbox {
        Some(sandbox) => sandbox.worker_cgroup()?,
        None => WorkerCgroup::none(),
    }))
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
