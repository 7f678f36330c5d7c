//! The `toolpool` command is the child subreaper: what a worker's tree
//! leaves when even its guardian is killed becomes the supervisor's child,
//! and is killed and reaped. Driven through the command, not a pool in this
//! process: the subreaper's sweep kills every child of its process that it
//! did not start, which here would be the other tests' children.

use std::time::Duration;

use crate::common::*;
use crate::mcp_support::{error_text, serve, text};
use serde_json::json;

/// True once `pid` has no /proc entry at all: not even a zombie.
async fn reaped_within(pid: i32, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subreaper_kills_and_reaps_what_a_killed_guardian_leaves() {
    let served = serve(&["--workers", "1", "serve"]).await;
    let pid_file = served.session.path().join("escapee.pid");
    let killing = {
        let pid_file = pid_file.clone();
        let supervisor = served.pid();
        tokio::spawn(async move {
            let escapee = wait_for_pid_file(&pid_file, Duration::from_secs(20)).await;
            // A worker in a PID namespace of its own cannot see its guardian:
            // the guardian is killed from here. (Otherwise the tool killed it
            // already, and its worker may be gone: nothing is left to kill.)
            let worker = parent_of(escapee).filter(|p| *p != supervisor);
            let guardian = worker.and_then(parent_of).filter(|p| *p != supervisor);
            if let (Some(worker), Some(guardian)) = (worker, guardian) {
                if parent_of(guardian) == Some(supervisor) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(guardian),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                return (escapee, Some(worker));
            }
            (escapee, None)
        })
    };
    let result = served
        .call(
            "kill_guardian_leaving_escapee",
            json!({ "pid_file": pid_file }),
        )
        .await;
    let (escapee, worker) = killing.await.unwrap();
    let error = error_text(&result);
    assert!(error.contains("WorkerDied"), "{error}");
    assert!(
        reaped_within(escapee, Duration::from_secs(2)).await,
        "the process the worker left ({escapee}) survived: {}",
        describe_pids(&[escapee])
    );
    if let Some(worker) = worker {
        assert!(
            reaped_within(worker, Duration::from_secs(2)).await,
            "the worker ({worker}) was not reaped"
        );
    }
    let next = served.call("add", json!({"a": 2, "b": 3})).await;
    assert_eq!(text(&next), "5");
    let (code, stderr) = served.close().await;
    assert_eq!(code, 0, "{stderr}");
}
