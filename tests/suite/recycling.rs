//! `--max-calls-per-worker` recycles a worker after N calls, and
//! `--max-worker-rss` after a call that leaves it over a resident-memory
//! limit.

use crate::common::*;
use serde_json::json;

#[tokio::test]
async fn a_worker_that_grows_past_its_rss_limit_is_retired_after_its_call() {
    let session = tempfile::tempdir().unwrap();
    let pool = toolpool::Pool::builder()
        .functions_dir(
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/leaky"),
        )
        .session_dir(session.path())
        .workers(1)
        .max_worker_rss_mb(Some(100))
        .build()
        .await
        .unwrap();
    let mut pids = Vec::new();
    // About 75 MB after the first call, about 135 MB after the second.
    for _ in 0..3 {
        let pid = call(&pool, "leak", json!({"mb": 60})).await;
        pids.push(pid.expect("the call keeps its answer").as_i64().unwrap());
    }
    assert_eq!(pids[0], pids[1], "under the limit: kept");
    assert_ne!(pids[1], pids[2], "over it after the second call: retired");
    assert!(gone_within(pids[0] as i32, std::time::Duration::from_secs(2)).await);
    let stats = pool.stats();
    assert_eq!(
        (stats.retired_over_rss, stats.recycled),
        (1, 1),
        "{stats:?}"
    );
    let text = toolpool::metrics::render(&stats);
    assert!(
        text.contains("toolpool_retired_over_rss_total 1\n"),
        "{text}"
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn worker_is_replaced_after_its_call_budget() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1)
        .max_calls_per_worker(Some(3))
        .build()
        .await
        .unwrap();
    let mut pids = Vec::new();
    for _ in 0..7 {
        pids.push(
            call(&pool, "getpid", json!({}))
                .await
                .unwrap()
                .as_i64()
                .unwrap(),
        );
    }
    assert_eq!(pids[0], pids[1]);
    assert_eq!(pids[1], pids[2]);
    assert_ne!(pids[2], pids[3], "recycled after 3 calls: {pids:?}");
    assert_eq!(pids[3], pids[5]);
    assert_ne!(pids[5], pids[6]);
    assert!(gone_within(pids[0] as i32, std::time::Duration::from_secs(2)).await);
    assert_eq!(pool.stats().recycled, 2);
    assert_eq!(pool.stats().terminations["retired"], 2);
    pool.shutdown().await;
}

async fn wait_for_spares(pool: &toolpool::Pool, n: usize) {
    for _ in 0..200 {
        if pool.stats().spares == n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("spares never reached {n}: {:?}", pool.stats());
}

#[tokio::test]
async fn warm_spare_takes_a_killed_workers_place_and_is_refilled() {
    let (pool, _session) = pool(1).await;
    wait_for_spares(&pool, 1).await;
    assert_eq!(pool.stats().live_workers, 2, "one worker and one spare");
    let serving = call(&pool, "getpid", json!({}))
        .await
        .unwrap()
        .as_i64()
        .unwrap() as i32;
    let spare: Vec<i32> = pool
        .stats()
        .workers
        .iter()
        .map(|w| w.pid)
        .filter(|&pid| pid != serving)
        .collect();
    assert_eq!(spare.len(), 1, "{:?}", pool.stats().workers);
    let error = call_with_timeout(&pool, "sleep_forever", json!({}), 0.2)
        .await
        .unwrap_err();
    assert!(error.is_timeout());
    // The spare was promoted at once (the next call runs in that very
    // process, not in one started after the kill), and a new spare is being started.
    let next = call(&pool, "getpid", json!({}))
        .await
        .unwrap()
        .as_i64()
        .unwrap() as i32;
    assert_eq!(
        next, spare[0],
        "the call after the kill ran in a cold-started worker"
    );
    assert!(gone_within(serving, std::time::Duration::from_secs(2)).await);
    assert_serves(&pool).await;
    wait_for_spares(&pool, 1).await;
    assert_eq!(pool.stats().live_workers, 2);
    pool.shutdown().await;
    assert_eq!(
        pool.stats().live_workers,
        0,
        "spares are retired at shutdown"
    );
}

#[tokio::test]
async fn pool_without_spares_starts_a_replacement() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1).spare_workers(0).build().await.unwrap();
    let error = call_with_timeout(&pool, "sleep_forever", json!({}), 0.2)
        .await
        .unwrap_err();
    assert!(error.is_timeout());
    assert_serves(&pool).await;
    assert_eq!(pool.stats().spares, 0);
    assert_eq!(pool.stats().live_workers, 1);
    pool.shutdown().await;
}
