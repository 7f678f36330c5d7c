//! Workflow files: which function tools each agent node gets (README,
//! "Workflow files").
//!
//! Three steps, each usable on its own:
//!
//! 1. [`Workflow::load`] / [`Workflow::parse`] read the YAML (with
//!    `serde-saphyr`: duplicate keys are errors, only `true`/`false` are
//!    booleans, aliases are capped so an alias bomb is refused at once) and
//!    turn the tooling of every agent node into typed structs. A missing or
//!    unreadable file or broken YAML stops here with one [`WorkflowError`];
//!    problems of shape (unknown keys, wrong types) are collected in
//!    [`Workflow::problems`] so that they are reported together with the rest.
//! 2. [`validate`] checks the workflow against a [`Catalog`] — a pure
//!    function, no Python involved — and returns either a
//!    [`ResolvedWorkflow`] or **every** problem, each a [`ConfigError`]
//!    `<path>: <message> (line N)`.
//! 3. [`NodeTools`] hands out a node's tool specs and calls its tools through
//!    a [`Pool`] with the timeout the workflow gives them.
//!
//! Only the tooling subtree is validated strictly. A workflow file carries a
//! lot of configuration that belongs to the agent runtime (models, prompts,
//! edges, other node types): all of it is left alone, unknown keys included.
//!
//! Why the typed structs are not `#[derive(Deserialize)]`d directly: serde
//! stops at the first error, and a person fixing a workflow file wants all of
//! them at once. So the YAML is first read into a small tree that keeps each
//! node's line, and the tree is walked by hand.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{json, Map, Value};

use crate::catalog::{close_matches, Catalog};
use crate::error::{ErrorKind, ToolError};
use crate::pool::{CallReport, InvokeOptions, Pool};

/// The tooling types an agent runtime knows. Only `function` is toolpool's;
/// the others are accepted and left to the runtime.
const TOOLING_TYPES: &[&str] = &["function", "mcp_remote", "mcp_local"];
const TOOLING_KEYS: &[&str] = &["type", "config", "prefix"];
const FUNCTION_CONFIG_KEYS: &[&str] = &["tools", "timeout", "auto_load"];
const ENTRY_KEYS: &[&str] = &["name", "description", "parameters", "auto_fill"];
/// The keys a `module:All` entry may not carry, in the order they are named.
const OVERRIDE_KEYS: &[&str] = &["description", "parameters", "auto_fill"];
const ALL_SUFFIX: &str = ":All";
/// Alias replay cap: a workflow file never needs more; an alias bomb hits it
/// within milliseconds.
const MAX_ALIAS_REPLAYED_EVENTS: usize = 100_000;
/// Longest timeout accepted, as for `--timeout`.
const MAX_TIMEOUT_SECS: f64 = 1e9;

// ---------------------------------------------------------------------------
// Errors

/// One problem in a workflow file: `<path>: <message>`, plus ` (line N)` when
/// the YAML parser could tell the line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConfigError {
    /// Where in the document, e.g. `nodes[0].config.tooling[0].config.tools[1].name`.
    pub path: String,
    /// 1-based line in the file.
    pub line: Option<usize>,
    pub message: String,
}

impl ConfigError {
    fn new(path: impl Into<String>, line: Option<usize>, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            line,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)?;
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// What stops a workflow file from being used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkflowError {
    #[error("workflow file {file} does not exist")]
    NotFound { file: String },
    #[error("cannot read workflow file {file}: {reason}")]
    Unreadable { file: String, reason: String },
    #[error("{file}: not valid YAML{}: {message}", at_line(*line, *column))]
    Yaml {
        file: String,
        line: Option<usize>,
        column: Option<usize>,
        message: String,
    },
    #[error("{file}: {}", invalid_summary(errors))]
    Invalid {
        file: String,
        errors: Vec<ConfigError>,
    },
    #[error("{file}: {}", unknown_node(id, available))]
    UnknownNode {
        file: String,
        id: String,
        /// The ids of the nodes that have function tooling.
        available: Vec<String>,
    },
    #[error("{file}: node '{id}' has no function tooling{}", node_kind(node_type.as_deref()))]
    NoFunctionTooling {
        file: String,
        id: String,
        node_type: Option<String>,
    },
}

fn at_line(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" at line {l}, column {c}"),
        (Some(l), None) => format!(" at line {l}"),
        _ => String::new(),
    }
}

fn invalid_summary(errors: &[ConfigError]) -> String {
    let noun = if errors.len() == 1 { "error" } else { "errors" };
    let mut text = format!("{} {noun}", errors.len());
    for e in errors {
        text.push_str("\n  ");
        text.push_str(&e.to_string());
    }
    text
}

fn unknown_node(id: &str, available: &[String]) -> String {
    let mut text = format!("no node '{id}'");
    let matches = close_matches(id, available.iter().map(String::as_str));
    if let Some(best) = matches.first() {
        text.push_str(&format!(" (did you mean '{best}'?)"));
    }
    if available.is_empty() {
        text.push_str("; no node has function tooling");
    } else {
        text.push_str(&format!(
            "; nodes with function tooling: {}",
            available.join(", ")
        ));
    }
    text
}

fn node_kind(node_type: Option<&str>) -> String {
    match node_type {
        Some("agent") => String::new(),
        Some(t) => format!(" (it is a '{t}' node; only agent nodes carry tooling)"),
        None => " (it has no type; only agent nodes carry tooling)".to_string(),
    }
}

// ---------------------------------------------------------------------------
// The YAML tree: values with the line they came from.

#[derive(Debug, Clone, PartialEq)]
struct Yaml {
    value: YamlValue,
    line: Option<usize>,
}

#[derive(Debug, Clone, PartialEq)]
enum YamlValue {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(String),
    Seq(Vec<Yaml>),
    Map(Vec<(Yaml, Yaml)>),
}

impl<'de> Deserialize<'de> for Yaml {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = serde_saphyr::Spanned::<YamlValue>::deserialize(deserializer)?;
        // `referenced` is where the value is used: for an alias, the alias.
        let line = spanned.referenced.line();
        Ok(Yaml {
            value: spanned.value,
            line: usize::try_from(line).ok().filter(|l| *l > 0),
        })
    }
}

impl<'de> Deserialize<'de> for YamlValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(YamlVisitor)
    }
}

struct YamlVisitor;

impl<'de> Visitor<'de> for YamlVisitor {
    type Value = YamlValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<YamlValue, E> {
        Ok(YamlValue::Null)
    }
    fn visit_none<E>(self) -> Result<YamlValue, E> {
        Ok(YamlValue::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<YamlValue, D::Error> {
        YamlValue::deserialize(d)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<YamlValue, D::Error> {
        YamlValue::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<YamlValue, E> {
        Ok(YamlValue::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<YamlValue, E> {
        Ok(YamlValue::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<YamlValue, E> {
        Ok(YamlValue::Uint(v))
    }
    fn visit_i128<E>(self, v: i128) -> Result<YamlValue, E> {
        Ok(YamlValue::Float(v as f64))
    }
    fn visit_u128<E>(self, v: u128) -> Result<YamlValue, E> {
        Ok(YamlValue::Float(v as f64))
    }
    fn visit_f64<E>(self, v: f64) -> Result<YamlValue, E> {
        Ok(YamlValue::Float(v))
    }
    fn visit_char<E>(self, v: char) -> Result<YamlValue, E> {
        Ok(YamlValue::Str(v.to_string()))
    }
    fn visit_str<E>(self, v: &str) -> Result<YamlValue, E> {
        Ok(YamlValue::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<YamlValue, E> {
        Ok(YamlValue::Str(v))
    }
    fn visit_bytes<E>(self, v: &[u8]) -> Result<YamlValue, E> {
        Ok(YamlValue::Str(String::from_utf8_lossy(v).into_owned()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<YamlValue, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Yaml>()? {
            items.push(item);
        }
        Ok(YamlValue::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<YamlValue, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry::<Yaml, Yaml>()? {
            entries.push(entry);
        }
        Ok(YamlValue::Map(entries))
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, _data: A) -> Result<YamlValue, A::Error> {
        Err(de::Error::custom(
            "tagged enum values are not supported here",
        ))
    }
}

impl Yaml {
    fn kind(&self) -> &'static str {
        match &self.value {
            YamlValue::Null => "null",
            YamlValue::Bool(_) => "a boolean",
            YamlValue::Int(_) | YamlValue::Uint(_) | YamlValue::Float(_) => "a number",
            YamlValue::Str(_) => "a string",
            YamlValue::Seq(_) => "a list",
            YamlValue::Map(_) => "a mapping",
        }
    }

    /// `a string ('yes')`: the kind, with a short scalar shown.
    fn describe(&self) -> String {
        let shown = match &self.value {
            YamlValue::Str(s) => Some(format!("'{}'", shorten(s, 40))),
            YamlValue::Bool(b) => Some(b.to_string()),
            YamlValue::Int(i) => Some(i.to_string()),
            YamlValue::Uint(u) => Some(u.to_string()),
            YamlValue::Float(x) => Some(x.to_string()),
            _ => None,
        };
        match shown {
            Some(s) => format!("{} ({s})", self.kind()),
            None => self.kind().to_string(),
        }
    }

    fn as_str(&self) -> Option<&str> {
        match &self.value {
            YamlValue::Str(s) => Some(s),
            _ => None,
        }
    }

    fn as_map(&self) -> Option<&[(Yaml, Yaml)]> {
        match &self.value {
            YamlValue::Map(entries) => Some(entries),
            _ => None,
        }
    }

    fn is_null(&self) -> bool {
        matches!(self.value, YamlValue::Null)
    }

    /// A mapping's value for a string key.
    fn get(&self, key: &str) -> Option<&Yaml> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
    }

    /// A scalar as text (for mapping keys in schemas).
    fn scalar_text(&self) -> Option<String> {
        match &self.value {
            YamlValue::Null => Some("null".to_string()),
            YamlValue::Bool(b) => Some(b.to_string()),
            YamlValue::Int(i) => Some(i.to_string()),
            YamlValue::Uint(u) => Some(u.to_string()),
            YamlValue::Float(x) => Some(x.to_string()),
            YamlValue::Str(s) => Some(s.clone()),
            _ => None,
        }
    }

    /// The value as JSON; `Err` names the first non-scalar mapping key.
    fn to_json(&self, path: &str) -> Result<Value, ConfigError> {
        Ok(match &self.value {
            YamlValue::Null => Value::Null,
            YamlValue::Bool(b) => Value::Bool(*b),
            YamlValue::Int(i) => Value::from(*i),
            YamlValue::Uint(u) => Value::from(*u),
            YamlValue::Float(x) => serde_json::Number::from_f64(*x)
                .map(Value::Number)
                .unwrap_or_else(|| Value::String(x.to_string())),
            YamlValue::Str(s) => Value::String(s.clone()),
            YamlValue::Seq(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| item.to_json(&format!("{path}[{i}]")))
                    .collect::<Result<_, _>>()?,
            ),
            YamlValue::Map(entries) => {
                let mut object = Map::new();
                for (k, v) in entries {
                    let Some(key) = k.scalar_text() else {
                        return Err(ConfigError::new(
                            path,
                            k.line,
                            format!("mapping keys must be scalars, got {}", k.kind()),
                        ));
                    };
                    let value = v.to_json(&child(path, &key))?;
                    object.insert(key, value);
                }
                Value::Object(object)
            }
        })
    }
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let cut: String = text.chars().take(max - 1).collect();
        format!("{cut}…")
    }
}

/// `path.key`, or `path["odd key"]` when the key is not a plain word.
fn child(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (path.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{}]", Value::String(key.to_string())),
    }
}

/// A YAML error: line, column, message.
type YamlError = (Option<usize>, Option<usize>, String);

/// Parses on a thread of its own with a roomy stack: deserialising nested
/// values recurses (deeply, in a debug build), and the parser's depth budget
/// (64 levels) must be what stops a deep document — not a stack overflow on a
/// small runtime thread.
fn parse_yaml(text: &str) -> Result<Yaml, YamlError> {
    const PARSE_STACK: usize = 32 * 1024 * 1024;
    std::thread::scope(|scope| {
        let parser = std::thread::Builder::new()
            .name("toolpool-yaml".to_string())
            .stack_size(PARSE_STACK)
            .spawn_scoped(scope, || parse_yaml_here(text));
        match parser {
            Ok(handle) => handle.join().unwrap_or_else(|_| {
                Err((
                    None,
                    None,
                    "the YAML parser failed unexpectedly".to_string(),
                ))
            }),
            // No thread to be had: parse here (the budget still applies).
            Err(_) => parse_yaml_here(text),
        }
    })
}

fn parse_yaml_here(text: &str) -> Result<Yaml, YamlError> {
    use serde_saphyr::budget::BudgetBreach;
    use serde_saphyr::options::{DuplicateKeyPolicy, NonFiniteFloatPolicy};
    use serde_saphyr::{Error, MessageFormatter, UserMessageFormatter};
    let options = serde_saphyr::options! {
        strict_booleans: true,
        duplicate_keys: DuplicateKeyPolicy::Error,
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_ALIAS_REPLAYED_EVENTS,
        },
        // `.inf` in a schema stays the string ".inf" instead of failing the file.
        non_finite_float_policy: NonFiniteFloatPolicy::AsString,
        with_snippet: false,
    };
    serde_saphyr::from_str_with_options::<Yaml>(text, options).map_err(|error| {
        let error = error.without_snippet();
        let location = error.location();
        let line = location
            .map(|l| l.line())
            .and_then(|l| usize::try_from(l).ok())
            .filter(|l| *l > 0);
        let column = location
            .map(|l| l.column())
            .and_then(|c| usize::try_from(c).ok())
            .filter(|c| *c > 0);
        // An error inside an aliased value comes wrapped in `AliasError`
        // (once per alias of the chain) around the original error.
        fn is_alias_bomb(error: &Error) -> bool {
            match error {
                Error::AliasReplayLimitExceeded { .. }
                | Error::AliasExpansionLimitExceeded { .. }
                | Error::AliasReplayStackDepthExceeded { .. }
                | Error::AliasReplayCounterOverflow { .. } => true,
                Error::AliasError { error, .. } => is_alias_bomb(error),
                _ => false,
            }
        }
        let alias_bomb = is_alias_bomb(error);
        let message = if alias_bomb {
            format!(
                "its aliases expand to too much data (over {MAX_ALIAS_REPLAYED_EVENTS} \
                 replayed YAML events); refusing it as a possible alias bomb"
            )
        } else if let Error::Budget {
            breach: BudgetBreach::Depth { .. },
            ..
        } = error
        {
            "nested too deeply (more than 64 levels of lists and mappings)".to_string()
        } else {
            UserMessageFormatter.format_message(error).into_owned()
        };
        (line, column, message)
    })
}

// ---------------------------------------------------------------------------
// The typed workflow.

/// A value with the line it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Located<T> {
    pub value: T,
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
    /// [`validate`] reports them together with its own.
    pub problems: Vec<ConfigError>,
}

/// One node of the workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// e.g. `nodes[2]` or `graph.nodes[2]`.
    pub path: String,
    pub line: Option<usize>,
    /// The node id; inside an inline subgraph `<subgraph id>/<id>`.
    pub id: Option<Located<String>>,
    pub node_type: Option<String>,
    /// `config.tooling`, read only for agent nodes; a single mapping in the
    /// file is a one-element list here.
    pub tooling: Vec<ToolingConfig>,
}

impl NodeConfig {
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
    pub line: Option<usize>,
    pub kind: ToolingKind,
}

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
    pub config: FunctionToolConfig,
    /// Renames every tool to `<prefix>_<name>`.
    pub prefix: Option<Located<String>>,
}

/// `config` of a function tooling: `{tools: [...], timeout?, auto_load?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionToolConfig {
    /// e.g. `nodes[0].config.tooling[0].config`.
    pub path: String,
    pub line: Option<usize>,
    pub tools: Vec<FunctionToolEntryConfig>,
    /// Seconds; `None` (absent or null) → the pool's default.
    pub timeout: Option<f64>,
    /// Accepted for compatibility with the original runtime; the catalog is
    /// always loaded.
    pub auto_load: Option<bool>,
}

/// One entry of `tools`: `{name, description?, parameters?, auto_fill?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionToolEntryConfig {
    /// e.g. `nodes[0].config.tooling[0].config.tools[3]`.
    pub path: String,
    pub line: Option<usize>,
    /// The function name (whitespace trimmed), or `module:All`.
    pub name: Option<Located<String>>,
    /// `None` when absent or null.
    pub description: Option<String>,
    /// `None` when absent or null.
    pub parameters: Option<Value>,
    /// `None` when absent or null (→ true).
    pub auto_fill: Option<bool>,
    /// Which of `description`, `parameters`, `auto_fill` are written in the
    /// entry at all (even as null): a `module:All` entry may carry none.
    pub overrides_present: Vec<&'static str>,
}

impl Workflow {
    /// Reads and parses a workflow file.
    pub fn load(path: impl AsRef<Path>) -> Result<Workflow, WorkflowError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => WorkflowError::NotFound { file: file.clone() },
            _ if path.is_dir() => WorkflowError::Unreadable {
                file: file.clone(),
                reason: "it is a directory".to_string(),
            },
            _ => WorkflowError::Unreadable {
                file: file.clone(),
                reason: e.to_string(),
            },
        })?;
        let text = String::from_utf8(bytes).map_err(|e| WorkflowError::Unreadable {
            file: file.clone(),
            reason: format!(
                "it is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        })?;
        Workflow::parse(&text, &file)
    }

    /// Parses a workflow from text; `source` names it in messages.
    pub fn parse(text: &str, source: &str) -> Result<Workflow, WorkflowError> {
        let root = parse_yaml(text).map_err(|(line, column, message)| WorkflowError::Yaml {
            file: source.to_string(),
            line,
            column,
            message,
        })?;
        let mut reader = Reader::default();
        reader.read_root(&root);
        Ok(Workflow {
            source: source.to_string(),
            nodes: reader.nodes,
            problems: reader.problems,
        })
    }

    /// Validates against `catalog` (see [`validate`]), naming the file in the error.
    pub fn resolve(&self, catalog: &Catalog) -> Result<ResolvedWorkflow, WorkflowError> {
        validate(self, catalog).map_err(|errors| WorkflowError::Invalid {
            file: self.source.clone(),
            errors,
        })
    }
}

/// Walks the YAML tree, collecting typed nodes and problems.
#[derive(Default)]
struct Reader {
    nodes: Vec<NodeConfig>,
    problems: Vec<ConfigError>,
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

    fn read_root(&mut self, root: &Yaml) {
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
            overrides_present,
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

fn push_did_you_mean<'a>(
    message: &mut String,
    name: &str,
    candidates: impl Iterator<Item = &'a str>,
    suffix: &str,
) {
    if let Some(best) = close_matches(name, candidates).first() {
        message.push_str(&format!(" (did you mean '{best}{suffix}'?)"));
    }
}

// ---------------------------------------------------------------------------
// Validation against the catalog.

/// One tool as a node exposes it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ToolSpec {
    /// The name the model sees (`<prefix>_<function>` with a prefix).
    pub name: String,
    /// The Python function it calls.
    pub function: String,
    pub description: String,
    pub parameters: Value,
    /// From the tooling's `timeout`; `None` → the pool's default.
    #[serde(skip)]
    pub timeout: Option<Duration>,
}

/// An agent node with function tooling, resolved: its tools in order.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeTools {
    pub id: String,
    /// The timeout of the node's first function tooling (what `resolve` prints
    /// as the node's `timeout`); every tool carries its own in
    /// [`ToolSpec::timeout`].
    pub timeout: Option<Duration>,
    pub tools: Vec<ToolSpec>,
}

/// A node that `resolve` skips, kept for messages.
#[derive(Debug, Clone, PartialEq)]
pub struct OtherNode {
    pub id: String,
    pub node_type: Option<String>,
}

/// A validated workflow: the agent nodes that have function tooling.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedWorkflow {
    pub source: String,
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
            // (function, whether it came through `:All`)
            let functions: Vec<String> = if let Some(module) = name.value.strip_suffix(ALL_SUFFIX) {
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
                            &name_path,
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
                            &name_path,
                            name.line,
                            missing_function_message(&name.value, catalog),
                        ));
                        Vec::new()
                    }
                }
            };
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
                if let Some(other) = exposed.get(&tool_name) {
                    let origin = if other.function == function {
                        String::new()
                    } else {
                        format!(", function '{}'", other.function)
                    };
                    errors.push(ConfigError::new(
                        &name_path,
                        name.line,
                        format!(
                            "tool name '{tool_name}' clashes with the tool of the same name from {}{origin}; \
                             give one of the toolings a different 'prefix'",
                            other.tooling_path
                        ),
                    ));
                    continue;
                }
                exposed.insert(
                    tool_name.clone(),
                    Exposed {
                        tooling_path: tooling.path.clone(),
                        function: function.clone(),
                    },
                );
                let (description, parameters) = if via_all {
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
                };
                tools.push(ToolSpec {
                    name: tool_name,
                    function,
                    description,
                    parameters,
                    timeout,
                });
            }
            let message = match duplicates.as_slice() {
                [] => None,
                [(function, first)] if !via_all => Some(format!(
                    "function '{function}' is declared more than once in this tooling (first at {first})"
                )),
                _ => Some(format!(
                    "'{}' includes functions already declared in this tooling: {}",
                    name.value,
                    duplicates
                        .iter()
                        .map(|(function, first)| format!("'{function}' (at {first})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            };
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

// ---------------------------------------------------------------------------
// The resolved workflow, for callers.

impl ResolvedWorkflow {
    /// Loads a workflow file and validates it against `catalog`.
    pub fn load(
        path: impl AsRef<Path>,
        catalog: &Catalog,
    ) -> Result<ResolvedWorkflow, WorkflowError> {
        Workflow::load(path)?.resolve(catalog)
    }

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
                        json!({"name": t.name, "description": t.description,
                               "parameters": t.parameters, "function": t.function,
                               "timeout": effective(t.timeout)})
                    })
                    .collect(),
            ),
        };
        json!({"id": self.id, "timeout": effective(self.timeout), "tools": tools})
    }

    /// Calls one of the node's tools by the name the model sees, with the
    /// tool's timeout (the pool's default when the workflow gives none) and
    /// `node_id` in its `_context`.
    pub async fn invoke(&self, pool: &Pool, name: &str, args: Value) -> Result<Value, ToolError> {
        self.invoke_report(pool, name, args, InvokeOptions::default())
            .await
            .result
    }

    /// Like [`NodeTools::invoke`]; a timeout in `options` overrides the tool's.
    pub async fn invoke_report(
        &self,
        pool: &Pool,
        name: &str,
        args: Value,
        mut options: InvokeOptions,
    ) -> CallReport {
        let started = Instant::now();
        let Some(tool) = self.tool(name) else {
            let mut message = format!("tool '{name}' is not configured for node '{}'", self.id);
            push_did_you_mean(
                &mut message,
                name,
                self.tools.iter().map(|t| t.name.as_str()),
                "",
            );
            return CallReport {
                result: Err(ToolError::new(name, ErrorKind::NotFound, message)),
                content: None,
                elapsed: started.elapsed(),
                queue_wait: Duration::ZERO,
                worker_pid: None,
            };
        };
        if options.timeout.is_none() {
            options.timeout = tool.timeout;
        }
        if options.context.node_id.is_none() {
            options.context.node_id = Some(self.id.clone());
        }
        let mut report = pool.invoke_report(&tool.function, args, options).await;
        // The agent called the tool by its exposed name; say that name back.
        if let Err(error) = &mut report.result {
            error.tool = tool.name.clone();
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        validate(&workflow, &catalog())
            .map_err(|errors| errors.iter().map(|e| e.to_string()).collect())
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
    fn seconds_print_whole_when_whole() {
        assert_eq!(seconds_json(Duration::from_secs(30)), json!(30));
        assert_eq!(seconds_json(Duration::from_millis(1500)), json!(1.5));
    }

    #[test]
    fn odd_keys_are_quoted_in_paths() {
        assert_eq!(child("a", "b"), "a.b");
        assert_eq!(child("a", "b c"), "a[\"b c\"]");
        assert_eq!(child("", "b"), "b");
    }
}
