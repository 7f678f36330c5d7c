//! A tool that kills its worker fails only its own call, with WorkerDied
//! naming the exit code or signal; exceptions that are not errors
//! (SystemExit, KeyboardInterrupt) fail the call but keep the worker.

mod common;

use common::*;
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
