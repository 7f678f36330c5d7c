//! Workers cloned from the template (docs/protocol.md "The template"): one
//! interpreter per pool (per session, sandboxed) is exec'd; each guardian is
//! cloned from it as the supervisor's own child, a sandboxed worker makes
//! namespaces, a cgroup and a `/tmp` of its own, and a template that is
//! killed or cannot start costs nothing but speed.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::json;
use toolpool::stats::StartMethod;
use toolpool::{InvokeOptions, Pool, ToolError};

use crate::common::{builder, call, descendants, describe_pids, parent_of};

/// The command line of `pid`, arguments joined by spaces.
fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default()
}

/// The templates of the pool whose session is `session`: children of this
/// process with the template's command line, no child and its socket on fd
/// 3 (the guardians cloned from it have that command line too, and their
/// worker and their dump pipe), working
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
                // Its channel; a guardian just cloned has its dump pipe there.
                && std::fs::read_link(format!("/proc/{p}/fd/3"))
                    .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
                && std::fs::read_link(format!("/proc/{p}/cwd"))
                    .is_ok_and(|cwd| cwd.starts_with(&session))
        })
        .collect()
}

/// A pool of one worker that each call retires (so the next call needs a new
/// worker, cloned from the template), and its one template.
async fn pool_with_one_template() -> (tempfile::TempDir, Pool, Vec<i32>) {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1)
        .max_calls_per_worker(Some(1))
        .spare_workers(0)
        .build()
        .await
        .expect("pool starts");
    let first = templates(&session);
    assert_eq!(first.len(), 1);
    (session, pool, first)
}

/// The guardian of the worker that answers the next call.
async fn guardian_of_next_call(pool: &Pool) -> i32 {
    let report = pool
        .invoke_report("getpid", json!({}), InvokeOptions::default())
        .await;
    let worker = report.worker_pid.expect("the worker's pid");
    parent_of(worker).expect("the worker has a parent")
}

/// The tests below look at plain workers (`scripts/test-sandboxed` runs
/// every test sandboxed; the sandboxed template has a test of its own).
fn skip_when_sandboxed() -> bool {
    if crate::common::sandboxed_by_env() {
        eprintln!("skipped: a test of unsandboxed workers");
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
    let pool = builder(&session, 3)
        .spare_workers(0)
        .build()
        .await
        .expect("pool starts");
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
    assert_eq!(pool.worker_info().started, StartMethod::Template);
    pool.shutdown().await;
    assert!(
        crate::common::survivors_after(&templates, Duration::from_secs(3))
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
    let (session, pool, first) = pool_with_one_template().await;
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

/// A template someone attached to (ptrace: the way to change what every
/// later worker runs) is not cloned from again: it is killed and a fresh one
/// started, and calls go on.
#[tokio::test]
async fn a_traced_template_is_replaced_not_cloned_from() {
    if skip_when_sandboxed() {
        return;
    }
    let (session, pool, first) = pool_with_one_template().await;
    // SAFETY: PTRACE_SEIZE takes a pid and no pointers.
    let seized = unsafe {
        libc::ptrace(
            libc::PTRACE_SEIZE,
            first[0],
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    assert_eq!(seized, 0, "{}", std::io::Error::last_os_error());
    // Each call retires its worker: the next ones need new workers.
    for n in 0..3 {
        assert_eq!(
            call(&pool, "add", json!({"a": n, "b": 1})).await.unwrap(),
            json!(n + 1)
        );
    }
    let now = templates(&session);
    assert_eq!(now.len(), 1, "{}", describe_pids(&now));
    assert_ne!(now, first, "the traced template was replaced");
    let guardian = guardian_of_next_call(&pool).await;
    assert!(
        cmdline(guardian).contains("--template"),
        "{}",
        cmdline(guardian)
    );
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
    // No spare: its start after the pool's would try the template again
    // while the checks below run (a failed attempt is alive for a moment).
    let pool = builder(&session, 2)
        .python(python.to_str().unwrap())
        .spare_workers(0)
        .build()
        .await
        .expect("pool starts without its template");
    let guardian = guardian_of_next_call(&pool).await;
    assert!(
        cmdline(guardian).contains("functions_dir"),
        "the guardian was spawned with its config: {}",
        cmdline(guardian)
    );
    let attempts = templates(&session);
    assert!(
        crate::common::survivors_after(&attempts, Duration::from_secs(3))
            .await
            .is_empty(),
        "a template runs: {}",
        describe_pids(&attempts)
    );
    assert_eq!(pool.worker_info().started, StartMethod::Spawned);
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

/// The namespace `kind` (`user`, `net`, ...) of process `pid`, as the kernel links it.
fn namespace(pid: i32, kind: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/{kind}"))
        .map(|link| link.display().to_string())
        .unwrap_or_default()
}

/// Whether `toolpool --sandbox doctor` says the process limit is a cgroup's
/// (else `RLIMIT_NPROC`, and sandboxed workers are not cloned).
fn pids_cgroup_per_worker() -> bool {
    let doctor = std::process::Command::new(env!("CARGO_BIN_EXE_toolpool"))
        .args(["--sandbox", "doctor"])
        .output()
        .expect("toolpool runs");
    String::from_utf8_lossy(&doctor.stdout).contains("a pids cgroup per worker")
}

#[tokio::test]
async fn sandboxed_workers_cloned_from_one_template_have_namespaces_cgroups_and_tmp_of_their_own() {
    if crate::common::kernel_cannot_sandbox() {
        return;
    }
    let tools = tempfile::tempdir().unwrap();
    std::fs::write(
        tools.path().join("probe.py"),
        r#"import os
import time

def inspect(name: str) -> dict:
    """Marks /tmp and the workspace, waits for the other calls to, and says what it sees."""
    with open(os.path.join("/tmp", name), "w") as handle:
        handle.write("x")
    with open(name, "w") as handle:
        handle.write("in the workspace")
    time.sleep(1.0)
    kinds = ["user", "net", "ipc", "uts", "mnt", "pid"]
    with open("/proc/self/cgroup") as handle:
        cgroup = handle.read()
    return {
        "marks": sorted(n for n in os.listdir("/tmp") if n.startswith("mark-")),
        "namespaces": [os.readlink(f"/proc/self/ns/{kind}") for kind in kinds],
        "cgroup": cgroup,
    }
"#,
    )
    .unwrap();
    // Under /tmp, as a default session is: the view binds its folders
    // under /tmp, and each worker's own /tmp must hold them too.
    let session = tempfile::tempdir().unwrap();
    let pool = Pool::builder()
        .functions_dir(tools.path())
        .workers(3)
        .spare_workers(0)
        .session_dir(session.path())
        .sandbox(toolpool::SandboxMode::Strict)
        .build()
        .await
        .expect("a sandboxed pool starts");
    let template = templates(&session);
    if template.is_empty() && !pids_cgroup_per_worker() {
        eprintln!("skipped: without a pids cgroup per worker, sandboxed workers are spawned");
        pool.shutdown().await;
        return;
    }
    assert_eq!(
        template.len(),
        1,
        "one template: {}",
        describe_pids(&template)
    );
    // Three calls at once, one per worker, all alive together (a namespace's
    // number may be reused once it is gone).
    let calls = (0..3).map(|n| {
        let pool = pool.clone();
        async move {
            pool.invoke_report(
                "inspect",
                json!({"name": format!("mark-{n}")}),
                InvokeOptions::default(),
            )
            .await
        }
    });
    let reports = futures_util::future::join_all(calls).await;
    let me = std::process::id() as i32;
    let kinds = ["user", "net", "ipc", "uts", "mnt", "pid"];
    let template_ns = kinds.map(|kind| namespace(template[0], kind));
    let template_cgroup = std::fs::read_to_string(format!("/proc/{}/cgroup", template[0])).unwrap();
    let mut seen = Vec::new();
    for (n, report) in reports.into_iter().enumerate() {
        let worker = report.worker_pid.expect("the worker's pid");
        let seen_by_it = report.result.expect("the tool runs");
        // Its /tmp is its own: its mark only, though all three wrote theirs.
        assert_eq!(
            seen_by_it["marks"],
            json!([format!("mark-{n}")]),
            "worker {worker}"
        );
        // What it wrote in the workspace reached the host.
        let written = session
            .path()
            .join("code_workspace")
            .join(format!("mark-{n}"));
        assert_eq!(
            std::fs::read_to_string(&written).unwrap(),
            "in the workspace"
        );
        let guardian = parent_of(worker).expect("a guardian");
        assert_eq!(parent_of(guardian), Some(me));
        assert!(
            cmdline(guardian).contains("--template"),
            "spawned: {}",
            cmdline(guardian)
        );
        let namespaces: Vec<String> =
            serde_json::from_value(seen_by_it["namespaces"].clone()).unwrap();
        for (k, kind) in kinds.iter().enumerate() {
            assert_ne!(
                namespaces[k], template_ns[k],
                "worker {worker} shares the template's {kind} namespace"
            );
        }
        let cgroup = seen_by_it["cgroup"].as_str().unwrap().to_string();
        assert_ne!(
            cgroup, template_cgroup,
            "worker {worker} is in the template's cgroup"
        );
        seen.push((namespaces, cgroup));
    }
    for (i, (namespaces, cgroup)) in seen.iter().enumerate() {
        for (other_namespaces, other_cgroup) in &seen[i + 1..] {
            for (k, kind) in kinds.iter().enumerate() {
                assert_ne!(
                    namespaces[k], other_namespaces[k],
                    "two workers share a {kind} namespace"
                );
            }
            assert_ne!(cgroup, other_cgroup, "two workers share a cgroup");
        }
    }
    pool.shutdown().await;
}

#[test]
fn doctor_says_how_workers_start() {
    if skip_when_sandboxed() {
        return;
    }
    let session = tempfile::tempdir().unwrap();
    let out = crate::common::run(crate::common::toolpool_command(session.path()).arg("doctor"));
    assert!(
        out.stdout
            .contains("worker start: template (each worker cloned from a process"),
        "{}",
        out.stdout
    );
}
