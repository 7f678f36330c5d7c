//! The signals that ask toolpool to stop: SIGTERM and SIGINT.
//!
//! Front ends stop by draining: no new calls, calls in flight finish within a
//! grace period, then whatever is left is killed and reaped
//! ([`toolpool::Pool::shutdown_with_grace`]). The library listens to no
//! signal: `serve` gets them as [`toolpool::stop::StopHandle`] requests.

use std::fmt;

use tokio::signal::unix::{signal, Signal, SignalKind};

/// Which stop signal arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    Terminate,
    Interrupt,
}

impl fmt::Display for StopSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StopSignal::Terminate => "SIGTERM",
            StopSignal::Interrupt => "SIGINT",
        })
    }
}

/// Listens for SIGTERM and SIGINT from the moment it is created.
///
/// Creating it replaces the default action of both signals (ending the
/// process) for the rest of the process's life, so create it early, once,
/// and keep it: a signal that arrives while nobody waits is kept for the
/// next [`StopSignals::recv`].
pub struct StopSignals {
    terminate: Signal,
    interrupt: Signal,
}

impl StopSignals {
    /// Must be called inside a tokio runtime.
    pub fn new() -> std::io::Result<StopSignals> {
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the next SIGTERM or SIGINT.
    pub async fn recv(&mut self) -> StopSignal {
        tokio::select! {
            Some(()) = self.terminate.recv() => StopSignal::Terminate,
            Some(()) = self.interrupt.recv() => StopSignal::Interrupt,
        }
    }
}
