//! mcpscore, the MCP community's server audit (PyPI `mcpscore`, in the venv
//! `scripts/test-deps` makes), on `toolpool serve` over stdio with the
//! bundled tools, as a user would run it: every rule passes but the
//! deliberate ones below, which the README names.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

/// Rules toolpool fails on purpose, and why.
const DELIBERATE: &[(&str, &str)] = &[
    (
        "server_websiteurl_present",
        "the project has no public website to name",
    ),
    (
        "capability_tools_list_changed",
        "without --watch the tool list never changes, so it is not declared",
    ),
    (
        "capability_resources_list_changed",
        "declared with --watch only: a reload is the change toolpool tells of (a tool registering a file is not announced)",
    ),
    (
        "readiness_2026_deprecated_features",
        "logging is deprecated on 2026-07-28 but served for the 2025-11-25 clients that use it",
    ),
];

#[test]
fn mcpscore_fails_no_rule_but_the_deliberate_ones() {
    let Some(python) = crate::mcp_python::venv_python(
        "TOOLPOOL_TEST_MCPSCORE_VENV",
        "target/pyvenv-mcpscore",
        "mcpscore",
    ) else {
        return;
    };
    let mcpscore = python.with_file_name("mcpscore");
    let cwd = tempfile::tempdir().unwrap();
    let session = cwd.path().join("session");
    let output = Command::new(&mcpscore)
        .args([
            "--json",
            "--no-config",
            "--stdio",
            env!("CARGO_BIN_EXE_toolpool"),
        ])
        .arg("--session-dir")
        .arg(&session)
        .arg("serve")
        .current_dir(cwd.path())
        .output()
        .expect("mcpscore runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("mcpscore's report is not JSON ({e}):\n{stderr}"));
    let failed = |results: &Value| -> Vec<String> {
        results
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["passed"] == Value::Bool(false))
            .filter_map(|r| r["rule_id"].as_str().map(str::to_string))
            .collect()
    };
    let mut failures: BTreeSet<String> = failed(&report["results"]).into_iter().collect();
    failures.extend(failed(&report["readiness"]["results"]));
    let deliberate: BTreeSet<String> = DELIBERATE
        .iter()
        .map(|(rule, _)| rule.to_string())
        .collect();
    let unexpected: Vec<&String> = failures.difference(&deliberate).collect();
    assert!(
        unexpected.is_empty(),
        "mcpscore rules failed: {unexpected:?}\n{stderr}"
    );
    assert!(
        report["score"].as_u64().is_some() && report["max_score"].as_u64().is_some(),
        "{report}"
    );
    eprintln!(
        "mcpscore: {}/{} (deliberately failed: {:?})",
        report["score"], report["max_score"], failures
    );
}
