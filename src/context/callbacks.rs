//! The callbacks of one call, served to its tool: attachments, human
//! prompts, progress and log records (`docs/protocol.md`, "Callbacks").

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::attachments::{AttachmentError, AttachmentStore};
use super::logs::LogSubscription;
use super::params;
use super::progress::{self, ProgressListener};
use super::prompts::{BoxFuture, HumanPrompt, PromptAnswer, PromptError, PromptRequest};
use crate::worker::{CallbackError, CallbackService};

impl From<AttachmentError> for CallbackError {
    fn from(error: AttachmentError) -> CallbackError {
        CallbackError::new(error.type_name(), error.to_string())
    }
}

/// What a pool's calls share: the session's attachment store and the
/// default human prompt.
pub(crate) struct SessionServices {
    pub session_id: String,
    pub attachments: Arc<AttachmentStore>,
    pub human_prompt: Option<Arc<dyn HumanPrompt>>,
}

/// Serves the callbacks of one call: the session's services plus the human
/// prompt for this call (the pool's, or one the caller gave for the call)
/// and whoever listens to its progress.
#[derive(Clone)]
pub(crate) struct CallbackHandler {
    services: Arc<SessionServices>,
    prompt: Option<Arc<dyn HumanPrompt>>,
    progress: Option<Arc<progress::ProgressGate>>,
    logs: Option<LogSubscription>,
}

/// Callback method names (see `docs/protocol.md`).
pub(crate) mod methods {
    pub(crate) const REGISTER_FILE: &str = "attachments.register_file";
    pub(crate) const REGISTER_BYTES: &str = "attachments.register_bytes";
    pub(crate) const REGISTER_REMOTE_FILE: &str = "attachments.register_remote_file";
    pub(crate) const UPDATE_REMOTE_FILE_ID: &str = "attachments.update_remote_file_id";
    pub(crate) const INGEST_RECORD: &str = "attachments.ingest_record";
    pub(crate) const GET: &str = "attachments.get";
    pub(crate) const LIST: &str = "attachments.list";
    pub(crate) const EXPORT_MANIFEST: &str = "attachments.export_manifest";
    pub(crate) const HUMAN_PROMPT: &str = "human_prompt.request";
    pub(crate) const HUMAN_PROMPT_MANY: &str = "human_prompt.request_many";
    pub(crate) const PROGRESS: &str = "progress.report";
    pub(crate) const LOG: &str = "log.record";
}

/// The parameters of `human_prompt` (docs/protocol.md, "Callbacks"); null
/// is the same as absent.
#[derive(Deserialize)]
struct HumanPromptParams {
    task_description: Option<String>,
    node_id: Option<String>,
    inputs: Option<String>,
    metadata: Option<Map<String, Value>>,
}

/// The parameters of `human_prompt.request_many`: the questions, each as
/// `human_prompt.request` takes one.
#[derive(Deserialize)]
struct HumanPromptManyParams {
    prompts: Vec<HumanPromptParams>,
}

/// Most questions one `request_many` may ask.
const MAX_QUESTIONS: usize = 64;

impl CallbackService for CallbackHandler {
    /// The human prompt waits for a human: the call's timer is paused while it runs.
    fn waits_for_human(&self, method: &str) -> bool {
        method == methods::HUMAN_PROMPT || method == methods::HUMAN_PROMPT_MANY
    }

    fn handle<'a>(
        &'a self,
        tool: &'a str,
        method: &'a str,
        params: Value,
    ) -> BoxFuture<'a, Result<Value, CallbackError>> {
        Box::pin(self.serve(tool, method, params))
    }
}

impl CallbackHandler {
    pub(crate) fn new(
        services: Arc<SessionServices>,
        prompt: Option<Arc<dyn HumanPrompt>>,
        progress: Option<Arc<dyn ProgressListener>>,
        logs: Option<LogSubscription>,
    ) -> CallbackHandler {
        let prompt = prompt.or_else(|| services.human_prompt.clone());
        CallbackHandler {
            services,
            prompt,
            progress: progress.map(|listener| Arc::new(progress::ProgressGate::new(listener))),
            logs,
        }
    }

    /// The lowest Python `levelno` someone listens to for this call (else
    /// the worker sends no log records).
    pub(crate) fn log_threshold(&self) -> Option<u32> {
        self.logs.as_ref().map(|logs| logs.level.python_threshold())
    }

    /// Whether someone listens to this call's progress (else the tool's
    /// `_context["progress"]` does nothing).
    pub(crate) fn has_progress(&self) -> bool {
        self.progress.is_some()
    }

    /// Whether this call has a human prompt service (else the tool's
    /// `_context["human_prompt"]` is `None`).
    pub(crate) fn has_human_prompt(&self) -> bool {
        self.prompt.is_some()
    }

    /// Runs one callback of the call of `tool`. Blocking file work runs on
    /// tokio's blocking threads.
    async fn serve(&self, tool: &str, method: &str, params: Value) -> Result<Value, CallbackError> {
        let params = match params {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return Err(CallbackError::new(
                    "TypeError",
                    format!("callback params must be a map, got {other}"),
                ))
            }
        };
        match method {
            methods::HUMAN_PROMPT => self.human_prompt(tool, params).await,
            methods::HUMAN_PROMPT_MANY => self.human_prompt_many(tool, params).await,
            methods::PROGRESS => match &self.progress {
                Some(gate) => gate.report(&params).map(|()| Value::Null),
                // Nobody asked: the shim does not send reports then, and
                // one sent anyway is dropped.
                None => Ok(Value::Null),
            },
            methods::LOG => match &self.logs {
                Some(logs) => logs.record(&params).map(|()| Value::Null),
                None => Ok(Value::Null),
            },
            _ if method.starts_with("attachments.") => {
                let store = self.services.attachments.clone();
                let method = method.to_string();
                tokio::task::spawn_blocking(move || store.handle(&method, params))
                    .await
                    .map_err(|e| {
                        CallbackError::new(
                            "RuntimeError",
                            format!("the attachment store failed: {e}"),
                        )
                    })?
                    .map_err(CallbackError::from)
            }
            other => Err(CallbackError::new(
                "NotImplementedError",
                format!("the supervisor does not serve '{other}'"),
            )),
        }
    }

    fn prompt(&self) -> Result<&Arc<dyn HumanPrompt>, CallbackError> {
        self.prompt.as_ref().ok_or_else(|| {
            PromptError::Unavailable(
                "this pool has no human prompt service (the library needs PoolBuilder::human_prompt)".into(),
            )
            .into()
        })
    }

    async fn human_prompt(
        &self,
        tool: &str,
        params: Map<String, Value>,
    ) -> Result<Value, CallbackError> {
        let prompt = self.prompt()?;
        let params: HumanPromptParams = params::from_params(&params).map_err(|e| {
            CallbackError::new("TypeError", format!("{}: {e}", methods::HUMAN_PROMPT))
        })?;
        let answer = prompt.request(self.prompt_request(tool, params)?).await?;
        Ok(answer_json(answer))
    }

    async fn human_prompt_many(
        &self,
        tool: &str,
        params: Map<String, Value>,
    ) -> Result<Value, CallbackError> {
        let prompt = self.prompt()?;
        let params: HumanPromptManyParams = params::from_params(&params).map_err(|e| {
            CallbackError::new("TypeError", format!("{}: {e}", methods::HUMAN_PROMPT_MANY))
        })?;
        if params.prompts.is_empty() || params.prompts.len() > MAX_QUESTIONS {
            return Err(CallbackError::new(
                "ValueError",
                format!(
                    "{}: between 1 and {MAX_QUESTIONS} questions, got {}",
                    methods::HUMAN_PROMPT_MANY,
                    params.prompts.len()
                ),
            ));
        }
        let requests = params
            .prompts
            .into_iter()
            .map(|one| self.prompt_request(tool, one))
            .collect::<Result<Vec<_>, _>>()?;
        let answers = prompt.request_many(requests).await?;
        Ok(Value::Array(answers.into_iter().map(answer_json).collect()))
    }

    fn prompt_request(
        &self,
        tool: &str,
        params: HumanPromptParams,
    ) -> Result<PromptRequest, CallbackError> {
        let task_description = params
            .task_description
            .ok_or_else(|| CallbackError::new("TypeError", "task_description is required"))?;
        Ok(PromptRequest {
            session_id: self.services.session_id.clone(),
            node_id: params.node_id.unwrap_or_default(),
            task_description,
            inputs: params.inputs,
            metadata: params.metadata.unwrap_or_default(),
            tool: tool.to_string(),
        })
    }
}

/// A human's answer as the shim reads it.
fn answer_json(answer: PromptAnswer) -> Value {
    json!({"text": answer.text, "metadata": answer.metadata})
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::context::prompt_fn;

    /// A handler whose prompt answers "yes" and echoes what it was asked
    /// in the answer's metadata.
    fn handler(dir: &Path) -> CallbackHandler {
        let prompt = prompt_fn(|request: PromptRequest| async move {
            let mut metadata = Map::new();
            metadata.insert("node_id".into(), json!(request.node_id));
            metadata.insert("task".into(), json!(request.task_description));
            metadata.insert("inputs".into(), json!(request.inputs));
            metadata.insert("tool".into(), json!(request.tool));
            metadata.insert("metadata".into(), Value::Object(request.metadata));
            Ok(PromptAnswer {
                text: "yes".into(),
                metadata,
            })
        });
        let services = SessionServices {
            session_id: "s1".into(),
            attachments: Arc::new(AttachmentStore::open(dir, dir)),
            human_prompt: Some(prompt),
        };
        CallbackHandler::new(Arc::new(services), None, None, None)
    }

    async fn ask(params: Value) -> Result<Value, CallbackError> {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().canonicalize().unwrap();
        handler(&workspace)
            .serve("ask", methods::HUMAN_PROMPT, params)
            .await
    }

    #[tokio::test]
    async fn a_human_prompt_gets_its_parameters_and_null_is_absent() {
        let answer = ask(json!({"task_description": "colour?", "node_id": "n1",
                                "inputs": null, "metadata": {"k": 1}, "newer": true}))
        .await
        .unwrap();
        assert_eq!(answer["text"], "yes");
        assert_eq!(
            answer["metadata"],
            json!({"node_id": "n1", "task": "colour?", "inputs": null, "tool": "ask",
                   "metadata": {"k": 1}})
        );
    }

    #[tokio::test]
    async fn a_bad_human_prompt_parameter_is_a_type_error_naming_it() {
        let error = ask(json!({"task_description": "colour?", "node_id": 5}))
            .await
            .unwrap_err();
        assert_eq!(error.kind, "TypeError");
        assert_eq!(
            error.message,
            "human_prompt.request: node_id: invalid type: integer `5`, expected a string"
        );
        let error = ask(json!({"task_description": "x", "metadata": [1]}))
            .await
            .unwrap_err();
        assert!(
            error
                .message
                .starts_with("human_prompt.request: metadata: invalid type: sequence"),
            "{}",
            error.message
        );
        let error = ask(json!({"node_id": "n1"})).await.unwrap_err();
        assert_eq!(
            (error.kind.as_str(), error.message.as_str()),
            ("TypeError", "task_description is required")
        );
    }
}
