//! `--max-calls-per-worker` recycles a worker after N calls.

mod common;

use common::*;
use serde_json::json;

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
    pool.shutdown().await;
}
