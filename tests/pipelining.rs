//! Pipelining: when every worker is busy, the next call's request is written
//! behind a running call, and the worker starts it as soon as that call
//! ends. These tests show what a caller relies on: one call still runs per
//! worker at a time; a queued call's timeout starts when it starts; a queued
//! call moves to a worker that comes free instead of waiting behind a long
//! call; the kill of the call before it never fails it; a queued call whose
//! caller gave up never runs.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use toolpool::{ErrorKind, InvokeOptions, Pool};

fn nap(pool: &Pool, seconds: f64) -> impl std::future::Future<Output = Value> + 'static {
    let pool = pool.clone();
    async move {
        pool.invoke(
            "nap",
            json!({ "seconds": seconds }),
            InvokeOptions::default(),
        )
        .await
        .expect("nap answers")
    }
}

#[tokio::test]
async fn calls_queued_behind_busy_workers_run_there_one_at_a_time() {
    let (pool, _session) = pool(1).await;
    let pid = worker_pid(&pool).await;
    let calls: Vec<_> = (0..20).map(|_| tokio::spawn(nap(&pool, 0.02))).collect();
    for call in calls {
        let answer = call.await.expect("the call's task ends");
        assert_eq!(
            answer["at_once"],
            json!(1),
            "two calls ran at once in one worker"
        );
        assert_eq!(
            answer["pid"],
            json!(pid),
            "every call ran on the one worker"
        );
    }
    let stats = pool.stats();
    assert!(
        stats.pipelined > 0,
        "no call was queued behind a running one: {stats:?}"
    );
    assert_eq!(stats.kills, 0, "{stats:?}");
    pool.shutdown().await;
}

#[tokio::test]
async fn a_queued_calls_timeout_starts_when_it_starts() {
    let (pool, _session) = pool(1).await;
    let first = tokio::spawn(nap(&pool, 1.5));
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Queued behind 1.3 s of the first call; it runs 0.6 s of its 1 s.
    let options = InvokeOptions {
        timeout: Some(Duration::from_secs(1)),
        ..Default::default()
    };
    let queued = pool
        .invoke("nap", json!({"seconds": 0.6}), options)
        .await
        .expect("the queued call gets its whole timeout once it runs");
    assert_eq!(queued["at_once"], json!(1));
    first.await.expect("the first call ends");
    assert_eq!(pool.stats().pipelined, 1, "{:?}", pool.stats());
    pool.shutdown().await;
}

#[tokio::test]
async fn a_queued_call_moves_to_a_worker_that_comes_free() {
    let (pool, _session) = pool(2).await;
    let long = tokio::spawn(nap(&pool, 6.0));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let short = tokio::spawn(nap(&pool, 0.3));
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Both workers busy: queued behind the first busy one, the long call.
    let started = Instant::now();
    let moved = nap(&pool, 0.0).await;
    let waited = started.elapsed();
    let short = short.await.expect("the short call ends");
    assert!(
        waited < Duration::from_secs(3),
        "the queued call waited {waited:?}, behind the long call, while a worker was free"
    );
    assert_eq!(
        moved["pid"], short["pid"],
        "it ran where the short call ran"
    );
    let stats = pool.stats();
    assert_eq!(stats.withdrawn, 1, "{stats:?}");
    assert_eq!(stats.kills, 0, "{stats:?}");
    let long = long.await.expect("the long call ends");
    assert_ne!(long["pid"], moved["pid"]);
    pool.shutdown().await;
}

#[tokio::test]
async fn a_queued_call_survives_the_kill_of_the_call_before_it() {
    let (pool, _session) = pool(1).await;
    let before = worker_pid(&pool).await;
    let doomed = {
        let pool = pool.clone();
        tokio::spawn(
            async move { call_with_timeout(&pool, "sleep", json!({"seconds": 30}), 0.8).await },
        )
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let queued = nap(&pool, 0.0).await;
    let error = doomed
        .await
        .expect("the doomed call ends")
        .expect_err("it times out");
    assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
    assert_ne!(
        queued["pid"],
        json!(before),
        "the queued call ran on the killed worker"
    );
    assert!(gone_within(before, Duration::from_secs(5)).await);
    pool.shutdown().await;
}

#[tokio::test]
async fn a_queued_call_whose_caller_gave_up_never_runs() {
    let (pool, session) = pool(1).await;
    let pid = worker_pid(&pool).await;
    let first = tokio::spawn(nap(&pool, 1.2));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let marker = session.path().join("queued-call-ran");
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        pool.invoke(
            "nap",
            json!({"seconds": 0.0, "marker": marker}),
            InvokeOptions::default(),
        ),
    )
    .await;
    assert!(gave_up.is_err(), "the queued call answered: {gave_up:?}");
    let first = first.await.expect("the first call ends");
    assert_eq!(first["pid"], json!(pid));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!marker.exists(), "the abandoned queued call ran");
    // Taken back unstarted: its worker was not killed, and serves the next call.
    let next = nap(&pool, 0.0).await;
    assert_eq!(next["pid"], json!(pid));
    assert_eq!(pool.stats().kills, 0, "{:?}", pool.stats());
    pool.shutdown().await;
}

#[tokio::test]
async fn a_call_queued_before_one_that_kills_the_worker_gets_its_own_answer() {
    let (pool, _session) = pool(1).await;
    let first = tokio::spawn(nap(&pool, 0.5));
    tokio::time::sleep(Duration::from_millis(150)).await;
    // Both queued behind the first call, in this order.
    let echo = {
        let pool = pool.clone();
        tokio::spawn(async move { call(&pool, "echo", json!({"value": "mine"})).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let crash = {
        let pool = pool.clone();
        tokio::spawn(async move { call(&pool, "exit_3", json!({})).await })
    };
    first.await.expect("the first call ends");
    assert_eq!(
        echo.await
            .expect("the echo ends")
            .expect("the echo answers"),
        json!("mine")
    );
    let error = crash
        .await
        .expect("the crash ends")
        .expect_err("exit_3 kills its worker");
    assert_eq!(error.kind, ErrorKind::WorkerDied, "{error}");
    assert!(error.message.ends_with("exited with code 3"), "{error}");
    assert_serves(&pool).await;
    pool.shutdown().await;
}

/// Makes `calls` calls, `call(pool, i)` the i-th, at most `in_flight` at a
/// time; every call's index and answer, in the order they finished.
async fn stream_calls<F, Fut>(
    pool: &Pool,
    calls: usize,
    in_flight: usize,
    call: F,
) -> Vec<(usize, Result<Value, toolpool::ToolError>)>
where
    F: Fn(Pool, usize) -> Fut,
    Fut: std::future::Future<Output = Result<Value, toolpool::ToolError>> + Send + 'static,
{
    let in_flight = std::sync::Arc::new(tokio::sync::Semaphore::new(in_flight));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..calls {
        let permit = in_flight.clone().acquire_owned().await.unwrap();
        let answer = call(pool.clone(), i);
        tasks.spawn(async move {
            let answer = answer.await;
            drop(permit);
            (i, answer)
        });
    }
    let mut answers = Vec::with_capacity(calls);
    while let Some(done) = tasks.join_next().await {
        answers.push(done.expect("the call's task ends"));
    }
    answers
}

/// Under a steady stream of short calls a worker that comes free goes to a
/// caller waiting in line, not to a call queued behind the other worker:
/// asking that one back would cost a round trip and mostly come too late
/// (it has started). Few or no calls are withdrawn.
#[tokio::test]
async fn short_calls_in_a_stream_are_not_asked_back_from_busy_workers() {
    let (pool, _session) = pool(2).await;
    let calls: u64 = 2000;
    let answers = stream_calls(&pool, calls as usize, 32, |pool, _| async move {
        pool.invoke("add", json!({"a": 1, "b": 2}), InvokeOptions::default())
            .await
    })
    .await;
    for (_, answer) in answers {
        assert_eq!(answer.unwrap(), json!(3));
    }
    let stats = pool.stats();
    assert!(stats.pipelined > calls / 2, "{stats:?}");
    assert!(
        stats.withdrawn < calls / 50,
        "calls were asked back from busy workers while others waited in line: {stats:?}"
    );
    pool.shutdown().await;
}

/// Calls of uneven lengths on two busy workers, no more in flight than
/// they can hold queued (so nobody waits in line): a worker that comes free
/// takes calls queued behind the other back (withdraw), some of them just
/// as that worker's actor starts them, while more are queued behind. Every
/// call still gets its own answer, at once: none is run out of its turn
/// (its answer read as another's) or left waiting for an answer already read.
#[tokio::test]
async fn calls_asked_back_mid_stream_each_get_their_own_answer() {
    let (pool, _session) = pool(2).await;
    let options = InvokeOptions {
        timeout: Some(Duration::from_secs(10)),
        ..Default::default()
    };
    let answers = stream_calls(&pool, 3000, 8, |pool, i| {
        let options = options.clone();
        async move {
            // Every seventh call naps a little: the workers come free at
            // different moments, and calls queued behind the busy one move.
            match i % 7 {
                0 => pool
                    .invoke("nap", json!({"seconds": 0.002}), options)
                    .await
                    .map(|answer| answer["at_once"].clone()),
                _ => pool.invoke("echo", json!({"value": i}), options).await,
            }
        }
    })
    .await;
    for (i, answer) in answers {
        // A nap answers how many calls ran at once in its worker: 1.
        let expected = match i % 7 {
            0 => json!(1),
            _ => json!(i),
        };
        assert_eq!(answer.expect("every call succeeds"), expected, "call {i}");
    }
    let stats = pool.stats();
    assert!(stats.withdrawn > 0, "no call was asked back: {stats:?}");
    assert_eq!(stats.kills, 0, "{stats:?}");
    pool.shutdown().await;
}
