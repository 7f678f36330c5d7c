//! W3C trace context and OpenTelemetry: a client's `_meta.traceparent`
//! parents toolpool's SERVER span, exported over OTLP/HTTP to a real
//! receiver (`tests/fixtures/otlp_receiver.py`, decoding with the
//! `opentelemetry-proto` package), named and attributed as the MCP semantic
//! conventions say; the tool continues the trace (`_context["traceparent"]`,
//! `TRACEPARENT`); without the `OTEL_*` variables nothing is exported and the
//! tool sees the client's `traceparent` unchanged.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject, RequestParamsMeta};
use serde_json::{json, Value};

use crate::mcp_support::otlp::{
    attribute, event_names, otel_python, post, Receiver, OTEL_VARIABLES,
};
use crate::mcp_support::*;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn trace_tools() -> PathBuf {
    crate::common::fixtures()
        .parent()
        .expect("tests/fixtures")
        .join("trace_tools")
}

/// `toolpool serve` on stdio over the trace tools, with `env` as its only
/// `OTEL_*` variables.
async fn serve_traced(env: &[(&str, &str)]) -> Served {
    let session = tempfile::tempdir().expect("temp dir");
    let mut command = command_in(
        &trace_tools(),
        session.path(),
        &["--workers", "1", "--timeout", "1", "serve"],
    );
    for name in OTEL_VARIABLES {
        command.env_remove(name);
    }
    // A short export delay: spans also reach the receiver while the server runs.
    command.env("OTEL_BSP_SCHEDULE_DELAY", "100");
    command.envs(env.iter().copied());
    serve_command(command, session, TestClient::plain()).await
}

/// `tools/call name` with `traceparent` (and `tracestate`) in `_meta`.
async fn call_traced(
    served: &Served,
    name: &str,
    traceparent: Option<&str>,
    tracestate: Option<&str>,
) -> CallToolResult {
    let mut params =
        CallToolRequestParams::new(name.to_string()).with_arguments(serde_json::Map::new());
    let mut meta = RequestMetaObject::new();
    if let Some(traceparent) = traceparent {
        meta.set_traceparent(traceparent);
    }
    if let Some(tracestate) = tracestate {
        meta.set_tracestate(tracestate);
    }
    params.set_meta(meta);
    served
        .client
        .call_tool(params)
        .await
        .unwrap_or_else(|e| panic!("tools/call {name}: {e}"))
}

/// What `trace_seen` saw: ([_context traceparent, tracestate], [environ's]).
fn seen(result: &CallToolResult) -> (Value, Value) {
    let value: Value = serde_json::from_str(&ok_text(result)).expect("JSON");
    (value["context"].clone(), value["environ"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_traceparent_parents_a_server_span_the_tool_continues() {
    let Some(python) = otel_python() else { return };
    let receiver = Receiver::start(&python);
    let endpoint = receiver.endpoint();
    let served = serve_traced(&[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)]).await;

    let (context, environ) =
        seen(&call_traced(&served, "trace_seen", Some(TRACEPARENT), Some("vendor=abc")).await);
    // The same trace, toolpool's span, the client's tracestate.
    let tool_parent = context[0].as_str().expect("a traceparent").to_string();
    let parts: Vec<&str> = tool_parent.split('-').collect();
    assert_eq!((parts[0], parts[1], parts[3]), ("00", TRACE_ID, "01"));
    assert_ne!(parts[2], CLIENT_SPAN, "the tool continues toolpool's span");
    assert_eq!(context, json!([tool_parent, "vendor=abc"]));
    assert_eq!(environ, context, "TRACEPARENT and TRACESTATE while it runs");

    // The next call (same worker) does not see this one's trace: it has a
    // root span of its own.
    let (next, next_environ) = seen(&call_traced(&served, "trace_seen", None, None).await);
    let next_parent = next[0].as_str().expect("toolpool's root span");
    assert!(!next_parent.contains(TRACE_ID), "{next_parent}");
    assert_eq!(next, json!([next_parent, null]));
    assert_eq!(next_environ, next);

    // An invalid traceparent is ignored: a new root, no error.
    let invalid = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
    let (root, _) = seen(&call_traced(&served, "trace_seen", Some(invalid), None).await);
    assert!(root[0]
        .as_str()
        .is_some_and(|t| !t.contains("-0000000000000000000")));

    let raised = call_traced(&served, "fails", Some(TRACEPARENT), None).await;
    assert!(error_text(&raised).contains("ValueError: boom"));
    let timed_out = call_traced(&served, "sleeps", Some(TRACEPARENT), None).await;
    assert!(error_text(&timed_out).contains("TimeoutError"));
    let (code, _) = served.refused("no_such_tool", json!({})).await;
    assert_eq!(code, -32602);
    let (status, stderr) = served.close().await;
    assert_eq!(status, 0, "{stderr}");
    assert!(
        stderr.contains("exporting OpenTelemetry traces"),
        "{stderr}"
    );

    let span = receiver.span_named("tools/call trace_seen", |s| {
        s["parent_span_id"] == CLIENT_SPAN
    });
    assert_eq!(span["trace_id"], TRACE_ID);
    assert_eq!(span["span_id"], parts[2], "the span the tool saw");
    assert_eq!(span["kind"], "SERVER");
    assert_eq!(span["resource"]["service.name"], "toolpool");
    assert_eq!(span["trace_state"], "vendor=abc");
    for (key, value) in [
        ("mcp.method.name", "tools/call"),
        ("mcp.protocol.version", "2025-11-25"),
        ("network.transport", "pipe"),
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "trace_seen"),
    ] {
        assert_eq!(attribute(&span, key), value, "{key}: {span:#}");
    }
    assert!(
        attribute(&span, "jsonrpc.request.id").is_string(),
        "{span:#}"
    );
    assert!(
        attribute(&span, "mcp.session.id").is_null(),
        "stdio has none"
    );
    assert!(attribute(&span, "error.type").is_null());
    assert_eq!(span["status"]["code"], "UNSET");

    let root = receiver.span_named("tools/call trace_seen", |s| {
        s["parent_span_id"] == "" && s["trace_id"] == next_parent.split('-').nth(1).unwrap()
    });
    assert_eq!(attribute(&root, "gen_ai.tool.name"), "trace_seen");

    let failed = receiver.span_named("tools/call fails", |_| true);
    assert_eq!(failed["parent_span_id"], CLIENT_SPAN);
    assert_eq!(attribute(&failed, "error.type"), "tool_error");
    assert_eq!(failed["status"]["code"], "ERROR");
    assert!(failed["status"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("ValueError: boom")));

    let killed = receiver.span_named("tools/call sleeps", |_| true);
    assert_eq!(attribute(&killed, "error.type"), "tool_error");
    assert_eq!(
        event_names(&killed),
        ["toolpool.timeout", "toolpool.worker_killed"]
    );
    let kill = &killed["events"][1]["attributes"];
    assert_eq!(kill["toolpool.kill.reason"], "timeout");
    assert!(kill["toolpool.worker.pid"]
        .as_i64()
        .is_some_and(|pid| pid > 0));
    assert!(kill["toolpool.message"]
        .as_str()
        .is_some_and(|m| m.contains("timed out after 1 s")));

    let unknown = receiver.span_named("tools/call no_such_tool", |_| true);
    assert_eq!(attribute(&unknown, "error.type"), "-32602");
    assert_eq!(unknown["status"]["code"], "ERROR");

    let listed = receiver.span_named("initialize", |_| true);
    assert_eq!(listed["kind"], "SERVER");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_otel_variables_nothing_is_exported_and_the_traceparent_passes_through() {
    let served = serve_traced(&[]).await;
    let (context, environ) =
        seen(&call_traced(&served, "trace_seen", Some(TRACEPARENT), Some("vendor=abc")).await);
    assert_eq!(context, json!([TRACEPARENT, "vendor=abc"]));
    assert_eq!(environ, context);
    // The next call does not see it.
    let (next, next_environ) = seen(&call_traced(&served, "trace_seen", None, None).await);
    assert_eq!(
        (next, next_environ),
        (json!([null, null]), json!([null, null]))
    );
    // An invalid one is ignored, never an error.
    let uppercase = TRACEPARENT.to_uppercase();
    let (ignored, _) = seen(&call_traced(&served, "trace_seen", Some(&uppercase), None).await);
    assert_eq!(ignored, json!([null, null]));
    let (status, stderr) = served.close().await;
    assert_eq!(status, 0, "{stderr}");
    assert!(!stderr.contains("OpenTelemetry"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_sdk_or_grpc_exports_nothing_and_grpc_is_told() {
    let Some(python) = otel_python() else { return };
    let receiver = Receiver::start(&python);
    let endpoint = receiver.endpoint();
    for (extra, told) in [
        (("OTEL_SDK_DISABLED", "true"), None),
        (
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            Some("OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported"),
        ),
    ] {
        let served = serve_traced(&[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint), extra]).await;
        let (context, _) = seen(&call_traced(&served, "trace_seen", Some(TRACEPARENT), None).await);
        assert_eq!(context, json!([TRACEPARENT, null]), "{extra:?}");
        let (status, stderr) = served.close().await;
        assert_eq!(status, 0, "{stderr}");
        if let Some(told) = told {
            assert!(stderr.contains(told), "{stderr}");
        }
    }
    // An exporter flushes before the server exits: had either exported,
    // its spans would be here by now.
    assert_eq!(receiver.spans(), Vec::<Value>::new());
}

/// `serve --http` on a free port with `env`; the child and its port.
fn serve_http(env: &[(&str, &str)]) -> (std::process::Child, u16, tempfile::TempDir) {
    let session = tempfile::tempdir().expect("temp dir");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolpool"));
    command
        .arg("--functions-dir")
        .arg(trace_tools())
        .arg("--session-dir")
        .arg(session.path())
        .args(["--workers", "1", "serve", "--http", "127.0.0.1:0"])
        .env("RUST_LOG", "info");
    for name in OTEL_VARIABLES {
        command.env_remove(name);
    }
    let mut child = command
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolpool starts");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let port = loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).expect("stderr") == 0 {
            panic!("serve --http ended before it listened");
        }
        if let Some(at) = line.split("at http://127.0.0.1:").nth(1) {
            break at.trim().trim_end_matches("/mcp").parse().expect("a port");
        }
    };
    // Keep reading stderr so the server never blocks on it.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    (child, port, session)
}

fn modern_meta(traceparent: &str) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
        "traceparent": traceparent,
    })
}

#[test]
fn over_http_both_protocol_versions_are_traced_with_their_session() {
    let Some(python) = otel_python() else { return };
    let receiver = Receiver::start(&python);
    let endpoint = receiver.endpoint();
    let (mut child, port, _session) = serve_http(&[
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            &format!("{endpoint}/v1/traces"),
        ),
        ("OTEL_SERVICE_NAME", "toolpool-under-test"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-test-token=t0k3n"),
    ]);

    // 2026-07-28: no session, everything in `_meta`.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "trace_seen", "arguments": {}, "_meta": modern_meta(TRACEPARENT)}});
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "trace_seen"),
    ];
    let answer = post(port, &call, &headers);
    assert_eq!(answer.status, 200, "{}", answer.body);
    let reply = answer.reply(1);
    let text = reply["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    let seen: Value = serde_json::from_str(text).expect("JSON");
    let modern_parent = seen["environ"][0]
        .as_str()
        .expect("TRACEPARENT")
        .to_string();
    assert!(
        modern_parent.starts_with(&format!("00-{TRACE_ID}-")),
        "{seen}"
    );

    // 2025-11-25: an initialize handshake, then a call in its session.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let answer = post(port, &init, &[]);
    assert_eq!(answer.status, 200, "{}", answer.body);
    let session_id = answer
        .header("mcp-session-id")
        .expect("a session id")
        .to_string();
    let session = [
        ("Mcp-Session-Id", session_id.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(port, &initialized, &session).status, 202);
    let legacy_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01";
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "trace_seen", "arguments": {}, "_meta": {"traceparent": legacy_parent}}});
    let answer = post(port, &call, &session);
    assert_eq!(answer.status, 200, "{}", answer.body);
    let text = answer.reply(2)["result"]["content"][0]["text"]
        .as_str()
        .expect("text")
        .to_string();
    let seen: Value = serde_json::from_str(&text).expect("JSON");
    assert!(seen["context"][0]
        .as_str()
        .is_some_and(|t| t.starts_with(&format!("00-{TRACE_ID}-"))));

    // SIGTERM: the server drains, then flushes its spans.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        assert!(std::time::Instant::now() < deadline, "the server exits");
        std::thread::sleep(Duration::from_millis(50));
    }

    let modern = receiver.span_named("tools/call trace_seen", |s| {
        s["parent_span_id"] == CLIENT_SPAN
    });
    assert_eq!(modern["trace_id"], TRACE_ID);
    assert_eq!(
        modern_parent,
        format!("00-{TRACE_ID}-{}-01", modern["span_id"].as_str().unwrap())
    );
    assert_eq!(attribute(&modern, "network.transport"), "tcp");
    assert_eq!(attribute(&modern, "mcp.protocol.version"), "2026-07-28");
    assert!(attribute(&modern, "mcp.session.id").is_null());
    assert_eq!(modern["resource"]["service.name"], "toolpool-under-test");
    assert_eq!(modern["headers"]["x-test-token"], "t0k3n");

    let legacy = receiver.span_named("tools/call trace_seen", |s| {
        s["parent_span_id"] == "1111111111111111"
    });
    assert_eq!(attribute(&legacy, "mcp.session.id"), session_id.as_str());
    assert_eq!(attribute(&legacy, "mcp.protocol.version"), "2025-11-25");
    assert_eq!(attribute(&legacy, "network.transport"), "tcp");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_caller_passes_a_trace_with_invoke_options() {
    let session = tempfile::tempdir().expect("temp dir");
    let pool = toolpool::Pool::builder()
        .functions_dir(trace_tools())
        .workers(1)
        .session_dir(session.path())
        .build()
        .await
        .expect("pool");
    let trace =
        toolpool::trace_context::TraceContext::parse(TRACEPARENT, Some("k=v")).expect("valid");
    let options = toolpool::InvokeOptions::default().with_trace(trace);
    let value = pool
        .invoke("trace_seen", json!({}), options)
        .await
        .expect("call");
    assert_eq!(value["context"], json!([TRACEPARENT, "k=v"]));
    assert_eq!(value["environ"], json!([TRACEPARENT, "k=v"]));
    let value = pool
        .invoke("trace_seen", json!({}), toolpool::InvokeOptions::default())
        .await
        .expect("call");
    assert_eq!(value["environ"], json!([null, null]));
    pool.shutdown().await;
}
