//! Human prompts: `_context["human_prompt"].request(...)` forwarded to the
//! pool's front end, with the call's timer paused while the human thinks.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{alive, builder, call, call_with_timeout, gone_within, toolpool_command};
use serde_json::json;
use toolpool::context::prompt_fn;
use toolpool::context::{HumanPrompt, PromptAnswer, PromptError, PromptRequest};
use toolpool::{ErrorKind, InvokeOptions};

fn answering(text: &'static str, after: Duration) -> Arc<dyn HumanPrompt> {
    prompt_fn(move |_request| async move {
        tokio::time::sleep(after).await;
        Ok(PromptAnswer::text(text))
    })
}

/// A prompt that never answers and counts how many of its questions were withdrawn.
fn never_answering(withdrawn: Arc<AtomicUsize>) -> Arc<dyn HumanPrompt> {
    struct Withdrawn(Arc<AtomicUsize>);
    impl Drop for Withdrawn {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    prompt_fn(move |_request| {
        let guard = Withdrawn(withdrawn.clone());
        async move {
            let _guard = guard;
            std::future::pending::<()>().await;
            Ok(PromptAnswer::default())
        }
    })
}

#[tokio::test]
async fn the_pools_human_prompt_answers_with_the_request_details() {
    let session = tempfile::tempdir().unwrap();
    let seen: Arc<Mutex<Vec<PromptRequest>>> = Arc::default();
    let prompt = {
        let seen = seen.clone();
        prompt_fn(move |request: PromptRequest| {
            seen.lock().unwrap().push(request.clone());
            async move {
                let mut answer =
                    PromptAnswer::text(format!("answer to {}", request.inputs.unwrap_or_default()));
                answer.metadata.insert("channel".into(), json!("test"));
                Ok(answer)
            }
        })
    };
    let pool = builder(&session, 1)
        .human_prompt(prompt)
        .build()
        .await
        .unwrap();
    let options = InvokeOptions {
        context: toolpool::InvokeContext {
            node_id: Some("writer".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = pool
        .invoke("ask_human", json!({"question": "colour?"}), options)
        .await
        .unwrap();
    assert_eq!(answer["text"], json!("answer to colour?"));
    assert_eq!(answer["available"], json!(true));
    assert_eq!(
        answer["metadata"],
        json!({"channel": "test", "fixture": true, "session_id": "default"})
    );
    let explicit = call(
        &pool,
        "ask_human",
        json!({"question": "q", "node": "reviewer"}),
    )
    .await
    .unwrap();
    assert_eq!(explicit["text"], json!("answer to q"));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].node_id, "writer", "the call's node_id by default");
    assert_eq!(seen[1].node_id, "reviewer");
    assert_eq!(seen[0].tool, "ask_human");
    assert_eq!(seen[0].session_id, "default");
    assert_eq!(seen[0].task_description, "Answer the question.");
    assert_eq!(seen[0].metadata["fixture"], json!(true));
    pool.shutdown().await;
}

#[tokio::test]
async fn questions_asked_together_are_answered_in_order_and_the_first_failure_raises() {
    let session = tempfile::tempdir().unwrap();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let prompt = {
        let seen = seen.clone();
        prompt_fn(move |request: PromptRequest| {
            let question = request.inputs.unwrap_or_default();
            seen.lock().unwrap().push(question.clone());
            async move {
                if question == "refuse" {
                    return Err(PromptError::Declined(Some("not that one".into())));
                }
                Ok(PromptAnswer::text(format!("answer to {question}")))
            }
        })
    };
    let pool = builder(&session, 1)
        .human_prompt(prompt)
        .timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let answers = call(
        &pool,
        "ask_many",
        json!({"questions": ["colour?", "size?"]}),
    )
    .await
    .unwrap();
    assert_eq!(answers, json!(["answer to colour?", "answer to size?"]));
    assert_eq!(*seen.lock().unwrap(), ["colour?", "size?"]);
    // A library front end asks them one after another: the one after a
    // refusal is never asked.
    let error = call(
        &pool,
        "ask_many",
        json!({"questions": ["refuse", "never asked"]}),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("HumanPromptDeclined") && error.contains("not that one"),
        "{error}"
    );
    assert!(!seen.lock().unwrap().contains(&"never asked".to_string()));
    // The pool still answers.
    let answers = call(&pool, "ask_many", json!({"questions": ["again?"]}))
        .await
        .unwrap();
    assert_eq!(answers, json!(["answer to again?"]));
    pool.shutdown().await;
}

#[tokio::test]
async fn without_a_prompt_service_the_tool_finds_none() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1).build().await.unwrap();
    let answer = call(&pool, "ask_human", json!({"question": "anyone?"}))
        .await
        .unwrap();
    assert_eq!(answer, json!({"text": null, "available": false}));
    // A call can bring its own.
    let options = InvokeOptions {
        human_prompt: Some(answering("per call", Duration::ZERO)),
        ..Default::default()
    };
    let answer = pool
        .invoke("ask_human", json!({"question": "anyone?"}), options)
        .await
        .unwrap();
    assert_eq!(answer["text"], json!("per call"));
    pool.shutdown().await;
}

#[tokio::test]
async fn a_slow_human_does_not_count_against_the_timeout() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1)
        .human_prompt(answering("late but fine", Duration::from_secs(2)))
        .build()
        .await
        .unwrap();
    let started = Instant::now();
    let answer = call_with_timeout(
        &pool,
        "ask_human",
        json!({"question": "take your time"}),
        1.0,
    )
    .await
    .expect("the 2 s wait for the human is not the tool's time");
    assert_eq!(answer["text"], json!("late but fine"));
    assert!(started.elapsed() >= Duration::from_secs(2));
    pool.shutdown().await;
}

#[tokio::test]
async fn the_timer_resumes_after_the_answer() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1)
        .human_prompt(answering("ok", Duration::from_millis(1500)))
        .build()
        .await
        .unwrap();
    // 1.5 s of human plus 0.3 s of work fits a 1 s timeout ...
    let answer = call_with_timeout(
        &pool,
        "ask_then_sleep",
        json!({"question": "q", "seconds": 0.3}),
        1.0,
    )
    .await
    .unwrap();
    assert_eq!(answer, json!("ok"));
    // ... 1.5 s of work after the answer does not.
    let started = Instant::now();
    let error = call_with_timeout(
        &pool,
        "ask_then_sleep",
        json!({"question": "q", "seconds": 30}),
        1.0,
    )
    .await
    .unwrap_err();
    assert!(error.is_timeout(), "{error}");
    assert!(error.message.contains("ask_then_sleep"), "{error}");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(2400) && elapsed < Duration::from_secs(6),
        "{elapsed:?}"
    );
    crate::common::assert_serves(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn a_worker_that_dies_while_waiting_for_a_prompt_leaves_the_pool_consistent() {
    let session = tempfile::tempdir().unwrap();
    let withdrawn = Arc::new(AtomicUsize::new(0));
    let pool = builder(&session, 1)
        .human_prompt(never_answering(withdrawn.clone()))
        .build()
        .await
        .unwrap();
    let pid = crate::common::worker_pid(&pool).await;
    // The tool itself is stopped while it waits (its timer is paused), so
    // its death comes from outside, as an OOM kill would.
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    });
    let error = call_with_timeout(&pool, "ask_human", json!({"question": "q"}), 5.0)
        .await
        .unwrap_err();
    killer.await.unwrap();
    assert_eq!(error.kind, ErrorKind::WorkerDied, "{error}");
    assert!(error.message.contains("was killed by SIGKILL"), "{error}");
    assert_eq!(
        withdrawn.load(Ordering::SeqCst),
        1,
        "the open question was withdrawn"
    );
    assert!(gone_within(pid, Duration::from_secs(2)).await);
    crate::common::assert_serves(&pool).await;
    let stats = pool.stats();
    assert_eq!(stats.busy, 0);
    assert_eq!(stats.worker_deaths, 1);
    pool.shutdown().await;
}

#[tokio::test]
async fn a_call_abandoned_while_waiting_for_a_prompt_kills_its_worker_and_withdraws_the_question() {
    let session = tempfile::tempdir().unwrap();
    let withdrawn = Arc::new(AtomicUsize::new(0));
    let pool = builder(&session, 1)
        .human_prompt(never_answering(withdrawn.clone()))
        .build()
        .await
        .unwrap();
    let pid = crate::common::worker_pid(&pool).await;
    let abandoned = tokio::time::timeout(
        Duration::from_millis(800),
        call(&pool, "ask_human", json!({"question": "never answered"})),
    )
    .await;
    assert!(abandoned.is_err(), "the call was still waiting");
    // Dropping the call aborts its callbacks; the abort lands a moment later.
    let deadline = Instant::now() + Duration::from_secs(2);
    while withdrawn.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(withdrawn.load(Ordering::SeqCst), 1);
    assert!(
        gone_within(pid, Duration::from_secs(2)).await,
        "its worker was killed"
    );
    crate::common::assert_serves(&pool).await;
    assert_eq!(pool.stats().cancelled, 1);
    pool.shutdown().await;
}

#[tokio::test]
async fn shutdown_ends_a_call_waiting_for_a_prompt() {
    let session = tempfile::tempdir().unwrap();
    let withdrawn = Arc::new(AtomicUsize::new(0));
    let pool = builder(&session, 1)
        .human_prompt(never_answering(withdrawn.clone()))
        .build()
        .await
        .unwrap();
    let pid = crate::common::worker_pid(&pool).await;
    let waiting = {
        let pool = pool.clone();
        tokio::spawn(async move { call(&pool, "ask_human", json!({"question": "q"})).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    pool.shutdown_with_grace(Duration::from_millis(200)).await;
    let error = waiting.await.unwrap().unwrap_err();
    assert_eq!(error.kind, ErrorKind::PoolClosed, "{error}");
    assert_eq!(withdrawn.load(Ordering::SeqCst), 1);
    assert!(!alive(pid));
}

#[tokio::test]
async fn callbacks_from_several_threads_of_one_call_are_served_while_a_prompt_waits() {
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1)
        .human_prompt(answering("done", Duration::from_millis(500)))
        .build()
        .await
        .unwrap();
    let result = call_with_timeout(
        &pool,
        "ask_and_attach_concurrently",
        json!({"count": 8}),
        10.0,
    )
    .await
    .unwrap();
    assert_eq!(result, json!({"answer": "done", "registered": 8}));
    assert_eq!(pool.attachments().list().len(), 8);
    pool.shutdown().await;
}

#[tokio::test]
async fn a_prompt_error_is_an_exception_in_the_tool() {
    let session = tempfile::tempdir().unwrap();
    let prompt = prompt_fn(|_request| async { Err(PromptError::Declined(Some("not now".into()))) });
    let pool = builder(&session, 1)
        .human_prompt(prompt)
        .build()
        .await
        .unwrap();
    let pid = call(&pool, "getpid", json!({})).await.unwrap();
    let error = call(&pool, "ask_human", json!({"question": "q"}))
        .await
        .unwrap_err();
    assert_eq!(error.kind.type_name(), "HumanPromptDeclined", "{error}");
    assert_eq!(error.message, "the human declined to answer: not now");
    assert_eq!(
        call(&pool, "getpid", json!({})).await.unwrap(),
        pid,
        "same worker"
    );
    pool.shutdown().await;
}

// -- the CLI: the terminal prompt --------------------------------------------

/// The binary on the bundled tools (functions/function_calling).
fn bundled_command(session: &std::path::Path) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolpool"));
    command
        .arg("--functions-dir")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("functions/function_calling"))
        .arg("--session-dir")
        .arg(session);
    command
}

fn run_with_stdin(command: &mut std::process::Command, stdin: Option<&str>) -> crate::common::Run {
    let started = Instant::now();
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    command.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = command.spawn().expect("toolpool runs");
    if let Some(text) = stdin {
        use std::io::Write;
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(text.as_bytes()).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    crate::common::Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        elapsed: started.elapsed(),
    }
}

#[test]
fn cli_call_user_reads_the_answer_from_piped_stdin() {
    let session = tempfile::tempdir().unwrap();
    let run = run_with_stdin(
        bundled_command(session.path()).args([
            "call",
            "call_user",
            "--args",
            r#"{"instruction": "Which colour?"}"#,
        ]),
        Some("blue\n"),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "blue\n");
    assert!(
        run.stderr.contains("HUMAN INPUT REQUIRED"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("Which colour?"), "{}", run.stderr);
}

#[test]
fn cli_prompt_with_a_slow_human_outlives_the_timeout() {
    let session = tempfile::tempdir().unwrap();
    let mut command = toolpool_command(session.path());
    command
        .args([
            "--timeout",
            "1",
            "call",
            "ask_human",
            "--args",
            r#"{"question": "q"}"#,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut pipe = child.stdin.take().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    std::io::Write::write_all(&mut pipe, b"after two seconds\n").unwrap();
    drop(pipe);
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(answer["text"], json!("after two seconds"));
}

#[test]
fn cli_prompt_without_input_is_a_clear_error() {
    let session = tempfile::tempdir().unwrap();
    let run = run_with_stdin(
        bundled_command(session.path()).args([
            "call",
            "call_user",
            "--args",
            r#"{"instruction": "Proceed?"}"#,
        ]),
        None,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stdout.starts_with(
            "Tool call_user error: HumanPromptUnavailable: no human can be asked: no input: standard input is at its end"
        ),
        "{}",
        run.stdout
    );
}

#[test]
fn cli_prompt_reads_the_terminal_when_stdin_carries_the_arguments() {
    let session = tempfile::tempdir().unwrap();
    let mut command = bundled_command(session.path());
    command.args(["call", "call_user", "--args-file", "-"]);
    // Without a controlling terminal (setsid), /dev/tty cannot be opened.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            libc::setsid();
            Ok(())
        });
    }
    let run = run_with_stdin(&mut command, Some(r#"{"instruction": "Proceed?"}"#));
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stdout.starts_with("Tool call_user error: HumanPromptUnavailable: no human can be asked: no terminal to ask on"),
        "{}",
        run.stdout
    );
}
