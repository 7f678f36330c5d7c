//! A pool that cannot start says why — the missing interpreter, the missing
//! functions directory, the worker's own stderr — and a pool whose workers
//! stop being able to start fails calls at once and backs off its restarts
//! instead of looping.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::json;
use toolpool::{ErrorKind, Pool, PoolError};

fn builder_on(functions: &Path, session: &Path) -> toolpool::PoolBuilder {
    Pool::builder()
        .functions_dir(functions)
        .session_dir(session)
        .workers(1)
        .timeout(Duration::from_secs(10))
}

async fn start_error(builder: toolpool::PoolBuilder) -> PoolError {
    match builder.build().await {
        Ok(_) => panic!("the pool must not start"),
        Err(e) => e,
    }
}

#[tokio::test]
async fn missing_interpreter_is_named_in_the_error() {
    let session = tempfile::tempdir().unwrap();
    let error =
        start_error(builder_on(&fixtures(), session.path()).python("/nonexistent/bin/python3"))
            .await;
    let text = error.to_string();
    assert!(matches!(error, PoolError::Interpreter { .. }), "{text}");
    assert!(
        text.contains("'/nonexistent/bin/python3' cannot be run"),
        "{text}"
    );
    assert!(text.contains("No such file or directory"), "{text}");
}

#[tokio::test]
async fn functions_directory_that_does_not_exist_is_named_in_the_error() {
    let session = tempfile::tempdir().unwrap();
    let missing = session.path().join("no-such-functions");
    let error = start_error(builder_on(&missing, session.path())).await;
    assert_eq!(
        error.to_string(),
        format!(
            "functions directory {} does not exist or is not a directory",
            missing.display()
        )
    );
}

#[tokio::test]
async fn module_exiting_at_import_is_a_catalog_error_with_its_stderr_and_the_rest_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let functions = dir.path().join("functions");
    std::fs::create_dir(&functions).unwrap();
    std::fs::write(
        functions.join("licensed.py"),
        "import os, sys\n\
         sys.stderr.write('licensed: no licence server reachable\\n')\n\
         sys.stderr.flush()\n\
         os._exit(4)\n",
    )
    .unwrap();
    std::fs::write(
        functions.join("plain.py"),
        "def ping() -> str:\n    return 'pong'\n",
    )
    .unwrap();
    let started = Instant::now();
    let pool = builder_on(&functions, &dir.path().join("session"))
        .build()
        .await
        .expect("the other modules are served");
    let catalog = pool.catalog();
    let error = catalog
        .errors
        .iter()
        .find(|e| e.module == "licensed")
        .expect("the module is named in errors");
    assert!(
        error
            .error
            .starts_with("ImportHazard: importing licensed.py made the worker end: it exited with code 4; its stderr:"),
        "{}",
        error.error
    );
    assert!(
        error
            .error
            .contains("licensed: no licence server reachable"),
        "{}",
        error.error
    );
    assert_eq!(call(&pool, "ping", json!({})).await.unwrap(), json!("pong"));
    assert!(started.elapsed() < Duration::from_secs(10));
    pool.shutdown().await;
}

#[test]
fn broken_shim_is_reported_with_the_workers_stderr() {
    let session = tempfile::tempdir().unwrap();
    // An interpreter that breaks the shim it is asked to boot, then runs it
    // (it names itself when asked for sys.executable).
    let dir = tempfile::tempdir().unwrap();
    let python = dir.path().join("python-breaking-the-shim");
    std::fs::write(
        &python,
        "#!/bin/sh\n\
         if [ \"$2\" = -c ]; then printf '%s' \"$0\"; exit 0; fi\n\
         for arg in \"$@\"; do case \"$arg\" in *toolpool_boot.py)\n\
         printf 'def main(config:\\n    this is not python\\n' > \"$(dirname \"$arg\")/toolpool_shim/worker.py\";;\n\
         esac; done\n\
         exec python3 \"$@\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let add = ["call", "add", "--args", r#"{"a": 1, "b": 2}"#];
    let broken = run(toolpool_command(session.path())
        .arg("--python")
        .arg(&python)
        .args(add));
    assert_eq!(broken.code, 1, "{}", broken.stderr);
    assert!(
        broken.stderr.contains(
            "worker could not start: the worker exited with code 1 during startup; its stderr:"
        ),
        "{}",
        broken.stderr
    );
    assert!(broken.stderr.contains("SyntaxError"), "{}", broken.stderr);
    assert!(broken.elapsed < Duration::from_secs(20));
    // The next run installs its own shim: nothing broken is kept.
    let ok = run(toolpool_command(session.path()).args(add));
    assert_eq!(ok.code, 0, "{}", ok.stderr);
}

/// A module that imports fine until `broken.flag` appears beside it, and
/// logs every import to `starts.log`.
fn fragile_functions(dir: &Path) -> std::path::PathBuf {
    let functions = dir.join("functions");
    std::fs::create_dir(&functions).unwrap();
    std::fs::write(
        functions.join("fragile.py"),
        r#"import os, sys

_HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_HERE, "starts.log"), "a") as _log:
    _log.write(f"{os.getpid()}\n")
if os.path.exists(os.path.join(_HERE, "broken.flag")):
    sys.stderr.write("fragile: refusing to start: broken.flag is present\n")
    sys.stderr.flush()
    os._exit(4)

def crash() -> None:
    """Kill the worker."""
    os._exit(3)

def ping() -> str:
    """Answer pong."""
    return "pong"
"#,
    )
    .unwrap();
    functions
}

fn starts(functions: &Path) -> usize {
    std::fs::read_to_string(functions.join("starts.log"))
        .map(|log| log.lines().count())
        .unwrap_or(0)
}

#[tokio::test]
async fn calls_fail_fast_and_restarts_back_off_when_no_worker_can_start() {
    let dir = tempfile::tempdir().unwrap();
    let functions = fragile_functions(dir.path());
    let pool = builder_on(&functions, &dir.path().join("session"))
        .build()
        .await
        .unwrap();
    assert_eq!(call(&pool, "ping", json!({})).await.unwrap(), json!("pong"));
    std::fs::write(functions.join("broken.flag"), "").unwrap();

    // Crash workers until none can replace them (a warm spare may take the
    // first crash); no call may hang meanwhile.
    let mut fast_failure = None;
    for _ in 0..6 {
        let started = Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(10), call(&pool, "crash", json!({})))
            .await
            .expect("a call never hangs on a pool that cannot start workers");
        let error = result.unwrap_err();
        assert_eq!(error.kind, ErrorKind::WorkerDied, "{error}");
        if error.message.contains("none can start") {
            fast_failure = Some((error, started.elapsed()));
            break;
        }
    }
    let (error, _) = fast_failure.expect("calls fail fast once no worker can start");
    let text = error.to_string();
    assert!(
        text.contains("no worker is running and none can start: importing fragile.py made the worker end: it exited with code 4; its stderr:"),
        "{text}"
    );
    assert!(text.contains("fragile: refusing to start"), "{text}");
    // Now every call fails at once.
    let started = Instant::now();
    let error = call(&pool, "ping", json!({})).await.unwrap_err();
    assert!(error.message.contains("none can start"), "{error}");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );

    // Restarts back off exponentially: a handful of attempts in 3 s, not hundreds.
    let before = starts(&functions);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let attempts = starts(&functions) - before;
    assert!(attempts <= 8, "{attempts} start attempts in 3 s");

    // Once the cause is gone the pool recovers by itself.
    std::fs::remove_file(functions.join("broken.flag")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(25);
    loop {
        match call(&pool, "ping", json!({})).await {
            Ok(pong) => {
                assert_eq!(pong, json!("pong"));
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "the pool did not recover: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pool.shutdown().await;
}
