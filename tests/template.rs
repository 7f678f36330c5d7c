//! Workers cloned from the template (docs/protocol.md "The template"): one
//! interpreter per pool is exec'd; each guardian is cloned from it as the
//! supervisor's own child, and a template that is killed or cannot start
//! costs nothing but speed.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::json;
use toolpool::{InvokeOptions, Pool, ToolError};

use common::{builder, call, descendants, describe_pids, parent_of};

/// The command line of `pid`, arguments joined by spaces.
fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default()
}

/// The templates of the pool whose session is `session`: children of this
/// process with the template's command line and no child (the guardians
/// cloned from it have that command line too, and their worker), working
/// in that session (the tests of this file run side by side, each pool in a
/// session of its own).
fn templates(session: &tempfile::TempDir) -> Vec<i32> {
    let me = std::process::id() as i32;
    let session = session.path().canonicalize().unwrap();
    descendants(me)
        .into_iter()
        .filter(|p| {
            parent_of(*p) == Some(me)
                && cmdline(*p).contains("toolpool_boot.py --template")
                && descendants(*p).is_empty()
                && std::fs::read_link(format!("/proc/{p}/cwd"))
                    .is_ok_and(|cwd| cwd.starts_with(&session))
        })
        .collect()
}

/// The guardian of the worker that answers the next call.
async fn guardian_of_next_call(pool: &Pool) -> i32 {
    let report = pool
        .invoke_report("getpid", json!({}), InvokeOptions::default())
        .await;
    let worker = report.worker_pid.expect("the worker's pid");
    parent_of(worker).expect("the worker has a parent")
}

fn skip_when_sandboxed() -> bool {
    // Sandboxed workers are always spawned (each enters namespaces of its own).
    if common::sandboxed_by_env() {
        eprintln!("skipped: sandboxed workers are not cloned from a template");
        return true;
    }
    false
}

#[tokio::test]
async fn workers_are_cloned_from_one_template_as_children_of_the_supervisor() {
    if skip_when_sandboxed() {
        return;
    }
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 3).build().await.expect("pool starts");
    let me = std::process::id() as i32;
    let templates = templates(&session);
    assert_eq!(
        templates.len(),
        1,
        "one template: {}",
        describe_pids(&templates)
    );
    for _ in 0..3 {
        let guardian = guardian_of_next_call(&pool).await;
        assert_eq!(
            parent_of(guardian),
            Some(me),
            "the guardian is the supervisor's child"
        );
        // Cloned, not exec'd: it has the template's command line.
        assert!(
            cmdline(guardian).contains("--template"),
            "guardian {guardian} was spawned: {}",
            cmdline(guardian)
        );
    }
    assert_eq!(
        call(&pool, "add", json!({"a": 2, "b": 3})).await.unwrap(),
        json!(5)
    );
    pool.shutdown().await;
    assert!(
        common::survivors_after(&templates, Duration::from_secs(3))
            .await
            .is_empty(),
        "the template outlived its pool"
    );
}

#[tokio::test]
async fn a_timed_out_cloned_worker_is_replaced_and_its_exit_is_read_from_the_kernel() {
    if skip_when_sandboxed() {
        return;
    }
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1).build().await.expect("pool starts");
    let options = InvokeOptions {
        timeout: Some(Duration::from_millis(300)),
        ..InvokeOptions::default()
    };
    let slept = pool.invoke("sleep", json!({"seconds": 30}), options).await;
    assert!(
        slept.as_ref().is_err_and(ToolError::is_timeout),
        "got {slept:?}"
    );
    assert_eq!(
        call(&pool, "add", json!({"a": 1, "b": 1})).await.unwrap(),
        json!(2)
    );
    let stats = pool.stats();
    assert_eq!(stats.timeouts, 1);
    assert_eq!(stats.terminations.get("timed_out"), Some(&1), "{stats:?}");
    pool.shutdown().await;
}

#[tokio::test]
async fn a_killed_template_is_started_again_and_calls_go_on() {
    if skip_when_sandboxed() {
        return;
    }
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1)
        .max_calls_per_worker(Some(1))
        .build()
        .await
        .expect("pool starts");
    let first = templates(&session);
    assert_eq!(first.len(), 1);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // Each call retires its worker: the next ones need new workers.
    for n in 0..3 {
        assert_eq!(
            call(&pool, "add", json!({"a": n, "b": 1})).await.unwrap(),
            json!(n + 1)
        );
    }
    let guardian = guardian_of_next_call(&pool).await;
    assert!(
        cmdline(guardian).contains("--template"),
        "{}",
        cmdline(guardian)
    );
    let now = templates(&session);
    assert_eq!(now.len(), 1, "{}", describe_pids(&now));
    assert_ne!(now, first, "a new template was started");
    pool.shutdown().await;
}

#[tokio::test]
async fn workers_of_one_template_do_not_share_random_state() {
    if skip_when_sandboxed() {
        return;
    }
    let tools = tempfile::tempdir().unwrap();
    std::fs::write(
        tools.path().join("dice.py"),
        "import random\n\ndef roll() -> float:\n    \"\"\"A random number.\"\"\"\n    return random.random()\n",
    )
    .unwrap();
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1)
        .functions_dir(tools.path())
        .max_calls_per_worker(Some(1))
        .build()
        .await
        .expect("pool starts");
    let mut rolls = Vec::new();
    for _ in 0..4 {
        let roll = call(&pool, "roll", json!({})).await.unwrap();
        rolls.push(roll.as_f64().expect("a float").to_bits());
    }
    rolls.sort_unstable();
    rolls.dedup();
    assert_eq!(rolls.len(), 4, "fresh workers rolled the same numbers");
    pool.shutdown().await;
}

/// An interpreter wrapper that refuses to be a template (as a Python
/// without the clone system call's number would).
fn python_without_template(dir: &std::path::Path) -> std::path::PathBuf {
    let wrapper = dir.join("python-no-template");
    std::fs::write(
        &wrapper,
        "#!/bin/sh\n\
         # The pool asks the interpreter for sys.executable: this wrapper is it.\n\
         [ \"$1 $2\" = \"-I -c\" ] && { printf %s \"$0\"; exit 0; }\n\
         for a in \"$@\"; do [ \"$a\" = --template ] && { echo no template here >&2; exit 3; }; done\n\
         exec python3 \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    wrapper
}

#[tokio::test]
async fn without_a_template_workers_are_spawned_and_serve() {
    if skip_when_sandboxed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let python = python_without_template(dir.path());
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 2)
        .python(python.to_str().unwrap())
        .build()
        .await
        .expect("pool starts without its template");
    let guardian = guardian_of_next_call(&pool).await;
    assert!(
        cmdline(guardian).contains("functions_dir"),
        "the guardian was spawned with its config: {}",
        cmdline(guardian)
    );
    assert!(templates(&session).is_empty());
    assert_eq!(
        call(&pool, "add", json!({"a": 2, "b": 2})).await.unwrap(),
        json!(4)
    );
    pool.shutdown().await;

    // And turned off, none is started.
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1)
        .fork_template(false)
        .build()
        .await
        .expect("pool starts");
    assert!(
        templates(&session).is_empty(),
        "{}",
        describe_pids(&templates(&session))
    );
    let guardian = guardian_of_next_call(&pool).await;
    assert!(
        cmdline(guardian).contains("functions_dir"),
        "{}",
        cmdline(guardian)
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn a_cloned_worker_has_the_modules_a_spawned_one_has() {
    if skip_when_sandboxed() {
        return;
    }
    // What a tool sees loaded decides paths of the shim (a loaded `array`
    // or `_ctypes` makes every result be checked for buffers): the
    // template's own imports must not show.
    let tools = tempfile::tempdir().unwrap();
    std::fs::write(
        tools.path().join("loaded.py"),
        "import sys\n\ndef modules() -> list:\n    \"\"\"The modules loaded.\"\"\"\n    return sorted(sys.modules)\n",
    )
    .unwrap();
    let mut seen = Vec::new();
    for template in [true, false] {
        let session = tempfile::tempdir().unwrap();
        let pool = builder(&session, 1)
            .functions_dir(tools.path())
            .fork_template(template)
            .build()
            .await
            .expect("pool starts");
        let modules = call(&pool, "modules", json!({})).await.unwrap();
        let modules: std::collections::BTreeSet<String> =
            serde_json::from_value(modules).expect("a list of names");
        seen.push(modules);
        pool.shutdown().await;
    }
    let only_cloned: Vec<_> = seen[0].difference(&seen[1]).collect();
    let only_spawned: Vec<_> = seen[1].difference(&seen[0]).collect();
    assert!(
        only_cloned.is_empty() && only_spawned.is_empty(),
        "only in the cloned worker: {only_cloned:?}; only in the spawned one: {only_spawned:?}"
    );
}
