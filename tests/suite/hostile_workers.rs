//! A worker that breaks the protocol — garbage frames, a 4 GB length prefix,
//! the wrong protocol version, replies with unknown ids, replies twice,
//! closed pipes, no more reading — fails its own call with a clear error and
//! is replaced; the supervisor never panics, never allocates what the worker
//! announces, and other calls go on.
//!
//! The worker is `tests/fixtures/fake_worker.py`, started through a wrapper
//! script passed as `--python`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{json, Value};
use toolpool::{ErrorKind, Pool, PoolError, ToolError};

/// A fake interpreter and a functions directory that tells it how to greet.
struct Fake {
    dir: tempfile::TempDir,
}

impl Fake {
    fn new(hello_mode: Option<&str>) -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let functions = dir.path().join("functions");
        std::fs::create_dir(&functions).unwrap();
        if let Some(mode) = hello_mode {
            std::fs::write(functions.join("fake_mode"), mode).unwrap();
        }
        let fake = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake_worker.py");
        let script = format!(
            "#!/bin/sh\n\
             # Answers the interpreter resolution itself: this wrapper is the interpreter.\n\
             if [ \"$2\" = \"-c\" ]; then printf '%s' \"$0\"; exit 0; fi\n\
             exec '{}' '{}' \"$@\"\n",
            real_python().display(),
            fake.display()
        );
        let wrapper = dir.path().join("python3-fake");
        std::fs::write(&wrapper, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        Fake { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    async fn pool(&self, workers: usize) -> Result<Pool, PoolError> {
        Pool::builder()
            .python(self.path("python3-fake").display().to_string())
            .functions_dir(self.path("functions"))
            .session_dir(self.path("session"))
            .workers(workers)
            .timeout(Duration::from_secs(10))
            .start_timeout(Duration::from_secs(5))
            .build()
            .await
    }
}

fn real_python() -> PathBuf {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; sys.stdout.write(sys.executable)"])
        .output()
        .expect("python3 runs");
    PathBuf::from(String::from_utf8(out.stdout).unwrap())
}

async fn fake_pool(workers: usize) -> (Pool, Fake) {
    let fake = Fake::new(None);
    let pool = fake.pool(workers).await.expect("the fake pool starts");
    (pool, fake)
}

async fn echo(pool: &Pool, value: Value) -> Result<Value, ToolError> {
    call(pool, "echo", json!({ "value": value })).await
}

async fn assert_echoes(pool: &Pool) {
    for i in 0..3 {
        assert_eq!(
            echo(pool, json!(i)).await.expect("the pool keeps serving"),
            json!(i)
        );
    }
}

async fn start_error(mode: &str) -> String {
    let fake = Fake::new(Some(mode));
    let started = Instant::now();
    let error = match fake.pool(1).await {
        Ok(_) => panic!("a worker in mode {mode} must not start"),
        Err(e) => e.to_string(),
    };
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{mode}: took {:?}: {error}",
        started.elapsed()
    );
    error
}

#[tokio::test]
async fn wrong_protocol_version_fails_the_start_naming_both_versions() {
    let error = start_error("wrong_protocol").await;
    let expected = format!(
        "the worker speaks protocol 99, this supervisor speaks {}",
        toolpool::wire::PROTOCOL_VERSION
    );
    assert!(error.contains(&expected), "{error}");
}

#[tokio::test]
async fn garbage_instead_of_a_hello_fails_the_start_clearly() {
    let error = start_error("garbage_hello").await;
    assert!(error.contains("broke the handshake"), "{error}");
    assert!(error.contains("malformed message"), "{error}");
}

#[tokio::test]
async fn four_gb_hello_frame_fails_the_start_without_allocating_it() {
    let error = start_error("huge_hello").await;
    assert!(
        error.contains("frame of 4294967295 bytes is over the 67108864-byte limit"),
        "{error}"
    );
}

#[tokio::test]
async fn worker_dying_in_the_handshake_is_reported_with_its_stderr() {
    let error = start_error("die_in_handshake").await;
    assert!(
        error.contains("the worker exited with code 3 during startup"),
        "{error}"
    );
    assert!(error.contains("ImportError: boom"), "{error}");
}

#[tokio::test]
async fn malformed_frames_kill_only_their_worker() {
    let (pool, _fake) = fake_pool(1).await;
    for tool in ["garbage", "not_a_message", "second_hello"] {
        let error = call(&pool, tool, json!({})).await.unwrap_err();
        assert_eq!(error.kind, ErrorKind::WorkerDied, "{tool}: {error}");
        assert!(
            error.message.contains("broke the protocol") && error.message.contains("was killed"),
            "{tool}: {error}"
        );
        assert_echoes(&pool).await;
    }
    assert_eq!(pool.stats().terminations["broke_protocol"], 3);
    pool.shutdown().await;
}

#[tokio::test]
async fn four_gb_frame_from_a_worker_kills_it_without_allocating() {
    let (pool, _fake) = fake_pool(1).await;
    for (tool, len) in [
        ("huge_frame", "4294967295"),
        ("over_limit_frame", "67108865"),
    ] {
        let started = Instant::now();
        let error = call(&pool, tool, json!({})).await.unwrap_err();
        assert_eq!(error.kind, ErrorKind::WorkerDied, "{error}");
        assert!(
            error.message.contains(&format!(
                "frame of {len} bytes is over the 67108864-byte limit"
            )),
            "{error}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_echoes(&pool).await;
    }
    pool.shutdown().await;
}

#[tokio::test]
async fn truncated_frame_fails_the_call_as_a_dead_worker() {
    let (pool, _fake) = fake_pool(1).await;
    let error = call(&pool, "truncated_frame", json!({})).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::WorkerDied, "{error}");
    assert!(error.message.ends_with("exited with code 0"), "{error}");
    assert_echoes(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn reply_with_an_unknown_id_is_dropped() {
    let (pool, _fake) = fake_pool(1).await;
    let answer = call(&pool, "unknown_id_then_answer", json!({})).await;
    assert_eq!(answer.unwrap(), json!("yours"));
    // A reply for nobody never counts as the answer: the call times out.
    let error = call_with_timeout(&pool, "unknown_id_only", json!({}), 0.5)
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
    assert_echoes(&pool).await;
    pool.shutdown().await;
}

/// A worker that answers a call again after that call has been answered
/// (a late reply, its id no longer in flight) sends it just before the next
/// call's own reply: the late one is dropped and each call gets its own.
#[tokio::test]
async fn late_reply_never_answers_the_next_call() {
    let (pool, _fake) = fake_pool(1).await;
    assert_eq!(echo(&pool, json!("first")).await.unwrap(), json!("first"));
    for i in 0..5 {
        let answer = call(&pool, "late_echo", json!({"value": i})).await.unwrap();
        assert_eq!(
            answer,
            json!(i),
            "call {i} got the late reply of the call before"
        );
    }
    assert_echoes(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn second_reply_never_answers_the_next_call() {
    let (pool, _fake) = fake_pool(1).await;
    assert_eq!(
        call(&pool, "reply_twice", json!({})).await.unwrap(),
        json!("first")
    );
    for i in 0..5 {
        assert_eq!(echo(&pool, json!(i)).await.unwrap(), json!(i));
    }
    pool.shutdown().await;
}

#[tokio::test]
async fn worker_closing_its_stdout_fails_its_call_and_is_replaced() {
    let (pool, _fake) = fake_pool(1).await;
    let started = Instant::now();
    let error = call(&pool, "close_stdout", json!({})).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::WorkerDied, "{error}");
    assert!(
        error.message.contains("closed its end of the channel"),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert_echoes(&pool).await;
    assert_eq!(pool.stats().terminations["hung_up"], 1);
    pool.shutdown().await;
}

#[tokio::test]
async fn worker_closing_its_stdin_moves_the_next_call_to_a_fresh_worker() {
    let (pool, _fake) = fake_pool(1).await;
    assert_eq!(
        call(&pool, "close_stdin", json!({})).await.unwrap(),
        json!("stdin closed")
    );
    let started = Instant::now();
    // The damage is the previous call's: the next one never started on that
    // worker (no acknowledgement), so it runs on a fresh one.
    assert_eq!(echo(&pool, json!(1)).await.unwrap(), json!(1));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert_echoes(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn worker_that_stops_reading_times_out_its_call_and_blocks_no_other() {
    let (pool, _fake) = fake_pool(2).await;
    // Worker A stops reading; the idle queue is then [B, A]; one call on B makes it [A, B].
    assert!(call(&pool, "stop_reading", json!({})).await.is_ok());
    assert_echoes_once(&pool, 0).await;
    // 4 MB of arguments cannot fit in the pipe of a worker that reads nothing.
    let big = "x".repeat(4 << 20);
    let blocked = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let result = call_with_timeout(&pool, "echo", json!({ "value": big }), 2.0).await;
            (result, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    for i in 1..=20 {
        assert_echoes_once(&pool, i).await;
    }
    // Held up, they would end after the blocked call's 2 s timeout (1.8 s
    // from here); margin for a loaded machine below that.
    assert!(
        started.elapsed() < Duration::from_millis(1600),
        "other calls were held up: {:?}",
        started.elapsed()
    );
    let (result, elapsed) = blocked.await.unwrap();
    let error = result.unwrap_err();
    assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
    assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
    assert_echoes(&pool).await;
    pool.shutdown().await;
}

async fn assert_echoes_once(pool: &Pool, i: i64) {
    assert_eq!(echo(pool, json!(i)).await.unwrap(), json!(i));
}
