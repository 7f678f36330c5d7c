//! What a tool's `_context` points at: the session's directories, and the
//! live services a tool reaches through callbacks to the supervisor while its
//! call is in flight (docs/writing-tools.md, "Context services"):
//!
//! - the attachment store ([`AttachmentStore`]), owned by the supervisor so that
//!   concurrent workers never write its manifest at the same time;
//! - human prompts ([`HumanPrompt`]), forwarded to whatever front end runs
//!   the pool: the terminal for the CLI ([`TerminalPrompt`]), elicitation
//!   over MCP, the embedder's own implementation in the library.
//!
//! `CallbackHandler` serves a worker's callbacks (`{"t": "call", ...}`
//! frames, see `docs/protocol.md`) for one call.

pub(crate) mod attachments;
mod callbacks;
mod logs;
mod params;
mod progress;
mod prompts;
pub(crate) mod sessions;
mod terminal;

use std::path::{Path, PathBuf};

use crate::pool_error::PoolError;
pub(crate) use crate::worker::CallbackService;

pub use attachments::{
    AttachmentError, AttachmentRecord, AttachmentRef, AttachmentStore, RegisterOptions,
};
pub(crate) use callbacks::{methods, CallbackHandler, SessionServices};
pub use logs::{LogLevel, LogListener, LogRecord, LogSubscription};
pub use progress::{progress_fn, Progress, ProgressListener};
pub(crate) use prompts::BoxFuture;
pub use prompts::{prompt_fn, HumanPrompt, PromptAnswer, PromptError, PromptRequest};
pub use sessions::{check_session_name, Session, SessionsRoot};
pub use terminal::{PromptInput, TerminalPrompt};

/// A session's directories, created and made absolute.
#[derive(Debug, Clone)]
pub struct SessionPaths {
    /// The session's id, one path component (`session_id` in `_context`).
    pub id: String,
    /// `graph_directory` in `_context`.
    pub dir: PathBuf,
    /// `python_workspace_root` in `_context`; the workers' cwd.
    pub workspace: PathBuf,
    /// `<dir>/site-packages`: where `install_python_packages` installs, on
    /// every worker's `sys.path` (`python_packages_dir` in `_context`).
    /// Created up front: Python caches a `sys.path` entry that does not
    /// exist as "nothing here" for the worker's lifetime.
    pub site_packages: PathBuf,
}

impl SessionPaths {
    /// `dir` defaults to `.toolpool/sessions/<id>` under the current
    /// directory, or, where that cannot be made (a client that starts the
    /// server in `/`), under the user's state directory
    /// (`$XDG_STATE_HOME/toolpool`, else `~/.local/state/toolpool`).
    pub fn prepare(id: &str, dir: Option<&Path>) -> Result<SessionPaths, PoolError> {
        check_session_id(id)?;
        let dir = match dir {
            Some(dir) => dir.to_path_buf(),
            None => default_session_dir(id)?,
        };
        let workspace = dir.join("code_workspace");
        let site_packages = dir.join("site-packages");
        // The attachment store's folder too, as the original runtime makes
        // it up front: tools that list the workspace see the same entries.
        let attachments = workspace.join(attachments::ATTACHMENTS_DIR);
        for path in [&attachments, &site_packages] {
            std::fs::create_dir_all(path).map_err(|source| PoolError::SessionDir {
                path: path.clone(),
                source,
            })?;
        }
        let canonical = |path: &Path| {
            path.canonicalize().map_err(|source| PoolError::SessionDir {
                path: path.to_path_buf(),
                source,
            })
        };
        Ok(SessionPaths {
            id: id.to_string(),
            dir: canonical(&dir)?,
            workspace: canonical(&workspace)?,
            site_packages: canonical(&site_packages)?,
        })
    }

    /// What a sandboxed worker started for this session is given to see.
    pub fn sandbox_mounts(&self) -> crate::sandbox::SessionMounts {
        crate::sandbox::SessionMounts {
            dir: self.dir.clone(),
            workspace: self.workspace.clone(),
            packages_dir: self.site_packages.clone(),
            attachments_dir: self.workspace.join(attachments::ATTACHMENTS_DIR),
        }
    }
}

/// `.toolpool/sessions/<id>` under the current directory if it is there or
/// can be made, else `<state dir>/sessions/<id>`; an error naming
/// `--session-dir` when neither can.
fn default_session_dir(id: &str) -> Result<PathBuf, PoolError> {
    let here = PathBuf::from(".toolpool").join("sessions").join(id);
    let here_error = match std::fs::create_dir_all(&here) {
        Ok(()) => return Ok(here),
        Err(e) => e,
    };
    let Some(state) = state_dir() else {
        return Err(no_default_dir(&here, here_error));
    };
    let there = state.join("sessions").join(id);
    match std::fs::create_dir_all(&there) {
        Ok(()) => {
            tracing::info!(
                dir = %there.display(),
                "the current directory cannot hold .toolpool ({here_error}): the session directory is under the user's state directory"
            );
            Ok(there)
        }
        Err(_) => Err(no_default_dir(&here, here_error)),
    }
}

fn no_default_dir(here: &Path, source: std::io::Error) -> PoolError {
    PoolError::SessionDir {
        path: here.to_path_buf(),
        source: std::io::Error::new(
            source.kind(),
            format!(
                "{source}; nor can the user's state directory hold one: pass --session-dir DIR"
            ),
        ),
    }
}

/// The user's state directory for toolpool: `$XDG_STATE_HOME/toolpool`,
/// else `~/.local/state/toolpool`.
pub(crate) fn state_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("toolpool"));
    }
    let home = std::env::var_os("HOME").filter(|d| !d.is_empty())?;
    Some(
        PathBuf::from(home)
            .join(".local")
            .join("state")
            .join("toolpool"),
    )
}

/// `message` cut to at most `limit` bytes (at a character boundary), with
/// `…` after a cut.
pub(crate) fn cut(mut message: String, limit: usize) -> String {
    if message.len() > limit {
        let mut end = limit;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

/// A session id names one directory under `.toolpool/sessions` (and is
/// what tools see): one path component, so it can never point elsewhere.
fn check_session_id(id: &str) -> Result<(), PoolError> {
    let refused = id.is_empty()
        || id == "."
        || id == ".."
        || id.contains(['/', '\\', '\0'])
        || id.len() > 255;
    if refused {
        return Err(PoolError::Setting(format!(
            "session id {id:?} must be one path component: not empty, '.' or '..', no '/', '\\' or NUL, at most 255 bytes"
        )));
    }
    Ok(())
}
