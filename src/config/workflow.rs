//! The typed workflow: the nodes of a file and the tooling of its agent
//! nodes, as [`Workflow::parse`] reads them.

use serde_json::Value;

use super::error::ConfigError;
use crate::catalog::ToolHints;

/// A value with the line it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Located<T> {
    /// The value read.
    pub value: T,
    /// 1-based line of the value in the file; `None` when the parser could
    /// not tell.
    pub line: Option<usize>,
}

/// A workflow file, as far as toolpool reads it: its nodes, and the tooling of
/// its agent nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct Workflow {
    /// The file name used in messages.
    pub source: String,
    /// Every node, in document order (inline subgraphs flattened after their
    /// parent node).
    pub nodes: Vec<NodeConfig>,
    /// Problems of shape found while reading (unknown keys, wrong types);
    /// validation reports them together with its own.
    pub problems: Vec<ConfigError>,
}

/// One node of the workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// e.g. `nodes[2]` or `graph.nodes[2]`.
    pub path: String,
    /// 1-based line where the node starts; `None` when unknown.
    pub line: Option<usize>,
    /// The node id; inside an inline subgraph `<subgraph id>/<id>`.
    pub id: Option<Located<String>>,
    /// The node's `type` (`agent`, `literal`, …); `None` when it has none or
    /// it is not a string.
    pub node_type: Option<String>,
    /// `config.tooling`, read only for agent nodes; a single mapping in the
    /// file is a one-element list here.
    pub tooling: Vec<ToolingConfig>,
}

impl NodeConfig {
    /// Whether it is a `type: agent` node, the only kind whose tooling is read.
    pub fn is_agent(&self) -> bool {
        self.node_type.as_deref() == Some("agent")
    }

    /// Whether any of its tooling entries is `type: function`.
    pub fn has_function_tooling(&self) -> bool {
        self.tooling
            .iter()
            .any(|t| matches!(t.kind, ToolingKind::Function(_)))
    }
}

/// One entry of `config.tooling`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolingConfig {
    /// e.g. `nodes[0].config.tooling[1]` (no index for the single-mapping form).
    pub path: String,
    /// 1-based line where the entry starts; `None` when unknown.
    pub line: Option<usize>,
    /// What its `type` says, with the function tooling's contents.
    pub kind: ToolingKind,
}

/// The `type` of a tooling entry.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolingKind {
    /// `type: function`.
    Function(FunctionTooling),
    /// `mcp_remote`, `mcp_local`: the runtime's business, not validated here.
    Other(String),
    /// No usable `type` (already reported as a problem).
    Invalid,
}

/// `{type: function, config: {...}, prefix?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionTooling {
    /// Its `config`: the tools and their timeout.
    pub config: FunctionToolConfig,
    /// Renames every tool to `<prefix>_<name>`.
    pub prefix: Option<Located<String>>,
}

/// `config` of a function tooling: `{tools: [...], timeout?, timeout_grace?, auto_load?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionToolConfig {
    /// e.g. `nodes[0].config.tooling[0].config`.
    pub path: String,
    /// 1-based line of the `config` (else of its tooling entry); `None` when
    /// unknown.
    pub line: Option<usize>,
    /// The `tools` entries, in file order.
    pub tools: Vec<FunctionToolEntryConfig>,
    /// Seconds; `None` (absent or null) → the pool's default.
    pub timeout: Option<f64>,
    /// Seconds a timed-out tool may clean up; `None` → the tool's own, else
    /// the pool's (`--timeout-grace`).
    pub timeout_grace: Option<f64>,
    /// Accepted for compatibility with the original runtime; the catalog is
    /// always loaded.
    pub auto_load: Option<bool>,
}

/// One entry of `tools`: `{name, description?, parameters?, auto_fill?,
/// title?, annotations?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionToolEntryConfig {
    /// e.g. `nodes[0].config.tooling[0].config.tools[3]`.
    pub path: String,
    /// 1-based line where the entry starts; `None` when unknown.
    pub line: Option<usize>,
    /// The function name (whitespace trimmed), or `module:All`.
    pub name: Option<Located<String>>,
    /// `None` when absent or null.
    pub description: Option<String>,
    /// `None` when absent or null.
    pub parameters: Option<Value>,
    /// `None` when absent or null (→ true).
    pub auto_fill: Option<bool>,
    /// The MCP `title` clients show for the tool; `None`: the function's.
    pub title: Option<String>,
    /// MCP's behaviour hints for the tool; `None`: the function's.
    pub annotations: Option<ToolHints>,
    /// Which of `description`, `parameters`, `auto_fill`, `title`,
    /// `annotations` are written in the entry at all (even as null): a
    /// `module:All` entry may carry none.
    pub overrides_present: Vec<&'static str>,
}
