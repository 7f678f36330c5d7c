use std::time::Duration;

use serde_json::json;

use super::*;
use crate::catalog::Catalog;

fn catalog() -> Catalog {
    let f = |module: &str, name: &str| {
        json!({"name": name, "module": module, "description": format!("{name} does things"),
                   "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
                   "file": format!("{module}.py"), "line": 1})
    };
    Catalog::from_worker(
        "/f".into(),
        json!({"functions": [f("math", "add"), f("math", "multiply"), f("file", "save_file"),
                                 f("file", "load_file"), f("slow", "sleep")],
                   "errors": [{"module": "broken", "file": "broken.py",
                               "error": "ModuleNotFoundError: No module named 'nope'"}]}),
    )
    .expect("catalog")
}

fn check(yaml: &str) -> Result<ResolvedWorkflow, Vec<String>> {
    let workflow = Workflow::parse(yaml, "test.yaml").map_err(|e| vec![e.to_string()])?;
    validate(&workflow, &catalog()).map_err(|errors| errors.iter().map(|e| e.to_string()).collect())
}

fn names(resolved: &ResolvedWorkflow) -> Vec<&str> {
    resolved.nodes[0]
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .collect()
}

#[test]
fn single_mapping_tooling_is_a_one_element_list() {
    let resolved = check(
            "nodes:\n- id: a\n  type: agent\n  config:\n    tooling:\n      type: function\n      config:\n        tools: [{name: add}]\n",
        )
        .expect("valid");
    assert_eq!(names(&resolved), ["add"]);
}

#[test]
fn all_expands_in_place_in_sorted_order() {
    let resolved = check(
            "nodes:\n- id: a\n  type: agent\n  config:\n    tooling:\n    - type: function\n      config:\n        tools: [{name: sleep}, {name: 'file:All'}, {name: add}]\n",
        )
        .expect("valid");
    assert_eq!(names(&resolved), ["sleep", "load_file", "save_file", "add"]);
}

#[test]
fn unknown_function_suggests_a_close_match_and_names_import_errors() {
    let errors = check(
            "nodes:\n- id: a\n  type: agent\n  config:\n    tooling:\n    - type: function\n      config:\n        tools:\n        - name: add\n        - name: ad\n",
        )
        .unwrap_err();
    assert_eq!(
            errors,
            ["nodes[0].config.tooling[0].config.tools[1].name: function 'ad' not found under function directory \
              (did you mean 'add'?); modules that failed to load: broken (ModuleNotFoundError: No module named 'nope') (line 10)"]
        );
}

#[test]
fn every_error_is_reported_at_once() {
    let errors = check(
            "nodes:\n- id: a\n  type: agent\n  config:\n    tooling:\n    - type: function\n      config:\n        timeout: soon\n        tools:\n        - {name: nope}\n        - {name: add, auto_fill: yes, colour: red}\n",
        )
        .unwrap_err();
    assert_eq!(errors.len(), 4, "{errors:#?}");
}

#[test]
fn non_agent_nodes_keep_their_own_keys() {
    let resolved = check(
            "graph:\n  nodes:\n  - {id: p, type: passthrough, config: {whatever: 1, tooling: junk}}\n  - {id: a, type: agent, config: {model: x, tooling: {type: function, config: {tools: [{name: add}]}}}}\n",
        )
        .expect("valid");
    assert_eq!(resolved.nodes.len(), 1);
    assert_eq!(resolved.other_nodes[0].id, "p");
}

#[test]
fn no_stays_a_string_in_schemas() {
    let resolved = check(
            "nodes:\n- id: a\n  type: agent\n  config:\n    tooling:\n      type: function\n      config:\n        tools:\n        - name: add\n          auto_fill: false\n          parameters: {type: object, properties: {c: {enum: [YES, NO, 'on']}}}\n",
        )
        .expect("valid");
    assert_eq!(
        resolved.nodes[0].tools[0].parameters["properties"]["c"]["enum"],
        json!(["YES", "NO", "on"])
    );
    assert_eq!(resolved.nodes[0].tools[0].description, "");
}

#[test]
fn duplicate_keys_are_yaml_errors_with_a_line() {
    let errors = check("nodes: []\nnodes: []\n").unwrap_err();
    assert_eq!(
            errors,
            ["test.yaml: not valid YAML at line 2, column 1: duplicate mapping key `nodes` is not allowed here"]
        );
}

#[test]
fn an_entry_gives_its_tool_a_title_and_behaviour_hints() {
    let resolved = check(
            "nodes:\n- id: a\n  type: agent\n  config:\n    tooling:\n      type: function\n      config:\n        tools:\n        - name: save_file\n          title: Save a draft\n          annotations: {destructiveHint: true, openWorldHint: false}\n        - name: add\n",
        )
        .expect("valid");
    let tools = &resolved.nodes[0].tools;
    assert_eq!(tools[0].title.as_deref(), Some("Save a draft"));
    let hints = tools[0].annotations.clone().expect("hints");
    assert_eq!(hints.destructive_hint, Some(true));
    assert_eq!(hints.open_world_hint, Some(false));
    assert_eq!(hints.read_only_hint, None);
    assert_eq!(
        (tools[1].title.as_ref(), tools[1].annotations.as_ref()),
        (None, None)
    );
}

#[test]
fn bad_titles_and_hints_are_named_with_their_path() {
    let errors = check(
            "nodes:\n- id: a\n  type: agent\n  config:\n    tooling:\n      type: function\n      config:\n        tools:\n        - name: add\n          title: 7\n          annotations: {readOnly: true, idempotentHint: maybe}\n        - {name: 'file:All', title: Files}\n",
        )
        .unwrap_err();
    let all = errors.join("\n");
    for expected in [
        "tools[0].title",
        "must be a non-empty string",
        "tools[0].annotations",
        "readOnly",
        "tools[0].annotations.idempotentHint",
        "must be true or false",
        "title",
    ] {
        assert!(all.contains(expected), "{expected} not in:\n{all}");
    }
    assert!(
        errors
            .iter()
            .any(|e| e.contains("tools[1]") && e.contains("title")),
        "{all}"
    );
}

#[test]
fn a_tooling_gives_its_tools_a_grace_after_their_timeout() {
    let resolved = check(
            "nodes:\n- id: a\n  type: agent\n  config:\n    tooling:\n      type: function\n      config:\n        timeout: 3\n        timeout_grace: 1.5\n        tools:\n        - name: add\n",
        )
        .expect("valid");
    let tool = &resolved.nodes[0].tools[0];
    assert_eq!(tool.timeout, Some(Duration::from_secs(3)));
    assert_eq!(tool.timeout_grace, Some(Duration::from_millis(1500)));
    let errors = check(
            "nodes:\n- id: a\n  type: agent\n  config:\n    tooling:\n      type: function\n      config:\n        timeout_grace: -1\n        tools:\n        - name: add\n",
        )
        .unwrap_err();
    assert_eq!(
        errors,
        ["nodes[0].config.tooling.config.timeout_grace: must be a positive number of seconds, got -1 (line 8)"]
    );
}
