//! The store's side of the `attachments.*` callbacks (docs/protocol.md,
//! "Callbacks"): one parameter struct per method, checked by serde, so a
//! worker's malformed parameters are a `TypeError` naming what is wrong. The
//! registrations' shared options are a struct of their own, read from the
//! same parameters (not flattened in: a flattened field's error would not
//! name it).

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{AttachmentError, AttachmentRecord, AttachmentStore, RegisterOptions};
use crate::context::methods;
use crate::context::params::from_params;

/// What `register_file`, `register_bytes`, `register_remote_file` share.
#[derive(Deserialize)]
struct Options {
    kind: Option<String>,
    #[serde(alias = "name")]
    display_name: Option<String>,
    mime_type: Option<String>,
    attachment_id: Option<String>,
    copy_file: Option<bool>,
    description: Option<String>,
    extra: Option<Map<String, Value>>,
    persist: Option<bool>,
    deduplicate: Option<bool>,
}

impl Options {
    fn into_register(self) -> RegisterOptions {
        let defaults = RegisterOptions::default();
        RegisterOptions {
            kind: self.kind,
            display_name: self.display_name,
            mime_type: self.mime_type,
            attachment_id: self.attachment_id,
            copy_file: self.copy_file.unwrap_or(defaults.copy_file),
            description: self.description,
            extra: self.extra.unwrap_or_default(),
            persist: self.persist.unwrap_or(defaults.persist),
            deduplicate: self.deduplicate.unwrap_or(defaults.deduplicate),
        }
    }
}

#[derive(Deserialize)]
struct RegisterFile {
    path: String,
}

#[derive(Deserialize)]
struct RegisterBytes {
    data_base64: String,
}

#[derive(Deserialize)]
struct RegisterRemoteFile {
    remote_file_id: String,
    size: Option<u64>,
}

#[derive(Deserialize)]
struct ById {
    attachment_id: String,
}

#[derive(Deserialize)]
struct UpdateRemoteFileId {
    attachment_id: String,
    remote_file_id: String,
}

#[derive(Deserialize)]
struct IngestRecord {
    record: AttachmentRecord,
    copy_file: Option<bool>,
    persist: Option<bool>,
}

fn parse<T: DeserializeOwned>(
    method: &str,
    params: &Map<String, Value>,
) -> Result<T, AttachmentError> {
    from_params(params).map_err(|e| AttachmentError::WrongType(format!("{method}: {e}")))
}

/// A registration's parameters: its own, and the options every one shares.
fn parse_registration<T: DeserializeOwned>(
    method: &str,
    params: &Map<String, Value>,
) -> Result<(T, RegisterOptions), AttachmentError> {
    let own = parse(method, params)?;
    let options: Options = parse(method, params)?;
    Ok((own, options.into_register()))
}

impl AttachmentStore {
    /// Serves one callback (`attachments.*`).
    pub fn handle(
        &self,
        method: &str,
        params: Map<String, Value>,
    ) -> Result<Value, AttachmentError> {
        let record = |r: AttachmentRecord| r.to_json();
        match method {
            methods::REGISTER_FILE => {
                let (p, options): (RegisterFile, _) = parse_registration(method, &params)?;
                self.register_file(Path::new(&p.path), options).map(record)
            }
            methods::REGISTER_BYTES => {
                use base64::Engine as _;
                let (p, options): (RegisterBytes, _) = parse_registration(method, &params)?;
                let data = base64::engine::general_purpose::STANDARD
                    .decode(p.data_base64.as_bytes())
                    .map_err(|e| {
                        AttachmentError::InvalidArgument(format!("data_base64 is not base64: {e}"))
                    })?;
                self.register_bytes(&data, options).map(record)
            }
            methods::REGISTER_REMOTE_FILE => {
                let (p, options): (RegisterRemoteFile, _) = parse_registration(method, &params)?;
                self.register_remote_file(&p.remote_file_id, p.size, options)
                    .map(record)
            }
            methods::UPDATE_REMOTE_FILE_ID => {
                let p: UpdateRemoteFileId = parse(method, &params)?;
                self.update_remote_file_id(&p.attachment_id, &p.remote_file_id)?;
                Ok(Value::Null)
            }
            methods::INGEST_RECORD => {
                let p: IngestRecord = parse(method, &params)?;
                let defaults = RegisterOptions::default();
                self.ingest_record(
                    p.record,
                    p.copy_file.unwrap_or(defaults.copy_file),
                    p.persist.unwrap_or(defaults.persist),
                )
                .map(record)
            }
            methods::GET => {
                let p: ById = parse(method, &params)?;
                Ok(self
                    .get(&p.attachment_id)
                    .map(record)
                    .unwrap_or(Value::Null))
            }
            methods::LIST => Ok(Value::Array(self.list().into_iter().map(record).collect())),
            methods::EXPORT_MANIFEST => Ok(Value::Object(self.export_manifest())),
            other => Err(AttachmentError::InvalidArgument(format!(
                "unknown attachment store method '{other}'"
            ))),
        }
    }
}
