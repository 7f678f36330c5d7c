//! Path confinement: every path a tool gives the store is resolved inside
//! the workspace, lexically and through symbolic links, and opened beneath
//! it by the kernel.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::records::io_error;
use super::{AttachmentError, AttachmentStore};

impl AttachmentStore {
    /// Opens `path` (absolute, or relative to the workspace) for reading,
    /// resolved beneath the workspace by the kernel (`openat2` with
    /// `RESOLVE_BENEATH`): a directory swapped for a symbolic link to outside
    /// between a check and the open cannot lead out. Where the kernel has no
    /// `openat2`, the checked canonical path is opened.
    pub fn open_beneath(&self, path: &Path) -> Result<File, AttachmentError> {
        use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
        let real = self.resolve_in_workspace(path)?;
        let relative = real.strip_prefix(&self.workspace).unwrap_or(Path::new(""));
        let relative = if relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            relative
        };
        let workspace = File::open(&self.workspace).map_err(io_error("open", &self.workspace))?;
        // O_NONBLOCK: opening a FIFO planted there does not hang the store.
        let how = OpenHow::new()
            .flags(OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        match openat2(&workspace, relative, how) {
            Ok(fd) => Ok(File::from(fd)),
            Err(nix::errno::Errno::ENOSYS) => File::open(&real).map_err(io_error("read", &real)),
            Err(nix::errno::Errno::EXDEV) => Err(AttachmentError::OutsideWorkspace {
                path: path.display().to_string(),
                workspace: self.workspace.clone(),
                detail: " (it changed to lead outside while being opened)".into(),
            }),
            Err(errno) => Err(io_error("read", &real)(errno.into())),
        }
    }

    /// The bytes of `path`, a regular file beneath the workspace of at most
    /// `limit` bytes (see [`Self::open_beneath`]); `None` otherwise.
    pub fn read_beneath(&self, path: &Path, limit: u64) -> Option<Vec<u8>> {
        use std::io::Read;
        let file = self.open_beneath(path).ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.len() > limit {
            return None;
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(limit + 1).read_to_end(&mut bytes).ok()?;
        (bytes.len() as u64 <= limit).then_some(bytes)
    }

    /// The canonical path of `path` when it is a regular file inside the
    /// workspace (also through symbolic links); `None` otherwise.
    pub fn confine(&self, path: &str) -> Option<PathBuf> {
        let real = self.resolve_in_workspace(Path::new(path)).ok()?;
        real.is_file().then_some(real)
    }

    /// The canonical path of `path` if it is inside the workspace.
    pub(super) fn resolve_in_workspace(&self, path: &Path) -> Result<PathBuf, AttachmentError> {
        let display = path.display().to_string();
        if display.contains('\0') {
            return Err(AttachmentError::InvalidArgument(format!(
                "path {display:?} contains a NUL character"
            )));
        }
        let joined = if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.workspace.join(path)
        };
        let outside = |detail: String| AttachmentError::OutsideWorkspace {
            path: display.clone(),
            workspace: self.workspace.clone(),
            detail,
        };
        // Lexically first: `../x` is refused even when it does not exist.
        let mut lexical = PathBuf::new();
        for part in joined.components() {
            match part {
                std::path::Component::ParentDir => {
                    lexical.pop();
                }
                std::path::Component::CurDir => {}
                other => lexical.push(other),
            }
        }
        let real = match lexical.canonicalize() {
            Ok(real) => real,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !lexical.starts_with(&self.workspace) {
                    return Err(outside(String::new()));
                }
                return Err(AttachmentError::NotFound(display));
            }
            Err(e) => return Err(io_error("resolve", &lexical)(e)),
        };
        if !real.starts_with(&self.workspace) {
            let detail = if lexical.starts_with(&self.workspace) {
                format!(
                    " through a symbolic link (it resolves to {})",
                    real.display()
                )
            } else {
                String::new()
            };
            return Err(outside(detail));
        }
        Ok(real)
    }
}
