//! Where the worker says it started a request: eight bytes of memory it
//! shares with the supervisor (a sealed memfd, fd 4 in the worker).
//!
//! A worker found dead must be told apart: one that died before it started
//! the call was broken by an earlier call (the call moves to a fresh worker,
//! once), one that died after ran it. The worker used to say so with a
//! `started` frame before every call, a system call of its own and a wake-up
//! of the supervisor for a message nobody acts on unless the worker dies. A
//! store into shared memory costs neither, and outlives the worker: its
//! value is read only once the worker is found dead or broken.
//!
//! The worker can write anything here, as it could send any frame: this is
//! its word, not the kernel's, and decides only between `WorkerDied` and one
//! retry. It cannot shrink the memfd under the supervisor's mapping (a read
//! past the end would be SIGBUS): its size is sealed before it is handed out.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// The fd the worker finds the memfd on (the dump pipe is fd 3).
pub(super) const ACK_FD: i32 = 4;
/// What the cell holds before the worker started anything: no request has
/// that id (ids count up from 0).
const NOTHING_STARTED: u64 = u64::MAX;

/// The supervisor's mapping of a worker's started-request cell.
pub(super) struct AckCell {
    cell: NonNull<AtomicU64>,
}

// SAFETY: the mapping is shared memory read through an atomic; it lives as
// long as the AckCell and nothing else unmaps it.
unsafe impl Send for AckCell {}
unsafe impl Sync for AckCell {}

impl AckCell {
    /// A new cell, and the descriptor to hand the worker (close-on-exec:
    /// it is placed on [`ACK_FD`] for the worker only).
    pub(super) fn new() -> std::io::Result<(AckCell, OwnedFd)> {
        let size = std::mem::size_of::<AtomicU64>();
        // SAFETY: plain system calls; every result is checked, and the fd is
        // owned from the moment it exists.
        unsafe {
            let raw = libc::memfd_create(
                c"toolpool-ack".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            );
            if raw < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = OwnedFd::from_raw_fd(raw);
            if libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
            if libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let map = libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            );
            if map == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            let cell = NonNull::new(map.cast::<AtomicU64>())
                .ok_or_else(|| std::io::Error::other("mmap gave a null address"))?;
            cell.as_ref().store(NOTHING_STARTED, Ordering::Release);
            Ok((AckCell { cell }, fd))
        }
    }

    /// Whether the worker said it started request `id` (the last it started).
    pub(super) fn started(&self, id: u64) -> bool {
        // SAFETY: mapped for as long as self lives; sealed at its size.
        unsafe { self.cell.as_ref() }.load(Ordering::Acquire) == id
    }
}

impl Drop for AckCell {
    fn drop(&mut self) {
        // SAFETY: mapped by `new` with this size; no reference outlives self.
        unsafe {
            libc::munmap(self.cell.as_ptr().cast(), std::mem::size_of::<AtomicU64>());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_sees_what_is_written_through_its_fd_and_cannot_be_shrunk() {
        let (cell, fd) = AckCell::new().expect("memfd");
        assert!(!cell.started(0), "nothing started yet");
        let id: u64 = 7;
        let written = nix::sys::uio::pwrite(&fd, &id.to_ne_bytes(), 0).expect("pwrite");
        assert_eq!(written, 8);
        assert!(cell.started(7));
        assert!(!cell.started(6));
        // SAFETY: a plain system call on a descriptor we own.
        let shrunk = unsafe { libc::ftruncate(fd.as_raw_fd(), 0) };
        assert_ne!(shrunk, 0, "the size is sealed");
        assert!(cell.started(7), "still readable");
    }
}
