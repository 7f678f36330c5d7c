//! Validation against the catalog: a pure function, no Python involved,
//! that returns a [`ResolvedWorkflow`] or every problem of the file.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde_json::{json, Value};

use super::error::{push_did_you_mean, ConfigError};
use super::resolved::{NodeTools, OtherNode, ResolvedWorkflow, ToolSpec};
use super::workflow::{FunctionToolEntryConfig, Located, NodeConfig, ToolingKind, Workflow};
use super::yaml::{child, shorten};
use crate::catalog::{Catalog, FunctionSpec};

const ALL_SUFFIX: &str = ":All";

/// Checks a workflow against the catalog. On failure returns every problem of
/// the file — its [`Workflow::problems`] and those found here — sorted by
/// line (problems on one line keep the order they were found in).
pub fn validate(
    workflow: &Workflow,
    catalog: &Catalog,
) -> Result<ResolvedWorkflow, Vec<ConfigError>> {
    let mut errors = workflow.problems.clone();
    let mut resolved = ResolvedWorkflow {
        source: workflow.source.clone(),
        nodes: Vec::new(),
        other_nodes: Vec::new(),
    };
    let mut ids: HashMap<String, String> = HashMap::new();
    for node in &workflow.nodes {
        if !node.has_function_tooling() {
            if let Some(id) = &node.id {
                resolved.other_nodes.push(OtherNode {
                    id: id.value.clone(),
                    node_type: node.node_type.clone(),
                });
            }
            continue;
        }
        let id = match &node.id {
            Some(id) if !id.value.is_empty() => {
                if let Some(first) = ids.get(&id.value) {
                    errors.push(ConfigError::new(
                        child(&node.path, "id"),
                        id.line,
                        format!("node id '{}' is already used by {first}", id.value),
                    ));
                } else {
                    ids.insert(id.value.clone(), node.path.clone());
                }
                id.value.clone()
            }
            _ => {
                errors.push(ConfigError::new(
                    &node.path,
                    node.line,
                    "missing required key 'id' (an agent node with function tooling needs one)",
                ));
                String::new()
            }
        };
        resolved
            .nodes
            .push(resolve_node(node, id, catalog, &mut errors));
    }
    if errors.is_empty() {
        Ok(resolved)
    } else {
        errors.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
        Err(errors)
    }
}

/// Where an exposed tool name came from, for clash messages.
struct Exposed {
    tooling_path: String,
    function: String,
}

/// The error for a tool name another tooling of the node already exposes.
fn clash(exposed: &HashMap<String, Exposed>, tool_name: &str, function: &str) -> Option<String> {
    let other = exposed.get(tool_name)?;
    let origin = if other.function == function {
        String::new()
    } else {
        format!(", function '{}'", other.function)
    };
    Some(format!(
        "tool name '{tool_name}' clashes with the tool of the same name from {}{origin}; \
         give one of the toolings a different 'prefix'",
        other.tooling_path
    ))
}

fn resolve_node(
    node: &NodeConfig,
    id: String,
    catalog: &Catalog,
    errors: &mut Vec<ConfigError>,
) -> NodeTools {
    let modules = catalog.modules();
    let mut tools = Vec::new();
    let mut node_timeout = None;
    let mut first_function_tooling = true;
    // Exposed name → where it came from, across the node's toolings.
    let mut exposed: HashMap<String, Exposed> = HashMap::new();
    for tooling in &node.tooling {
        let ToolingKind::Function(function_tooling) = &tooling.kind else {
            continue;
        };
        let config = &function_tooling.config;
        let timeout = config
            .timeout
            .and_then(|s| Duration::try_from_secs_f64(s).ok());
        let grace = config
            .timeout_grace
            .and_then(|s| Duration::try_from_secs_f64(s).ok());
        if first_function_tooling {
            node_timeout = timeout;
            first_function_tooling = false;
        }
        let prefix = function_tooling.prefix.as_ref().map(|p| p.value.as_str());
        // Function name → the entry (relative path) that declared it first.
        let mut declared: HashMap<String, String> = HashMap::new();
        for entry in &config.tools {
            let Some(name) = &entry.name else { continue };
            let name_path = child(&entry.path, "name");
            let relative = entry
                .path
                .strip_prefix(&format!("{}.", config.path))
                .unwrap_or(&entry.path)
                .to_string();
            let functions = entry_functions(entry, name, &name_path, &modules, catalog, errors);
            let via_all = name.value.ends_with(ALL_SUFFIX);
            // (function, where it was declared first)
            let mut duplicates: Vec<(String, String)> = Vec::new();
            for function in functions {
                if let Some(first) = declared.get(&function) {
                    duplicates.push((function, first.clone()));
                    continue;
                }
                let first_at = if via_all {
                    format!("{relative}, through '{}'", name.value)
                } else {
                    relative.clone()
                };
                declared.insert(function.clone(), first_at);
                let Some(spec) = catalog.get(&function) else {
                    continue;
                };
                let tool_name = match prefix {
                    Some(p) => format!("{p}_{function}"),
                    None => function.clone(),
                };
                if let Some(message) = clash(&exposed, &tool_name, &function) {
                    errors.push(ConfigError::new(&name_path, name.line, message));
                    continue;
                }
                exposed.insert(
                    tool_name.clone(),
                    Exposed {
                        tooling_path: tooling.path.clone(),
                        function: function.clone(),
                    },
                );
                let (description, parameters) = described(entry, spec, via_all);
                tools.push(ToolSpec {
                    name: tool_name,
                    function,
                    description,
                    parameters,
                    // The tooling's timeout, else the tool's own.
                    timeout: timeout.or_else(|| catalog.own_timeout(&spec.name)),
                    timeout_grace: grace.or_else(|| catalog.own_timeout_grace(&spec.name)),
                    title: entry.title.clone(),
                    annotations: entry.annotations.clone(),
                });
            }
            let message = duplicates_message(&name.value, via_all, &duplicates);
            if let Some(message) = message {
                errors.push(ConfigError::new(&name_path, name.line, message));
            }
        }
    }
    NodeTools {
        id,
        timeout: node_timeout,
        tools,
    }
}

/// The functions an entry names: one, or every function of a module
/// (`module:All`, which may carry no overrides); none, with the error
/// recorded, for a name the catalog lacks.
fn entry_functions(
    entry: &FunctionToolEntryConfig,
    name: &Located<String>,
    name_path: &str,
    modules: &BTreeMap<&str, Vec<&FunctionSpec>>,
    catalog: &Catalog,
    errors: &mut Vec<ConfigError>,
) -> Vec<String> {
    if let Some(module) = name.value.strip_suffix(ALL_SUFFIX) {
        let module = module.trim();
        if !entry.overrides_present.is_empty() {
            errors.push(ConfigError::new(
                &entry.path,
                entry.line,
                format!(
                    "'{}' loads every function of the module as it is and cannot carry {}; \
                     list the functions one by one to override them",
                    name.value,
                    entry.overrides_present.join(", ")
                ),
            ));
        }
        match modules.get(module) {
            Some(functions) if !module.is_empty() => {
                functions.iter().map(|f| f.name.clone()).collect()
            }
            _ => {
                errors.push(ConfigError::new(
                    name_path,
                    name.line,
                    missing_module_message(module, catalog),
                ));
                Vec::new()
            }
        }
    } else {
        match catalog.get(&name.value) {
            Some(_) => vec![name.value.clone()],
            None => {
                errors.push(ConfigError::new(
                    name_path,
                    name.line,
                    missing_function_message(&name.value, catalog),
                ));
                Vec::new()
            }
        }
    }
}

/// The description and parameters the model sees for `spec` through
/// `entry`: the function's own through `:All`; with `auto_fill`, the
/// entry's where it has them (an empty one counts as none); else the
/// entry's as written.
fn described(
    entry: &FunctionToolEntryConfig,
    spec: &FunctionSpec,
    via_all: bool,
) -> (String, Value) {
    if via_all {
        (spec.description.clone(), spec.parameters.clone())
    } else if entry.auto_fill.unwrap_or(true) {
        // Fill only what the entry lacks (an empty description or
        // empty schema counts as lacking, as in the original runtime).
        let description = entry
            .description
            .clone()
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| spec.description.clone());
        let parameters = entry
            .parameters
            .clone()
            .filter(|p| p.as_object().is_some_and(|o| !o.is_empty()))
            .unwrap_or_else(|| spec.parameters.clone());
        (description, parameters)
    } else {
        (
            entry.description.clone().unwrap_or_default(),
            entry
                .parameters
                .clone()
                .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        )
    }
}

/// The error for the functions of entry `name` declared before in the same
/// tooling, if any.
fn duplicates_message(
    name: &str,
    via_all: bool,
    duplicates: &[(String, String)],
) -> Option<String> {
    match duplicates {
        [] => None,
        [(function, first)] if !via_all => Some(format!(
            "function '{function}' is declared more than once in this tooling (first at {first})"
        )),
        _ => Some(format!(
            "'{}' includes functions already declared in this tooling: {}",
            name,
            duplicates
                .iter()
                .map(|(function, first)| format!("'{function}' (at {first})"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn missing_function_message(name: &str, catalog: &Catalog) -> String {
    // `module:function` is the label `list` shows; the file stores the name.
    if let Some((module, function)) = name.rsplit_once(':') {
        let module = module.trim();
        let function = function.trim();
        if catalog.get(function).is_some_and(|f| f.module == module) {
            return format!(
                "function '{name}' not found under function directory: write the plain \
                 function name '{function}' ('module:function' is only the label `toolpool list` shows)"
            );
        }
        if function.eq_ignore_ascii_case("all") && catalog.modules().contains_key(module) {
            return format!(
                "function '{name}' not found under function directory (did you mean '{module}{ALL_SUFFIX}'?)"
            );
        }
    }
    let mut message = format!("function '{name}' not found under function directory");
    push_did_you_mean(
        &mut message,
        name,
        catalog.functions.iter().map(|f| f.name.as_str()),
        "",
    );
    push_import_errors(&mut message, catalog);
    message
}

fn missing_module_message(module: &str, catalog: &Catalog) -> String {
    if module.is_empty() {
        return format!("'{ALL_SUFFIX}' needs a module name before it, like 'file{ALL_SUFFIX}'");
    }
    if let Some(error) = catalog.errors.iter().find(|e| e.module == module) {
        return format!(
            "module '{module}' failed to import: {}",
            error.error.trim_end()
        );
    }
    let modules = catalog.modules();
    let mut message = format!("module '{module}' has no functions under function directory");
    push_did_you_mean(&mut message, module, modules.keys().copied(), ALL_SUFFIX);
    message
}

fn push_import_errors(message: &mut String, catalog: &Catalog) {
    if catalog.errors.is_empty() {
        return;
    }
    let shown: Vec<String> = catalog
        .errors
        .iter()
        .take(3)
        .map(|e| format!("{} ({})", e.module, shorten(e.error.trim_end(), 120)))
        .collect();
    let more = catalog.errors.len().saturating_sub(shown.len());
    message.push_str(&format!(
        "; modules that failed to load: {}{}",
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    ));
}
