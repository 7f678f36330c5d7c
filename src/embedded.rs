//! The shim and the bundled tools, embedded in the binary and written for
//! each pool into a private directory of its own ([`PrivateInstall`]), so a
//! copied or installed binary works from any directory and no pool runs
//! files another process could have changed.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/embedded_files.rs"));

/// The shim or the bundled tools could not be written out.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the embedded {what} to {path}: {source}")]
pub struct InstallError {
    what: &'static str,
    path: PathBuf,
    source: std::io::Error,
}

/// Where the embedded files are written: `$XDG_CACHE_HOME/toolpool`,
/// `~/.cache/toolpool`, or a per-user folder under the temp directory.
pub(crate) fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("TOOLPOOL_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("toolpool");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".cache").join("toolpool");
    }
    std::env::temp_dir().join(format!("toolpool-{}", nix::unistd::getuid()))
}

/// One pool's copy of the shim, of the bundled tools and its code cache, in
/// a directory made afresh under `<cache root>/run/` (mode 0700), never
/// reused by another pool or process, and removed when dropped. Nothing a
/// process of the same user changes in a directory toolpool left behind —
/// a tool of an unsandboxed pool editing `sandbox.py`, a forged compiled
/// module — reaches a later pool.
#[derive(Debug)]
pub struct PrivateInstall {
    dir: PathBuf,
}

impl PrivateInstall {
    /// Makes the directory (and removes those of processes that are gone),
    /// under the cache root, or under a folder of this user's own in the
    /// temp directory when the cache root cannot be written (no home).
    pub fn new() -> Result<PrivateInstall, InstallError> {
        let err = |path: &Path, source| InstallError {
            what: "private directory",
            path: path.to_path_buf(),
            source,
        };
        let cache = cache_root().join("run");
        let run = match std::fs::create_dir_all(&cache) {
            Ok(()) => cache,
            Err(first) => {
                let fallback = std::env::temp_dir()
                    .join(format!("toolpool-{}", nix::unistd::getuid()))
                    .join("run");
                own_folder(&fallback).map_err(|_| err(&cache, first))?;
                fallback
            }
        };
        remove_abandoned(&run);
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut random = [0u8; 8];
        let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| {
            use std::io::Read;
            f.read_exact(&mut random)
        });
        let dir = run.join(format!(
            "{}-{}-{:016x}",
            std::process::id(),
            MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            u64::from_ne_bytes(random)
        ));
        // `create_dir`, not `_all`: a name someone else made is an error.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| err(&dir, e))?;
        Ok(PrivateInstall { dir })
    }

    /// The private directory, removed with this value.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The shim directory (holds `toolpool_boot.py`).
    pub fn shim(&self) -> Result<PathBuf, InstallError> {
        write_files(&self.dir.join("shim"), "python shim", SHIM_FILES)
    }

    /// The bundled tools, for when no functions directory exists where we
    /// run: as `functions/function_calling/` under a project root, like a
    /// checkout, so imports written for the convention resolve the same way.
    pub fn bundled_functions(&self) -> Result<PathBuf, InstallError> {
        let root = write_files(
            &self.dir.join("bundled"),
            "bundled tools",
            BUNDLED_FUNCTION_FILES,
        )?;
        Ok(root.join("functions").join("function_calling"))
    }

    /// Where the workers keep the tool modules' compiled code.
    pub fn code_cache(&self) -> PathBuf {
        self.dir.join("code")
    }
}

impl Drop for PrivateInstall {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Makes `dir` (and its parent) if needed, and checks that this user owns
/// both and nobody else may write them: in a shared temp directory another
/// user could have made them first, to swap what toolpool writes there.
fn own_folder(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let me = nix::unistd::getuid().as_raw();
    for folder in [dir.parent().unwrap_or(dir), dir] {
        let meta = std::fs::symlink_metadata(folder)?;
        if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("{} is not a folder of this user's alone", folder.display()),
            ));
        }
    }
    Ok(())
}

/// Writes `files` under `target` (made here: it must not exist) and returns it.
fn write_files(
    target: &Path,
    what: &'static str,
    files: &[(&str, &[u8])],
) -> Result<PathBuf, InstallError> {
    let err = |path: &Path, source| InstallError {
        what,
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir(target).map_err(|e| err(target, e))?;
    for (rel, bytes) in files {
        let path = target.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| err(parent, e))?;
        }
        std::fs::write(&path, bytes).map_err(|e| err(&path, e))?;
    }
    Ok(target.to_path_buf())
}

/// Removes the private directories under `run` whose process is gone (one
/// killed before it could remove its own). A directory of a live process,
/// or of a pid the kernel gave again, is left.
fn remove_abandoned(run: &Path) {
    let Ok(entries) = std::fs::read_dir(run) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.split('-').next()?.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shim_is_embedded_with_its_boot_script() {
        assert!(SHIM_FILES.iter().any(|(p, _)| *p == "toolpool_boot.py"));
        assert!(BUNDLED_FUNCTION_FILES
            .iter()
            .any(|(p, _)| *p == "functions/function_calling/file.py"));
    }

    #[test]
    fn each_install_is_fresh_private_and_removed_with_its_owner() {
        let first = PrivateInstall::new().unwrap();
        let second = PrivateInstall::new().unwrap();
        assert_ne!(first.path(), second.path());
        let shim = first.shim().unwrap();
        assert!(shim.join("toolpool_boot.py").is_file());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(first.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        // What another process changed in a directory left behind is
        // never used: the next install writes its own.
        std::fs::write(shim.join("toolpool_boot.py"), "tampered").unwrap();
        let again = second.shim().unwrap();
        assert_ne!(
            std::fs::read(again.join("toolpool_boot.py")).unwrap(),
            b"tampered"
        );
        let dir = first.path().to_path_buf();
        drop(first);
        assert!(!dir.exists());
    }
}
