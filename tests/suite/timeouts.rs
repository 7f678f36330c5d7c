//! A call that runs past its timeout has its worker, and everything the
//! worker started, killed; the agent gets a TimeoutError saying where the
//! code was; the pool keeps serving.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::json;
use toolpool::ErrorKind;

async fn assert_times_out(function: &str) {
    let (pool, _session) = pool(1).await;
    let started = Instant::now();
    let error = call_with_timeout(&pool, function, json!({}), 0.5)
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
    let text = error.to_string();
    assert!(text.starts_with(&format!("Tool {function} error: TimeoutError: function '{function}' timed out after 0.5 s; its worker (pid ")), "{text}");
    assert!(text.contains("was killed; it was at "), "{text}");
    assert!(
        text.contains("misbehave.py:"),
        "the text names the tool's file: {text}"
    );
    assert!(
        elapsed >= Duration::from_millis(500),
        "answered before the deadline: {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    assert_serves(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn sleeping_call_is_killed_at_its_timeout() {
    assert_times_out("sleep_forever").await;
}

#[tokio::test]
async fn pure_python_busy_loop_is_killed_at_its_timeout() {
    assert_times_out("busy_loop").await;
}

#[tokio::test]
async fn tool_ignoring_sigterm_is_killed_at_its_timeout() {
    assert_times_out("ignore_sigterm_and_sleep").await;
}

#[tokio::test]
async fn tool_catching_base_exception_is_killed_at_its_timeout() {
    assert_times_out("catch_base_exception").await;
}

#[tokio::test]
async fn timeout_text_names_the_function_frame() {
    let (pool, _session) = pool(1).await;
    let error = call_with_timeout(&pool, "busy_loop", json!({}), 0.3)
        .await
        .unwrap_err();
    assert!(error.message.contains(" in busy_loop"), "{error}");
    pool.shutdown().await;
}

#[tokio::test]
async fn grandchild_dies_with_its_timed_out_worker() {
    let (pool, session) = pool(1).await;
    let pid_file = session.path().join("grandchild.pid");
    let error = call_with_timeout(
        &pool,
        "spawn_grandchild",
        json!({"pid_file": pid_file}),
        1.0,
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .expect("the tool wrote the pid")
        .trim()
        .parse()
        .unwrap();
    assert!(
        gone_within(pid, Duration::from_secs(2)).await,
        "grandchild {pid} survived the kill"
    );
    assert_serves(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn timed_out_worker_process_is_gone_and_replaced() {
    let (pool, _session) = pool(1).await;
    let before: i32 = worker_pid(&pool).await;
    let error = call_with_timeout(&pool, "sleep_forever", json!({}), 0.3)
        .await
        .unwrap_err();
    assert!(
        error.message.contains(&format!("(pid {before})")),
        "{error}"
    );
    assert!(
        gone_within(before, Duration::from_secs(2)).await,
        "worker {before} survived"
    );
    let after: i32 = worker_pid(&pool).await;
    assert_ne!(before, after);
    let stats = pool.stats();
    assert_eq!(stats.timeouts, 1);
    assert_eq!(stats.respawns, 1);
    pool.shutdown().await;
}

#[tokio::test]
async fn timeout_counts_from_dispatch_not_from_queueing() {
    let (pool, _session) = pool(1).await;
    let first = {
        let pool = pool.clone();
        tokio::spawn(async move {
            call_with_timeout(&pool, "sleep", json!({"seconds": 0.8}), 5.0).await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Queued behind the first call for ~0.7 s, then runs for 0.5 s: within its 1 s budget.
    let second = call_with_timeout(&pool, "sleep", json!({"seconds": 0.5}), 1.0).await;
    assert!(second.is_ok(), "{second:?}");
    assert!(first.await.unwrap().is_ok());
    pool.shutdown().await;
}

#[tokio::test]
async fn timed_out_call_never_answers_the_next_call() {
    let (pool, _session) = pool(1).await;
    // Times out just before the tool would have answered.
    let error = call_with_timeout(&pool, "slow_then_answer", json!({"seconds": 0.4}), 0.3)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Timeout);
    for i in 0..5 {
        let echoed = call(&pool, "echo", json!({"value": i})).await.unwrap();
        assert_eq!(echoed, json!(i));
    }
    pool.shutdown().await;
}

#[tokio::test]
async fn grandchild_in_its_own_session_dies_with_its_timed_out_worker() {
    let (pool, session) = pool(1).await;
    let pid_file = session.path().join("escaped.pid");
    let error = call_with_timeout(
        &pool,
        "spawn_escaped_grandchild",
        json!({"pid_file": pid_file}),
        1.0,
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
    let pid = wait_for_pid_file(&pid_file, Duration::from_secs(1)).await;
    assert!(
        gone_within(pid, Duration::from_secs(2)).await,
        "grandchild {pid} (setsid) survived the kill"
    );
    assert_serves(&pool).await;
    pool.shutdown().await;
}
