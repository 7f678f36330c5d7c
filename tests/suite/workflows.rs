//! Workflow files (docs/workflows.md): golden tests over `tests/fixtures/workflows/`,
//! then the library API, then `resolve`/`check` and node timeouts end to end.
//!
//! The golden tests need no Python: they validate against a catalog snapshot
//! (`catalog.json`). Each `<name>.yaml` has a `<name>.expected` beside it — the
//! resolved tools as `resolve` prints them, or every error, one a line.
//! `UPDATE_GOLDEN=1 cargo test --test workflows` rewrites them; review the diff.

use std::path::{Path, PathBuf};

use crate::common::{run, toolpool_command, Run};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolpool::workflow::nodes_json;
use toolpool::workflow::{validate, ToolFormat, Workflow, WorkflowError};
use toolpool::{Catalog, ErrorKind};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workflows")
}

fn catalog() -> Catalog {
    let text = std::fs::read_to_string(fixtures().join("catalog.json")).expect("catalog.json");
    let reply: Value = serde_json::from_str(&text).expect("catalog.json is JSON");
    Catalog::from_worker("/functions".into(), reply).expect("catalog.json is a catalog")
}

/// What a fixture resolves to, as text: the JSON `resolve` prints (pool
/// default 60 s), or every error, one a line.
fn outcome(name: &str, catalog: &Catalog) -> String {
    let path = fixtures().join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&path).expect("fixture exists");
    // Named by file name only, so the goldens do not depend on the checkout.
    let workflow = match Workflow::parse(&text, &format!("{name}.yaml")) {
        Ok(workflow) => workflow,
        Err(error) => return format!("{error}\n"),
    };
    match validate(&workflow, catalog) {
        Ok(resolved) => {
            let json = resolved.to_json(Duration::from_secs(60), ToolFormat::Json);
            format!("{}\n", serde_json::to_string_pretty(&json).expect("json"))
        }
        Err(errors) => errors.iter().map(|e| format!("{e}\n")).collect(),
    }
}

fn golden(name: &str) -> String {
    golden_with(name, &catalog())
}

fn golden_with(name: &str, catalog: &Catalog) -> String {
    let actual = outcome(name, catalog);
    let expected_path = fixtures().join(format!("{name}.expected"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&expected_path, &actual).expect("write golden");
    }
    let expected = std::fs::read_to_string(&expected_path).unwrap_or_else(|_| {
        panic!(
            "{} missing; run with UPDATE_GOLDEN=1",
            expected_path.display()
        )
    });
    assert_eq!(
        actual, expected,
        "\n{name}.yaml no longer gives {name}.expected (UPDATE_GOLDEN=1 rewrites it)\n--- actual:\n{actual}"
    );
    actual
}

/// A fixture parsed under its file name (as the goldens name it).
fn load(name: &str) -> Workflow {
    let text = std::fs::read_to_string(fixtures().join(name)).expect("fixture exists");
    Workflow::parse(&text, name).unwrap_or_else(|e| panic!("{e}"))
}

fn resolved_json(text: &str) -> Value {
    serde_json::from_str(text).expect("resolved output is JSON")
}

fn tool_names(node: &Value) -> Vec<&str> {
    node["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect()
}

// --- golden: workflows that resolve ---------------------------------------------

#[test]
fn runtime_shaped_workflow_resolves_only_agent_nodes_with_function_tooling() {
    let out = resolved_json(&golden("research_team"));
    let ids: Vec<&str> = out["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    // Planner is an agent without tooling; Task, Gather, LoopGate are not agents;
    // the Critic lives in an inline subgraph.
    assert_eq!(ids, ["Researcher", "Review/Critic", "Writer"]);
    assert_eq!(out["nodes"][0]["timeout"], json!(20));
    assert_eq!(
        out["nodes"][2]["timeout"],
        json!(60),
        "null → the pool's default"
    );
}

#[test]
fn module_all_expands_in_place_in_sorted_order() {
    let out = resolved_json(&golden("all_expansion"));
    assert_eq!(
        tool_names(&out["nodes"][0]),
        [
            "web_search",
            "add",
            "divide",
            "multiply",
            "describe_available_files",
            "slugify",
            "to_upper",
            "load_file"
        ]
    );
}

#[test]
fn auto_fill_fills_only_what_is_missing_and_false_takes_the_entry_as_written() {
    let out = resolved_json(&golden("overrides"));
    let tools = &out["nodes"][0]["tools"];
    assert_eq!(tools[1]["description"], "Read one file of the draft.");
    assert_eq!(tools[1]["parameters"]["required"], json!(["path"]));
    assert_eq!(tools[2]["description"], "Write text to a workspace file.");
    assert_eq!(
        tools[2]["parameters"]["properties"]["path"]["description"],
        "where to save"
    );
    assert_eq!(
        tools[3]["description"],
        "Load a workspace file and register it as an attachment."
    );
    assert_eq!(tools[4]["description"], "");
    assert_eq!(
        tools[4]["parameters"],
        json!({"type": "object", "properties": {}})
    );
    assert_eq!(
        tools[5]["parameters"],
        json!({"type": "object", "properties": {}})
    );
}

#[test]
fn prefixes_rename_tools_and_each_tool_keeps_its_toolings_timeout() {
    let out = resolved_json(&golden("prefixes"));
    let node = &out["nodes"][0];
    assert_eq!(
        tool_names(node),
        ["quick_web_search", "quick_add", "deep_web_search", "add"]
    );
    let timeouts: Vec<&Value> = node["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["timeout"])
        .collect();
    assert_eq!(
        timeouts,
        [&json!(2.5), &json!(2.5), &json!(300), &json!(60)]
    );
    assert_eq!(
        node["timeout"],
        json!(2.5),
        "the node's timeout is its first tooling's"
    );
    assert_eq!(node["tools"][2]["function"], "web_search");
}

#[test]
fn yaml_anchors_merge_keys_and_yaml11_words_behave() {
    let out = resolved_json(&golden("yaml_edge_cases"));
    assert_eq!(
        tool_names(&out["nodes"][0]),
        ["describe_available_files", "read_text_file"]
    );
    assert_eq!(
        out["nodes"][0]["timeout"],
        json!(15),
        "merged from the anchor"
    );
    let properties = &out["nodes"][1]["tools"][0]["parameters"]["properties"];
    assert_eq!(
        properties["answer"]["enum"],
        json!(["YES", "NO", "yes", "no", "on", "off", "y", "n"])
    );
    assert_eq!(properties["strict"]["default"], json!(true));
    assert_eq!(
        properties["count"]["default"],
        json!("10"),
        "quoted stays a string"
    );
    assert_eq!(properties["norway"]["const"], json!("NO"));
}

// --- golden: workflows with errors -----------------------------------------------

#[test]
fn unknown_functions_are_named_with_close_matches() {
    let out = golden("unknown_function");
    assert!(out.contains(
        "nodes[0].config.tooling[0].config.tools[1].name: function 'ad' not found under function directory (did you mean 'add'?) (line 10)\n"
    ), "{out}");
}

#[test]
fn unknown_function_names_the_modules_that_failed_to_import() {
    let mut catalog = catalog();
    catalog.errors.push(toolpool::catalog::LoadError {
        module: "broken".into(),
        file: "broken.py".into(),
        error: "ModuleNotFoundError: No module named 'requests'".into(),
    });
    let out = outcome("unknown_function", &catalog);
    assert!(out.contains(
        "tools[4].name: function 'completely_unrelated' not found under function directory; \
         modules that failed to load: broken (ModuleNotFoundError: No module named 'requests') (line 13)"
    ), "{out}");
}

#[test]
fn module_all_with_overrides_is_refused_naming_the_keys() {
    let out = golden("all_with_overrides");
    assert!(out.contains(
        "nodes[0].config.tooling[0].config.tools[0]: 'math:All' loads every function of the module as it is \
         and cannot carry description, auto_fill; list the functions one by one to override them (line 9)\n"
    ), "{out}");
    assert!(out.contains("tools[1].name: module 'maths' has no functions under function directory (did you mean 'math:All'?)"), "{out}");
}

#[test]
fn duplicates_are_refused_also_through_module_all() {
    let out = golden("duplicates");
    assert_eq!(out.lines().count(), 4, "{out}");
}

#[test]
fn an_empty_prefix_is_no_prefix() {
    let out = resolved_json(&golden("empty_prefix"));
    assert_eq!(tool_names(&out["nodes"][0]), ["save_file", "add"]);
}

#[test]
fn prefix_clashes_and_bad_prefixes_are_refused() {
    let out = golden("prefix_clash");
    assert!(out.contains(
        "nodes[0].config.tooling[1].config.tools[0].name: tool name 'calc_add' clashes with the tool of the same name \
         from nodes[0].config.tooling[0]; give one of the toolings a different 'prefix' (line 15)"
    ), "{out}");
}

#[test]
fn wrong_types_and_missing_keys_are_each_reported() {
    let out = golden("bad_types");
    assert!(out.contains("nodes[0].config.tooling[0].config.tools[0].auto_fill: must be true or false, got a string ('yes')"), "{out}");
    assert!(
        out.contains(
            "nodes[0].config.tooling[0].config.timeout: must be a number of seconds or null"
        ),
        "{out}"
    );
    assert!(
        out.contains("nodes[0].config.tooling[1].config.tools: must list at least one tool"),
        "{out}"
    );
}

#[test]
fn unknown_keys_in_function_tooling_are_errors_and_the_rest_is_left_alone() {
    let out = golden("unknown_keys");
    assert_eq!(out.lines().count(), 5, "{out}");
    assert!(out.contains(
        "nodes[0].config.tooling[0].config.tools[0].descripton: unknown key 'descripton' (did you mean 'description'?); \
         expected one of: name, description, parameters, auto_fill, title, annotations (line 16)"
    ), "{out}");
    assert!(
        !out.contains("some_runtime_option")
            && !out.contains("whatever_mcp_wants")
            && !out.contains("Human")
    );
}

#[test]
fn several_errors_in_one_file_are_reported_together_in_line_order() {
    let out = golden("many_errors");
    let lines: Vec<usize> = out
        .lines()
        .map(|l| {
            let n = l.rsplit_once("(line ").expect("every error has a line").1;
            n.trim_end_matches(')').parse().expect("line number")
        })
        .collect();
    assert_eq!(lines.len(), 6, "{out}");
    assert!(lines.windows(2).all(|w| w[0] <= w[1]), "{out}");
}

#[test]
fn agent_nodes_with_function_tooling_need_unique_ids() {
    golden("node_ids");
}

#[test]
fn duplicate_yaml_keys_are_refused_with_their_line() {
    assert_eq!(
        golden("duplicate_keys"),
        "duplicate_keys.yaml: not valid YAML at line 10, column 17: duplicate mapping key `name` is not allowed here\n"
    );
}

#[test]
fn yaml_syntax_errors_name_the_file_and_line() {
    let out = golden("syntax_error");
    assert!(
        out.starts_with("syntax_error.yaml: not valid YAML at line 9"),
        "{out}"
    );
}

#[test]
fn an_alias_bomb_is_refused_quickly() {
    let started = Instant::now();
    let result = Workflow::load(fixtures().join("alias_bomb.yaml"));
    let elapsed = started.elapsed();
    // A bound that only a guard meets (without one the expansion takes
    // minutes and gigabytes), loose enough for a debug build on a busy machine.
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
    match result {
        Err(WorkflowError::Yaml { message, .. }) => {
            assert!(message.contains("alias bomb"), "{message}")
        }
        other => panic!("expected a YAML error, got {other:?}"),
    }
    golden("alias_bomb");
}

#[test]
fn nesting_too_deep_is_refused_not_a_stack_overflow() {
    let out = golden("too_deep");
    assert!(out.starts_with("too_deep.yaml: not valid YAML"), "{out}");
}

#[test]
fn files_that_are_not_workflows_say_what_is_expected() {
    assert!(golden("not_a_workflow").contains("a workflow file is a mapping with a 'nodes' list"));
    assert!(golden("no_nodes").starts_with("graph: missing required key 'nodes'"));
    assert!(golden("empty").contains("got null"));
}

#[test]
fn every_fixture_has_a_golden() {
    for entry in std::fs::read_dir(fixtures()).expect("fixtures dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "yaml") {
            assert!(
                path.with_extension("expected").exists(),
                "{} has no .expected golden",
                path.display()
            );
        }
    }
}

// --- files that cannot be read -------------------------------------------------

#[test]
fn a_missing_file_is_named() {
    let error = Workflow::load("/no/such/workflow.yaml").unwrap_err();
    assert_eq!(
        error.to_string(),
        "workflow file /no/such/workflow.yaml does not exist"
    );
}

#[test]
fn an_unreadable_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let error = Workflow::load(dir.path()).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "cannot read workflow file {}: it is a directory",
            dir.path().display()
        )
    );
    let binary = dir.path().join("binary.yaml");
    std::fs::write(&binary, b"nodes: \xff\xfe\n").unwrap();
    let error = Workflow::load(&binary).unwrap_err();
    assert!(error.to_string().contains("is not UTF-8 text"), "{error}");
}

// --- the library API -------------------------------------------------------------

#[test]
fn node_tools_are_looked_up_by_id_with_helpful_errors() {
    let resolved = load("research_team.yaml").resolve(&catalog()).unwrap();
    let writer = resolved.node_tools("Writer").unwrap();
    assert_eq!(writer.tools.len(), 2);
    assert_eq!(writer.tool("save_file").unwrap().function, "save_file");
    assert_eq!(
        writer.openai_tools()[0]["function"]["name"],
        "describe_available_files"
    );

    let error = resolved.node_tools("Writr").unwrap_err().to_string();
    assert_eq!(
        error,
        "research_team.yaml: no node 'Writr' (did you mean 'Writer'?); nodes with function tooling: Researcher, Review/Critic, Writer"
    );
    let error = resolved.node_tools("Planner").unwrap_err().to_string();
    assert_eq!(
        error,
        "research_team.yaml: node 'Planner' has no function tooling"
    );
    let error = resolved.node_tools("Gather").unwrap_err().to_string();
    assert_eq!(
        error,
        "research_team.yaml: node 'Gather' has no function tooling (it is a 'passthrough' node; only agent nodes carry tooling)"
    );
}

#[test]
fn invalid_workflow_error_lists_every_problem() {
    let error = load("duplicates.yaml").resolve(&catalog()).unwrap_err();
    let text = error.to_string();
    assert!(
        text.starts_with("duplicates.yaml: 4 errors\n  nodes[0]"),
        "{text}"
    );
    let WorkflowError::Invalid { errors, .. } = error else {
        panic!("Invalid expected")
    };
    assert_eq!(errors.len(), 4);
}

#[test]
fn openai_format_prints_openai_tool_entries() {
    let resolved = load("prefixes.yaml").resolve(&catalog()).unwrap();
    let node = resolved.node_tools("Operator").unwrap();
    let out = nodes_json(
        std::iter::once(node),
        Duration::from_secs(60),
        ToolFormat::OpenAi,
    );
    assert_eq!(out["nodes"][0]["timeout"], json!(2.5));
    assert_eq!(
        out["nodes"][0]["tools"][0],
        json!({"type": "function", "function": {"name": "quick_web_search", "description": "Search the web.",
               "parameters": catalog().get("web_search").unwrap().parameters}})
    );
}

// --- end to end: the pool and the binary (need python3) -----------------------------

fn e2e(name: &str) -> PathBuf {
    fixtures().join("e2e").join(name)
}

#[tokio::test]
async fn a_node_timeout_kills_a_slow_tool() {
    let (pool, _session) = crate::common::pool(1).await;
    let resolved = Workflow::load(e2e("agents.yaml"))
        .unwrap()
        .resolve(&pool.catalog())
        .unwrap_or_else(|e| panic!("{e}"));
    let sleeper = resolved.node_tools("Sleeper").unwrap();
    assert_eq!(sleeper.timeout, Some(Duration::from_secs(1)));

    let started = Instant::now();
    let error = sleeper
        .invoke(&pool, "slow_sleep", json!({"seconds": 30}))
        .await
        .expect_err("the node's 1 s timeout kills the call");
    let elapsed = started.elapsed();
    assert!(error.is_timeout(), "{error}");
    assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
    assert!(
        elapsed < Duration::from_secs(10),
        "the pool's 30 s default was used: {elapsed:?}"
    );
    let text = error.to_string();
    assert!(
        text.starts_with("Tool slow_sleep error: TimeoutError: "),
        "{text}"
    );
    crate::common::assert_serves(&pool).await;

    // The same function under another node, whose timeout is the pool's 30 s,
    // runs past 1 s.
    let calculator = resolved.node_tools("Calculator").unwrap();
    assert_eq!(calculator.timeout, Some(Duration::from_secs(5)));
    let slept = calculator
        .invoke(&pool, "sleep", json!({"seconds": 1.2}))
        .await;
    assert!(slept.is_ok(), "{slept:?}");
    pool.shutdown().await;
}

#[tokio::test]
async fn node_tools_call_the_real_function_behind_a_prefix() {
    let (pool, _session) = crate::common::pool(1).await;
    let resolved = Workflow::load(e2e("agents.yaml"))
        .unwrap()
        .resolve(&pool.catalog())
        .unwrap_or_else(|e| panic!("{e}"));
    let calculator = resolved.node_tools("Calculator").unwrap();
    let sum = calculator
        .invoke(&pool, "add", json!({"a": 2, "b": 40}))
        .await;
    assert_eq!(sum.unwrap(), json!(42));
    let nested = calculator
        .invoke(&pool, "nested_tool", json!({"x": 3}))
        .await;
    assert!(nested.is_ok(), "{nested:?}");

    let sleeper = resolved.node_tools("Sleeper").unwrap();
    let error = sleeper
        .invoke(&pool, "add", json!({"a": 1, "b": 2}))
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::NotFound);
    assert_eq!(
        error.to_string(),
        "Tool add error: NotFound: tool 'add' is not configured for node 'Sleeper'"
    );
    pool.shutdown().await;
}

fn toolpool(args: &[&str]) -> Run {
    let session = tempfile::tempdir().unwrap();
    run(toolpool_command(session.path()).args(args))
}

fn arg(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

#[test]
fn resolve_prints_each_agent_nodes_tools() {
    let file = e2e("agents.yaml");
    let run = toolpool(&["resolve", arg(&file)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out: Value = serde_json::from_str(&run.stdout).expect("JSON on stdout");
    let nodes = out["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{out}");
    assert_eq!(nodes[0]["id"], "Calculator");
    assert_eq!(nodes[0]["timeout"], json!(5));
    assert_eq!(
        tool_names(&nodes[0]),
        ["add", "nested_greet", "nested_tool", "sleep"]
    );
    let add = &nodes[0]["tools"][0];
    assert_eq!(add["parameters"]["properties"]["a"]["type"], "integer");
    assert_eq!(add["function"], "add");
    assert_eq!(nodes[1]["id"], "Sleeper");
    assert_eq!(tool_names(&nodes[1]), ["slow_sleep", "slow_sleep_forever"]);
}

#[test]
fn resolve_one_node_in_openai_format() {
    let file = e2e("agents.yaml");
    let run = toolpool(&[
        "resolve",
        arg(&file),
        "--node",
        "Sleeper",
        "--format",
        "openai",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out: Value = serde_json::from_str(&run.stdout).expect("JSON on stdout");
    assert_eq!(out["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(out["nodes"][0]["timeout"], json!(1));
    let tool = &out["nodes"][0]["tools"][0];
    assert_eq!(tool["type"], "function");
    assert_eq!(tool["function"]["name"], "slow_sleep");
    assert!(
        tool["function"]["parameters"]["properties"]["seconds"].is_object(),
        "{tool}"
    );

    let run = toolpool(&["resolve", arg(&file), "--node", "Notes"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("node 'Notes' has no function tooling (it is a 'literal' node"),
        "{}",
        run.stderr
    );
}

#[test]
fn check_accepts_a_good_file() {
    let file = e2e("agents.yaml");
    let run = toolpool(&["check", arg(&file)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .ends_with("agents.yaml: ok (2 agent nodes with function tooling, 6 tools)\n"),
        "{}",
        run.stdout
    );
}

#[test]
fn check_prints_every_error_and_exits_2() {
    let file = e2e("broken.yaml");
    let run = toolpool(&["check", arg(&file)]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(
        run.stderr.contains("broken.yaml: 3 errors\n"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains(
        "  nodes[0].config.tooling[0].config.tools[1].name: function 'ad' not found under function directory (did you mean 'add'"
    ), "{}", run.stderr);
    assert!(run.stderr.contains("  nodes[0].config.tooling[0].config.timeout: must be a positive number of seconds, got 0 (line 11)"), "{}", run.stderr);
    assert!(run.stderr.contains("  nodes[1].config.tooling.config.tools[0].auto_fil: unknown key 'auto_fil' (did you mean 'auto_fill'?)"), "{}", run.stderr);
}

#[test]
fn check_refuses_unreadable_and_broken_yaml_without_starting_python() {
    let run = toolpool(&[
        "--python",
        "/nonexistent/python3",
        "check",
        "/no/such/file.yaml",
    ]);
    assert_eq!(run.code, 2);
    assert_eq!(
        run.stderr.trim_end(),
        "toolpool: workflow file /no/such/file.yaml does not exist"
    );

    let bomb = fixtures().join("alias_bomb.yaml");
    let run = toolpool(&["--python", "/nonexistent/python3", "check", arg(&bomb)]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("possible alias bomb"), "{}", run.stderr);
    assert!(run.elapsed < Duration::from_secs(15), "{:?}", run.elapsed);
}
