//! Runs the shim's own unit tests (codec byte vectors, catalog schemas,
//! argument coercion) with the real interpreter.

use std::process::Command;

#[test]
fn python_shim_unit_tests_pass() {
    let root = env!("CARGO_MANIFEST_DIR");
    let output = Command::new("python3")
        .args([
            "-m",
            "unittest",
            "discover",
            "-s",
            "tests/python",
            "-t",
            "tests/python",
        ])
        .current_dir(root)
        .output()
        .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "python tests failed:\n{stderr}");
    assert!(stderr.contains("OK"), "{stderr}");
}
