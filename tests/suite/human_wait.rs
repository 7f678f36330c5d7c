//! While a call waits for a human its timer is stopped, so every process
//! of the tool must be stopped too, by the kernel: chains of processes
//! that fork their successor and exit, again and again, each in a session
//! of its own, hopping from before the prompt opens
//! (tests/fixtures/hostile/human_wait/hop.py), write nothing while the
//! human is asked — with the worker as init of a PID namespace and without.
//! Where the tree cannot be made sure of, the timer is not paused
//! (`src/worker/deadline.rs` tests every order of prompts and freezes).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;
use toolpool::context::{prompt_fn, PromptAnswer};
use toolpool::{InvokeOptions, Pool};

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

async fn hopping_chains_write_nothing_while_the_human_is_asked(pid_namespace: bool) {
    let session = tempfile::tempdir().unwrap();
    let log = session.path().join("hops.log");
    // When the human was asked, and when they answered (4 s later: past the
    // call's 2 s timeout).
    let asked: Arc<Mutex<Option<(f64, f64)>>> = Arc::default();
    let seen = asked.clone();
    let prompt = prompt_fn(move |_request| {
        let seen = seen.clone();
        async move {
            let opened = now();
            tokio::time::sleep(Duration::from_secs(4)).await;
            *seen.lock().unwrap() = Some((opened, now()));
            Ok(PromptAnswer::text("done"))
        }
    });
    let pool = Pool::builder()
        .functions_dir(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile/human_wait"),
        )
        .workers(1)
        .session_dir(session.path())
        .timeout(Duration::from_secs(2))
        .pid_namespace(pid_namespace)
        .human_prompt(prompt)
        .build()
        .await
        .unwrap();
    let answer = pool
        .invoke(
            "hop_while_asking",
            json!({ "log": log }),
            InvokeOptions::default(),
        )
        .await;
    let stats = pool.stats();
    pool.shutdown().await;
    assert_eq!(
        answer.unwrap(),
        json!("done"),
        "the 4 s wait is not the tool's"
    );
    let (opened, answered) = asked.lock().unwrap().expect("the human was asked");
    let stamps: Vec<f64> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|line| line.parse().ok())
        .collect();
    assert!(
        stamps.iter().filter(|&&t| t < opened).count() > 20,
        "the chains hopped before the prompt (PID namespace: {pid_namespace})"
    );
    let during: Vec<&f64> = stamps
        .iter()
        .filter(|&&t| t > opened && t < answered)
        .collect();
    assert!(
        during.is_empty(),
        "{} timestamps written while the human was asked (PID namespace: {pid_namespace})",
        during.len()
    );
    // What the chains left running when the call answered retired the worker.
    assert_eq!(stats.left_running["processes"], 1, "{stats:?}");
}

#[tokio::test]
async fn hopping_chains_are_frozen_in_a_pid_namespace() {
    hopping_chains_write_nothing_while_the_human_is_asked(true).await;
}

#[tokio::test]
async fn hopping_chains_are_frozen_without_a_pid_namespace() {
    hopping_chains_write_nothing_while_the_human_is_asked(false).await;
}
