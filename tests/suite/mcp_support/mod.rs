//! Helpers for the MCP tests: `toolpool serve` on the fixture tools, driven by
//! rmcp's client over the child's stdin and stdout.
#![allow(dead_code)]

pub mod otlp;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction, Implementation,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData, Peer, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use super::common::fixtures;

/// What the test client answers to elicitation requests.
pub type Answer = Arc<dyn Fn(&ElicitRequestParams) -> ElicitResult + Send + Sync>;

/// An MCP client that records the elicitation requests it gets and answers
/// them with `answer` after `delay` (and declares the capability only when
/// it has an answer); it also records the requests the server cancels.
#[derive(Clone)]
pub struct TestClient {
    pub answer: Option<Answer>,
    pub delay: Duration,
    pub asked: Arc<Mutex<Vec<ElicitRequestParams>>>,
    pub cancelled: Arc<Mutex<Vec<CancelledNotificationParam>>>,
}

impl TestClient {
    pub fn plain() -> TestClient {
        TestClient {
            answer: None,
            delay: Duration::ZERO,
            asked: Arc::default(),
            cancelled: Arc::default(),
        }
    }

    pub fn answering(answer: Answer) -> TestClient {
        TestClient {
            answer: Some(answer),
            ..TestClient::plain()
        }
    }

    pub fn after(mut self, delay: Duration) -> TestClient {
        self.delay = delay;
        self
    }
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        let capabilities = if self.answer.is_some() {
            ClientCapabilities::builder().enable_elicitation().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(capabilities, Implementation::new("toolpool-tests", "0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let Ok(mut asked) = self.asked.lock() {
            asked.push(request.clone());
        }
        tokio::time::sleep(self.delay).await;
        match &self.answer {
            Some(answer) => Ok(answer(&request)),
            None => Ok(ElicitResult::new(ElicitationAction::Decline)),
        }
    }

    async fn on_cancelled(
        &self,
        params: CancelledNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Ok(mut cancelled) = self.cancelled.lock() {
            cancelled.push(params);
        }
    }
}

/// A running `toolpool serve` and a connected client.
pub struct Served {
    pub child: Child,
    pub client: RunningService<RoleClient, TestClient>,
    stderr: JoinHandle<String>,
    pub session: tempfile::TempDir,
}

/// `toolpool --functions-dir <fixtures> --session-dir <session> <args...>`.
pub fn command(session: &Path, args: &[&str]) -> Command {
    command_in(&fixtures(), session, args)
}

/// `toolpool --functions-dir <functions> --session-dir <session> <args...>`.
pub fn command_in(functions: &Path, session: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolpool"));
    command
        .arg("--functions-dir")
        .arg(functions)
        .arg("--session-dir")
        .arg(session)
        .args(args)
        .env("RUST_LOG", "info")
        .kill_on_drop(true);
    command
}

/// Starts `toolpool <args>` (args include `serve`) and connects `client`.
pub async fn serve_with(args: &[&str], client: TestClient) -> Served {
    serve_in(&fixtures(), args, client).await
}

/// [`serve_with`] on the tools of `functions`.
pub async fn serve_in(functions: &Path, args: &[&str], client: TestClient) -> Served {
    let session = tempfile::tempdir().expect("temp dir");
    let command = command_in(functions, session.path(), args);
    serve_command(command, session, client).await
}

/// Starts `command` (a [`command_in`] the caller may have added to: its
/// environment, say), whose session directory is `session`, and connects
/// `client`.
pub async fn serve_command(
    mut command: Command,
    session: tempfile::TempDir,
    client: TestClient,
) -> Served {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolpool starts");
    let stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = collect(child.stderr.take().expect("stderr"));
    let client = match client.serve((stdout, stdin)).await {
        Ok(client) => client,
        Err(e) => {
            let _ = child.kill().await;
            let stderr = stderr.await.unwrap_or_default();
            panic!("the MCP handshake failed: {e}\nstderr:\n{stderr}");
        }
    };
    Served {
        child,
        client,
        stderr,
        session,
    }
}

pub async fn serve(args: &[&str]) -> Served {
    serve_with(args, TestClient::plain()).await
}

/// Reads a pipe to its end in the background.
pub fn collect(mut pipe: impl tokio::io::AsyncRead + Unpin + Send + 'static) -> JoinHandle<String> {
    tokio::spawn(async move {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes).await;
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

impl Served {
    pub fn pid(&self) -> i32 {
        self.child.id().expect("running") as i32
    }

    pub async fn call(&self, name: &str, args: Value) -> CallToolResult {
        call(&self.client, name, args).await
    }

    /// A call answered with a JSON-RPC error instead of a result: its code
    /// and message.
    pub async fn refused(&self, name: &str, args: Value) -> (i32, String) {
        let Value::Object(args) = args else {
            panic!("arguments must be an object");
        };
        let answer = self
            .client
            .call_tool(CallToolRequestParams::new(name.to_string()).with_arguments(args))
            .await;
        match answer {
            Err(rmcp::service::ServiceError::McpError(error)) => {
                (error.code.0, error.message.to_string())
            }
            other => panic!("tools/call {name}: expected a protocol error, got {other:?}"),
        }
    }

    /// Closes stdin (ends the client), waits for the exit; the exit code and
    /// what the server wrote on stderr.
    pub async fn close(self) -> (i32, String) {
        let Served {
            mut child,
            client,
            stderr,
            session: _session,
        } = self;
        let _ = client.cancel().await;
        let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .expect("toolpool exits after stdin closes")
            .expect("wait");
        let stderr = stderr.await.unwrap_or_default();
        (status.code().unwrap_or(-1), stderr)
    }
}

pub async fn call(client: &Peer<RoleClient>, name: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments must be an object");
    };
    client
        .call_tool(CallToolRequestParams::new(name.to_string()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("tools/call {name} failed at the protocol level: {e}"))
}

/// The text of a result's only content block.
pub fn text(result: &CallToolResult) -> &str {
    assert_eq!(result.content.len(), 1, "one content block: {result:?}");
    &result.content[0]
        .as_text()
        .unwrap_or_else(|| panic!("text content: {result:?}"))
        .text
}

pub fn is_error(result: &CallToolResult) -> bool {
    result.is_error == Some(true)
}

/// A successful result's text.
pub fn ok_text(result: &CallToolResult) -> String {
    assert!(!is_error(result), "expected success, got {result:?}");
    text(result).to_string()
}

/// A failed result's text.
pub fn error_text(result: &CallToolResult) -> String {
    assert!(is_error(result), "expected isError, got {result:?}");
    text(result).to_string()
}

/// A workflow file with one agent node `Agent` whose tooling is `tooling`
/// (YAML text of the tooling list, indented by 8 spaces).
pub fn workflow_file(dir: &Path, tooling: &str) -> PathBuf {
    let path = dir.join("workflow.yaml");
    let text = format!(
        "nodes:\n  - id: Agent\n    type: agent\n    config:\n      tooling:\n{tooling}\n  - id: Other\n    type: agent\n    config:\n      tooling:\n        - type: function\n          config:\n            tools:\n              - name: getpid\n"
    );
    std::fs::write(&path, text).expect("workflow written");
    path
}
