//! Shutdown drains: no new calls, calls in flight finish within the grace
//! period, then what is left is killed and every process reaped. The command
//! line does this on SIGTERM and SIGINT.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;
use toolpool::ErrorKind;

#[tokio::test]
async fn shutdown_lets_calls_in_flight_finish_then_refuses_new_ones() {
    let (pool, _session) = pool(2).await;
    let pids: Vec<i32> = {
        let mut pids = std::collections::HashSet::new();
        for _ in 0..10 {
            pids.insert(worker_pid(&pool).await);
        }
        pids.into_iter().collect()
    };
    let in_flight = {
        let pool = pool.clone();
        tokio::spawn(async move {
            call(
                &pool,
                "slow_then_answer",
                json!({"seconds": 0.5, "token": "finished"}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    let started = Instant::now();
    pool.shutdown_with_grace(Duration::from_secs(5)).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(in_flight.await.unwrap().unwrap(), json!("finished"));
    let refused = call(&pool, "add", json!({"a": 1, "b": 2}))
        .await
        .unwrap_err();
    assert_eq!(refused.kind, ErrorKind::PoolClosed, "{refused}");
    // Both workers (and the spare, if it was ready) ended by the shutdown.
    let ended = pool.stats().terminations;
    assert!(ended["shut_down"] >= 2, "{ended:?}");
    assert_eq!(ended.values().sum::<u64>(), ended["shut_down"], "{ended:?}");
    let left = survivors_after(&pids, Duration::from_secs(2)).await;
    assert!(left.is_empty(), "workers left: {}", describe_pids(&left));
}

#[tokio::test]
async fn shutdown_kills_a_call_that_outlasts_the_grace_period() {
    let (pool, _session) = pool(1).await;
    let pid = worker_pid(&pool).await;
    let in_flight = {
        let pool = pool.clone();
        tokio::spawn(async move { call(&pool, "ignore_sigterm_and_sleep", json!({})).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    pool.shutdown_with_grace(Duration::from_millis(300)).await;
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    let error = in_flight.await.unwrap().unwrap_err();
    assert_eq!(error.kind, ErrorKind::PoolClosed, "{error}");
    // Killed by the shutdown: not a kill of a timeout or a cancelled call.
    let stats = pool.stats();
    assert!(stats.terminations["shut_down"] >= 1, "{stats:?}");
    assert_eq!(stats.kills, 0, "{stats:?}");
    assert!(
        gone_within(pid, Duration::from_secs(2)).await,
        "worker {pid} survived"
    );
}

/// Starts `toolpool call TOOL` in the background, stdout captured.
fn start_call(session: &Path, extra: &[&str], tool: &str, args: serde_json::Value) -> Child {
    toolpool_command(session)
        .args(["call", tool, "--args", &args.to_string()])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolpool starts")
}

/// Waits until the supervisor's worker runs (a guardian and its worker).
async fn wait_for_worker(supervisor: i32) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let tree = descendants(supervisor);
        if tree.len() >= 2 {
            return tree;
        }
        assert!(Instant::now() < deadline, "no worker started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn signal_during_a_call_lets_it_finish(signal: Signal) {
    let session = tempfile::tempdir().unwrap();
    let started = session.path().join("started.pid");
    let child = start_call(
        session.path(),
        &[],
        "slow_then_answer",
        json!({"seconds": 1.0, "token": "finished", "started_file": started}),
    );
    let supervisor = child.id() as i32;
    wait_for_pid_file(&started, Duration::from_secs(20)).await;
    let tree = wait_for_worker(supervisor).await;
    kill(Pid::from_raw(supervisor), signal).unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert_eq!(stdout.trim(), "finished", "stderr: {stderr}");
    assert!(stderr.contains(signal.as_str()), "{stderr}");
    let left = survivors_after(&tree, Duration::from_secs(2)).await;
    assert!(left.is_empty(), "left behind: {}", describe_pids(&left));
}

#[tokio::test]
async fn sigterm_of_the_supervisor_lets_the_call_in_flight_finish() {
    signal_during_a_call_lets_it_finish(Signal::SIGTERM).await;
}

#[tokio::test]
async fn sigint_of_the_supervisor_lets_the_call_in_flight_finish() {
    signal_during_a_call_lets_it_finish(Signal::SIGINT).await;
}

#[tokio::test]
async fn sigterm_kills_a_call_that_outlasts_the_grace_period() {
    let session = tempfile::tempdir().unwrap();
    let started = session.path().join("started.pid");
    let child = start_call(
        session.path(),
        &["--grace", "0.5"],
        "slow_then_answer",
        json!({"seconds": 1000, "started_file": started}),
    );
    let supervisor = child.id() as i32;
    wait_for_pid_file(&started, Duration::from_secs(20)).await;
    let tree = wait_for_worker(supervisor).await;
    let started = Instant::now();
    kill(Pid::from_raw(supervisor), Signal::SIGTERM).unwrap();
    let output = child.wait_with_output().unwrap();
    let elapsed = started.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.starts_with("Tool slow_then_answer error: PoolClosed: "),
        "{stdout}"
    );
    assert!(elapsed >= Duration::from_millis(500), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
    let left = survivors_after(&tree, Duration::from_secs(2)).await;
    assert!(left.is_empty(), "left behind: {}", describe_pids(&left));
}

#[tokio::test]
async fn second_signal_kills_the_call_at_once() {
    let session = tempfile::tempdir().unwrap();
    let started = session.path().join("started.pid");
    let child = start_call(
        session.path(),
        &["--grace", "30"],
        "slow_then_answer",
        json!({"seconds": 1000, "started_file": started}),
    );
    let supervisor = child.id() as i32;
    wait_for_pid_file(&started, Duration::from_secs(20)).await;
    let tree = wait_for_worker(supervisor).await;
    let started = Instant::now();
    kill(Pid::from_raw(supervisor), Signal::SIGINT).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    kill(Pid::from_raw(supervisor), Signal::SIGINT).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(output.status.code(), Some(1));
    let left = survivors_after(&tree, Duration::from_secs(2)).await;
    assert!(left.is_empty(), "left behind: {}", describe_pids(&left));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_ends_serve_at_once() {
    let mut served = crate::mcp_support::serve(&["--workers", "3", "serve", "--grace", "30"]).await;
    let tree = descendants(served.pid());
    let mut calls = Vec::new();
    for _ in 0..3 {
        let peer = served.client.peer().clone();
        calls.push(tokio::spawn(async move {
            crate::mcp_support::call(&peer, "slow_then_answer", json!({"seconds": 30})).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let supervisor = Pid::from_raw(served.pid());
    let started = Instant::now();
    kill(supervisor, Signal::SIGTERM).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    kill(supervisor, Signal::SIGTERM).unwrap();
    for call in calls {
        let text = crate::mcp_support::error_text(&call.await.unwrap());
        assert!(text.contains("PoolClosed"), "{text}");
    }
    let status = tokio::time::timeout(Duration::from_secs(20), served.child.wait())
        .await
        .expect("exits")
        .expect("wait");
    assert_eq!(status.code(), Some(0));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a second SIGTERM must not wait out the 30 s grace: {:?}",
        started.elapsed()
    );
    let left = survivors_after(&tree, Duration::from_secs(2)).await;
    assert!(left.is_empty(), "left behind: {}", describe_pids(&left));
}

/// A pool dropped without `shutdown` (a library user's early return, a
/// panic unwinding past it) leaves nothing behind: each worker's actor
/// ends with its handle, killing the worker and reaping its guardian.
#[tokio::test]
async fn a_dropped_pool_kills_and_reaps_every_worker() {
    let (pool, _session) = pool(2).await;
    assert_serves(&pool).await;
    let workers: Vec<i32> = pool.stats().workers.iter().map(|w| w.pid).collect();
    assert!(workers.len() >= 2, "{workers:?}");
    let guardians: Vec<i32> = workers.iter().filter_map(|pid| parent_of(*pid)).collect();
    assert_eq!(
        guardians.len(),
        workers.len(),
        "every worker has its guardian"
    );
    drop(pool);
    let left = survivors_after(&workers, Duration::from_secs(5)).await;
    assert!(
        left.is_empty(),
        "workers outlived their pool: {}",
        describe_pids(&left)
    );
    // Reaped, not only dead: a guardian left a zombie would still be listed.
    let deadline = Instant::now() + Duration::from_secs(5);
    let listed = |pid: &i32| Path::new(&format!("/proc/{pid}")).exists();
    while guardians.iter().any(listed) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let unreaped: Vec<i32> = guardians.iter().copied().filter(listed).collect();
    assert!(
        unreaped.is_empty(),
        "guardians not reaped: {}",
        describe_pids(&unreaped)
    );
}

/// A worker still importing its tools when the pool shuts down (here a
/// spare) is killed by the shutdown, as the pool's own: not left to hang
/// in its import until the program exits and its guardian is orphaned.
#[tokio::test]
async fn shutdown_kills_a_worker_still_starting() {
    let functions = tempfile::tempdir().unwrap();
    let session = tempfile::tempdir().unwrap();
    let first = functions.path().join("first.pid");
    let second = functions.path().join("second.pid");
    // The first worker to import it goes on; the next one (the spare)
    // writes its host pid and hangs in its import.
    std::fs::write(
        functions.path().join("slow_second_start.py"),
        format!(
            r#"import os, time
FIRST, SECOND = {first:?}, {second:?}
try:
    os.close(os.open(FIRST, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
except FileExistsError:
    with open(SECOND + ".tmp", "w") as out:
        out.write(os.readlink("/proc/self"))
    os.rename(SECOND + ".tmp", SECOND)
    time.sleep(60)


def wait_for_the_spare() -> str:
    """Answers once the spare worker hangs in its import."""
    while not os.path.exists(SECOND):
        time.sleep(0.02)
    return "the spare is importing"
"#
        ),
    )
    .unwrap();
    let pool = toolpool::Pool::builder()
        .functions_dir(functions.path())
        .session_dir(session.path())
        .workers(1)
        .spare_workers(1)
        .timeout(Duration::from_secs(30))
        .build()
        .await
        .expect("pool starts");
    let answer = call(&pool, "wait_for_the_spare", json!({})).await.unwrap();
    assert_eq!(answer, json!("the spare is importing"));
    let spare = wait_for_pid_file(&second, Duration::from_secs(1)).await;
    let started = Instant::now();
    pool.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the shutdown waited for the start: {:?}",
        started.elapsed()
    );
    let left = survivors_after(&[spare], Duration::from_secs(2)).await;
    assert!(left.is_empty(), "left starting: {}", describe_pids(&left));
}
