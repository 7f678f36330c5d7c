use std::sync::atomic::Ordering;

use super::*;

fn store() -> (tempfile::TempDir, AttachmentStore) {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("code_workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let workspace = workspace.canonicalize().unwrap();
    let store = AttachmentStore::open(&workspace, dir.path());
    (dir, store)
}

#[test]
fn registered_file_is_copied_hashed_and_persisted() {
    let (dir, store) = store();
    let workspace = dir.path().join("code_workspace");
    std::fs::write(workspace.join("a.txt"), b"hello").unwrap();
    let record = store
        .register_file(Path::new("a.txt"), RegisterOptions::default())
        .unwrap();
    assert_eq!(record.reference.size, Some(5));
    assert_eq!(
        record.reference.sha256.as_deref(),
        Some("2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
    );
    assert_eq!(record.reference.mime_type.as_deref(), Some("text/plain"));
    let local = PathBuf::from(record.reference.local_path.clone().unwrap());
    assert!(local.starts_with(
        workspace
            .canonicalize()
            .unwrap()
            .join("attachments")
            .join(record.id())
    ));
    assert_eq!(std::fs::read(&local).unwrap(), b"hello");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(store.manifest_path()).unwrap()).unwrap();
    assert_eq!(manifest[record.id()]["ref"]["name"], "a.txt");
    // A new store on the same session reads it back.
    let again = AttachmentStore::open(&workspace.canonicalize().unwrap(), dir.path());
    assert_eq!(again.get(record.id()), Some(record));
}

#[test]
fn paths_outside_the_workspace_are_refused() {
    let (dir, store) = store();
    let workspace = dir.path().join("code_workspace");
    std::fs::write(dir.path().join("secret.txt"), b"s").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), workspace.join("link")).unwrap();
    for path in ["../secret.txt", "link", "/etc/hostname", "../nope"] {
        let error = store
            .register_file(Path::new(path), RegisterOptions::default())
            .unwrap_err();
        assert_eq!(error.type_name(), "PermissionError", "{path}: {error}");
    }
    let error = store
        .register_file(Path::new("missing.txt"), RegisterOptions::default())
        .unwrap_err();
    assert_eq!(error.type_name(), "FileNotFoundError");
}

#[test]
fn deduplicate_returns_the_existing_record() {
    let (dir, store) = store();
    let workspace = dir.path().join("code_workspace");
    std::fs::write(workspace.join("a.txt"), b"same").unwrap();
    std::fs::write(workspace.join("b.txt"), b"same").unwrap();
    let first = store
        .register_file(Path::new("a.txt"), RegisterOptions::default())
        .unwrap();
    let options = RegisterOptions {
        deduplicate: true,
        ..Default::default()
    };
    let second = store.register_file(Path::new("b.txt"), options).unwrap();
    assert_eq!(first.id(), second.id());
    assert_eq!(store.list().len(), 1);
}

#[test]
fn unpersisted_records_stay_out_of_the_manifest() {
    let (dir, store) = store();
    let workspace = dir.path().join("code_workspace");
    std::fs::write(workspace.join("a.txt"), b"x").unwrap();
    let options = RegisterOptions {
        persist: false,
        copy_file: false,
        ..Default::default()
    };
    let record = store.register_file(Path::new("a.txt"), options).unwrap();
    assert!(store.get(record.id()).is_some());
    assert!(store.export_manifest().is_empty());
    assert_eq!(
        record.reference.local_path.as_deref(),
        Some(
            &*workspace
                .canonicalize()
                .unwrap()
                .join("a.txt")
                .to_string_lossy()
        )
    );
}

#[test]
fn bytes_get_a_safe_file_name() {
    let (_dir, store) = store();
    let options = RegisterOptions {
        display_name: Some("../../evil.txt".into()),
        ..Default::default()
    };
    let record = store.register_bytes(b"data", options).unwrap();
    let local = PathBuf::from(record.reference.local_path.clone().unwrap());
    assert!(local.starts_with(store.root()));
    assert_eq!(std::fs::read(local).unwrap(), b"data");
    let error = store
        .register_bytes(
            b"x",
            RegisterOptions {
                attachment_id: Some("../x".into()),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert_eq!(error.type_name(), "ValueError");
}

#[test]
fn another_process_writes_are_merged() {
    let (dir, store) = store();
    let workspace = dir.path().join("code_workspace").canonicalize().unwrap();
    let other = AttachmentStore::open(&workspace, dir.path());
    let a = store
        .register_bytes(b"a", RegisterOptions::default())
        .unwrap();
    let b = other
        .register_bytes(b"b", RegisterOptions::default())
        .unwrap();
    let c = store
        .register_bytes(b"c", RegisterOptions::default())
        .unwrap();
    let manifest = store.export_manifest();
    for record in [&a, &b, &c] {
        assert!(manifest.contains_key(record.id()));
    }
    assert!(other.get(c.id()).is_some());
}

fn manifest_with(record_id: &str, name: &str) -> String {
    serde_json::json!({record_id: {"ref": {"attachment_id": record_id, "name": name}, "kind": "file",
                                        "description": null, "extra": {}}})
        .to_string()
}

#[test]
fn a_manifest_where_earlier_versions_kept_it_is_moved_once() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("code_workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let workspace = workspace.canonicalize().unwrap();
    std::fs::write(
        workspace.join(MANIFEST_FILE),
        manifest_with("old-1", "a.txt"),
    )
    .unwrap();
    let store = AttachmentStore::open(&workspace, dir.path());
    assert!(!workspace.join(MANIFEST_FILE).exists());
    assert_eq!(
        store.manifest_path(),
        workspace.join("attachments").join(MANIFEST_FILE)
    );
    assert!(store.manifest_path().is_file());
    assert_eq!(
        store.get("old-1").unwrap().reference.name.as_deref(),
        Some("a.txt")
    );

    // One at the old place beside one at the new: merged, the new one's records kept.
    std::fs::write(
        workspace.join(MANIFEST_FILE),
        manifest_with("old-2", "b.txt"),
    )
    .unwrap();
    store
        .register_remote_file(
            "file-9",
            None,
            RegisterOptions {
                attachment_id: Some("new-1".into()),
                ..RegisterOptions::default()
            },
        )
        .unwrap();
    let reopened = AttachmentStore::open(&workspace, dir.path());
    assert!(!workspace.join(MANIFEST_FILE).exists());
    for id in ["old-1", "old-2", "new-1"] {
        assert!(reopened.export_manifest().contains_key(id), "{id}");
    }
}

#[test]
fn remote_files_get_provider_ids_and_unknown_ids_are_key_errors() {
    let (_dir, store) = store();
    let record = store
        .register_remote_file(
            "file-1",
            Some(10),
            RegisterOptions {
                display_name: Some("r.pdf".into()),
                ..RegisterOptions::default()
            },
        )
        .unwrap();
    assert_eq!(record.reference.local_path, None);
    store.update_remote_file_id(record.id(), "file-2").unwrap();
    let manifest = store.export_manifest();
    assert_eq!(manifest[record.id()]["ref"]["remote_file_id"], "file-2");
    let error = store.update_remote_file_id("nope", "x").unwrap_err();
    assert_eq!(
        (error.type_name(), error.to_string().as_str()),
        ("KeyError", "Attachment 'nope' not found")
    );
}

#[test]
fn ingested_records_copy_workspace_files_and_refuse_others() {
    let (dir, store) = store();
    let workspace = dir.path().join("code_workspace").canonicalize().unwrap();
    std::fs::write(workspace.join("up.txt"), b"upload").unwrap();
    let record: AttachmentRecord = serde_json::from_value(serde_json::json!({
            "ref": {"attachment_id": "up-1", "name": "up.txt",
                    "local_path": workspace.join("up.txt")}, "kind": "file"}))
    .unwrap();
    let ingested = store.ingest_record(record.clone(), true, true).unwrap();
    let copied = workspace.join("attachments").join("up-1").join("up.txt");
    assert_eq!(ingested.reference.local_path.as_deref(), copied.to_str());
    assert_eq!(std::fs::read(&copied).unwrap(), b"upload");

    let outside = dir.path().join("secret.txt");
    std::fs::write(&outside, b"secret").unwrap();
    let mut foreign = record;
    foreign.reference.local_path = Some(outside.to_string_lossy().into_owned());
    let error = store.ingest_record(foreign, true, true).unwrap_err();
    assert_eq!(error.type_name(), "PermissionError", "{error}");
}

#[test]
fn confine_keeps_only_files_inside_the_workspace() {
    let (dir, store) = store();
    let workspace = dir.path().join("code_workspace").canonicalize().unwrap();
    std::fs::write(workspace.join("in.txt"), b"x").unwrap();
    std::fs::write(dir.path().join("out.txt"), b"x").unwrap();
    std::os::unix::fs::symlink(dir.path().join("out.txt"), workspace.join("link.txt")).unwrap();
    assert_eq!(store.confine("in.txt"), Some(workspace.join("in.txt")));
    assert_eq!(
        store.confine(&workspace.join("in.txt").to_string_lossy()),
        Some(workspace.join("in.txt"))
    );
    assert_eq!(store.confine("link.txt"), None);
    assert_eq!(store.confine("../out.txt"), None);
    assert_eq!(store.confine("/etc/passwd"), None);
    assert_eq!(store.confine("."), None);
}

#[test]
fn reads_stay_beneath_the_workspace_while_a_directory_is_swapped_for_a_link() {
    let (dir, store) = store();
    let workspace = dir.path().join("code_workspace").canonicalize().unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(workspace.join("d")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(workspace.join("d/f.txt"), b"inside").unwrap();
    std::fs::write(outside.join("f.txt"), b"SECRET").unwrap();
    std::os::unix::fs::symlink(&outside, workspace.join("swap")).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A racing process would do this: swap the directory and the link, again and again.
    let racer = {
        let stop = stop.clone();
        let (a, b) = (
            std::ffi::CString::new(workspace.join("d").to_str().unwrap()).unwrap(),
            std::ffi::CString::new(workspace.join("swap").to_str().unwrap()).unwrap(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: two valid NUL-terminated paths; renameat2 only renames.
                unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    );
                }
            }
        })
    };
    let (mut inside, mut leaked) = (0, 0);
    for _ in 0..3000 {
        match store.read_beneath(Path::new("d/f.txt"), 1024).as_deref() {
            Some(b"inside") => inside += 1,
            Some(_) => leaked += 1,
            None => {}
        }
    }
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();
    assert_eq!(
        leaked, 0,
        "a read led outside the workspace ({inside} stayed inside)"
    );
    assert!(inside > 0, "no read succeeded at all");
}

#[test]
fn a_callback_parameter_of_the_wrong_type_is_a_type_error_naming_it() {
    use crate::context::methods;
    let (_dir, store) = store();
    let call = |method: &str, params: Value| {
        let Value::Object(params) = params else {
            panic!("an object")
        };
        let error = store.handle(method, params).unwrap_err();
        (error.type_name(), error.to_string())
    };
    assert_eq!(
        call(methods::REGISTER_FILE, serde_json::json!({"path": 5})),
        (
            "TypeError",
            "attachments.register_file: path: invalid type: integer `5`, expected a string".into()
        )
    );
    // The options the registrations share are named too.
    assert_eq!(
        call(
            methods::REGISTER_BYTES,
            serde_json::json!({"data_base64": "aGk=", "persist": "yes"})
        ),
        (
            "TypeError",
            "attachments.register_bytes: persist: invalid type: string \"yes\", expected a boolean"
                .into()
        )
    );
    assert_eq!(
        call(methods::GET, serde_json::json!({})),
        (
            "TypeError",
            "attachments.get: missing field `attachment_id`".into()
        )
    );
    assert_eq!(
        call(
            methods::INGEST_RECORD,
            serde_json::json!({"record": {"ref": {}}, "copy_file": 1})
        )
        .0,
        "TypeError"
    );
}
