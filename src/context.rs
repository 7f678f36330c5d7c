//! What a tool's `_context` points at: the session's directories, and the
//! live services a tool reaches through callbacks to the supervisor while its
//! call is in flight (docs/writing-tools.md, "Context services"):
//!
//! - the attachment store ([`attachments`]), owned by the supervisor so that
//!   concurrent workers never write its manifest at the same time;
//! - human prompts ([`HumanPrompt`]), forwarded to whatever front end runs
//!   the pool: the terminal for the CLI ([`TerminalPrompt`]), elicitation
//!   over MCP, the embedder's own implementation in the library.
//!
//! [`CallbackHandler`] serves a worker's callbacks (`{"t": "call", ...}`
//! frames, see `docs/protocol.md`) for one call.

pub mod attachments;
mod logs;
mod params;
mod progress;
pub mod sessions;
mod terminal;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::pool_error::PoolError;
pub use crate::worker::{CallbackError, CallbackService};

pub use attachments::{
    AttachmentError, AttachmentRecord, AttachmentRef, AttachmentStore, RegisterOptions,
};
pub use logs::{LogLevel, LogListener, LogRecord, LogSubscription};
pub use progress::{progress_fn, Progress, ProgressListener};
pub use sessions::{Session, SessionsRoot};
pub use terminal::{PromptInput, TerminalPrompt};

/// A session's directories, created and made absolute.
#[derive(Debug, Clone)]
pub struct SessionPaths {
    /// The session's id, one path component (`session_id` in `_context`).
    pub id: String,
    /// `graph_directory` in `_context`.
    pub dir: PathBuf,
    /// `python_workspace_root` in `_context`; the workers' cwd.
    pub workspace: PathBuf,
    /// `<dir>/site-packages`: where `install_python_packages` installs, on
    /// every worker's `sys.path` (`python_packages_dir` in `_context`).
    /// Created up front: Python caches a `sys.path` entry that does not
    /// exist as "nothing here" for the worker's lifetime.
    pub site_packages: PathBuf,
}

impl SessionPaths {
    /// `dir` defaults to `.toolpool/sessions/<id>` under the current
    /// directory, or, where that cannot be made (a client that starts the
    /// server in `/`), under the user's state directory
    /// (`$XDG_STATE_HOME/toolpool`, else `~/.local/state/toolpool`).
    pub fn prepare(id: &str, dir: Option<&Path>) -> Result<SessionPaths, PoolError> {
        check_session_id(id)?;
        let dir = match dir {
            Some(dir) => dir.to_path_buf(),
            None => default_session_dir(id)?,
        };
        let workspace = dir.join("code_workspace");
        let site_packages = dir.join("site-packages");
        // The attachment store's folder too, as the original runtime makes
        // it up front: tools that list the workspace see the same entries.
        let attachments = workspace.join(attachments::ATTACHMENTS_DIR);
        for path in [&attachments, &site_packages] {
            std::fs::create_dir_all(path).map_err(|source| PoolError::SessionDir {
                path: path.clone(),
                source,
            })?;
        }
        let canonical = |path: &Path| {
            path.canonicalize().map_err(|source| PoolError::SessionDir {
                path: path.to_path_buf(),
                source,
            })
        };
        Ok(SessionPaths {
            id: id.to_string(),
            dir: canonical(&dir)?,
            workspace: canonical(&workspace)?,
            site_packages: canonical(&site_packages)?,
        })
    }

    /// What a sandboxed worker started for this session is given to see.
    pub fn sandbox_mounts(&self) -> crate::sandbox::SessionMounts {
        crate::sandbox::SessionMounts {
            dir: self.dir.clone(),
            workspace: self.workspace.clone(),
            packages_dir: self.site_packages.clone(),
            attachments_dir: self.workspace.join(attachments::ATTACHMENTS_DIR),
        }
    }
}

/// `.toolpool/sessions/<id>` under the current directory if it is there or
/// can be made, else `<state dir>/sessions/<id>`; an error naming
/// `--session-dir` when neither can.
fn default_session_dir(id: &str) -> Result<PathBuf, PoolError> {
    let here = PathBuf::from(".toolpool").join("sessions").join(id);
    let here_error = match std::fs::create_dir_all(&here) {
        Ok(()) => return Ok(here),
        Err(e) => e,
    };
    let Some(state) = state_dir() else {
        return Err(no_default_dir(&here, here_error));
    };
    let there = state.join("sessions").join(id);
    match std::fs::create_dir_all(&there) {
        Ok(()) => {
            tracing::info!(
                dir = %there.display(),
                "the current directory cannot hold .toolpool ({here_error}): the session directory is under the user's state directory"
            );
            Ok(there)
        }
        Err(_) => Err(no_default_dir(&here, here_error)),
    }
}

fn no_default_dir(here: &Path, source: std::io::Error) -> PoolError {
    PoolError::SessionDir {
        path: here.to_path_buf(),
        source: std::io::Error::new(
            source.kind(),
            format!(
                "{source}; nor can the user's state directory hold one: pass --session-dir DIR"
            ),
        ),
    }
}

/// The user's state directory for toolpool: `$XDG_STATE_HOME/toolpool`,
/// else `~/.local/state/toolpool`.
pub fn state_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("toolpool"));
    }
    let home = std::env::var_os("HOME").filter(|d| !d.is_empty())?;
    Some(
        PathBuf::from(home)
            .join(".local")
            .join("state")
            .join("toolpool"),
    )
}

/// `message` cut to at most `limit` bytes (at a character boundary), with
/// `…` after a cut.
pub(crate) fn cut(mut message: String, limit: usize) -> String {
    if message.len() > limit {
        let mut end = limit;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

/// A session id names one directory under `.toolpool/sessions` (and is
/// what tools see): one path component, so it can never point elsewhere.
fn check_session_id(id: &str) -> Result<(), PoolError> {
    let refused = id.is_empty()
        || id == "."
        || id == ".."
        || id.contains(['/', '\\', '\0'])
        || id.len() > 255;
    if refused {
        return Err(PoolError::Setting(format!(
            "session id {id:?} must be one path component: not empty, '.' or '..', no '/', '\\' or NUL, at most 255 bytes"
        )));
    }
    Ok(())
}

/// A boxed future, for object-safe async traits such as [`HumanPrompt`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A tool asks a human (`_context["human_prompt"].request(...)`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptRequest {
    /// The session the pool runs (`--session-id`).
    pub session_id: String,
    /// The node the tool names as asking (the call's `node_id` by default).
    pub node_id: String,
    /// What the human is asked to do.
    pub task_description: String,
    /// What the human should look at to answer (e.g. the model's instruction).
    pub inputs: Option<String>,
    /// Free-form details from the tool (`{"source": "function_tool"}`, ...).
    pub metadata: Map<String, Value>,
    /// The tool (function name) that asks.
    pub tool: String,
}

impl PromptRequest {
    /// The prompt as one text, as the terminal shows it: inputs, task, then
    /// a line asking for the answer.
    pub fn display_text(&self) -> String {
        let mut text = String::from("===== HUMAN INPUT REQUIRED =====\n");
        if let Some(inputs) = self.inputs.as_deref().filter(|i| !i.is_empty()) {
            text.push_str("=== Node inputs ===\n");
            text.push_str(inputs.trim_end());
            text.push('\n');
        }
        text.push_str(&format!(
            "=== Task for human ({}, tool {}) ===\n",
            self.node_id, self.tool
        ));
        text.push_str(self.task_description.trim_end());
        text.push_str("\n=== Your response: ===\n");
        text
    }
}

/// A human's answer: `.text` (and `.metadata`) of the result the tool gets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PromptAnswer {
    /// The human's answer.
    pub text: String,
    /// Free-form details the front end gives with it.
    #[serde(default)]
    pub metadata: Map<String, Value>,
}

impl PromptAnswer {
    /// An answer of `text` alone, without metadata.
    pub fn text(text: impl Into<String>) -> PromptAnswer {
        PromptAnswer {
            text: text.into(),
            metadata: Map::new(),
        }
    }
}

/// Why a prompt got no answer; the tool gets it as an exception of the type
/// [`PromptError::type_name`] names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PromptError {
    /// Nobody can be asked (no terminal, stdin at its end, a client that
    /// does not support elicitation, ...).
    #[error("no human can be asked: {0}")]
    Unavailable(String),
    /// The human saw the prompt and declined to answer.
    #[error("the human declined to answer{}", optional_reason(.0))]
    Declined(Option<String>),
    /// The human (or the front end) cancelled the prompt.
    #[error("the prompt was cancelled{}", optional_reason(.0))]
    Cancelled(Option<String>),
    /// Anything else that went wrong while asking.
    #[error("{0}")]
    Failed(String),
}

fn optional_reason(reason: &Option<String>) -> String {
    reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default()
}

impl PromptError {
    /// The exception type the tool sees (defined in the shim's `services`).
    pub fn type_name(&self) -> &'static str {
        match self {
            PromptError::Unavailable(_) => "HumanPromptUnavailable",
            PromptError::Declined(_) => "HumanPromptDeclined",
            PromptError::Cancelled(_) => "HumanPromptCancelled",
            PromptError::Failed(_) => "HumanPromptError",
        }
    }
}

/// A front end that can ask a human. The time a call spends waiting for the
/// returned future does not count against the call's timeout. The future is
/// dropped if the call ends meanwhile (cancelled, pool shut down, worker
/// killed): implementations should withdraw the question then.
pub trait HumanPrompt: Send + Sync {
    /// Asks the human; resolves to the answer, or to why there is none.
    fn request(&self, request: PromptRequest) -> BoxFuture<'_, Result<PromptAnswer, PromptError>>;

    /// Asks several questions together (a tool's
    /// `_context["human_prompt"].request_many(...)`); resolves to each
    /// one's answer, in order. By default one after the other, stopping
    /// at the first that fails; a front end that can show them at once (an
    /// MCP task's `inputRequests`) overrides it.
    fn request_many(
        &self,
        requests: Vec<PromptRequest>,
    ) -> BoxFuture<'_, Result<Vec<PromptAnswer>, PromptError>> {
        Box::pin(async move {
            let mut answers = Vec::with_capacity(requests.len());
            for request in requests {
                answers.push(self.request(request).await?);
            }
            Ok(answers)
        })
    }
}

impl std::fmt::Debug for dyn HumanPrompt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dyn HumanPrompt")
    }
}

/// A [`HumanPrompt`] from a closure returning a future, for embedders and tests:
/// `prompt_fn(|request| async move { Ok(PromptAnswer::text("yes")) })`.
pub fn prompt_fn<F, Fut>(f: F) -> Arc<dyn HumanPrompt>
where
    F: Fn(PromptRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<PromptAnswer, PromptError>> + Send + 'static,
{
    struct FnPrompt<F>(F);
    impl<F, Fut> HumanPrompt for FnPrompt<F>
    where
        F: Fn(PromptRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<PromptAnswer, PromptError>> + Send + 'static,
    {
        fn request(
            &self,
            request: PromptRequest,
        ) -> BoxFuture<'_, Result<PromptAnswer, PromptError>> {
            Box::pin((self.0)(request))
        }
    }
    Arc::new(FnPrompt(f))
}

impl From<AttachmentError> for CallbackError {
    fn from(error: AttachmentError) -> CallbackError {
        CallbackError::new(error.type_name(), error.to_string())
    }
}

impl From<PromptError> for CallbackError {
    fn from(error: PromptError) -> CallbackError {
        CallbackError::new(error.type_name(), error.to_string())
    }
}

/// What a pool's calls share: the session's attachment store and the
/// default human prompt.
pub struct SessionServices {
    pub session_id: String,
    pub attachments: Arc<AttachmentStore>,
    pub human_prompt: Option<Arc<dyn HumanPrompt>>,
}

/// Serves the callbacks of one call: the session's services plus the human
/// prompt for this call (the pool's, or one the caller gave for the call)
/// and whoever listens to its progress.
#[derive(Clone)]
pub struct CallbackHandler {
    services: Arc<SessionServices>,
    prompt: Option<Arc<dyn HumanPrompt>>,
    progress: Option<Arc<progress::ProgressGate>>,
    logs: Option<LogSubscription>,
}

/// Callback method names (see `docs/protocol.md`).
pub mod methods {
    pub const REGISTER_FILE: &str = "attachments.register_file";
    pub const REGISTER_BYTES: &str = "attachments.register_bytes";
    pub const REGISTER_REMOTE_FILE: &str = "attachments.register_remote_file";
    pub const UPDATE_REMOTE_FILE_ID: &str = "attachments.update_remote_file_id";
    pub const INGEST_RECORD: &str = "attachments.ingest_record";
    pub const GET: &str = "attachments.get";
    pub const LIST: &str = "attachments.list";
    pub const EXPORT_MANIFEST: &str = "attachments.export_manifest";
    pub const HUMAN_PROMPT: &str = "human_prompt.request";
    pub const HUMAN_PROMPT_MANY: &str = "human_prompt.request_many";
    pub const PROGRESS: &str = "progress.report";
    pub const LOG: &str = "log.record";
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
    pub fn new(
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
    pub fn log_threshold(&self) -> Option<u32> {
        self.logs.as_ref().map(|logs| logs.level.python_threshold())
    }

    /// Whether someone listens to this call's progress (else the tool's
    /// `_context["progress"]` does nothing).
    pub fn has_progress(&self) -> bool {
        self.progress.is_some()
    }

    /// Whether this call has a human prompt service (else the tool's
    /// `_context["human_prompt"]` is `None`).
    pub fn has_human_prompt(&self) -> bool {
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
    use super::*;

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
