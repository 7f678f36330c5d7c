//! [`PoolError`]: what can stop a pool from starting.

use std::path::PathBuf;

/// What stops a pool from being built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// The Python interpreter cannot be started, fails, or does not say
    /// where it is.
    #[error("python interpreter '{python}' cannot be run: {reason}")]
    Interpreter {
        /// The interpreter as it was given (`python3`, a path).
        python: String,
        /// What went wrong, with its stderr when it failed.
        reason: String,
    },
    /// The functions directory (as given) does not exist or is not a
    /// directory.
    #[error("functions directory {0} does not exist or is not a directory")]
    FunctionsDir(PathBuf),
    /// A session directory, or one of its folders, cannot be made.
    #[error("cannot create session directory {path}: {source}")]
    SessionDir {
        /// The directory that could not be made.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A client named a session whose directory toolpool did not make.
    #[error("session '{name}' is not a toolpool session: {path} exists and was not made by toolpool (it has no .toolpool-session file); name another session")]
    NotASession {
        /// The session name the client gave.
        name: String,
        /// The directory that holds that name.
        path: PathBuf,
    },
    /// The embedded Python shim or bundled tools cannot be written to the
    /// pool's private directory.
    #[error(transparent)]
    Install(#[from] crate::embedded::InstallError),
    /// No worker started; the error of the first that failed (it could not
    /// be spawned, died, hung, spoke another protocol version).
    #[error("worker could not start: {0}")]
    WorkerStart(#[from] crate::worker::StartError),
    /// The worker's catalog reply was an error, malformed, or did not come;
    /// the text says which.
    #[error("the catalog could not be built: {0}")]
    Catalog(String),
    /// A setting that cannot be used as given (an overflowing limit, a
    /// session id that is not one path component).
    #[error("{0}")]
    Setting(String),
    /// `--sandbox` was asked for and cannot be had (names what is missing).
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
}
