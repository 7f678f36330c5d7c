//! Soak: many calls at 64 in flight on 4 workers, with 1 % timeouts and 1 %
//! crashes mixed in. Every call is answered exactly once, with its own
//! result (or its own failure), and no process is left behind.
//!
//! 2 000 calls by default; `TOOLPOOL_SOAK_CALLS=10000 cargo test --test suite -- soak::`
//! runs the full count.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use serde_json::json;
use tokio::sync::Semaphore;
use toolpool::{ErrorKind, InvokeOptions};

const IN_FLIGHT: usize = 64;
const WORKERS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Echo,
    Timeout,
    Crash,
}

/// A fixed pseudo-random plan: about 1 % timeouts and 1 % crashes.
fn plan(calls: usize) -> Vec<Kind> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..calls)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            match state % 100 {
                0 => Kind::Timeout,
                1 => Kind::Crash,
                _ => Kind::Echo,
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_every_call_answered_once_with_its_own_result() {
    let calls: usize = std::env::var("TOOLPOOL_SOAK_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000);
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, WORKERS)
        .timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let plan = plan(calls);
    let limit = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks = Vec::with_capacity(calls);
    for (i, kind) in plan.iter().copied().enumerate() {
        let permit = limit.clone().acquire_owned().await.unwrap();
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let token = format!("call-{i}");
            let report = match kind {
                Kind::Echo => {
                    pool.invoke_report("echo", json!({"value": token}), InvokeOptions::default())
                        .await
                }
                Kind::Timeout => {
                    let options = InvokeOptions {
                        timeout: Some(Duration::from_millis(300)),
                        ..Default::default()
                    };
                    // Would answer its token after 5 s: a late answer must never surface.
                    pool.invoke_report(
                        "slow_then_answer",
                        json!({"seconds": 5, "token": token}),
                        options,
                    )
                    .await
                }
                Kind::Crash => {
                    pool.invoke_report("exit_3", json!({}), InvokeOptions::default())
                        .await
                }
            };
            drop(permit);
            (i, kind, report)
        }));
    }
    let mut answered = HashSet::new();
    let mut worker_pids = HashSet::new();
    let (mut timeouts, mut crashes) = (0, 0);
    for task in tasks {
        let (i, kind, report) = task.await.expect("no call panics");
        assert!(answered.insert(i), "call {i} answered twice");
        worker_pids.extend(report.worker_pid);
        match (kind, report.result) {
            (Kind::Echo, Ok(value)) => assert_eq!(value, json!(format!("call-{i}"))),
            (Kind::Timeout, Err(e)) if e.kind == ErrorKind::Timeout => timeouts += 1,
            (Kind::Crash, Err(e)) if e.kind == ErrorKind::WorkerDied => {
                assert!(e.message.ends_with("exited with code 3"), "{e}");
                crashes += 1;
            }
            (kind, result) => panic!("call {i} ({kind:?}) got {result:?}"),
        }
    }
    assert_eq!(answered.len(), calls);
    let stats = pool.stats();
    assert_eq!(stats.calls, calls as u64);
    assert_eq!(stats.timeouts, timeouts);
    assert_eq!(stats.worker_deaths, crashes);
    assert!(timeouts > 0 && crashes > 0, "the plan mixes in failures");
    // This pool's processes, taken before it shuts down (other tests' pools
    // run beside it in this process).
    let tree = processes_in_session(&session);
    assert!(!tree.is_empty(), "the pool's processes work in its session");
    pool.shutdown().await;

    let pids: Vec<i32> = worker_pids.into_iter().collect();
    let left = survivors_after(&pids, Duration::from_secs(2)).await;
    assert!(left.is_empty(), "workers left: {}", describe_pids(&left));
    let left = survivors_after(&tree, Duration::from_secs(2)).await;
    assert!(left.is_empty(), "processes left: {}", describe_pids(&left));
    // Every guardian was reaped too: none of them is a zombie child.
    let me = std::process::id() as i32;
    let zombies = || -> Vec<i32> {
        tree.iter()
            .copied()
            .filter(|p| parent_of(*p) == Some(me) && !alive(*p))
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !zombies().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(zombies().is_empty(), "unreaped children: {:?}", zombies());
}
