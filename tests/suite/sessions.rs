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
    Pool::builder()
        .functions_dir(session_tools())
        .workers(1)
        .spare_workers(1)
        .session_dir(own)
        .session_isolation(isolation)
        .timeout(Duration::from_secs(30))
        .build()
        .await
        .expect("pool starts")
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
