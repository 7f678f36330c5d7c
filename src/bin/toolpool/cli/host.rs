//! `toolpool host`: the pool served to the program that started it, over
//! its stdin and stdout — the channel of the Python module (`import
//! toolpool`, docs/python.md).
//!
//! One JSON object a line each way. The host sends `invoke`, `cancel`,
//! `answer` (a human prompt's), `resolve` and `stats`; toolpool sends
//! `ready` (or `fatal`) once, then `done` for each request, `ask` and
//! `withdraw` for the human prompts of a call, and `error` for a line it
//! could not read (a protocol error, never silence). docs/python.md has
//! the fields.
//!
//! The supervisor stays a process of its own, not a library inside the
//! host: its subreaper and reaper would take the host's own children, its
//! runtime would not survive the host's `fork()`, and a panic stays here.
//! It dies with the host: `PR_SET_PDEATHSIG` (SIGKILL, which kills every
//! worker through its guardian), and stdin's end shuts the pool down.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::signals::StopSignals;
use super::CliError;
use toolpool::context::{HumanPrompt, PromptAnswer, PromptError, PromptRequest, Session};
use toolpool::context::{SessionPaths, SessionsRoot};
use toolpool::workflow::{nodes_json, ToolFormat, Workflow};
use toolpool::{ErrorKind, ToolError};
use toolpool::{InvokeContext, InvokeOptions, Pool, PoolBuilder};

/// The environment variable with the host's pid: the supervisor exits at
/// once if its parent is already another process (the host died before
/// `PR_SET_PDEATHSIG` was set).
pub const HOST_PID_ENV: &str = "TOOLPOOL_HOST_PID";

/// Longest line the host may send: the frame limit, as for a call's
/// arguments anywhere else.
const MAX_LINE: usize = toolpool::PoolBuilder::DEFAULT_MAX_FRAME;

/// A line from the host.
#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
enum Request {
    Invoke(Box<Invoke>),
    Cancel {
        id: u64,
    },
    Answer {
        id: u64,
        #[serde(default)]
        text: Option<String>,
        #[serde(default)]
        metadata: Map<String, Value>,
        /// Why there is no answer (the host's callback raised).
        #[serde(default)]
        error: Option<String>,
    },
    Resolve {
        id: u64,
        workflow: std::path::PathBuf,
        #[serde(default)]
        node: Option<String>,
    },
    Stats {
        id: u64,
    },
}

/// `invoke`: a call.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Invoke {
    id: u64,
    name: String,
    #[serde(default)]
    args: Option<Value>,
    /// Seconds; the pool's default when absent.
    #[serde(default)]
    timeout: Option<f64>,
    /// A session name under the sessions root.
    #[serde(default)]
    session: Option<String>,
    /// A session at this directory (the original runtime's
    /// `graph_directory`).
    #[serde(default)]
    session_dir: Option<std::path::PathBuf>,
    #[serde(default)]
    node_id: Option<String>,
    /// `_context["vars"]`.
    #[serde(default)]
    vars: Option<Map<String, Value>>,
    /// JSON values for the tool's `_context`.
    #[serde(default)]
    context: Option<Map<String, Value>>,
    /// Whether the host answers this call's human prompts.
    #[serde(default)]
    prompt: bool,
}

/// What the tasks of the command share.
struct Host {
    pool: Pool,
    out: mpsc::UnboundedSender<String>,
    /// Questions sent to the host and not answered yet, by question id.
    questions: Mutex<HashMap<u64, oneshot::Sender<Result<PromptAnswer, PromptError>>>>,
    next_question: AtomicU64,
    /// The calls running, by the host's id: aborting one drops its call,
    /// which kills its worker.
    calls: Mutex<HashMap<u64, JoinHandle<()>>>,
    sessions: SessionsRoot,
    /// Sessions at directories the host named, by directory.
    placed: Mutex<HashMap<std::path::PathBuf, Arc<Session>>>,
}

impl Host {
    fn send(&self, message: Value) {
        let _ = self.out.send(message.to_string());
    }
}

/// Dies with the parent: SIGKILL when the thread that started this process
/// exits (the Python module starts it from a thread that lives as long as
/// the pool). Exits if the parent is already gone.
fn die_with_parent() -> Result<(), CliError> {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and no
    // pointer; it changes only this process's parent-death signal.
    let set = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    if set != 0 {
        return Err(CliError::Usage(format!(
            "host: cannot set the parent-death signal: {}",
            std::io::Error::last_os_error()
        )));
    }
    let expected = std::env::var(HOST_PID_ENV)
        .ok()
        .and_then(|pid| pid.parse::<i32>().ok());
    if let Some(expected) = expected {
        if nix::unistd::getppid().as_raw() != expected {
            return Err(CliError::Usage(format!(
                "host: the process that started toolpool (pid {expected}) is gone"
            )));
        }
    }
    Ok(())
}

pub(super) async fn host(
    builder: PoolBuilder,
    signals: &mut Option<StopSignals>,
) -> Result<ExitCode, CliError> {
    die_with_parent()?;
    let (out, lines) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(write_lines(lines, stdout_pipe()?));
    let (pool, sessions) = match start(builder, signals).await {
        Ok(started) => started,
        Err(error) => {
            let _ = out.send(json!({"op": "fatal", "text": error.to_string()}).to_string());
            drop(out);
            let _ = writer.await;
            return Err(error);
        }
    };
    let catalog = pool.catalog();
    let _ = out.send(
        json!({
            "op": "ready",
            "pid": std::process::id(),
            "catalog": catalog.to_json(),
            "openai": catalog.to_openai(),
            "default_timeout": pool.default_timeout().as_secs_f64(),
        })
        .to_string(),
    );
    let host = Arc::new(Host {
        pool,
        out,
        questions: Mutex::default(),
        next_question: AtomicU64::new(1),
        calls: Mutex::default(),
        sessions,
        placed: Mutex::default(),
    });
    let mut stdin = BufReader::new(stdin_pipe()?);
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        let mut limited = (&mut stdin).take(MAX_LINE as u64 + 1);
        let read = tokio::select! {
            read = limited.read_until(b'\n', &mut line) => read,
            _ = super::next_stop_signal(signals) => break,
        };
        match read {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        number += 1;
        if line.len() > MAX_LINE {
            host.send(json!({"op": "error", "text": format!(
                "line {number}: longer than {MAX_LINE} bytes; the channel is closed"
            )}));
            break;
        }
        handle_line(&host, &line, number);
    }
    // The host is gone or asked to stop: calls still running are killed
    // and answered PoolClosed (if anyone still reads).
    host.pool.shutdown_with_grace(Duration::ZERO).await;
    let running: Vec<JoinHandle<()>> = host
        .calls
        .lock()
        .map(|mut calls| calls.drain().map(|(_, task)| task).collect())
        .unwrap_or_default();
    for task in running {
        let _ = task.await;
    }
    drop(host);
    let _ = writer.await;
    Ok(ExitCode::SUCCESS)
}

/// The pool, and the root of the sessions calls name (beside the pool's
/// own session, as over HTTP).
async fn start(
    builder: PoolBuilder,
    signals: &mut Option<StopSignals>,
) -> Result<(Pool, SessionsRoot), CliError> {
    let pool = super::build_unless_stopped(builder, signals).await?;
    let own = pool.session().dir.clone();
    let root = own.parent().map(std::path::Path::to_path_buf);
    match SessionsRoot::new(root.as_deref().unwrap_or(&own), Duration::MAX, &[&own]) {
        Ok(sessions) => Ok((pool, sessions)),
        Err(error) => {
            pool.shutdown_with_grace(Duration::ZERO).await;
            Err(error.into())
        }
    }
}

/// stdin as a non-blocking pipe (tokio's `stdin()` reads on a blocking
/// thread: a thread hop per line).
fn stdin_pipe() -> Result<pipe::Receiver, CliError> {
    use std::os::fd::AsFd;
    std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Receiver::from_owned_fd)
        .map_err(|e| CliError::Usage(format!("host: stdin must be a pipe: {e}")))
}

fn stdout_pipe() -> Result<pipe::Sender, CliError> {
    use std::os::fd::AsFd;
    std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Sender::from_owned_fd)
        .map_err(|e| CliError::Usage(format!("host: stdout must be a pipe: {e}")))
}

/// Writes what the tasks send, a line each, flushing when nothing more is
/// queued; ends when every sender is gone or the host stops reading.
async fn write_lines(mut lines: mpsc::UnboundedReceiver<String>, stdout: pipe::Sender) {
    let mut stdout = tokio::io::BufWriter::new(stdout);
    while let Some(first) = lines.recv().await {
        let mut next = Some(first);
        while let Some(line) = next {
            if stdout.write_all(line.as_bytes()).await.is_err()
                || stdout.write_all(b"\n").await.is_err()
            {
                return;
            }
            next = lines.try_recv().ok();
        }
        if stdout.flush().await.is_err() {
            return;
        }
    }
}

fn handle_line(host: &Arc<Host>, line: &[u8], number: u64) {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let request: Request = match serde_json::from_slice(line) {
        Ok(request) => request,
        Err(e) => {
            host.send(json!({"op": "error", "text": format!("line {number}: {e}")}));
            return;
        }
    };
    match request {
        Request::Invoke(invoke) => {
            let Invoke {
                id,
                name,
                args,
                timeout,
                session,
                session_dir,
                node_id,
                vars,
                context,
                prompt,
            } = *invoke;
            let options = match call_options(host, id, timeout, session, session_dir, prompt) {
                Ok(mut options) => {
                    options.context = InvokeContext {
                        node_id,
                        vars: vars.unwrap_or_default(),
                        host: context.unwrap_or_default(),
                    };
                    options
                }
                Err(text) => {
                    host.send(failed(id, "bad_request", &text));
                    return;
                }
            };
            let args = args.unwrap_or_else(|| json!({}));
            start_call(host, id, name, args, options);
        }
        Request::Cancel { id } => {
            let task = host.calls.lock().ok().and_then(|mut c| c.remove(&id));
            if let Some(task) = task {
                task.abort();
                host.send(failed(id, "cancelled", "the call was cancelled"));
            }
        }
        Request::Answer {
            id,
            text,
            metadata,
            error,
        } => {
            let waiting = host.questions.lock().ok().and_then(|mut q| q.remove(&id));
            if let Some(waiting) = waiting {
                let answer = match (error, text) {
                    (Some(error), _) => Err(PromptError::Failed(error)),
                    (None, text) => Ok(PromptAnswer {
                        text: text.unwrap_or_default(),
                        metadata,
                    }),
                };
                let _ = waiting.send(answer);
            }
        }
        Request::Resolve { id, workflow, node } => {
            let host = host.clone();
            tokio::spawn(async move {
                let answer = match resolve(&host.pool, &workflow, node.as_deref()) {
                    Ok(value) => json!({"op": "done", "id": id, "ok": true, "value": value}),
                    Err(text) => failed(id, "workflow", &text),
                };
                host.send(answer);
            });
        }
        Request::Stats { id } => {
            let stats = serde_json::to_value(host.pool.stats()).unwrap_or(Value::Null);
            host.send(json!({"op": "done", "id": id, "ok": true, "value": stats}));
        }
    }
}

/// The options of one call, or why they cannot be made.
fn call_options(
    host: &Arc<Host>,
    id: u64,
    timeout: Option<f64>,
    session: Option<String>,
    session_dir: Option<std::path::PathBuf>,
    prompt: bool,
) -> Result<InvokeOptions, String> {
    let timeout = timeout
        .map(|secs| {
            Duration::try_from_secs_f64(secs)
                .ok()
                .filter(|t| !t.is_zero())
                .ok_or_else(|| {
                    format!("timeout: expected a positive number of seconds, got {secs}")
                })
        })
        .transpose()?;
    let session = match (session, session_dir) {
        (Some(_), Some(_)) => {
            return Err("a call names a session or a session directory, not both".into())
        }
        (Some(name), None) => Some(host.sessions.open(&name).map_err(|e| e.to_string())?),
        (None, Some(dir)) => Some(placed_session(host, &dir)?),
        (None, None) => None,
    };
    let human_prompt = prompt.then(|| {
        Arc::new(HostPrompt {
            host: Arc::downgrade(host),
            call: id,
        }) as Arc<dyn HumanPrompt>
    });
    Ok(InvokeOptions {
        timeout,
        session,
        human_prompt,
        ..InvokeOptions::default()
    })
}

/// The session at `dir` (the original runtime's `graph_directory`, whose
/// `code_workspace` is the tool's workspace), made once.
fn placed_session(host: &Host, dir: &std::path::Path) -> Result<Arc<Session>, String> {
    let mut placed = host
        .placed
        .lock()
        .map_err(|_| "the sessions table is poisoned".to_string())?;
    if let Some(session) = placed.get(dir) {
        return Ok(session.clone());
    }
    let id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| toolpool::context::check_session_name(n).is_ok())
        .unwrap_or_else(|| "session".to_string());
    let paths = SessionPaths::prepare(&id, Some(dir)).map_err(|e| e.to_string())?;
    let session = Arc::new(Session::at(paths));
    placed.insert(dir.to_path_buf(), session.clone());
    Ok(session)
}

fn start_call(host: &Arc<Host>, id: u64, name: String, args: Value, options: InvokeOptions) {
    let Ok(mut calls) = host.calls.lock() else {
        return;
    };
    let task_host = host.clone();
    let task = tokio::spawn(async move {
        let report = task_host.pool.invoke_report(&name, args, options).await;
        let still_running = task_host
            .calls
            .lock()
            .is_ok_and(|mut calls| calls.remove(&id).is_some());
        if !still_running {
            return; // cancelled as it ended: the host was told already
        }
        let answer = match report.result {
            Ok(value) => json!({"op": "done", "id": id, "ok": true, "value": value}),
            Err(error) => tool_failed(id, &error),
        };
        task_host.send(answer);
    });
    calls.insert(id, task);
}

/// A failed call's `done`: the CLI's `--json` error object, the agent's
/// text and the kind the Python module picks its exception by.
fn tool_failed(id: u64, error: &ToolError) -> Value {
    let kind = match &error.kind {
        ErrorKind::Timeout => "timeout",
        ErrorKind::Raised(_) => "raised",
        ErrorKind::ResultTooLarge => "result_too_large",
        ErrorKind::ProtocolError => "protocol_error",
        ErrorKind::WorkerDied => "worker_died",
        ErrorKind::NotFound => "not_found",
        ErrorKind::InvalidArguments => "invalid_arguments",
        ErrorKind::PoolBusy => "pool_busy",
        ErrorKind::PoolClosed => "pool_closed",
        // A kind newer than this match: the Python module's plain ToolError.
        _ => "error",
    };
    json!({
        "op": "done", "id": id, "ok": false, "kind": kind,
        "tool": error.tool, "error": error.to_json(), "text": error.to_string(),
    })
}

fn failed(id: u64, kind: &str, text: &str) -> Value {
    json!({"op": "done", "id": id, "ok": false, "kind": kind, "text": text})
}

/// What `toolpool resolve` prints for the workflow (or one node of it).
fn resolve(pool: &Pool, workflow: &std::path::Path, node: Option<&str>) -> Result<Value, String> {
    let workflow = Workflow::load(workflow).map_err(|e| e.to_string())?;
    let resolved = workflow
        .resolve(&pool.catalog())
        .map_err(|e| e.to_string())?;
    let timeout = pool.default_timeout();
    Ok(match node {
        Some(id) => {
            let tools = resolved.node_tools(id).map_err(|e| e.to_string())?;
            nodes_json(std::iter::once(tools), timeout, ToolFormat::Json)
        }
        None => resolved.to_json(timeout, ToolFormat::Json),
    })
}

/// A call's human prompts, asked of the host (`ask`), answered by its
/// `answer`; withdrawn (`withdraw`) when the call ends first.
struct HostPrompt {
    host: std::sync::Weak<Host>,
    call: u64,
}

impl HumanPrompt for HostPrompt {
    fn request(&self, request: PromptRequest) -> BoxFuture<'_, Result<PromptAnswer, PromptError>> {
        Box::pin(async move {
            let host = self
                .host
                .upgrade()
                .ok_or_else(|| PromptError::Unavailable("the host has gone".into()))?;
            let id = host.next_question.fetch_add(1, Ordering::Relaxed);
            let (answer, answered) = oneshot::channel();
            host.questions
                .lock()
                .map_err(|_| PromptError::Failed("the questions table is poisoned".into()))?
                .insert(id, answer);
            host.send(json!({
                "op": "ask", "id": id, "call": self.call,
                "node_id": request.node_id,
                "task_description": request.task_description,
                "inputs": request.inputs,
                "metadata": request.metadata,
                "tool": request.tool,
            }));
            let mut withdraw = Withdraw {
                host: &host,
                id,
                answered: false,
            };
            let answer = answered
                .await
                .unwrap_or_else(|_| Err(PromptError::Unavailable("the host has gone".into())));
            withdraw.answered = true;
            answer
        })
    }
}

/// Tells the host a question is no longer asked, when the call ends (or
/// is cancelled) while it waits.
struct Withdraw<'a> {
    host: &'a Host,
    id: u64,
    answered: bool,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        if let Ok(mut questions) = self.host.questions.lock() {
            if questions.remove(&self.id).is_some() {
                self.host.send(json!({"op": "withdraw", "id": self.id}));
            }
        }
    }
}
