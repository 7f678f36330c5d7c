//! A tool asking a human: the question ([`PromptRequest`]), the answer,
//! why there is none ([`PromptError`]), and who answers ([`HumanPrompt`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::worker::CallbackError;

/// A boxed future, for object-safe async traits such as [`HumanPrompt`].
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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

impl From<PromptError> for CallbackError {
    fn from(error: PromptError) -> CallbackError {
        CallbackError::new(error.type_name(), error.to_string())
    }
}
