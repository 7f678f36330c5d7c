//! How a `tools/call` runs: directly (here), in round trips while its tool
//! asks a human (2026-07-28, `mrtr.rs`, with the questions of `elicit.rs`),
//! or on as a task (`tasks.rs`, `task_input.rs`); what it sends while it
//! runs (`notices.rs`), its result as MCP content (`content.rs`), its span
//! (`spans.rs`), and the count of calls running that shutdown waits on.

pub(super) mod content;
pub(super) mod elicit;
pub(super) mod mrtr;
// MCP deprecates logging (SEP-2577, rmcp marks its types so); 2025-11-25
// clients and the conformance suite still use it.
#[allow(deprecated)]
pub(super) mod notices;
pub(super) mod spans;
mod task_input;
pub(super) mod tasks;

use super::*;

impl ToolpoolServer {
    /// A `tools/call` whose params rmcp could not read (arguments that are
    /// not an object, a name that is not a string) lands here; answer it as
    /// a tool error when it names a tool, as a bad-params error otherwise.
    pub(super) fn custom_request(&self, request: CustomRequest) -> Result<CustomResult, McpError> {
        if request.method != "tools/call" {
            return Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("method not found: {}", request.method),
                None,
            ));
        }
        let params = request.params.unwrap_or(Value::Null);
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return Err(McpError::invalid_params(
                "tools/call needs `name`, the tool's name as a string",
                None,
            ));
        };
        let got = match params.get("arguments") {
            Some(Value::Array(_)) => "an array",
            Some(Value::String(_)) => "a string",
            Some(Value::Number(_)) => "a number",
            Some(Value::Bool(_)) => "a boolean",
            _ => "something else",
        };
        let error = ToolError::new(
            name,
            ErrorKind::InvalidArguments,
            format!("the arguments must be a JSON object, got {got}"),
        );
        let mut result = call_result(Err(error), None, None);
        result.result_type = None;
        let result = serde_json::to_value(result)
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(CustomResult(result))
    }

    /// A `tools/call`, continuing the trace in its context.
    pub(super) async fn call_tool_in(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let trace = CallTrace::of(&context);
        let _in_flight = self.inner.calls.enter();
        let name = request.name.to_string();
        if self.inner.closing.load(Ordering::Acquire) {
            let error = crate::outcome::Refusal::Closing.into_error(&name);
            return Ok(CallToolResponse::Complete(call_result(
                Err(error),
                None,
                None,
            )));
        }
        if matches!(self.tool_set(), ToolSet::Catalog) {
            if let Some(resource) = self.function_of(&name).and_then(|f| f.resource) {
                return Err(McpError::invalid_params(
                    format!(
                        "no tool '{name}': the function serves the resource {} (resources/read)",
                        resource.uri
                    ),
                    None,
                ));
            }
        }
        // Taken, not copied: a large argument is held once.
        let args = Value::Object(request.arguments.take().unwrap_or_default());
        // The toolpool session the call runs in (HTTP: the one the client
        // names, else its credential's).
        let session = self
            .session
            .session(&context)
            .map_err(|e| McpError::invalid_params(e, None))?;
        // The tasks extension (with --task-after): what the tool's author
        // declared, and whether this client takes tasks.
        let (task_support, tool_task_after) = self.task_support_of(&name);
        let takes_tasks = self.task_after_for(&context);
        if task_support == Some(TaskSupport::Required) && takes_tasks.is_none() {
            return Err(tasks_required(&name));
        }
        // A task-supporting tool is a task from the start (the server
        // decides, SEP-2663), even for a client that could also be asked in
        // round trips.
        let directed = takes_tasks.is_some()
            && matches!(
                task_support,
                Some(TaskSupport::Optional | TaskSupport::Required)
            );
        let asks_by_round_trips = elicit::is_modern(&context)
            && (request.request_state.is_some()
                || context
                    .client_capabilities()
                    .is_some_and(|c| c.elicitation.is_some()));
        if asks_by_round_trips {
            let as_task = directed.then_some(tool_task_after);
            return self
                .call_in_round_trips(name, args, session, &request, &context, as_task)
                .await;
        }
        let notices =
            notices::for_request(&context, self.log_level(), self.inner.progress_heartbeat);
        let task_after = match task_support {
            _ if directed => Some(tool_task_after),
            Some(TaskSupport::Forbidden) => None,
            _ => takes_tasks,
        };
        if let Some(after) = task_after {
            return Ok(self
                .call_maybe_as_task(name, args, notices, session, after, &context)
                .await);
        }
        self.call_directly(name, args, notices, session, trace, &context)
            .await
    }

    /// A `tools/call` answered in its own response (not as a task, nor in
    /// round trips), or cancelled with its request or its session.
    async fn call_directly(
        &self,
        name: String,
        args: Value,
        notices: notices::CallNotices,
        session: Option<Arc<Session>>,
        trace: CallTrace,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Only 2025-11-25 HTTP sessions can be ended (DELETE) under a call.
        let session_closed = self.session.closed(context);
        let call = self.invoke(
            &name,
            args,
            notices.prompt(elicit::for_request(context)),
            notices.listeners.clone(),
            session.clone(),
            trace.clone(),
        );
        tokio::select! {
            report = call => {
                // Its last notices before its answer.
                notices.flushed().await;
                if let Err(error) = &report.result {
                    if error.kind == ErrorKind::NotFound {
                        // No such tool (here, or for this workflow node): a
                        // protocol error, as MCP has it, with the same text.
                        return Err(McpError::invalid_params(error.to_string(), None));
                    }
                }
                let result = self.result_of(&name, report, session.as_deref(), true);
                Ok(CallToolResponse::Complete(result))
            }
            _ = context.ct.cancelled() => {
                // Dropping `call` killed its worker (or took it out of the
                // queue).
                trace.cancelled();
                tracing::info!(tool = %name, id = %context.id, "call cancelled by the client");
                Ok(CallToolResponse::Complete(cancelled()))
            }
            _ = session_closed => {
                // As above: the client ended the session (HTTP DELETE).
                tracing::info!(tool = %name, id = %context.id, "call cancelled: its session was closed");
                Err(McpError::internal_error("the session was closed", None))
            }
        }
    }
}

/// Runs a request's `body` and ends its `span` with how it ended.
pub(super) async fn traced<T>(
    span: RequestSpan,
    body: impl std::future::Future<Output = Result<T, McpError>>,
) -> Result<T, McpError> {
    let result = body.await;
    span.end(Outcome::of(&result));
    result
}

impl ToolpoolServer {
    /// Whether the tool `name` may run as a task, as its author declared
    /// it (`None` when tasks are not served — no `--task-after` — or the
    /// author said nothing), and how long a call of it runs before it
    /// becomes one (its `mcp_task_after`, else at once).
    pub(super) fn task_support_of(&self, name: &str) -> (Option<TaskSupport>, Duration) {
        let function = self.inner.task_after.and_then(|_| self.function_of(name));
        let after = function
            .as_ref()
            .and_then(|f| f.task_after)
            .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
            .unwrap_or(Duration::ZERO);
        (function.and_then(|f| f.task_support), after)
    }

    /// `--task-after`, when this request may be answered with a task: on
    /// 2026-07-28, from a client that declares the tasks extension.
    pub(super) fn task_after_for(&self, context: &RequestContext<RoleServer>) -> Option<Duration> {
        let declares = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        self.inner
            .task_after
            .filter(|_| declares && elicit::is_modern(context))
    }

    /// Runs the call in its own task; answers with its result if it ends
    /// within `after`, else with a task it goes on running in.
    pub(super) async fn call_maybe_as_task(
        &self,
        name: String,
        args: Value,
        notices: notices::CallNotices,
        session: Option<Arc<Session>>,
        after: Duration,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let trace = CallTrace::of(context);
        let server = self.clone();
        let tool = name.clone();
        let human = notices.prompt(elicit::for_request(context));
        let listeners = notices.listeners.clone();
        let on_cancel = trace.clone();
        let mut call = tokio::spawn(async move {
            let report = server
                .invoke(&tool, args, human, listeners, session.clone(), trace)
                .await;
            server.task_end(&tool, report, session.as_deref())
        });
        let abort = call.abort_handle();
        let finished = tokio::select! {
            result = &mut call => Some(result),
            _ = tokio::time::sleep(after) => None,
            _ = context.ct.cancelled() => {
                // Aborting drops the call future: its worker is killed.
                abort.abort();
                on_cancel.cancelled();
                tracing::info!(tool = %name, id = %context.id, "call cancelled by the client");
                return CallToolResponse::Complete(cancelled());
            }
        };
        match finished {
            Some(Ok(TaskEnd::Answered(result))) => {
                notices.flushed().await;
                CallToolResponse::Complete(result)
            }
            // Not a task yet: the death is the call's tool error, as for
            // any call.
            Some(Ok(TaskEnd::Failed { message, .. })) => {
                CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(message)]))
            }
            Some(Err(e)) => {
                CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(
                    format!("Tool {name} error: WorkerDied: the call's task failed: {e}"),
                )]))
            }
            None => {
                let task = self
                    .inner
                    .tasks
                    .adopt(call, None, self.session.tenant(context));
                tracing::info!(tool = %name, task = %task.task.task_id, "the call runs on as a task");
                CallToolResponse::Task(task)
            }
        }
    }

    /// How a call that ended becomes a task's end: its result, or — when it
    /// could not answer (its worker died) — a failed task.
    pub(super) fn task_end(
        &self,
        tool: &str,
        report: CallReport,
        session: Option<&Session>,
    ) -> TaskEnd {
        match &report.result {
            Err(error) if error.kind == ErrorKind::WorkerDied => TaskEnd::Failed {
                code: ErrorCode::INTERNAL_ERROR.0,
                message: error.to_string(),
            },
            // Kept for `tasks/get`: never stood in for.
            _ => TaskEnd::Answered(self.result_of(tool, report, session, false)),
        }
    }

    /// `running` goes on as a task: its later questions wait in the task
    /// (`input_required`) for `tasks/update`.
    pub(super) fn as_task(
        &self,
        name: &str,
        running: mrtr::Running,
        session: Option<Arc<Session>>,
        owner: Option<String>,
    ) -> CallToolResponse {
        let questions = Arc::new(task_input::Questions::default());
        let (report, mut asked) = running.into_parts();
        let (server, tool, open) = (self.clone(), name.to_string(), questions.clone());
        let call = tokio::spawn(async move {
            let forward = async move {
                while let Some(question) = asked.recv().await {
                    open.open(&question.request, question.answer);
                }
                std::future::pending::<()>().await
            };
            tokio::select! {
                report = report => match report {
                    Ok(report) => server.task_end(&tool, report, session.as_deref()),
                    Err(e) => TaskEnd::Failed {
                        code: ErrorCode::INTERNAL_ERROR.0,
                        message: format!("the call's task failed: {e}"),
                    },
                },
                _ = forward => unreachable!("the forwarding loop never ends"),
            }
        });
        let task = self.inner.tasks.adopt(call, Some(questions), owner);
        tracing::info!(tool = %name, task = %task.task.task_id, "the call runs on as a task");
        CallToolResponse::Task(task)
    }

    /// A call on 2026-07-28 whose tool may ask a human: the first request
    /// starts it, each retry (with `requestState`) resumes it; either way it
    /// runs until it finishes or asks (see [`mrtr`]). With `as_task` (a
    /// task-supporting tool, a client that takes tasks: the tool's
    /// `mcp_task_after`) a call that has not asked within that time, and one
    /// resumed with its answer, goes on as a task (SEP-2663: round trips
    /// first, then the task).
    pub(super) async fn call_in_round_trips(
        &self,
        name: String,
        args: Value,
        session: Option<Arc<Session>>,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        as_task: Option<Duration>,
    ) -> Result<CallToolResponse, McpError> {
        let trace = CallTrace::of(context);
        let tenant = self.session.tenant(context);
        let binding = mrtr::binding(
            context.client_info().as_ref(),
            tenant.as_deref(),
            &name,
            &args,
        );
        let mut notices = None;
        let running = match &request.request_state {
            Some(state) => match self.inner.round_trips.resume(
                state,
                &binding,
                request.input_responses.as_ref(),
            ) {
                Ok(running) => running,
                // The client did its part; the human was too late. The
                // call's end is a tool error, as it would have been had the
                // client still been waiting.
                Err(late @ mrtr::StateError::Expired { .. }) => {
                    let error = ToolError::new(
                        &name,
                        ErrorKind::Raised("HumanPromptUnavailable".into()),
                        late.to_string(),
                    );
                    return Ok(CallToolResponse::Complete(call_result(
                        Err(error),
                        None,
                        None,
                    )));
                }
                Err(refused) => return Err(McpError::invalid_params(refused.to_string(), None)),
            },
            None => {
                let server = self.clone();
                let tool = name.clone();
                let session = session.clone();
                // Its progress goes to the request that started it; the
                // client's human is asked in round trips, so no heartbeats.
                let started =
                    notices::for_request(context, self.log_level(), self.inner.progress_heartbeat);
                let listeners = started.listeners.clone();
                notices = Some(started);
                let trace = trace.clone();
                mrtr::Running::start(move |human| async move {
                    server
                        .invoke(&tool, args, human, listeners, session, trace)
                        .await
                })
            }
        };
        let until = as_task.map(|after| match request.request_state {
            Some(_) => Duration::ZERO,
            None => after,
        });
        let step = self
            .inner
            .round_trips
            .drive(running, binding, &context.ct, until)
            .await;
        Ok(match step {
            mrtr::Step::Done(report) => {
                if let Some(notices) = notices {
                    notices.flushed().await;
                }
                let result = self.result_of(&name, report, session.as_deref(), true);
                CallToolResponse::Complete(result)
            }
            mrtr::Step::Asks(input) => CallToolResponse::InputRequired(input),
            mrtr::Step::Failed(error) => {
                CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(
                    format!("Tool {name} error: WorkerDied: {error}"),
                )]))
            }
            mrtr::Step::Cancelled => {
                trace.cancelled();
                tracing::info!(tool = %name, id = %context.id, "call cancelled by the client");
                CallToolResponse::Complete(cancelled())
            }
            mrtr::Step::Working(running) => {
                self.as_task(&name, running, session, self.session.tenant(context))
            }
        })
    }

    /// The answer to `tasks/get` or `tasks/cancel` for an id not (or no
    /// longer) in the table.
    pub(super) fn no_task(&self, id: &str) -> McpError {
        McpError::invalid_params(
            format!(
                "no task '{id}': none was made here, or it finished more than {} s ago and was forgotten (--task-keep)",
                crate::duration_text::format_secs(self.inner.tasks.keep())
            ),
            None,
        )
    }

    /// The MCP result of a finished call: its content, and its value as
    /// `structuredContent` when the function has an output schema.
    /// The log level this MCP session's client set, if it did.
    #[allow(deprecated)]
    pub(super) fn log_level(&self) -> Option<LoggingLevel> {
        self.log_level.lock().ok().and_then(|level| *level)
    }

    /// Whether `uri` names a resource the session of `context` can read: one
    /// a function serves, or one of its attachments.
    pub(super) async fn check_resource(
        &self,
        uri: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if resources::functions::find(&self.inner.pool.catalog(), uri).is_some() {
            return Ok(());
        }
        let store = self.store_for(context)?;
        let uri_owned = uri.to_string();
        tokio::task::spawn_blocking(move || resources::attachment(&store, &uri_owned).map(drop))
            .await
            .map_err(|e| McpError::internal_error(format!("looking it up failed: {e}"), None))?
    }

    /// The attachment store of the session the request in `context` runs in.
    pub(super) fn store_for(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<Arc<AttachmentStore>, McpError> {
        let session = self
            .session
            .session(context)
            .map_err(|e| McpError::invalid_params(e, None))?;
        Ok(match session {
            Some(session) => session.attachments().clone(),
            None => self.inner.pool.attachments().clone(),
        })
    }

    /// The answer to a call; `direct`: sent now, in the response to its
    /// request (over HTTP a large text then goes out as a stand-in).
    pub(super) fn result_of(
        &self,
        name: &str,
        report: CallReport,
        session: Option<&Session>,
        direct: bool,
    ) -> CallToolResult {
        let store = match session {
            Some(session) => session.attachments(),
            None => self.inner.pool.attachments(),
        };
        match (report.result, report.content) {
            (Ok(value), None) => plain_result(
                name,
                value,
                self.function_of(name).as_ref(),
                self.inner.pool.limits().max_frame_bytes,
                &|text| match direct {
                    true => self.session.stand_in(text),
                    false => text,
                },
            ),
            (result, content) => call_result(result, content.as_deref(), Some(store)),
        }
    }
}

/// The refusal of a call of a tool that runs only as a task, from a client
/// that does not take tasks: -32021 (Missing Required Client Capability)
/// naming the extension, as SEP-2575 and SEP-2663 have it.
pub(super) fn tasks_required(name: &str) -> McpError {
    McpError::new(
        ErrorCode(-32021),
        format!(
            "the tool '{name}' runs only as a task: the client must declare the {} extension",
            rmcp::model::TASKS_EXTENSION_ID
        ),
        Some(json!({
            "requiredCapabilities": {
                "extensions": {rmcp::model::TASKS_EXTENSION_ID: {}}
            }
        })),
    )
}

/// The answer to a cancelled call. rmcp drops it (the client gave up on the
/// request); it is a result, not an error, because rmcp logs every error
/// answer as a warning and a cancellation is no fault.
pub(super) fn cancelled() -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text("the call was cancelled")])
}

/// Counts `tools/call` handlers running, so shutdown can wait until every
/// call has been answered.
#[derive(Default)]
pub(super) struct CallCounter {
    running: AtomicUsize,
    idle: Notify,
}

impl CallCounter {
    pub(super) fn enter(&self) -> CallGuard<'_> {
        self.running.fetch_add(1, Ordering::AcqRel);
        CallGuard(self)
    }

    pub(super) fn count(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Waits until no call runs, at most `limit`; false when some still do.
    pub(super) async fn wait_idle(&self, limit: Duration) -> bool {
        let wait = async {
            loop {
                let idle = self.idle.notified();
                if self.count() == 0 {
                    return;
                }
                idle.await;
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }
}

pub(super) struct CallGuard<'a>(&'a CallCounter);

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
