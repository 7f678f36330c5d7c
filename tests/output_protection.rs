//! Whatever a tool prints never reaches the frame channel.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn megabyte_printed_by_print_does_not_corrupt_the_channel() {
    let (pool, _session) = pool(1).await;
    let result = call(&pool, "print_spam", json!({"megabytes": 1}))
        .await
        .unwrap();
    assert_eq!(result, json!("done"));
    assert_serves(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn megabyte_written_to_fd_1_does_not_corrupt_the_channel() {
    let (pool, _session) = pool(1).await;
    let result = call(&pool, "write_spam", json!({"megabytes": 1}))
        .await
        .unwrap();
    assert_eq!(result, json!("done"));
    assert_serves(&pool).await;
    pool.shutdown().await;
}
