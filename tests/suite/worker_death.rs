//! A tool that kills its worker fails only its own call, with WorkerDied
//! naming the exit code or signal; exceptions that are not errors
//! (SystemExit, KeyboardInterrupt) fail the call but keep the worker.

use crate::common::*;
use serde_json::json;
use toolpool::ErrorKind;

#[tokio::test]
async fn os_exit_fails_its_call_with_the_exit_code() {
    let (pool, _session) = pool(1).await;
    let error = call(&pool, "exit_3", json!({})).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::WorkerDied, "{error}");
    let text = error.to_string();
    assert!(
        text.starts_with("Tool exit_3 error: WorkerDied: the worker (pid "),
        "{text}"
    );
    assert!(
        text.ends_with("running 'exit_3' exited with code 3"),
        "{text}"
    );
    assert_serves(&pool).await;
    let stats = pool.stats();
    assert_eq!(stats.worker_deaths, 1);
    assert_eq!(stats.terminations["exited"], 1, "{stats:?}");
    assert_eq!(stats.kills, 0, "{stats:?}");
    pool.shutdown().await;
}

#[tokio::test]
async fn segfault_fails_its_call_naming_sigsegv() {
    let (pool, _session) = pool(1).await;
    let error = call(&pool, "segfault", json!({})).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::WorkerDied, "{error}");
    assert!(error.message.ends_with("was killed by SIGSEGV"), "{error}");
    assert_serves(&pool).await;
    assert_eq!(pool.stats().terminations["signalled"], 1);
    pool.shutdown().await;
}

#[tokio::test]
async fn sys_exit_is_reported_and_the_worker_survives() {
    let (pool, _session) = pool(1).await;
    let pid = call(&pool, "getpid", json!({})).await.unwrap();
    let error = call(&pool, "sys_exit_0", json!({})).await.unwrap_err();
    assert_eq!(error.to_string(), "Tool sys_exit_0 error: SystemExit: 0");
    assert_eq!(
        call(&pool, "getpid", json!({})).await.unwrap(),
        pid,
        "same worker"
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn keyboard_interrupt_is_reported_and_the_worker_survives() {
    let (pool, _session) = pool(1).await;
    let error = call(&pool, "keyboard_interrupt", json!({}))
        .await
        .unwrap_err();
    assert_eq!(error.kind.type_name(), "KeyboardInterrupt", "{error}");
    assert_serves(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn deep_recursion_is_a_recursion_error() {
    let (pool, _session) = pool(1).await;
    let error = call(&pool, "recurse", json!({})).await.unwrap_err();
    assert_eq!(error.kind.type_name(), "RecursionError", "{error}");
    assert!(error.traceback.is_some());
    assert_serves(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn raised_exception_gives_type_message_and_traceback() {
    let (pool, _session) = pool(1).await;
    let error = call(
        &pool,
        "raise_value_error",
        json!({"message": "bad input: 42"}),
    )
    .await
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "Tool raise_value_error error: ValueError: bad input: 42"
    );
    let traceback = error.traceback.expect("traceback kept");
    assert!(traceback.contains("behave.py"), "{traceback}");
    assert!(
        traceback.contains("ValueError: bad input: 42"),
        "{traceback}"
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn a_dying_tool_fails_only_its_own_call() {
    let (pool, _session) = pool(2).await;
    let slow = {
        let pool = pool.clone();
        tokio::spawn(async move { call(&pool, "slow_then_answer", json!({"seconds": 0.5})).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(call(&pool, "segfault", json!({})).await.is_err());
    assert_eq!(slow.await.unwrap().unwrap(), json!("answered after 0.5 s"));
    pool.shutdown().await;
}

/// Waits up to `limit` for `done` to hold of the pool's stats.
async fn stats_until(
    pool: &toolpool::Pool,
    limit: std::time::Duration,
    done: impl Fn(&toolpool::stats::PoolStats) -> bool,
) -> toolpool::stats::PoolStats {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let stats = pool.stats();
        if done(&stats) || std::time::Instant::now() >= deadline {
            return stats;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_worker_killed_while_idle_is_replaced_before_any_call() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 2)
        .spare_workers(1)
        .build()
        .await
        .expect("pool starts");
    // Every worker up: two idle, one spare.
    let stats = stats_until(&pool, std::time::Duration::from_secs(10), |s| {
        s.live_workers == 3
    })
    .await;
    assert_eq!(stats.live_workers, 3, "{stats:?}");
    let before: Vec<i32> = stats.workers.iter().map(|w| w.pid).collect();
    // Killed from outside (as the kernel's OOM killer would), no call made.
    for pid in &before {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
    }
    let stats = stats_until(&pool, std::time::Duration::from_secs(10), |s| {
        s.terminations["signalled"] == 3
            && s.live_workers == 3
            && s.workers.iter().all(|w| !before.contains(&w.pid))
    })
    .await;
    assert_eq!(stats.terminations["signalled"], 3, "{stats:?}");
    // No call failed: `worker_deaths` counts deaths during a call.
    assert_eq!(stats.worker_deaths, 0, "{stats:?}");
    assert_eq!(stats.live_workers, 3, "three new workers: {stats:?}");
    assert!(
        stats.workers.iter().all(|w| !before.contains(&w.pid)),
        "{before:?} -> {stats:?}"
    );
    assert_eq!(
        stats.spares, 1,
        "the spare was replaced by a spare: {stats:?}"
    );
    // And the calls that come now find live workers, none of them broken.
    for n in 0..4 {
        assert_eq!(
            call(&pool, "add", json!({"a": n, "b": 1})).await.unwrap(),
            json!(n + 1)
        );
    }
    pool.shutdown().await;
}
