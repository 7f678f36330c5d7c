//! `serve --progress-heartbeat SECS`: while a call runs for a request that
//! sent a `progressToken`, a progress notification every SECS in which the
//! tool reported none, its message how long the call has run; none for a
//! request that sent no token.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

#[test]
fn a_silent_call_beats_for_a_client_that_gave_a_progress_token() {
    let session = tempfile::tempdir().unwrap();
    let mut serve = Command::new(env!("CARGO_BIN_EXE_toolpool"))
        .arg("--session-dir")
        .arg(session.path())
        .args(["--workers", "2", "serve", "--progress-heartbeat", "0.3"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let call = |id: u64, meta: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "wait", "arguments": {"seconds": 1.3}, "_meta": meta}})
    };
    let mut script = String::new();
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "heartbeat-test", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        call(2, json!({"progressToken": "beats"})),
        call(3, json!({})),
    ] {
        script.push_str(&format!("{message}\n"));
    }
    // stdin's end after the requests: the calls in flight finish, then it exits.
    let mut stdin = serve.stdin.take().unwrap();
    stdin.write_all(script.as_bytes()).unwrap();
    drop(stdin);
    let output = serve.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let messages: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("stdout is JSON-RPC only"))
        .collect();
    for id in [2, 3] {
        let answer = messages
            .iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("no answer to {id}: {stderr}"));
        assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    }
    let beats: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    // 1.3 s of silence, a beat every 0.3 s: three or four.
    assert!(beats.len() >= 3, "{beats:?}");
    for beat in &beats {
        let params = &beat["params"];
        assert_eq!(params["progressToken"], json!("beats"), "{beat}");
        let message = params["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("still running after "), "{beat}");
    }
    let progress: Vec<f64> = beats
        .iter()
        .filter_map(|b| b["params"]["progress"].as_f64())
        .collect();
    assert!(
        progress.windows(2).all(|w| w[0] < w[1]),
        "rising: {progress:?}"
    );
}
