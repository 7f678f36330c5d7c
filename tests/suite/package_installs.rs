//! `install_python_packages` against real pip: what pip would read as a
//! file, a path, a URL or an option is refused before pip runs (pip, told to
//! keep a log, never writes it), and a package a session installs cannot
//! shadow toolpool's compatibility modules `utils` and `entity`.
//!
//! pip is told what to do through its pools' environment (`set_env`), not
//! the test process's: other tests run beside it.

use std::path::Path;

use crate::common::{builder, call, python3_has_pip};
use serde_json::json;

/// A pure-Python wheel `name`-1.0 holding `files` (path, content), in `dir`.
fn build_wheel(dir: &Path, name: &str, files: &[(&str, &str)]) {
    let script = r#"
import base64, hashlib, json, sys, zipfile
out_dir, name, files = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
dist = name.replace("-", "_")
files = {path: data.encode() for path, data in files}
files[f"{dist}-1.0.dist-info/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()
files[f"{dist}-1.0.dist-info/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: toolpool-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
record = []
for path, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(data)}")
record.append(f"{dist}-1.0.dist-info/RECORD,,")
with zipfile.ZipFile(f"{out_dir}/{dist}-1.0-py3-none-any.whl", "w") as wheel:
    for path, data in files.items():
        wheel.writestr(path, data)
    wheel.writestr(f"{dist}-1.0.dist-info/RECORD", "\n".join(record) + "\n")
"#;
    let files: Vec<_> = files.iter().map(|(p, d)| json!([p, d])).collect();
    let status = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(dir)
        .arg(name)
        .arg(json!(files).to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_files_are_refused_before_pip_runs_and_installs_never_shadow_compat_modules() {
    if crate::common::sandboxed_by_env() {
        // A host wheel folder, pip's log and the repository's tools are
        // outside the sandbox's view; tests/suite/sandbox.rs installs sandboxed.
        eprintln!("skipped under TOOLPOOL_TEST_SANDBOX: reads files outside the view");
        return;
    }
    if !python3_has_pip() {
        eprintln!("skipped: python3 has no pip");
        return;
    }
    let wheels = tempfile::tempdir().unwrap();
    build_wheel(
        wheels.path(),
        "tp-shadow",
        &[
            ("utils/__init__.py", "VALUE = 'shadow'\n"),
            (
                "utils/function_catalog.py",
                "raise RuntimeError('shadow code ran')\n",
            ),
            ("entity/__init__.py", "VALUE = 'shadow'\n"),
            ("tp_shadow_marker.py", "VALUE = 'installed'\n"),
        ],
    );
    let logs = tempfile::tempdir().unwrap();
    let pip_log = logs.path().join("pip.log");
    // Offline: pip finds wheels in a local folder, and logs every run.
    let pip_env = [
        ("PIP_NO_INDEX", "1".to_string()),
        ("PIP_FIND_LINKS", wheels.path().display().to_string()),
        ("PIP_LOG", pip_log.display().to_string()),
    ]
    .map(|(name, value)| (name.to_string(), value));
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1)
        .set_env(pip_env.clone())
        .build()
        .await
        .unwrap();
    // A wheel in the workspace, where pip would find it by its file name.
    let workspace = session.path().join("code_workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::copy(
        wheels.path().join("tp_shadow-1.0-py3-none-any.whl"),
        workspace.join("evil-1.0-py3-none-any.whl"),
    )
    .unwrap();
    std::fs::copy(
        wheels.path().join("tp_shadow-1.0-py3-none-any.whl"),
        workspace.join("tp_shadow-1.0-py3-none-any.whl"),
    )
    .unwrap();
    let wheel_url = format!("file://{}/evil-1.0-py3-none-any.whl", workspace.display());
    for (spec, says) in [
        ("evil-1.0-py3-none-any.whl", "names a file"),
        ("tp_shadow-1.0-py3-none-any.whl", "names a file"),
        ("./evil-1.0-py3-none-any.whl", "is a path"),
        ("code_workspace/evil-1.0-py3-none-any.whl", "is a path"),
        ("evil.tar.gz", "names a file"),
        (wheel_url.as_str(), "is a URL"),
        ("file:evil-1.0-py3-none-any.whl", "is a URL"),
        ("git+https://example.invalid/evil.git", "is a URL"),
        ("evil @ https://example.invalid/evil.whl", "is a URL"),
        ("-e .", "pip option"),
        ("-r requirements.txt", "pip option"),
        ("--find-links=.", "pip option"),
        ("tp-shadow==1.zip", "names a file"),
        ("tp-shadow; os_name ==", "not a package specifier"),
        ("tp-shadow===1.0", "not a package specifier"),
    ] {
        let error = call(
            &pool,
            "install_packages_here",
            json!({"packages": ["tp-shadow", spec]}),
        )
        .await
        .expect_err(spec);
        assert_eq!(error.kind.type_name(), "ValueError", "{spec}: {error}");
        assert!(error.message.contains(says), "{spec}: {error}");
        assert!(!pip_log.exists(), "{spec}: pip ran");
    }
    assert!(!session.path().join("site-packages/utils").exists());

    // An index-style specifier (with extras, versions and a marker) runs pip,
    // which logs: the refusals above were refusals before pip.
    let installed = call(
        &pool,
        "install_packages_here",
        json!({"packages": ["tp-shadow [none] >=1.0, ==1.* ; python_version >= \"3\""]}),
    )
    .await
    .unwrap();
    assert_eq!(installed["ok"], json!(true), "{installed:#}");
    assert!(pip_log.exists(), "pip ran and logged");
    assert!(session
        .path()
        .join("site-packages/utils/__init__.py")
        .exists());
    pool.shutdown().await;

    // Workers started after the install import the package, but `utils` and
    // `entity` are still toolpool's compatibility modules.
    let next = builder(&session, 1).set_env(pip_env).build().await.unwrap();
    let marker = call(
        &next,
        "import_installed",
        json!({"module": "tp_shadow_marker"}),
    )
    .await
    .unwrap();
    assert_eq!(marker["value"], json!("installed"));
    for module in ["utils", "entity", "utils.function_catalog"] {
        let imported = call(&next, "import_installed", json!({"module": module}))
            .await
            .unwrap_or_else(|e| panic!("{module}: {e}"));
        let file = imported["file"].as_str().unwrap_or("");
        assert!(
            file.contains("/compat/") && !file.contains("site-packages"),
            "{module} comes from {file}"
        );
    }
    next.shutdown().await;
}
