//! A request written by the handle itself when the actor is idle.
//!
//! A caller outside the runtime's worker threads (`block_on`, a plain
//! thread) that sent every request through the actor would pay one thread
//! hop before the worker even sees it: the actor's task has to be woken on
//! a worker thread first. When the actor waits for a command with nothing
//! in flight, no one else can be writing to the worker's stdin, so the
//! handle writes the request itself, without blocking, and the actor, woken
//! meanwhile, only reads the reply. The hop still happens, but while the
//! worker runs the call, not before it starts.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::net::unix::pipe;

/// Set by the actor while it waits for a command with nothing of its own
/// on the wire; read by the handle before it writes to stdin itself.
#[derive(Clone, Default)]
pub(super) struct ActorIdle(Arc<AtomicBool>);

impl ActorIdle {
    /// The actor waits for its next command: it writes nothing until then.
    pub(super) fn waiting(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// The actor took a command; from now on it may write.
    pub(super) fn busy(&self) {
        self.0.store(false, Ordering::Release);
    }

    fn is_waiting(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The handle's own descriptor for the worker's stdin (a duplicate of the
/// actor's: the pipe stays open while either holds it, so it is dropped
/// before the worker is retired by closing stdin).
pub(super) struct DirectWriter {
    stdin: File,
    idle: ActorIdle,
}

impl DirectWriter {
    /// `None` when the descriptor cannot be duplicated (every request then
    /// goes through the actor).
    pub(super) fn new(stdin: &pipe::Sender, idle: ActorIdle) -> Option<DirectWriter> {
        let fd = stdin.as_fd().try_clone_to_owned().ok()?;
        Some(DirectWriter {
            stdin: File::from(fd),
            idle,
        })
    }

    /// Whether the actor waits for a command with nothing of its own on
    /// the wire. Only the handle's owner sends the actor commands, and it is
    /// here: the actor stays idle until it sends the next.
    pub(super) fn actor_is_idle(&self) -> bool {
        self.idle.is_waiting()
    }

    /// Writes as much of `frame` as the pipe takes now, without waiting
    /// (the descriptor shares the actor's non-blocking mode); how many bytes
    /// went. The actor writes the rest. A failed write writes nothing here:
    /// the actor's own write then meets the error and reports it as it
    /// always does.
    pub(super) fn write_now(&self, frame: &[u8]) -> usize {
        loop {
            match (&self.stdin).write(frame) {
                Ok(written) => return written,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return 0,
            }
        }
    }
}
