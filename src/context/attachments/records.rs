//! The store's record types, its options and its errors.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Where an attachment's bytes are and what they are (`record.ref`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttachmentRef {
    /// The attachment's id in the store: letters, digits, `-` and `_`
    /// (32 hex digits when the store chose it).
    pub attachment_id: String,
    /// The MIME type: the one given at registration, else guessed from the
    /// file name; `None` for a remote file registered without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The name shown for the attachment: the `display_name` given at
    /// registration, else the file's name; `None` for a remote file
    /// registered without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The content's size in bytes; `None` when it is not known (a remote
    /// file registered without a size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// SHA-256 of the content, in lowercase hex; `None` when the store holds
    /// no bytes of it (a remote file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Absolute path of the file: its copy under `attachments/<id>/`, or the
    /// registered file itself when it was not copied; `None` for a remote file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_path: Option<String>,
    /// The file's id at a provider it was uploaded to; `None` until one is
    /// registered or set with `update_remote_file_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_file_id: Option<String>,
    /// The content inline as a `data:` URI. The store never sets it; it keeps
    /// one that an ingested record brings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_uri: Option<String>,
    /// Free-form keys of the reference. The store leaves it empty; it keeps
    /// what an ingested record brings.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

/// One attachment: its [`AttachmentRef`] plus what the registering tool said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttachmentRecord {
    /// Where the bytes are and what they are (`ref` in the JSON form).
    #[serde(rename = "ref")]
    pub reference: AttachmentRef,
    /// `text`, `image`, `audio`, `video`, `file` or `data` (the original's
    /// `MessageBlockType` values); `file` by default.
    #[serde(default = "default_kind")]
    pub kind: String,
    /// The description the registering tool gave; `None` when it gave none.
    #[serde(default)]
    pub description: Option<String>,
    /// Free-form values the registering tool gave, kept as they are.
    #[serde(default)]
    pub extra: Map<String, Value>,
}

pub(super) fn default_kind() -> String {
    "file".into()
}

impl AttachmentRecord {
    /// The attachment's id (`ref.attachment_id`).
    pub fn id(&self) -> &str {
        &self.reference.attachment_id
    }

    /// The record as the manifest and the tools see it:
    /// `{"ref": {...}, "kind", "description", "extra"}`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// How to register an attachment; `Default` is the original's defaults
/// (copy the file, persist the record, no deduplication).
#[derive(Debug, Clone, PartialEq)]
pub struct RegisterOptions {
    /// The record's `kind`; `file` when `None`.
    pub kind: Option<String>,
    /// The name shown for it; the file's name when `None`.
    pub display_name: Option<String>,
    /// Its MIME type; guessed from the file's name when `None`.
    pub mime_type: Option<String>,
    /// A caller-chosen id (letters, digits, `-`, `_`); random when `None`.
    pub attachment_id: Option<String>,
    /// Copy the file into `attachments/<id>/` (else the record points at it).
    pub copy_file: bool,
    /// The record's `description`.
    pub description: Option<String>,
    /// The record's `extra`: whatever else its owner keeps with it.
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

/// Why the attachment store refused or failed an operation. A tool gets it
/// raised as the Python exception [`AttachmentError::type_name`] names.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttachmentError {
    /// A path leads outside the workspace, as written or through a symbolic
    /// link (`PermissionError`).
    #[error("path {path:?} is outside the workspace ({workspace}){detail}")]
    OutsideWorkspace {
        /// The path as it was given.
        path: String,
        /// The session's workspace (canonical).
        workspace: PathBuf,
        /// How it leads outside, appended to the message (through a symbolic
        /// link, or by changing while it was opened); empty when the path as
        /// written does.
        detail: String,
    },
    /// The path, as given, does not exist (`FileNotFoundError`).
    #[error("no such file: {0:?}")]
    NotFound(String),
    /// The path, as given, is not a regular file: a directory, a FIFO, …
    /// (`IsADirectoryError`).
    #[error("{0:?} is not a regular file")]
    NotAFile(String),
    /// A value is refused: a malformed id, a path with a NUL, data that is
    /// not base64, an unknown method, a manifest that cannot be read or
    /// written; the text says which (`ValueError`).
    #[error("{0}")]
    InvalidArgument(String),
    /// A tool's call to the store has a parameter missing or of the wrong
    /// type; the text names the method and the parameter (`TypeError`).
    #[error("{0}")]
    WrongType(String),
    /// `update_remote_file_id` of an id the store does not hold.
    #[error("Attachment '{0}' not found")]
    UnknownId(String),
    /// A file operation failed (`OSError`).
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// The operation: `read`, `write`, `create`, …
        what: &'static str,
        /// The file or directory it was on.
        path: PathBuf,
        /// The system's error.
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
            AttachmentError::UnknownId(_) => "KeyError",
            AttachmentError::Io { .. } => "OSError",
        }
    }
}

pub(super) fn io_error(
    what: &'static str,
    path: &Path,
) -> impl FnOnce(std::io::Error) -> AttachmentError {
    let path = path.to_path_buf();
    move |source| AttachmentError::Io { what, path, source }
}
