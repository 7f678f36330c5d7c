//! One call through the pool: its options resolved (timeout, grace,
//! context), a worker checked out and the call run on it — again elsewhere
//! only when the kernel says the worker never read it — and how it ended
//! ([`Ending`]) made the caller's result (`crate::outcome`).

use super::call::{AttemptEnd, CallNext, CallState};
use super::lease::Lease;
use super::stats::Gauge;
use super::{CallReport, InvokeOptions, Pool, Shared, CALL_LOG_TARGET};
use crate::content::ContentBlock;
use crate::context::{AttachmentStore, CallbackHandler, CallbackService, SessionServices};
use crate::error::{ErrorKind, ToolError};
use crate::outcome::{CallOutcome, CallTime, Ending, Termination};
use crate::protocol::{CallContext, SessionDirs, WireBlock};
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A call made ready to run ([`Pool::prepare`]).
struct Prepared {
    time: CallTime,
    services: Arc<SessionServices>,
    callbacks: Arc<dyn CallbackService>,
    context: CallContext,
}

/// One call, as [`Pool::run_on`] runs it.
struct Call<'a> {
    name: &'a str,
    args: &'a Value,
    context: &'a CallContext,
    callbacks: &'a Arc<dyn CallbackService>,
    time: CallTime,
}

/// How one attempt of a call on a worker ended.
enum Attempt {
    /// The call ended on the worker of this pid.
    Done(Ending, i32),
    /// The worker was broken before it started the call.
    NotStarted { pid: i32, how: Termination },
}

impl Shared {
    /// An attachment result's blocks as the session's store knows them (the
    /// store reads files: on a blocking thread).
    pub(super) async fn check_content(
        &self,
        blocks: Vec<WireBlock>,
        store: Arc<AttachmentStore>,
    ) -> Vec<ContentBlock> {
        tokio::task::spawn_blocking(move || {
            blocks
                .into_iter()
                .map(|block| ContentBlock::from_wire(block, &store))
                .collect()
        })
        .await
        .unwrap_or_default()
    }

    pub(super) fn count_error(&self, error: &ToolError) {
        match error.kind {
            ErrorKind::Timeout => self.counters.timeouts.fetch_add(1, Ordering::Relaxed),
            ErrorKind::WorkerDied => self.counters.worker_deaths.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        if let Ok(mut by_type) = self.counters.errors_by_type.lock() {
            *by_type
                .entry(error.kind.type_name().to_string())
                .or_default() += 1;
        }
    }
}

impl Pool {
    /// Calls a tool; the error's `Display` is the agent-facing text.
    pub async fn invoke(
        &self,
        name: &str,
        args: Value,
        options: InvokeOptions,
    ) -> Result<Value, ToolError> {
        self.invoke_report(name, args, options).await.result
    }

    /// Like [`Pool::invoke`], with the elapsed time and the worker's pid.
    pub async fn invoke_report(
        &self,
        name: &str,
        args: Value,
        options: InvokeOptions,
    ) -> CallReport {
        let shared = &self.shared;
        shared.counters.calls.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let tenant = options
            .session
            .as_ref()
            .and_then(|s| s.tenant())
            .map(str::to_string);
        let mut report = self.run_call(name, &args, options).await;
        if let Some(tenant) = &tenant {
            shared
                .counters
                .count_tenant_call(tenant, report.result.is_err());
        }
        match &report.result {
            Ok(_) => {
                shared.counters.succeeded.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                shared.count_error(error);
                // Under their own target, so that `toolpool call`, which prints
                // the text itself, can leave it out of the log; the traceback
                // only at debug level (`-v`).
                tracing::warn!(target: CALL_LOG_TARGET, tool = name, "{error}");
                if let Some(traceback) = &error.traceback {
                    tracing::debug!(target: CALL_LOG_TARGET, tool = name, "{traceback}");
                }
            }
        }
        report.elapsed = started.elapsed();
        if let Ok(mut latency) = shared.counters.latency.lock() {
            latency.record(report.elapsed);
        }
        report
    }

    /// The call's report, but for its `elapsed`, which the caller measures.
    async fn run_call(&self, name: &str, args: &Value, options: InvokeOptions) -> CallReport {
        let session = options.session.clone();
        let prepared = self.prepare(name, options);
        let (ending, pid, queue_wait) = self
            .attempts(name, args, session.as_deref(), &prepared)
            .await;
        let memory_limit = self.shared.spec.memory_limit_bytes;
        let (result, blocks) = ending.into_result(name, pid, memory_limit);
        let content = match blocks {
            Some(blocks) => Some(
                self.shared
                    .check_content(blocks, prepared.services.attachments.clone())
                    .await,
            ),
            None => None,
        };
        CallReport {
            result,
            content,
            elapsed: Duration::ZERO,
            queue_wait,
            worker_pid: pid,
        }
    }

    /// Runs the call on a worker, and once more on another when the kernel
    /// says the first never read it: how it ended, on which worker, and how
    /// long it waited for one.
    async fn attempts(
        &self,
        name: &str,
        args: &Value,
        session: Option<&crate::context::Session>,
        prepared: &Prepared,
    ) -> (Ending, Option<i32>, Duration) {
        let shared = &self.shared;
        let queued = Instant::now();
        let mut state = CallState::new();
        loop {
            let checkout = shared.checkout(&prepared.services.session_id).await;
            let queue_wait = queued.elapsed();
            let mut lease = match checkout {
                Ok(lease) => lease,
                Err(e) => {
                    state.abandoned();
                    return (Ending::Refused(e), None, queue_wait);
                }
            };
            if state.got_worker().is_err() {
                return (Ending::Lost, None, queue_wait);
            }
            if shared.spec.sandbox.is_some() {
                lease = match shared.sandboxed_lease(lease, session).await {
                    Ok(lease) => lease,
                    Err(e) => return (Ending::Refused(e), None, queued.elapsed()),
                };
            } else if !shared.admits(&mut lease, &prepared.services.session_id) {
                if state.refused_by_worker().is_err() {
                    return (Ending::Lost, None, queue_wait);
                }
                continue;
            }
            let call = Call {
                name,
                args,
                context: &prepared.context,
                callbacks: &prepared.callbacks,
                time: prepared.time,
            };
            let attempt = self.run_on(lease, call).await;
            let end = match &attempt {
                Attempt::NotStarted { .. } => AttemptEnd::NeverStarted,
                Attempt::Done(..) => AttemptEnd::Ran,
            };
            match (state.attempt_ended(&end), attempt) {
                (Err(_), _) => return (Ending::Lost, None, queue_wait),
                // An earlier call broke that worker before it read this
                // call's request: the call moves to a fresh worker, once.
                (Ok(CallNext::CheckOutAgain), _) => {}
                (Ok(_), Attempt::NotStarted { pid, how }) => {
                    return (Ending::BrokenTwice(how), Some(pid), queue_wait);
                }
                (Ok(_), Attempt::Done(ending, pid)) => return (ending, Some(pid), queue_wait),
            }
        }
    }

    /// What a call takes to each attempt: its timeout and grace (the
    /// caller's or a workflow file's, else the tool's own, else the
    /// pool's), its session's services, the handler of its callbacks, and
    /// the context the tool is told.
    fn prepare(&self, name: &str, options: InvokeOptions) -> Prepared {
        let shared = &self.shared;
        // The caller's (a workflow file's) timeout, else the tool's own,
        // else the pool's.
        let catalog = self.catalog();
        let time = CallTime {
            timeout: options
                .timeout
                .or_else(|| catalog.own_timeout(name))
                .unwrap_or(shared.default_timeout),
            grace: options
                .timeout_grace
                .or_else(|| catalog.own_timeout_grace(name))
                .unwrap_or(shared.default_grace),
        };
        drop(catalog);
        let services = match &options.session {
            Some(session) => session.services().clone(),
            None => shared.services.clone(),
        };
        let handler = CallbackHandler::new(
            services.clone(),
            options.human_prompt,
            options.progress,
            options.logs,
        );
        let human_prompt = handler.has_human_prompt();
        let progress = handler.has_progress();
        let log_level = handler.log_threshold();
        let callbacks: Arc<dyn CallbackService> = Arc::new(handler);
        let context = CallContext {
            session_id: services.session_id.clone(),
            node_id: options.context.node_id,
            vars: options.context.vars,
            host: options.context.host,
            human_prompt,
            progress,
            log_level,
            session: options.session.as_ref().map(|session| SessionDirs {
                dir: session.paths.dir.clone(),
                workspace: session.paths.workspace.clone(),
                packages_dir: session.paths.site_packages.clone(),
            }),
            trace: options.trace,
        };
        Prepared {
            time,
            services,
            callbacks,
            context,
        }
    }

    /// One attempt of a call on the worker of `lease`.
    async fn run_on(&self, mut lease: Lease, call: Call<'_>) -> Attempt {
        let Call {
            name,
            args,
            context,
            callbacks,
            time,
        } = call;
        let shared = &self.shared;
        let worker = lease.worker();
        let pid = worker.pid();
        if shared
            .max_calls_per_worker
            .is_some_and(|max| worker.calls_served() + 1 == max)
        {
            // Start the successor now so capacity does not dip when this one retires.
            shared.replace();
        }
        let busy = Gauge::up(&shared.counters.busy);
        let outcome = worker
            .invoke(name, args, context, time, Some(callbacks))
            .await;
        drop(busy);
        if let CallOutcome::Reply {
            left_running: Some(left),
            ..
        } = &outcome
        {
            shared.counters.count_left_behind(left.cause);
        }
        let closing = shared.workers.is_closed();
        match Ending::of_attempt(outcome, time, closing) {
            Ok((ending, ended)) => {
                lease.finish(ended);
                Attempt::Done(ending, pid)
            }
            Err(how) => {
                lease.finish(Some(how.clone()));
                Attempt::NotStarted { pid, how }
            }
        }
    }
}
