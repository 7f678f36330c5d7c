//! The wheel (`pyproject.toml`, maturin's "bin" bindings), installed the way
//! Python users install tools: into a fresh virtual environment, whose
//! `toolpool` must list the bundled tools and answer an MCP call with nothing
//! else around (no repository, no cache).
//!
//! `scripts/test-deps` builds the wheel into `target/wheels` (dev profile,
//! sharing every build with `cargo test`); with
//! `TOOLPOOL_TEST_WHEEL_BUILD` set this test builds it itself.
//! It must also give `import toolpool` (the Pool, on the wheel's own
//! binary) and register the pytest plugin.
//!
//! Without a wheel the test is skipped with a notice, except in CI (`CI`
//! set), where it is required.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The newest `toolpool-*.whl` in `target/wheels`.
fn newest_wheel() -> Option<PathBuf> {
    let dir = root().join("target/wheels");
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("toolpool-") && name.ends_with(".whl")
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
}

fn build_wheel() {
    let maturin = root().join("target/pyvenv-build/bin/maturin");
    let status = Command::new(&maturin)
        .args([
            "build",
            "--features",
            "rmcp/client",
            "--out",
            "target/wheels",
        ])
        .current_dir(root())
        .status()
        .unwrap_or_else(|e| panic!("{} (scripts/test-deps installs it): {e}", maturin.display()));
    assert!(status.success(), "maturin build failed");
}

fn checked(command: &mut Command, what: &str) -> String {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        output.status.success(),
        "{what}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A fresh virtual environment under `target/` with the wheel installed.
fn install(wheel: &Path) -> tempfile::TempDir {
    let parent = root().join("target/wheel-test");
    std::fs::create_dir_all(&parent).unwrap();
    let venv = tempfile::Builder::new()
        .prefix("venv-")
        .tempdir_in(&parent)
        .unwrap();
    checked(
        Command::new("python3")
            .args(["-m", "venv"])
            .arg(venv.path()),
        "python3 -m venv",
    );
    checked(
        Command::new(venv.path().join("bin/pip"))
            .args(["install", "--quiet", "--no-index", "--no-deps"])
            .arg(wheel),
        "pip install the wheel",
    );
    venv
}

#[test]
fn the_wheel_installs_a_working_toolpool() {
    if std::env::var_os("TOOLPOOL_TEST_WHEEL_BUILD").is_some() {
        build_wheel();
    }
    let Some(wheel) = newest_wheel() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "no wheel in target/wheels: scripts/test-deps builds it"
        );
        eprintln!("skipped: no wheel in target/wheels (scripts/test-deps builds it)");
        return;
    };
    let venv = install(&wheel);
    let toolpool = venv.path().join("bin/toolpool");
    assert!(toolpool.is_file(), "the wheel installs bin/toolpool");
    // Anywhere, with an empty cache: everything it needs is in the binary.
    let cwd = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let bare = |command: &mut Command| {
        command
            .current_dir(cwd.path())
            .env("TOOLPOOL_CACHE_DIR", cache.path())
            .env_remove("TOOLPOOL_FUNCTIONS_DIR")
            .env_remove("MAC_FUNCTIONS_DIR")
            .env_remove("TOOLPOOL_SESSION_DIR");
    };

    let mut catalog = Command::new(&toolpool);
    catalog.arg("catalog");
    bare(&mut catalog);
    let catalog: Value = serde_json::from_str(&checked(&mut catalog, "toolpool catalog")).unwrap();
    let names: Vec<&str> = catalog["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    assert!(names.contains(&"get_current_time"), "{names:?}");

    let mut serve = Command::new(&toolpool);
    serve
        .args(["--workers", "1", "serve"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    bare(&mut serve);
    let mut child = serve.spawn().expect("toolpool serve starts");
    let mut script = String::new();
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "wheel-test", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "word_count", "arguments": {"text": "one two three"}}}),
    ] {
        script.push_str(&format!("{message}\n"));
    }
    // stdin's end after the requests: the server answers what it read, then exits.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(script.as_bytes()).unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let answer = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("stdout is JSON-RPC only"))
        .find(|message| message["id"] == json!(2))
        .unwrap_or_else(|| panic!("no answer to the call: {stderr}"));
    let result = &answer["result"];
    assert_eq!(result["isError"], json!(false), "{answer}");
    let text = result["content"][0]["text"].as_str().unwrap();
    let counts: Value = serde_json::from_str(text).expect("word_count returns an object");
    assert_eq!(counts["words"], json!(3), "{text}");
    // `import toolpool`: the Pool runs the wheel's own binary (nothing on
    // PATH, no TOOLPOOL_BIN), and pytest finds the plugin by its entry point.
    let mut python = Command::new(venv.path().join("bin/python"));
    python
        .args([
            "-c",
            "import importlib.metadata as m, toolpool\n\
             with toolpool.Pool(workers=1) as pool:\n\
             \x20   print(pool.invoke('word_count', {'text': 'one two'})['words'])\n\
             print([e.value for e in m.entry_points(group='pytest11') if e.name == 'toolpool'])",
        ])
        .env("PATH", "/usr/bin:/bin")
        .env_remove("TOOLPOOL_BIN");
    bare(&mut python);
    let printed = checked(&mut python, "import toolpool from the wheel");
    assert_eq!(printed, "2\n['toolpool.pytest_plugin']\n", "{printed}");
    let left: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().collect();
    assert!(
        left.iter()
            .all(|e| e.as_ref().unwrap().file_name() == ".toolpool"),
        "serve keeps its session under .toolpool only"
    );
}
