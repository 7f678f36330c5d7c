//! Sessions of their own through the library: calls given a session
//! (`InvokeOptions::session`) run in its workspace, and under
//! `SessionIsolation::Process` on workers no other session has used.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use toolpool::{InvokeOptions, Pool, Session, SessionIsolation, SessionsRoot};

fn session_tools() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/session_tools")
}

async fn pool(isolation: SessionIsolation, own: &std::path::Path) -> Pool {
    pool_of(1, isolation, own).await
}

async fn pool_of(workers: usize, isolation: SessionIsolation, own: &std::path::Path) -> Pool {
    Pool::builder()
        .functions_dir(session_tools())
        .workers(workers)
        .spare_workers(1)
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
