//! The catalog is rebuilt and the workers recycled when the tools change —
//! on request (`Pool::reload`) or by `--watch` — without disturbing calls
//! in flight.

use std::path::Path;
use std::time::Duration;

use crate::common::*;
use serde_json::json;
use toolpool::Pool;

fn write_module(dir: &Path, version: u32, extra: bool) {
    let mut code = format!(
        "import time\n\n\ndef version() -> int:\n    \"\"\"The code's version.\"\"\"\n    return {version}\n\n\n\
         def nap(seconds: float) -> int:\n    \"\"\"Sleep, then say the version.\"\"\"\n    time.sleep(seconds)\n    return {version}\n"
    );
    if extra {
        code.push_str(
            "\n\ndef added_later() -> str:\n    \"\"\"New in version 2.\"\"\"\n    return 'new'\n",
        );
    }
    std::fs::write(dir.join("versioned.py"), code).unwrap();
}

async fn versioned_pool(tools: &Path, session: &Path) -> Pool {
    Pool::builder()
        .functions_dir(tools)
        .session_dir(session)
        .workers(2)
        .build()
        .await
        .unwrap()
}

#[tokio::test]
async fn reload_rebuilds_the_catalog_and_new_calls_run_new_code() {
    let tools = tempfile::tempdir().unwrap();
    let session = tempfile::tempdir().unwrap();
    write_module(tools.path(), 1, false);
    let pool = versioned_pool(tools.path(), session.path()).await;
    assert_eq!(call(&pool, "version", json!({})).await.unwrap(), json!(1));
    assert!(pool.catalog().get("added_later").is_none());

    // A call in flight while the code changes finishes on the old code.
    let in_flight = {
        let pool = pool.clone();
        tokio::spawn(async move { call(&pool, "nap", json!({"seconds": 1.0})).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    write_module(tools.path(), 2, true);
    let catalog = pool.reload().await.unwrap();
    assert!(catalog.get("added_later").is_some());
    assert!(pool.catalog().get("added_later").is_some());
    for _ in 0..4 {
        assert_eq!(call(&pool, "version", json!({})).await.unwrap(), json!(2));
    }
    assert_eq!(
        call(&pool, "added_later", json!({})).await.unwrap(),
        json!("new")
    );
    assert_eq!(
        in_flight.await.unwrap().unwrap(),
        json!(1),
        "undisturbed, old code"
    );
    // Once the busy worker came back it was recycled too.
    for _ in 0..4 {
        assert_eq!(
            call(&pool, "nap", json!({"seconds": 0})).await.unwrap(),
            json!(2)
        );
    }
    pool.shutdown().await;
}

#[tokio::test]
async fn watch_reloads_when_a_module_changes() {
    let tools = tempfile::tempdir().unwrap();
    let session = tempfile::tempdir().unwrap();
    write_module(tools.path(), 1, false);
    let pool = versioned_pool(tools.path(), session.path()).await;
    toolpool::watch::spawn(&pool);
    assert_eq!(call(&pool, "version", json!({})).await.unwrap(), json!(1));
    // Modification times can be coarse: make sure the size changes too.
    write_module(tools.path(), 22, true);
    let mut seen = json!(null);
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen = call(&pool, "version", json!({})).await.unwrap();
        if seen == json!(22) && pool.catalog().get("added_later").is_some() {
            break;
        }
    }
    assert_eq!(seen, json!(22));
    assert!(pool.catalog().get("added_later").is_some());
    pool.shutdown().await;
}

#[test]
fn fingerprint_changes_with_the_modules_only() {
    let tools = tempfile::tempdir().unwrap();
    write_module(tools.path(), 1, false);
    let before = toolpool::watch::fingerprint(tools.path());
    std::fs::write(tools.path().join("notes.txt"), "not a module").unwrap();
    std::fs::create_dir_all(tools.path().join("__pycache__")).unwrap();
    std::fs::write(tools.path().join("__pycache__/x.py"), "ignored").unwrap();
    assert_eq!(before, toolpool::watch::fingerprint(tools.path()));
    write_module(tools.path(), 10, true);
    let changed = toolpool::watch::fingerprint(tools.path());
    assert_ne!(before, changed);
    // The same content written again (a newer modification time) is no
    // change; another content of the same size is.
    write_module(tools.path(), 10, true);
    assert_eq!(changed, toolpool::watch::fingerprint(tools.path()));
    write_module(tools.path(), 11, true);
    assert_ne!(changed, toolpool::watch::fingerprint(tools.path()));
}

#[tokio::test]
async fn reload_does_not_wait_behind_calls_queued_for_a_worker() {
    let tools = tempfile::tempdir().unwrap();
    let session = tempfile::tempdir().unwrap();
    write_module(tools.path(), 1, false);
    let pool = versioned_pool(tools.path(), session.path()).await;
    // Both workers busy for 6 s, and more calls than they can queue in
    // line for the next free worker.
    let mut calls = Vec::new();
    for _ in 0..8 {
        let pool = pool.clone();
        calls.push(tokio::spawn(async move {
            call(&pool, "nap", json!({"seconds": 6.0})).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(pool.stats().queued > 0, "{:?}", pool.stats());
    write_module(tools.path(), 2, true);
    let catalog = pool.reload().await.unwrap();
    assert!(catalog.get("added_later").is_some());
    // The reload finished while the first calls still run.
    assert!(
        calls.iter().all(|c| !c.is_finished()),
        "a call finished before the reload returned"
    );
    assert_eq!(pool.stats().busy, 2, "{:?}", pool.stats());
    for c in calls {
        c.abort();
    }
    pool.shutdown().await;
}

/// A call made after a reload is never queued behind a busy worker that
/// still runs the old code (pipelining): it waits for a worker on the new.
#[tokio::test]
async fn a_call_after_a_reload_is_not_queued_behind_a_worker_on_old_code() {
    let tools = tempfile::tempdir().unwrap();
    let session = tempfile::tempdir().unwrap();
    write_module(tools.path(), 1, false);
    let pool = Pool::builder()
        .functions_dir(tools.path())
        .session_dir(session.path())
        .workers(1)
        .spare_workers(0)
        .build()
        .await
        .unwrap();
    let in_flight = {
        let pool = pool.clone();
        tokio::spawn(async move { call(&pool, "nap", json!({"seconds": 1.5})).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    write_module(tools.path(), 2, false);
    pool.reload().await.unwrap();
    assert_eq!(call(&pool, "version", json!({})).await.unwrap(), json!(2));
    assert_eq!(in_flight.await.unwrap().unwrap(), json!(1));
    pool.shutdown().await;
}

/// Python trusts a cached `.pyc` whose source has the same mtime (in whole
/// seconds) and size: an edit like `return 1` → `return 2` within a second
/// must still reach the workers after a reload.
#[tokio::test]
async fn an_edit_keeping_size_and_mtime_is_picked_up_by_a_reload() {
    let tools = tempfile::tempdir().unwrap();
    let session = tempfile::tempdir().unwrap();
    write_module(tools.path(), 1, false);
    let file = tools.path().join("versioned.py");
    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
    let pool = versioned_pool(tools.path(), session.path()).await;
    assert_eq!(call(&pool, "version", json!({})).await.unwrap(), json!(1));
    write_module(tools.path(), 2, false);
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    pool.reload().await.unwrap();
    for _ in 0..3 {
        assert_eq!(call(&pool, "version", json!({})).await.unwrap(), json!(2));
    }
    // Nothing is written into the user's tool folder.
    assert!(!tools.path().join("__pycache__").exists());
    pool.shutdown().await;
}

/// A tool module's compiled code is kept in toolpool's code cache, keyed by
/// its path and source, so the next worker does not compile it again.
#[tokio::test]
async fn a_modules_compiled_code_is_kept_in_the_code_cache() {
    let tools = tempfile::tempdir().unwrap();
    let session = tempfile::tempdir().unwrap();
    write_module(tools.path(), 7, false);
    let pool = versioned_pool(tools.path(), session.path()).await;
    assert_eq!(call(&pool, "version", json!({})).await.unwrap(), json!(7));
    // The pool's own cache, in its private directory (gone with the pool).
    let limits = pool.limits();
    let private = limits.private_dir;
    let shim = private.join("shim");
    let cache = limits.code_cache.expect("a code cache");
    assert!(cache.starts_with(&private), "{}", cache.display());
    let file = tools.path().canonicalize().unwrap().join("versioned.py");
    let output = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import os, sys; sys.path.insert(0, sys.argv[1])\n\
             from toolpool_shim import discovery\n\
             discovery.CODE_CACHE = sys.argv[2]\n\
             print(os.path.exists(discovery._cache_entry(sys.argv[3], open(sys.argv[3], 'rb').read())))",
        )
        .args([shim.as_os_str(), cache.as_os_str(), file.as_os_str()])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "True",
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    pool.shutdown().await;
    drop(pool);
    // Removed once the last task holding the pool (a replacement's start
    // finishing on a busy machine) lets it go.
    let mut waited = 0;
    while private.exists() && waited < 200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
    }
    assert!(!private.exists(), "removed with its pool");
}
