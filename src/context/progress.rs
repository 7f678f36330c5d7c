//! A tool's progress reports (`_context["progress"](progress, total=None,
//! message=None)`): checked here, on the supervisor's side of the callback,
//! because the worker that sends them is not trusted to keep MCP's rule
//! that progress only ever goes up.

use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::{Map, Value};

use super::params;
use crate::worker::CallbackError;

/// Longest message a report carries on; a longer one is cut (at a character
/// boundary) with `…`.
pub(crate) const MAX_PROGRESS_MESSAGE: usize = 4096;

/// One progress report of a running call.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// How far the call has come; greater than the call's last report.
    pub progress: f64,
    /// The value `progress` reaches when the call is done, when known.
    pub total: Option<f64>,
    /// What the call is doing now.
    pub message: Option<String>,
}

/// Receives a call's progress reports, in the order the tool made them.
/// Called on the supervisor's runtime: it must not block (forward the report
/// to a channel or a task).
pub trait ProgressListener: Send + Sync {
    /// One report, already checked: finite numbers, `progress` above the
    /// last report's.
    fn report(&self, progress: Progress);
}

impl std::fmt::Debug for dyn ProgressListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dyn ProgressListener")
    }
}

/// A [`ProgressListener`] from a closure, for embedders and tests.
pub fn progress_fn<F>(f: F) -> Arc<dyn ProgressListener>
where
    F: Fn(Progress) + Send + Sync + 'static,
{
    struct FnListener<F>(F);
    impl<F: Fn(Progress) + Send + Sync> ProgressListener for FnListener<F> {
        fn report(&self, progress: Progress) {
            (self.0)(progress)
        }
    }
    Arc::new(FnListener(f))
}

/// The parameters of `progress.report` (docs/protocol.md, "Callbacks").
#[derive(Deserialize)]
struct ReportParams {
    progress: f64,
    total: Option<f64>,
    message: Option<String>,
}

/// One call's listener and the last progress it was given.
pub(super) struct ProgressGate {
    listener: Arc<dyn ProgressListener>,
    last: Mutex<Option<f64>>,
}

impl ProgressGate {
    pub(super) fn new(listener: Arc<dyn ProgressListener>) -> ProgressGate {
        ProgressGate {
            listener,
            last: Mutex::new(None),
        }
    }

    /// Checks one `progress.report` and hands it to the listener; a report
    /// that breaks a rule is a `ValueError`/`TypeError` naming the rule, and
    /// reaches nobody.
    pub(super) fn report(&self, params: &Map<String, Value>) -> Result<(), CallbackError> {
        let method = super::methods::PROGRESS;
        let params: ReportParams = params::from_params(params)
            .map_err(|e| CallbackError::new("TypeError", format!("{method}: {e}")))?;
        let value_error = |text: String| CallbackError::new("ValueError", text);
        if !params.progress.is_finite() {
            return Err(value_error(format!(
                "progress must be a finite number, got {}",
                params.progress
            )));
        }
        if let Some(total) = params.total.filter(|t| !t.is_finite()) {
            return Err(value_error(format!(
                "total must be a finite number, got {total}"
            )));
        }
        // Held while the listener runs: two threads of one tool cannot
        // overtake each other between the check and the report.
        let mut last = self
            .last
            .lock()
            .map_err(|_| CallbackError::new("RuntimeError", "the progress gate failed"))?;
        if let Some(last) = *last {
            if params.progress <= last {
                return Err(value_error(format!(
                    "progress must go up with each report: {} after {last}",
                    params.progress
                )));
            }
        }
        *last = Some(params.progress);
        self.listener.report(Progress {
            progress: params.progress,
            total: params.total,
            message: params.message.map(|m| super::cut(m, MAX_PROGRESS_MESSAGE)),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gate() -> (ProgressGate, Arc<Mutex<Vec<Progress>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let gate = ProgressGate::new(progress_fn(move |p| sink.lock().unwrap().push(p)));
        (gate, seen)
    }

    fn params(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn reports_reach_the_listener_in_order_and_never_go_back() {
        let (gate, seen) = gate();
        gate.report(&params(
            json!({"progress": 1, "total": 3, "message": "one"}),
        ))
        .unwrap();
        gate.report(&params(json!({"progress": 2.5, "total": null})))
            .unwrap();
        let back = gate.report(&params(json!({"progress": 2.5}))).unwrap_err();
        assert_eq!(back.kind, "ValueError");
        assert_eq!(
            back.message,
            "progress must go up with each report: 2.5 after 2.5"
        );
        let seen = seen.lock().unwrap();
        assert_eq!(
            *seen,
            vec![
                Progress {
                    progress: 1.0,
                    total: Some(3.0),
                    message: Some("one".into())
                },
                Progress {
                    progress: 2.5,
                    total: None,
                    message: None
                },
            ]
        );
    }

    #[test]
    fn a_bad_report_names_what_is_wrong_and_reaches_nobody() {
        let (gate, seen) = gate();
        let missing = gate.report(&params(json!({"total": 3}))).unwrap_err();
        assert_eq!(missing.kind, "TypeError");
        assert!(missing.message.contains("progress"), "{}", missing.message);
        let text = gate
            .report(&params(json!({"progress": "half"})))
            .unwrap_err();
        assert_eq!(text.kind, "TypeError");
        assert!(
            text.message
                .starts_with("progress.report: progress: invalid type"),
            "{}",
            text.message
        );
        assert!(seen.lock().unwrap().is_empty());
    }

    #[test]
    fn a_long_message_is_cut_at_a_character_boundary() {
        let (gate, seen) = gate();
        let long = "é".repeat(MAX_PROGRESS_MESSAGE);
        gate.report(&params(json!({"progress": 1, "message": long})))
            .unwrap();
        let message = seen.lock().unwrap()[0].message.clone().unwrap();
        assert!(message.len() <= MAX_PROGRESS_MESSAGE + '…'.len_utf8());
        assert!(message.ends_with('…'));
    }
}
