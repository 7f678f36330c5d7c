//! Calling a workflow node's tools through a [`Pool`]: the tool's timeout
//! and the node's id applied, errors named by the tool's exposed name.
//!
//! It sits above both [`crate::config`] and [`crate::pool`] so that the
//! workflow reader does not depend on the pool (the dependency points one way).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::config::NodeTools;
use crate::error::ToolError;
use crate::pool::{CallReport, InvokeOptions, Pool};

impl NodeTools {
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
        let tool = match self.route(name) {
            Ok(tool) => tool,
            Err(error) => {
                return CallReport {
                    result: Err(error),
                    content: None,
                    elapsed: started.elapsed(),
                    queue_wait: Duration::ZERO,
                    worker_pid: None,
                }
            }
        };
        if options.timeout.is_none() {
            options.timeout = tool.timeout;
        }
        if options.timeout_grace.is_none() {
            options.timeout_grace = tool.timeout_grace;
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
