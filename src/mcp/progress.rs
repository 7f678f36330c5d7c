//! A tool's progress (`_context["progress"]`) as MCP `notifications/progress`
//! for a request that sent a `progressToken`.
//!
//! Reports go through a small queue to one task per call that sends them in
//! order; when the client reads slower than the tool reports, the reports
//! the queue cannot hold are dropped (a later one says more). While the tool
//! waits for a human, the task sends a heartbeat every
//! [`HEARTBEAT_EVERY`] — clients that reset their request timeout on
//! progress (the TypeScript SDK's `resetTimeoutOnProgress`) then keep
//! waiting for the human. MCP wants every notification's `progress` above
//! the last one's: a heartbeat carries the next representable number after
//! the last one sent, so a fraction never moves visibly.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use tokio::sync::{mpsc, watch};

use crate::context::{
    BoxFuture, HumanPrompt, Progress, ProgressListener, PromptAnswer, PromptError, PromptRequest,
};

/// How often a call waiting for a human tells its client it is alive.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// Reports queued for the client at most.
const QUEUED_REPORTS: usize = 64;
/// The heartbeat's message.
const WAITING: &str = "waiting for a human's answer";

/// Longest a call's answer waits for its last progress reports to be sent.
const FLUSH_WAIT: Duration = Duration::from_secs(1);

/// The progress of one call: what the pool is given, and the task that
/// sends the reports.
pub struct CallProgress {
    /// For [`crate::InvokeOptions::progress`]; `None` when the request sent
    /// no `progressToken`.
    pub listener: Option<Arc<dyn ProgressListener>>,
    /// How many of the call's questions to a human are open.
    waiting: Option<Arc<watch::Sender<usize>>>,
    sender: Option<tokio::task::JoinHandle<()>>,
}

impl CallProgress {
    /// `human`, counting its open questions so that the client hears a
    /// heartbeat while one is.
    pub fn prompt(&self, human: Arc<dyn HumanPrompt>) -> Arc<dyn HumanPrompt> {
        match &self.waiting {
            Some(waiting) => Arc::new(Heartbeats {
                human,
                waiting: waiting.clone(),
            }),
            None => human,
        }
    }

    /// Resolves once every report of the call is sent (the call has ended,
    /// so its listener and prompt are dropped), so that none arrives after
    /// the answer; at most [`FLUSH_WAIT`].
    pub async fn flushed(self) {
        if let Some(sender) = self.sender {
            let _ = tokio::time::timeout(FLUSH_WAIT, sender).await;
        }
    }
}

/// The progress of the call that `context` asks for.
pub fn for_request(context: &RequestContext<RoleServer>) -> CallProgress {
    let Some(token) = context.meta.get_progress_token() else {
        return CallProgress {
            listener: None,
            waiting: None,
            sender: None,
        };
    };
    let (reports, queue) = mpsc::channel(QUEUED_REPORTS);
    let (waiting, waits) = watch::channel(0usize);
    let sender = tokio::spawn(forward(context.peer.clone(), token, queue, waits));
    CallProgress {
        listener: Some(Arc::new(Reports(reports))),
        waiting: Some(Arc::new(waiting)),
        sender: Some(sender),
    }
}

/// The pool's side: reports into the queue.
struct Reports(mpsc::Sender<Progress>);

impl ProgressListener for Reports {
    fn report(&self, progress: Progress) {
        if self.0.try_send(progress).is_err() {
            tracing::debug!(
                "a progress report dropped: the client reads slower than the tool reports"
            );
        }
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
}

/// Sends the call's reports, and heartbeats while a question is open, until
/// the call ends (every sender is gone) or the client is.
async fn forward(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    mut queue: mpsc::Receiver<Progress>,
    mut waits: watch::Receiver<usize>,
) {
    let mut last: Option<Progress> = None;
    let mut heartbeat = tokio::time::interval(HEARTBEAT_EVERY);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut prompt_alive = true;
    loop {
        let waiting = prompt_alive && *waits.borrow() > 0;
        let next = tokio::select! {
            report = queue.recv() => match report {
                Some(report) => after(last.as_ref(), report),
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
        };
        let mut notification = ProgressNotificationParam::new(token.clone(), next.progress);
        notification.total = next.total;
        notification.message = next.message.clone();
        if let Err(error) = peer.notify_progress(notification).await {
            tracing::debug!("progress not sent, the client is gone: {error}");
            return;
        }
        last = Some(next);
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
