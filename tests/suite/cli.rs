//! The command line as a user runs it: output shapes, exit codes, and stdout
//! carrying nothing but results.

use std::process::Command;

use crate::common::{run, toolpool_command, Run};

use serde_json::{json, Value};

fn toolpool(session: &tempfile::TempDir, args: &[&str]) -> Run {
    run(toolpool_command(session.path())
        .args(args)
        .env("RUST_LOG", "info"))
}

fn json_out(run: &Run) -> Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            run.stdout, run.stderr
        )
    })
}

#[test]
fn catalog_json_lists_functions_sorted_and_load_errors() {
    let session = tempfile::tempdir().unwrap();
    let run = toolpool(&session, &["catalog"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let catalog = json_out(&run);
    let functions = catalog["functions"].as_array().unwrap();
    let keys: Vec<(String, String)> = functions
        .iter()
        .map(|f| {
            (
                f["module"].as_str().unwrap().to_string(),
                f["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert!(keys.contains(&("sub/nested".to_string(), "nested_tool".to_string())));
    let add = functions.iter().find(|f| f["name"] == "add").unwrap();
    assert_eq!(add["parameters"]["properties"]["a"]["type"], "integer");
    assert_eq!(add["file"], "behave.py");
    let errors = catalog["errors"].as_array().unwrap();
    let broken = errors
        .iter()
        .find(|e| e["module"] == "broken")
        .expect("broken module reported");
    assert_eq!(
        broken["error"],
        "ModuleNotFoundError: No module named 'nope'"
    );
    assert!(
        errors
            .iter()
            .any(|e| e["error"].as_str().unwrap().contains("duplicated_name")),
        "{errors:?}"
    );
    assert!(catalog["functions_dir"]
        .as_str()
        .unwrap()
        .ends_with("tests/fixtures/functions"));
}

#[test]
fn catalog_openai_format_wraps_each_function() {
    let session = tempfile::tempdir().unwrap();
    let run = toolpool(&session, &["catalog", "--format", "openai"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let tools = json_out(&run);
    let first = &tools[0];
    assert_eq!(first["type"], "function");
    assert!(first["function"]["name"].is_string());
    assert!(first["function"]["parameters"]["type"] == "object");
}

#[test]
fn list_puts_all_options_first_then_functions() {
    let session = tempfile::tempdir().unwrap();
    let run = toolpool(&session, &["list"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    let first_function = lines.iter().position(|l| !l.ends_with(":All")).unwrap();
    assert!(lines[..first_function].iter().all(|l| l.ends_with(":All")));
    assert!(
        lines[first_function..].iter().all(|l| !l.ends_with(":All")),
        "{lines:?}"
    );
    assert!(lines.contains(&"behave:All"));
    assert!(lines.contains(&"behave:add"));
    let json_run = toolpool(&session, &["list", "--json"]);
    let options = json_out(&json_run);
    let add = options
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["label"] == "behave:add")
        .unwrap();
    assert_eq!(add["value"], "add");
    let all = options
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["label"] == "behave:All")
        .unwrap();
    assert!(
        all["description"]
            .as_str()
            .unwrap()
            .starts_with("Load all "),
        "{all}"
    );
}

#[test]
fn call_prints_the_result_and_exits_0() {
    let session = tempfile::tempdir().unwrap();
    let run = toolpool(&session, &["call", "add", "--args", r#"{"a": 1, "b": 2}"#]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "3\n");
    let run = toolpool(
        &session,
        &["call", "echo", "--args", r#"{"value": "plain text"}"#],
    );
    assert_eq!(run.stdout, "plain text\n", "a str is printed as is");
    let run = toolpool(
        &session,
        &["call", "echo", "--args", r#"{"value": {"k": ["ü"]}}"#],
    );
    assert_eq!(run.stdout, "{\n  \"k\": [\n    \"ü\"\n  ]\n}\n");
}

#[test]
fn call_that_raises_prints_the_agent_text_and_exits_1() {
    let session = tempfile::tempdir().unwrap();
    let run = toolpool(
        &session,
        &[
            "call",
            "raise_value_error",
            "--args",
            r#"{"message": "nope"}"#,
        ],
    );
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stdout,
        "Tool raise_value_error error: ValueError: nope\n"
    );
    let run = toolpool(
        &session,
        &[
            "-v",
            "call",
            "raise_value_error",
            "--args",
            r#"{"message": "nope"}"#,
        ],
    );
    assert!(
        run.stderr.contains("Traceback"),
        "traceback goes to the log at -v: {}",
        run.stderr
    );
}

#[test]
fn call_that_times_out_exits_124_with_where_it_was() {
    let session = tempfile::tempdir().unwrap();
    let run = toolpool(&session, &["call", "sleep_forever", "--timeout", "0.5"]);
    assert_eq!(run.code, 124, "{}", run.stderr);
    assert!(run.stdout.starts_with("Tool sleep_forever error: TimeoutError: function 'sleep_forever' timed out after 0.5 s"), "{}", run.stdout);
    assert!(run.stdout.contains("misbehave.py:"), "{}", run.stdout);
    assert_eq!(
        run.stdout.lines().count(),
        1,
        "stdout carries only the result: {}",
        run.stdout
    );
}

#[test]
fn call_json_envelope_has_every_field() {
    let session = tempfile::tempdir().unwrap();
    let ok = json_out(&toolpool(
        &session,
        &["call", "add", "--args", r#"{"a": 40, "b": 2}"#, "--json"],
    ));
    assert_eq!(ok["ok"], json!(true));
    assert_eq!(ok["result"], json!(42));
    assert_eq!(ok["text"], json!("42"));
    assert!(ok["elapsed_ms"].as_f64().unwrap() > 0.0);
    assert!(ok["worker_pid"].as_i64().unwrap() > 1);
    let run = toolpool(
        &session,
        &["call", "sleep_forever", "--timeout", "0.3", "--json"],
    );
    assert_eq!(run.code, 124);
    let failed = json_out(&run);
    assert_eq!(failed["ok"], json!(false));
    assert_eq!(failed["error"]["type"], json!("TimeoutError"));
    assert!(failed["text"]
        .as_str()
        .unwrap()
        .starts_with("Tool sleep_forever error: TimeoutError: "));
    assert_eq!(failed["error"]["traceback"], Value::Null);
}

#[test]
fn bad_command_lines_exit_2_naming_the_problem() {
    let session = tempfile::tempdir().unwrap();
    let run = toolpool(&session, &["call", "add", "--args", "[1, 2]"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("--args: expected a JSON object"),
        "{}",
        run.stderr
    );
    let run = toolpool(&session, &["call", "add", "--args", "{oops"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("--args: not valid JSON"),
        "{}",
        run.stderr
    );
    let run = toolpool(&session, &["call", "add", "--timeout", "0"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("positive number of seconds"),
        "{}",
        run.stderr
    );
    let run = crate::common::run(
        Command::new(env!("CARGO_BIN_EXE_toolpool"))
            .args(["--functions-dir", "/nonexistent/tools", "--session-dir"])
            .arg(session.path())
            .arg("catalog"),
    );
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("/nonexistent/tools"), "{}", run.stderr);
}

#[test]
fn unknown_function_exits_1_with_not_found() {
    let session = tempfile::tempdir().unwrap();
    let run = toolpool(&session, &["call", "no_such_tool"]);
    assert_eq!(run.code, 1);
    assert!(run.stdout.starts_with("Tool no_such_tool error: NotFound: function 'no_such_tool' not found under function directory"), "{}", run.stdout);
}

#[test]
fn bundled_tools_are_the_default_from_any_directory() {
    let session = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_toolpool"))
        .args(["--session-dir"])
        .arg(session.path())
        .args(["list"])
        .current_dir(elsewhere.path())
        .env_remove("MAC_FUNCTIONS_DIR")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for option in ["file:All", "utils:All", "file:save_file", "utils:wait"] {
        assert!(
            stdout.lines().any(|l| l == option),
            "{option} missing:\n{stdout}"
        );
    }
}

#[test]
fn environment_variables_set_the_options() {
    let session = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_toolpool"))
        .args(["call", "sleep_forever"])
        .env("MAC_FUNCTIONS_DIR", crate::common::fixtures())
        .env("TOOLPOOL_SESSION_DIR", session.path())
        .env("TOOLPOOL_TIMEOUT", "0.3")
        .env("TOOLPOOL_WORKERS", "1")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(124));
    assert!(String::from_utf8_lossy(&output.stdout).contains("timed out after 0.3 s"));
}

#[test]
fn bench_reports_each_pool_size() {
    let session = tempfile::tempdir().unwrap();
    let run = toolpool(
        &session,
        &[
            "bench",
            "--workers",
            "1,2",
            "--calls",
            "40",
            "--concurrency",
            "4",
            "--json",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = json_out(&run);
    assert_eq!(report["tool"], json!("noop"));
    assert_eq!(report["args"], json!({}));
    assert_eq!(report["concurrency"], json!(4));
    assert_eq!(report["calls"], json!(40));
    let rows = report["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["workers"], json!(1));
    assert_eq!(rows[1]["workers"], json!(2));
    for row in rows {
        assert_eq!(row["calls"], json!(40));
        assert_eq!(row["failed"], json!(0));
        assert!(row["calls_per_s"].as_f64().unwrap() > 0.0);
        assert!(row["p99_ms"].as_f64().unwrap() >= row["p50_ms"].as_f64().unwrap());
    }
    let run = toolpool(
        &session,
        &[
            "bench",
            "--tool",
            "add",
            "--args",
            r#"{"a": 1, "b": 2}"#,
            "--workers",
            "1",
            "--calls",
            "10",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with("tool add, 32 calls in flight\nworkers"),
        "{}",
        run.stdout
    );
    let run = toolpool(&session, &["--workers", "1,2", "list"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("--workers takes one number"),
        "{}",
        run.stderr
    );
}

#[test]
fn catalog_table_has_a_row_per_function_and_the_load_errors() {
    let session = tempfile::tempdir().unwrap();
    let run = toolpool(&session, &["catalog", "--format", "table"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut lines = run.stdout.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("MODULE") && header.contains("FUNCTION"),
        "{header}"
    );
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("behave") && l.contains(" add ") && l.contains("a, b")),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("\nload errors:\n"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("broken (broken.py): ModuleNotFoundError: No module named 'nope'"),
        "{}",
        run.stdout
    );
}

/// `--sandbox` serves `--http` (each session on workers of its own,
/// tests/python_mcp/test_sandbox_http.py): it starts, listens and answers
/// its health check, and stops on SIGTERM sent at once; skipped, naming what is missing, on a kernel without
/// every sandbox piece.
#[test]
fn sandbox_serves_http() {
    use std::io::{BufRead, Read, Write};

    if crate::common::kernel_cannot_sandbox() {
        return;
    }
    let session = tempfile::tempdir().unwrap();
    let mut server = toolpool_command(session.path())
        .args(["--sandbox", "serve", "--http", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(server.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    let mut address = None;
    for line in stderr.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if let Some(at) = line.find("serving MCP (streamable HTTP) at http://") {
            let url = &line[at + "serving MCP (streamable HTTP) at http://".len()..];
            address = url.split('/').next().map(str::to_string);
            break;
        }
    }
    // Read to the end: a closed pipe would fail the server's next log line.
    let rest = std::thread::spawn(move || stderr.map_while(Result::ok).collect::<Vec<_>>());
    let Some(address) = address else {
        let _ = server.kill();
        panic!("`--sandbox serve --http` did not listen:\n{seen}");
    };
    let mut connection = std::net::TcpStream::connect(&address).unwrap();
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    connection.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let read = connection.read_to_string(&mut answer);
    // Right after it said it serves: a stop, not the default action's death.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = server.wait().unwrap();
    let rest = rest.join().unwrap().join("\n");
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "{address}: {read:?}: {answer}\n{seen}{rest}"
    );
    assert!(status.success(), "{status:?}\n{seen}{rest}");
}

/// `--session-isolation shared` with `--sandbox` over `--http` is refused
/// before any worker starts, naming both options: a sandboxed worker sees
/// one session's folders only.
#[test]
fn sandbox_over_http_refuses_shared_isolation_naming_both() {
    let session = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_toolpool"))
        .args(["--session-dir"])
        .arg(session.path())
        .args(["--sandbox", "serve", "--http", "127.0.0.1:0"])
        .args(["--session-isolation", "shared"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "--session-isolation shared cannot be used with --sandbox over --http: a sandboxed worker \
             sees only the folders of the session it was started for"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("serving MCP"), "{stderr}");
}

/// A tool's escape sequences reach a terminal as text, not as commands (OSC
/// 52 sets the clipboard, `\r` overwrites a line); a pipe gets the bytes.
#[test]
fn control_characters_in_a_result_are_shown_on_a_terminal_not_obeyed() {
    let session = tempfile::tempdir().unwrap();
    let hostile = "\u{1b}]52;c;cm0gLXJmIH4=\u{7}done\rfake";
    let args = serde_json::json!({ "value": hostile }).to_string();
    let terminal = crate::common::terminal::Terminal::open();
    let status = toolpool_command(session.path())
        .args(["call", "echo", "--args", &args])
        .stdout(terminal.output_end())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("toolpool runs");
    assert!(status.success());
    let shown = terminal.shown();
    assert!(
        shown.contains("\\x1b]52;c;cm0gLXJmIH4=\\x07done\\rfake"),
        "{shown:?}"
    );
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\r'),
        "{shown:?}"
    );
    let piped = toolpool(&session, &["call", "echo", "--args", &args]);
    assert_eq!(piped.stdout.trim_end_matches('\n'), hostile);
}
