//! What reaches a worker's environment from the command line: glob patterns
//! in `--pass-env`, and `--env-file` dotenv files (real tool folders read
//! their API keys and settings from the environment).

use crate::common::{run, toolpool_command};
use serde_json::Value;

fn worker_env(args: &[&str], envs: &[(&str, &str)]) -> crate::common::Run {
    let session = tempfile::tempdir().unwrap();
    let mut command = toolpool_command(session.path());
    command.args(args).args(["call", "env"]);
    for (name, value) in envs {
        command.env(name, value);
    }
    run(&mut command)
}

#[test]
fn pass_env_takes_glob_patterns_and_env_files_set_variables() {
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("tools.env");
    std::fs::write(
        &env_file,
        "# keys for the tools\nJINA_API_KEY='from file'\nexport TEMP_CODE_DIR=/tmp/code\nSERPER_DEV_API_KEY=file-wins\n",
    )
    .unwrap();
    let out = worker_env(
        &[
            "--pass-env",
            "SERPER_*",
            "--env-file",
            env_file.to_str().unwrap(),
        ],
        &[
            ("SERPER_DEV_API_KEY", "inherited"),
            ("SERPER_OTHER", "passed"),
            ("UNRELATED_SECRET", "kept back"),
            ("PYTHONSTARTUP", "/tmp/never"),
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let env: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(env["SERPER_OTHER"], "passed");
    assert_eq!(env["SERPER_DEV_API_KEY"], "file-wins");
    assert_eq!(env["JINA_API_KEY"], "from file");
    assert_eq!(env["TEMP_CODE_DIR"], "/tmp/code");
    assert!(env.get("UNRELATED_SECRET").is_none(), "{env}");
    assert!(env.get("PYTHONSTARTUP").is_none(), "{env}");
}

#[test]
fn a_bad_env_file_is_a_usage_error_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("bad.env");
    std::fs::write(&env_file, "GOOD=1\nthis is not a variable\n").unwrap();
    let out = worker_env(&["--env-file", env_file.to_str().unwrap()], &[]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    let expected = format!("{}:2: expected NAME=value", env_file.display());
    assert!(out.stderr.contains(&expected), "{}", out.stderr);
    let missing = worker_env(&["--env-file", "/no/such/file.env"], &[]);
    assert_eq!(missing.code, 2);
    assert!(
        missing
            .stderr
            .contains("cannot read the env file /no/such/file.env"),
        "{}",
        missing.stderr
    );
}
