//! Tool modules that attack the catalog build at import — hang (holding the
//! GIL in C), exit, kill their parent, close every descriptor, raise an
//! exception whose `__str__` raises — each become a catalog `errors` entry
//! naming the module (where it was, for a hang), and every other module is
//! served. A folder that cannot be read is an `errors` entry too.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{json, Value};

fn imports_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile/imports")
}

fn catalog(functions: &std::path::Path, extra: &[&str]) -> (Value, Run) {
    let session = tempfile::tempdir().unwrap();
    let out = run(std::process::Command::new(env!("CARGO_BIN_EXE_toolpool"))
        .arg("--functions-dir")
        .arg(functions)
        .arg("--session-dir")
        .arg(session.path())
        .args(extra)
        .arg("catalog"));
    let value = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
    (value, out)
}

fn error_of<'a>(catalog: &'a Value, module: &str) -> &'a str {
    catalog["errors"]
        .as_array()
        .and_then(|errors| errors.iter().find(|e| e["module"] == module))
        .and_then(|e| e["error"].as_str())
        .unwrap_or_else(|| panic!("no error entry for {module}: {catalog:#}"))
}

#[test]
fn every_import_hazard_is_an_error_naming_its_module_and_the_rest_is_served() {
    let started = Instant::now();
    let (catalog, out) = catalog(&imports_fixture(), &["--import-timeout", "1"]);
    assert_eq!(
        out.code, 0,
        "stdout: {}\nstderr: {}",
        out.stdout, out.stderr
    );
    let names: Vec<&str> = catalog["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    assert!(
        names.contains(&"ping"),
        "the ordinary module is served: {names:?}"
    );

    let bad_str = error_of(&catalog, "a_bad_str");
    assert_eq!(
        bad_str,
        "Unprintable: <its message cannot be shown: __str__ raised RuntimeError>"
    );
    let closes = error_of(&catalog, "b_closes_fds");
    assert!(
        closes.starts_with(
            "ImportHazard: importing b_closes_fds.py made the worker end: it exited with code 0"
        ),
        "{closes}"
    );
    let exits = error_of(&catalog, "c_exits");
    assert!(
        exits.starts_with(
            "ImportHazard: importing c_exits.py made the worker end: it exited with code 3"
        ),
        "{exits}"
    );
    let hangs = error_of(&catalog, "d_hangs");
    assert!(
        hangs.starts_with("ImportHazard: importing d_hangs.py took longer than the import timeout and was stopped; it was at "),
        "{hangs}"
    );
    assert!(
        hangs.contains("d_hangs.py:6 in <module>"),
        "file:line of the hang: {hangs}"
    );
    // Inside a PID namespace of its own the worker cannot reach its
    // guardian; outside one, killing it is a named error.
    if let Some(kills) = catalog["errors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["module"] == "e_kills_parent")
    {
        assert!(
            kills["error"]
                .as_str()
                .unwrap()
                .starts_with("ImportHazard: importing e_kills_parent.py"),
            "{kills}"
        );
    }
    // One import timeout and a few restarts, not the 60 s start timeout.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn the_library_serves_the_rest_too() {
    let session = tempfile::tempdir().unwrap();
    let pool = toolpool::Pool::builder()
        .functions_dir(imports_fixture())
        .session_dir(session.path())
        .workers(2)
        .import_timeout(Some(Duration::from_secs(1)))
        .build()
        .await
        .expect("the pool starts");
    assert_eq!(call(&pool, "ping", json!({})).await.unwrap(), json!("pong"));
    let error = call(&pool, "nothing", json!({})).await.unwrap_err();
    assert!(error.message.contains("c_exits"), "{error}");
    pool.shutdown().await;
}

#[test]
fn an_unreadable_folder_is_an_error_entry() {
    let dir = tempfile::tempdir().unwrap();
    let functions = dir.path().join("functions");
    let locked = functions.join("locked");
    std::fs::create_dir_all(&locked).unwrap();
    std::fs::write(
        locked.join("hidden.py"),
        "def hidden() -> int:\n    return 1\n",
    )
    .unwrap();
    std::fs::write(
        functions.join("open.py"),
        "def visible() -> int:\n    return 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let session = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolpool"));
    command
        .arg("--functions-dir")
        .arg(&functions)
        .arg("--session-dir")
        .arg(session.path())
        .arg("catalog");
    // As root, permissions are not checked: drop the capabilities that skip
    // them (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) from what toolpool and
    // its workers may hold. Without them (not root) the prctl fails harmlessly.
    // SAFETY: prctl with integer arguments, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_CAPBSET_DROP, 1, 0, 0, 0);
            libc::prctl(libc::PR_CAPBSET_DROP, 2, 0, 0, 0);
            Ok(())
        });
    }
    let out = run(&mut command);
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let catalog: Value = serde_json::from_str(&out.stdout).unwrap();
    let error = error_of(&catalog, "locked");
    assert!(
        error.starts_with("PermissionError: cannot read the folder locked: Permission denied"),
        "{error}"
    );
    assert_eq!(catalog["functions"][0]["name"], "visible");
}
