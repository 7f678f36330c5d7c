//! With `.subreaper(true)` (what the `toolpool` command uses) the supervisor
//! is the child subreaper: what a worker's tree leaves when even its
//! guardian is killed becomes the supervisor's child, and is killed and
//! reaped. This file holds only these tests: the subreaper is process-wide.

use std::time::Duration;

use crate::common::*;
use serde_json::json;
use toolpool::ErrorKind;

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

#[tokio::test]
async fn subreaper_kills_and_reaps_what_a_killed_guardian_leaves() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1).subreaper(true).build().await.unwrap();
    let worker = worker_pid(&pool).await;
    let guardian = parent_of(worker).expect("the worker has a parent");
    let pid_file = session.path().join("escapee.pid");
    let killing = {
        let pid_file = pid_file.clone();
        tokio::spawn(async move {
            wait_for_pid_file(&pid_file, Duration::from_secs(10)).await;
            // A worker in a PID namespace of its own cannot see its guardian:
            // the guardian is killed from here (again, harmlessly, otherwise).
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(guardian),
                nix::sys::signal::Signal::SIGKILL,
            );
        })
    };
    let error = call(
        &pool,
        "kill_guardian_leaving_escapee",
        json!({ "pid_file": pid_file }),
    )
    .await
    .unwrap_err();
    killing.await.unwrap();
    assert_eq!(error.kind, ErrorKind::WorkerDied, "{error}");
    let escapee = wait_for_pid_file(&pid_file, Duration::from_secs(2)).await;
    assert!(
        reaped_within(escapee, Duration::from_secs(2)).await,
        "the process the worker left ({escapee}) survived: {}",
        describe_pids(&[escapee])
    );
    assert!(
        reaped_within(worker, Duration::from_secs(2)).await,
        "the worker ({worker}) was not reaped"
    );
    assert_serves(&pool).await;
    pool.shutdown().await;
}
