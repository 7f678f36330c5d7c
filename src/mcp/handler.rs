//! rmcp's [`ServerHandler`] for [`ToolpoolServer`]: each MCP method, traced
//! by its span (see `calls::spans`), mapped onto the pool, the session's
//! resources and the task store.

use super::*;

impl ServerHandler for ToolpoolServer {
    #[allow(deprecated)] // enable_logging: see `calls::notices`
    fn get_info(&self) -> ServerConfig {
        let capabilities = if self.inner.list_changes.load(Ordering::Acquire) {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .enable_logging()
                .build()
        } else {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_logging()
                .build()
        };
        let mut capabilities = capabilities;
        if self.inner.task_after.is_some() {
            capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .insert(rmcp::model::TASKS_EXTENSION_ID.into(), JsonObject::new());
        }
        let mut info = ServerConfig::new(capabilities);
        let mut implementation = Implementation::new("toolpool", env!("CARGO_PKG_VERSION"));
        implementation.title = Some("toolpool".into());
        implementation.website_url = option_env!("CARGO_PKG_REPOSITORY")
            .filter(|url| !url.is_empty())
            .map(str::to_string);
        implementation.icons = Some(vec![server_icon()]);
        implementation.description = Some(
            "Python function tools run in a pool of isolated workers, with enforced timeouts"
                .into(),
        );
        info.server_info = implementation;
        info.protocol_version = HANDSHAKE_PROTOCOL;
        info.instructions = Some(
            "Each tool is a Python function run in an isolated worker. A call that runs past \
             its timeout is killed and reported as a tool error (TimeoutError); failures are \
             tool results with isError set, as 'Tool <name> error: <Type>: <message>'."
                .into(),
        );
        info
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&MAX_PROTOCOL))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        traced(self.span(&context, "tools/list", None, None), async {
            let cursor = request.and_then(|r| r.cursor);
            let (tools, next) = page(self.tools(), cursor.as_deref())?;
            let mut result = ListToolsResult::with_all_items(tools);
            result.next_cursor = next;
            Ok(result)
        })
        .await
    }

    /// The files of the request's session (its attachments).
    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        traced(self.span(&context, "resources/list", None, None), async {
            let store = self.store_for(&context)?;
            let listed = tokio::task::spawn_blocking(move || resources::list(&store))
                .await
                .map_err(|e| McpError::internal_error(format!("listing failed: {e}"), None))?;
            let mut all = resources::functions::listed(&self.inner.pool.catalog());
            all.extend(listed.resources);
            let cursor = request.and_then(|r| r.cursor);
            let (items, next) = page(all, cursor.as_deref())?;
            Ok(ListResourcesResult {
                resources: items,
                next_cursor: next,
                ..listed
            })
        })
        .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        traced(
            self.span(&context, "resources/templates/list", None, None),
            async {
                let attachments = resources::templates();
                let mut all = resources::functions::templates(&self.inner.pool.catalog());
                all.extend(attachments.resource_templates);
                let cursor = request.and_then(|r| r.cursor);
                let (items, next) = page(all, cursor.as_deref())?;
                Ok(ListResourceTemplatesResult {
                    resource_templates: items,
                    next_cursor: next,
                    ..attachments
                })
            },
        )
        .await
    }

    /// A resource a function serves (run in the request's session), or one
    /// file of the request's session by its `toolpool://attachments/` URI.
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri;
        let span = self.span(&context, "resources/read", None, Some(&uri));
        let trace = span.call();
        traced(span, async {
            let catalog = self.inner.pool.catalog();
            if let Some((function, args)) = resources::functions::find(&catalog, &uri) {
                let session = self
                    .session
                    .session(&context)
                    .map_err(|e| McpError::invalid_params(e, None))?;
                let options = InvokeOptions {
                    human_prompt: Some(Arc::new(calls::elicit::NoHuman(
                        "a resource is read without a human to ask",
                    ))),
                    session,
                    trace: trace.for_tool(),
                    ..InvokeOptions::default()
                };
                let name = function.name.clone();
                let report = tokio::select! {
                    report = self.inner.pool.invoke_report(&name, Value::Object(args), options) => report,
                    _ = context.ct.cancelled() => {
                        trace.cancelled();
                        return Err(McpError::internal_error("the read was cancelled", None));
                    }
                };
                trace.call_ended(&report);
                return resources::functions::contents(function, &uri, report.result)
                    .map(ReadResourceResponse::Complete);
            }
            let store = self.store_for(&context)?;
            let uri = uri.clone();
            tokio::task::spawn_blocking(move || resources::read(&store, &uri))
                .await
                .map_err(|e| McpError::internal_error(format!("reading failed: {e}"), None))?
                .map(ReadResourceResponse::Complete)
        })
        .await
    }

    /// `resources/subscribe` (2025-11-25 sessions): the URI must name a
    /// resource this session can read; its client is then told
    /// (`notifications/resources/updated`) when a reload changes the code
    /// that serves it. An attachment's file is not watched.
    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let span = self.span(&context, "resources/subscribe", None, Some(&request.uri));
        traced(span, async {
            self.check_resource(&request.uri, &context).await?;
            let listeners = &self.inner.listeners;
            let id = *self
                .listener
                .get_or_init(|| listeners.add_session(context.peer.clone(), false));
            if !listeners.subscription(id, &request.uri, true) {
                // Its connection was found closed and dropped: a new entry.
                let id = listeners.add_session(context.peer.clone(), false);
                listeners.subscription(id, &request.uri, true);
            }
            Ok(())
        })
        .await
    }

    /// `resources/unsubscribe`: the URI is no longer watched for this session.
    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let span = self.span(&context, "resources/unsubscribe", None, Some(&request.uri));
        if let Some(id) = self.listener.get() {
            self.inner.listeners.subscription(*id, &request.uri, false);
        }
        span.end(Outcome::Ok);
        Ok(())
    }

    /// The level from which this session's calls' log records reach the
    /// client (`notifications/message`).
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let span = self.span(&context, "logging/setLevel", None, None);
        if let Ok(mut level) = self.log_level.lock() {
            *level = Some(request.level);
        }
        span.end(Outcome::Ok);
        Ok(())
    }

    async fn ping(&self, context: RequestContext<RoleServer>) -> Result<(), McpError> {
        self.span(&context, "ping", None, None).end(Outcome::Ok);
        Ok(())
    }

    /// rmcp's own, in a span.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let span = self.span(&context, "initialize", None, None);
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request);
        span.end(Outcome::of(&result));
        result
    }

    /// rmcp's own, in a span.
    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        self.span(&context, "server/discover", None, None)
            .end(Outcome::Ok);
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools().into_iter().find(|t| t.name == name)
    }

    /// A session from `initialize` is told of list changes on its connection.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if self.inner.list_changes.load(Ordering::Acquire) {
            let id = self.inner.listeners.add_session(context.peer, true);
            let _ = self.listener.set(id);
        }
    }

    /// 2026-07-28 `subscriptions/listen`: tool and resource list changes
    /// with `--watch`, and updates of the resources functions serve. Always
    /// `Some`, if empty: `None` would answer the stream -32601 (not
    /// implemented) although `resources.subscribe` is declared.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut filter = SubscriptionFilter::new();
        if self.inner.list_changes.load(Ordering::Acquire) {
            filter.tools_list_changed = Some(true);
            filter.resources_list_changed = Some(true);
        }
        // Resources a function serves: the ones a reload can change.
        let catalog = self.inner.pool.catalog();
        let served: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| resources::functions::find(&catalog, uri).is_some())
            .cloned()
            .collect();
        if !served.is_empty() {
            filter.resource_subscriptions = Some(served);
        }
        Some(filter)
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let span = self.span(&context, "tasks/get", None, None);
        let tenant = self.session.tenant(&context);
        let result = match self.inner.tasks.get(&request.task_id, tenant.as_deref()) {
            Some(task) => Ok(GetTaskResult::new(task)),
            None => Err(self.no_task(&request.task_id)),
        };
        span.end(Outcome::of(&result));
        result
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let span = self.span(&context, "tasks/cancel", None, None);
        let tenant = self.session.tenant(&context);
        let result = if self.inner.tasks.cancel(&request.task_id, tenant.as_deref()) {
            Ok(())
        } else {
            Err(self.no_task(&request.task_id))
        };
        span.end(Outcome::of(&result));
        result
    }

    /// The client's answers to a task's questions.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let span = self.span(&context, "tasks/update", None, None);
        let tenant = self.session.tenant(&context);
        let result = if self.inner.tasks.update(
            &request.task_id,
            &request.input_responses,
            tenant.as_deref(),
        ) {
            Ok(())
        } else {
            Err(self.no_task(&request.task_id))
        };
        span.end(Outcome::of(&result));
        result
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let uris = context
            .accepted()
            .resource_subscriptions
            .iter()
            .flatten()
            .cloned()
            .collect();
        let id = self
            .inner
            .listeners
            .add_stream(context.sink().clone(), uris);
        context.cancelled().await;
        self.inner.listeners.remove(id);
        Ok(())
    }

    /// A `tools/call` whose params rmcp could not read (arguments that are
    /// not an object, a name that is not a string) lands here; answer it as
    /// a tool error when it names a tool, as a bad-params error otherwise.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let tool = request
            .params
            .as_ref()
            .and_then(|params| params.get("name"))
            .and_then(Value::as_str);
        let span =
            (request.method == "tools/call").then(|| self.span(&context, "tools/call", tool, None));
        let result = self.custom_request(request);
        if let Some(span) = span {
            span.end(match &result {
                // Always an `isError` result (see below).
                Ok(_) => Outcome::ToolError("the arguments must be a JSON object"),
                Err(_) => Outcome::of(&result),
            });
        }
        result
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let span = self.span(&context, "tools/call", Some(&request.name), None);
        // Where every path of the call finds it (see `CallTrace::of`).
        let mut context = context;
        context.extensions.insert(span.call());
        let result = self.call_tool_in(request, context).await;
        span.end(Outcome::of_call(&result));
        result
    }
}
