//! The guardian process as the supervisor holds it: a child it spawned
//! (tokio reaps it), or one the template cloned as the supervisor's child
//! (`CLONE_PARENT`), held by a pidfd and reaped here. Either way the
//! supervisor is its parent, so its exit status is the kernel's, never a
//! message's.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::process::ProcessId;

/// A guardian, child of this process.
pub(super) enum GuardianProcess {
    Spawned(tokio::process::Child),
    Cloned(ClonedGuardian),
}

impl GuardianProcess {
    pub(super) fn pid(&self) -> Option<ProcessId> {
        match self {
            GuardianProcess::Spawned(child) => child.id().and_then(ProcessId::from_u32),
            GuardianProcess::Cloned(cloned) => Some(cloned.pid),
        }
    }

    /// Waits for it to end and reaps it.
    pub(super) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match self {
            GuardianProcess::Spawned(child) => child.wait().await,
            GuardianProcess::Cloned(cloned) => cloned.wait().await,
        }
    }
}

/// A guardian the template cloned: this process's child (it checked that
/// with the kernel before taking it), so its pid cannot be reused before
/// it is reaped here.
pub(super) struct ClonedGuardian {
    pid: ProcessId,
    pidfd: Pidfd,
    status: Option<ExitStatus>,
}

/// The guardian's pidfd: readable once it has ended. Registered with the
/// reactor at the first wait, so that taking a guardian cannot fail (and
/// leave a child nobody reaps).
enum Pidfd {
    Owned(OwnedFd),
    Registered(AsyncFd<OwnedFd>),
    Gone,
}

impl ClonedGuardian {
    /// Takes `pid`, a child of this process, with a pidfd open on it.
    pub(super) fn new(pid: ProcessId, pidfd: OwnedFd) -> ClonedGuardian {
        ClonedGuardian {
            pid,
            pidfd: Pidfd::Owned(pidfd),
            status: None,
        }
    }

    async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.status {
                return Ok(status);
            }
            self.pidfd = match std::mem::replace(&mut self.pidfd, Pidfd::Gone) {
                // SAFETY: an OwnedFd's descriptor is open, and stays the
                // same one until the AsyncFd drops it or gives it back.
                Pidfd::Owned(fd) => {
                    match unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) } {
                        Ok(registered) => Pidfd::Registered(registered),
                        Err(e) => {
                            let (fd, error) = e.into_parts();
                            self.pidfd = Pidfd::Owned(fd);
                            return Err(error);
                        }
                    }
                }
                other => other,
            };
            let Pidfd::Registered(pidfd) = &self.pidfd else {
                return Err(std::io::Error::other("the guardian's pidfd is gone"));
            };
            if let Some(status) = reap(pidfd.get_ref(), WaitPidFlag::WNOHANG)? {
                self.status = Some(status);
                continue;
            }
            let mut ready = pidfd.readable().await?;
            ready.clear_ready();
        }
    }
}

impl Drop for ClonedGuardian {
    /// Reaps it in the background (it is being killed: `Worker`'s drop), as
    /// tokio does for a dropped child: no zombie is left behind.
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        let pidfd = match std::mem::replace(&mut self.pidfd, Pidfd::Gone) {
            Pidfd::Owned(fd) => fd,
            Pidfd::Registered(registered) => registered.into_inner(),
            Pidfd::Gone => return,
        };
        let reap_blocking = move || {
            let _ = reap(&pidfd, WaitPidFlag::empty());
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(reap_blocking)),
            Err(_) => drop(std::thread::Builder::new().spawn(reap_blocking)),
        }
    }
}

/// `waitid(P_PIDFD)`: the status once it ended (`None` if it has not, with `WNOHANG`).
fn reap(pidfd: &impl AsFd, flags: WaitPidFlag) -> std::io::Result<Option<ExitStatus>> {
    let status = loop {
        match waitid(Id::PIDFd(pidfd.as_fd()), flags | WaitPidFlag::WEXITED) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other.map_err(std::io::Error::from)?,
        }
    };
    // Raw wait statuses, as ExitStatus::from_raw reads them.
    Ok(match status {
        WaitStatus::Exited(_, code) => Some(ExitStatus::from_raw((code & 0xff) << 8)),
        WaitStatus::Signaled(_, signal, core) => Some(ExitStatus::from_raw(
            signal as i32 | if core { 0x80 } else { 0 },
        )),
        _ => None,
    })
}
