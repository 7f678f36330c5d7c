//! Long calls as tasks (protocol 2026-07-28, the tasks extension).
//!
//! With `--task-after SECS`, a `tools/call` from a client that declares the
//! tasks extension and that runs longer than SECS is answered with a task
//! (`resultType: "task"`) instead of holding the request open; the call runs
//! on. `tasks/get` reports its status and, once it finished, its result (the
//! same `CallToolResult` the call would have answered). `tasks/cancel` drops
//! the call, which kills its worker as a cancelled call does. A finished task
//! is kept for `--task-keep` ([`DEFAULT_KEEP`] without it), then forgotten.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, InputRequests, InputResponses, JsonObject,
    Task, TaskPayload, TaskStatus,
};

use super::task_input::Questions;
use crate::mcp::replicas::Replica;
use tokio::task::AbortHandle;

/// How long a finished (or cancelled) task is kept for `tasks/get` without
/// `--task-keep`.
pub(crate) const DEFAULT_KEEP: Duration = Duration::from_secs(300);

/// How often a client is asked to poll.
const POLL_INTERVAL_MS: u64 = 500;

enum State {
    Working(AbortHandle),
    Completed(CallToolResult),
    Failed(JsonObject),
    Cancelled,
}

/// How a task's call ended.
pub(crate) enum TaskEnd {
    /// It answered: its result, also when the tool failed (`isError`), as
    /// MCP has it for a tool that ran.
    Answered(CallToolResult),
    /// It could not answer (its worker died under it): the task fails, with
    /// this JSON-RPC error.
    Failed { code: i32, message: String },
}

struct Entry {
    created_at: String,
    updated_at: String,
    state: State,
    /// The questions its tool asks a human, when its client can answer.
    questions: Option<Arc<Questions>>,
    /// The tenant whose call it is (`--auth-tokens`): no other finds it.
    owner: Option<String>,
}

pub(crate) struct Tasks {
    tasks: Mutex<HashMap<String, Entry>>,
    /// How long a finished task is kept.
    keep: Duration,
    replica: Option<Arc<Replica>>,
}

impl Tasks {
    /// `replica`: the replica whose tag each task id carries, if several
    /// serve behind one balancer.
    pub(crate) fn new(keep: Duration, replica: Option<Arc<Replica>>) -> Tasks {
        Tasks {
            tasks: Mutex::new(HashMap::new()),
            keep,
            replica,
        }
    }

    pub(crate) fn keep(&self) -> Duration {
        self.keep
    }

    /// Makes `call` (already running in its own task) a task: its result is
    /// kept when it ends. Returns the answer to the `tools/call`.
    pub(crate) fn adopt(
        self: &Arc<Self>,
        call: tokio::task::JoinHandle<TaskEnd>,
        questions: Option<Arc<Questions>>,
        owner: Option<String>,
    ) -> CreateTaskResult {
        let id = match &self.replica {
            Some(replica) => replica.tag(&task_id()),
            None => task_id(),
        };
        let now = timestamp(SystemTime::now());
        let entry = Entry {
            created_at: now.clone(),
            updated_at: now,
            state: State::Working(call.abort_handle()),
            questions,
            owner,
        };
        self.lock().insert(id.clone(), entry);
        let tasks = Arc::downgrade(self);
        let task = id.clone();
        tokio::spawn(async move {
            let outcome = call.await;
            let Some(tasks) = tasks.upgrade() else {
                return;
            };
            if let Some(entry) = tasks.lock().get_mut(&task) {
                if let State::Working(_) = &entry.state {
                    entry.state = match outcome {
                        Ok(TaskEnd::Answered(result)) => State::Completed(result),
                        Ok(TaskEnd::Failed { code, message }) => {
                            State::Failed(error_object(code, message))
                        }
                        Err(panicked) => State::Failed(error_object(
                            -32603,
                            format!("the call's task failed: {panicked}"),
                        )),
                    };
                    entry.updated_at = timestamp(SystemTime::now());
                }
            }
            tasks.forget_later(task);
        });
        let entry = self.lock();
        let task = entry
            .get(&id)
            .map(|e| self.wire_task(&id, e))
            .unwrap_or_else(|| Task::new(id.clone(), TaskStatus::Working, "", ""));
        CreateTaskResult::new(task)
    }

    /// `tasks/get` from `caller` (its tenant): `None` for an unknown id and
    /// for another tenant's task alike.
    pub(crate) fn get(&self, id: &str, caller: Option<&str>) -> Option<DetailedTask> {
        let tasks = self.lock();
        let entry = tasks.get(id).filter(|e| e.owner.as_deref() == caller)?;
        let payload = match &entry.state {
            State::Working(_) => match pending(entry) {
                Some(input_requests) => TaskPayload::InputRequired { input_requests },
                None => TaskPayload::Working,
            },
            State::Cancelled => TaskPayload::Cancelled,
            State::Failed(error) => TaskPayload::Failed {
                error: error.clone(),
            },
            State::Completed(result) => TaskPayload::Completed {
                result: match serde_json::to_value(result) {
                    Ok(serde_json::Value::Object(result)) => result,
                    _ => JsonObject::new(),
                },
            },
        };
        Some(DetailedTask::new(self.wire_task(id, entry), payload))
    }

    /// `tasks/update`: hands the client's answers to the task's open
    /// questions (answered keys are done; the rest stay open). False for an
    /// unknown id, or another tenant's task.
    pub(crate) fn update(
        &self,
        id: &str,
        responses: &InputResponses,
        caller: Option<&str>,
    ) -> bool {
        let tasks = self.lock();
        let Some(entry) = tasks.get(id).filter(|e| e.owner.as_deref() == caller) else {
            return false;
        };
        if let Some(questions) = &entry.questions {
            questions.answer(responses);
        }
        true
    }

    /// `tasks/cancel`: kills a working task's call. False for an unknown
    /// id, or another tenant's task.
    pub(crate) fn cancel(self: &Arc<Self>, id: &str, caller: Option<&str>) -> bool {
        let mut tasks = self.lock();
        let Some(entry) = tasks.get_mut(id).filter(|e| e.owner.as_deref() == caller) else {
            return false;
        };
        if let State::Working(call) = &entry.state {
            // Aborting drops the call future, which kills its worker.
            call.abort();
            entry.state = State::Cancelled;
            entry.updated_at = timestamp(SystemTime::now());
        }
        true
    }

    fn forget_later(self: Arc<Self>, id: String) {
        let (tasks, keep) = (Arc::downgrade(&self), self.keep);
        tokio::spawn(async move {
            tokio::time::sleep(keep).await;
            if let Some(tasks) = tasks.upgrade() {
                tasks.lock().remove(&id);
            }
        });
    }

    fn wire_task(&self, id: &str, entry: &Entry) -> Task {
        let status = match entry.state {
            State::Working(_) if pending(entry).is_some() => TaskStatus::InputRequired,
            State::Working(_) => TaskStatus::Working,
            State::Completed(_) => TaskStatus::Completed,
            State::Failed(_) => TaskStatus::Failed,
            State::Cancelled => TaskStatus::Cancelled,
        };
        Task::new(
            id,
            status,
            entry.created_at.clone(),
            entry.updated_at.clone(),
        )
        .with_ttl_ms(self.keep.as_millis() as u64)
        .with_poll_interval_ms(POLL_INTERVAL_MS)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        match self.tasks.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// The input requests a working task waits for, if any.
fn pending(entry: &Entry) -> Option<InputRequests> {
    let pending = entry.questions.as_ref()?.pending();
    (!pending.is_empty()).then_some(pending)
}

/// A JSON-RPC error object.
fn error_object(code: i32, message: String) -> JsonObject {
    let mut error = JsonObject::new();
    error.insert("code".into(), code.into());
    error.insert("message".into(), message.into());
    error
}

/// A random task id (hex).
fn task_id() -> String {
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    if read.is_err() {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = nanos.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// RFC 3339 UTC, to the millisecond: `2026-12-01T10:13:16.123Z`.
fn timestamp(at: SystemTime) -> String {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc_3339_utc() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_120_596_123);
        assert_eq!(timestamp(at), "2026-12-01T10:23:16.123Z");
        assert_eq!(
            timestamp(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000Z"
        );
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(timestamp(leap), "2000-02-29T00:00:00.000Z");
    }
}
