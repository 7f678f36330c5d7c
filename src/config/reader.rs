//! Walks the YAML tree by hand into typed nodes, collecting every problem
//! of shape with its path and line instead of stopping at the first.

use serde_json::Value;

use super::error::{push_did_you_mean, ConfigError};
use super::workflow::{
    FunctionToolConfig, FunctionToolEntryConfig, FunctionTooling, Located, NodeConfig,
    ToolingConfig, ToolingKind,
};
use super::yaml::{child, Yaml, YamlValue};
use crate::catalog::ToolHints;

/// The tooling types an agent runtime knows. Only `function` is toolpool's;
/// the others are accepted and left to the runtime.
const TOOLING_TYPES: &[&str] = &["function", "mcp_remote", "mcp_local"];
const TOOLING_KEYS: &[&str] = &["type", "config", "prefix"];
const FUNCTION_CONFIG_KEYS: &[&str] = &["tools", "timeout", "timeout_grace", "auto_load"];
const ENTRY_KEYS: &[&str] = &[
    "name",
    "description",
    "parameters",
    "auto_fill",
    "title",
    "annotations",
];
/// The keys a `module:All` entry may not carry, in the order they are named.
const OVERRIDE_KEYS: &[&str] = &[
    "description",
    "parameters",
    "auto_fill",
    "title",
    "annotations",
];
/// MCP's behaviour hints, as an entry's `annotations` may set them.
const HINT_KEYS: &[&str] = &[
    "readOnlyHint",
    "destructiveHint",
    "idempotentHint",
    "openWorldHint",
];
/// Longest timeout accepted, as for `--timeout`.
const MAX_TIMEOUT_SECS: f64 = 1e9;

/// Walks the YAML tree, collecting typed nodes and problems.
#[derive(Default)]
pub(super) struct Reader {
    pub(super) nodes: Vec<NodeConfig>,
    pub(super) problems: Vec<ConfigError>,
}

impl Reader {
    fn problem(
        &mut self,
        path: impl Into<String>,
        line: Option<usize>,
        message: impl Into<String>,
    ) {
        self.problems.push(ConfigError::new(path, line, message));
    }

    pub(super) fn read_root(&mut self, root: &Yaml) {
        if root.as_map().is_none() {
            self.problem(
                "(document)",
                root.line,
                format!(
                    "a workflow file is a mapping with a 'nodes' list (or 'graph.nodes'), got {}",
                    root.kind()
                ),
            );
            return;
        }
        if let Some(nodes) = root.get("nodes") {
            self.read_nodes(nodes, "nodes", "");
        } else if let Some(graph) = root.get("graph").filter(|g| g.as_map().is_some()) {
            match graph.get("nodes") {
                Some(nodes) => self.read_nodes(nodes, "graph.nodes", ""),
                None => self.problem(
                    "graph",
                    graph.line,
                    "missing required key 'nodes' (the list of the workflow's nodes)",
                ),
            }
        } else {
            self.problem(
                "(document)",
                root.line,
                "missing required key 'nodes' (a workflow file lists its nodes under 'nodes' or 'graph.nodes')",
            );
        }
    }

    fn read_nodes(&mut self, nodes: &Yaml, path: &str, id_prefix: &str) {
        let YamlValue::Seq(items) = &nodes.value else {
            if !nodes.is_null() {
                self.problem(
                    path,
                    nodes.line,
                    format!("must be a list of nodes, got {}", nodes.kind()),
                );
            }
            return;
        };
        for (i, node) in items.iter().enumerate() {
            self.read_node(node, &format!("{path}[{i}]"), id_prefix);
        }
    }

    fn read_node(&mut self, node: &Yaml, path: &str, id_prefix: &str) {
        if node.as_map().is_none() {
            self.problem(
                path,
                node.line,
                format!("a node must be a mapping, got {}", node.kind()),
            );
            return;
        }
        let id = node.get("id").and_then(|id| {
            id.scalar_text()
                .filter(|_| !id.is_null())
                .map(|text| Located {
                    value: format!("{id_prefix}{text}"),
                    line: id.line,
                })
        });
        let node_type = node.get("type").and_then(Yaml::as_str).map(str::to_string);
        let config = node.get("config");
        let mut tooling = Vec::new();
        if node_type.as_deref() == Some("agent") {
            if let Some(raw) = config.and_then(|c| c.get("tooling")) {
                tooling = self.read_tooling_list(raw, &format!("{path}.config.tooling"));
            }
        }
        self.nodes.push(NodeConfig {
            path: path.to_string(),
            line: node.line,
            id: id.clone(),
            node_type: node_type.clone(),
            tooling,
        });
        // An inline subgraph (`config: {type: config, config: {nodes: [...]}}`)
        // carries nodes of its own; a subgraph from a file is resolved on its own.
        if node_type.as_deref() == Some("subgraph") {
            let inner = config
                .filter(|c| c.get("type").and_then(Yaml::as_str) == Some("config"))
                .and_then(|c| c.get("config"))
                .and_then(|c| c.get("nodes"));
            if let Some(nodes) = inner {
                let prefix = match &id {
                    Some(id) => format!("{}/", id.value),
                    None => id_prefix.to_string(),
                };
                self.read_nodes(nodes, &format!("{path}.config.config.nodes"), &prefix);
            }
        }
    }

    fn read_tooling_list(&mut self, raw: &Yaml, path: &str) -> Vec<ToolingConfig> {
        match &raw.value {
            YamlValue::Null => Vec::new(),
            YamlValue::Seq(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| self.read_tooling(item, &format!("{path}[{i}]")))
                .collect(),
            YamlValue::Map(_) => self.read_tooling(raw, path).into_iter().collect(),
            _ => {
                self.problem(
                    path,
                    raw.line,
                    format!(
                        "must be a tooling entry (a mapping) or a list of them, got {}",
                        raw.describe()
                    ),
                );
                Vec::new()
            }
        }
    }

    fn read_tooling(&mut self, raw: &Yaml, path: &str) -> Option<ToolingConfig> {
        let Some(entries) = raw.as_map() else {
            self.problem(
                path,
                raw.line,
                format!(
                    "a tooling entry must be a mapping like {{type: function, config: {{tools: [...]}}}}, got {}",
                    raw.describe()
                ),
            );
            return None;
        };
        let tooling_type = match raw.get("type") {
            None => {
                self.problem(path, raw.line, "missing required key 'type'");
                None
            }
            Some(t) => match t.as_str() {
                Some(s) if TOOLING_TYPES.contains(&s) => Some(s.to_string()),
                Some(s) => {
                    let mut message = format!("unknown tooling type '{s}'");
                    push_did_you_mean(&mut message, s, TOOLING_TYPES.iter().copied(), "");
                    message.push_str(&format!("; expected one of: {}", TOOLING_TYPES.join(", ")));
                    self.problem(child(path, "type"), t.line, message);
                    None
                }
                None => {
                    self.problem(
                        child(path, "type"),
                        t.line,
                        format!("must be a string, got {}", t.describe()),
                    );
                    None
                }
            },
        };
        let kind = match tooling_type.as_deref() {
            Some("function") => {
                self.check_keys(entries, path, TOOLING_KEYS);
                let config = self.read_function_config(raw.get("config"), path, raw.line);
                let prefix = raw.get("prefix").and_then(|p| self.read_prefix(p, path));
                ToolingKind::Function(FunctionTooling { config, prefix })
            }
            Some(other) => ToolingKind::Other(other.to_string()),
            None => ToolingKind::Invalid,
        };
        Some(ToolingConfig {
            path: path.to_string(),
            line: raw.line,
            kind,
        })
    }

    fn read_prefix(&mut self, raw: &Yaml, tooling_path: &str) -> Option<Located<String>> {
        let path = child(tooling_path, "prefix");
        if raw.is_null() {
            return None;
        }
        let Some(prefix) = raw.as_str() else {
            self.problem(
                path,
                raw.line,
                format!("must be a string, got {}", raw.describe()),
            );
            return None;
        };
        if prefix.is_empty() {
            // As the original runtime reads it: no prefix.
            return None;
        }
        if !prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            self.problem(
                path,
                raw.line,
                format!(
                    "'{prefix}' may contain only ASCII letters, digits, '_' and '-' \
                     (tool names must match ^[a-zA-Z0-9_-]+$)"
                ),
            );
            return None;
        }
        Some(Located {
            value: prefix.to_string(),
            line: raw.line,
        })
    }

    fn read_function_config(
        &mut self,
        raw: Option<&Yaml>,
        tooling_path: &str,
        tooling_line: Option<usize>,
    ) -> FunctionToolConfig {
        let path = child(tooling_path, "config");
        let mut config = FunctionToolConfig {
            path: path.clone(),
            line: raw.and_then(|r| r.line).or(tooling_line),
            tools: Vec::new(),
            timeout: None,
            timeout_grace: None,
            auto_load: None,
        };
        let raw = match raw {
            None => {
                self.problem(
                    tooling_path,
                    tooling_line,
                    "missing required key 'config' (with the 'tools' list)",
                );
                return config;
            }
            Some(raw) => raw,
        };
        let Some(entries) = raw.as_map() else {
            self.problem(
                &path,
                raw.line,
                format!(
                    "must be a mapping like {{tools: [...], timeout: 30}}, got {}",
                    raw.describe()
                ),
            );
            return config;
        };
        self.check_keys(entries, &path, FUNCTION_CONFIG_KEYS);
        match raw.get("tools") {
            None => self.problem(&path, raw.line, "missing required key 'tools'"),
            Some(tools) => {
                let tools_path = child(&path, "tools");
                match &tools.value {
                    YamlValue::Seq(items) if items.is_empty() => {
                        self.problem(tools_path, tools.line, "must list at least one tool")
                    }
                    YamlValue::Seq(items) => {
                        for (i, item) in items.iter().enumerate() {
                            if let Some(entry) =
                                self.read_entry(item, &format!("{tools_path}[{i}]"))
                            {
                                config.tools.push(entry);
                            }
                        }
                    }
                    YamlValue::Null => {
                        self.problem(tools_path, tools.line, "must list at least one tool")
                    }
                    _ => self.problem(
                        tools_path,
                        tools.line,
                        format!(
                            "must be a list of tool entries like [{{name: save_file}}], got {}",
                            tools.describe()
                        ),
                    ),
                }
            }
        }
        if let Some(timeout) = raw.get("timeout") {
            config.timeout = self.read_timeout(timeout, &child(&path, "timeout"));
        }
        if let Some(grace) = raw.get("timeout_grace") {
            config.timeout_grace = self.read_timeout(grace, &child(&path, "timeout_grace"));
        }
        if let Some(auto_load) = raw.get("auto_load") {
            config.auto_load = self.read_bool(auto_load, &child(&path, "auto_load"));
        }
        config
    }

    fn read_timeout(&mut self, raw: &Yaml, path: &str) -> Option<f64> {
        let secs = match raw.value {
            YamlValue::Null => return None,
            YamlValue::Int(i) => i as f64,
            YamlValue::Uint(u) => u as f64,
            YamlValue::Float(x) => x,
            _ => {
                self.problem(
                    path,
                    raw.line,
                    format!(
                        "must be a number of seconds or null (the pool's default), got {}",
                        raw.describe()
                    ),
                );
                return None;
            }
        };
        if !secs.is_finite() || secs <= 0.0 {
            self.problem(
                path,
                raw.line,
                format!("must be a positive number of seconds, got {secs}"),
            );
            return None;
        }
        if secs > MAX_TIMEOUT_SECS {
            self.problem(
                path,
                raw.line,
                format!("{secs} seconds is too long (at most {MAX_TIMEOUT_SECS})"),
            );
            return None;
        }
        Some(secs)
    }

    fn read_bool(&mut self, raw: &Yaml, path: &str) -> Option<bool> {
        match raw.value {
            YamlValue::Null => None,
            YamlValue::Bool(b) => Some(b),
            _ => {
                let mut message = format!("must be true or false, got {}", raw.describe());
                if raw.as_str().is_some() {
                    message.push_str(" (only the plain words true and false are booleans)");
                }
                self.problem(path, raw.line, message);
                None
            }
        }
    }

    fn read_entry(&mut self, raw: &Yaml, path: &str) -> Option<FunctionToolEntryConfig> {
        let Some(entries) = raw.as_map() else {
            let hint = match raw.as_str() {
                Some(s) => format!(" (write {{name: {s}}})"),
                None => String::new(),
            };
            self.problem(
                path,
                raw.line,
                format!(
                    "a tool entry must be a mapping like {{name: save_file}}, got {}{hint}",
                    raw.describe()
                ),
            );
            return None;
        };
        self.check_keys(entries, path, ENTRY_KEYS);
        let name = match raw.get("name") {
            None => {
                self.problem(path, raw.line, "missing required key 'name'");
                None
            }
            Some(n) => match n.as_str().map(str::trim) {
                Some("") => {
                    self.problem(child(path, "name"), n.line, "must not be empty");
                    None
                }
                Some(name) => Some(Located {
                    value: name.to_string(),
                    line: n.line,
                }),
                None => {
                    self.problem(
                        child(path, "name"),
                        n.line,
                        format!("must be a function name (a string), got {}", n.describe()),
                    );
                    None
                }
            },
        };
        let description = raw.get("description").and_then(|d| match &d.value {
            YamlValue::Null => None,
            YamlValue::Str(s) => Some(s.clone()),
            _ => {
                self.problem(
                    child(path, "description"),
                    d.line,
                    format!("must be a string, got {}", d.describe()),
                );
                None
            }
        });
        let parameters = raw
            .get("parameters")
            .and_then(|p| self.read_parameters(p, &child(path, "parameters")));
        let auto_fill = raw
            .get("auto_fill")
            .and_then(|a| self.read_bool(a, &child(path, "auto_fill")));
        let title = raw.get("title").and_then(|t| match &t.value {
            YamlValue::Null => None,
            YamlValue::Str(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
            _ => {
                self.problem(
                    child(path, "title"),
                    t.line,
                    format!("must be a non-empty string, got {}", t.describe()),
                );
                None
            }
        });
        let annotations = raw
            .get("annotations")
            .and_then(|a| self.read_hints(a, &child(path, "annotations")));
        let overrides_present = OVERRIDE_KEYS
            .iter()
            .copied()
            .filter(|k| raw.get(k).is_some())
            .collect();
        Some(FunctionToolEntryConfig {
            path: path.to_string(),
            line: raw.line,
            name,
            description,
            parameters,
            auto_fill,
            title,
            annotations,
            overrides_present,
        })
    }

    /// An entry's `annotations`: a mapping of MCP's four behaviour hints to
    /// booleans.
    fn read_hints(&mut self, raw: &Yaml, path: &str) -> Option<ToolHints> {
        if raw.is_null() {
            return None;
        }
        let Some(entries) = raw.as_map() else {
            self.problem(
                path,
                raw.line,
                format!(
                    "must be a mapping of behaviour hints ({}), got {}",
                    HINT_KEYS.join(", "),
                    raw.describe()
                ),
            );
            return None;
        };
        self.check_keys(entries, path, HINT_KEYS);
        let mut hint = |key: &str| {
            raw.get(key)
                .and_then(|value| self.read_bool(value, &child(path, key)))
        };
        Some(ToolHints {
            read_only_hint: hint("readOnlyHint"),
            destructive_hint: hint("destructiveHint"),
            idempotent_hint: hint("idempotentHint"),
            open_world_hint: hint("openWorldHint"),
        })
    }

    fn read_parameters(&mut self, raw: &Yaml, path: &str) -> Option<Value> {
        if raw.is_null() {
            return None;
        }
        if raw.as_map().is_none() {
            self.problem(
                path,
                raw.line,
                format!(
                    "must be a JSON Schema object (a mapping like {{type: object, properties: {{...}}}}), got {}",
                    raw.describe()
                ),
            );
            return None;
        }
        if let Some(t) = raw.get("type") {
            if t.as_str() != Some("object") {
                self.problem(
                    child(path, "type"),
                    t.line,
                    format!(
                        "a tool's parameters must be a schema of type 'object', got {}",
                        t.describe()
                    ),
                );
                return None;
            }
        }
        match raw.to_json(path) {
            Ok(value) => Some(value),
            Err(e) => {
                self.problems.push(e);
                None
            }
        }
    }

    /// Reports keys outside `allowed`, and keys that are not strings.
    fn check_keys(&mut self, entries: &[(Yaml, Yaml)], path: &str, allowed: &[&str]) {
        for (key, _) in entries {
            match key.as_str() {
                Some(k) if allowed.contains(&k) => {}
                Some(k) => {
                    let mut message = format!("unknown key '{k}'");
                    push_did_you_mean(&mut message, k, allowed.iter().copied(), "");
                    message.push_str(&format!("; expected one of: {}", allowed.join(", ")));
                    self.problem(child(path, k), key.line, message);
                }
                None => self.problem(
                    path,
                    key.line,
                    format!(
                        "keys must be strings, got {}; expected one of: {}",
                        key.describe(),
                        allowed.join(", ")
                    ),
                ),
            }
        }
    }
}
