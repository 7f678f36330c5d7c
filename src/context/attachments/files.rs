//! Files of the store: ids, names, MIME types, hashing while copying.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use super::records::{io_error, AttachmentError};

/// Largest attachment id accepted from a caller.
const MAX_ID_LEN: usize = 128;

pub(super) fn check_id(id: &str) -> Result<String, AttachmentError> {
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
pub(super) fn random_id() -> String {
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

/// SHA-256 and size of the opened file `input` (named `source` in errors).
pub(super) fn hash_file(input: &mut File, source: &Path) -> Result<(String, u64), AttachmentError> {
    hash_while_copying(input, source, None)
}

/// Copies the opened `input` to `target`, hashing exactly the bytes copied.
pub(super) fn copy_and_hash(
    input: &mut File,
    source: &Path,
    target: &Path,
) -> Result<(String, u64), AttachmentError> {
    let mut output = File::create(target).map_err(io_error("write", target))?;
    hash_while_copying(input, source, Some((&mut output, target)))
}

/// SHA-256 and size of `input`, read once; each chunk also goes to `copy`.
fn hash_while_copying(
    input: &mut File,
    source: &Path,
    mut copy: Option<(&mut File, &Path)>,
) -> Result<(String, u64), AttachmentError> {
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
pub(super) fn safe_file_name(name: &str) -> String {
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

pub(super) fn default_file_name(mime_type: Option<&str>) -> String {
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

pub(super) fn guess_mime(file_name: &str) -> &'static str {
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
