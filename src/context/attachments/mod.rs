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
//!
//! The files: the store's registrations (here), the records, options and
//! errors (`records.rs`), the manifest and its locking and merge
//! (`manifest.rs`), path confinement (`confine.rs`), file names, ids and
//! hashing (`files.rs`), the callback adapter (`callbacks.rs`).

mod callbacks;
mod confine;
mod files;
mod manifest;
mod records;

use std::io::Seek;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use serde_json::{Map, Value};

use files::{
    check_id, copy_and_hash, default_file_name, guess_mime, hash_file, random_id, safe_file_name,
};
use manifest::{manifest_of, State};
use records::{default_kind, io_error};
pub use records::{AttachmentError, AttachmentRecord, AttachmentRef, RegisterOptions};

/// Name of the folder under the workspace that holds the attachments' files
/// and the manifest.
pub(crate) const ATTACHMENTS_DIR: &str = "attachments";
/// Name of the manifest file, in [`ATTACHMENTS_DIR`].
pub(crate) const MANIFEST_FILE: &str = "attachments_manifest.json";

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
    ///
    /// ```
    /// use toolpool::context::{AttachmentStore, RegisterOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let workspace = dir.path().canonicalize()?;
    /// let store = AttachmentStore::open(&workspace, &workspace);
    /// let options = RegisterOptions {
    ///     display_name: Some("notes.txt".into()),
    ///     ..RegisterOptions::default()
    /// };
    /// let record = store.register_bytes(b"hello", options)?;
    /// let id = &record.reference.attachment_id;
    /// assert_eq!(store.get(id).map(|r| r.reference.size), Some(Some(5)));
    /// assert_eq!(record.reference.mime_type.as_deref(), Some("text/plain"));
    /// // Kept in the session's manifest, for the next pool on this workspace.
    /// assert!(AttachmentStore::open(&workspace, &workspace).get(id).is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
}

#[cfg(test)]
mod tests;
