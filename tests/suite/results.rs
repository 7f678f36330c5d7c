//! Results cross the boundary as JSON-able values; what is not JSON is
//! converted, and a result too large for a frame is a clear error.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::json;

#[tokio::test]
async fn json_values_pass_through_unchanged() {
    let (pool, _session) = pool(1).await;
    let value = json!({"a": [1, 2.5, "x", null, true], "nested": {"ü": "ß"}});
    assert_eq!(
        call(&pool, "echo", json!({"value": value})).await.unwrap(),
        value
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn async_tool_runs_to_completion() {
    let (pool, _session) = pool(1).await;
    assert_eq!(
        call(&pool, "async_add", json!({"a": 20, "b": 22}))
            .await
            .unwrap(),
        json!(42)
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn huge_result_is_refused_clearly_not_a_hang() {
    let (pool, _session) = pool(1).await;
    let started = Instant::now();
    let error = call(&pool, "huge_result", json!({"megabytes": 100}))
        .await
        .unwrap_err();
    assert_eq!(error.kind, toolpool::ErrorKind::ResultTooLarge, "{error}");
    assert!(error.message.contains("frame limit"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_serves(&pool).await;
    pool.shutdown().await;
}

/// A result of more values than the server takes ([0] * 10 000 000, a 50 MB
/// blob that would parse into gigabytes) is ResultTooLarge naming the
/// limit; one under it is delivered.
#[tokio::test]
async fn a_result_of_too_many_values_is_refused_not_parsed() {
    let (pool, _session) = pool(1).await;
    let error = call(&pool, "many_zeros", json!({})).await.unwrap_err();
    assert_eq!(error.kind, toolpool::ErrorKind::ResultTooLarge, "{error}");
    assert!(
        error.message.contains("holds more than 2000000 values"),
        "{error}"
    );
    let fewer = call(&pool, "many_zeros", json!({"count": 1000})).await;
    assert_eq!(fewer.unwrap().as_array().map(Vec::len), Some(1000));
    assert_serves(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn result_under_the_limit_is_delivered_whole() {
    let (pool, _session) = pool(1).await;
    let result = call(&pool, "huge_result", json!({"megabytes": 10}))
        .await
        .unwrap();
    assert_eq!(result.as_str().map(str::len), Some(10 * 1024 * 1024));
    pool.shutdown().await;
}

#[tokio::test]
async fn non_json_results_are_converted() {
    let (pool, _session) = pool(1).await;
    for (tool, expected) in [
        ("return_bytes", json!("AAFoZWxsb/8=")),
        ("return_datetime", json!("2024-01-02T03:04:05+00:00")),
        ("return_set", json!([1, 2, 3])),
        ("return_tuple", json!([1, "two", 3.0])),
        ("return_dataclass", json!({"x": 1, "y": 2, "label": "p"})),
        ("return_object_with_str", json!("custom __str__ result")),
        ("return_enum", json!("green")),
        ("return_huge_int", json!("1208925819614629174706176")),
        ("return_negative_huge_int", json!("-1180591620717411303424")),
    ] {
        let value = call(&pool, tool, json!({}))
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e}"));
        assert_eq!(value, expected, "{tool}");
    }
    pool.shutdown().await;
}

/// The interpreter with the msgpack C extension that `scripts/test-deps` installs.
fn python_with_c_extension() -> std::path::PathBuf {
    let python =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/pyvenv-test/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/test-deps",
        python.display()
    );
    python
}

/// Each result sample arrives as the walk converts it, whichever encoding the
/// shim chose (with or without the msgpack C extension, which no longer
/// matters for results): a marshal blob that the supervisor turns into JSON
/// (number, bytes and tuple keys spelled as Python spells them), JSON text
/// where marshal does not take the value, and the walk for what neither
/// gives exactly.
#[tokio::test]
async fn every_encoding_of_a_result_gives_what_the_walk_gives() {
    let c_ext = python_with_c_extension();
    let session = tempfile::tempdir().unwrap();
    let with_c = builder(&session, 1)
        .python(c_ext.to_string_lossy())
        .build()
        .await
        .unwrap();
    let (plain, _plain_session) = pool(1).await;
    assert_eq!(with_c.worker_info().codec, "msgpack");
    let marshalled_samples = [
        "table",
        "scalars",
        "bytes",
        "number_keys",
        "bytes_keys",
        "tuple_keys",
        "wide",
        "shared",
        "nan",
        "nested_99",
        "complex",
        "sets",
        "odd_keys",
        "singletons",
        "views",
    ];
    for name in [
        "table",
        "scalars",
        "bytes",
        "number_keys",
        "bytes_keys",
        "tuple_keys",
        "enum_keys",
        "wide",
        "mixed",
        "shared",
        "nan",
        "nested_99",
        "dict_subclass",
        "complex",
        "sets",
        "odd_keys",
        "singletons",
        "views",
        "array",
        "ctypes",
    ] {
        let args = json!({"name": name});
        for pool in [&with_c, &plain] {
            let walked = call(pool, "walked_sample", args.clone()).await.unwrap();
            assert_eq!(
                walked["marshalled"],
                json!(marshalled_samples.contains(&name)),
                "{name}"
            );
            let value = call(pool, "result_sample", args.clone())
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(value, walked["walked"], "{name}");
        }
    }
    // A numpy-like buffer (array.array) is not sent as its raw bytes.
    let array = call(&plain, "result_sample", json!({"name": "array"}))
        .await
        .unwrap();
    assert_eq!(array, json!(["array('i', [1, 2])", "b2s="]));
    // So is a ctypes value, once a tool imported ctypes.
    let ctypes = call(&plain, "result_sample", json!({"name": "ctypes"}))
        .await
        .unwrap();
    assert_eq!(ctypes, json!(["c_int(5)", "b2s="]));
    let odd = call(&plain, "result_sample", json!({"name": "odd_keys"}))
        .await
        .unwrap();
    let keys: Vec<&str> = odd
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "frozenset({1})",
            "(1+2j)",
            "Ellipsis",
            "(1.5, None, b'x', (\"it's\",))",
            "1180591620717411303424"
        ]
    );
    // What the keys look like, not only that both sides agree.
    let keys = call(&with_c, "result_sample", json!({"name": "number_keys"}))
        .await
        .unwrap();
    let keys: Vec<&str> = keys
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["7", "-2", "2.5", "1e+16", "1.5e-07", "true", "null"]);
    with_c.shutdown().await;
    plain.shutdown().await;
}

/// A result that cannot be sent is the error the walk gives for it, and
/// the worker answers the next call.
#[tokio::test]
async fn results_inside_themselves_too_deep_or_not_utf8_are_clear_errors() {
    let (pool, _session) = pool(1).await;
    for (name, says) in [
        ("loop", "ValueError: the result contains itself (a list inside itself)"),
        (
            "deep",
            "ValueError: the result is nested deeper than 100 levels of lists and dicts",
        ),
        (
            "surrogate",
            "UnicodeEncodeError: the result cannot be encoded: 'utf-8' codec can't encode character '\\ud800'",
        ),
    ] {
        let error = call(&pool, "result_error", json!({"name": name}))
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains(says), "{name}: {error}");
        assert_eq!(call(&pool, "return_none", json!({})).await.unwrap(), json!(null));
    }
    pool.shutdown().await;
}

/// The guardian's system calls use ctypes; a fresh worker has forgotten it,
/// so that a result is not read back and compared for fear of a ctypes
/// buffer no tool made (`_marshalled` in results.py).
#[tokio::test]
async fn a_fresh_worker_has_no_buffer_modules_loaded() {
    let tools = tempfile::tempdir().unwrap();
    let session = tempfile::tempdir().unwrap();
    std::fs::write(
        tools.path().join("probe.py"),
        "import sys\n\n\ndef modules_loaded(names: list[str]) -> list[str]:\n    \"\"\"Which of these modules the worker has loaded.\"\"\"\n    return [name for name in names if name in sys.modules]\n",
    )
    .unwrap();
    let pool = toolpool::Pool::builder()
        .functions_dir(tools.path())
        .session_dir(session.path())
        .workers(1)
        .build()
        .await
        .unwrap();
    let loaded = call(
        &pool,
        "modules_loaded",
        json!({"names": ["_ctypes", "ctypes", "array", "mmap"]}),
    )
    .await
    .unwrap();
    assert_eq!(loaded, json!([]));
    pool.shutdown().await;
}

/// `toolpool serve` on stdio over tests/fixtures/results: what one result
/// costs the server, read from its /proc status (VmHWM reset through
/// `clear_refs` before each call).
mod over_mcp {
    use super::{costs_at_most_four_times, delivered_whole, peak_rise};
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

    use serde_json::{json, Value};

    struct Server {
        child: Child,
        stdin: ChildStdin,
        stdout: BufReader<ChildStdout>,
        _session: tempfile::TempDir,
    }

    impl Server {
        fn start() -> Server {
            let session = tempfile::tempdir().unwrap();
            let functions = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/results");
            let mut child = Command::new(env!("CARGO_BIN_EXE_toolpool"))
                .arg("--session-dir")
                .arg(session.path())
                .args(["--workers", "1", "--functions-dir", functions, "serve"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let stdin = child.stdin.take().unwrap();
            let stdout = BufReader::new(child.stdout.take().unwrap());
            let mut server = Server {
                child,
                stdin,
                stdout,
                _session: session,
            };
            server.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "results", "version": "0"}}}));
            server.read();
            server.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
            server
        }

        fn send(&mut self, message: Value) {
            writeln!(self.stdin, "{message}").unwrap();
        }

        fn read(&mut self) -> Value {
            let mut line = String::new();
            self.stdout.read_line(&mut line).unwrap();
            serde_json::from_str(&line).unwrap()
        }

        /// The call's answer, and how many bytes the server's peak resident
        /// memory rose above what it held before the call.
        fn call(&mut self, tool: &str, character: &str, megabytes: u64) -> (Value, u64) {
            peak_rise(self.child.id(), || {
                self.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": tool, "arguments": {"character": character, "megabytes": megabytes}}}));
                self.read()
            })
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// A 60 MB result of U+0001 would be 360 MB as JSON, twice (text and
    /// structuredContent): it is refused, naming the limit, without its
    /// encoding ever being built; and the server serves on.
    #[test]
    fn a_result_of_control_characters_past_the_limit_is_refused_not_encoded() {
        let mut server = Server::start();
        let n = 60_000_000;
        let (answer, rise) = server.call("text_of", "\u{1}", n / 1_000_000);
        let text = answer["result"]["content"][0]["text"].as_str().unwrap();
        assert_eq!(answer["result"]["isError"], true, "{text}");
        assert!(
            text.starts_with("Tool text_of error: ResultTooLarge: the result takes more than 67108864 bytes as MCP content (its text, and its structuredContent), the frame limit"),
            "{text}"
        );
        assert!(
            rise <= 4 * n,
            "the server's peak rose {} MB for a {} MB result",
            rise / 1_000_000,
            n / 1_000_000
        );
        let (answer, _) = server.call("text_untyped", "x", 1);
        assert_eq!(
            answer["result"]["content"][0]["text"]
                .as_str()
                .map(str::len),
            Some(1_000_000)
        );
    }

    /// Results that fit, each delivered whole for at most 4 × its size:
    /// the message is serialized to stdout a buffer at a time, never whole,
    /// and a large text is held once ([`costs_at_most_four_times`]).
    #[test]
    fn results_cost_at_most_four_times_their_size() {
        let mut server = Server::start();
        costs_at_most_four_times(|tool, character, megabytes| {
            server.call(tool, character, megabytes)
        });
    }

    /// A 60 MB result that fits is delivered whole, and costs the server at
    /// most 4 × its size: it is moved, not copied, into the message, and
    /// copied to stdout as rmcp writes it rather than gathered into lines.
    #[test]
    fn a_large_result_is_delivered_at_most_four_times_its_size() {
        let mut server = Server::start();
        let n = 60_000_000;
        let (answer, rise) = server.call("text_untyped", "a", n / 1_000_000);
        delivered_whole(&answer, rise, 'a', n, false);
    }
}

/// What `run` returns, and how many bytes the peak resident memory of the
/// process `pid` rose during it above what it held before (its VmHWM reset
/// through `clear_refs`).
pub(crate) fn peak_rise<T>(pid: u32, run: impl FnOnce() -> T) -> (T, u64) {
    let kib = |field: &str| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let before = kib("VmRSS:");
    let got = run();
    (got, kib("VmHWM:").saturating_sub(before) * 1024)
}

/// 5 MB of U+0001, typed (30 MB of JSON, as text and again as
/// structuredContent), 10 MB of U+0001, untyped, and 30 MB of letters,
/// typed, each delivered whole for at most 4 × its size, by `call` (a tool,
/// its character and megabytes: the answer and how far the server's peak
/// rose). After a call of 1 MB: a server's first calls set up what every
/// call reuses.
pub(crate) fn costs_at_most_four_times(
    mut call: impl FnMut(&str, &str, u64) -> (serde_json::Value, u64),
) {
    call("text_of", "x", 1);
    for (tool, character, megabytes) in [
        ("text_of", '\u{1}', 5),
        ("text_untyped", '\u{1}', 10),
        ("text_of", 'a', 30),
    ] {
        let (answer, rise) = call(tool, &character.to_string(), megabytes);
        delivered_whole(
            &answer,
            rise,
            character,
            megabytes * 1_000_000,
            tool == "text_of",
        );
    }
}

/// `answer` holds `character` `n` times, in its text and (`typed`) its
/// structured copy, and the server's peak memory rose at most 4 × `n`.
pub(crate) fn delivered_whole(
    answer: &serde_json::Value,
    rise: u64,
    character: char,
    n: u64,
    typed: bool,
) {
    let result = &answer["result"];
    assert_eq!(result["isError"], false, "{}", result["content"][0]["text"]);
    let mut texts = vec![&result["content"][0]["text"]];
    if typed {
        texts.push(&result["structuredContent"]["result"]);
    }
    for text in texts {
        let text = text.as_str().unwrap();
        assert_eq!(text.len() as u64, n);
        assert!(text.chars().all(|c| c == character));
    }
    assert!(
        rise <= 4 * n,
        "the server's peak rose {:.1} MB for a {} MB result",
        rise as f64 / 1e6,
        n / 1_000_000
    );
}
