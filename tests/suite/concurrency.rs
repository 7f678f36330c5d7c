//! One call per worker at a time; N calls on N workers run side by side.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::json;

#[tokio::test]
async fn n_sleeping_calls_on_n_workers_take_about_one_call() {
    let (pool, _session) = pool(4).await;
    let started = Instant::now();
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { call(&pool, "sleep", json!({"seconds": 1.0})).await })
        })
        .collect();
    let mut pids = std::collections::HashSet::new();
    for c in calls {
        assert!(c.await.unwrap().is_ok());
    }
    let elapsed = started.elapsed();
    // Serially they would take 4 s; in parallel about 1 s (generous bound for a busy machine).
    assert!(elapsed < Duration::from_millis(2500), "took {elapsed:?}");
    for _ in 0..8 {
        pids.insert(call(&pool, "getpid", json!({})).await.unwrap());
    }
    // Idle workers are taken in turn: eight serial calls meet all four.
    assert_eq!(pids.len(), 4, "{pids:?}");
    pool.shutdown().await;
}

#[tokio::test]
async fn every_call_gets_its_own_answer_under_load() {
    let (pool, _session) = pool(2).await;
    let calls: Vec<_> = (0..200)
        .map(|i| {
            let pool = pool.clone();
            tokio::spawn(async move { (i, call(&pool, "echo", json!({"value": i})).await) })
        })
        .collect();
    for c in calls {
        let (i, result) = c.await.unwrap();
        assert_eq!(result.unwrap(), json!(i));
    }
    assert_eq!(pool.stats().calls, 200);
    pool.shutdown().await;
}

#[tokio::test]
async fn queue_wait_limit_gives_pool_busy() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1)
        .queue_wait(Some(Duration::from_millis(200)))
        .build()
        .await
        .unwrap();
    let busy = {
        let pool = pool.clone();
        tokio::spawn(async move { call(&pool, "sleep", json!({"seconds": 1.0})).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let error = call(&pool, "echo", json!({"value": 1})).await.unwrap_err();
    assert_eq!(error.kind, toolpool::ErrorKind::PoolBusy, "{error}");
    assert!(
        error.message.contains("0.2"),
        "says how long it waited: {error}"
    );
    assert!(busy.await.unwrap().is_ok());
    pool.shutdown().await;
}

#[tokio::test]
async fn abandoned_call_kills_its_worker_and_the_pool_recovers() {
    let (pool, _session) = pool(1).await;
    let pid = worker_pid(&pool).await;
    let abandoned = tokio::time::timeout(
        Duration::from_millis(200),
        call(&pool, "sleep_forever", json!({})),
    )
    .await;
    assert!(abandoned.is_err());
    assert!(
        gone_within(pid, Duration::from_secs(2)).await,
        "worker of the abandoned call survived"
    );
    assert_serves(&pool).await;
    let stats = pool.stats();
    assert_eq!(stats.cancelled, 1);
    assert_eq!(stats.terminations["cancelled"], 1, "{stats:?}");
    assert_eq!(
        (stats.busy, stats.queued),
        (0, 0),
        "abandoned calls are not counted: {stats:?}"
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn abandoned_queued_call_leaves_no_trace_in_the_stats() {
    let (pool, _session) = pool(1).await;
    let busy = {
        let pool = pool.clone();
        tokio::spawn(async move { call(&pool, "sleep", json!({"seconds": 0.5})).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued = tokio::time::timeout(
        Duration::from_millis(100),
        call(&pool, "echo", json!({"value": 1})),
    )
    .await;
    assert!(queued.is_err(), "the second call was still queued");
    assert!(busy.await.unwrap().is_ok());
    let stats = pool.stats();
    assert_eq!((stats.busy, stats.queued), (0, 0), "{stats:?}");
    assert_serves(&pool).await;
    pool.shutdown().await;
}
