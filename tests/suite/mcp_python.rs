//! Runs the Python MCP client tests (`tests/python_mcp/`): the official
//! Python `mcp` package and fastmcp's client driving `toolpool serve`. They
//! need the virtual environments `scripts/test-deps` prepares
//! (target/pyvenv-test, or TOOLPOOL_TEST_VENV; for fastmcp with
//! `fastmcp-tasks`, target/pyvenv-fastmcp-tasks, or
//! TOOLPOOL_TEST_TASKS_VENV); without the package there they are skipped
//! with a notice, except in CI (`CI` set) or when the variable is set, where
//! they are required.

use std::path::PathBuf;
use std::process::Command;

/// The python of the venv `variable` names (else `default`, under the
/// crate), if it can import `package`.
pub(crate) fn venv_python(variable: &str, default: &str, package: &str) -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let chosen = std::env::var_os(variable);
    let required = chosen.is_some() || std::env::var_os("CI").is_some();
    let venv = chosen
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(default));
    let python = venv.join("bin/python");
    let has_mcp = Command::new(&python)
        .args(["-c", &format!("import {package}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if has_mcp {
        return Some(python);
    }
    assert!(
        !required,
        "{} cannot import the Python `{package}` package (scripts/test-deps installs it)",
        python.display()
    );
    eprintln!(
        "skipped: no Python `{package}` package in {} (run scripts/test-deps to install it)",
        venv.display()
    );
    None
}

/// A folder of the host outside /tmp, for tests of `--sandbox` (which gives
/// each worker a /tmp of its own): the target's, unless that is under /tmp
/// too (a CI checkout may be), then /var/tmp.
fn host_tmp() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    if target.starts_with("/tmp") {
        PathBuf::from("/var/tmp")
    } else {
        target
    }
}

/// Runs one module of tests/python_mcp with unittest.
fn run_python_module(module: &str) {
    run_python_module_with(module, &[]);
}

/// [`run_python_module`] with more environment variables.
fn run_python_module_with(module: &str, env: &[(&str, &std::ffi::OsStr)]) {
    let found = match module {
        "test_fastmcp" => venv_python("TOOLPOOL_TEST_VENV", "target/pyvenv-test", "fastmcp"),
        "test_fastmcp_tasks" => venv_python(
            "TOOLPOOL_TEST_TASKS_VENV",
            "target/pyvenv-fastmcp-tasks",
            "fastmcp_tasks",
        ),
        // The agent runtimes, each in a venv of its own (their pins of
        // `mcp` differ); the module checked is the one the test drives.
        "test_runtime_openai_agents" => venv_python(
            "TOOLPOOL_TEST_OPENAI_AGENTS_VENV",
            "target/pyvenv-openai-agents",
            "agents.mcp",
        ),
        "test_runtime_langchain" => venv_python(
            "TOOLPOOL_TEST_LANGCHAIN_VENV",
            "target/pyvenv-langchain",
            "langchain_mcp_adapters.client",
        ),
        "test_runtime_pydantic_ai" => venv_python(
            "TOOLPOOL_TEST_PYDANTIC_AI_VENV",
            "target/pyvenv-pydantic-ai",
            "pydantic_ai.mcp",
        ),
        // `google.adk.tools.mcp_tool` imports even without `mcp`.
        "test_runtime_adk" => venv_python(
            "TOOLPOOL_TEST_ADK_VENV",
            "target/pyvenv-adk",
            "google.adk.tools.mcp_tool.mcp_toolset",
        ),
        _ => venv_python("TOOLPOOL_TEST_VENV", "target/pyvenv-test", "mcp"),
    };
    let Some(python) = found else {
        return;
    };
    let root = env!("CARGO_MANIFEST_DIR");
    let output = Command::new(python)
        .args(["-m", "unittest", "-v", module])
        .current_dir(PathBuf::from(root).join("tests/python_mcp"))
        .env("TOOLPOOL_BIN", env!("CARGO_BIN_EXE_toolpool"))
        .env("TOOLPOOL_VERSION", env!("CARGO_PKG_VERSION"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("TOOLPOOL_TEST_HOST_TMP", host_tmp())
        .envs(env.iter().copied())
        .output()
        .expect("the venv's python runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "python MCP tests in {module} failed:\n{stdout}\n{stderr}"
    );
    assert!(stderr.contains("\nOK"), "{stderr}");
    eprintln!("{stdout}{stderr}");
}

#[test]
fn python_client_handshake_list_calls_and_errors() {
    run_python_module("test_basics");
}

#[test]
fn python_client_parallel_calls_cancellation_and_soak() {
    run_python_module("test_concurrency");
}

#[test]
fn python_client_workflow_node_and_streamable_http() {
    run_python_module("test_workflow_http");
}

#[test]
fn python_client_elicitation() {
    run_python_module("test_elicitation");
}

#[test]
fn python_client_receives_attachments_as_content() {
    run_python_module("test_attachments");
}

#[test]
fn python_client_http_front_end_refuses_and_limits() {
    run_python_module("test_http_front");
}

#[test]
fn python_client_structured_results_in_both_versions() {
    run_python_module("test_structured");
}

#[test]
fn python_client_reads_the_resources_functions_serve() {
    run_python_module("test_resources");
}

#[test]
fn python_client_hears_a_tools_log_records_from_its_level() {
    run_python_module("test_logs");
}

#[test]
fn python_client_hears_a_tools_progress_in_both_versions() {
    run_python_module("test_progress");
}

/// With a span current, the client sends its `traceparent`; the spans
/// reach the OTLP receiver of target/pyvenv-otel.
#[test]
fn python_client_trace_context_parents_the_server_spans() {
    let Some(otel) = crate::mcp_support::otlp::otel_python() else {
        return;
    };
    run_python_module_with(
        "test_traces",
        &[("TOOLPOOL_TEST_OTEL_PYTHON", otel.as_os_str())],
    );
}

#[test]
fn python_client_is_told_of_list_changes_in_both_versions() {
    run_python_module("test_list_changes");
}

#[test]
fn python_client_every_flow_over_stdio_and_http_in_both_versions() {
    run_python_module("test_official_flows");
}

#[test]
fn fastmcp_client_over_stdio_and_http_in_both_versions() {
    run_python_module("test_fastmcp");
}

#[test]
fn long_calls_become_tasks_on_2026_07_28_over_stdio_and_http() {
    run_python_module("test_tasks");
}

#[test]
fn python_client_sessions_of_their_own_and_health() {
    run_python_module("test_sessions");
}

#[test]
fn python_client_tenants_by_token_each_with_sessions_of_its_own() {
    run_python_module("test_tenants");
}

/// Three replicas behind HAProxy, round-robin without affinity: questions
/// and tasks reach the replica that holds them; a killed one's are named lost.
#[test]
fn python_client_replicas_route_their_state_behind_round_robin() {
    run_python_module("test_replicas");
}

/// OAuth access tokens (`--jwks`): each algorithm, each bad token refused
/// and named, the RFC 9728 metadata, the key set fetched again.
#[test]
fn python_client_jwt_access_tokens_checked_against_a_jwks() {
    run_python_module("test_jwt");
}

/// Two replicas behind HAProxy (scripts/test-deps installs it): 200
/// sessions x 10 calls, a replica killed, a replica drained.
#[test]
fn python_client_replicas_behind_haproxy() {
    run_python_module("test_load_balancer");
}

#[test]
fn fastmcp_tasks_client_drives_tasks_over_stdio_and_http() {
    run_python_module("test_fastmcp_tasks");
}

/// `serve --http --sandbox`: each session's workers see its own folders
/// only, a hostile tool cannot read another session's files nor list the
/// sessions root, a timeout kill keeps the session's files, requests that
/// name no session share the credential's (`anonymous`). Needs every sandbox
/// piece: skipped, with what the kernel lacks, where `toolpool --sandbox
/// doctor` fails, except under scripts/test-sandboxed
/// (`TOOLPOOL_TEST_SANDBOX`), which requires it.
#[test]
fn python_client_sandboxed_http_sessions() {
    if crate::common::kernel_cannot_sandbox() {
        return;
    }
    run_python_module("test_sandbox_http");
}

/// The agent runtimes people use, each driving toolpool through its own
/// tool objects (no model) over stdio and HTTP with default settings: list,
/// call, a file saved then read back, a raised error and a timeout whose
/// texts reach the runtime, and the next call.
#[test]
fn openai_agents_sdk_over_stdio_and_http() {
    run_python_module("test_runtime_openai_agents");
}

#[test]
fn langchain_mcp_adapters_over_stdio_and_http() {
    run_python_module("test_runtime_langchain");
}

#[test]
fn pydantic_ai_mcp_toolset_over_stdio_and_http() {
    run_python_module("test_runtime_pydantic_ai");
}

#[test]
fn google_adk_mcp_toolset_over_stdio_and_http() {
    run_python_module("test_runtime_adk");
}
