//! `kill -9` of the supervisor leaves nothing behind: within 2 s every
//! guardian, worker and grandchild is gone — also when the running tool
//! ignores SIGTERM, holds the worker busy in a loop, or started a process in a
//! session of its own.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::common::*;
use serde_json::json;

/// Starts `toolpool [global] call TOOL --args ARGS` in the background.
fn start_call(session: &Path, global: &[&str], tool: &str, args: serde_json::Value) -> Child {
    toolpool_command(session)
        .args(global)
        .args(["call", tool, "--args", &args.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("toolpool starts")
}

/// Waits until the supervisor has at least `processes` descendants.
async fn wait_for_tree(supervisor: i32, processes: usize) -> Vec<i32> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let tree = descendants(supervisor);
        if tree.len() >= processes {
            return tree;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the supervisor started only {}",
            describe_pids(&tree)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SIGKILLs the supervisor and asserts that all of `tree` is gone within 2 s.
async fn kill_9_and_assert_no_orphans(mut supervisor: Child, tree: Vec<i32>) {
    let pid = supervisor.id() as i32;
    let tree = {
        // Whatever else started meanwhile counts too.
        let mut now = descendants(pid);
        now.extend(tree);
        now.sort_unstable();
        now.dedup();
        now
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    supervisor.wait().unwrap();
    let left = survivors_after(&tree, Duration::from_secs(2)).await;
    assert!(
        left.is_empty(),
        "left behind by kill -9 of the supervisor: {}",
        describe_pids(&left)
    );
}

fn ignores_sigterm(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let mask = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
            u64::from_str_radix(mask.trim(), 16).ok()
        })
        .is_some_and(|mask| mask & (1 << (libc::SIGTERM - 1)) != 0)
}

#[tokio::test]
async fn kill_9_of_the_supervisor_kills_worker_and_grandchild() {
    let session = tempfile::tempdir().unwrap();
    let pid_file = session.path().join("grandchild.pid");
    let supervisor = start_call(
        session.path(),
        &[],
        "spawn_grandchild",
        json!({ "pid_file": pid_file }),
    );
    let grandchild = wait_for_pid_file(&pid_file, Duration::from_secs(20)).await;
    let mut tree = wait_for_tree(supervisor.id() as i32, 3).await;
    assert!(tree.contains(&grandchild), "{}", describe_pids(&tree));
    tree.push(grandchild);
    kill_9_and_assert_no_orphans(supervisor, tree).await;
}

#[tokio::test]
async fn kill_9_of_the_supervisor_kills_a_grandchild_in_its_own_session() {
    let session = tempfile::tempdir().unwrap();
    let pid_file = session.path().join("escaped.pid");
    let supervisor = start_call(
        session.path(),
        &[],
        "spawn_escaped_grandchild",
        json!({ "pid_file": pid_file }),
    );
    let escaped = wait_for_pid_file(&pid_file, Duration::from_secs(20)).await;
    let mut tree = wait_for_tree(supervisor.id() as i32, 3).await;
    tree.push(escaped);
    kill_9_and_assert_no_orphans(supervisor, tree).await;
}

#[tokio::test]
async fn kill_9_of_the_supervisor_kills_a_tool_that_ignores_sigterm() {
    let session = tempfile::tempdir().unwrap();
    let supervisor = start_call(session.path(), &[], "ignore_sigterm_and_sleep", json!({}));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    // Until the tool runs: a process of the tree ignores SIGTERM.
    let tree = loop {
        let tree = wait_for_tree(supervisor.id() as i32, 2).await;
        if tree.iter().any(|pid| ignores_sigterm(*pid)) {
            break tree;
        }
        assert!(std::time::Instant::now() < deadline, "the tool never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    kill_9_and_assert_no_orphans(supervisor, tree).await;
}

#[tokio::test]
async fn kill_9_of_the_supervisor_kills_a_busy_looping_tool_and_idle_workers() {
    let session = tempfile::tempdir().unwrap();
    let supervisor = start_call(session.path(), &["--workers", "3"], "busy_loop", json!({}));
    // Three guardians and their workers.
    let tree = wait_for_tree(supervisor.id() as i32, 6).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    kill_9_and_assert_no_orphans(supervisor, tree).await;
}
