//! Workflow files: which function tools each agent node gets (docs/workflows.md).
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
//! 2. [`validate`] checks the workflow against a
//!    [`Catalog`](crate::catalog::Catalog) — a pure
//!    function, no Python involved — and returns either a
//!    [`ResolvedWorkflow`] or **every** problem, each a [`ConfigError`]
//!    `<path>: <message> (line N)`.
//! 3. [`NodeTools`] hands out a node's tool specs and routes a call by the
//!    name the model sees; `NodeTools::invoke` (in `node_calls`, above both
//!    this module and the pool, so that this one never depends on the pool)
//!    calls it through a `Pool` with the timeout the workflow gives it.
//!
//! Only the tooling subtree is validated strictly. A workflow file carries a
//! lot of configuration that belongs to the agent runtime (models, prompts,
//! edges, other node types): all of it is left alone, unknown keys included.
//!
//! Why the typed structs are not `#[derive(Deserialize)]`d directly: serde
//! stops at the first error, and a person fixing a workflow file wants all of
//! them at once. So the YAML is first read into a small tree that keeps each
//! node's line, and the tree is walked by hand.
//!
//! The files: `yaml` (the tree with lines, and the parser's limits),
//! `reader` (tree → typed [`Workflow`], every problem of shape), `workflow`
//! (the typed structs, loading), `validate` (against the catalog),
//! `resolved` (the result and how `resolve` prints it), `error`.

mod error;
mod load;
mod reader;
mod resolved;
mod validate;
mod workflow;
mod yaml;

pub use error::{ConfigError, WorkflowError};
pub use resolved::{nodes_json, NodeTools, OtherNode, ResolvedWorkflow, ToolFormat, ToolSpec};
pub use validate::validate;
pub use workflow::{
    FunctionToolConfig, FunctionToolEntryConfig, FunctionTooling, Located, NodeConfig,
    ToolingConfig, ToolingKind, Workflow,
};

#[cfg(test)]
mod tests;
