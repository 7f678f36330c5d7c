//! Sessions of their own through the library: calls given a session
//! (`InvokeOptions::session`) run in its workspace, and under
//! `SessionIsolation::Process` on workers no other session has used.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use toolpool::context::{Session, SessionsRoot};
use toolpool::{InvokeOptions, Pool, SessionIsolation};

fn session_tools() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/session_tools")
}

async fn pool(isolation: SessionIsolation, own: &std::path::Path) -> Pool {
    pool_of(1, isolation, own).await
}

async fn pool_of(workers: usize, isolation: SessionIsolation, own: &std::path::Path) -> Pool {
    parking_pool(workers, 0, isolation, own).await
}

/// A pool of `workers` that keeps up to `parked` workers for their sessions.
async fn parking_pool(
    workers: usize,
    parked: usize,
    isolation: SessionIsolation,
    own: &std::path::Path,
) -> Pool {
    Pool::builder()
        .functions_dir(session_tools())
        .workers(workers)
        .spare_workers(1)
        .parked_workers(parked)
        .session_dir(own)
        .session_isolation(isolation)
        .timeout(Duration::from_secs(30))
        .build()
        .await
        .expect("pool starts")
}

/// Waits until the pool's warm spare has started (spares start after the
/// pool is ready).
async fn wait_for_a_spare(pool: &Pool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while pool.stats().spares == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no spare started in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn call(pool: &Pool, session: &Arc<Session>, name: &str, args: Value) -> Value {
    let options = InvokeOptions {
        session: Some(session.clone()),
        ..InvokeOptions::default()
    };
    pool.invoke(name, args, options)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_isolation_keeps_worker_memory_and_files_apart() {
    let dir = tempfile::tempdir().unwrap();
    let root = SessionsRoot::new(dir.path(), Duration::from_secs(3600), &[]).unwrap();
    let pool = pool(SessionIsolation::Process, &dir.path().join("own")).await;
    let (alice, bob) = (root.open("alice").unwrap(), root.open("bob").unwrap());

    call(
        &pool,
        &alice,
        "remember",
        json!({"value": "alice-token-123"}),
    )
    .await;
    call(&pool, &alice, "write_note", json!({"text": "alice's"})).await;
    // One worker: bob's call comes to alice's worker, recycled first.
    assert_eq!(call(&pool, &bob, "recall", json!({})).await, json!(""));
    assert_eq!(call(&pool, &bob, "read_note", json!({})).await, json!(""));
    assert_eq!(
        call(&pool, &alice, "read_note", json!({})).await,
        json!("alice's")
    );
    let who = call(&pool, &bob, "whoami", json!({"tag": "b"})).await;
    assert_eq!(who["session_id"], json!("bob"));
    let workspace = dir
        .path()
        .canonicalize()
        .unwrap()
        .join("bob/code_workspace");
    assert_eq!(who["workspace"], json!(workspace));
    assert_eq!(who["cwd"], json!(workspace));
    assert!(
        pool.stats().session_recycles >= 3,
        "{:?}",
        pool.stats().session_recycles
    );
    // Calls without a session run in the pool's own, as before.
    let own = pool
        .invoke("whoami", json!({"tag": "o"}), InvokeOptions::default())
        .await
        .unwrap();
    assert_eq!(own["session_id"], json!("default"));
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_isolation_keeps_each_sessions_worker_while_one_of_its_own_is_idle() {
    let dir = tempfile::tempdir().unwrap();
    let root = SessionsRoot::new(dir.path(), Duration::from_secs(3600), &[]).unwrap();
    let pool = pool_of(2, SessionIsolation::Process, &dir.path().join("own")).await;
    let (alice, bob) = (root.open("alice").unwrap(), root.open("bob").unwrap());
    call(&pool, &alice, "remember", json!({"value": "alice-1"})).await;
    call(&pool, &bob, "remember", json!({"value": "bob-1"})).await;
    // Alice's worker has been idle longest; Bob's next call still takes
    // his own, and Alice's memory is still there for her.
    for _ in 0..3 {
        assert_eq!(call(&pool, &bob, "recall", json!({})).await, json!("bob-1"));
    }
    assert_eq!(
        call(&pool, &alice, "recall", json!({})).await,
        json!("alice-1")
    );
    assert_eq!(pool.stats().session_recycles, 0);
    // A third session: the worker idle longest is recycled and the warm
    // spare takes its place for Carol's call itself (no second recycle of
    // Alice's worker, which is idle too); Alice keeps hers.
    wait_for_a_spare(&pool).await;
    let carol = root.open("carol").unwrap();
    assert_eq!(call(&pool, &carol, "recall", json!({})).await, json!(""));
    assert_eq!(pool.stats().session_recycles, 1);
    assert_eq!(
        call(&pool, &alice, "recall", json!({})).await,
        json!("alice-1"),
        "Bob's worker was idle longest, so his was recycled, not Alice's"
    );
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumes_its_parked_worker_with_its_memory_and_never_runs_on_anothers() {
    let dir = tempfile::tempdir().unwrap();
    let root = SessionsRoot::new(dir.path(), Duration::from_secs(3600), &[]).unwrap();
    // One worker runs calls; up to two more wait for their sessions.
    let pool = parking_pool(1, 2, SessionIsolation::Process, &dir.path().join("own")).await;
    let limits = pool.limits();
    assert_eq!(
        (limits.workers, limits.parked_workers),
        (1, 2),
        "{limits:?}"
    );
    let sessions: Vec<_> = ["alice", "bob", "carol"]
        .iter()
        .map(|name| root.open(name).unwrap())
        .collect();
    let mut pids = Vec::new();
    for session in &sessions {
        let name = session.paths.id.clone();
        // Each session's first call finds nothing of another's memory.
        assert_eq!(call(&pool, session, "recall", json!({})).await, json!(""));
        call(&pool, session, "remember", json!({"value": name})).await;
        pids.push(call(&pool, session, "whoami", json!({"tag": "p"})).await["pid"].clone());
    }
    assert_eq!(pool.stats().parked, 2, "{:?}", pool.stats());
    // Each comes back to its own worker, memory and all, in any order.
    for round in 0..2 {
        for (n, session) in sessions.iter().enumerate().rev() {
            assert_eq!(
                call(&pool, session, "recall", json!({})).await,
                json!(session.paths.id),
                "round {round}"
            );
            let pid = call(&pool, session, "whoami", json!({"tag": "p"})).await["pid"].clone();
            assert_eq!(pid, pids[n], "{} moved to another worker", session.paths.id);
        }
    }
    let stats = pool.stats();
    assert_eq!(stats.session_recycles, 0, "{stats:?}");
    assert!(stats.parked_resumes >= 5, "{stats:?}");
    // No more than the pool's size ran at once; the parked ones wait.
    assert_eq!((stats.size, stats.parked), (1, 2), "{stats:?}");
    // A fourth session: no room to park another, so the one parked
    // longest ago is retired (counted as recycled for another session).
    let dave = root.open("dave").unwrap();
    assert_eq!(call(&pool, &dave, "recall", json!({})).await, json!(""));
    let stats = pool.stats();
    assert_eq!((stats.parked, stats.session_recycles), (2, 1), "{stats:?}");
    pool.shutdown().await;
    assert_eq!(
        pool.stats().live_workers,
        0,
        "parked workers outlived the pool"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_isolation_shares_worker_memory_not_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = SessionsRoot::new(dir.path(), Duration::from_secs(3600), &[]).unwrap();
    let pool = pool(SessionIsolation::Shared, &dir.path().join("own")).await;
    let (alice, bob) = (root.open("alice").unwrap(), root.open("bob").unwrap());
    call(
        &pool,
        &alice,
        "remember",
        json!({"value": "alice-token-123"}),
    )
    .await;
    call(&pool, &alice, "write_note", json!({"text": "alice's"})).await;
    assert_eq!(
        call(&pool, &bob, "recall", json!({})).await,
        json!("alice-token-123")
    );
    assert_eq!(call(&pool, &bob, "read_note", json!({})).await, json!(""));
    assert_eq!(pool.stats().session_recycles, 0);
    pool.shutdown().await;
}
