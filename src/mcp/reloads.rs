//! A reload seen by the MCP server: the node re-resolved (in node mode),
//! and the tool and resource lists compared, their listeners told what
//! changed.

use super::*;

impl ToolpoolServer {
    /// After each reload: re-resolves the node (in node mode) and, when the
    /// tool list changed, tells every listener. Runs until the watcher ends.
    pub(super) fn follow_reloads(
        &self,
        mut reloads: tokio::sync::watch::Receiver<u64>,
        workflow: Option<Workflow>,
    ) {
        self.inner.list_changes.store(true, Ordering::Release);
        let server = self.clone();
        tokio::spawn(async move {
            let mut listed = server.tools();
            let mut resources = server.resource_uris();
            while reloads.changed().await.is_ok() {
                listed = server.reloaded(workflow.as_ref(), listed).await;
                resources = server.resources_reloaded(resources).await;
            }
        });
    }

    /// The URIs and URI templates the functions serve.
    pub(super) fn resource_uris(&self) -> Vec<String> {
        let catalog = self.inner.pool.catalog();
        let listed = resources::functions::listed(&catalog)
            .into_iter()
            .map(|r| r.uri);
        let templates = resources::functions::templates(&catalog)
            .into_iter()
            .map(|t| t.uri_template);
        listed.chain(templates).collect()
    }

    /// After a reload: each subscription to a resource a function serves is
    /// told that it may have changed (its code was reloaded), then a changed
    /// resource list (`before`: its URIs before it) is told to every
    /// listener of lists. Returns the URIs after it.
    pub(super) async fn resources_reloaded(&self, before: Vec<String>) -> Vec<String> {
        let catalog = self.inner.pool.catalog();
        let told = self
            .inner
            .listeners
            .notify_updated(|uri| resources::functions::find(&catalog, uri).is_some())
            .await;
        if told > 0 {
            tracing::info!(
                notices = told,
                "subscribed resources reloaded; clients told"
            );
        }
        let after = self.resource_uris();
        if after != before {
            let told = self
                .inner
                .listeners
                .notify_list_changed(listeners::Change::Resources)
                .await;
            tracing::info!(clients = told, "the resource list changed; clients told");
        }
        after
    }

    /// `before`: the list before the reload; returns the list after it.
    pub(super) async fn reloaded(
        &self,
        workflow: Option<&Workflow>,
        before: Vec<Tool>,
    ) -> Vec<Tool> {
        if let (Some(workflow), ToolSet::Node(node)) = (workflow, self.tool_set()) {
            let resolved = workflow
                .resolve(&self.inner.pool.catalog())
                .and_then(|resolved| resolved.node_tools(&node.id).cloned());
            match resolved {
                Ok(resolved) => match self.inner.tools.write() {
                    Ok(mut tools) => *tools = ToolSet::Node(resolved),
                    Err(poisoned) => *poisoned.into_inner() = ToolSet::Node(resolved),
                },
                Err(error) => tracing::warn!(
                    node = %node.id,
                    "after the reload the workflow no longer resolves, so the node keeps its tools: {error}"
                ),
            }
        }
        let after = self.tools();
        if after == before {
            tracing::debug!("reloaded; the tool list is unchanged");
        } else {
            let told = self
                .inner
                .listeners
                .notify_list_changed(listeners::Change::Tools)
                .await;
            tracing::info!(clients = told, "the tool list changed; clients told");
        }
        after
    }
}
