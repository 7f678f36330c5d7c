//! A call's outcome as MCP content: text, or for an attachment result the
//! content types the protocol has.
//!
//! - a text block (or a block with no file) → `text` content;
//! - an image or audio attachment of at most [`INLINE_LIMIT`] bytes → `image`
//!   / `audio` content, base64 with its MIME type;
//! - a text attachment (a textual MIME type, UTF-8) of at most
//!   [`EMBED_LIMIT`] bytes → an embedded `resource` with its text;
//! - any other attachment with a file → a `resource_link` (name, MIME type,
//!   size) whose URI `resources/read` resolves (`toolpool://attachments/<id>`,
//!   [`crate::mcp::resources`]); a `file://` URI for a file the store does not
//!   know (only a local client can open it); one the store knows only by a
//!   provider's file id → text naming it.

use base64::Engine as _;
use rmcp::model::{CallToolResult, ContentBlock as McpContent, Resource};
use serde::Serialize;
use serde_json::Value;

use crate::catalog::FunctionSpec;
use crate::content::{result_text, BlockKind, ContentBlock};
use crate::context::AttachmentStore;
use crate::error::{ErrorKind, ToolError};
use crate::mcp::resources;

/// Largest image or audio file sent inline (base64) over MCP; larger ones
/// are sent as a `resource_link`.
pub(crate) const INLINE_LIMIT: u64 = 4 * 1024 * 1024;
/// Largest text attachment sent embedded (as a `resource` with its text);
/// larger ones are sent as a `resource_link`.
pub(crate) const EMBED_LIMIT: u64 = 64 * 1024;

/// The MCP result of a call: its content, or the agent-facing error text
/// with `isError`.
pub(crate) fn call_result(
    result: Result<Value, ToolError>,
    content: Option<&[ContentBlock]>,
    store: Option<&AttachmentStore>,
) -> CallToolResult {
    match (result, content) {
        (Ok(_), Some(blocks)) => {
            CallToolResult::success(blocks.iter().map(|block| mcp_block(block, store)).collect())
        }
        (Ok(value), None) => {
            CallToolResult::success(vec![McpContent::text(result_text(&value, None))])
        }
        (Err(error), _) => CallToolResult::error(vec![McpContent::text(error.to_string())]),
    }
}

/// A plain result (no attachments) as MCP content, its size counted before
/// anything is copied: the text block (a string moved into it; any other
/// value as JSON, compact when it goes out structured too, as MCP suggests,
/// else indented) and, when `function` has an output schema for it, the
/// value again as `structuredContent`. Both together must fit in `limit`
/// bytes as JSON (the frame limit); a larger result is refused with
/// `ResultTooLarge` before its encoding exists, rather than sent as a
/// message up to 12 times its size (a control character is 6 bytes as
/// JSON, and it would be there twice). The text passes through
/// `stand_in`, which may keep it and give a stand-in for it (over HTTP, a
/// large one: the structured copy of a string is then made of the
/// stand-in, and the text is never copied).
pub(crate) fn plain_result(
    tool: &str,
    value: Value,
    function: Option<&FunctionSpec>,
    limit: usize,
    stand_in: &dyn Fn(String) -> String,
) -> CallToolResult {
    let function = function.filter(|f| f.has_structured_result(&value));
    let too_large = || {
        let copies = match function {
            Some(_) => " (its text, and its structuredContent)",
            None => "",
        };
        CallToolResult::error(vec![McpContent::text(
            ToolError::new(
                tool,
                ErrorKind::ResultTooLarge,
                format!(
                    "the result takes more than {limit} bytes as MCP content{copies}, the frame limit; return less, or write it to a file and return its path"
                ),
            )
            .to_string(),
        )])
    };
    // `{"result":…}` around a wrapped value.
    const WRAPPER: usize = 11;
    // What the structured copy adds to a message whose value takes `len`.
    let structured_len = |len: usize| function.map_or(0, |_| len + WRAPPER);
    let (text, structured) = match value {
        Value::String(text) => {
            // The text is the string: as JSON, the same bytes as the
            // structured copy, so it is counted once.
            let Some(len) = encoded_len(&text, false, limit) else {
                return too_large();
            };
            if len + structured_len(len) > limit {
                return too_large();
            }
            let text = stand_in(text);
            let structured =
                function.and_then(|f| f.structured_result(Value::String(text.clone())));
            (text, structured)
        }
        other => {
            // Built only once its JSON is known to fit (indented when the
            // text is the only copy).
            let Some(len) = encoded_len(&other, function.is_none(), limit) else {
                return too_large();
            };
            let left = limit.saturating_sub(structured_len(len));
            let (text, structured) = match function {
                Some(f) => (other.to_string(), f.structured_result(other)),
                None => (result_text(&other, None), None),
            };
            // As a JSON string, the text's own quotes and newlines are escaped.
            if encoded_len(&text, false, left).is_none() {
                return too_large();
            }
            (stand_in(text), structured)
        }
    };
    let mut result = CallToolResult::success(vec![McpContent::text(text)]);
    result.structured_content = structured;
    result
}

/// Bytes `value` takes as JSON (indented by 2 when `pretty`, as
/// [`result_text`] has it), or `None` once past `limit`: the count stops
/// there, so a 60 MB string of control characters (360 MB as JSON) costs a
/// scan of its first `limit` bytes' worth, and no allocation.
fn encoded_len<T: Serialize + ?Sized>(value: &T, pretty: bool, limit: usize) -> Option<usize> {
    struct Counter {
        count: usize,
        limit: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.count += bytes.len();
            if self.count > self.limit {
                return Err(std::io::Error::other("past the limit"));
            }
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { count: 0, limit };
    if pretty {
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"  ");
        let mut serializer = serde_json::Serializer::with_formatter(&mut counter, formatter);
        value.serialize(&mut serializer).ok()?;
    } else {
        serde_json::to_writer(&mut counter, value).ok()?;
    }
    Some(counter.count)
}

fn mcp_block(block: &ContentBlock, store: Option<&AttachmentStore>) -> McpContent {
    let text = || {
        McpContent::text(
            block
                .text
                .clone()
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| block.summary.clone()),
        )
    };
    let Some(attachment) = &block.attachment else {
        return text();
    };
    let Some(path) = &attachment.path else {
        return text();
    };
    let uri = if attachment.registered {
        resources::attachment_uri(&attachment.id)
    } else {
        file_uri(path)
    };
    let embed = !matches!(block.kind, BlockKind::Image | BlockKind::Audio)
        && resources::is_textual(&attachment.mime_type)
        && attachment.size.is_some_and(|size| size <= EMBED_LIMIT);
    if embed {
        let text = store
            .and_then(|store| store.read_beneath(path, EMBED_LIMIT))
            .and_then(|bytes| String::from_utf8(bytes).ok());
        if let Some(text) = text {
            return McpContent::resource(resources::text_contents(
                &uri,
                Some(attachment.mime_type.clone()),
                text,
            ));
        }
    }
    let inline = matches!(block.kind, BlockKind::Image | BlockKind::Audio)
        && attachment.size.is_some_and(|size| size <= INLINE_LIMIT);
    if inline {
        // Read through the store, beneath the workspace (a path swapped for a
        // link to outside since it was checked cannot lead out).
        if let Some(bytes) = store.and_then(|store| store.read_beneath(path, INLINE_LIMIT)) {
            let data = base64::engine::general_purpose::STANDARD.encode(bytes);
            return match block.kind {
                BlockKind::Audio => McpContent::audio(data, attachment.mime_type.clone()),
                _ => McpContent::image(data, attachment.mime_type.clone()),
            };
        }
    }
    let mut resource = Resource::new(uri, attachment.name.clone());
    resource.mime_type = Some(attachment.mime_type.clone());
    resource.size = attachment.size;
    resource.description = block.text.clone().filter(|t| !t.is_empty());
    McpContent::resource_link(resource)
}

/// `file://` URI of an absolute path, with the bytes a URI may not hold
/// percent-encoded.
fn file_uri(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_percent_encode_what_a_uri_cannot_hold() {
        assert_eq!(
            file_uri(std::path::Path::new("/ws/a b/ü#1.png")),
            "file:///ws/a%20b/%C3%BC%231.png"
        );
    }
}
