//! Helpers shared by the integration tests: a pool on the fixture tools, and
//! process checks that treat zombies as dead.
#![allow(dead_code)]

pub mod terminal;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use toolpool::{InvokeOptions, Pool, PoolBuilder, ToolError};

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/functions")
}

/// A builder on the fixture tools with its own session directory.
pub fn builder(session: &tempfile::TempDir, workers: usize) -> PoolBuilder {
    sandbox_from_env(
        Pool::builder()
            .functions_dir(fixtures())
            .workers(workers)
            .session_dir(session.path())
            .timeout(Duration::from_secs(30)),
    )
}

/// With `TOOLPOOL_TEST_SANDBOX=1` (`scripts/test-sandboxed`) the pool runs
/// under `--sandbox`: the ordinary tests of the file tools, attachments,
/// packages and prompts then show they pass sandboxed too.
pub fn sandbox_from_env(builder: PoolBuilder) -> PoolBuilder {
    if sandboxed_by_env() {
        builder.sandbox(toolpool::SandboxMode::Strict)
    } else {
        builder
    }
}

/// True (with a notice) when this kernel cannot run `--sandbox`, by
/// `toolpool --sandbox doctor`; a test then skips, unless
/// `TOOLPOOL_TEST_SANDBOX` is set (scripts/test-sandboxed), which requires it.
pub fn kernel_cannot_sandbox() -> bool {
    let doctor = std::process::Command::new(env!("CARGO_BIN_EXE_toolpool"))
        .args(["--sandbox", "doctor"])
        .output()
        .expect("toolpool runs");
    if doctor.status.success() {
        return false;
    }
    let why = String::from_utf8_lossy(&doctor.stderr);
    assert!(
        std::env::var_os("TOOLPOOL_TEST_SANDBOX").is_none(),
        "TOOLPOOL_TEST_SANDBOX is set but the kernel lacks a sandbox piece: {why}"
    );
    eprintln!("skipped: this kernel cannot run --sandbox: {why}");
    true
}

pub fn sandboxed_by_env() -> bool {
    std::env::var_os("TOOLPOOL_TEST_SANDBOX").is_some_and(|v| v == "1")
}

pub async fn pool(workers: usize) -> (Pool, tempfile::TempDir) {
    let session = tempfile::tempdir().expect("temp dir");
    let pool = builder(&session, workers)
        .build()
        .await
        .expect("pool starts");
    (pool, session)
}

pub async fn call(pool: &Pool, name: &str, args: Value) -> Result<Value, ToolError> {
    pool.invoke(name, args, InvokeOptions::default()).await
}

pub async fn call_with_timeout(
    pool: &Pool,
    name: &str,
    args: Value,
    secs: f64,
) -> Result<Value, ToolError> {
    let options = InvokeOptions {
        timeout: Some(Duration::from_secs_f64(secs)),
        ..Default::default()
    };
    pool.invoke(name, args, options).await
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().chars().next());
            !matches!(state, Some(Some('Z')) | Some(Some('X')))
        }
        Err(_) => false,
    }
}

/// Waits up to `limit` for `pid` to be gone.
pub async fn gone_within(pid: i32, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    !alive(pid)
}

/// The pool still answers a plain call correctly.
pub async fn assert_serves(pool: &Pool) {
    let sum = call(pool, "add", serde_json::json!({"a": 2, "b": 3})).await;
    assert_eq!(sum.expect("the pool keeps serving"), Value::from(5));
}

/// What a run of the binary printed and returned.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// The binary, on the fixture tools, with `session` as its session directory.
pub fn toolpool_command(session: &std::path::Path) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolpool"));
    command
        .arg("--functions-dir")
        .arg(fixtures())
        .arg("--session-dir")
        .arg(session);
    command
}

pub fn run(command: &mut std::process::Command) -> Run {
    let started = std::time::Instant::now();
    let output = command.output().expect("toolpool runs");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        elapsed: started.elapsed(),
    }
}

/// The parent pid of `pid`, from /proc.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The processes below this test process that work in `session` (its
/// pool's template, guardians and workers): the tests of the suite run side
/// by side in one process, so "every descendant" would take in other tests'
/// pools too.
pub fn processes_in_session(session: &tempfile::TempDir) -> Vec<i32> {
    let session = session
        .path()
        .canonicalize()
        .expect("the session directory exists");
    descendants(std::process::id() as i32)
        .into_iter()
        .filter(|p| {
            std::fs::read_link(format!("/proc/{p}/cwd")).is_ok_and(|cwd| cwd.starts_with(&session))
        })
        .collect()
}

/// Every live process below `pid` (children, grandchildren, ...).
pub fn descendants(pid: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                .filter_map(|p| Some((p, parent_of(p)?)))
                .collect()
        })
        .unwrap_or_default();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    found.remove(0);
    found.retain(|p| alive(*p));
    found
}

/// Waits up to `limit` until every pid in `pids` is gone; returns the survivors.
pub async fn survivors_after(pids: &[i32], limit: Duration) -> Vec<i32> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() || std::time::Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads a pid a tool wrote to `path`, waiting up to `limit` for the file.
pub async fn wait_for_pid_file(path: &std::path::Path, limit: Duration) -> i32 {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} was not written within {limit:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Describes processes for an assertion message: pid and command line.
pub fn describe_pids(pids: &[i32]) -> String {
    pids.iter()
        .map(|p| {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default();
            format!("{p} ({})", cmd.chars().take(100).collect::<String>())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The pid of the worker that answers the next call.
pub async fn worker_pid(pool: &Pool) -> i32 {
    let report = pool
        .invoke_report("getpid", serde_json::json!({}), InvokeOptions::default())
        .await;
    let pid = report.result.expect("getpid answers");
    // Sandboxed, a worker sees only its own PID namespace's /proc: the pid
    // the supervisor knows from the kernel is the one to signal.
    if sandboxed_by_env() {
        return report.worker_pid.expect("the worker's pid");
    }
    pid.as_i64().expect("a pid is a number") as i32
}

/// A minimal pure-Python wheel, `tp_demo_pkg` with `VALUE = 42`, in `dir`.
pub fn build_demo_wheel(dir: &std::path::Path) {
    let script = r#"
import base64, hashlib, sys, zipfile
out = sys.argv[1] + "/tp_demo_pkg-1.0-py3-none-any.whl"
files = {
    "tp_demo_pkg/__init__.py": b"VALUE = 42\n",
    "tp_demo_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tp-demo-pkg\nVersion: 1.0\n",
    "tp_demo_pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: toolpool-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{name},sha256={digest},{len(data)}")
record.append("tp_demo_pkg-1.0.dist-info/RECORD,,")
with zipfile.ZipFile(out, "w") as wheel:
    for name, data in files.items():
        wheel.writestr(name, data)
    wheel.writestr("tp_demo_pkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
"#;
    let status = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Whether `python3 -m pip` runs here (the install tests need it).
pub fn python3_has_pip() -> bool {
    std::process::Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}
