//! The manifest on disk and the records in memory: the cross-process lock,
//! merging what another process wrote, the whole-file rewrite, and moving a
//! manifest from where earlier versions kept it.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::Ordering;

use serde_json::{Map, Value};

use super::records::io_error;
use super::{AttachmentError, AttachmentRecord, AttachmentStore, MANIFEST_FILE};

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
pub(super) struct State {
    /// In registration order.
    pub(super) records: Vec<AttachmentRecord>,
    pub(super) index: HashMap<String, usize>,
    pub(super) persistent: HashSet<String>,
    seen: Option<Fingerprint>,
}

impl State {
    pub(super) fn get(&self, id: &str) -> Option<&AttachmentRecord> {
        self.index.get(id).map(|&i| &self.records[i])
    }

    pub(super) fn insert(&mut self, record: AttachmentRecord, persist: bool) {
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

impl AttachmentStore {
    pub(super) fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (every
        // change is one insert), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn commit(
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
    pub(super) fn change<T>(
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
    pub(super) fn move_earlier_manifest(&self) -> Result<(), AttachmentError> {
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

    /// Merges the manifest on disk into `state` when it changed since we
    /// last read or wrote it (another process wrote it).
    pub(super) fn refresh(&self, state: &mut State) {
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

pub(super) fn manifest_of(state: &State) -> Map<String, Value> {
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
