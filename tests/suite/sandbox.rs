//! `--sandbox` against the real kernel: hostile tools
//! (tests/fixtures/hostile/sandbox/escapes.py) try to read and write outside
//! the session, reach the network, see and signal the supervisor, forge an
//! MCP answer through its `/proc`, fork without end and make system calls a
//! tool never needs, and read another session's files. Each test asserts
//! what the kernel answered, and that the pool still serves.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::terminal::Terminal;
use crate::common::*;
use serde_json::{json, Value};
use std::sync::Arc;
use toolpool::SandboxMode;

use toolpool::context::{Session, SessionsRoot};
use toolpool::{ErrorKind, InvokeOptions, Pool, PoolBuilder, ToolError};

fn escapes() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile/sandbox")
}

fn sandboxed(session: &tempfile::TempDir) -> PoolBuilder {
    Pool::builder()
        .functions_dir(escapes())
        .workers(1)
        .spare_workers(0)
        .session_dir(session.path())
        .timeout(Duration::from_secs(30))
        .sandbox(SandboxMode::Strict)
}

async fn start(builder: PoolBuilder) -> Pool {
    builder.build().await.expect("a sandboxed pool starts")
}

/// A folder of the host outside /tmp (which the sandbox replaces with its
/// own): /var/tmp, or the target directory when that is not under /tmp
/// either (a checkout may well be, as CI's may).
fn host_dir() -> tempfile::TempDir {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let base = if target.starts_with("/tmp") {
        Path::new("/var/tmp")
    } else {
        target
    };
    let dir = tempfile::tempdir_in(base).expect("temp dir");
    assert!(!dir.path().starts_with("/tmp"), "{}", dir.path().display());
    dir
}

fn raised(result: Result<Value, ToolError>, kind: &str) -> String {
    match result {
        Err(e) if e.kind == ErrorKind::Raised(kind.into()) => e.message,
        other => panic!("expected the tool to raise {kind}, got {other:?}"),
    }
}

async fn serves(pool: &Pool) {
    let sum = call(pool, "add", json!({"a": 2, "b": 3})).await;
    assert_eq!(sum.expect("the pool keeps serving"), json!(5));
}

#[tokio::test]
async fn files_outside_the_session_cannot_be_read() {
    let host = host_dir();
    let secret = host.path().join("secret.txt");
    std::fs::write(&secret, "the user's secret").unwrap();
    let session = tempfile::tempdir().unwrap();
    // Unsandboxed, the same tool reads it: the test can fail.
    let open = start(sandboxed(&session).sandbox(SandboxMode::Off)).await;
    let read = call(&open, "read_file", json!({"path": secret})).await;
    assert_eq!(read.expect("read unsandboxed"), json!("the user's secret"));
    open.shutdown().await;

    let pool = start(sandboxed(&session)).await;
    let repository = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let binary = Path::new(env!("CARGO_BIN_EXE_toolpool"));
    for path in [secret.as_path(), repository.as_path(), binary] {
        let message = raised(
            call(&pool, "read_file", json!({"path": path})).await,
            "FileNotFoundError",
        );
        assert!(message.contains("No such file"), "{path:?}: {message}");
    }
    // The system files it can see hold no secrets.
    if Path::new("/etc/shadow").exists() {
        raised(
            call(&pool, "read_file", json!({"path": "/etc/shadow"})).await,
            "PermissionError",
        );
    }
    // Nor do the folders of private keys (empty in the view).
    for dir in ["/etc/ssh", "/etc/ssl/private"] {
        if Path::new(dir).is_dir() {
            let listed = call(&pool, "list_dir", json!({"path": dir})).await;
            assert_eq!(listed.expect("listable"), json!([]), "{dir}");
        }
    }
    serves(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn writes_outside_the_workspace_fail_and_nothing_appears() {
    let host = host_dir();
    // Outside /tmp: a session under /tmp has its folders in the private /tmp.
    let session = host_dir();
    let pool = start(sandboxed(&session)).await;
    let workspace = pool.session().workspace.clone();
    let outside = [
        (host.path().join("planted.txt"), "FileNotFoundError"),
        (session.path().join("planted.txt"), "OSError"),
        (workspace.join("attachments/planted.txt"), "OSError"),
        (PathBuf::from("/usr/planted.txt"), "OSError"),
        (PathBuf::from("/planted.txt"), "OSError"),
    ];
    for (path, kind) in &outside {
        let message = raised(
            call(&pool, "write_file", json!({"path": path, "text": "x"})).await,
            kind,
        );
        assert!(
            message.contains("No such file") || message.contains("Read-only file system"),
            "{path:?}: {message}"
        );
        assert!(!path.exists(), "{path:?} appeared on the host");
    }
    // The workspace is written through to the host; /tmp is the sandbox's own.
    let tmp_name = format!("/tmp/toolpool-sandbox-test-{}", std::process::id());
    for path in ["kept.txt", tmp_name.as_str()] {
        let written = call(&pool, "write_file", json!({"path": path, "text": "x"})).await;
        assert_eq!(written.expect("writable"), json!("written"));
    }
    assert_eq!(
        std::fs::read_to_string(workspace.join("kept.txt")).unwrap(),
        "x"
    );
    assert!(
        !Path::new(&tmp_name).exists(),
        "the private /tmp leaked to the host"
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn the_network_is_loopback_of_its_own_unless_allowed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let session = tempfile::tempdir().unwrap();
    let pool = start(sandboxed(&session)).await;
    let message = raised(
        call(&pool, "connect", json!({"port": port})).await,
        "ConnectionRefusedError",
    );
    assert!(message.contains("Connection refused"), "{message}");
    pool.shutdown().await;

    let pool = start(sandboxed(&session).allow_net(true)).await;
    let connected = call(&pool, "connect", json!({"port": port})).await;
    assert_eq!(connected.expect("--allow-net"), json!("connected"));
    pool.shutdown().await;
}

#[tokio::test]
async fn the_supervisor_and_other_workers_are_invisible_and_cannot_be_signalled() {
    let session = tempfile::tempdir().unwrap();
    let pool = start(sandboxed(&session).workers(2)).await;
    // Both workers at once: each sees only itself, as pid 1.
    let (a, b) = tokio::join!(
        call(&pool, "pids", json!({})),
        call(&pool, "pids", json!({}))
    );
    assert_eq!(a.expect("pids"), json!([1]));
    assert_eq!(b.expect("pids"), json!([1]));
    let me = std::process::id();
    let seen = call(&pool, "proc_entry", json!({"pid": me})).await;
    assert_eq!(seen.expect("proc_entry"), json!(false));
    let message = raised(
        call(&pool, "signal_pid", json!({"pid": me})).await,
        "ProcessLookupError",
    );
    assert!(message.contains("No such process"), "{message}");
    serves(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn an_answer_cannot_be_forged_on_the_supervisors_stdout() {
    let served = crate::mcp_support::serve_in(
        &escapes(),
        &["--sandbox", "--workers", "1", "serve"],
        crate::mcp_support::TestClient::plain(),
    )
    .await;
    let server = served.pid();
    // The next request's id is a guess a hostile tool could make; whatever it
    // is, nothing reaches the server's stdout.
    let result = served
        .call("forge", json!({"pid": server, "call_id": 3}))
        .await;
    let text = crate::mcp_support::error_text(&result);
    assert!(text.contains("FileNotFoundError"), "{text}");
    assert!(!text.contains("FORGED"), "{text}");
    let sum = served.call("add", json!({"a": 1, "b": 2})).await;
    assert_eq!(crate::mcp_support::ok_text(&sum), "3");
    let (code, stderr) = served.close().await;
    assert_eq!(code, 0, "{stderr}");
}

/// Host processes in the PID namespace `ns` (as `/proc/<pid>/ns/pid` names it).
fn processes_in(ns: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if std::fs::read_link(entry.path().join("ns/pid"))
            .is_ok_and(|link| link.to_string_lossy() == ns)
            && alive(pid)
        {
            found.push(pid);
        }
    }
    found
}

#[tokio::test]
async fn a_fork_bomb_is_contained() {
    let session = tempfile::tempdir().unwrap();
    let pool = start(sandboxed(&session).max_procs(32)).await;
    // The limit holds: forks are refused, the call returns.
    let ns = call(&pool, "pid_namespace", json!({})).await.expect("ns");
    let ns = ns.as_str().unwrap().to_string();
    let bomb = call(&pool, "fork_bomb", json!({"seconds": 2})).await;
    let text = bomb.expect("the bomb returns");
    let refused: u64 = text
        .as_str()
        .and_then(|t| t.strip_prefix("refused "))
        .and_then(|t| t.strip_suffix(" times"))
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!(refused > 0, "no fork was refused: {text}");
    assert!(
        processes_in(&ns).len() <= 32,
        "more processes than --max-procs"
    );
    // A bomb that runs into its timeout: killed with everything it forked.
    let timed_out = call_with_timeout(&pool, "fork_bomb", json!({"seconds": 600}), 2.0).await;
    assert_eq!(timed_out.expect_err("times out").kind, ErrorKind::Timeout);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !processes_in(&ns).is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(processes_in(&ns), Vec::<i32>::new(), "left of the bomb");
    serves(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn a_denied_system_call_is_an_error_for_the_tool_not_a_dead_pool() {
    let session = tempfile::tempdir().unwrap();
    let pool = start(sandboxed(&session)).await;
    let before = call(&pool, "pid_namespace", json!({})).await.expect("ns");
    for name in ["ptrace", "mount", "unshare", "keyctl"] {
        let message = raised(
            call(&pool, "denied_syscall", json!({"name": name})).await,
            "PermissionError",
        );
        assert!(
            message.contains("Operation not permitted"),
            "{name}: {message}"
        );
    }
    // The same worker answers.
    let after = call(&pool, "pid_namespace", json!({})).await.expect("ns");
    assert_eq!(before, after);
    serves(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn recycling_and_timeouts_keep_working_sandboxed() {
    let session = tempfile::tempdir().unwrap();
    let pool = start(sandboxed(&session).max_calls_per_worker(Some(1))).await;
    for _ in 0..3 {
        serves(&pool).await;
    }
    let slow = call_with_timeout(&pool, "fork_bomb", json!({"seconds": 600}), 1.0).await;
    assert_eq!(slow.expect_err("times out").kind, ErrorKind::Timeout);
    serves(&pool).await;
    pool.shutdown().await;
}

#[test]
fn doctor_lists_each_piece() {
    let session = tempfile::tempdir().unwrap();
    let out = run(std::process::Command::new(env!("CARGO_BIN_EXE_toolpool"))
        .args(["--sandbox", "--session-dir"])
        .arg(session.path())
        .arg("doctor"));
    assert_eq!(out.code, 0, "{}", out.stderr);
    for piece in [
        "sandbox: strict",
        "sandbox user namespace: on",
        "sandbox pid namespace: on",
        "sandbox mount namespace: on",
        "sandbox network namespace: on",
        "sandbox seccomp: on",
        "sandbox process limit: on",
        "terminal: none for tools (workers run in a session of their own, the sandbox has no /dev/tty",
        "sandbox apparmor: ",
    ] {
        assert!(out.stdout.contains(piece), "{piece} in:\n{}", out.stdout);
    }
    assert!(out.stdout.contains("sandbox landlock: "), "{}", out.stdout);
}

/// Kills the local package index when the test ends.
struct Index(std::process::Child);

impl Drop for Index {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn install_python_packages_reaches_an_index_only_with_allow_net() {
    if !python3_has_pip() {
        eprintln!("skipped: python3 has no pip");
        return;
    }
    let wheels = tempfile::tempdir().unwrap();
    build_demo_wheel(wheels.path());
    // A local index on the host's loopback: nothing needs the internet.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _index = Index(
        std::process::Command::new("python3")
            .args([
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                &port.to_string(),
            ])
            .current_dir(wheels.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the index did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let bundled = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("functions/function_calling");
    let pip_env = [
        ("PIP_NO_INDEX".to_string(), "1".to_string()),
        (
            "PIP_FIND_LINKS".to_string(),
            format!("http://127.0.0.1:{port}/"),
        ),
        ("PIP_DISABLE_PIP_VERSION_CHECK".to_string(), "1".to_string()),
    ];
    let install = |pool: Pool| async move {
        let result = call(
            &pool,
            "install_python_packages",
            json!({"packages": ["tp-demo-pkg==1.0"]}),
        )
        .await
        .expect("the tool answers");
        pool.shutdown().await;
        result
    };
    let session = tempfile::tempdir().unwrap();
    let installed = session.path().join("site-packages/tp_demo_pkg/__init__.py");
    let offline = sandboxed(&session)
        .functions_dir(&bundled)
        .timeout(Duration::from_secs(120))
        .set_env(pip_env.clone());
    let result = install(start(offline).await).await;
    assert_eq!(result["ok"], json!(false), "{result:#}");
    assert!(!installed.exists());

    let online = sandboxed(&session)
        .functions_dir(&bundled)
        .timeout(Duration::from_secs(120))
        .set_env(pip_env)
        .allow_net(true);
    let result = install(start(online).await).await;
    assert_eq!(result["ok"], json!(true), "{result:#}");
    assert!(installed.exists(), "installed into the session's packages");
}

/// `setpriv` to nobody, running toolpool: `None` when this test cannot
/// drop root here (not root, no setpriv, no interpreter nobody may run).
fn as_nobody(home: &Path) -> Option<std::process::Command> {
    as_nobody_running(home, env!("CARGO_BIN_EXE_toolpool"))
}

/// [`as_nobody`], running `program`.
fn as_nobody_running(home: &Path, program: &str) -> Option<std::process::Command> {
    let nobody = |program: &str| {
        let mut command = std::process::Command::new("setpriv");
        command
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(program)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", home);
        command
    };
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let python_runs = nobody("/usr/bin/python3")
        .args(["-c", "pass"])
        .output()
        .is_ok_and(|o| o.status.success());
    python_runs.then(|| nobody(program))
}

/// A home folder nobody owns, where this test can run things as nobody
/// (else `None`, with a notice).
fn nobodys_home() -> Option<tempfile::TempDir> {
    let home = tempfile::tempdir().unwrap();
    nix::unistd::chown(
        home.path(),
        Some(nix::unistd::Uid::from_raw(65534)),
        Some(nix::unistd::Gid::from_raw(65534)),
    )
    .ok()?;
    if as_nobody(home.path()).is_none() {
        eprintln!("skipped: cannot run as nobody here (needs root, setpriv, /usr/bin/python3)");
        return None;
    }
    Some(home)
}

/// Started where it cannot write (a desktop client starts servers in `/`),
/// with no `--session-dir`: the session is under the user's state
/// directory, and where that cannot be made either the error names
/// `--session-dir`. Run as nobody, whom `/` does not let write.
#[test]
fn without_a_session_dir_a_read_only_working_directory_is_no_obstacle() {
    let Some(home) = nobodys_home() else {
        return;
    };
    // `call add` as nobody from `/`, with `home` as HOME.
    let add_from_root = |home: &Path| {
        run(as_nobody(home)
            .expect("checked")
            .current_dir("/")
            .args(["--python", "/usr/bin/python3", "--functions-dir"])
            .arg(escapes())
            .args(["call", "add", "--args", r#"{"a": 1, "b": 2}"#]))
    };
    let called = add_from_root(home.path());
    assert_eq!(called.code, 0, "{}", called.stderr);
    assert_eq!(called.stdout.trim(), "3", "{}", called.stderr);
    let session = home.path().join(".local/state/toolpool/sessions/default");
    assert!(session.join("code_workspace").is_dir(), "{}", called.stderr);
    let nowhere = add_from_root(Path::new("/nonexistent"));
    assert_eq!(nowhere.code, 2, "{}", nowhere.stdout);
    assert!(
        nowhere
            .stderr
            .contains("cannot create session directory .toolpool/sessions/default")
            && nowhere.stderr.contains("pass --session-dir DIR"),
        "{}",
        nowhere.stderr
    );
}

#[test]
fn it_works_without_root() {
    let Some(home) = nobodys_home() else {
        return;
    };
    let toolpool = |args: &[&str]| {
        let mut command = as_nobody(home.path()).expect("checked");
        command
            .args([
                "--python",
                "/usr/bin/python3",
                "--sandbox",
                "--max-procs",
                "20",
            ])
            .arg("--functions-dir")
            .arg(escapes())
            .arg("--session-dir")
            .arg(home.path().join("session"))
            .args(args);
        run(&mut command)
    };
    let doctor = toolpool(&["doctor"]);
    assert_eq!(doctor.code, 0, "{}", doctor.stderr);
    assert!(
        doctor.stdout.contains("sandbox user namespace: on")
            && doctor.stdout.contains("sandbox process limit: on"),
        "{}",
        doctor.stdout
    );
    let pids = toolpool(&["call", "pids"]);
    assert_eq!(pids.code, 0, "{}", pids.stderr);
    assert_eq!(
        serde_json::from_str::<Value>(&pids.stdout).unwrap(),
        json!([1])
    );
    let bomb = toolpool(&["call", "fork_bomb", "--args", r#"{"seconds": 1}"#]);
    assert_eq!(bomb.code, 0, "{}", bomb.stderr);
    assert!(bomb.stdout.starts_with("refused "), "{}", bomb.stdout);
    assert!(!bomb.stdout.starts_with("refused 0 "), "{}", bomb.stdout);
    let read = toolpool(&["call", "read_file", "--args", r#"{"path": "/etc/shadow"}"#]);
    assert_eq!(read.code, 1, "{}", read.stdout);
    assert!(read.stdout.contains("PermissionError"), "{}", read.stdout);
}

/// No other process of the same user — a tool of another pool, a script —
/// can write the template's memory (every later worker is cloned from it):
/// it is not dumpable. Run as nobody, where the kernel's check applies (root
/// has CAP_SYS_PTRACE, which only `--sandbox` takes from a tool).
#[test]
fn a_process_of_the_same_user_cannot_write_the_template() {
    let Some(home) = nobodys_home() else {
        return;
    };
    let mut command = as_nobody(home.path()).expect("checked");
    let mut toolpool = command
        .args(["--python", "/usr/bin/python3", "--functions-dir"])
        .arg(escapes())
        .arg("--session-dir")
        .arg(home.path().join("session"))
        .args(["call", "nap", "--args", r#"{"seconds": 30}"#])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let supervisor = toolpool.id() as i32;
    // The template makes itself not dumpable once its interpreter is up;
    // wait until it has cloned the call's guardian (a child of the
    // supervisor too, with a worker of its own): by then it has.
    let template = (0..200).find_map(|_| {
        std::thread::sleep(Duration::from_millis(50));
        let clones: Vec<i32> = descendants(supervisor)
            .into_iter()
            .filter(|pid| parent_of(*pid) == Some(supervisor))
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|command| command.split(|b| *b == 0).any(|arg| arg == b"--template"))
            })
            .collect();
        let has_children = |pid: i32| !descendants(pid).is_empty();
        if !clones.iter().any(|pid| has_children(*pid)) {
            return None;
        }
        clones.into_iter().find(|pid| !has_children(*pid))
    });
    let template = template.expect("the pool's template is running");
    let script = format!(
        "import sys\ntry:\n    open('/proc/{template}/mem', 'r+b')\nexcept PermissionError:\n    sys.exit(13)\nprint('opened', open('/proc/{template}/status').read())"
    );
    let poked = run(as_nobody_running(home.path(), "/usr/bin/python3")
        .expect("checked")
        .args(["-c", &script]));
    let _ = toolpool.kill();
    let _ = toolpool.wait();
    assert_eq!(
        poked.code, 13,
        "the template's memory: {}{}",
        poked.stdout, poked.stderr
    );
}

/// A tool of an unsandboxed pool that edits the shim it runs from (turning
/// the lock-down into a no-op) changes nothing for a later `--sandbox`
/// pool: each pool installs the shim afresh.
#[tokio::test]
async fn a_shim_edited_by_a_tool_does_not_reach_the_next_pool() {
    if kernel_cannot_sandbox() {
        return;
    }
    let session = tempfile::tempdir().unwrap();
    let open = start(sandboxed(&session).sandbox(SandboxMode::Off)).await;
    let edited = call(&open, "tamper_with_the_shim", json!({}))
        .await
        .unwrap();
    let edited = PathBuf::from(edited.as_str().unwrap());
    assert!(std::fs::read_to_string(&edited)
        .unwrap()
        .ends_with("def lock_down(config):\n    pass\n"));
    let pool = start(sandboxed(&session)).await;
    let state = call(&pool, "lock_down_state", json!({})).await.unwrap();
    assert_eq!(state, json!("CapEff:0000000000000000 Seccomp:2"));
    pool.shutdown().await;
    open.shutdown().await;
}

#[tokio::test]
async fn the_memory_limit_is_a_cgroups_where_one_can_be_had() {
    let session = tempfile::tempdir().unwrap();
    let pool = start(sandboxed(&session).memory_limit_mb(Some(200))).await;
    let cgroup = pool.sandbox().expect("sandboxed").limits_memory();
    let hog = call(&pool, "hog", json!({"megabytes": 1024})).await;
    let error = hog.expect_err("200 MB do not hold 1 GB");
    if cgroup {
        assert_eq!(error.kind, ErrorKind::WorkerDied, "{error}");
        assert!(error.message.contains("possibly out of memory"), "{error}");
    } else {
        assert_eq!(
            error.kind,
            ErrorKind::Raised("MemoryError".into()),
            "{error}"
        );
    }
    serves(&pool).await;
    pool.shutdown().await;
}

async fn call_in(
    pool: &Pool,
    session: &Arc<Session>,
    name: &str,
    args: Value,
) -> Result<Value, ToolError> {
    let options = InvokeOptions {
        session: Some(session.clone()),
        ..InvokeOptions::default()
    };
    pool.invoke(name, args, options).await
}

/// A sessions root (`--sessions-root`) in `dir`, sweeping after an hour.
fn sessions_in(dir: &std::path::Path) -> SessionsRoot {
    SessionsRoot::new(&dir.join("sessions"), Duration::from_secs(3600), &[]).unwrap()
}

/// Sessions of their own (as each credential over HTTP has): a sandboxed
/// worker is started for one session and sees its folders only; a call of
/// another session gets a worker of its own (the one worker of the pool is
/// retired for it), and the sessions root cannot be listed.
#[tokio::test]
async fn each_session_gets_workers_that_see_its_folders_only() {
    let host = host_dir();
    let root = sessions_in(host.path());
    let own = host_dir();
    let pool = start(sandboxed(&own)).await;
    let (alice, bob) = (root.open("alice").unwrap(), root.open("bob").unwrap());
    for (who, session) in [("alice", &alice), ("bob", &bob)] {
        let path = session.paths.workspace.join("mine.txt");
        let written = call_in(
            &pool,
            session,
            "write_file",
            json!({"path": path, "text": who}),
        );
        assert_eq!(
            written.await.expect("its own workspace is writable"),
            json!("written")
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), who, "on the host");
    }
    let theirs = bob.paths.workspace.join("mine.txt");
    let message = raised(
        call_in(&pool, &alice, "read_file", json!({"path": theirs})).await,
        "FileNotFoundError",
    );
    assert!(message.contains("No such file"), "{message}");
    raised(
        call_in(
            &pool,
            &alice,
            "write_file",
            json!({"path": theirs, "text": "x"}),
        )
        .await,
        "FileNotFoundError",
    );
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "bob");
    raised(
        call_in(&pool, &alice, "list_dir", json!({"path": root.root()})).await,
        "PermissionError",
    );
    let mine = call_in(
        &pool,
        &alice,
        "read_file",
        json!({"path": alice.paths.workspace.join("mine.txt")}),
    );
    assert_eq!(mine.await.expect("its own file"), json!("alice"));
    assert!(pool.stats().session_recycles >= 3, "{:?}", pool.stats());
    // A session's worker makes room once its folder is gone (swept).
    let once = root.open("once").unwrap();
    let summed = call_in(&pool, &once, "add", json!({"a": 1, "b": 2})).await;
    assert_eq!(summed.expect("the session is served"), json!(3));
    std::fs::remove_dir_all(&once.paths.dir).unwrap();
    drop(once);
    let theirs = call_in(&pool, &bob, "read_file", json!({"path": theirs})).await;
    assert_eq!(theirs.expect("bob's own file"), json!("bob"));
    serves(&pool).await;
    pool.shutdown().await;
}

/// A session folder that every sandboxed worker already sees (here, inside
/// the tools' folder) is refused a worker, naming both folders.
#[tokio::test]
async fn a_session_inside_a_folder_every_worker_sees_is_refused() {
    let tools = host_dir();
    for entry in std::fs::read_dir(escapes()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "py") {
            std::fs::copy(&path, tools.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    let root = sessions_in(tools.path());
    let own = host_dir();
    let pool = start(sandboxed(&own).functions_dir(tools.path())).await;
    let inside = root.open("inside").unwrap();
    let error = call_in(&pool, &inside, "add", json!({"a": 1, "b": 2}))
        .await
        .expect_err("refused");
    assert_eq!(error.kind, ErrorKind::WorkerDied, "{error:?}");
    assert!(
        error
            .message
            .contains("cannot start a sandboxed worker for session 'inside'")
            && error
                .message
                .contains("every sandboxed worker sees read-only"),
        "{}",
        error.message
    );
    serves(&pool).await;
    pool.shutdown().await;
}

/// A call given up while a worker is being started for its session (a
/// cancelled MCP request) leaves the pool its size: the new worker takes
/// the retired one's place, and the session's next call is served.
#[tokio::test]
async fn a_call_given_up_during_its_sessions_cold_start_leaves_the_pool_whole() {
    let host = host_dir();
    let root = sessions_in(host.path());
    let own = host_dir();
    let pool = start(sandboxed(&own)).await;
    let alice = root.open("alice").unwrap();
    // The pool's one worker is the pool session's: this call retires it
    // and waits for one of alice's, and is given up meanwhile.
    let given_up = tokio::time::timeout(
        Duration::from_millis(1),
        call_in(&pool, &alice, "add", json!({"a": 1, "b": 1})),
    )
    .await;
    assert!(
        given_up.is_err(),
        "the call finished within 1 ms: {given_up:?}"
    );
    let served = tokio::time::timeout(
        Duration::from_secs(60),
        call_in(&pool, &alice, "add", json!({"a": 2, "b": 2})),
    )
    .await
    .expect("a worker took the retired one's place");
    assert_eq!(served.expect("alice is served"), json!(4));
    assert_eq!(pool.live_workers(), 1);
    pool.shutdown().await;
}

/// A tool cannot type into the terminal toolpool was started from, nor take
/// it as its own, nor open it (issue: a sandboxed tool pushed `touch …\n`
/// into the user's shell with TIOCSTI). Plain and under `--sandbox`.
#[test]
fn tools_cannot_reach_the_terminal_toolpool_was_started_from() {
    let injected = "touch /tmp/toolpool-typed-this\n";

    // The control: the same code run straight from this terminal's session
    // does push the line in (where the kernel allows TIOCSTI at all).
    let control = Terminal::open();
    let code = format!(
        "import sys; sys.path.insert(0, {:?}); import escapes; print(escapes.reach_the_terminal({:?}, {:?}))",
        escapes().display().to_string(),
        injected,
        control.path(),
    );
    let direct = control.run(std::process::Command::new("python3").args(["-c", &code]));
    let typed = control.pending_input();
    if direct.stdout.contains("/dev/tty: TIOCSTI pushed") {
        assert!(typed.contains(injected.trim_end()), "{typed:?}");
    } else {
        eprintln!("note: this kernel refuses TIOCSTI even on the controlling terminal");
    }

    let mut modes = vec!["plain"];
    if !kernel_cannot_sandbox() {
        modes.push("--sandbox");
    }
    for mode in modes {
        let terminal = Terminal::open();
        let args = json!({ "command": injected, "terminal": terminal.path() }).to_string();
        let session = tempfile::tempdir().unwrap();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolpool"));
        if mode == "--sandbox" {
            command.arg("--sandbox");
        }
        command
            .arg("--functions-dir")
            .arg(escapes())
            .arg("--session-dir")
            .arg(session.path())
            .args(["call", "reach_the_terminal", "--args", &args]);
        let ran = terminal.run(&mut command);
        assert_eq!(ran.code, 0, "{mode}: {}\n{}", ran.stdout, ran.stderr);
        let report = ran.stdout;
        for line in report.lines() {
            assert!(
                !line.contains("pushed") && !line.contains("took it"),
                "{mode}: a tool reached the terminal: {line}\n{report}"
            );
        }
        // No controlling terminal: ENXIO; under the sandbox, no such file.
        let no_tty = if mode == "--sandbox" { 2 } else { libc::ENXIO };
        assert!(
            report.contains(&format!("/dev/tty: open errno {no_tty}")),
            "{mode}:\n{report}"
        );
        assert_eq!(terminal.pending_input(), "", "{mode}: typed into the shell");
    }
}
