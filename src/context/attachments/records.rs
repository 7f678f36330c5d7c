//! The store's record types, its options and its errors.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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

pub(super) fn default_kind() -> String {
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
#[non_exhaustive]
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
    /// `update_remote_file_id` of an id the store does not hold.
    #[error("Attachment '{0}' not found")]
    UnknownId(String),
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
