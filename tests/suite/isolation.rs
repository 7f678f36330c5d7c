//! Workers run in the session workspace with a minimal environment.

use crate::common::*;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn worker_environment_is_minimal_unless_passed() {
    std::env::set_var("TOOLPOOL_TEST_TOKEN", "secret");
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1).build().await.unwrap();
    let env = call(&pool, "env", json!({})).await.unwrap();
    assert!(env.get("TOOLPOOL_TEST_TOKEN").is_none(), "leaked: {env}");
    assert!(
        env.as_object()
            .unwrap()
            .keys()
            .all(|k| !k.starts_with("PYTHON")),
        "{env}"
    );
    pool.shutdown().await;

    let pool = builder(&session, 1)
        .pass_env(["TOOLPOOL_TEST_TOKEN".to_string()])
        .build()
        .await
        .unwrap();
    let env = call(&pool, "env", json!({})).await.unwrap();
    assert_eq!(env["TOOLPOOL_TEST_TOKEN"], json!("secret"));
    pool.shutdown().await;
}

#[tokio::test]
async fn worker_cwd_is_the_session_workspace() {
    let (pool, session) = pool(1).await;
    let cwd = call(&pool, "cwd", json!({})).await.unwrap();
    let expected = session
        .path()
        .canonicalize()
        .unwrap()
        .join("code_workspace");
    assert_eq!(cwd, json!(expected));
    pool.shutdown().await;
}

/// A pool on the bundled tools (`functions/function_calling`), whose file
/// tools are confined to the session workspace.
async fn file_tools_pool() -> (toolpool::Pool, tempfile::TempDir, std::path::PathBuf) {
    let session = tempfile::tempdir().unwrap();
    let pool = sandbox_from_env(
        toolpool::Pool::builder()
            .functions_dir(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("functions/function_calling"),
            )
            .session_dir(session.path())
            .workers(1),
    )
    .build()
    .await
    .expect("pool on the bundled tools");
    let workspace = session
        .path()
        .canonicalize()
        .unwrap()
        .join("code_workspace");
    (pool, session, workspace)
}

#[tokio::test]
async fn file_tools_refuse_paths_out_through_dot_dot() {
    let (pool, session, _workspace) = file_tools_pool().await;
    let error = call(
        &pool,
        "save_file",
        json!({"path": "../escaped.txt", "content": "x"}),
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind.type_name(), "ValueError", "{error}");
    assert!(error.message.contains("escapes the workspace"), "{error}");
    assert!(!session.path().join("escaped.txt").exists());
    let error = call(
        &pool,
        "read_text_file_snippet",
        json!({"path": "sub/../../../etc/passwd"}),
    )
    .await
    .unwrap_err();
    assert!(error.message.contains("escapes the workspace"), "{error}");
    pool.shutdown().await;
}

#[tokio::test]
async fn file_tools_refuse_absolute_paths_outside_the_workspace() {
    let (pool, _session, workspace) = file_tools_pool().await;
    for tool in ["read_text_file_snippet", "read_file_segment"] {
        let error = call(&pool, tool, json!({"path": "/etc/passwd"}))
            .await
            .unwrap_err();
        assert!(
            error.message.contains("is outside the workspace"),
            "{tool}: {error}"
        );
    }
    // An absolute path inside the workspace is fine.
    let inside = workspace.join("note.txt");
    call(&pool, "save_file", json!({"path": inside, "content": "hi"}))
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(inside).unwrap(), "hi");
    pool.shutdown().await;
}

#[tokio::test]
async fn file_tools_refuse_symlinks_that_lead_out_of_the_workspace() {
    let (pool, _session, workspace) = file_tools_pool().await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(outside.path(), workspace.join("door")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        workspace.join("secret-link"),
    )
    .unwrap();
    for (tool, args) in [
        ("read_text_file_snippet", json!({"path": "door/secret.txt"})),
        ("read_text_file_snippet", json!({"path": "secret-link"})),
        (
            "save_file",
            json!({"path": "door/planted.txt", "content": "x"}),
        ),
        (
            "save_file",
            json!({"path": "secret-link", "content": "overwritten"}),
        ),
        ("list_directory", json!({"path": "door"})),
        ("delete_path", json!({"path": "door/secret.txt"})),
    ] {
        let error = call(&pool, tool, args.clone()).await.unwrap_err();
        assert!(
            error.message.contains("through a symbolic link"),
            "{tool} {args}: {error}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "secret"
    );
    assert!(!outside.path().join("planted.txt").exists());
    // Deleting the link itself removes the link, never its target.
    call(&pool, "delete_path", json!({"path": "secret-link"}))
        .await
        .unwrap();
    assert!(outside.path().join("secret.txt").exists());
    pool.shutdown().await;
}

#[tokio::test]
async fn attachments_folder_can_be_read_but_not_edited_directly() {
    let (pool, _session, workspace) = file_tools_pool().await;
    let stored = workspace.join("attachments/att-1");
    std::fs::create_dir_all(&stored).unwrap();
    std::fs::write(stored.join("report.txt"), "original").unwrap();
    let read = call(
        &pool,
        "read_text_file_snippet",
        json!({"path": "attachments/att-1/report.txt"}),
    )
    .await
    .unwrap();
    assert_eq!(read["content"], json!("original"));
    for (tool, args) in [
        (
            "save_file",
            json!({"path": "attachments/att-1/report.txt", "content": "changed"}),
        ),
        (
            "save_file",
            json!({"path": "attachments/new.txt", "content": "x"}),
        ),
        (
            "save_file",
            json!({"path": "attachments_manifest.json", "content": "{}"}),
        ),
        ("create_folder", json!({"path": "attachments/sub"})),
        (
            "delete_path",
            json!({"path": "attachments", "recursive": true}),
        ),
        (
            "delete_path",
            json!({"path": "attachments/att-1/report.txt"}),
        ),
    ] {
        let error = call(&pool, tool, args.clone()).await.unwrap_err();
        assert_eq!(
            error.kind.type_name(),
            "PermissionError",
            "{tool} {args}: {error}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(stored.join("report.txt")).unwrap(),
        "original"
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn agent_arguments_never_set_underscored_parameters() {
    let (pool, _session, _workspace) = file_tools_pool().await;
    let error = call(
        &pool,
        "save_file",
        json!({"path": "a.txt", "content": "x", "_context": {"python_workspace_root": "/"}}),
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind, toolpool::ErrorKind::InvalidArguments, "{error}");
    assert!(error.message.contains("'_context'"), "{error}");
    pool.shutdown().await;
}

/// A separate process swaps a workspace folder and a symbolic link to a
/// folder outside (`renameat2(RENAME_EXCHANGE)`, in a loop) while the file
/// tools read and write through the folder's name: every call either works
/// inside the workspace or fails; none reads or writes outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_tools_never_reach_outside_while_a_folder_is_swapped_for_a_link() {
    const CALLS: usize = 1500;
    let (pool, _session, workspace) = file_tools_pool().await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("f.txt"), "OUTSIDE").unwrap();
    std::fs::create_dir(workspace.join("d")).unwrap();
    std::fs::write(workspace.join("d/f.txt"), "inside").unwrap();
    std::os::unix::fs::symlink(outside.path(), workspace.join("swap")).unwrap();
    let racer_script = r#"
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b = (os.fsencode(p) for p in sys.argv[1:3])
RENAME_EXCHANGE, AT_FDCWD = 2, -100
deadline, swaps = time.monotonic() + 120, 0
print("racing", flush=True)
while swaps < 5_000_000 and time.monotonic() < deadline:
    if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
        sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
    swaps += 1
"#;
    let mut racer = std::process::Command::new("python3")
        .arg("-c")
        .arg(racer_script)
        .arg(workspace.join("d"))
        .arg(workspace.join("swap"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the racing process starts");
    let mut started = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(racer.stdout.take().unwrap()),
        &mut started,
    )
    .unwrap();
    assert_eq!(started.trim(), "racing");

    let (mut read_inside, mut wrote, mut refused) = (0, 0, 0);
    let racing = tokio::time::timeout(Duration::from_secs(300), async {
        for i in 0..CALLS {
            match call(&pool, "read_text_file_snippet", json!({"path": "d/f.txt"})).await {
                Ok(read) => {
                    assert_eq!(read["content"], json!("inside"), "call {i} read {read}");
                    read_inside += 1;
                }
                Err(error) => {
                    assert!(
                        ["ValueError", "FileNotFoundError", "NotADirectoryError"]
                            .contains(&error.kind.type_name()),
                        "call {i}: {error}"
                    );
                    refused += 1;
                }
            }
            let written = call(
                &pool,
                "save_file",
                json!({"path": format!("d/w{i}.txt"), "content": "w"}),
            )
            .await;
            match written {
                Ok(_) => wrote += 1,
                Err(error) => {
                    assert!(
                        [
                            "ValueError",
                            "FileNotFoundError",
                            "NotADirectoryError",
                            "FileExistsError"
                        ]
                        .contains(&error.kind.type_name()),
                        "call {i}: {error}"
                    );
                    refused += 1;
                }
            }
        }
    })
    .await;
    let _ = racer.kill();
    let _ = racer.wait();
    racing.expect("the calls finish");
    let leaked: Vec<_> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        leaked,
        vec![std::ffi::OsString::from("f.txt")],
        "written outside"
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("f.txt")).unwrap(),
        "OUTSIDE"
    );
    // The race really ran both ways: some calls got through, some were refused.
    assert!(
        read_inside > 0 && wrote > 0,
        "{read_inside} reads, {wrote} writes"
    );
    eprintln!("{read_inside} reads and {wrote} writes inside, {refused} refused");
    pool.shutdown().await;
}
