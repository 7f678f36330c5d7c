//! [`PoolError`]: what can stop a pool from starting.

use std::path::PathBuf;

/// What stops a pool from being built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    #[error("python interpreter '{python}' cannot be run: {reason}")]
    Interpreter { python: String, reason: String },
    #[error("functions directory {0} does not exist or is not a directory")]
    FunctionsDir(PathBuf),
    #[error("cannot create session directory {path}: {source}")]
    SessionDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A client named a session whose directory toolpool did not make.
    #[error("session '{name}' is not a toolpool session: {path} exists and was not made by toolpool (it has no .toolpool-session file); name another session")]
    NotASession { name: String, path: PathBuf },
    #[error(transparent)]
    Install(#[from] crate::embedded::InstallError),
    #[error("worker could not start: {0}")]
    WorkerStart(#[from] crate::worker::StartError),
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
