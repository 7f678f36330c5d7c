//! The session's attachment store, owned by the supervisor.
//!
//! Files live under `<workspace>/attachments/<id>/`; the records of the
//! persisted ones in `<workspace>/attachments_manifest.json`, in the original
//! convention's format (`{id: {"ref": {...}, "kind", "description", "extra"}}`),
//! so a manifest written by either reads in the other.
//!
//! One writer: every worker reaches the store through callbacks to the
//! supervisor, where a mutex serialises changes. The manifest is rewritten
//! whole on each change, to a temporary file renamed over it, so a reader
//! never sees half of it. Another process on the same session directory (a
//! second `toolpool call`, say) is covered too: writes take an advisory lock
//! on `<session>/.attachments.lock` and merge what is on disk first, and
//! reads pick up a manifest that changed on disk.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Name of the folder under the workspace that holds the attachments' files.
pub const ATTACHMENTS_DIR: &str = "attachments";
/// Name of the manifest file at the workspace root.
pub const MANIFEST_FILE: &str = "attachments_manifest.json";
/// Largest attachment id accepted from a caller.
const MAX_ID_LEN: usize = 128;

/// Where an attachment's bytes are and what they are (`record.ref`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttachmentRef {
    pub attachment_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_file_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_uri: Option<String>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

/// One attachment: its [`AttachmentRef`] plus what the registering tool said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttachmentRecord {
    #[serde(rename = "ref")]
    pub reference: AttachmentRef,
    /// `text`, `image`, `audio`, `video`, `file` or `data` (the original's
    /// `MessageBlockType` values); `file` by default.
    #[serde(default = "default_kind")]
    pub kind: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub extra: Map<String, Value>,
}

fn default_kind() -> String {
    "file".into()
}

impl AttachmentRecord {
    pub fn id(&self) -> &str {
        &self.reference.attachment_id
    }

    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// How to register an attachment; `Default` is the original's defaults
/// (copy the file, persist the record, no deduplication).
#[derive(Debug, Clone, PartialEq)]
pub struct RegisterOptions {
    pub kind: Option<String>,
    pub display_name: Option<String>,
    pub mime_type: Option<String>,
    /// A caller-chosen id (letters, digits, `-`, `_`); random when `None`.
    pub attachment_id: Option<String>,
    /// Copy the file into `attachments/<id>/` (else the record points at it).
    pub copy_file: bool,
    pub description: Option<String>,
    pub extra: Map<String, Value>,
    /// Write the record to the manifest (else it lives as long as the pool).
    pub persist: bool,
    /// Return an existing record with the same content instead (with
    /// `copy_file: false`, only one that points at the same file).
    pub deduplicate: bool,
}

impl Default for RegisterOptions {
    fn default() -> Self {
        RegisterOptions {
            kind: None,
            display_name: None,
            mime_type: None,
            attachment_id: None,
            copy_file: true,
            description: None,
            extra: Map::new(),
            persist: true,
            deduplicate: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AttachmentError {
    #[error("path {path:?} is outside the workspace ({workspace}){detail}")]
    OutsideWorkspace {
        path: String,
        workspace: PathBuf,
        detail: String,
    },
    #[error("no such file: {0:?}")]
    NotFound(String),
    #[error("{0:?} is not a regular file")]
    NotAFile(String),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    WrongType(String),
    #[error("cannot {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl AttachmentError {
    /// The Python exception type the tool sees.
    pub fn type_name(&self) -> &'static str {
        match self {
            AttachmentError::OutsideWorkspace { .. } => "PermissionError",
            AttachmentError::NotFound(_) => "FileNotFoundError",
            AttachmentError::NotAFile(_) => "IsADirectoryError",
            AttachmentError::InvalidArgument(_) => "ValueError",
            AttachmentError::WrongType(_) => "TypeError",
            AttachmentError::Io { .. } => "OSError",
        }
    }
}

fn io_error(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> AttachmentError {
    let path = path.to_path_buf();
    move |source| AttachmentError::Io { what, path, source }
}

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
            manifest: workspace.join(MANIFEST_FILE),
            lock_file: session_dir.join(".attachments.lock"),
            state: Mutex::new(State::default()),
            temp_counter: AtomicU64::new(0),
        };
        let mut state = store.lock_state();
        store.refresh(&mut state);
        drop(state);
        store
    }

    /// `<workspace>/attachments`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<workspace>/attachments_manifest.json`.
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
        let meta = std::fs::metadata(&source).map_err(io_error("read", &source))?;
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
            let (sha, _) = hash_file(&source)?;
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
            let (sha, size) = copy_and_hash(&source, &target)?;
            (target, sha, size)
        } else {
            let (sha, size) = match digest {
                Some(sha) => (sha, meta.len()),
                None => hash_file(&source)?,
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

    fn commit(
        &self,
        record: AttachmentRecord,
        persist: bool,
    ) -> Result<AttachmentRecord, AttachmentError> {
        let mut state = self.lock_state();
        self.refresh(&mut state);
        state.insert(record.clone(), persist);
        if persist {
            self.save(&mut state)?;
        }
        Ok(record)
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

    /// Writes the persisted records: under the cross-process lock, after
    /// merging what another process wrote, to a temporary file renamed over
    /// the manifest.
    fn save(&self, state: &mut State) -> Result<(), AttachmentError> {
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock_file)
            .map_err(io_error("open", &self.lock_file))?;
        let _guard = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| io_error("lock", &self.lock_file)(errno.into()))?;
        self.refresh(state);
        let text =
            serde_json::to_string_pretty(&Value::Object(manifest_of(state))).map_err(|e| {
                AttachmentError::InvalidArgument(format!("record cannot be written: {e}"))
            })?;
        let temp = self.workspace.join(format!(
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

    /// Serves one callback (`attachments.*`, see `docs/protocol.md`).
    pub fn handle(
        &self,
        method: &str,
        mut params: Map<String, Value>,
    ) -> Result<Value, AttachmentError> {
        use super::methods;
        match method {
            methods::REGISTER_FILE => {
                let path = take_string(&mut params, "path")?
                    .ok_or_else(|| AttachmentError::WrongType("path is required".into()))?;
                let options = take_options(&mut params)?;
                Ok(self.register_file(Path::new(&path), options)?.to_json())
            }
            methods::REGISTER_BYTES => {
                use base64::Engine as _;
                let encoded = take_string(&mut params, "data_base64")?
                    .ok_or_else(|| AttachmentError::WrongType("data_base64 is required".into()))?;
                let data = base64::engine::general_purpose::STANDARD
                    .decode(encoded.as_bytes())
                    .map_err(|e| {
                        AttachmentError::InvalidArgument(format!("data_base64 is not base64: {e}"))
                    })?;
                let options = take_options(&mut params)?;
                Ok(self.register_bytes(&data, options)?.to_json())
            }
            methods::GET => {
                let id = take_string(&mut params, "attachment_id")?.ok_or_else(|| {
                    AttachmentError::WrongType("attachment_id is required".into())
                })?;
                Ok(self.get(&id).map(|r| r.to_json()).unwrap_or(Value::Null))
            }
            methods::LIST => Ok(Value::Array(
                self.list().iter().map(|r| r.to_json()).collect(),
            )),
            methods::EXPORT_MANIFEST => Ok(Value::Object(self.export_manifest())),
            other => Err(AttachmentError::InvalidArgument(format!(
                "unknown attachment store method '{other}'"
            ))),
        }
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

fn take_string(
    params: &mut Map<String, Value>,
    key: &str,
) -> Result<Option<String>, AttachmentError> {
    match params.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(AttachmentError::WrongType(format!(
            "{key} must be a string, got {other}"
        ))),
    }
}

fn take_bool(
    params: &mut Map<String, Value>,
    key: &str,
    default: bool,
) -> Result<bool, AttachmentError> {
    match params.remove(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(b),
        Some(other) => Err(AttachmentError::WrongType(format!(
            "{key} must be a boolean, got {other}"
        ))),
    }
}

fn take_options(params: &mut Map<String, Value>) -> Result<RegisterOptions, AttachmentError> {
    let extra = match params.remove("extra") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(AttachmentError::WrongType(format!(
                "extra must be a dict, got {other}"
            )))
        }
    };
    let display_name = match take_string(params, "display_name")? {
        Some(name) => Some(name),
        None => take_string(params, "name")?,
    };
    Ok(RegisterOptions {
        kind: take_string(params, "kind")?,
        display_name,
        mime_type: take_string(params, "mime_type")?,
        attachment_id: take_string(params, "attachment_id")?,
        copy_file: take_bool(params, "copy_file", true)?,
        description: take_string(params, "description")?,
        extra,
        persist: take_bool(params, "persist", true)?,
        deduplicate: take_bool(params, "deduplicate", false)?,
    })
}

fn check_id(id: &str) -> Result<String, AttachmentError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !id.starts_with('-');
    if ok {
        Ok(id.to_string())
    } else {
        Err(AttachmentError::InvalidArgument(format!(
            "attachment id {id:?} must be 1 to {MAX_ID_LEN} letters, digits, '-' or '_'"
        )))
    }
}

/// 32 hex digits, as the original's `uuid4().hex`.
fn random_id() -> String {
    let mut bytes = [0u8; 16];
    let filled = File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok();
    if !filled {
        // No /dev/urandom: the time, the pid and a counter, hashed with
        // std's randomly keyed hasher, are unique enough for an id.
        use std::hash::{BuildHasher, Hasher};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let state = std::collections::hash_map::RandomState::new();
        for half in bytes.chunks_mut(8) {
            let mut hasher = state.build_hasher();
            hasher.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0),
            );
            hasher.write_u32(std::process::id());
            hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
            half.copy_from_slice(&hasher.finish().to_be_bytes());
        }
    }
    hex(&bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hash_file(path: &Path) -> Result<(String, u64), AttachmentError> {
    hash_while_copying(path, None)
}

/// Copies `source` to `target`, hashing exactly the bytes copied.
fn copy_and_hash(source: &Path, target: &Path) -> Result<(String, u64), AttachmentError> {
    let mut output = File::create(target).map_err(io_error("write", target))?;
    hash_while_copying(source, Some((&mut output, target)))
}

/// SHA-256 and size of `source`, read once; each chunk also goes to `copy`.
fn hash_while_copying(
    source: &Path,
    mut copy: Option<(&mut File, &Path)>,
) -> Result<(String, u64), AttachmentError> {
    let mut input = File::open(source).map_err(io_error("read", source))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = input.read(&mut buf).map_err(io_error("read", source))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        if let Some((output, target)) = copy.as_mut() {
            output
                .write_all(&buf[..n])
                .map_err(io_error("write", target))?;
        }
        size += n as u64;
    }
    Ok((hex(&hasher.finalize()), size))
}

/// A name usable as one path component: no separators, not `.` or `..`.
fn safe_file_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| if c == '/' || c == '\0' { '_' } else { c })
        .collect();
    let cleaned = cleaned.trim();
    if cleaned.is_empty() || cleaned == "." || cleaned == ".." {
        "attachment.bin".into()
    } else {
        cleaned.chars().take(200).collect()
    }
}

fn default_file_name(mime_type: Option<&str>) -> String {
    let extension = mime_type.and_then(|mime| {
        MIME_TYPES
            .iter()
            .find(|(_, m)| *m == mime)
            .map(|(ext, _)| *ext)
    });
    match extension {
        Some(ext) => format!("attachment.{ext}"),
        None => "attachment.bin".into(),
    }
}

/// Extension → MIME type, for registrations that do not give one (the
/// shim's proxy sends Python's `mimetypes` guess).
const MIME_TYPES: &[(&str, &str)] = &[
    ("txt", "text/plain"),
    ("md", "text/markdown"),
    ("csv", "text/csv"),
    ("html", "text/html"),
    ("htm", "text/html"),
    ("css", "text/css"),
    ("xml", "application/xml"),
    ("json", "application/json"),
    ("yaml", "application/yaml"),
    ("yml", "application/yaml"),
    ("py", "text/x-python"),
    ("js", "text/javascript"),
    ("pdf", "application/pdf"),
    ("zip", "application/zip"),
    ("gz", "application/gzip"),
    ("tar", "application/x-tar"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("svg", "image/svg+xml"),
    ("bmp", "image/bmp"),
    ("mp3", "audio/mpeg"),
    ("wav", "audio/wav"),
    ("ogg", "audio/ogg"),
    ("mp4", "video/mp4"),
    ("webm", "video/webm"),
    ("mov", "video/quicktime"),
    (
        "docx",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ),
    (
        "xlsx",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ),
    (
        "pptx",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ),
];

fn guess_mime(file_name: &str) -> &'static str {
    let extension = file_name
        .rsplit_once('.')
        .map(|(_, ext)| ext.to_ascii_lowercase());
    extension
        .and_then(|ext| {
            MIME_TYPES
                .iter()
                .find(|(e, _)| *e == ext)
                .map(|(_, mime)| *mime)
        })
        .unwrap_or("application/octet-stream")
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
}
