//! A tool's own settings (`toolpool.tool(...)`,
//! tests/fixtures/tool_settings/settings.py): the catalog shows them, MCP's
//! `tools/list` carries the title and hints, and its timeout is a call's
//! when neither the caller nor a workflow file gives one — theirs wins over
//! it, and it wins over the pool's default.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use toolpool::{ErrorKind, InvokeOptions, Pool};

fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tool_settings")
}

fn toolpool(session: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolpool"));
    command
        .arg("--functions-dir")
        .arg(folder())
        .arg("--session-dir")
        .arg(session)
        .stdin(Stdio::null());
    command
}

/// What a command that must succeed printed, as JSON.
fn printed_json(command: &mut Command) -> Value {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The object of `list` whose `key` is `value`.
fn entry(list: &Value, key: &str, value: &str) -> Value {
    list.as_array()
        .and_then(|items| items.iter().find(|item| item[key] == value))
        .cloned()
        .unwrap_or_else(|| panic!("{key} {value} in {list}"))
}

#[test]
fn the_catalog_shows_a_tools_own_settings() {
    let session = tempfile::tempdir().unwrap();
    let catalog = printed_json(toolpool(session.path()).arg("catalog"));
    let function = |name: &str| entry(&catalog["functions"], "name", name);
    let slow = function("slow");
    assert_eq!(slow["timeout"], json!(1.0));
    assert_eq!(slow["title"], json!("A slow one"));
    assert_eq!(
        slow["annotations"],
        json!({"readOnlyHint": true, "idempotentHint": true})
    );
    let plain = function("plain");
    assert_eq!(
        plain["annotations"],
        json!({"destructiveHint": true, "openWorldHint": false})
    );
    assert!(plain.get("timeout").is_none(), "{plain}");
}

#[test]
fn call_uses_the_tools_own_timeout_over_the_pools_default() {
    let session = tempfile::tempdir().unwrap();
    let out = toolpool(session.path())
        .args(["call", "slow", "--args", r#"{"seconds": 30}"#])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(124), "{stdout}");
    assert!(
        stdout.starts_with("Tool slow error: TimeoutError: function 'slow' timed out after 1 s;"),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_callers_timeout_wins_over_the_tools_own() {
    let session = tempfile::tempdir().unwrap();
    let pool = Pool::builder()
        .functions_dir(folder())
        .session_dir(session.path())
        .workers(1)
        .build()
        .await
        .unwrap();
    let longer = InvokeOptions {
        timeout: Some(Duration::from_secs(10)),
        ..Default::default()
    };
    let answer = pool.invoke("slow", json!({"seconds": 1.5}), longer).await;
    assert_eq!(answer.unwrap(), json!(1.5));
    let own = pool
        .invoke("slow", json!({"seconds": 5}), InvokeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(own.kind, ErrorKind::Timeout, "{own}");
    pool.shutdown().await;
}

#[test]
fn a_workflow_files_timeout_wins_over_the_tools_own() {
    let session = tempfile::tempdir().unwrap();
    let workflow = session.path().join("flow.yaml");
    std::fs::write(
        &workflow,
        "nodes:\n\
         \x20 - id: Timed\n\
         \x20   type: agent\n\
         \x20   config:\n\
         \x20     tooling:\n\
         \x20       - type: function\n\
         \x20         config:\n\
         \x20           timeout: 4\n\
         \x20           tools: [{name: slow}]\n\
         \x20 - id: Untimed\n\
         \x20   type: agent\n\
         \x20   config:\n\
         \x20     tooling:\n\
         \x20       - type: function\n\
         \x20         config:\n\
         \x20           tools: [{name: slow}]\n",
    )
    .unwrap();
    let resolved = printed_json(toolpool(session.path()).arg("resolve").arg(&workflow));
    let timeout_of =
        |node: &str| entry(&resolved["nodes"], "id", node)["tools"][0]["timeout"].clone();
    assert_eq!(timeout_of("Timed").as_f64(), Some(4.0), "{resolved}");
    assert_eq!(timeout_of("Untimed").as_f64(), Some(1.0), "{resolved}");
}

#[test]
fn mcp_tools_list_carries_the_title_and_hints() {
    let session = tempfile::tempdir().unwrap();
    let mut serve = toolpool(session.path())
        .args(["--workers", "1", "serve"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut script = String::new();
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "settings-test", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    ] {
        script.push_str(&format!("{message}\n"));
    }
    let mut stdin = serve.stdin.take().unwrap();
    stdin.write_all(script.as_bytes()).unwrap();
    drop(stdin);
    let output = serve.wait_with_output().unwrap();
    let listed = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|message| message["id"] == json!(2))
        .unwrap_or_else(|| panic!("{}", String::from_utf8_lossy(&output.stderr)));
    let slow = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "slow")
        .cloned()
        .unwrap();
    assert_eq!(slow["title"], json!("A slow one"), "{slow}");
    assert_eq!(slow["annotations"]["readOnlyHint"], json!(true), "{slow}");
    assert_eq!(slow["annotations"]["idempotentHint"], json!(true), "{slow}");
}
