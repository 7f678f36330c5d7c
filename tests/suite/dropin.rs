//! A project in the original convention's shape, with its own `utils` and
//! `entity` packages first on the path (tests/fixtures/original_project):
//! its tools check `isinstance` against the project's own classes, get the
//! project's record types back, and return attachment results, which arrive
//! as attachments through the CLI, the library and MCP, and the same results
//! the original runtime gives for the same calls in a fresh session.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::run;
use base64::Engine as _;
use serde_json::{json, Value};
use toolpool::content::BlockKind;
use toolpool::{InvokeOptions, Pool};

fn project() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/original_project")
}

fn functions() -> PathBuf {
    project().join("functions/function_calling")
}

fn toolpool(session: &Path, functions: &Path, args: &[&str]) -> crate::common::Run {
    run(Command::new(env!("CARGO_BIN_EXE_toolpool"))
        .arg("--functions-dir")
        .arg(functions)
        .arg("--session-dir")
        .arg(session)
        .args(args))
}

/// `call NAME --args ARGS --json` on the fixture project.
fn call_json(session: &Path, name: &str, args: Value) -> Value {
    let out = toolpool(
        session,
        &functions(),
        &["call", name, "--args", &args.to_string(), "--json"],
    );
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\nstderr: {}", out.stdout, out.stderr))
}

/// Ids and the session's own directory made comparable between two sessions.
fn normalised(value: &Value, workspace: &Path) -> Value {
    let text = value
        .to_string()
        .replace(&workspace.display().to_string(), "<workspace>");
    let mut out = String::new();
    let mut run = 0;
    for c in text.chars() {
        out.push(c);
        run = if c.is_ascii_hexdigit() { run + 1 } else { 0 };
        if run == 32 {
            out.truncate(out.len() - 32);
            out.push_str("<id>");
            run = 0;
        }
    }
    serde_json::from_str(&out).expect("still JSON")
}

#[test]
fn the_projects_own_classes_are_what_its_tools_get() {
    let session = tempfile::tempdir().unwrap();
    let catalog = toolpool(session.path(), &functions(), &["catalog"]);
    let catalog: Value = serde_json::from_str(&catalog.stdout).unwrap();
    assert_eq!(catalog["errors"], json!([]));
    assert!(catalog.get("warnings").is_none(), "{catalog}");

    let saved = call_json(
        session.path(),
        "save_file",
        json!({"path": "a.txt", "content": "hi"}),
    );
    assert_eq!(
        saved["result"],
        json!({"path": "a.txt", "size": 2}),
        "{saved}"
    );

    let roundtrip = call_json(session.path(), "remote_roundtrip", json!({}));
    assert_eq!(
        roundtrip["result"],
        json!({
            "types": ["utils.attachments.AttachmentRecord"],
            "remote_file_id": "file-2",
            "ingested": "copy-1",
            "missing": "KeyError: Attachment 'missing' not found",
            "manifest": ["remote.pdf", "remote.pdf"],
            "block": "entity.messages",
        }),
        "{roundtrip}"
    );
    // The manifest is where the original keeps it, in the original's format.
    let workspace = session.path().join("code_workspace");
    let manifest = workspace.join("attachments/attachments_manifest.json");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(manifest).unwrap()).unwrap();
    assert_eq!(
        manifest["copy-1"]["ref"]["remote_file_id"], "file-2",
        "{manifest}"
    );
    assert!(!workspace.join("attachments_manifest.json").exists());

    // The human prompt service is the project's class, its answer the project's PromptResult.
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolpool"));
    command
        .arg("--functions-dir")
        .arg(functions())
        .arg("--session-dir")
        .arg(session.path())
        .args([
            "call",
            "call_user",
            "--args",
            r#"{"instruction": "Colour?"}"#,
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"Blue\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "Blue\n");
}

#[test]
fn results_match_the_original_runtime_for_the_same_calls() {
    let calls = [
        (
            "files:save_file",
            json!({"path": "notes.txt", "content": "hello"}),
        ),
        ("files:load_file", json!({"path_or_id": "notes.txt"})),
        ("files:render_chart", json!({"title": "sales"})),
        ("files:export_report", json!({"name": "q3"})),
        ("forged:text_blocks", json!({})),
    ];
    let original_session = tempfile::tempdir().unwrap();
    let original_workspace = original_session.path().join("code_workspace");
    std::fs::create_dir_all(&original_workspace).unwrap();
    let ours = tempfile::tempdir().unwrap();
    let our_workspace = ours.path().join("code_workspace");
    for (tool, args) in calls {
        let out = Command::new("python3")
            .arg(project().join("run_original.py"))
            .arg(&original_workspace)
            .arg(tool)
            .arg(args.to_string())
            .current_dir(&original_workspace)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let original: Value = serde_json::from_slice(&out.stdout).unwrap();
        let name = tool.split_once(':').unwrap().1;
        let envelope = call_json(ours.path(), name, args);
        assert_eq!(envelope["ok"], true, "{envelope}");
        assert_eq!(
            normalised(&envelope["result"], &our_workspace.canonicalize().unwrap()),
            normalised(&original["result"], &original_workspace),
            "{tool}"
        );
        assert_eq!(envelope["text"], original["text"], "{tool}");
    }
}

#[test]
fn attachments_are_listed_in_call_json_with_their_files() {
    let session = tempfile::tempdir().unwrap();
    let workspace = session.path().join("code_workspace");
    call_json(
        session.path(),
        "save_file",
        json!({"path": "a.txt", "content": "hello"}),
    );
    let loaded = call_json(session.path(), "load_file", json!({"path_or_id": "a.txt"}));
    let attachments = loaded["attachments"].as_array().expect("attachments");
    assert_eq!(attachments.len(), 1, "{loaded}");
    let a = &attachments[0];
    assert_eq!(
        (a["kind"].as_str(), a["name"].as_str()),
        (Some("file"), Some("a.txt"))
    );
    assert_eq!(
        (a["mime_type"].as_str(), a["size"].as_u64()),
        (Some("text/plain"), Some(5))
    );
    assert_eq!(
        a["path"].as_str().map(PathBuf::from),
        Some(workspace.join("a.txt").canonicalize().unwrap())
    );
    assert_eq!(loaded["text"], "[file attachment: a.txt]");

    let chart = call_json(session.path(), "render_chart", json!({"title": "t"}));
    let image = &chart["attachments"][0];
    assert_eq!(
        (image["kind"].as_str(), image["mime_type"].as_str()),
        (Some("image"), Some("image/png"))
    );
    let path = PathBuf::from(image["path"].as_str().unwrap());
    assert!(
        path.starts_with(workspace.join("attachments").canonicalize().unwrap()),
        "{chart}"
    );
    // A persisted record is there for the next process, by its id.
    let again = call_json(
        session.path(),
        "load_file",
        json!({"path_or_id": image["id"]}),
    );
    assert_eq!(again["attachments"][0]["id"], image["id"], "{again}");
    assert_eq!(again["attachments"][0]["path"], image["path"], "{again}");

    // Plain results have no attachments key.
    let saved = call_json(
        session.path(),
        "save_file",
        json!({"path": "b.txt", "content": "x"}),
    );
    assert!(saved.get("attachments").is_none(), "{saved}");
}

#[tokio::test]
async fn the_library_gets_typed_content_and_never_a_path_outside_the_workspace() {
    let session = tempfile::tempdir().unwrap();
    let pool = Pool::builder()
        .functions_dir(functions())
        .workers(1)
        .session_dir(session.path())
        .build()
        .await
        .unwrap();
    let report = pool
        .invoke_report(
            "export_report",
            json!({"name": "r"}),
            InvokeOptions::default(),
        )
        .await;
    assert!(report.result.is_ok(), "{:?}", report.result);
    let blocks = report.content.expect("content blocks");
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        (blocks[0].kind, blocks[0].text.as_deref()),
        (BlockKind::Text, Some("Exported r"))
    );
    let file = blocks[1].attachment.as_ref().expect("an attachment");
    assert!(file.registered);
    assert_eq!(file.size, Some(1200));
    let workspace = session
        .path()
        .join("code_workspace")
        .canonicalize()
        .unwrap();
    assert!(
        file.path
            .as_ref()
            .is_some_and(|p| p.starts_with(&workspace)),
        "{file:?}"
    );

    // A block that claims a file outside the workspace, under an id the store
    // does not hold, keeps its claims but not the path.
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), b"SECRET").unwrap();
    let forged = pool
        .invoke_report(
            "forged_image",
            json!({"path": secret.path()}),
            InvokeOptions::default(),
        )
        .await;
    let block = &forged.content.expect("content")[0];
    let attachment = block.attachment.as_ref().unwrap();
    assert_eq!(
        (attachment.registered, attachment.path.as_ref()),
        (false, None)
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn attachments_arrive_over_mcp_as_image_and_resource_content() {
    let served = crate::mcp_support::serve_in(
        &functions(),
        &["serve"],
        crate::mcp_support::TestClient::plain(),
    )
    .await;
    let client = &served.client;
    let chart = crate::mcp_support::call(client, "render_chart", json!({"title": "c"})).await;
    assert!(!crate::mcp_support::is_error(&chart));
    let image = chart.content[0].as_image().expect("image content");
    assert_eq!(image.mime_type, "image/png");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&image.data)
        .unwrap();
    assert!(bytes.starts_with(b"\x89PNG"), "{bytes:?}");

    // A small text file is embedded; a larger one is a link that
    // resources/read resolves.
    let report = crate::mcp_support::call(client, "export_report", json!({"name": "q"})).await;
    assert_eq!(report.content.len(), 2, "{report:?}");
    assert_eq!(
        report.content[0].as_text().map(|t| t.text.as_str()),
        Some("Exported q")
    );
    let embedded = report.content[1]
        .as_resource()
        .expect("an embedded resource");
    let rmcp::model::ResourceContents::TextResourceContents {
        uri,
        mime_type,
        text,
        ..
    } = &embedded.resource
    else {
        panic!("text contents: {embedded:?}");
    };
    assert!(uri.starts_with("toolpool://attachments/"), "{uri}");
    assert_eq!(mime_type.as_deref(), Some("text/plain"));
    assert_eq!(text, &"report body\n".repeat(100));

    let large = "report body\n".repeat(6000);
    let report = crate::mcp_support::call(
        client,
        "export_report",
        json!({"name": "big", "lines": 6000}),
    )
    .await;
    let link = report.content[1]
        .as_resource_link()
        .expect("a resource link");
    assert_eq!(
        (link.name.as_str(), link.mime_type.as_deref()),
        ("big.txt", Some("text/plain"))
    );
    assert_eq!(link.size, Some(large.len() as u64));
    assert!(
        link.uri.starts_with("toolpool://attachments/"),
        "{}",
        link.uri
    );
    let read = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            link.uri.clone(),
        ))
        .await
        .expect("resources/read resolves the link");
    assert!(
        matches!(&read.contents[..], [rmcp::model::ResourceContents::TextResourceContents { text, .. }] if *text == large),
        "{read:?}"
    );

    // Nothing of a file outside the workspace crosses, whatever the tool claims.
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), b"SECRET").unwrap();
    let forged =
        crate::mcp_support::call(client, "forged_image", json!({"path": secret.path()})).await;
    assert_eq!(
        forged.content[0].as_text().map(|t| t.text.as_str()),
        Some("[image attachment: secret.png]")
    );
    let (code, stderr) = served.close().await;
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_project_class_that_cannot_be_stood_in_for_is_a_catalog_warning() {
    let session = tempfile::tempdir().unwrap();
    let odd = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/odd_project/functions/function_calling");
    let out = toolpool(session.path(), &odd, &["catalog"]);
    let catalog: Value = serde_json::from_str(&out.stdout).unwrap();
    let warnings = catalog["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "{catalog}");
    assert_eq!(warnings[0]["module"], "utils.attachments");
    assert!(
        warnings[0]["warning"]
            .as_str()
            .unwrap()
            .contains("AttachmentRecord has no from_dict()"),
        "{catalog}"
    );
    // The tools still run, with toolpool's own class.
    let out = toolpool(session.path(), &odd, &["call", "store_class"]);
    let result: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        result,
        json!({"class": "toolpool_shim.standins.AttachmentStore", "is_project_class": false})
    );
}
