//! Runs the shim's own unit tests (codec byte vectors, catalog schemas,
//! argument coercion) with the real interpreter.

use std::process::Command;

#[test]
fn python_shim_unit_tests_pass() {
    run_unit_tests("python3");
}

/// The same tests where the msgpack C extension is importable
/// (`scripts/test-deps` makes target/pyvenv-test): the shim's codec and
/// result encoding take their other branch there.
#[test]
fn python_shim_unit_tests_pass_with_the_msgpack_extension() {
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/target/pyvenv-test/bin/python");
    assert!(
        std::path::Path::new(python).exists(),
        "{python} is missing: run scripts/test-deps"
    );
    run_unit_tests(python);
}

fn run_unit_tests(python: &str) {
    let root = env!("CARGO_MANIFEST_DIR");
    let output = Command::new(python)
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
