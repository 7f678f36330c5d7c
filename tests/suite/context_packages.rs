//! `install_python_packages`: per-session packages every worker of the
//! session imports, present and future; bad specifiers refused before pip runs.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{build_demo_wheel, builder, call, python3_has_pip, sandbox_from_env};
use serde_json::{json, Value};
use toolpool::Pool;

fn site_packages_entries(session: &Path) -> Vec<String> {
    std::fs::read_dir(session.join("site-packages"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name != ".install.lock")
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn bad_package_specs_are_refused_without_running_anything() {
    let session = tempfile::tempdir().unwrap();
    let pool = sandbox_from_env(
        Pool::builder()
            .functions_dir(
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("functions/function_calling"),
            )
            .workers(1)
            .session_dir(session.path()),
    )
    .build()
    .await
    .unwrap();
    assert!(
        session.path().join("site-packages").is_dir(),
        "created at pool start"
    );
    for (packages, kind) in [
        (
            json!(["--index-url=https://example.invalid/simple", "requests"]),
            "ValueError",
        ),
        (json!(["-r", "requirements.txt"]), "ValueError"),
        (json!(["requests; rm -rf /"]), "ValueError"),
        (json!(["requests && curl evil"]), "ValueError"),
        (json!(["git+https://example.invalid/x.git"]), "ValueError"),
        (json!(["../local/package"]), "ValueError"),
        (json!(["/tmp/package.whl"]), "ValueError"),
        (json!(["$(touch /tmp/x)"]), "ValueError"),
        (json!([]), "ValueError"),
    ] {
        let started = Instant::now();
        let error = call(
            &pool,
            "install_python_packages",
            json!({"packages": packages}),
        )
        .await
        .expect_err("refused");
        assert_eq!(error.kind.type_name(), kind, "{packages}: {error}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{packages}: pip ran?"
        );
    }
    let error = call(
        &pool,
        "install_python_packages",
        json!({"packages": ["--upgrade"]}),
    )
    .await
    .unwrap_err();
    assert!(error.message.contains("options are not allowed"), "{error}");
    assert!(site_packages_entries(session.path()).is_empty());
    pool.shutdown().await;
}

/// Imports the package on both workers at once (each call waits a moment,
/// so the two calls overlap and cannot share a worker).
async fn import_on_both_workers(pool: &Pool) -> Vec<Result<Value, toolpool::ToolError>> {
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                call(
                    &pool,
                    "import_installed",
                    json!({"module": "tp_demo_pkg", "delay": 0.4}),
                )
                .await
            })
        })
        .collect();
    let mut results = Vec::new();
    for handle in calls {
        results.push(handle.await.unwrap());
    }
    results
}

#[tokio::test]
async fn installed_packages_are_importable_by_present_and_future_workers() {
    if !python3_has_pip() {
        eprintln!("skipped: python3 has no pip");
        return;
    }
    if crate::common::sandboxed_by_env() {
        // A host wheel folder and the repository's tools are outside the
        // sandbox's view; tests/suite/sandbox.rs installs through a local index.
        eprintln!("skipped under TOOLPOOL_TEST_SANDBOX: reads files outside the view");
        return;
    }
    let wheels = tempfile::tempdir().unwrap();
    build_demo_wheel(wheels.path());
    // Offline: pip finds the wheel in a local folder, told through its
    // environment (which workers only get when passed on).
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 2)
        .set_env([
            ("PIP_NO_INDEX".to_string(), "1".to_string()),
            (
                "PIP_FIND_LINKS".to_string(),
                wheels.path().display().to_string(),
            ),
        ])
        .build()
        .await
        .unwrap();

    // Both workers look for it first (and fail): what they cached must not hide it later.
    let before = import_on_both_workers(&pool).await;
    for result in &before {
        let error = result.as_ref().unwrap_err();
        assert_eq!(error.kind.type_name(), "ModuleNotFoundError", "{error}");
    }

    let installed = call(
        &pool,
        "install_packages_here",
        json!({"packages": ["tp-demo-pkg==1.0"]}),
    )
    .await
    .unwrap();
    assert_eq!(installed["ok"], json!(true), "{installed:#}");
    assert_eq!(installed["returncode"], json!(0));
    assert!(
        installed["stdout"]
            .as_str()
            .unwrap()
            .contains("tp-demo-pkg"),
        "{installed:#}"
    );

    let after = import_on_both_workers(&pool).await;
    let pids: HashSet<i64> = after
        .iter()
        .map(|result| {
            let value = result.as_ref().expect("importable after the install");
            assert_eq!(value["value"], json!(42));
            assert!(value["file"].as_str().unwrap().contains("site-packages"));
            value["pid"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(pids.len(), 2, "both workers, started before the install");
    pool.shutdown().await;

    // The next process on the same session has it too.
    let next = builder(&session, 1).build().await.unwrap();
    let value = call(&next, "import_installed", json!({"module": "tp_demo_pkg"}))
        .await
        .unwrap();
    assert_eq!(value["value"], json!(42));
    next.shutdown().await;
}
