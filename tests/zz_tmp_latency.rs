mod common;
use common::*;
use serde_json::json;
use std::time::{Duration, Instant};
#[tokio::test]
async fn latency() {
    let (pool, _s) = pool(1).await;
    let mut v = vec![];
    for _ in 0..20 {
        let t = Instant::now();
        let _ = call_with_timeout(&pool, "sleep_forever", json!({}), 0.2).await;
        v.push(t.elapsed().as_secs_f64() * 1000.0 - 200.0);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("overshoot ms: p50 {:.1} max {:.1} all {:?}", v[10], v[19], v.iter().map(|x| (*x * 10.0).round() / 10.0).collect::<Vec<_>>());
}
