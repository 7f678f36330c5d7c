//! A call that returns OK and leaves a trap in its worker for the next
//! call (tests/fixtures/hostile/leftovers/traps.py): a signal timer with a
//! handler, one without, a POSIX timer, a thread in place of one that
//! ended, a pipe in place of the request pipe. The next, innocent call,
//! longer than the trap's 1 s, must get its
//! own answer: the worker is reused only when it is as it was idle, and
//! each retirement is counted by its cause. Each runs with the worker as
//! init of a PID namespace (where a signal's default action does not end
//! it) and without (where SIGALRM's does).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use toolpool::{InvokeOptions, Pool};

async fn trap_then_call(trap: &str, retired_for: Option<&str>) {
    for pid_namespace in [true, false] {
        trap_then_call_in(trap, retired_for, pid_namespace).await;
    }
}

async fn trap_then_call_in(trap: &str, retired_for: Option<&str>, pid_namespace: bool) {
    let session = tempfile::tempdir().unwrap();
    let pool = Pool::builder()
        .functions_dir(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile/leftovers"),
        )
        .workers(1)
        .session_dir(session.path())
        .timeout(Duration::from_secs(30))
        .pid_namespace(pid_namespace)
        .build()
        .await
        .unwrap();
    let trapped = pool.invoke(trap, json!({}), InvokeOptions::default()).await;
    assert_eq!(trapped.unwrap(), json!("ok"), "{trap} itself succeeds");
    let innocent = pool
        .invoke("nap", json!({"seconds": 1.5}), InvokeOptions::default())
        .await;
    assert_eq!(
        innocent.unwrap(),
        json!(1.5),
        "the call after {trap} (PID namespace: {pid_namespace})"
    );
    let stats = pool.stats();
    pool.shutdown().await;
    let retired: Vec<(&String, &u64)> =
        stats.left_running.iter().filter(|(_, n)| **n > 0).collect();
    match retired_for {
        Some(cause) => assert_eq!(retired, vec![(&cause.to_string(), &1)], "{trap}"),
        None => assert!(retired.is_empty(), "{trap}: {retired:?}"),
    }
    assert_eq!(stats.terminations["exited"], 0, "{trap}: no worker died");
}

#[tokio::test]
async fn an_interval_timer_with_a_handler_does_not_reach_the_next_call() {
    trap_then_call("itimer_with_a_handler", Some("signal_handlers")).await;
}

#[tokio::test]
async fn an_interval_timer_whose_handler_ends_the_worker_does_not_reach_the_next_call() {
    trap_then_call("itimer_that_ends_the_worker", Some("signal_handlers")).await;
}

#[tokio::test]
async fn an_alarm_without_a_handler_is_disarmed_after_its_call() {
    // No handler changed, nothing pending: the shim disarmed the alarm and
    // the worker is as it was.
    trap_then_call("alarm_without_a_handler", None).await;
}

#[tokio::test]
async fn a_posix_timer_does_not_reach_the_next_call() {
    trap_then_call("posix_timer", Some("posix_timers")).await;
}

#[tokio::test]
async fn a_thread_in_place_of_one_that_ended_does_not_reach_the_next_call() {
    trap_then_call("swap_the_placeholder", Some("threads")).await;
}

#[tokio::test]
async fn a_pipe_in_place_of_the_request_pipe_does_not_reach_the_next_call() {
    trap_then_call("replace_the_request_pipe", Some("protocol_descriptors")).await;
}
