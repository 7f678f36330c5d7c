//! Runs the Python API's tests (`tests/python_api`, pytest) the way its
//! users run it: `import toolpool` from the wheel installed in a virtual
//! environment (`scripts/test-deps` builds the wheel and installs it in
//! target/pyvenv-pyapi and target/pyvenv-chatdev), the binary being the
//! wheel's own. After a change to the Rust or Python side, run
//! `scripts/test-deps` again: it rebuilds and reinstalls the wheel.
//!
//! Without the environments the tests are skipped with a notice, except in
//! CI (`CI` set), where they are required.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::mcp_python::venv_python;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs pytest on `tests` (paths under tests/python_api) with `python`,
/// the plugin as its entry point registers it; asserts that some passed and
/// none failed.
fn pytest(python: &Path, tests: &[&str], pythonpath: Option<PathBuf>) {
    let mut command = Command::new(python);
    command
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"])
        .args(tests)
        .current_dir(root().join("tests/python_api"))
        // The wheel's own binary, found beside the venv's python.
        .env_remove("TOOLPOOL_BIN")
        .env_remove("TOOLPOOL_FUNCTIONS_DIR")
        .env_remove("MAC_FUNCTIONS_DIR")
        .env_remove("TOOLPOOL_WORKERS")
        .env_remove("TOOLPOOL_TIMEOUT")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    if let Some(path) = pythonpath {
        command.env("PYTHONPATH", path);
    }
    let output = command.output().expect("the venv's python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "pytest {tests:?} failed:\n{stdout}\n{stderr}"
    );
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(
        summary.contains(" passed") && !summary.contains("failed"),
        "{stdout}\n{stderr}"
    );
    eprintln!("{stdout}");
}

#[test]
fn python_api_calls_threads_asyncio_fork_context_and_the_plugin() {
    let Some(python) = venv_python(
        "TOOLPOOL_TEST_PYAPI_VENV",
        "target/pyvenv-pyapi",
        "toolpool._pool",
    ) else {
        return;
    };
    pytest(
        &python,
        &[
            "test_calls.py",
            "test_concurrency.py",
            "test_processes.py",
            "test_context.py",
            "test_plugin.py",
            "test_delegation.py",
            "test_tool_decorator.py",
        ],
        None,
    );
}

#[test]
fn chatdevs_own_tool_manager_delegates_its_function_tooling() {
    let Some(python) = venv_python(
        "TOOLPOOL_TEST_CHATDEV_VENV",
        "target/pyvenv-chatdev",
        "toolpool._pool",
    ) else {
        return;
    };
    let chatdev = root().join("target/chatdev");
    assert!(
        chatdev
            .join("runtime/node/agent/tool/tool_manager.py")
            .is_file(),
        "{} has no ChatDev runtime (scripts/test-deps unpacks it)",
        chatdev.display()
    );
    pytest(&python, &["test_chatdev.py"], Some(chatdev));
}
