//! A workflow validated against the catalog: each agent node's tools, and
//! how `resolve` prints them.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use super::error::{push_did_you_mean, WorkflowError};
use super::workflow::Workflow;
use crate::catalog::{Catalog, ToolHints};
use crate::error::{ErrorKind, ToolError};

/// One tool as a node exposes it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ToolSpec {
    /// The name the model sees (`<prefix>_<function>` with a prefix).
    pub name: String,
    /// The Python function it calls.
    pub function: String,
    /// The description the model sees: the entry's, else (with `auto_fill`)
    /// the function's docstring summary.
    pub description: String,
    /// The JSON Schema of its arguments the model sees: the entry's, else
    /// (with `auto_fill`) the catalog's.
    pub parameters: Value,
    /// From the tooling's `timeout`; `None` → the pool's default.
    #[serde(skip)]
    pub timeout: Option<Duration>,
    /// From the tooling's `timeout_grace`, else the tool's own; `None` →
    /// the pool's.
    #[serde(skip)]
    pub timeout_grace: Option<Duration>,
    /// The entry's MCP `title`; `None`: the function's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The entry's MCP behaviour hints; `None`: the function's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolHints>,
}

/// An agent node with function tooling, resolved: its tools in order.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeTools {
    /// The node's id.
    pub id: String,
    /// The timeout of the node's first function tooling (what `resolve` prints
    /// as the node's `timeout`); every tool carries its own in
    /// [`ToolSpec::timeout`].
    pub timeout: Option<Duration>,
    /// Its tools, in the order the file lists them (`module:All` expanded
    /// where it stands).
    pub tools: Vec<ToolSpec>,
}

/// A node that `resolve` skips, kept for messages.
#[derive(Debug, Clone, PartialEq)]
pub struct OtherNode {
    /// The node's id.
    pub id: String,
    /// The node's `type`; `None` when it has none.
    pub node_type: Option<String>,
}

/// A validated workflow: the agent nodes that have function tooling.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedWorkflow {
    /// The file name used in messages ([`Workflow::source`]).
    pub source: String,
    /// The agent nodes with function tooling, in document order.
    pub nodes: Vec<NodeTools>,
    /// Nodes with an id but no function tooling.
    pub other_nodes: Vec<OtherNode>,
}

/// How `resolve` prints tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `{name, description, parameters, function, timeout}`.
    Json,
    /// `{type: "function", function: {name, description, parameters}}`.
    OpenAi,
}

impl ResolvedWorkflow {
    /// Loads a workflow file and validates it against `catalog`.
    pub fn load(
        path: impl AsRef<Path>,
        catalog: &Catalog,
    ) -> Result<ResolvedWorkflow, WorkflowError> {
        Workflow::load(path)?.resolve(catalog)
    }

    /// The node `id`, if it is an agent node with function tooling.
    pub fn node(&self, id: &str) -> Option<&NodeTools> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// A node's tools, or an error naming the nodes there are.
    pub fn node_tools(&self, id: &str) -> Result<&NodeTools, WorkflowError> {
        if let Some(node) = self.node(id) {
            return Ok(node);
        }
        if let Some(other) = self.other_nodes.iter().find(|n| n.id == id) {
            return Err(WorkflowError::NoFunctionTooling {
                file: self.source.clone(),
                id: id.to_string(),
                node_type: other.node_type.clone(),
            });
        }
        Err(WorkflowError::UnknownNode {
            file: self.source.clone(),
            id: id.to_string(),
            available: self.nodes.iter().map(|n| n.id.clone()).collect(),
        })
    }

    /// `resolve`'s output: `{"nodes": [{"id", "timeout", "tools": [...]}]}`,
    /// timeouts in seconds with `default_timeout` in place of "the pool's
    /// default".
    pub fn to_json(&self, default_timeout: Duration, format: ToolFormat) -> Value {
        nodes_json(self.nodes.iter(), default_timeout, format)
    }
}

/// `{"nodes": [...]}` for some nodes.
pub fn nodes_json<'a>(
    nodes: impl Iterator<Item = &'a NodeTools>,
    default_timeout: Duration,
    format: ToolFormat,
) -> Value {
    json!({"nodes": nodes.map(|n| n.to_json(default_timeout, format)).collect::<Vec<_>>()})
}

/// Seconds as a JSON number: `30`, not `30.0`, when whole.
fn seconds_json(duration: Duration) -> Value {
    let secs = duration.as_secs_f64();
    if duration.subsec_nanos() == 0 {
        Value::from(duration.as_secs())
    } else {
        serde_json::Number::from_f64(secs)
            .map(Value::Number)
            .unwrap_or(Value::Null)
    }
}

impl NodeTools {
    /// A tool by the name the model sees.
    pub fn tool(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The tools as OpenAI `tools` entries.
    pub fn openai_tools(&self) -> Value {
        Value::Array(
            self.tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
                })
                .collect(),
        )
    }

    /// `{"id", "timeout", "tools"}` as `resolve` prints it.
    pub fn to_json(&self, default_timeout: Duration, format: ToolFormat) -> Value {
        let effective = |t: Option<Duration>| seconds_json(t.unwrap_or(default_timeout));
        let tools = match format {
            ToolFormat::OpenAi => self.openai_tools(),
            ToolFormat::Json => Value::Array(
                self.tools
                    .iter()
                    .map(|t| {
                        let mut tool = json!({"name": t.name, "description": t.description,
                               "parameters": t.parameters, "function": t.function,
                               "timeout": effective(t.timeout)});
                        // The entry's own MCP title and hints, when it sets them.
                        if let Some(title) = &t.title {
                            tool["title"] = json!(title);
                        }
                        if let Some(hints) = &t.annotations {
                            tool["annotations"] = json!(hints);
                        }
                        tool
                    })
                    .collect(),
            ),
        };
        json!({"id": self.id, "timeout": effective(self.timeout), "tools": tools})
    }

    /// The tool an agent calls by the name it sees, or the error it gets
    /// back when the node has no such tool (with the closest name there is).
    /// Calling it through a pool is `NodeTools::invoke`'s job (in
    /// `node_calls`), so that this module does not depend on the pool.
    pub fn route(&self, name: &str) -> Result<&ToolSpec, ToolError> {
        self.tool(name).ok_or_else(|| {
            let mut message = format!("tool '{name}' is not configured for node '{}'", self.id);
            push_did_you_mean(
                &mut message,
                name,
                self.tools.iter().map(|t| t.name.as_str()),
                "",
            );
            ToolError::new(name, ErrorKind::NotFound, message)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeTools {
        let spec = |name: &str, function: &str| ToolSpec {
            name: name.to_string(),
            function: function.to_string(),
            description: String::new(),
            parameters: json!({"type": "object"}),
            timeout: Some(Duration::from_secs(5)),
            timeout_grace: None,
            title: None,
            annotations: None,
        };
        NodeTools {
            id: "planner".to_string(),
            timeout: None,
            tools: vec![spec("m_add", "add"), spec("m_multiply", "multiply")],
        }
    }

    #[test]
    fn a_call_routes_by_the_exposed_name_to_the_function() {
        let node = node();
        let tool = node.route("m_multiply").expect("configured");
        assert_eq!(tool.function, "multiply");
        assert_eq!(tool.timeout, Some(Duration::from_secs(5)));
    }

    #[test]
    fn a_tool_the_node_lacks_is_not_found_with_the_closest_name() {
        let error = node().route("m_ad").unwrap_err();
        assert_eq!(error.kind, ErrorKind::NotFound);
        assert_eq!(error.tool, "m_ad");
        assert_eq!(
            error.message,
            "tool 'm_ad' is not configured for node 'planner' (did you mean 'm_add'?)"
        );
    }

    #[test]
    fn seconds_print_whole_when_whole() {
        assert_eq!(seconds_json(Duration::from_secs(30)), json!(30));
        assert_eq!(seconds_json(Duration::from_millis(1500)), json!(1.5));
    }
}
