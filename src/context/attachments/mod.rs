//! The session's attachment store, owned by the supervisor.
//!
//! The layout is the original convention's, so a session directory is shared
//! with its runtime: files under `<workspace>/attachments/<id>/`, the records
//! of the persisted ones in `<workspace>/attachments/attachments_manifest.json`
//! (`{id: {"ref": {...}, "kind", "description", "extra"}}`). A manifest at the
//! workspace root, where earlier toolpool versions kept it, is moved there
//! once (merged into one that is already there).
//!
//! One writer: every worker reaches the store through callbacks to the
//! supervisor (`callbacks.rs`), where a mutex serialises changes. The manifest
//! is rewritten whole on each change, to a temporary file renamed over it, so
//! a reader never sees half of it. Another process on the same session
//! directory (a second `toolpool call`, say) is covered too: writes take an
//! advisory lock on `<session>/.attachments.lock` and merge what is on disk
//! first, and reads pick up a manifest that changed on disk.

mod callbacks;
mod files;
mod records;

use std::collections::HashMap;
use std::fs::File;
use std::io::{Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde_json::{Map, Value};

use files::{
    check_id, copy_and_hash, default_file_name, guess_mime, hash_file, random_id, safe_file_name,
};
use records::{default_kind, io_error};
pub use records::{AttachmentError, AttachmentRecord, AttachmentRef, RegisterOptions};

/// Name of the folder under the workspace that holds the attachments' files
/// and the manifest.
pub const ATTACHMENTS_DIR: &str = "attachments";
/// Name of the manifest file, in [`ATTACHMENTS_DIR`].
pub const MANIFEST_FILE: &str = "attachments_manifest.json";

/// What the manifest on disk looked like when last read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    len: u64,
    mtime_ns: i128,
    ino: u64,
}

impl Fingerprint {
    fn of(path: &Path) -> Option<Fingerprint> {
        let meta = std::fs::metadata(path).ok()?;
        Some(Fingerprint {
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ino: meta.ino(),
        })
    }
}

#[derive(Default)]
struct State {
    /// In registration order.
    records: Vec<AttachmentRecord>,
    index: HashMap<String, usize>,
    persistent: std::collections::HashSet<String>,
    seen: Option<Fingerprint>,
}

impl State {
    fn get(&self, id: &str) -> Option<&AttachmentRecord> {
        self.index.get(id).map(|&i| &self.records[i])
    }

    fn insert(&mut self, record: AttachmentRecord, persist: bool) {
        let id = record.id().to_string();
        if persist {
            self.persistent.insert(id.clone());
        } else {
            self.persistent.remove(&id);
        }
        match self.index.get(&id) {
            Some(&i) => self.records[i] = record,
            None => {
                self.index.insert(id, self.records.len());
                self.records.push(record);
            }
        }
    }
}

/// The attachment store of one session directory. Its methods block (file
/// copies, hashing, the manifest); call them from blocking threads.
pub struct AttachmentStore {
    workspace: PathBuf,
    root: PathBuf,
    manifest: PathBuf,
    lock_file: PathBuf,
    state: Mutex<State>,
    temp_counter: AtomicU64,
}

impl std::fmt::Debug for AttachmentStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttachmentStore")
            .field("root", &self.root)
            .field("manifest", &self.manifest)
            .finish()
    }
}

impl AttachmentStore {
    /// The store of `workspace` (canonical), locking through a file in
    /// `session_dir`; reads the manifest when there is one.
    pub fn open(workspace: &Path, session_dir: &Path) -> AttachmentStore {
        let store = AttachmentStore {
            workspace: workspace.to_path_buf(),
            root: workspace.join(ATTACHMENTS_DIR),
            manifest: workspace.join(ATTACHMENTS_DIR).join(MANIFEST_FILE),
            lock_file: session_dir.join(".attachments.lock"),
            state: Mutex::new(State::default()),
            temp_counter: AtomicU64::new(0),
        };
        if let Err(e) = store.move_earlier_manifest() {
            tracing::warn!("the attachment manifest of an earlier version was not moved: {e}");
        }
        let mut state = store.lock_state();
        store.refresh(&mut state);
        drop(state);
        store
    }

    /// `<workspace>/attachments`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<workspace>/attachments/attachments_manifest.json`.
    pub fn manifest_path(&self) -> &Path {
        &self.manifest
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (every
        // change is one insert), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The record of `id`, if there is one.
    pub fn get(&self, id: &str) -> Option<AttachmentRecord> {
        let mut state = self.lock_state();
        self.refresh(&mut state);
        state.get(id).cloned()
    }

    /// Every record, in registration order.
    pub fn list(&self) -> Vec<AttachmentRecord> {
        let mut state = self.lock_state();
        self.refresh(&mut state);
        state.records.clone()
    }

    /// The persisted records, as the manifest holds them (`{id: record}`).
    pub fn export_manifest(&self) -> Map<String, Value> {
        let mut state = self.lock_state();
        self.refresh(&mut state);
        manifest_of(&state)
    }

    /// Registers a file of the workspace (`path` absolute, or relative to
    /// the workspace). Paths that lead outside it, also through a symbolic
    /// link, are refused.
    pub fn register_file(
        &self,
        path: &Path,
        options: RegisterOptions,
    ) -> Result<AttachmentRecord, AttachmentError> {
        let source = self.resolve_in_workspace(path)?;
        let display = path.display().to_string();
        // Opened once, beneath the workspace: the checks, the hash and the
        // copy are all of this file, whatever happens to the path meanwhile.
        let mut input = self.open_beneath(&source)?;
        let meta = input.metadata().map_err(io_error("read", &source))?;
        if !meta.is_file() {
            return Err(AttachmentError::NotAFile(display));
        }
        let id = match &options.attachment_id {
            Some(id) => check_id(id)?,
            None => random_id(),
        };
        let file_name = source
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "attachment.bin".into());
        let mut digest = None;
        if options.deduplicate {
            let (sha, _) = hash_file(&mut input, &source)?;
            input
                .seek(std::io::SeekFrom::Start(0))
                .map_err(io_error("read", &source))?;
            let source_text = source.to_string_lossy();
            let mut state = self.lock_state();
            self.refresh(&mut state);
            let existing = state.records.iter().rev().find(|r| {
                r.reference.sha256.as_deref() == Some(sha.as_str())
                    && (options.copy_file
                        || r.reference.local_path.as_deref() == Some(&*source_text))
            });
            if let Some(existing) = existing {
                return Ok(existing.clone());
            }
            digest = Some(sha);
        }
        let (local_path, sha256, size) = if options.copy_file {
            let dir = self.root.join(&id);
            std::fs::create_dir_all(&dir).map_err(io_error("create", &dir))?;
            let target = dir.join(&file_name);
            let (sha, size) = copy_and_hash(&mut input, &source, &target)?;
            (target, sha, size)
        } else {
            let (sha, size) = match digest {
                Some(sha) => (sha, meta.len()),
                None => hash_file(&mut input, &source)?,
            };
            (source.clone(), sha, size)
        };
        let mime_type = options
            .mime_type
            .clone()
            .unwrap_or_else(|| guess_mime(&file_name).to_string());
        let record = AttachmentRecord {
            reference: AttachmentRef {
                attachment_id: id,
                mime_type: Some(mime_type),
                name: Some(options.display_name.clone().unwrap_or(file_name)),
                size: Some(size),
                sha256: Some(sha256),
                local_path: Some(local_path.to_string_lossy().into_owned()),
                remote_file_id: None,
                data_uri: None,
                metadata: Map::new(),
            },
            kind: options.kind.clone().unwrap_or_else(default_kind),
            description: options.description.clone(),
            extra: options.extra.clone(),
        };
        self.commit(record, options.persist)
    }

    /// Registers bytes as a file `attachments/<id>/<name>` (`name` from
    /// `display_name`, else `attachment.bin`).
    pub fn register_bytes(
        &self,
        data: &[u8],
        options: RegisterOptions,
    ) -> Result<AttachmentRecord, AttachmentError> {
        let id = match &options.attachment_id {
            Some(id) => check_id(id)?,
            None => random_id(),
        };
        let name = options
            .display_name
            .clone()
            .unwrap_or_else(|| default_file_name(options.mime_type.as_deref()));
        let file_name = safe_file_name(&name);
        let dir = self.root.join(&id);
        std::fs::create_dir_all(&dir).map_err(io_error("create", &dir))?;
        let target = dir.join(&file_name);
        std::fs::write(&target, data).map_err(io_error("write", &target))?;
        let options = RegisterOptions {
            attachment_id: Some(id),
            display_name: Some(name),
            copy_file: false,
            deduplicate: false,
            ..options
        };
        self.register_file(&target, options)
    }

    /// Registers a file already uploaded to a provider (`remote_file_id`);
    /// the store holds no bytes of it.
    pub fn register_remote_file(
        &self,
        remote_file_id: &str,
        size: Option<u64>,
        options: RegisterOptions,
    ) -> Result<AttachmentRecord, AttachmentError> {
        let id = match &options.attachment_id {
            Some(id) => check_id(id)?,
            None => random_id(),
        };
        let record = AttachmentRecord {
            reference: AttachmentRef {
                attachment_id: id,
                mime_type: options.mime_type,
                name: options.display_name,
                size,
                sha256: None,
                local_path: None,
                remote_file_id: Some(remote_file_id.to_string()),
                data_uri: None,
                metadata: Map::new(),
            },
            kind: options.kind.unwrap_or_else(default_kind),
            description: options.description,
            extra: options.extra,
        };
        self.commit(record, options.persist)
    }

    /// Sets the provider file id of a record (`UnknownId` when there is none);
    /// the manifest is rewritten when the record is in it.
    pub fn update_remote_file_id(
        &self,
        id: &str,
        remote_file_id: &str,
    ) -> Result<(), AttachmentError> {
        let persisted = {
            let mut state = self.lock_state();
            self.refresh(&mut state);
            state.persistent.contains(id)
        };
        self.change(persisted, |state| {
            let i = *state
                .index
                .get(id)
                .ok_or_else(|| AttachmentError::UnknownId(id.to_string()))?;
            state.records[i].reference.remote_file_id = Some(remote_file_id.to_string());
            Ok(())
        })
    }

    /// Imports a record made elsewhere (a session upload, another store).
    /// Its file, when it has one that exists, must be in the workspace; with
    /// `copy_file` it is copied to `attachments/<id>/`.
    pub fn ingest_record(
        &self,
        mut record: AttachmentRecord,
        copy_file: bool,
        persist: bool,
    ) -> Result<AttachmentRecord, AttachmentError> {
        let id = match record.reference.attachment_id.as_str() {
            "" => random_id(),
            id => check_id(id)?,
        };
        record.reference.attachment_id = id.clone();
        if let Some(local) = record.reference.local_path.clone() {
            let path = Path::new(&local);
            if path.exists() {
                let source = self.resolve_in_workspace(path)?;
                let mut kept = source.clone();
                if copy_file && source.is_file() {
                    let dir = self.root.join(&id);
                    std::fs::create_dir_all(&dir).map_err(io_error("create", &dir))?;
                    let name = source.file_name().map(|n| n.to_string_lossy().into_owned());
                    let target = dir.join(safe_file_name(name.as_deref().unwrap_or_default()));
                    if target != source {
                        copy_and_hash(&mut self.open_beneath(&source)?, &source, &target)?;
                    }
                    kept = target;
                }
                record.reference.local_path = Some(kept.to_string_lossy().into_owned());
            }
        }
        self.commit(record, persist)
    }

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

    fn commit(
        &self,
        record: AttachmentRecord,
        persist: bool,
    ) -> Result<AttachmentRecord, AttachmentError> {
        self.change(persist, |state| {
            state.insert(record.clone(), persist);
            Ok(())
        })?;
        Ok(record)
    }

    /// Applies `change` to the records as they are on disk now; with
    /// `persist`, under the cross-process lock, then writes the manifest.
    fn change<T>(
        &self,
        persist: bool,
        change: impl FnOnce(&mut State) -> Result<T, AttachmentError>,
    ) -> Result<T, AttachmentError> {
        let _guard = if persist {
            Some(self.lock_session()?)
        } else {
            None
        };
        let mut state = self.lock_state();
        self.refresh(&mut state);
        let value = change(&mut state)?;
        if persist {
            self.write_manifest(&mut state)?;
        }
        Ok(value)
    }

    /// Moves a manifest at the workspace root (where earlier versions kept
    /// it) into `attachments/`, merging it into one already there.
    fn move_earlier_manifest(&self) -> Result<(), AttachmentError> {
        let earlier = self.workspace.join(MANIFEST_FILE);
        if !earlier.is_file() {
            return Ok(());
        }
        let _guard = self.lock_session()?;
        if !earlier.is_file() {
            return Ok(()); // another process moved it meanwhile
        }
        std::fs::create_dir_all(&self.root).map_err(io_error("create", &self.root))?;
        if !self.manifest.exists() {
            std::fs::rename(&earlier, &self.manifest).map_err(io_error("move", &earlier))?;
        } else {
            let records = read_manifest(&earlier).map_err(AttachmentError::InvalidArgument)?;
            let mut state = self.lock_state();
            self.refresh(&mut state);
            for record in records {
                if state.get(record.id()).is_none() {
                    state.insert(record, true);
                }
            }
            self.write_manifest(&mut state)?;
            std::fs::remove_file(&earlier).map_err(io_error("remove", &earlier))?;
        }
        tracing::info!(
            "attachment manifest moved to {}, where the original convention keeps it",
            self.manifest.display()
        );
        Ok(())
    }

    /// The canonical path of `path` if it is inside the workspace.
    fn resolve_in_workspace(&self, path: &Path) -> Result<PathBuf, AttachmentError> {
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

    /// Merges the manifest on disk into `state` when it changed since we
    /// last read or wrote it (another process wrote it).
    fn refresh(&self, state: &mut State) {
        let now = Fingerprint::of(&self.manifest);
        if now.is_none() || now == state.seen {
            return;
        }
        match read_manifest(&self.manifest) {
            Ok(records) => {
                for record in records {
                    state.insert(record, true);
                }
            }
            Err(e) => tracing::warn!("attachment manifest not read: {e}"),
        }
        state.seen = now;
    }

    /// The advisory lock that serialises writers of this session's manifest
    /// across processes.
    fn lock_session(&self) -> Result<nix::fcntl::Flock<File>, AttachmentError> {
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock_file)
            .map_err(io_error("open", &self.lock_file))?;
        nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| io_error("lock", &self.lock_file)(errno.into()))
    }

    /// Writes the persisted records to a temporary file renamed over the
    /// manifest; the caller holds the cross-process lock.
    fn write_manifest(&self, state: &mut State) -> Result<(), AttachmentError> {
        std::fs::create_dir_all(&self.root).map_err(io_error("create", &self.root))?;
        let text =
            serde_json::to_string_pretty(&Value::Object(manifest_of(state))).map_err(|e| {
                AttachmentError::InvalidArgument(format!("record cannot be written: {e}"))
            })?;
        let temp = self.root.join(format!(
            ".{MANIFEST_FILE}.{}.{}.tmp",
            std::process::id(),
            self.temp_counter.fetch_add(1, Ordering::Relaxed)
        ));
        let written = File::create(&temp)
            .and_then(|mut f| {
                f.write_all(text.as_bytes())?;
                f.write_all(b"\n")?;
                f.sync_data()
            })
            .and_then(|()| std::fs::rename(&temp, &self.manifest));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(io_error("write", &self.manifest)(e));
        }
        state.seen = Fingerprint::of(&self.manifest);
        Ok(())
    }
}

fn manifest_of(state: &State) -> Map<String, Value> {
    state
        .records
        .iter()
        .filter(|r| state.persistent.contains(r.id()))
        .map(|r| (r.id().to_string(), r.to_json()))
        .collect()
}

fn read_manifest(path: &Path) -> Result<Vec<AttachmentRecord>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let map: Map<String, Value> =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut records = Vec::new();
    for (id, value) in map {
        match serde_json::from_value::<AttachmentRecord>(value) {
            Ok(mut record) => {
                if record.reference.attachment_id.is_empty() {
                    record.reference.attachment_id = id;
                }
                records.push(record);
            }
            Err(e) => tracing::warn!(attachment = %id, "manifest entry skipped: {e}"),
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, AttachmentStore) {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("code_workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        let workspace = workspace.canonicalize().unwrap();
        let store = AttachmentStore::open(&workspace, dir.path());
        (dir, store)
    }

    #[test]
    fn registered_file_is_copied_hashed_and_persisted() {
        let (dir, store) = store();
        let workspace = dir.path().join("code_workspace");
        std::fs::write(workspace.join("a.txt"), b"hello").unwrap();
        let record = store
            .register_file(Path::new("a.txt"), RegisterOptions::default())
            .unwrap();
        assert_eq!(record.reference.size, Some(5));
        assert_eq!(
            record.reference.sha256.as_deref(),
            Some("2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
        );
        assert_eq!(record.reference.mime_type.as_deref(), Some("text/plain"));
        let local = PathBuf::from(record.reference.local_path.clone().unwrap());
        assert!(local.starts_with(
            workspace
                .canonicalize()
                .unwrap()
                .join("attachments")
                .join(record.id())
        ));
        assert_eq!(std::fs::read(&local).unwrap(), b"hello");
        let manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(store.manifest_path()).unwrap()).unwrap();
        assert_eq!(manifest[record.id()]["ref"]["name"], "a.txt");
        // A new store on the same session reads it back.
        let again = AttachmentStore::open(&workspace.canonicalize().unwrap(), dir.path());
        assert_eq!(again.get(record.id()), Some(record));
    }

    #[test]
    fn paths_outside_the_workspace_are_refused() {
        let (dir, store) = store();
        let workspace = dir.path().join("code_workspace");
        std::fs::write(dir.path().join("secret.txt"), b"s").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), workspace.join("link")).unwrap();
        for path in ["../secret.txt", "link", "/etc/hostname", "../nope"] {
            let error = store
                .register_file(Path::new(path), RegisterOptions::default())
                .unwrap_err();
            assert_eq!(error.type_name(), "PermissionError", "{path}: {error}");
        }
        let error = store
            .register_file(Path::new("missing.txt"), RegisterOptions::default())
            .unwrap_err();
        assert_eq!(error.type_name(), "FileNotFoundError");
    }

    #[test]
    fn deduplicate_returns_the_existing_record() {
        let (dir, store) = store();
        let workspace = dir.path().join("code_workspace");
        std::fs::write(workspace.join("a.txt"), b"same").unwrap();
        std::fs::write(workspace.join("b.txt"), b"same").unwrap();
        let first = store
            .register_file(Path::new("a.txt"), RegisterOptions::default())
            .unwrap();
        let options = RegisterOptions {
            deduplicate: true,
            ..Default::default()
        };
        let second = store.register_file(Path::new("b.txt"), options).unwrap();
        assert_eq!(first.id(), second.id());
        assert_eq!(store.list().len(), 1);
    }

    #[test]
    fn unpersisted_records_stay_out_of_the_manifest() {
        let (dir, store) = store();
        let workspace = dir.path().join("code_workspace");
        std::fs::write(workspace.join("a.txt"), b"x").unwrap();
        let options = RegisterOptions {
            persist: false,
            copy_file: false,
            ..Default::default()
        };
        let record = store.register_file(Path::new("a.txt"), options).unwrap();
        assert!(store.get(record.id()).is_some());
        assert!(store.export_manifest().is_empty());
        assert_eq!(
            record.reference.local_path.as_deref(),
            Some(
                &*workspace
                    .canonicalize()
                    .unwrap()
                    .join("a.txt")
                    .to_string_lossy()
            )
        );
    }

    #[test]
    fn bytes_get_a_safe_file_name() {
        let (_dir, store) = store();
        let options = RegisterOptions {
            display_name: Some("../../evil.txt".into()),
            ..Default::default()
        };
        let record = store.register_bytes(b"data", options).unwrap();
        let local = PathBuf::from(record.reference.local_path.clone().unwrap());
        assert!(local.starts_with(store.root()));
        assert_eq!(std::fs::read(local).unwrap(), b"data");
        let error = store
            .register_bytes(
                b"x",
                RegisterOptions {
                    attachment_id: Some("../x".into()),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert_eq!(error.type_name(), "ValueError");
    }

    #[test]
    fn another_process_writes_are_merged() {
        let (dir, store) = store();
        let workspace = dir.path().join("code_workspace").canonicalize().unwrap();
        let other = AttachmentStore::open(&workspace, dir.path());
        let a = store
            .register_bytes(b"a", RegisterOptions::default())
            .unwrap();
        let b = other
            .register_bytes(b"b", RegisterOptions::default())
            .unwrap();
        let c = store
            .register_bytes(b"c", RegisterOptions::default())
            .unwrap();
        let manifest = store.export_manifest();
        for record in [&a, &b, &c] {
            assert!(manifest.contains_key(record.id()));
        }
        assert!(other.get(c.id()).is_some());
    }

    fn manifest_with(record_id: &str, name: &str) -> String {
        serde_json::json!({record_id: {"ref": {"attachment_id": record_id, "name": name}, "kind": "file",
                                        "description": null, "extra": {}}})
        .to_string()
    }

    #[test]
    fn a_manifest_where_earlier_versions_kept_it_is_moved_once() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("code_workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        let workspace = workspace.canonicalize().unwrap();
        std::fs::write(
            workspace.join(MANIFEST_FILE),
            manifest_with("old-1", "a.txt"),
        )
        .unwrap();
        let store = AttachmentStore::open(&workspace, dir.path());
        assert!(!workspace.join(MANIFEST_FILE).exists());
        assert_eq!(
            store.manifest_path(),
            workspace.join("attachments").join(MANIFEST_FILE)
        );
        assert!(store.manifest_path().is_file());
        assert_eq!(
            store.get("old-1").unwrap().reference.name.as_deref(),
            Some("a.txt")
        );

        // One at the old place beside one at the new: merged, the new one's records kept.
        std::fs::write(
            workspace.join(MANIFEST_FILE),
            manifest_with("old-2", "b.txt"),
        )
        .unwrap();
        store
            .register_remote_file(
                "file-9",
                None,
                RegisterOptions {
                    attachment_id: Some("new-1".into()),
                    ..RegisterOptions::default()
                },
            )
            .unwrap();
        let reopened = AttachmentStore::open(&workspace, dir.path());
        assert!(!workspace.join(MANIFEST_FILE).exists());
        for id in ["old-1", "old-2", "new-1"] {
            assert!(reopened.export_manifest().contains_key(id), "{id}");
        }
    }

    #[test]
    fn remote_files_get_provider_ids_and_unknown_ids_are_key_errors() {
        let (_dir, store) = store();
        let record = store
            .register_remote_file(
                "file-1",
                Some(10),
                RegisterOptions {
                    display_name: Some("r.pdf".into()),
                    ..RegisterOptions::default()
                },
            )
            .unwrap();
        assert_eq!(record.reference.local_path, None);
        store.update_remote_file_id(record.id(), "file-2").unwrap();
        let manifest = store.export_manifest();
        assert_eq!(manifest[record.id()]["ref"]["remote_file_id"], "file-2");
        let error = store.update_remote_file_id("nope", "x").unwrap_err();
        assert_eq!(
            (error.type_name(), error.to_string().as_str()),
            ("KeyError", "Attachment 'nope' not found")
        );
    }

    #[test]
    fn ingested_records_copy_workspace_files_and_refuse_others() {
        let (dir, store) = store();
        let workspace = dir.path().join("code_workspace").canonicalize().unwrap();
        std::fs::write(workspace.join("up.txt"), b"upload").unwrap();
        let record: AttachmentRecord = serde_json::from_value(serde_json::json!({
            "ref": {"attachment_id": "up-1", "name": "up.txt",
                    "local_path": workspace.join("up.txt")}, "kind": "file"}))
        .unwrap();
        let ingested = store.ingest_record(record.clone(), true, true).unwrap();
        let copied = workspace.join("attachments").join("up-1").join("up.txt");
        assert_eq!(ingested.reference.local_path.as_deref(), copied.to_str());
        assert_eq!(std::fs::read(&copied).unwrap(), b"upload");

        let outside = dir.path().join("secret.txt");
        std::fs::write(&outside, b"secret").unwrap();
        let mut foreign = record;
        foreign.reference.local_path = Some(outside.to_string_lossy().into_owned());
        let error = store.ingest_record(foreign, true, true).unwrap_err();
        assert_eq!(error.type_name(), "PermissionError", "{error}");
    }

    #[test]
    fn confine_keeps_only_files_inside_the_workspace() {
        let (dir, store) = store();
        let workspace = dir.path().join("code_workspace").canonicalize().unwrap();
        std::fs::write(workspace.join("in.txt"), b"x").unwrap();
        std::fs::write(dir.path().join("out.txt"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("out.txt"), workspace.join("link.txt")).unwrap();
        assert_eq!(store.confine("in.txt"), Some(workspace.join("in.txt")));
        assert_eq!(
            store.confine(&workspace.join("in.txt").to_string_lossy()),
            Some(workspace.join("in.txt"))
        );
        assert_eq!(store.confine("link.txt"), None);
        assert_eq!(store.confine("../out.txt"), None);
        assert_eq!(store.confine("/etc/passwd"), None);
        assert_eq!(store.confine("."), None);
    }

    #[test]
    fn reads_stay_beneath_the_workspace_while_a_directory_is_swapped_for_a_link() {
        let (dir, store) = store();
        let workspace = dir.path().join("code_workspace").canonicalize().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(workspace.join("d")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(workspace.join("d/f.txt"), b"inside").unwrap();
        std::fs::write(outside.join("f.txt"), b"SECRET").unwrap();
        std::os::unix::fs::symlink(&outside, workspace.join("swap")).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // A racing process would do this: swap the directory and the link, again and again.
        let racer = {
            let stop = stop.clone();
            let (a, b) = (
                std::ffi::CString::new(workspace.join("d").to_str().unwrap()).unwrap(),
                std::ffi::CString::new(workspace.join("swap").to_str().unwrap()).unwrap(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: two valid NUL-terminated paths; renameat2 only renames.
                    unsafe {
                        libc::renameat2(
                            libc::AT_FDCWD,
                            a.as_ptr(),
                            libc::AT_FDCWD,
                            b.as_ptr(),
                            libc::RENAME_EXCHANGE,
                        );
                    }
                }
            })
        };
        let (mut inside, mut leaked) = (0, 0);
        for _ in 0..3000 {
            match store.read_beneath(Path::new("d/f.txt"), 1024).as_deref() {
                Some(b"inside") => inside += 1,
                Some(_) => leaked += 1,
                None => {}
            }
        }
        stop.store(true, Ordering::Relaxed);
        racer.join().unwrap();
        assert_eq!(
            leaked, 0,
            "a read led outside the workspace ({inside} stayed inside)"
        );
        assert!(inside > 0, "no read succeeded at all");
    }
}
