//! Human prompts on protocol 2026-07-28, as multi-round-trip results.
//!
//! 2026-07-28 has no server-to-client requests. When a tool asks a human,
//! its call stays suspended in its worker (the pool does not count the wait
//! against the timeout) and the `tools/call` is answered with an
//! `InputRequiredResult`: an elicitation request under the key `human` and a
//! `requestState`. The client asks its user and retries the same
//! `tools/call` with the answer in `inputResponses` and the `requestState`
//! echoed; that resumes the same suspended call, which then finishes or asks
//! again.
//!
//! The `requestState` is an opaque handle: a random id and an HMAC-SHA256
//! (key drawn at start) over the id and the call's binding — the client's
//! name and version, the tool and its arguments. A handle that was not made
//! here, or is presented for another client or call, fails its check; one
//! already used is no longer in the table. Either way the retry is answered
//! with an invalid-params error.
//!
//! A suspended call waits for the retry as long as a human wait may last:
//! `--human-timeout`, or [`HUMAN_WAIT`] without it. When that passes the call
//! is ended: the tool is told `HumanPromptUnavailable` (by the worker's own
//! bound on the wait, with `--human-timeout`) and whatever of it still runs
//! is dropped, which kills its worker (the pool starts another). Its handle
//! is remembered as expired for [`EXPIRED_KEPT`], so that a late retry is
//! answered with the call's end, the tool error
//! `HumanPromptUnavailable: no answer within N s`, rather than a puzzle.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, InputRequest,
    InputRequests, InputRequiredResult, InputResponses,
};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::elicit;
use crate::context::{BoxFuture, HumanPrompt, PromptAnswer, PromptError, PromptRequest};
use crate::mcp::replicas::{local_part, Replica};
use crate::mcp::sealing::{hmac, random, same_mac};
use crate::pool::CallReport;

/// How long a suspended call waits for the client to come back with the
/// human's answer, without `--human-timeout`.
pub(crate) const HUMAN_WAIT: Duration = Duration::from_secs(600);

/// How long the handle of a call that expired is remembered, so that a late
/// retry learns why; and how many are (the oldest go first).
pub(crate) const EXPIRED_KEPT: Duration = Duration::from_secs(600);
const MAX_EXPIRED: usize = 4096;

/// The key of the one input request in an `InputRequiredResult`, unless the
/// tool names one (`metadata["input_key"]`).
const INPUT_KEY: &str = "human";

/// The elicitation request that asks `request`'s question, and its form
/// (which the answer must fit).
pub(in crate::mcp) fn input_request(
    request: &PromptRequest,
) -> (InputRequest, rmcp::model::ElicitationSchema) {
    let form = elicit::schema(request);
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: elicit::message(request),
        requested_schema: form.clone(),
    };
    (InputRequest::Elicitation(ElicitRequest::new(params)), form)
}

/// The key of the input request for `request`: the tool's
/// `metadata["input_key"]` when it is 1 to 64 letters, digits, `_`, `-` or
/// `.`, else [`INPUT_KEY`].
pub(in crate::mcp) fn input_key(request: &PromptRequest) -> String {
    request
        .metadata
        .get("input_key")
        .and_then(Value::as_str)
        .filter(|key| {
            (1..=64).contains(&key.len())
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        })
        .unwrap_or(INPUT_KEY)
        .to_string()
}

pub(in crate::mcp) type Answer = Result<PromptAnswer, PromptError>;

/// A tool's question, and where its answer goes.
pub(in crate::mcp) struct Asked {
    pub(in crate::mcp) request: PromptRequest,
    pub(in crate::mcp) answer: oneshot::Sender<Answer>,
}

/// The prompt service of a call made on 2026-07-28: hands each question to
/// the `tools/call` handler driving the call.
pub(crate) struct RoundTripPrompt {
    asked: mpsc::Sender<Asked>,
}

impl HumanPrompt for RoundTripPrompt {
    fn request(&self, request: PromptRequest) -> BoxFuture<'_, Answer> {
        Box::pin(async move {
            let answered = self.ask(request).await?;
            wait_for(answered).await
        })
    }

    /// Every question handed over before any answer is awaited: a task
    /// shows them together (`inputRequests`) and takes their answers in
    /// any order; a round trip asks them one after another.
    fn request_many(
        &self,
        requests: Vec<PromptRequest>,
    ) -> BoxFuture<'_, Result<Vec<PromptAnswer>, PromptError>> {
        Box::pin(async move {
            let mut answers = Vec::with_capacity(requests.len());
            for request in requests {
                answers.push(self.ask(request).await?);
            }
            let mut answered = Vec::with_capacity(answers.len());
            for answer in answers {
                answered.push(wait_for(answer).await?);
            }
            Ok(answered)
        })
    }
}

impl RoundTripPrompt {
    /// Hands `request` to the handler driving the call.
    async fn ask(&self, request: PromptRequest) -> Result<oneshot::Receiver<Answer>, PromptError> {
        let (answer, answered) = oneshot::channel();
        self.asked
            .send(Asked { request, answer })
            .await
            .map_err(|_| PromptError::Failed("the MCP request ended".into()))?;
        Ok(answered)
    }
}

async fn wait_for(answered: oneshot::Receiver<Answer>) -> Answer {
    answered.await.unwrap_or_else(|_| {
        Err(PromptError::Failed(
            "the MCP client did not come back with the human's answer".into(),
        ))
    })
}

/// A call running in its own task (dropping this aborts it, which kills its
/// worker), with the questions it asks.
pub(crate) struct Running {
    report: AbortOnDropHandle<CallReport>,
    asked: mpsc::Receiver<Asked>,
}

impl Running {
    /// The call's report, and the questions it asks.
    pub(in crate::mcp) fn into_parts(
        self,
    ) -> (AbortOnDropHandle<CallReport>, mpsc::Receiver<Asked>) {
        (self.report, self.asked)
    }

    /// Starts `call`, made with the prompt service from `prompt`.
    pub(crate) fn start<F, Fut>(call: F) -> Running
    where
        F: FnOnce(Arc<dyn HumanPrompt>) -> Fut,
        Fut: std::future::Future<Output = CallReport> + Send + 'static,
    {
        let (tx, asked) = mpsc::channel(1);
        let future = call(Arc::new(RoundTripPrompt { asked: tx }));
        Running {
            report: AbortOnDropHandle::new(tokio::spawn(future)),
            asked,
        }
    }
}

/// Where a call driven by [`RoundTrips::drive`] got to.
pub(crate) enum Step {
    Done(CallReport),
    /// The tool asks a human: the answer to send the client.
    Asks(InputRequiredResult),
    /// The call's task ended without a report (it panicked).
    Failed(String),
    /// The client cancelled the request; the call was dropped.
    Cancelled,
    /// Still running after the time [`RoundTrips::drive`] was given, without
    /// a question: the caller decides what becomes of it (a task).
    Working(Running),
}

/// Why a retry's `requestState` is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum StateError {
    #[error("the requestState is not one this server gave this client for this call")]
    Forged,
    #[error("the requestState was already used, or the call it stood for has ended")]
    Stale,
    /// The human's answer came after the call stopped waiting for it; the
    /// text is the tool error's message.
    #[error("no answer within {limit} s{flag}; the call was ended", limit = crate::duration_text::format_secs(*.waited), flag = if *.from_flag { " (--human-timeout)" } else { "" })]
    Expired { waited: Duration, from_flag: bool },
}

struct Suspended {
    binding: [u8; 32],
    /// The key of its input request, where its answer is looked for.
    key: String,
    /// The form its answer must fit.
    form: rmcp::model::ElicitationSchema,
    answer: oneshot::Sender<Answer>,
    call: Running,
}

/// The suspended calls of one server (shared by its sessions).
pub(crate) struct RoundTrips {
    key: [u8; 32],
    replica: Option<Arc<Replica>>,
    /// How long a suspended call waits for the retry.
    wait: Duration,
    /// `wait` is `--human-timeout` (not the default).
    from_flag: bool,
    suspended: Mutex<HashMap<[u8; 16], Suspended>>,
    /// The ids of calls that expired, oldest first.
    expired: Mutex<VecDeque<[u8; 16]>>,
}

impl RoundTrips {
    /// `human_timeout`: `--human-timeout`, the bound on a suspended call's
    /// wait ([`HUMAN_WAIT`] without it).
    /// `replica`: the replica whose tag each `requestState` carries, if
    /// several serve behind one balancer.
    pub(crate) fn new(
        human_timeout: Option<Duration>,
        replica: Option<Arc<Replica>>,
    ) -> Arc<RoundTrips> {
        Arc::new(RoundTrips {
            key: random(),
            replica,
            wait: human_timeout.unwrap_or(HUMAN_WAIT),
            from_flag: human_timeout.is_some(),
            suspended: Mutex::new(HashMap::new()),
            expired: Mutex::new(VecDeque::new()),
        })
    }

    /// Runs `call` until it finishes, asks a human, or `ct` is cancelled;
    /// or, with `until`, until that long has passed.
    pub(crate) async fn drive(
        self: &Arc<Self>,
        mut call: Running,
        binding: [u8; 32],
        ct: &CancellationToken,
        until: Option<Duration>,
    ) -> Step {
        let waited = async {
            match until {
                Some(limit) => tokio::time::sleep(limit).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = waited => Step::Working(call),
            report = &mut call.report => match report {
                Ok(report) => Step::Done(report),
                Err(e) => Step::Failed(format!("the call's task failed: {e}")),
            },
            Some(asked) = call.asked.recv() => Step::Asks(self.suspend(asked, call, binding)),
            _ = ct.cancelled() => Step::Cancelled,
        }
    }

    fn suspend(
        self: &Arc<Self>,
        asked: Asked,
        call: Running,
        binding: [u8; 32],
    ) -> InputRequiredResult {
        let id: [u8; 16] = random();
        let key = input_key(&asked.request);
        let (input, form) = input_request(&asked.request);
        let mut requests = InputRequests::new();
        requests.insert(key.clone(), input);
        let state = self.seal(&id, &binding);
        self.lock().insert(
            id,
            Suspended {
                binding,
                key,
                form,
                answer: asked.answer,
                call,
            },
        );
        // Nobody came back in time: drop the call (its worker is killed
        // if the tool still runs) and remember why the handle is dead.
        let (table, wait) = (Arc::downgrade(self), self.wait);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            if let Some(table) = table.upgrade() {
                table.expire(id);
            }
        });
        InputRequiredResult::new(Some(requests), Some(state))
    }

    fn expire(self: &Arc<Self>, id: [u8; 16]) {
        let Some(suspended) = self.lock().remove(&id) else {
            return; // resumed in time
        };
        tracing::info!(
            waited_secs = self.wait.as_secs_f64(),
            "a suspended call's human answer did not come in time; the call is ended"
        );
        drop(suspended);
        let mut expired = lock(&self.expired);
        if expired.len() >= MAX_EXPIRED {
            expired.pop_front();
        }
        expired.push_back(id);
        drop(expired);
        let table = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(EXPIRED_KEPT).await;
            if let Some(table) = table.upgrade() {
                lock(&table.expired).retain(|kept| kept != &id);
            }
        });
    }

    /// The suspended call `state` stands for, given the human's answer from
    /// `responses`; it is taken out of the table (a handle works once).
    pub(crate) fn resume(
        &self,
        state: &str,
        binding: &[u8; 32],
        responses: Option<&InputResponses>,
    ) -> Result<Running, StateError> {
        let id = self.open(state, binding)?;
        let Some(suspended) = self.lock().remove(&id) else {
            if lock(&self.expired).contains(&id) {
                return Err(StateError::Expired {
                    waited: self.wait,
                    from_flag: self.from_flag,
                });
            }
            return Err(StateError::Stale);
        };
        if &suspended.binding != binding {
            return Err(StateError::Forged);
        }
        let answer = answer_of(
            &suspended.key,
            responses.and_then(|r| r.get(suspended.key.as_str())),
            &suspended.form,
        );
        // The tool may have ended meanwhile (its worker died): then the
        // answer has nowhere to go, and driving the call reports how it ended.
        let _ = suspended.answer.send(answer);
        Ok(suspended.call)
    }

    fn seal(&self, id: &[u8; 16], binding: &[u8; 32]) -> String {
        let mut sealed = id.to_vec();
        sealed.extend_from_slice(&hmac(&self.key, &[id, binding]));
        let state = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sealed);
        match &self.replica {
            Some(replica) => replica.tag(&state),
            None => state,
        }
    }

    fn open(&self, state: &str, binding: &[u8; 32]) -> Result<[u8; 16], StateError> {
        // Its tag brought it here; its own part is checked as ever.
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(local_part(state))
            .map_err(|_| StateError::Forged)?;
        if bytes.len() != 48 {
            return Err(StateError::Forged);
        }
        let (id, mac) = bytes.split_at(16);
        let expected = hmac(&self.key, &[id, binding]);
        if !same_mac(mac, &expected) {
            return Err(StateError::Forged);
        }
        let mut out = [0u8; 16];
        out.copy_from_slice(id);
        Ok(out)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 16], Suspended>> {
        lock(&self.suspended)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// What a call's handle is bound to: the client (name and version as it
/// gives them in the request), its tenant (`--auth-tokens`: another
/// tenant's handle is then one this server never gave, the same refusal as
/// a made-up one), the tool and its arguments.
pub(crate) fn binding(
    client: Option<&rmcp::model::Implementation>,
    tenant: Option<&str>,
    tool: &str,
    args: &Value,
) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in [
        client.map_or("", |c| c.name.as_str()),
        client.map_or("", |c| c.version.as_str()),
        tenant.unwrap_or(""),
        tool,
        &args.to_string(),
    ] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.finalize().into()
}

/// The tool's answer from the client's `ElicitResult`.
pub(in crate::mcp) fn answer_of(
    key: &str,
    response: Option<&Value>,
    form: &rmcp::model::ElicitationSchema,
) -> Answer {
    let Some(response) = response else {
        return Err(PromptError::Failed(format!(
            "the MCP client's retry carried no answer to the '{key}' request"
        )));
    };
    let result: ElicitResult = serde_json::from_value(response.clone()).map_err(|e| {
        PromptError::Failed(format!(
            "the MCP client's answer is not an elicitation result: {e}"
        ))
    })?;
    match result.action {
        ElicitationAction::Accept => elicit::answer(result.content, form),
        ElicitationAction::Decline => Err(PromptError::Declined(None)),
        ElicitationAction::Cancel => Err(PromptError::Cancelled(None)),
        other => Err(PromptError::Failed(format!(
            "the MCP client answered the elicitation with {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests;
