//! Whatever a tool prints never reaches the frame channel.

use crate::common::*;
use serde_json::json;

#[tokio::test]
async fn megabyte_printed_by_print_does_not_corrupt_the_channel() {
    let (pool, _session) = pool(1).await;
    let result = call(&pool, "print_spam", json!({"megabytes": 1}))
        .await
        .unwrap();
    assert_eq!(result, json!("done"));
    assert_serves(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn megabyte_written_to_fd_1_does_not_corrupt_the_channel() {
    let (pool, _session) = pool(1).await;
    let result = call(&pool, "write_spam", json!({"megabytes": 1}))
        .await
        .unwrap();
    assert_eq!(result, json!("done"));
    assert_serves(&pool).await;
    pool.shutdown().await;
}

/// What a tool prints is not lost either: every line reaches toolpool's log
/// on stderr, and stdout carries only the result. Lines are tagged with the
/// call that printed them while it runs (the last few, read from the pipe
/// after the reply, may come untagged: stderr is read apart from the frames).
#[test]
fn printed_output_reaches_the_log_tagged_with_its_call() {
    for (tool, line) in [
        ("print_spam", "x".repeat(1023)),
        ("write_spam", "y".repeat(1023)),
    ] {
        let session = tempfile::tempdir().unwrap();
        let out = run(toolpool_command(session.path())
            .args(["call", tool, "--args", r#"{"megabytes": 1}"#])
            .env("RUST_LOG", "info"));
        assert_eq!((out.code, out.stdout.as_str()), (0, "done\n"), "{tool}");
        let logged: Vec<&str> = out.stderr.lines().filter(|l| l.contains(&line)).collect();
        assert_eq!(
            logged.len(),
            1024,
            "{tool}: every 1 KB line of the megabyte is logged"
        );
        assert!(
            logged[0].contains(&format!("{tool}#")),
            "{tool}: the output is tagged with its call: {}",
            logged[0]
        );
    }
}
