//! Progress: `_context["progress"](progress, total=None, message=None)`
//! reaches the listener the caller gave ([`InvokeOptions::progress`]), in
//! order and only going up; without a listener the reports are checked and
//! go nowhere.

use std::sync::{Arc, Mutex};

use crate::common::builder;
use serde_json::json;
use toolpool::{progress_fn, InvokeOptions, Progress};

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
