//! What a call tells its client while it runs: the tool's progress
//! (`_context["progress"]`) as `notifications/progress` for a request that
//! sent a `progressToken`, and its log records (Python's `logging`) as
//! `notifications/message` for a client that asked for a log level (the
//! request's `_meta` on 2026-07-28, `logging/setLevel` for its session
//! before).
//!
//! Both go through a small queue to one task per call that sends them in
//! order; when the client reads slower than the tool reports, the notices
//! the queue cannot hold are dropped (a later one says more). While the tool
//! waits for a human, the task sends a heartbeat every
//! [`HEARTBEAT_EVERY`] — clients that reset their request timeout on
//! progress (the TypeScript SDK's `resetTimeoutOnProgress`) then keep
//! waiting for the human. MCP wants every notification's `progress` above
//! the last one's: a heartbeat carries the next representable number after
//! the last one sent, so a fraction never moves visibly. With
//! `--progress-heartbeat SECS` a running call beats too, every SECS in
//! which nothing was sent, its message the time it has run.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use tokio::sync::{mpsc, watch};

use crate::context::{
    BoxFuture, HumanPrompt, LogLevel, LogListener, LogRecord, LogSubscription, Progress,
    ProgressListener, PromptAnswer, PromptError, PromptRequest,
};

/// How often a call waiting for a human tells its client it is alive.
pub(crate) const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// Notices queued for the client at most.
const QUEUED_NOTICES: usize = 64;
/// The heartbeat's message.
const WAITING: &str = "waiting for a human's answer";

/// Longest a call's answer waits for its last progress reports to be sent.
const FLUSH_WAIT: Duration = Duration::from_secs(1);

/// The listeners a call's pool is given.
#[derive(Clone, Default)]
pub(crate) struct Listeners {
    /// For [`crate::InvokeOptions::progress`]; `None` when the request sent
    /// no `progressToken`.
    pub progress: Option<Arc<dyn ProgressListener>>,
    /// For [`crate::InvokeOptions::logs`]; `None` when the client asked for
    /// no log level.
    pub logs: Option<LogSubscription>,
}

/// What one call tells its client: the listeners the pool is given, and the
/// task that sends the notices.
pub(crate) struct CallNotices {
    /// What the pool is given for the call.
    pub listeners: Listeners,
    /// How many of the call's questions to a human are open.
    waiting: Option<Arc<watch::Sender<usize>>>,
    sender: Option<tokio::task::JoinHandle<()>>,
}

impl CallNotices {
    /// `human`, counting its open questions so that the client hears a
    /// heartbeat while one is.
    pub(crate) fn prompt(&self, human: Arc<dyn HumanPrompt>) -> Arc<dyn HumanPrompt> {
        match &self.waiting {
            Some(waiting) => Arc::new(Heartbeats {
                human,
                waiting: waiting.clone(),
            }),
            None => human,
        }
    }

    /// Resolves once every notice of the call is sent (the call has ended,
    /// so its listeners and prompt are dropped), so that none arrives after
    /// the answer; at most [`FLUSH_WAIT`].
    pub(crate) async fn flushed(self) {
        if let Some(sender) = self.sender {
            let _ = tokio::time::timeout(FLUSH_WAIT, sender).await;
        }
    }
}

/// What the call of `context` tells its client: progress when the request
/// sent a token, log records from the request's log level (2026-07-28's
/// `_meta`), else from `session_level` (what `logging/setLevel` set).
pub(crate) fn for_request(
    context: &RequestContext<RoleServer>,
    session_level: Option<LoggingLevel>,
    running_beat: Option<Duration>,
) -> CallNotices {
    let token = context.meta.get_progress_token();
    let level = context.meta.log_level().or(session_level);
    if token.is_none() && level.is_none() {
        return CallNotices {
            listeners: Listeners::default(),
            waiting: None,
            sender: None,
        };
    }
    let (notices, queue) = mpsc::channel(QUEUED_NOTICES);
    let (waiting, waits) = watch::channel(0usize);
    let progress = token.is_some().then(|| {
        let reports: Arc<dyn ProgressListener> = Arc::new(Reports(notices.clone()));
        reports
    });
    let logs = level.map(|level| LogSubscription {
        level: log_level(level),
        listener: Arc::new(Reports(notices)),
    });
    let sender = tokio::spawn(forward(
        context.peer.clone(),
        token,
        queue,
        waits,
        running_beat,
    ));
    CallNotices {
        listeners: Listeners { progress, logs },
        waiting: Some(Arc::new(waiting)),
        sender: Some(sender),
    }
}

/// One thing to tell the client.
enum Notice {
    Progress(Progress),
    Log(LogRecord),
}

fn log_level(level: LoggingLevel) -> LogLevel {
    match level {
        LoggingLevel::Debug => LogLevel::Debug,
        LoggingLevel::Info => LogLevel::Info,
        LoggingLevel::Notice => LogLevel::Notice,
        LoggingLevel::Warning => LogLevel::Warning,
        LoggingLevel::Error => LogLevel::Error,
        LoggingLevel::Critical => LogLevel::Critical,
        LoggingLevel::Alert => LogLevel::Alert,
        LoggingLevel::Emergency => LogLevel::Emergency,
    }
}

fn logging_level(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Notice => LoggingLevel::Notice,
        LogLevel::Warning => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
        LogLevel::Critical => LoggingLevel::Critical,
        LogLevel::Alert => LoggingLevel::Alert,
        _ => LoggingLevel::Emergency,
    }
}

/// The pool's side: notices into the queue.
struct Reports(mpsc::Sender<Notice>);

impl Reports {
    fn queue(&self, notice: Notice) {
        if self.0.try_send(notice).is_err() {
            tracing::debug!("a notice dropped: the client reads slower than the tool reports");
        }
    }
}

impl ProgressListener for Reports {
    fn report(&self, progress: Progress) {
        self.queue(Notice::Progress(progress));
    }
}

impl LogListener for Reports {
    fn record(&self, record: LogRecord) {
        self.queue(Notice::Log(record));
    }
}

/// The call's human prompt; counts the questions open while it asks.
struct Heartbeats {
    human: Arc<dyn HumanPrompt>,
    waiting: Arc<watch::Sender<usize>>,
}

/// Counts one open question while it lives (also when the question's future
/// is dropped because the call ended).
struct Asking(Arc<watch::Sender<usize>>);

impl Asking {
    fn new(waiting: Arc<watch::Sender<usize>>) -> Asking {
        waiting.send_modify(|open| *open += 1);
        Asking(waiting)
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        self.0.send_modify(|open| *open -= 1);
    }
}

impl HumanPrompt for Heartbeats {
    fn request(&self, request: PromptRequest) -> BoxFuture<'_, Result<PromptAnswer, PromptError>> {
        Box::pin(async move {
            let _asking = Asking::new(self.waiting.clone());
            self.human.request(request).await
        })
    }

    fn request_many(
        &self,
        requests: Vec<PromptRequest>,
    ) -> BoxFuture<'_, Result<Vec<PromptAnswer>, PromptError>> {
        Box::pin(async move {
            let _asking = Asking::new(self.waiting.clone());
            self.human.request_many(requests).await
        })
    }
}

/// Sends the call's notices, and progress heartbeats while a question is
/// open, until the call ends (every sender is gone) or the client is.
async fn forward(
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    mut queue: mpsc::Receiver<Notice>,
    mut waits: watch::Receiver<usize>,
    running_beat: Option<Duration>,
) {
    let started = tokio::time::Instant::now();
    // When the last progress notification went out (or the call started).
    let mut last_sent = started;
    let mut last: Option<Progress> = None;
    let mut heartbeat = tokio::time::interval(HEARTBEAT_EVERY);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut prompt_alive = true;
    loop {
        let waiting = token.is_some() && prompt_alive && *waits.borrow() > 0;
        let next = tokio::select! {
            notice = queue.recv() => match notice {
                Some(Notice::Progress(report)) => after(last.as_ref(), report),
                Some(Notice::Log(record)) => {
                    let notification = LoggingMessageNotificationParam::new(
                        logging_level(record.level),
                        serde_json::Value::String(record.message),
                    )
                    .with_logger(record.logger);
                    if let Err(error) = peer.notify_logging_message(notification).await {
                        tracing::debug!("log message not sent, the client is gone: {error}");
                        return;
                    }
                    continue;
                }
                None => return,
            },
            changed = waits.changed(), if prompt_alive => {
                match changed {
                    // A question opened or closed: the next heartbeat a
                    // whole period from now.
                    Ok(()) => heartbeat.reset(),
                    // The prompt is gone; the reports still queued are sent.
                    Err(_) => prompt_alive = false,
                }
                continue;
            }
            _ = heartbeat.tick(), if waiting => beat(last.as_ref()),
            _ = tokio::time::sleep_until(last_sent + running_beat.unwrap_or_default()),
                if token.is_some() && running_beat.is_some() && !waiting =>
            {
                running(last.as_ref(), started.elapsed())
            }
        };
        let Some(token) = &token else {
            continue; // no token: no progress is queued, and no heartbeat beats
        };
        let mut notification = ProgressNotificationParam::new(token.clone(), next.progress);
        notification.total = next.total;
        notification.message = next.message.clone();
        if let Err(error) = peer.notify_progress(notification).await {
            tracing::debug!("progress not sent, the client is gone: {error}");
            return;
        }
        last = Some(next);
        last_sent = tokio::time::Instant::now();
    }
}

/// `report` as sent after `last`: above it, whatever heartbeats came between.
fn after(last: Option<&Progress>, mut report: Progress) -> Progress {
    if let Some(last) = last {
        if report.progress <= last.progress {
            report.progress = last.progress.next_up();
        }
    }
    report
}

/// A running call's heartbeat after `last`, saying how long it has run.
fn running(last: Option<&Progress>, elapsed: Duration) -> Progress {
    Progress {
        message: Some(format!(
            "still running after {} s",
            crate::duration_text::format_secs(elapsed)
        )),
        ..beat(last)
    }
}

/// A heartbeat after `last`: the same fraction, moved up by the least step.
fn beat(last: Option<&Progress>) -> Progress {
    Progress {
        progress: last.map_or(0.0, |last| last.progress.next_up()),
        total: last.and_then(|last| last.total),
        message: Some(WAITING.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(progress: f64, total: Option<f64>) -> Progress {
        Progress {
            progress,
            total,
            message: None,
        }
    }

    #[test]
    fn heartbeats_and_reports_together_only_ever_go_up() {
        let first = beat(None);
        assert_eq!(first.progress, 0.0);
        assert_eq!(first.message.as_deref(), Some(WAITING));
        let report = after(Some(&first), at(2.0, Some(4.0)));
        assert_eq!(report.progress, 2.0);
        let heartbeat = beat(Some(&report));
        assert!(heartbeat.progress > 2.0 && heartbeat.progress < 2.000_001);
        assert_eq!(heartbeat.total, Some(4.0));
        // A report the heartbeats overtook is moved above them.
        let overtaken = after(Some(&heartbeat), at(2.0, Some(4.0)));
        assert!(overtaken.progress > heartbeat.progress);
    }
}
