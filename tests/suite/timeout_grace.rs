//! `--timeout-grace`: at the deadline a tool gets `TimeoutError` in its main
//! thread (an async tool's task is cancelled), so its `finally` runs; its
//! worker is killed as soon as the call ends or the grace runs out, and
//! nothing the tool does moves that end.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use toolpool::{ErrorKind, InvokeOptions, Pool};

use crate::common::*;

fn grace_tools() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/grace")
}

async fn pool_with(session: &tempfile::TempDir, grace: Duration) -> Pool {
    sandbox_from_env(
        Pool::builder()
            .functions_dir(grace_tools())
            .workers(1)
            .session_dir(session.path())
            .timeout(Duration::from_secs(1))
            .timeout_grace(grace),
    )
    .build()
    .await
    .expect("pool starts")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test]
async fn a_grace_lets_finally_remove_what_the_tool_made() {
    let session = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    for (grace, tool) in [
        (Duration::from_secs(2), "holds_a_directory"),
        (Duration::from_secs(2), "holds_a_directory_async"),
        (Duration::from_secs(2), "waits_on_a_lock"),
        (Duration::from_secs(2), "waits_in_select"),
        (Duration::from_secs(2), "waits_in_a_c_sleep"),
        (Duration::ZERO, "holds_a_directory"),
    ] {
        let pool = pool_with(&session, grace).await;
        let marker = scratch.path().join(format!("{tool}-{}", grace.as_secs()));
        let error = call(&pool, tool, json!({"marker": marker}))
            .await
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
        let directory = PathBuf::from(read(&marker));
        assert!(directory.starts_with(std::env::temp_dir()), "{directory:?}");
        let text = error.to_string();
        let prefix = format!("Tool {tool} error: TimeoutError: function '{tool}' timed out after 1 s; its worker (pid ");
        assert!(text.starts_with(&prefix), "{text}");
        if grace.is_zero() {
            assert!(directory.exists(), "no grace, no clean-up: {text}");
            assert!(text.contains("; it was at cleanup.py:"), "{text}");
            std::fs::remove_dir_all(&directory).unwrap();
        } else {
            assert!(
                !directory.exists(),
                "{tool}: its finally did not run: {text}"
            );
            assert!(text.contains(") was killed; cleaned up in "), "{text}");
            assert!(text.ends_with(" ms"), "{text}");
        }
        // Never reused after a timeout: the next call runs on a new worker.
        assert_serves_on_a_new_worker(&pool, &error).await;
        pool.shutdown().await;
    }
}

/// The worker that ran the call is gone, and another serves.
async fn assert_serves_on_a_new_worker(pool: &Pool, error: &toolpool::ToolError) {
    let text = error.to_string();
    let pid: i32 = text
        .split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {text}"));
    assert!(
        gone_within(pid, Duration::from_secs(5)).await,
        "worker {pid} lives on"
    );
    assert_ne!(worker_pid(pool).await, pid);
}

#[tokio::test]
async fn a_tool_that_goes_on_or_sits_in_c_code_is_killed_when_the_grace_ends() {
    let session = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let pool = pool_with(&session, Duration::from_secs(1)).await;
    for tool in ["keeps_going", "in_c"] {
        let marker = scratch.path().join(tool);
        let started = Instant::now();
        let error = call(&pool, tool, json!({"marker": marker}))
            .await
            .unwrap_err();
        let took = started.elapsed();
        let text = error.to_string();
        assert_eq!(error.kind, ErrorKind::Timeout, "{text}");
        assert!(
            text.contains(") was killed; killed after the 1 s grace"),
            "{text}"
        );
        // Timeout plus grace, not sooner; later only by what a busy machine adds.
        assert!(
            took >= Duration::from_secs(2),
            "{tool} ended after {took:?}"
        );
        assert!(took < Duration::from_secs(6), "{tool} ended after {took:?}");
        assert!(!read(&marker).is_empty(), "{tool} did not start");
        assert_serves_on_a_new_worker(&pool, &error).await;
        match tool {
            // It heard the deadline, and went on anyway.
            "keeps_going" => assert_eq!(read(&marker.with_extension("caught")), "caught"),
            // In C, it never heard it: the kill came first.
            _ => assert!(!marker.with_extension("finally").exists()),
        }
    }
    pool.shutdown().await;
}

#[tokio::test]
async fn the_tools_own_grace_and_the_callers_take_their_place_in_order() {
    let session = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    // No pool grace: the decorator's (timeout 0.5 s, grace 2 s) holds.
    let pool = pool_with(&session, Duration::ZERO).await;
    let catalog = pool.catalog();
    let spec = catalog.get("declares_its_grace").unwrap();
    assert_eq!((spec.timeout, spec.timeout_grace), (Some(0.5), Some(2.0)));
    drop(catalog);
    let marker = scratch.path().join("own");
    let error = call(&pool, "declares_its_grace", json!({"marker": marker}))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("timed out after 0.5 s"),
        "{error}"
    );
    assert!(error.to_string().contains("cleaned up in"), "{error}");
    assert!(!PathBuf::from(read(&marker)).exists());
    // The caller's grace (none) wins over the tool's.
    let marker = scratch.path().join("caller");
    let options = InvokeOptions {
        timeout_grace: Some(Duration::ZERO),
        ..InvokeOptions::default()
    };
    let error = pool
        .invoke("declares_its_grace", json!({"marker": marker}), options)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("; it was at cleanup.py:"),
        "{error}"
    );
    let left = PathBuf::from(read(&marker));
    assert!(left.exists());
    std::fs::remove_dir_all(left).unwrap();
    pool.shutdown().await;
}
