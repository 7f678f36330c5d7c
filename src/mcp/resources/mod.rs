//! The session's attachments as MCP resources: `resources/list` lists the
//! files the session's tools registered, `resources/read` reads one by its
//! `toolpool://attachments/<id>` URI (the URI a file result's
//! `resource_link` carries, so a client on another machine can fetch it),
//! and `resources/templates/list` names that URI's template.
//!
//! A request sees only its own session's store (over HTTP the session the
//! request runs in, on stdio the pool's), and a read goes through the store:
//! the record must exist and its file must still be a regular file inside
//! the workspace (opened beneath it, so a link swapped in since cannot lead
//! out). Results change as tools register files, and belong to one session:
//! `ttlMs` 0, `cacheScope` private.

pub(super) mod functions;

use base64::Engine as _;
use rmcp::model::{
    CacheScope, ErrorCode, ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate,
};
use rmcp::ErrorData as McpError;
use serde_json::json;

use crate::context::attachments::AttachmentRecord;
use crate::context::AttachmentStore;

/// The URI scheme and path of an attachment: `toolpool://attachments/<id>`.
pub(super) const ATTACHMENT_URI_PREFIX: &str = "toolpool://attachments/";
/// The largest attachment `resources/read` sends (base64 makes a binary one
/// a third larger on the wire).
pub(super) const READ_LIMIT: u64 = 16 * 1024 * 1024;

/// The resource URI of the attachment `id`.
pub(super) fn attachment_uri(id: &str) -> String {
    format!("{ATTACHMENT_URI_PREFIX}{id}")
}

/// Whether a MIME type names text a client can show as it is.
pub(super) fn is_textual(mime_type: &str) -> bool {
    let essence = mime_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || matches!(
            essence.as_str(),
            "application/json"
                | "application/xml"
                | "application/yaml"
                | "application/x-yaml"
                | "application/javascript"
                | "application/toml"
                | "application/sql"
        )
}

/// Every attachment of `store` that has a file, as a resource.
pub(super) fn list(store: &AttachmentStore) -> ListResourcesResult {
    let resources = store
        .list()
        .into_iter()
        .filter(|record| {
            record
                .reference
                .local_path
                .as_deref()
                .is_some_and(|path| store.confine(path).is_some())
        })
        .map(|record| {
            let r = record.reference;
            let name = r.name.unwrap_or_else(|| r.attachment_id.clone());
            let mut resource = Resource::new(attachment_uri(&r.attachment_id), name);
            resource.mime_type = r.mime_type;
            resource.size = r.size;
            resource.description = record.description.filter(|d| !d.is_empty());
            resource
        })
        .collect();
    let mut result = ListResourcesResult::with_all_items(resources);
    result.ttl_ms = Some(0);
    result.cache_scope = Some(CacheScope::Private);
    result
}

/// The one template: an attachment by its id.
pub(super) fn templates() -> ListResourceTemplatesResult {
    let mut template = ResourceTemplate::new(
        format!("{ATTACHMENT_URI_PREFIX}{{attachment_id}}"),
        "attachment",
    );
    template.title = Some("A file of the session".into());
    template.description = Some(
        "A file the session's tools registered as an attachment (a file result links to it)".into(),
    );
    let mut result = ListResourceTemplatesResult::with_all_items(vec![template]);
    result.ttl_ms = Some(0);
    result.cache_scope = Some(CacheScope::Private);
    result
}

/// The "resource not found" error of `uri` (-32602 with the URI in its data).
pub(super) fn not_found(uri: &str, why: &str) -> McpError {
    McpError::new(
        ErrorCode::INVALID_PARAMS,
        format!("resource not found: {uri} ({why})"),
        Some(json!({"uri": uri})),
    )
}

/// The record of the attachment `uri` names in `store`.
pub(super) fn attachment(store: &AttachmentStore, uri: &str) -> Result<AttachmentRecord, McpError> {
    let id = uri
        .strip_prefix(ATTACHMENT_URI_PREFIX)
        .filter(|id| {
            !id.is_empty()
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .ok_or_else(|| not_found(uri, "not a toolpool://attachments/<id> URI"))?;
    store
        .get(id)
        .ok_or_else(|| not_found(uri, "no attachment of that id in this session"))
}

/// The attachment `uri` names, read from `store`: text for a textual MIME
/// type that holds UTF-8, else base64. An unknown URI, or one whose file is
/// gone or too large, is an invalid-params error with the URI in its data.
pub(super) fn read(store: &AttachmentStore, uri: &str) -> Result<ReadResourceResult, McpError> {
    let not_found = |why: &str| not_found(uri, why);
    let record = attachment(store, uri)?;
    let reference = record.reference;
    let path = reference
        .local_path
        .as_deref()
        .and_then(|path| store.confine(path))
        .ok_or_else(|| not_found("the attachment has no file in the workspace"))?;
    let bytes = store.read_beneath(&path, READ_LIMIT).ok_or_else(|| {
        McpError::new(
            ErrorCode::INVALID_PARAMS,
            format!(
                "cannot read {uri}: its file is gone or larger than the {} MiB resources/read sends",
                READ_LIMIT / (1024 * 1024)
            ),
            Some(json!({"uri": uri})),
        )
    })?;
    let mime_type = reference.mime_type;
    let contents = match mime_type.as_deref().filter(|m| is_textual(m)) {
        Some(_) => match String::from_utf8(bytes) {
            Ok(text) => text_contents(uri, mime_type, text),
            Err(not_text) => blob_contents(uri, mime_type, &not_text.into_bytes()),
        },
        None => blob_contents(uri, mime_type, &bytes),
    };
    Ok(ReadResourceResult::new(vec![contents])
        .with_ttl_ms(0)
        .with_cache_scope(CacheScope::Private))
}

/// Text resource contents.
pub(super) fn text_contents(
    uri: &str,
    mime_type: Option<String>,
    text: String,
) -> ResourceContents {
    ResourceContents::TextResourceContents {
        uri: uri.to_string(),
        mime_type,
        text,
        meta: None,
    }
}

fn blob_contents(uri: &str, mime_type: Option<String>, bytes: &[u8]) -> ResourceContents {
    ResourceContents::BlobResourceContents {
        uri: uri.to_string(),
        mime_type,
        blob: base64::engine::general_purpose::STANDARD.encode(bytes),
        meta: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::RegisterOptions;

    fn store() -> (tempfile::TempDir, AttachmentStore) {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("ws");
        std::fs::create_dir(&workspace).unwrap();
        let store = AttachmentStore::open(&workspace.canonicalize().unwrap(), dir.path());
        (dir, store)
    }

    fn register(store: &AttachmentStore, bytes: &[u8], name: &str, mime: &str) -> String {
        let options = RegisterOptions {
            display_name: Some(name.into()),
            mime_type: Some(mime.into()),
            ..RegisterOptions::default()
        };
        store
            .register_bytes(bytes, options)
            .unwrap()
            .reference
            .attachment_id
    }

    #[test]
    fn an_attachment_is_listed_and_read_by_its_uri() {
        let (_dir, store) = store();
        let text = register(&store, "héllo".as_bytes(), "note.txt", "text/plain");
        let image = register(&store, &[0x89, b'P', b'N', b'G'], "dot.png", "image/png");
        let listed = list(&store);
        let uris: Vec<&str> = listed.resources.iter().map(|r| r.uri.as_str()).collect();
        assert_eq!(uris, [attachment_uri(&text), attachment_uri(&image)]);
        assert_eq!(listed.resources[0].name, "note.txt");
        assert_eq!(listed.resources[0].size, Some(6));

        let read_text = read(&store, &attachment_uri(&text)).unwrap();
        assert_eq!(
            read_text.contents,
            vec![text_contents(
                &attachment_uri(&text),
                Some("text/plain".into()),
                "héllo".into()
            )]
        );
        let read_image = read(&store, &attachment_uri(&image)).unwrap();
        assert!(matches!(
            &read_image.contents[0],
            ResourceContents::BlobResourceContents { blob, .. } if blob == "iVBORw=="
        ));
    }

    #[test]
    fn an_unknown_uri_is_invalid_params_naming_it() {
        let (_dir, store) = store();
        for uri in [
            "toolpool://attachments/nope",
            "toolpool://attachments/../etc/passwd",
            "toolpool://attachments/",
            "file:///etc/passwd",
        ] {
            let error = read(&store, uri).unwrap_err();
            assert_eq!(error.code, ErrorCode::INVALID_PARAMS, "{uri}");
            assert_eq!(error.data, Some(json!({"uri": uri})));
            assert!(
                error.message.starts_with("resource not found: "),
                "{}",
                error.message
            );
        }
    }

    #[test]
    fn textual_types_are_recognised() {
        for mime in [
            "text/plain; charset=utf-8",
            "application/json",
            "application/ld+json",
        ] {
            assert!(is_textual(mime), "{mime}");
        }
        for mime in ["image/png", "application/octet-stream", "application/pdf"] {
            assert!(!is_textual(mime), "{mime}");
        }
    }
}
