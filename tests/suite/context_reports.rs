//! What a running call reports to its caller. Progress:
//! `_context["progress"](progress, total=None, message=None)` reaches the
//! listener the caller gave ([`InvokeOptions::progress`]), in order and only
//! going up; without a listener the reports are checked and go nowhere. Log
//! records: Python `logging` records from the caller's level up reach its
//! [`InvokeOptions::logs`] listener, from any thread of the tool.

use std::sync::{Arc, Mutex};

use crate::common::builder;
use serde_json::json;
use toolpool::context::{progress_fn, LogLevel, LogListener, LogRecord, LogSubscription, Progress};
use toolpool::InvokeOptions;

#[tokio::test]
async fn a_tools_reports_reach_the_callers_listener_in_order() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1).build().await.unwrap();
    let seen: Arc<Mutex<Vec<Progress>>> = Arc::default();
    let listener = {
        let seen = seen.clone();
        progress_fn(move |report| seen.lock().unwrap().push(report))
    };
    let options = InvokeOptions {
        progress: Some(listener),
        ..InvokeOptions::default()
    };
    let answer = pool
        .invoke(
            "report_progress",
            json!({"steps": 5, "threads": 2}),
            options,
        )
        .await
        .expect("the tool runs");
    assert_eq!(answer["reported"], json!(5));
    assert_eq!(
        answer["refused"]["back"],
        json!("ValueError: progress must go up with each report: 1 after 5")
    );
    let seen = seen.lock().unwrap().clone();
    let expected: Vec<Progress> = (1..=5)
        .map(|step| Progress {
            progress: step as f64,
            total: Some(5.0),
            message: Some(format!("step {step} of 5")),
        })
        .collect();
    assert_eq!(seen, expected);

    // No listener: the same rules, nothing sent.
    let answer = pool
        .invoke(
            "report_progress",
            json!({"steps": 2}),
            InvokeOptions::default(),
        )
        .await
        .expect("the tool runs");
    assert_eq!(
        answer["refused"]["nan"],
        json!("ValueError: progress must be a finite number, got nan")
    );
    pool.shutdown().await;
}

struct Heard(Mutex<Vec<LogRecord>>);

impl LogListener for Heard {
    fn record(&self, record: LogRecord) {
        self.0.lock().unwrap().push(record);
    }
}

#[tokio::test]
async fn log_records_from_the_callers_level_reach_its_listener() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1).build().await.unwrap();
    let heard = Arc::new(Heard(Mutex::default()));
    let options = InvokeOptions {
        logs: Some(LogSubscription {
            level: LogLevel::Warning,
            listener: heard.clone(),
        }),
        ..InvokeOptions::default()
    };
    let answer = pool.invoke("log_some", json!({}), options).await;
    assert_eq!(answer.expect("the tool runs"), json!("logged"));
    let heard: Vec<(LogLevel, String, String)> = heard
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|r| (r.level, r.logger.clone(), r.message.clone()))
        .collect();
    assert_eq!(
        heard,
        [
            (
                LogLevel::Warning,
                "fixture.logs".into(),
                "a warning record".into()
            ),
            (
                LogLevel::Error,
                "fixture.logs".into(),
                "an error from a thread".into()
            ),
        ]
    );
    // The next call, without a subscription, still runs (the worker's
    // logging is as it was).
    let answer = pool
        .invoke("log_some", json!({}), InvokeOptions::default())
        .await;
    assert_eq!(answer.expect("the tool runs"), json!("logged"));
    pool.shutdown().await;
}
