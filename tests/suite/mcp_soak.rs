//! 2 000 `tools/call`s through `toolpool serve`, 32 in flight, with timeouts,
//! exceptions and crashed workers mixed in: every call is answered exactly
//! once, with its own result. rmcp's client drives the server; a copy of
//! what the server wrote is kept to check "exactly once" on the wire.

use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::mcp_support::*;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, ReadBuf};

const CALLS: usize = 2000;
const IN_FLIGHT: usize = 32;

/// What call `i` is, and what its answer must be.
fn plan(i: usize) -> (&'static str, Value, Expect) {
    match i % 50 {
        7 => ("sleep_forever", json!({}), Expect::ErrorStarts(
            "Tool sleep_forever error: TimeoutError: function 'sleep_forever' timed out after 0.5 s".into(),
        )),
        19 => ("exit_3", json!({}), Expect::ErrorStarts("Tool exit_3 error: WorkerDied: ".into())),
        31 => ("segfault", json!({}), Expect::ErrorStarts("Tool segfault error: WorkerDied: ".into())),
        n if n % 10 == 3 => (
            "raise_value_error",
            json!({"message": format!("m{i}")}),
            Expect::Error(format!("Tool raise_value_error error: ValueError: m{i}")),
        ),
        n if n % 10 == 5 => (
            "add",
            json!({"a": i, "b": "not a number"}),
            Expect::ErrorStarts("Tool add error: InvalidArguments: ".into()),
        ),
        _ => ("echo", json!({"value": format!("v{i}")}), Expect::Ok(format!("v{i}"))),
    }
}

enum Expect {
    Ok(String),
    Error(String),
    ErrorStarts(String),
}

/// An `AsyncRead` that keeps a copy of everything read through it.
struct Tee<R> {
    inner: R,
    copy: Arc<Mutex<Vec<u8>>>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Tee<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            if let Ok(mut copy) = self.copy.lock() {
                copy.extend_from_slice(&buf.filled()[before..]);
            }
        }
        polled
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_calls_with_timeouts_and_crashes_are_each_answered_once() {
    let session = tempfile::tempdir().expect("temp dir");
    let mut child = command(
        session.path(),
        &["--workers", "4", "--timeout", "0.5", "serve"],
    )
    .env("RUST_LOG", "error")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("toolpool starts");
    let stderr = collect(child.stderr.take().expect("stderr"));
    let wire = Arc::new(Mutex::new(Vec::new()));
    let stdout = Tee {
        inner: child.stdout.take().expect("stdout"),
        copy: wire.clone(),
    };
    let client = TestClient::plain()
        .serve((stdout, child.stdin.take().expect("stdin")))
        .await
        .expect("handshake");

    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..IN_FLIGHT {
        let (peer, next, failures) = (client.peer().clone(), next.clone(), failures.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= CALLS {
                    return;
                }
                let (name, args, expect) = plan(i);
                let result = call(&peer, name, args).await;
                let text = result
                    .content
                    .first()
                    .and_then(|c| c.as_text())
                    .map(|t| t.text.clone())
                    .unwrap_or_default();
                let error = is_error(&result);
                let right = match &expect {
                    Expect::Ok(want) => !error && text == *want,
                    Expect::Error(want) => error && text == *want,
                    Expect::ErrorStarts(prefix) => error && text.starts_with(prefix.as_str()),
                };
                if !right {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("call {i} ({name}): {result:?}"));
                }
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("caller task");
    }
    let elapsed = started.elapsed();
    let failures = failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} wrong answers, e.g.:\n{}",
        failures.len(),
        failures[..failures.len().min(5)].join("\n")
    );
    assert_eq!(
        ok_text(&call(client.peer(), "add", json!({"a": 2, "b": 3})).await),
        "5"
    );
    eprintln!("{CALLS} calls, {IN_FLIGHT} in flight: {elapsed:?}");

    let _ = client.cancel().await;
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("exits")
        .expect("wait");
    let stderr = stderr.await.unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{stderr}");

    // On the wire: one response per request id, no id answered twice.
    let wire = wire.lock().unwrap().clone();
    let mut ids = Vec::new();
    for line in String::from_utf8(wire).expect("UTF-8").lines() {
        let message: Value = serde_json::from_str(line).expect("stdout is JSON-RPC only");
        if message.get("result").is_some() || message.get("error").is_some() {
            ids.push(message["id"].as_i64().expect("numeric id"));
        }
    }
    let answered = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), answered, "some request was answered twice");
    // initialize + the calls + the last `add`.
    assert_eq!(answered, CALLS + 2);
}
