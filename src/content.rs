//! What a call returns besides its JSON value: content blocks for attachment
//! results, and the text an agent sees.
//!
//! A tool that returns a `MessageBlock`, a list of them, or an
//! `AttachmentRecord` (toolpool's classes or the project's own) returns
//! *attachments*, as the original runtime hands them to the model. The worker
//! describes each block (a `WireBlock`); nothing in that description is
//! trusted: an attachment the session's store knows is described by the
//! store's record, and a file path is kept only when it resolves inside the
//! session's workspace. Front ends turn the blocks into what they have (MCP
//! image, audio and resource content; `call --json` attachments).

use std::path::PathBuf;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::context::AttachmentStore;
use crate::protocol::WireBlock;

/// The kind of a content block (the original's `MessageBlockType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum BlockKind {
    /// Text, in [`ContentBlock::text`].
    Text,
    /// An image attachment.
    Image,
    /// An audio attachment.
    Audio,
    /// A video attachment.
    Video,
    /// Any other file attachment.
    File,
    /// Structured data, in [`ContentBlock::data`]; also a block whose type
    /// toolpool does not know.
    Data,
}

impl BlockKind {
    fn parse(kind: &str) -> BlockKind {
        match kind {
            "text" => BlockKind::Text,
            "image" => BlockKind::Image,
            "audio" => BlockKind::Audio,
            "video" => BlockKind::Video,
            "file" => BlockKind::File,
            _ => BlockKind::Data,
        }
    }
}

/// A file (or a provider's file id) a content block refers to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attachment {
    /// The attachment's id in the session's store (as the tool gave it when
    /// the store does not hold it).
    pub id: String,
    /// The name shown for it; the id when it has none.
    pub name: String,
    /// Its MIME type; `application/octet-stream` when none was given.
    pub mime_type: String,
    /// Size in bytes: the store's record's, else the file's, else what the
    /// tool said; `None` when none of them tells.
    pub size: Option<u64>,
    /// SHA-256 of the content in hex, as the store's record (or, unchecked,
    /// the tool) says; `None` when unknown.
    pub sha256: Option<String>,
    /// The file, inside the session's workspace; `None` when the block
    /// named no file there (a remote file, or a path that led outside).
    pub path: Option<PathBuf>,
    /// The file's id at a provider it was uploaded to; `None` when it has none.
    pub remote_file_id: Option<String>,
    /// Whether the session's attachment store holds this attachment (else
    /// it is only what the tool said).
    pub registered: bool,
}

/// One block of an attachment result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContentBlock {
    /// What the block holds.
    pub kind: BlockKind,
    /// The block's text; `None` when it has none (or it is not a string).
    pub text: Option<String>,
    /// The file the block refers to; `None` for a block without one.
    pub attachment: Option<Attachment>,
    /// The block's free-form `data`, as JSON; empty when it has none.
    pub data: Map<String, Value>,
    /// The block as text, as the original runtime shows it to the model.
    pub summary: String,
}

impl ContentBlock {
    /// Checks one block the worker described against the session's store.
    pub(crate) fn from_wire(block: WireBlock, store: &AttachmentStore) -> ContentBlock {
        let attachment = block.attachment.as_ref().and_then(|claimed| {
            let id = claimed.get("attachment_id")?.as_str()?.to_string();
            Some(match store.get(&id) {
                Some(record) => {
                    let r = record.reference;
                    Attachment {
                        name: r.name.clone().unwrap_or_else(|| id.clone()),
                        mime_type: r.mime_type.unwrap_or_else(|| DEFAULT_MIME.into()),
                        size: r.size,
                        sha256: r.sha256,
                        path: r.local_path.and_then(|p| store.confine(&p)),
                        remote_file_id: r.remote_file_id,
                        registered: true,
                        id,
                    }
                }
                None => unregistered(id, claimed, store),
            })
        });
        ContentBlock {
            kind: BlockKind::parse(&block.kind),
            text: block.text,
            attachment,
            data: block.data,
            summary: block.summary,
        }
    }
}

const DEFAULT_MIME: &str = "application/octet-stream";

/// An attachment the store does not know: what the tool said, with the path
/// only where it leads to a file inside the workspace.
fn unregistered(id: String, claimed: &Map<String, Value>, store: &AttachmentStore) -> Attachment {
    let text = |key: &str| claimed.get(key).and_then(Value::as_str).map(str::to_string);
    let path = text("local_path").and_then(|p| store.confine(&p));
    // The size is the file's, when there is one, not what the tool claimed.
    let size = match &path {
        Some(p) => std::fs::metadata(p).ok().map(|m| m.len()),
        None => claimed.get("size").and_then(Value::as_u64),
    };
    Attachment {
        name: text("name").unwrap_or_else(|| id.clone()),
        mime_type: text("mime_type").unwrap_or_else(|| DEFAULT_MIME.into()),
        size,
        sha256: text("sha256"),
        path,
        remote_file_id: text("remote_file_id"),
        registered: false,
        id,
    }
}

/// The text an agent sees for a result: a string as is, anything else as
/// JSON (indent 2, non-ASCII kept); for an attachment result the blocks'
/// summaries, one a line, as the original runtime joins them.
///
/// ```
/// use serde_json::json;
/// use toolpool::content::result_text;
///
/// assert_eq!(result_text(&json!("212.0 °F"), None), "212.0 °F");
/// assert_eq!(
///     result_text(&json!({"city": "Zürich"}), None),
///     "{\n  \"city\": \"Zürich\"\n}"
/// );
/// ```
pub fn result_text(value: &Value, content: Option<&[ContentBlock]>) -> String {
    if let Some(blocks) = content {
        return blocks
            .iter()
            .map(|b| b.summary.as_str())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
    }
    match value {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
    }
}
