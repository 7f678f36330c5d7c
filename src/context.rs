//! Session directories: where a session's files live and what a tool's
//! `_context` points at.

use std::path::{Path, PathBuf};

use crate::error::PoolError;

/// A session's directories, created and made absolute.
#[derive(Debug, Clone)]
pub struct SessionPaths {
    pub id: String,
    /// `graph_directory` in `_context`.
    pub dir: PathBuf,
    /// `python_workspace_root` in `_context`; the workers' cwd.
    pub workspace: PathBuf,
}

impl SessionPaths {
    /// `dir` defaults to `.toolpool/sessions/<id>` under the current directory.
    pub fn prepare(id: &str, dir: Option<&Path>) -> Result<SessionPaths, PoolError> {
        let dir = match dir {
            Some(dir) => dir.to_path_buf(),
            None => PathBuf::from(".toolpool").join("sessions").join(id),
        };
        let workspace = dir.join("code_workspace");
        let error = |source| PoolError::SessionDir {
            path: workspace.clone(),
            source,
        };
        std::fs::create_dir_all(&workspace).map_err(error)?;
        Ok(SessionPaths {
            id: id.to_string(),
            dir: dir.canonicalize().map_err(error)?,
            workspace: workspace.canonicalize().map_err(error)?,
        })
    }
}
