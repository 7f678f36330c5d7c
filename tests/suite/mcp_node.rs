//! Runs the TypeScript SDK client flows (`tests/node_mcp/flows.mjs`): the
//! official `@modelcontextprotocol/sdk` client driving `toolpool serve` over
//! stdio and streamable HTTP. They need Node.js and the SDK that
//! `scripts/test-deps` installs (target/node-test); without them the tests
//! are skipped with a notice, except in CI (`CI` set), where they are
//! required. SDK 1.32 speaks protocol versions up to 2025-11-25.

use std::path::PathBuf;
use std::process::Command;

/// target/node-test, when Node.js and the SDK are there.
fn node_dir() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target/node-test");
    let has_node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let has_sdk = dir
        .join("node_modules/@modelcontextprotocol/sdk/package.json")
        .is_file();
    if has_node && has_sdk {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "no Node.js or no @modelcontextprotocol/sdk in {} (scripts/test-deps installs them)",
        dir.display()
    );
    eprintln!(
        "skipped: no Node.js or no @modelcontextprotocol/sdk in {} (run scripts/test-deps)",
        dir.display()
    );
    None
}

fn run_flows(transport: &str) {
    let Some(dir) = node_dir() else {
        return;
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // An ES module resolves packages from where it lies: run a copy beside
    // the SDK's node_modules.
    let script = dir.join(format!("flows-{transport}.mjs"));
    std::fs::copy(root.join("tests/node_mcp/flows.mjs"), &script).expect("copy flows.mjs");
    let output = Command::new("node")
        .arg(&script)
        .arg(transport)
        .env("TOOLPOOL_BIN", env!("CARGO_BIN_EXE_toolpool"))
        .env("TOOLPOOL_FIXTURES", root.join("tests/fixtures/functions"))
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "TypeScript SDK client flows over {transport} failed:\n{stdout}\n{stderr}"
    );
    for flow in [
        "list",
        "call",
        "structured result",
        "raised error",
        "timeout",
        "cancellation",
        "human prompt",
        "list change",
    ] {
        assert!(
            stdout.lines().any(|line| line == format!("ok {flow}")),
            "flow '{flow}' did not run:\n{stdout}"
        );
    }
}

#[test]
fn typescript_sdk_client_over_stdio() {
    run_flows("stdio");
}

#[test]
fn typescript_sdk_client_over_http() {
    run_flows("http");
}
