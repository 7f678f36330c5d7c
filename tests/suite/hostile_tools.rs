//! Tools that attack the supervisor's hold on them (tests/fixtures/hostile/):
//! a hello that lies about the worker's pid, a tool that leaves its group
//! and holds the GIL in C, a supervisor stopped past its calls' deadlines,
//! tools that damage their worker and return OK, a human prompt opened to
//! pause the timer while the tool spins on, file descriptors a worker must
//! not inherit, and the shared cell a worker notes started requests in. Each checks what a user relies on: the error text, that
//! nothing of the call is alive once `call` exits, that the next call works.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;
use toolpool::context::prompt_fn;
use toolpool::context::PromptAnswer;
use toolpool::{ErrorKind, InvokeOptions, Pool, PoolBuilder};

fn hostile(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hostile")
        .join(dir)
}

fn calls_pool(session: &tempfile::TempDir) -> PoolBuilder {
    Pool::builder()
        .functions_dir(hostile("calls"))
        .workers(1)
        .session_dir(session.path())
        .timeout(Duration::from_secs(30))
}

fn calls_command(session: &Path) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolpool"));
    command
        .arg("--functions-dir")
        .arg(hostile("calls"))
        .arg("--session-dir")
        .arg(session)
        .stdin(Stdio::null());
    command
}

/// The escaping tool's call timed out (exit 124) and, checked at once, none of
/// the processes it wrote to `pid_file` is alive: the kill is complete before
/// the command exits.
fn assert_timed_out_leaving_nothing(out: &Run, pid_file: &Path) {
    let pids = pids_in(pid_file);
    assert_eq!(pids.len(), 2, "the tool wrote its pids: {}", out.stderr);
    let left: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    assert!(
        left.is_empty(),
        "alive after call exited: {}",
        describe_pids(&left)
    );
    assert_eq!(
        out.code, 124,
        "stdout: {}\nstderr: {}",
        out.stdout, out.stderr
    );
}

#[test]
fn a_hello_that_lies_about_the_pid_signals_nothing_but_the_worker() {
    // lying.py makes os.getpid() return 0 in the worker: the stack-dump
    // signal must not go to pid 0, the supervisor's own group.
    let session = tempfile::tempdir().unwrap();
    let out = run(calls_command(session.path()).args(["call", "slow", "--timeout", "1"]));
    assert_eq!(
        out.code, 124,
        "stdout: {}\nstderr: {}",
        out.stdout, out.stderr
    );
    assert!(
        out.stdout.starts_with(
            "Tool slow error: TimeoutError: function 'slow' timed out after 1 s; its worker (pid "
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("lying.py:"),
        "where it was: {}",
        out.stdout
    );
}

fn pids_in(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[tokio::test]
async fn a_tool_that_leaves_its_group_and_holds_the_gil_dies_entirely_before_call_exits() {
    let session = tempfile::tempdir().unwrap();
    let pid_file = session.path().join("escape.pids");
    let args = json!({ "pid_file": pid_file }).to_string();
    let out = run(calls_command(session.path()).args([
        "call",
        "escape_and_hold_the_gil",
        "--args",
        &args,
        "--timeout",
        "2",
    ]));
    assert_timed_out_leaving_nothing(&out, &pid_file);
    assert!(out.stdout.contains("TimeoutError"), "{}", out.stdout);
}

#[tokio::test]
async fn without_a_pid_namespace_the_sweep_still_kills_a_tool_that_left_its_group() {
    let session = tempfile::tempdir().unwrap();
    let pool = calls_pool(&session)
        .pid_namespace(false)
        .build()
        .await
        .unwrap();
    assert_eq!(
        pool.worker_info().kill_mechanism,
        toolpool::stats::KillMechanism::ProcessTree
    );
    let pid_file = session.path().join("escape.pids");
    let error = call_with_timeout(
        &pool,
        "escape_and_hold_the_gil",
        json!({ "pid_file": pid_file }),
        2.0,
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
    pool.shutdown().await;
    let pids = pids_in(&pid_file);
    assert_eq!(pids.len(), 2);
    let left: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    assert!(
        left.is_empty(),
        "alive after shutdown: {}",
        describe_pids(&left)
    );
}

#[tokio::test]
async fn a_pid_namespace_is_the_kill_mechanism_where_the_kernel_allows_it() {
    let session = tempfile::tempdir().unwrap();
    let pool = calls_pool(&session).build().await.unwrap();
    let worker = pool
        .invoke("getpid", json!({}), InvokeOptions::default())
        .await
        .unwrap()
        .as_i64()
        .unwrap();
    let own = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let its = std::fs::read_link(format!("/proc/{worker}/ns/pid")).unwrap();
    // This machine lets root (and, through user namespaces, others) make one.
    assert_ne!(own, its, "the worker runs in a PID namespace of its own");
    assert_eq!(
        pool.worker_info().kill_mechanism,
        toolpool::stats::KillMechanism::PidNamespace
    );
    pool.shutdown().await;
}

#[test]
fn doctor_names_the_interpreter_codec_kill_mechanism_and_limits() {
    let session = tempfile::tempdir().unwrap();
    let out = run(calls_command(session.path()).args([
        "-v",
        "--memory-limit",
        "512",
        "--human-timeout",
        "30",
        "doctor",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    for wanted in [
        "interpreter: ",
        "(Python 3.",
        "codec: ",
        "kill mechanism: pid-namespace",
        // No --sandbox, no cgroup of its own: stopped by signals.
        "human wait: stop and re-scan",
        "leftovers: after every call, the worker's threads by id, signals, POSIX timers and protocol descriptors, and its processes by the kernel's children lists",
        "subreaper: on",
        "import timeout: 10.0 s per module",
        "human timeout: 30.0 s per wait",
        "memory limit: 536870912 bytes",
    ] {
        assert!(
            out.stdout.contains(wanted),
            "{wanted:?} in:\n{}",
            out.stdout
        );
    }
    // The start-up log names the mechanism too (at -v: debug).
    assert!(
        out.stderr.contains("kill mechanism: pid-namespace"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn a_stopped_supervisor_does_not_invent_timeouts() {
    let session = tempfile::tempdir().unwrap();
    let started = session.path().join("started");
    let args = json!({ "seconds": 0.3, "started_file": started }).to_string();
    let child = calls_command(session.path())
        .args(["call", "sleep", "--args", &args, "--timeout", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let supervisor = Pid::from_raw(child.id() as i32);
    wait_for_pid_file(&started, Duration::from_secs(20)).await;
    kill(supervisor, Signal::SIGSTOP).unwrap();
    // The reply is written 0.3 s in; the deadline passes while stopped.
    tokio::time::sleep(Duration::from_secs(3)).await;
    kill(supervisor, Signal::SIGCONT).unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout.trim(), "slept 0.3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_does_not_invent_timeouts_for_calls_in_flight() {
    // The reproduction: 8 short calls with a 2 s timeout, the server
    // stopped for 3 s while they run. Every reply was in its pipe in time.
    let served = crate::mcp_support::serve(&["--workers", "8", "--timeout", "2", "serve"]).await;
    let dir = tempfile::tempdir().unwrap();
    let mut calls = Vec::new();
    for i in 0..8 {
        let peer = served.client.peer().clone();
        let started = dir.path().join(format!("started{i}"));
        calls.push((
            started.clone(),
            tokio::spawn(async move {
                let args =
                    json!({"seconds": 0.2, "token": format!("call {i}"), "started_file": started});
                crate::mcp_support::call(&peer, "slow_then_answer", args).await
            }),
        ));
    }
    for (started, _) in &calls {
        wait_for_pid_file(started, Duration::from_secs(30)).await;
    }
    let server = Pid::from_raw(served.pid());
    kill(server, Signal::SIGSTOP).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    kill(server, Signal::SIGCONT).unwrap();
    for (i, (_, call)) in calls.into_iter().enumerate() {
        let result = call.await.unwrap();
        assert_eq!(crate::mcp_support::ok_text(&result), format!("call {i}"));
    }
    assert_eq!(served.close().await.0, 0);
}

/// Collects what the pool logs, to check what it blames.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `culprit`: the call the death is logged against, the one before the
/// call that found the worker broken.
async fn damage_then_call(tool: &str, culprit: &str) {
    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    let session = tempfile::tempdir().unwrap();
    let pool = calls_pool(&session).build().await.unwrap();
    let damaging = pool.invoke(tool, json!({}), InvokeOptions::default()).await;
    assert_eq!(damaging.unwrap(), json!("ok"), "{tool} itself succeeds");
    // The damage is done while the worker idles; the next, unrelated call
    // must not pay for it.
    tokio::time::sleep(Duration::from_millis(700)).await;
    for _ in 0..2 {
        let sum = pool
            .invoke("add", json!({"a": 2, "b": 3}), InvokeOptions::default())
            .await;
        assert_eq!(sum.unwrap(), json!(5), "after {tool}");
    }
    pool.shutdown().await;
    // The death is put down to the call that caused it: found while the
    // worker waited (a worker that ended: its guardian's pidfd says so at
    // once), or by the next call (a worker still running, channel broken).
    let log = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
    // The call that left something running is the one blamed, and its
    // worker went with it: nothing it left could reach the next call.
    assert!(
        log.contains(&format!(
            "{culprit} left 1 thread still running after it answered: killing its worker"
        )),
        "{log}"
    );
}

#[tokio::test]
async fn a_tool_that_ends_its_worker_after_returning_fails_no_other_call() {
    damage_then_call("exit_soon_after_returning", "exit_soon_after_returning").await;
}

#[tokio::test]
async fn a_tool_that_writes_garbage_after_returning_fails_no_other_call() {
    damage_then_call(
        "garbage_soon_after_returning",
        "garbage_soon_after_returning",
    )
    .await;
}

#[tokio::test]
async fn a_tool_that_closes_the_channel_after_returning_fails_no_other_call() {
    // The worker's watcher sees its channel gone and ends it: the first
    // `add` finds it dead before it starts, runs on a fresh worker, and the
    // death is put down to the tool that closed the channel.
    damage_then_call(
        "close_channel_after_returning",
        "close_channel_after_returning",
    )
    .await;
}

type Progress = (Option<u64>, Option<u64>);

fn progress(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[tokio::test]
async fn a_tool_cannot_run_on_while_its_timer_is_paused_for_a_human() {
    let session = tempfile::tempdir().unwrap();
    let progress_file = session.path().join("progress");
    let watched = progress_file.clone();
    // The tool's progress counter half a second into the wait, and a second later.
    let observed: Arc<std::sync::Mutex<Option<Progress>>> = Default::default();
    let seen = observed.clone();
    let prompt = prompt_fn(move |_request| {
        let (watched, seen) = (watched.clone(), seen.clone());
        async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let before = progress(&watched);
            tokio::time::sleep(Duration::from_secs(1)).await;
            let after = progress(&watched);
            *seen.lock().unwrap() = Some((before, after));
            Ok(PromptAnswer::text("go on"))
        }
    });
    let pool = calls_pool(&session)
        .human_prompt(prompt)
        .build()
        .await
        .unwrap();
    let started = Instant::now();
    let error = call_with_timeout(
        &pool,
        "ask_in_a_thread_and_spin",
        json!({ "progress_file": progress_file }),
        1.0,
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
    let (before, after) = observed.lock().unwrap().expect("the human was asked");
    assert!(before.is_some(), "the tool ran before it asked");
    assert_eq!(before, after, "the tool ran on while its timer was paused");
    // 1 s of its own time plus the 1.5 s the human took, not more.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn human_timeout_bounds_an_unanswered_prompt() {
    let session = tempfile::tempdir().unwrap();
    let prompt = prompt_fn(|_request| async {
        std::future::pending::<()>().await;
        Ok(PromptAnswer::text("never"))
    });
    let pool = calls_pool(&session)
        .human_prompt(prompt)
        .human_timeout(Some(Duration::from_secs(1)))
        .build()
        .await
        .unwrap();
    let answer = call_with_timeout(&pool, "ask", json!({}), 5.0).await;
    assert_eq!(
        answer.unwrap(),
        json!("HumanPromptUnavailable: no answer within 1 s (--human-timeout)")
    );
    assert_eq!(
        pool.invoke("add", json!({"a": 1, "b": 1}), InvokeOptions::default())
            .await
            .unwrap(),
        json!(2)
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn only_stdio_and_the_dump_pipe_reach_a_worker() {
    // A descriptor this process leaves inheritable (no O_CLOEXEC).
    let marker = tempfile::NamedTempFile::new().unwrap();
    let path = std::ffi::CString::new(marker.path().to_str().unwrap()).unwrap();
    // SAFETY: open(2) on a valid NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY) };
    assert!(fd > 2);
    let session = tempfile::tempdir().unwrap();
    let pool = calls_pool(&session).build().await.unwrap();
    let fds = pool
        .invoke("open_fds", json!({}), InvokeOptions::default())
        .await
        .unwrap();
    let listed: Vec<String> = serde_json::from_value::<Vec<String>>(fds.clone()).unwrap();
    let marker_name = marker.path().display().to_string();
    assert!(
        !listed.iter().any(|entry| entry.ends_with(&marker_name)),
        "the worker inherited {marker_name}: {listed:?}"
    );
    assert!(
        listed.iter().any(|entry| entry.starts_with("3 -> pipe:")),
        "the dump pipe is on fd 3: {listed:?}"
    );
    // Above it, only the shim's private copies of the channel's pipes.
    assert!(
        listed
            .iter()
            .skip(3)
            .all(|entry| entry.contains(" -> pipe:")),
        "only pipes above stdio: {listed:?}"
    );
    pool.shutdown().await;
    // SAFETY: the fd opened above.
    unsafe { libc::close(fd) };
}

fn with_timeout(secs: f64) -> InvokeOptions {
    InvokeOptions {
        timeout: Some(Duration::from_secs_f64(secs)),
        ..InvokeOptions::default()
    }
}

/// Issue 29, 1: a call waiting behind a call that ends a few ms past its
/// timeout (inside the stack dump's window before the kill) runs once.
#[tokio::test]
async fn a_call_waiting_behind_one_that_ends_just_past_its_timeout_runs_once() {
    let session = tempfile::tempdir().unwrap();
    let pool = calls_pool(&session).build().await.unwrap();
    for (round, late_ms) in [2u64, 6, 10, 20].into_iter().enumerate() {
        let file = session.path().join(format!("ran-{round}"));
        let slow = {
            let pool = pool.clone();
            let seconds = 1.0 + late_ms as f64 / 1000.0;
            tokio::spawn(async move {
                pool.invoke("sleep", json!({ "seconds": seconds }), with_timeout(1.0))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let appended = pool
            .invoke(
                "append_line",
                json!({"path": file.display().to_string(), "seconds": 0.2}),
                with_timeout(5.0),
            )
            .await;
        let _ = slow.await.unwrap();
        assert_eq!(appended.unwrap(), json!("appended"));
        let lines = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            lines,
            "ran\n",
            "late by {late_ms} ms: the call ran {} times",
            lines.lines().count()
        );
    }
    pool.shutdown().await;
}

/// Issue 29, 1 without timing: the tool answers the moment the supervisor
/// asks for its stack dump (SIGUSR1, sent at the deadline just before the
/// kill), so its reply lands inside that window every time. The call queued
/// behind it runs once, and the late reply is a timeout: the supervisor
/// alone judges the deadline.
#[tokio::test]
async fn a_reply_inside_the_kill_window_is_a_timeout_and_the_next_call_runs_once() {
    let session = tempfile::tempdir().unwrap();
    let pool = calls_pool(&session).build().await.unwrap();
    for round in 0..3 {
        let file = session.path().join(format!("window-{round}"));
        let slow = {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.invoke(
                    "answer_when_asked_for_a_stack_dump",
                    json!({ "seconds": 30 }),
                    with_timeout(1.0),
                )
                .await
            })
        };
        // Queued behind it once it runs (a state, not a delay).
        while pool.stats().busy == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let appended = pool
            .invoke(
                "append_line",
                json!({"path": file.display().to_string()}),
                with_timeout(5.0),
            )
            .await;
        let answered = slow.await.unwrap();
        let error = answered.expect_err("a reply after the deadline is a timeout");
        assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
        assert_eq!(appended.unwrap(), json!("appended"));
        let lines = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            lines,
            "ran\n",
            "round {round}: ran {} times",
            lines.lines().count()
        );
    }
    pool.shutdown().await;
}

/// Issue 29, 2: a `withdrawn` (or anything else) a tool forges for its own
/// request does not end or suspend its deadline.
#[tokio::test]
async fn a_forged_withdrawn_does_not_let_a_tool_outlive_its_deadline() {
    let session = tempfile::tempdir().unwrap();
    let pool = calls_pool(&session).build().await.unwrap();
    let started = std::time::Instant::now();
    let error = pool
        .invoke(
            "forge_withdrawn_and_run_on",
            json!({"seconds": 30}),
            with_timeout(1.0),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error.kind, ErrorKind::WorkerDied | ErrorKind::Timeout),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{error}");
    // The call ran: it is never run again.
    assert!(!error.message.contains("twice"), "{error}");
    let sum = pool
        .invoke("add", json!({"a": 2, "b": 3}), InvokeOptions::default())
        .await;
    assert_eq!(sum.unwrap(), json!(5));
    pool.shutdown().await;
}

/// Issue 29, 3: a call never waits behind a running call while a worker
/// comes free.
#[tokio::test]
async fn a_call_takes_the_worker_that_comes_free_not_a_place_behind_a_long_call() {
    let session = tempfile::tempdir().unwrap();
    let pool = calls_pool(&session).workers(2).build().await.unwrap();
    let long = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.invoke("sleep", json!({"seconds": 8}), InvokeOptions::default())
                .await
        })
    };
    let short = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.invoke("sleep", json!({"seconds": 0.5}), InvokeOptions::default())
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    let asked = std::time::Instant::now();
    let sum = pool
        .invoke("add", json!({"a": 2, "b": 3}), InvokeOptions::default())
        .await;
    assert_eq!(sum.unwrap(), json!(5));
    // Answered once the short call's worker came free, not after the long call.
    assert!(
        asked.elapsed() < Duration::from_secs(6),
        "{:?}",
        asked.elapsed()
    );
    short.await.unwrap().unwrap();
    long.abort();
    pool.shutdown().await;
}

/// Issue 29, 4: a tool that closes or replaces the channel's request pipe
/// and returns OK fails no other call, and no call runs twice.
#[tokio::test]
async fn a_tool_that_closes_or_replaces_the_request_pipe_fails_no_other_call() {
    for tool in ["close_the_request_pipe", "replace_the_request_pipe"] {
        let session = tempfile::tempdir().unwrap();
        let pool = calls_pool(&session).build().await.unwrap();
        let damaging = pool.invoke(tool, json!({}), InvokeOptions::default()).await;
        assert_eq!(damaging.unwrap(), json!("ok"), "{tool} itself succeeds");
        for _ in 0..3 {
            let file = session.path().join("ran");
            let _ = std::fs::remove_file(&file);
            let appended = pool
                .invoke(
                    "append_line",
                    json!({"path": file.display().to_string()}),
                    InvokeOptions::default(),
                )
                .await;
            assert_eq!(appended.unwrap(), json!("appended"), "after {tool}");
            assert_eq!(
                std::fs::read_to_string(&file).unwrap(),
                "ran\n",
                "after {tool}"
            );
        }
        pool.shutdown().await;
    }
}

/// Issue 29, 5: a tool's child that returns into the shim (fork without
/// `_exit`) never serves another call: the worker is retired after it.
#[tokio::test]
async fn a_fork_without_exit_fails_no_other_call() {
    let session = tempfile::tempdir().unwrap();
    let pool = calls_pool(&session)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let forked = pool
        .invoke("fork_without_exit", json!({}), InvokeOptions::default())
        .await;
    assert_eq!(forked.unwrap(), json!("forked"));
    for a in 0..10 {
        let sum = pool
            .invoke("add", json!({"a": a, "b": 1}), InvokeOptions::default())
            .await;
        assert_eq!(sum.unwrap(), json!(a + 1));
    }
    assert_eq!(
        pool.stats()
            .terminations
            .get("left_running")
            .copied()
            .unwrap_or(0),
        1,
        "{:?}",
        pool.stats()
    );
    pool.shutdown().await;
}

/// Issue 29, 6: `--max-calls-per-worker` is exact under load.
#[tokio::test]
async fn max_calls_per_worker_is_exact_under_load() {
    let session = tempfile::tempdir().unwrap();
    let pool = calls_pool(&session)
        .workers(2)
        .max_calls_per_worker(Some(3))
        .build()
        .await
        .unwrap();
    let calls = (0..60).map(|_| {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.invoke("getpid", json!({}), InvokeOptions::default())
                .await
        })
    });
    let mut served: std::collections::HashMap<i64, u32> = Default::default();
    for call in calls.collect::<Vec<_>>() {
        let pid = call.await.unwrap().unwrap().as_i64().unwrap();
        *served.entry(pid).or_default() += 1;
    }
    assert!(served.values().all(|&n| n <= 3), "{served:?}");
    pool.shutdown().await;
}

/// Issue 29, 7: nothing is written to a worker behind its running call, so
/// a running tool never sees another call's request.
#[tokio::test]
async fn a_running_tool_never_sees_another_calls_request() {
    let session = tempfile::tempdir().unwrap();
    let pool = calls_pool(&session).build().await.unwrap();
    let peeking = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.invoke(
                "peek_at_the_request_pipe",
                json!({"seconds": 1.0}),
                InvokeOptions::default(),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let others: Vec<_> = (0..8)
        .map(|a| {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.invoke("add", json!({"a": a, "b": 1}), InvokeOptions::default())
                    .await
            })
        })
        .collect();
    assert_eq!(
        peeking.await.unwrap().unwrap(),
        json!(0),
        "the tool read other calls' requests"
    );
    for (a, other) in others.into_iter().enumerate() {
        assert_eq!(other.await.unwrap().unwrap(), json!(a + 1));
    }
    pool.shutdown().await;
}

#[test]
fn a_memory_limit_that_overflows_is_a_usage_error() {
    let session = tempfile::tempdir().unwrap();
    let out =
        run(calls_command(session.path()).args(["--memory-limit", "17592186044416", "catalog"]));
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("--memory-limit"), "{}", out.stderr);
    assert!(out.stderr.contains("16..=4294967296"), "{}", out.stderr);
}

#[tokio::test]
async fn the_library_refuses_a_memory_limit_that_overflows() {
    let session = tempfile::tempdir().unwrap();
    let error = match calls_pool(&session)
        .memory_limit_mb(Some(u64::MAX / 1024))
        .build()
        .await
    {
        Ok(_) => panic!("the pool must not start"),
        Err(e) => e.to_string(),
    };
    assert!(
        error.contains("more bytes than a 64-bit number holds"),
        "{error}"
    );
}

#[test]
fn a_session_id_is_one_path_component() {
    let cwd = tempfile::tempdir().unwrap();
    for id in ["../../../../x", "a/b", "..", ""] {
        let out = run(std::process::Command::new(env!("CARGO_BIN_EXE_toolpool"))
            .current_dir(cwd.path())
            .arg("--functions-dir")
            .arg(hostile("calls"))
            .args(["--session-id", id, "catalog"]));
        assert_eq!(out.code, 2, "{id:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("must be one path component"),
            "{id:?}: {}",
            out.stderr
        );
    }
    // Nothing was created, inside the sessions folder or outside it.
    let made: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().collect();
    assert!(made.is_empty(), "{made:?}");
}

/// A world-writable folder holding copies of the binary and the hostile
/// tools, to run `toolpool` as the unprivileged user `nobody` (through
/// `setpriv`) with the system's own interpreter (the test's may live under
/// /root). `None` where that cannot be arranged (not root, no setpriv, no
/// /usr/bin/python3).
fn nobodys_folder() -> Option<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let have = |path: &str| Path::new(path).exists();
    if !nix::unistd::geteuid().is_root() || !have("/usr/bin/python3") || !have("/usr/bin/setpriv") {
        eprintln!("skipped: needs root, /usr/bin/setpriv and /usr/bin/python3");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let functions = dir.path().join("functions");
    std::fs::create_dir(&functions).unwrap();
    // Copied by `cp`, not by this process: a descriptor open for writing
    // here would be inherited by a child another test forks meanwhile, and
    // the copy could not be run until that child exec'd ("Text file busy").
    let copied = std::process::Command::new("cp")
        .arg(env!("CARGO_BIN_EXE_toolpool"))
        .arg(dir.path().join("toolpool"))
        .status()
        .unwrap();
    assert!(copied.success(), "cp the binary: {copied}");
    std::fs::copy(
        hostile("calls").join("attacks.py"),
        functions.join("attacks.py"),
    )
    .unwrap();
    for path in [
        dir.path().to_path_buf(),
        functions.clone(),
        functions.join("attacks.py"),
        dir.path().join("toolpool"),
    ] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    Some(dir)
}

fn run_as_nobody(dir: &Path, args: &[&str]) -> Run {
    run(std::process::Command::new("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(dir.join("toolpool"))
        .env("HOME", dir)
        .env("TOOLPOOL_CACHE_DIR", dir.join("cache"))
        .args(["--python", "/usr/bin/python3", "--functions-dir"])
        .arg(dir.join("functions"))
        .arg("--session-dir")
        .arg(dir.join("session"))
        .args(args)
        .stdin(Stdio::null()))
}

#[test]
fn an_unprivileged_user_gets_a_pid_namespace_through_a_user_namespace() {
    let Some(dir) = nobodys_folder() else {
        return;
    };
    let out = run_as_nobody(dir.path(), &["doctor"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("kill mechanism: pid-namespace"),
        "{}",
        out.stdout
    );
}

#[test]
fn an_unprivileged_users_escaping_tool_dies_entirely_before_call_exits() {
    let Some(dir) = nobodys_folder() else {
        return;
    };
    let pid_file = dir.path().join("escape.pids");
    let args = json!({ "pid_file": pid_file }).to_string();
    let out = run_as_nobody(
        dir.path(),
        &[
            "call",
            "escape_and_hold_the_gil",
            "--args",
            &args,
            "--timeout",
            "2",
        ],
    );
    assert_timed_out_leaving_nothing(&out, &pid_file);
}
