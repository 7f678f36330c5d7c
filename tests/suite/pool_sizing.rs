//! `--min-workers` and `--worker-idle`: a pool whose workers sit idle
//! shrinks to its minimum, and grows back to `--workers` when calls wait,
//! watched through `pool.stats()`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::*;

/// Waits until `check` holds of the pool's stats, at most `limit`.
async fn stats_reach(
    pool: &toolpool::Pool,
    limit: Duration,
    check: impl Fn(&toolpool::stats::PoolStats) -> bool,
) -> toolpool::stats::PoolStats {
    let until = Instant::now() + limit;
    loop {
        let stats = pool.stats();
        if check(&stats) || Instant::now() > until {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `n` calls at once, each holding its worker `seconds`: the pids they ran on.
async fn at_once(pool: &toolpool::Pool, n: usize, seconds: f64) -> BTreeSet<i32> {
    let calls: Vec<_> = (0..n)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let report = pool
                    .invoke_report("sleep", json!({"seconds": seconds}), Default::default())
                    .await;
                assert!(report.result.is_ok(), "{:?}", report.result);
                report.worker_pid.expect("ran on a worker")
            })
        })
        .collect();
    let mut pids = BTreeSet::new();
    for call in calls {
        pids.insert(call.await.unwrap());
    }
    pids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_pool_shrinks_to_its_minimum_and_grows_back_when_calls_wait() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 3)
        .spare_workers(0)
        .min_workers(1)
        .worker_idle(Some(Duration::from_millis(300)))
        .build()
        .await
        .unwrap();
    // Idle past 300 ms from the start: two go, one stays.
    let stats = stats_reach(&pool, Duration::from_secs(10), |s| s.retired_idle == 2).await;
    assert_eq!(
        (stats.live_workers, stats.target_workers, stats.retired_idle),
        (1, 1, 2),
        "{stats:?}"
    );
    // Not below the minimum, however long it waits.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(pool.stats().live_workers, 1);
    // Three calls at once: two workers start back, and all three run
    // together (one worker would take 3 × 1 s).
    let started = Instant::now();
    let pids = at_once(&pool, 3, 1.0).await;
    assert_eq!(pids.len(), 3, "ran on {pids:?}");
    assert!(
        started.elapsed() < Duration::from_millis(2900),
        "{:?}",
        started.elapsed()
    );
    let stats = pool.stats();
    assert_eq!(
        (stats.target_workers, stats.live_workers),
        (3, 3),
        "{stats:?}"
    );
    // And idle again, it shrinks again.
    let stats = stats_reach(&pool, Duration::from_secs(10), |s| s.retired_idle == 4).await;
    assert_eq!(
        (stats.live_workers, stats.target_workers),
        (1, 1),
        "{stats:?}"
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn without_worker_idle_a_pool_keeps_its_size() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 2)
        .spare_workers(0)
        .min_workers(1)
        .build()
        .await
        .unwrap();
    assert_eq!(at_once(&pool, 2, 0.1).await.len(), 2);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let stats = pool.stats();
    assert_eq!(
        (stats.live_workers, stats.retired_idle),
        (2, 0),
        "{stats:?}"
    );
    pool.shutdown().await;
}

#[test]
fn a_minimum_over_the_pool_size_is_a_usage_error() {
    let session = tempfile::tempdir().unwrap();
    let run = run(toolpool_command(session.path()).args([
        "--workers",
        "2",
        "--min-workers",
        "3",
        "call",
        "add",
        "--args",
        "{\"a\": 1, \"b\": 2}",
    ]));
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("--min-workers 3 is more than --workers 2"),
        "{}",
        run.stderr
    );
}
