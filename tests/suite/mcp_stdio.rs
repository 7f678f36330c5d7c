//! `toolpool serve` over stdio, driven by rmcp's client: the handshake, the
//! tool list, calls and every kind of failure as tool errors, parallel calls,
//! cancellation, a workflow node's tools, and shutdown.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{alive, descendants, gone_within, parent_of, wait_for_pid_file};
use crate::mcp_support::*;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn sigterm(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("signal sent");
}

/// What a plain CLI command prints, as JSON.
fn cli_json(args: &[&str]) -> Value {
    let session = tempfile::tempdir().expect("temp dir");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolpool"))
        .arg("--functions-dir")
        .arg(crate::common::fixtures())
        .arg("--session-dir")
        .arg(session.path())
        .args(args)
        .output()
        .expect("toolpool runs");
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON output")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handshake_names_toolpool_and_offers_tools() {
    let served = serve(&["--workers", "1", "serve"]).await;
    let info = served.client.peer_info().expect("server info");
    let server = info.server_info.as_ref().expect("serverInfo");
    assert_eq!(server.name, "toolpool");
    assert_eq!(server.version, env!("CARGO_PKG_VERSION"));
    assert!(info.capabilities.tools.is_some(), "{info:?}");
    assert_eq!(info.protocol_version.as_str(), "2025-11-25");
    let (code, _) = served.close().await;
    assert_eq!(code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_is_the_whole_catalog() {
    let served = serve(&["--workers", "1", "--timeout", "7", "serve"]).await;
    let tools = served.client.list_all_tools().await.expect("tools/list");
    let catalog = cli_json(&["catalog", "--format", "json"]);
    // Functions that serve a resource are read, not called.
    let functions: Vec<&serde_json::Value> = catalog["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .filter(|f| f.get("resource").is_none())
        .collect();
    assert_eq!(tools.len(), functions.len());
    for (tool, function) in tools.iter().zip(&functions) {
        assert_eq!(tool.name, function["name"].as_str().unwrap());
        assert_eq!(
            tool.description.as_deref(),
            function["description"].as_str()
        );
        assert_eq!(
            Value::Object((*tool.input_schema).clone()),
            function["parameters"]
        );
        let meta = &tool.meta.as_ref().expect("_meta").0;
        assert_eq!(meta["toolpool/timeout"], json!(7));
        assert_eq!(meta["toolpool/module"], function["module"]);
    }
    assert!(tools.iter().any(|t| t.name == "sleep_forever"));
    // A title and hints the author set on the function (`mcp_title`,
    // `mcp_annotations`), in the catalog and on the MCP tool.
    let add = tools.iter().find(|t| t.name == "add").expect("add");
    assert_eq!(add.title.as_deref(), Some("Add two integers"));
    let hints = add.annotations.as_ref().expect("annotations");
    assert_eq!(
        (
            hints.read_only_hint,
            hints.open_world_hint,
            hints.idempotent_hint
        ),
        (Some(true), Some(false), None)
    );
    let listed = functions.iter().find(|f| f["name"] == "add").unwrap();
    assert_eq!(listed["title"], "Add two integers");
    assert_eq!(
        listed["annotations"],
        json!({"readOnlyHint": true, "openWorldHint": false})
    );
    served.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_text_and_every_failure_is_a_tool_error() {
    let served = serve(&["--workers", "2", "serve"]).await;
    assert_eq!(
        ok_text(&served.call("add", json!({"a": 2, "b": 3})).await),
        "5"
    );
    assert_eq!(
        ok_text(&served.call("echo", json!({"value": "as is"})).await),
        "as is"
    );
    let nested = json!({"list": [1, "二", null], "n": 1.5});
    assert_eq!(
        ok_text(&served.call("echo", json!({"value": nested})).await),
        serde_json::to_string_pretty(&nested).unwrap()
    );

    let raised = served
        .call("raise_value_error", json!({"message": "boom"}))
        .await;
    assert_eq!(
        error_text(&raised),
        "Tool raise_value_error error: ValueError: boom"
    );
    // An unknown tool is a protocol error (-32602), with the same text.
    let (code, unknown) = served.refused("no_such_tool", json!({})).await;
    assert_eq!(code, -32602, "{unknown}");
    assert!(
        unknown.starts_with("Tool no_such_tool error: NotFound: function 'no_such_tool' not found"),
        "{unknown}"
    );
    let bad = error_text(&served.call("add", json!({"a": "x", "c": 1})).await);
    assert!(
        bad.starts_with("Tool add error: InvalidArguments: "),
        "{bad}"
    );
    assert!(bad.contains("'b'") && bad.contains("'c'"), "{bad}");
    let exited = error_text(&served.call("exit_3", json!({})).await);
    assert!(
        exited.starts_with("Tool exit_3 error: WorkerDied: ") && exited.contains("code 3"),
        "{exited}"
    );
    let crashed = error_text(&served.call("segfault", json!({})).await);
    assert!(crashed.ends_with("was killed by SIGSEGV"), "{crashed}");

    // What tools print goes to stderr, never into the protocol on stdout.
    assert_eq!(
        ok_text(&served.call("noisy_add", json!({"a": 1, "b": 2})).await),
        "3"
    );
    assert_eq!(
        ok_text(&served.call("write_spam", json!({"megabytes": 1})).await),
        "done"
    );
    assert_eq!(
        ok_text(&served.call("add", json!({"a": 1, "b": 1})).await),
        "2"
    );
    let (code, stderr) = served.close().await;
    assert_eq!(code, 0);
    assert!(stderr.contains("noisy_add stdout via print"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_is_a_tool_error_and_the_server_serves_on() {
    let served = serve(&["--workers", "1", "--timeout", "0.5", "serve"]).await;
    let started = Instant::now();
    let result = served.call("sleep_forever", json!({})).await;
    let text = error_text(&result);
    assert!(
        text.starts_with(
            "Tool sleep_forever error: TimeoutError: function 'sleep_forever' timed out after 0.5 s; its worker (pid "
        ),
        "{text}"
    );
    assert!(
        text.contains("was killed; it was at misbehave.py:"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        ok_text(&served.call("add", json!({"a": 2, "b": 3})).await),
        "5"
    );
    assert_eq!(served.close().await.0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_survives_every_misbehaving_fixture_tool() {
    // 2.5 s: the memory bomb must reach its MemoryError before the timeout
    // also on a loaded machine.
    let served = serve(&[
        "--workers",
        "2",
        "--timeout",
        "2.5",
        "--memory-limit",
        "512",
        "serve",
    ])
    .await;
    let pid_dir = tempfile::tempdir().expect("temp dir");
    let pid_file = |name: &str| pid_dir.path().join(name).display().to_string();
    let cases = [
        ("sleep_forever", json!({}), "TimeoutError"),
        ("busy_loop", json!({}), "TimeoutError"),
        ("ignore_sigterm_and_sleep", json!({}), "TimeoutError"),
        ("ignore_dump_signal_and_sleep", json!({}), "TimeoutError"),
        ("catch_base_exception", json!({}), "TimeoutError"),
        (
            "spawn_grandchild",
            json!({"pid_file": pid_file("spawned")}),
            "TimeoutError",
        ),
        (
            "fork_grandchild",
            json!({"pid_file": pid_file("forked")}),
            "TimeoutError",
        ),
        ("exit_3", json!({}), "WorkerDied"),
        ("segfault", json!({}), "WorkerDied"),
        ("sys_exit_0", json!({}), "SystemExit"),
        ("keyboard_interrupt", json!({}), "KeyboardInterrupt"),
        ("recurse", json!({}), "RecursionError"),
        ("memory_bomb", json!({"step_megabytes": 128}), "MemoryError"),
        ("huge_result", json!({"megabytes": 70}), ""),
        ("print_spam", json!({"megabytes": 1}), "done"),
        ("write_spam", json!({"megabytes": 1}), "done"),
    ];
    let calls = cases.iter().map(|(name, args, _)| {
        let peer = served.client.peer().clone();
        let (name, args) = (name.to_string(), args.clone());
        tokio::spawn(async move { call(&peer, &name, args).await })
    });
    let results = futures_join(calls.collect()).await;
    for ((name, _, expected), result) in cases.iter().zip(results) {
        let text = text(&result).to_string();
        if *expected == "done" {
            assert_eq!(text, "done", "{name}");
            continue;
        }
        assert!(is_error(&result), "{name}: {text}");
        assert!(
            text.starts_with(&format!("Tool {name} error: {expected}")),
            "{name}: {text}"
        );
    }
    for name in ["spawned", "forked"] {
        let grandchild =
            wait_for_pid_file(&pid_dir.path().join(name), Duration::from_secs(1)).await;
        assert!(
            gone_within(grandchild, Duration::from_secs(2)).await,
            "{name} grandchild {grandchild} outlived its worker"
        );
    }
    assert_eq!(
        ok_text(&served.call("add", json!({"a": 2, "b": 3})).await),
        "5"
    );
    assert_eq!(served.close().await.0, 0);
}

/// Joins spawned calls in order.
async fn futures_join<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.expect("call task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_calls_run_on_all_workers_at_once() {
    let served = serve(&["--workers", "4", "serve"]).await;
    // Warm up: every worker is started and has answered once.
    let warm: Vec<_> = (0..4)
        .map(|_| {
            let peer = served.client.peer().clone();
            tokio::spawn(async move { call(&peer, "sleep", json!({"seconds": 0.2})).await })
        })
        .collect();
    futures_join(warm).await;

    // Each call waits until all four have arrived: they all return only
    // if the four run at once (no wall clock to misread on a busy machine).
    let meeting = tempfile::tempdir().unwrap();
    let directory = meeting.path().to_string_lossy().to_string();
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let peer = served.client.peer().clone();
            let directory = directory.clone();
            tokio::spawn(async move {
                call(
                    &peer,
                    "rendezvous",
                    json!({"directory": directory, "parties": 4}),
                )
                .await
            })
        })
        .collect();
    for result in futures_join(calls).await {
        assert_eq!(ok_text(&result), "4");
    }

    // Twice as many calls as workers: the rest wait in the queue, so the
    // eight take two rounds at least (a lower bound holds however busy the
    // machine is).
    let started = Instant::now();
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let peer = served.client.peer().clone();
            tokio::spawn(async move { call(&peer, "sleep", json!({"seconds": 0.5})).await })
        })
        .collect();
    for result in futures_join(calls).await {
        assert_eq!(ok_text(&result), "slept 0.5");
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1000),
        "8 half-second calls on 4 workers took {elapsed:?}"
    );
    served.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_running_call_kills_its_worker_and_frees_the_slot() {
    let served = serve(&["--workers", "1", "serve"]).await;
    let pid_dir = tempfile::tempdir().expect("temp dir");
    let pid_file = pid_dir.path().join("grandchild");
    let peer = served.client.peer().clone();
    let args = json!({"pid_file": pid_file.display().to_string()});
    let running = tokio::spawn(async move { call(&peer, "spawn_grandchild", args).await });
    let grandchild = wait_for_pid_file(&pid_file, Duration::from_secs(10)).await;
    let worker = parent_of(grandchild).expect("the grandchild's parent is the worker");
    assert!(alive(worker) && alive(grandchild));

    // Dropping rmcp's call future sends notifications/cancelled.
    running.abort();
    let _ = running.await;
    assert!(
        gone_within(worker, Duration::from_secs(3)).await,
        "worker {worker} still alive after the call was cancelled"
    );
    assert!(
        gone_within(grandchild, Duration::from_secs(3)).await,
        "grandchild {grandchild} outlived its cancelled worker"
    );
    // The only slot is free again: a replacement worker answers.
    let started = Instant::now();
    assert_eq!(
        ok_text(&served.call("add", json!({"a": 2, "b": 3})).await),
        "5"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let (code, stderr) = served.close().await;
    assert_eq!(code, 0);
    assert!(stderr.contains("cancelled by the client"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_queued_call_drops_it_without_touching_any_worker() {
    let served = serve(&["--workers", "1", "serve"]).await;
    let worker = ok_text(&served.call("getpid", json!({})).await);
    let peer = served.client.peer().clone();
    let busy = tokio::spawn(async move {
        call(
            &peer,
            "slow_then_answer",
            json!({"seconds": 1, "token": "first"}),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pid_dir = tempfile::tempdir().expect("temp dir");
    let pid_file = pid_dir.path().join("never");
    let peer = served.client.peer().clone();
    let args = json!({"pid_file": pid_file.display().to_string()});
    let queued =
        tokio::spawn(async move { call(&peer, "spawn_grandchild_and_return", args).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    queued.abort();
    let _ = queued.await;

    assert_eq!(ok_text(&busy.await.expect("call task")), "first");
    // The same worker answers next: no worker was killed, and the queued
    // call never ran.
    assert_eq!(ok_text(&served.call("getpid", json!({})).await), worker);
    assert!(!pid_file.exists(), "the cancelled queued call ran");
    assert_eq!(served.close().await.0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_node_offers_exactly_its_tools() {
    let dir = tempfile::tempdir().expect("temp dir");
    let workflow = workflow_file(
        dir.path(),
        "        - type: function\n          prefix: fx\n          config:\n            timeout: 0.5\n            tools:\n              - name: add\n              - name: sleep_forever\n                description: Never returns.\n                title: Wait forever\n                annotations: {readOnlyHint: true}\n        - type: function\n          config:\n            timeout: null\n            tools:\n              - name: show_context\n",
    );
    let workflow = workflow.display().to_string();
    let served = serve(&[
        "--workers",
        "1",
        "--timeout",
        "9",
        "serve",
        "--config",
        &workflow,
        "--node",
        "Agent",
    ])
    .await;
    let tools = served.client.list_all_tools().await.expect("tools/list");
    let resolved = cli_json(&["--timeout", "9", "resolve", &workflow, "--node", "Agent"]);
    let expected = resolved["nodes"][0]["tools"].as_array().expect("tools");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["fx_add", "fx_sleep_forever", "show_context"]);
    for (tool, spec) in tools.iter().zip(expected) {
        assert_eq!(tool.name, spec["name"].as_str().unwrap());
        assert_eq!(tool.description.as_deref(), spec["description"].as_str());
        assert_eq!(
            Value::Object((*tool.input_schema).clone()),
            spec["parameters"]
        );
        let meta = &tool.meta.as_ref().expect("_meta").0;
        assert_eq!(meta["toolpool/timeout"], spec["timeout"]);
        assert_eq!(meta["toolpool/function"], spec["function"]);
        assert_eq!(meta["toolpool/node"], json!("Agent"));
    }
    assert_eq!(tools[1].description.as_deref(), Some("Never returns."));
    // The entry's title and hints, in place of the function's.
    assert_eq!(tools[1].title.as_deref(), Some("Wait forever"));
    let hints = tools[1].annotations.as_ref().expect("annotations");
    assert_eq!(hints.read_only_hint, Some(true));
    assert_eq!(hints.title.as_deref(), Some("Wait forever"));
    assert_eq!(expected[1]["title"], json!("Wait forever"));

    assert_eq!(
        ok_text(&served.call("fx_add", json!({"a": 2, "b": 3})).await),
        "5"
    );
    let timed_out = error_text(&served.call("fx_sleep_forever", json!({})).await);
    assert!(
        timed_out.starts_with("Tool fx_sleep_forever error: TimeoutError: function 'sleep_forever' timed out after 0.5 s"),
        "{timed_out}"
    );
    let context: Value =
        serde_json::from_str(&ok_text(&served.call("show_context", json!({})).await))
            .expect("JSON");
    assert_eq!(context["node_id"], "Agent");
    let (code, outside) = served.refused("add", json!({"a": 1, "b": 2})).await;
    assert_eq!(code, -32602, "{outside}");
    assert!(
        outside
            .starts_with("Tool add error: NotFound: tool 'add' is not configured for node 'Agent'"),
        "{outside}"
    );
    assert_eq!(served.close().await.0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_node_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let workflow = workflow_file(
        dir.path(),
        "        - type: function\n          config:\n            tools:\n              - name: add\n",
    );
    let workflow = workflow.display().to_string();
    let output = command(
        dir.path(),
        &[
            "--workers",
            "1",
            "serve",
            "--config",
            &workflow,
            "--node",
            "Nope",
        ],
    )
    .stdin(Stdio::null())
    .output()
    .await
    .expect("toolpool runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("Nope"), "{stderr}");
}

/// Raw JSON-RPC: requests written, stdin closed at once; every call is
/// answered before the server exits 0, and no worker is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_eof_lets_the_calls_received_finish_then_exits_0() {
    let session = tempfile::tempdir().expect("temp dir");
    let mut child = command(
        session.path(),
        &["--workers", "2", "serve", "--grace", "10"],
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("toolpool starts");
    let server = child.id().expect("pid") as i32;
    let stderr = collect(child.stderr.take().expect("stderr"));
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let send = |message: Value| format!("{message}\n");
    let mut script = String::new();
    script += &send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}}}));
    script += &send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for (id, seconds) in [(2, 1.0), (3, 1.0), (4, 0.5)] {
        script += &send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"seconds": seconds}}}));
    }
    stdin.write_all(script.as_bytes()).await.expect("write");
    // The initialize answer: the workers are up; note them.
    let first = stdout.next_line().await.expect("read").expect("a line");
    assert!(first.contains("\"id\":1"), "{first}");
    let tree = descendants(server);
    assert!(tree.len() >= 2, "the workers: {tree:?}");
    drop(stdin);

    let mut answered = Vec::new();
    while let Some(line) = stdout.next_line().await.expect("read") {
        let message: Value = serde_json::from_str(&line).expect("stdout is JSON-RPC only");
        answered.push((message["id"].as_i64().unwrap(), message["result"].clone()));
    }
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("exits")
        .expect("wait");
    let stderr = stderr.await.unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{stderr}");
    answered.sort_by_key(|(id, _)| *id);
    let ids: Vec<i64> = answered.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [2, 3, 4], "{stderr}");
    for (_, result) in &answered {
        assert_eq!(result["isError"], json!(false), "{result}");
    }
    for pid in tree {
        assert!(
            gone_within(pid, Duration::from_secs(2)).await,
            "{pid} outlived the server"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_calls_in_flight_finish_and_exits_0() {
    let mut served = serve(&["--workers", "2", "serve", "--grace", "10"]).await;
    let tree = descendants(served.pid());
    let peer = served.client.peer().clone();
    let call_task = tokio::spawn(async move {
        call(
            &peer,
            "slow_then_answer",
            json!({"seconds": 1, "token": "finished"}),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    sigterm(served.pid());
    assert_eq!(ok_text(&call_task.await.expect("call task")), "finished");
    let status = tokio::time::timeout(Duration::from_secs(20), served.child.wait())
        .await
        .expect("exits")
        .expect("wait");
    assert_eq!(status.code(), Some(0));
    for pid in tree {
        assert!(
            gone_within(pid, Duration::from_secs(2)).await,
            "{pid} outlived the server"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_kills_calls_that_outlast_the_grace_period() {
    let mut served = serve(&["--workers", "1", "serve", "--grace", "1"]).await;
    let pid_dir = tempfile::tempdir().expect("temp dir");
    let pid_file = pid_dir.path().join("grandchild");
    let peer = served.client.peer().clone();
    let args = json!({"pid_file": pid_file.display().to_string()});
    let call_task = tokio::spawn(async move { call(&peer, "spawn_grandchild", args).await });
    let grandchild = wait_for_pid_file(&pid_file, Duration::from_secs(10)).await;
    let tree = descendants(served.pid());
    assert!(tree.contains(&grandchild), "{tree:?}");
    let started = Instant::now();
    sigterm(served.pid());
    let result = call_task.await.expect("call task");
    let text = error_text(&result);
    assert!(
        text.starts_with("Tool spawn_grandchild error: PoolClosed: "),
        "{text}"
    );
    let status = tokio::time::timeout(Duration::from_secs(20), served.child.wait())
        .await
        .expect("exits")
        .expect("wait");
    assert_eq!(status.code(), Some(0));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?} with a 1 s grace period",
        started.elapsed()
    );
    for pid in tree {
        assert!(
            gone_within(pid, Duration::from_secs(2)).await,
            "{pid} outlived the server"
        );
    }
}

/// Writes `requests` (after the handshake) as raw JSON-RPC lines, closes
/// stdin, and returns every message the server wrote, by id.
async fn raw_exchange(args: &[&str], requests: &[Value]) -> Vec<Value> {
    let session = tempfile::tempdir().expect("temp dir");
    let output = {
        let mut child = command(session.path(), args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("toolpool starts");
        let mut stdin = child.stdin.take().expect("stdin");
        let mut script = String::new();
        script += &format!(
            "{}\n{}\n",
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                   "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "raw", "version": "0"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        );
        for request in requests {
            script += &format!("{request}\n");
        }
        stdin.write_all(script.as_bytes()).await.expect("write");
        drop(stdin);
        tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
            .await
            .expect("exits")
            .expect("output")
    };
    assert_eq!(output.status.code(), Some(0));
    let mut messages: Vec<Value> = String::from_utf8(output.stdout)
        .expect("UTF-8")
        .lines()
        .map(|line| serde_json::from_str(line).expect("stdout is JSON-RPC only"))
        .filter(|m: &Value| m["id"] != json!(0))
        .collect();
    messages.sort_by_key(|m| m["id"].as_i64());
    messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_that_are_not_an_object_are_a_tool_error_too() {
    let call = |id: i64, params: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let answers = raw_exchange(
        &["--workers", "1", "serve"],
        &[
            call(1, json!({"name": "add", "arguments": [1, 2]})),
            call(2, json!({"name": "add", "arguments": "a=1"})),
            call(3, json!({"name": "add"})),
            call(4, json!({"arguments": {}})),
        ],
    )
    .await;
    assert_eq!(answers.len(), 4, "{answers:?}");
    let text = |m: &Value| {
        m["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(answers[0]["result"]["isError"], true);
    assert_eq!(
        text(&answers[0]),
        "Tool add error: InvalidArguments: the arguments must be a JSON object, got an array"
    );
    assert_eq!(answers[1]["result"]["isError"], true);
    assert!(
        text(&answers[1]).ends_with("got a string"),
        "{}",
        answers[1]
    );
    assert_eq!(answers[2]["result"]["isError"], true);
    assert!(
        text(&answers[2])
            .starts_with("Tool add error: InvalidArguments: missing required argument 'a'"),
        "{}",
        answers[2]
    );
    // Without a tool name there is no tool to blame: a bad-params error.
    assert_eq!(answers[3]["error"]["code"], -32602, "{}", answers[3]);
}
