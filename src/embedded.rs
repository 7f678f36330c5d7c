//! The shim and the bundled tools, embedded in the binary and written once to
//! a cache directory keyed by their content hash, so a copied or installed
//! binary works from any directory and two versions never share files.

use std::hash::Hasher;
use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/embedded_files.rs"));

#[derive(Debug, thiserror::Error)]
#[error("cannot write the embedded {what} to {path}: {source}")]
pub struct InstallError {
    what: &'static str,
    path: PathBuf,
    source: std::io::Error,
}

/// Where the embedded files are written: `$XDG_CACHE_HOME/toolpool`,
/// `~/.cache/toolpool`, or a per-user folder under the temp directory.
pub fn cache_root() -> PathBuf {
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

fn content_hash(files: &[(&str, &[u8])]) -> u64 {
    // SipHash with fixed keys: stable for a given binary, which is all a cache key needs.
    #[allow(deprecated)]
    let mut hasher = std::hash::SipHasher::new();
    for (path, bytes) in files {
        hasher.write(path.as_bytes());
        hasher.write_u8(0);
        hasher.write(bytes);
        hasher.write_u8(0);
    }
    hasher.finish()
}

/// Writes `files` under `<cache>/<prefix>-<hash>/` unless already there, and
/// returns that directory. Written to a temporary sibling and renamed, so a
/// concurrent process never sees a half-written tree.
fn install(
    root: &Path,
    what: &'static str,
    prefix: &str,
    files: &[(&str, &[u8])],
) -> Result<PathBuf, InstallError> {
    let target = root.join(format!("{prefix}-{:016x}", content_hash(files)));
    if target.is_dir() {
        return Ok(target);
    }
    let err = |path: &Path, source| InstallError {
        what,
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(root).map_err(|e| err(root, e))?;
    let staging = root.join(format!(
        ".{prefix}-{}-{}",
        std::process::id(),
        content_hash(files)
    ));
    let _ = std::fs::remove_dir_all(&staging);
    for (rel, bytes) in files {
        let path = staging.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| err(parent, e))?;
        }
        std::fs::write(&path, bytes).map_err(|e| err(&path, e))?;
    }
    match std::fs::rename(&staging, &target) {
        Ok(()) => Ok(target),
        // Another process installed the same content first: use theirs.
        Err(_) if target.is_dir() => {
            let _ = std::fs::remove_dir_all(&staging);
            Ok(target)
        }
        Err(e) => Err(err(&target, e)),
    }
}

/// The shim directory (holds `toolpool_boot.py`).
pub fn install_shim() -> Result<PathBuf, InstallError> {
    install(&cache_root(), "python shim", "shim", SHIM_FILES)
}

/// The bundled tools, for when no functions directory exists where we run.
pub fn install_bundled_functions() -> Result<PathBuf, InstallError> {
    // Installed as `functions/function_calling/` under a project root, like a
    // checkout, so imports written for the convention resolve the same way.
    let root = install(
        &cache_root(),
        "bundled tools",
        "bundled",
        BUNDLED_FUNCTION_FILES,
    )?;
    Ok(root.join("functions").join("function_calling"))
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
    fn install_is_idempotent_and_keyed_by_content() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let a = install(root, "test", "t", &[("x/a.py", b"one")]).unwrap();
        let again = install(root, "test", "t", &[("x/a.py", b"one")]).unwrap();
        let b = install(root, "test", "t", &[("x/a.py", b"two")]).unwrap();
        assert_eq!(a, again);
        assert_ne!(a, b);
        assert_eq!(std::fs::read(a.join("x/a.py")).unwrap(), b"one");
    }
}
