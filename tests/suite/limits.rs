//! Limits: per-worker memory (`--memory-limit`), the frame size on both
//! sides, result nesting; each one fails only its own call, with a clear
//! error, and the pool goes on.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::json;
use toolpool::ErrorKind;

#[tokio::test]
async fn memory_bomb_under_a_memory_limit_fails_its_call_and_the_pool_recovers() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1)
        .memory_limit_mb(Some(400))
        .build()
        .await
        .expect("workers start under a 400 MB limit");
    let started = Instant::now();
    let error = call(&pool, "memory_bomb", json!({"step_megabytes": 32}))
        .await
        .unwrap_err();
    // Python raises MemoryError when an allocation fails; were the worker to
    // die instead, WorkerDied would name the limit.
    match &error.kind {
        ErrorKind::Raised(kind) if kind == "MemoryError" => {
            assert!(error.message.contains("allocation failed after"), "{error}")
        }
        ErrorKind::WorkerDied => assert!(error.message.contains("--memory-limit"), "{error}"),
        _ => panic!("expected MemoryError or WorkerDied, got {error}"),
    }
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_serves(&pool).await;
    pool.shutdown().await;
}

#[test]
fn memory_limit_on_the_command_line_turns_a_memory_bomb_into_an_error() {
    let session = tempfile::tempdir().unwrap();
    let run = run(toolpool_command(session.path()).args([
        "--memory-limit",
        "400",
        "call",
        "memory_bomb",
        "--args",
        r#"{"step_megabytes": 32}"#,
    ]));
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with("Tool memory_bomb error: MemoryError: ")
            || run.stdout.contains("--memory-limit"),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn arguments_over_the_frame_limit_are_refused_before_sending() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1)
        .max_frame(1 << 20)
        .build()
        .await
        .unwrap();
    let pid = call(&pool, "getpid", json!({})).await.unwrap();
    let error = call(&pool, "echo", json!({"value": "x".repeat(2 << 20)}))
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::InvalidArguments, "{error}");
    assert!(
        error
            .message
            .contains("arguments cannot be sent to the worker: frame of"),
        "{error}"
    );
    assert!(
        error.message.contains("over the 1048576-byte limit"),
        "{error}"
    );
    assert_eq!(
        call(&pool, "getpid", json!({})).await.unwrap(),
        pid,
        "same worker"
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn an_argument_larger_than_the_pipe_arrives_whole() {
    // More than a pipe holds (64 KiB): the call writes what the pipe takes
    // and the worker's actor the rest, in order, before the next request.
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1).build().await.unwrap();
    let pid = call(&pool, "getpid", json!({})).await.unwrap();
    let value: String = (0..300_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    for _ in 0..3 {
        let echoed = call(&pool, "echo", json!({"value": value})).await.unwrap();
        assert_eq!(echoed, json!(value));
        assert_eq!(call(&pool, "getpid", json!({})).await.unwrap(), pid);
    }
    pool.shutdown().await;
}

#[tokio::test]
async fn result_over_the_frame_limit_is_a_clear_error_and_the_worker_stays() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1)
        .max_frame(1 << 20)
        .build()
        .await
        .unwrap();
    let pid = call(&pool, "getpid", json!({})).await.unwrap();
    let error = call(&pool, "huge_result", json!({"megabytes": 2}))
        .await
        .unwrap_err();
    assert_eq!(error.kind, toolpool::ErrorKind::ResultTooLarge, "{error}");
    assert!(
        error.message.contains("over the 1.0 MB frame limit"),
        "{error}"
    );
    assert_eq!(
        call(&pool, "getpid", json!({})).await.unwrap(),
        pid,
        "same worker"
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn deeply_nested_result_is_a_clear_error_not_a_dead_worker() {
    let (pool, _session) = pool(1).await;
    let pid = call(&pool, "getpid", json!({})).await.unwrap();
    let fine = call(&pool, "nested_result", json!({"depth": 100}))
        .await
        .unwrap();
    let mut depth = 0;
    let mut value = &fine;
    while let Some(inner) = value.as_array().and_then(|a| a.first()) {
        depth += 1;
        value = inner;
    }
    assert_eq!(depth, 99);
    let error = call(&pool, "nested_result", json!({"depth": 5000}))
        .await
        .unwrap_err();
    assert_eq!(error.kind.type_name(), "ValueError", "{error}");
    assert!(
        error.message.contains("nested deeper than 100 levels"),
        "{error}"
    );
    assert_eq!(
        call(&pool, "getpid", json!({})).await.unwrap(),
        pid,
        "same worker"
    );
    pool.shutdown().await;
}
