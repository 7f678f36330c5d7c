//! Operators' view: `pool.stats()` and the Prometheus endpoint of `serve --metrics`.

use std::io::{Read, Write};
use std::time::Duration;

use crate::common::*;
use serde_json::json;

#[tokio::test]
async fn stats_count_calls_errors_latency_and_workers() {
    let (pool, _session) = pool(2).await;
    call(&pool, "add", json!({"a": 1, "b": 2})).await.unwrap();
    call(&pool, "raise_value_error", json!({"message": "x"}))
        .await
        .unwrap_err();
    call_with_timeout(&pool, "sleep_forever", json!({}), 0.2)
        .await
        .unwrap_err();
    // The timed-out worker's replacement starts in the background: wait
    // for it (generously: the machine may be loaded) before reading.
    let mut stats = pool.stats();
    for _ in 0..200 {
        if stats.workers.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        stats = pool.stats();
    }
    assert_eq!(stats.calls, 3);
    assert_eq!(stats.succeeded, 1);
    assert_eq!(stats.timeouts, 1);
    assert_eq!(stats.kills, 1);
    // Every way a worker ends is listed; only the timeout's happened.
    assert_eq!(stats.terminations.len(), 10, "{stats:?}");
    assert_eq!(stats.terminations.get("timed_out"), Some(&1), "{stats:?}");
    assert_eq!(
        stats.terminations.values().sum::<u64>(),
        1,
        "{:?}",
        stats.terminations
    );
    assert_eq!(stats.errors_by_type.get("ValueError"), Some(&1));
    assert_eq!(stats.errors_by_type.get("TimeoutError"), Some(&1));
    assert_eq!(stats.latency.count, 3);
    assert_eq!(stats.latency.buckets.last().map(|b| b.1), Some(3));
    assert!(stats.latency.sum_seconds >= 0.2);
    assert!(stats.workers.len() >= 2, "{stats:?}");
    assert!(
        stats
            .workers
            .iter()
            .all(|w| w.rss_bytes.unwrap_or(0) > 1_000_000),
        "{stats:?}"
    );
    let text = toolpool::metrics::render(&stats);
    assert!(text.contains("toolpool_calls_total 3\n"), "{text}");
    assert!(
        text.contains("toolpool_errors_total{type=\"ValueError\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("toolpool_call_duration_seconds_bucket{le=\"+Inf\"} 3\n"),
        "{text}"
    );
    // Per-worker series by slot, one per live worker: the timeout's
    // replacement took a slot over instead of adding a series.
    assert!(
        text.contains("toolpool_worker_terminations_total{how=\"timed_out\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("toolpool_worker_terminations_total{how=\"signalled\"} 0\n"),
        "{text}"
    );
    // Retirements by cause: every cause is a series, from 0.
    assert!(
        text.contains("toolpool_worker_left_running_total{cause=\"threads\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("toolpool_retired_over_rss_total 0\n"),
        "{text}"
    );
    assert!(!text.contains("pid="), "{text}");
    let slots: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("toolpool_worker_calls_served{"))
        .collect();
    assert_eq!(slots.len(), stats.workers.len(), "{text}");
    for (slot, line) in slots.iter().enumerate() {
        assert!(
            line.starts_with(&format!("toolpool_worker_calls_served{{slot=\"{slot}\"}} ")),
            "{text}"
        );
    }
    pool.shutdown().await;
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn scrape(port: u16) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response)
}

/// `toolpool serve --metrics 127.0.0.1:<free port>` with `workers` workers
/// (stdin piped: closing it ends the server), and its port.
fn metrics_server(session: &std::path::Path, workers: usize) -> (std::process::Child, u16) {
    let port = free_port();
    let server = toolpool_command(session)
        .args(["--workers", &workers.to_string(), "serve", "--metrics"])
        .arg(port.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    (server, port)
}

#[test]
fn serve_exposes_metrics_for_scraping() {
    let session = tempfile::tempdir().unwrap();
    let (mut server, port) = metrics_server(session.path(), 2);
    let mut response = None;
    for _ in 0..100 {
        response = scrape(port);
        if response
            .as_deref()
            .is_some_and(|r| r.contains("toolpool_workers_live"))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let response = response.expect("metrics endpoint answers");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("text/plain; version=0.0.4"), "{response}");
    assert!(response.contains("toolpool_workers 2\n"), "{response}");
    assert!(response.contains("toolpool_calls_total 0\n"), "{response}");
    // Closing stdin ends `serve`.
    drop(server.stdin.take());
    let status = server.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// One raw request on its own connection; the whole response.
fn raw(port: u16, request: &str) -> String {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}

#[test]
fn metrics_answer_only_get_of_metrics_and_close_half_open_connections() {
    let session = tempfile::tempdir().unwrap();
    let (mut server, port) = metrics_server(session.path(), 1);
    for _ in 0..100 {
        if scrape(port).is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for method in ["POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH"] {
        let response = raw(
            port,
            &format!("{method} /metrics HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
        );
        assert!(response.starts_with("HTTP/1.1 405"), "{method}: {response}");
        assert!(
            response.to_ascii_lowercase().contains("allow: get"),
            "{response}"
        );
        assert!(!response.contains("toolpool_workers"), "{response}");
    }
    let response = raw(
        port,
        "GET /other HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    assert!(response.starts_with("HTTP/1.1 404"), "{response}");
    let response = raw(
        port,
        "GET /metrics HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n",
    );
    assert!(response.starts_with("HTTP/1.1 403"), "{response}");
    // Half a header, then silence: the server closes the connection after
    // its header timeout (10 s).
    let mut stalled = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stalled.write_all(b"GET /metrics HTTP/1.1\r\nHo").unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut rest = Vec::new();
    let read = stalled.read_to_end(&mut rest);
    assert!(
        read.is_ok(),
        "the half-open connection is closed by the server: {read:?}"
    );
    assert!(scrape(port).is_some_and(|r| r.starts_with("HTTP/1.1 200")));
    drop(server.stdin.take());
    assert!(server.wait().unwrap().success());
}
