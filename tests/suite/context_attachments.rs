//! The attachment store behind `_context["attachment_store"]`: one store per
//! session, owned by the supervisor, shared by every worker and by the next
//! process on the same session directory.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{builder, call, pool, sandbox_from_env};
use serde_json::{json, Value};
use toolpool::Pool;

fn manifest_path(session: &tempfile::TempDir) -> PathBuf {
    session
        .path()
        .join("code_workspace")
        .join("attachments")
        .join("attachments_manifest.json")
}

#[tokio::test]
async fn attachments_registered_concurrently_by_several_workers_are_all_kept() {
    let (pool, session) = pool(4).await;
    // Meanwhile, read the manifest as fast as possible: every read must be
    // valid JSON (it is replaced whole, never written in place).
    let manifest = manifest_path(&session);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (stop, reads, manifest) = (stop.clone(), reads.clone(), manifest.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(text) = std::fs::read_to_string(&manifest) {
                    let parsed: Result<Value, _> = serde_json::from_str(&text);
                    assert!(parsed.is_ok(), "manifest is not valid JSON:\n{text}");
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let calls = (0..40).map(|i| {
        let pool = pool.clone();
        async move {
            let args = json!({"name": format!("notes/n{i}.txt"), "text": format!("note {i}")});
            call(&pool, "attach_text", args).await.expect("registers")
        }
    });
    let results = futures_join_all(calls).await;
    stop.store(true, Ordering::Relaxed);
    reader.join().expect("every manifest read was valid JSON");
    assert!(reads.load(Ordering::Relaxed) > 0);

    let pids: HashSet<i64> = results.iter().map(|r| r["pid"].as_i64().unwrap()).collect();
    assert!(pids.len() > 1, "the calls ran on one worker only: {pids:?}");
    let ids: Vec<String> = results
        .iter()
        .map(|r| {
            r["record"]["ref"]["attachment_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 40);

    // No record lost: in the supervisor's store, in the manifest on disk, and
    // as every worker sees them.
    assert_eq!(pool.attachments().list().len(), 40);
    let on_disk: Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    for id in &ids {
        assert!(on_disk.get(id).is_some(), "{id} missing from the manifest");
    }
    let listing = call(&pool, "attachment_listing", json!({})).await.unwrap();
    assert_eq!(listing["listed"].as_array().unwrap().len(), 40);
    assert_eq!(listing["manifest"].as_array().unwrap().len(), 40);

    // Each one reads back, with its file, from whichever worker runs the read.
    for (i, id) in ids.iter().enumerate() {
        let read = call(&pool, "attachment_read", json!({"attachment_id": id}))
            .await
            .unwrap();
        assert_eq!(read["content"], json!(format!("note {i}")));
        assert_eq!(read["record"]["extra"], json!({"n": 1}));
        assert_eq!(read["kind"], json!("file"));
    }
    pool.shutdown().await;
}

/// `futures::future::join_all` without the crate: spawn each, await in order.
async fn futures_join_all<F>(futures: impl Iterator<Item = F>) -> Vec<Value>
where
    F: std::future::Future<Output = Value> + Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.expect("call task"));
    }
    out
}

#[tokio::test]
async fn attachments_persist_for_the_next_process_on_the_same_session() {
    let session = tempfile::tempdir().unwrap();
    let first = builder(&session, 1).build().await.unwrap();
    let kept = call(
        &first,
        "attach_text",
        json!({"name": "a.txt", "text": "kept"}),
    )
    .await
    .unwrap();
    let kept_id = kept["record"]["ref"]["attachment_id"]
        .as_str()
        .unwrap()
        .to_string();
    let gone = call(
        &first,
        "attach_text",
        json!({"name": "b.txt", "text": "not persisted", "persist": false}),
    )
    .await
    .unwrap();
    let gone_id = gone["record"]["ref"]["attachment_id"]
        .as_str()
        .unwrap()
        .to_string();
    let blob = call(
        &first,
        "attach_blob",
        json!({"text": "bytes!", "name": "blob.txt"}),
    )
    .await
    .unwrap();
    let blob_id = blob["ref"]["attachment_id"].as_str().unwrap().to_string();
    assert_eq!(blob["ref"]["mime_type"], json!("text/plain"));
    first.shutdown().await;

    let second: Pool = builder(&session, 1).build().await.unwrap();
    let read = call(
        &second,
        "attachment_read",
        json!({"attachment_id": kept_id}),
    )
    .await
    .unwrap();
    assert_eq!(read["content"], json!("kept"));
    let blob = call(
        &second,
        "attachment_read",
        json!({"attachment_id": blob_id}),
    )
    .await
    .unwrap();
    assert_eq!(blob["content"], json!("bytes!"));
    // persist=False lives as long as the pool that registered it.
    let gone = call(
        &second,
        "attachment_read",
        json!({"attachment_id": gone_id}),
    )
    .await
    .unwrap();
    assert_eq!(gone, Value::Null);
    second.shutdown().await;
}

#[tokio::test]
async fn register_file_refuses_paths_outside_the_workspace() {
    let (pool, session) = pool(1).await;
    let workspace = session.path().join("code_workspace");
    std::fs::write(session.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(session.path().join("secret.txt"), workspace.join("escape"))
        .unwrap();
    std::fs::create_dir_all(workspace.join("folder")).unwrap();
    let before = call(&pool, "getpid", json!({})).await.unwrap();
    for (path, kind) in [
        ("../secret.txt", "PermissionError"),
        ("/etc/hostname", "PermissionError"),
        ("escape", "PermissionError"),
        ("folder/../../secret.txt", "PermissionError"),
        ("missing.txt", "FileNotFoundError"),
        ("folder", "IsADirectoryError"),
    ] {
        let error = call(&pool, "register_path", json!({"path": path}))
            .await
            .expect_err(path);
        assert_eq!(error.kind.type_name(), kind, "{path}: {error}");
        if kind == "PermissionError" {
            assert!(error.message.contains("outside the workspace"), "{error}");
        }
    }
    let error = call(
        &pool,
        "register_path",
        json!({"path": "escape", "copy_file": false}),
    )
    .await
    .unwrap_err();
    assert!(error.message.contains("symbolic link"), "{error}");
    // Refused callbacks are exceptions in the tool, not a dead worker.
    assert_eq!(call(&pool, "getpid", json!({})).await.unwrap(), before);
    assert!(pool.attachments().list().is_empty());
    assert!(!workspace
        .join("attachments")
        .join("attachments_manifest.json")
        .exists());
    pool.shutdown().await;
}

#[tokio::test]
async fn failing_callbacks_raise_typed_exceptions_in_the_tool() {
    let (pool, _session) = pool(1).await;
    let seen = call(&pool, "callback_error_types", json!({}))
        .await
        .unwrap();
    assert_eq!(
        seen,
        json!({
            "missing": "FileNotFoundError",
            "outside": "PermissionError",
            "bad_id": "ValueError",
            "unknown": "None",
        })
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn bundled_load_file_registers_a_workspace_file_once() {
    let session = tempfile::tempdir().unwrap();
    let pool = sandbox_from_env(
        Pool::builder()
            .functions_dir(
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("functions/function_calling"),
            )
            .workers(2)
            .session_dir(session.path())
            .timeout(Duration::from_secs(30)),
    )
    .build()
    .await
    .unwrap();
    let workspace = session.path().join("code_workspace");
    std::fs::create_dir_all(workspace.join("docs")).unwrap();
    std::fs::write(workspace.join("docs/plan.md"), "# Plan\n").unwrap();
    let blocks = call(&pool, "load_file", json!({"path_or_id": "docs/plan.md"}))
        .await
        .unwrap();
    let block = &blocks[0];
    assert_eq!(block["type"], json!("file"));
    assert_eq!(block["attachment"]["name"], json!("plan.md"));
    assert_eq!(block["attachment"]["mime_type"], json!("text/markdown"));
    assert_eq!(block["data"]["workspace_path"], json!("docs/plan.md"));
    let id = block["attachment"]["attachment_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Referenced where it is, not copied; the same file again is the same attachment.
    let record = pool.attachments().get(&id).expect("in the store");
    assert_eq!(
        PathBuf::from(record.reference.local_path.unwrap()),
        workspace.join("docs/plan.md").canonicalize().unwrap()
    );
    let again = call(&pool, "load_file", json!({"path_or_id": "docs/plan.md"}))
        .await
        .unwrap();
    assert_eq!(again[0]["attachment"]["attachment_id"], json!(id));
    let by_id = call(&pool, "load_file", json!({"path_or_id": id.clone()}))
        .await
        .unwrap();
    assert_eq!(by_id, blocks);
    let error = call(&pool, "load_file", json!({"path_or_id": "../outside.txt"}))
        .await
        .unwrap_err();
    assert_eq!(error.kind.type_name(), "ValueError", "{error}");
    pool.shutdown().await;
}
