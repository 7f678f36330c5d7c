//! Human prompts from tools through `toolpool serve`: elicitation requests to
//! a client that declares the capability, a clear "no human available" for
//! one that does not, and the wait not counting against the timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::mcp_support::*;
use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
use serde_json::{json, Value};

fn accept(text: &str) -> Answer {
    let text = text.to_string();
    Arc::new(move |_: &ElicitRequestParams| {
        ElicitResult::new(ElicitationAction::Accept).with_content(json!({"response": text}))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_prompt_is_an_elicitation_round_trip() {
    let served = serve_with(
        &["--workers", "1", "serve"],
        TestClient::answering(accept("forty-two")),
    )
    .await;
    let result = served
        .call(
            "ask_human",
            json!({"question": "What is six times seven?", "node": "Writer"}),
        )
        .await;
    let answer: Value = serde_json::from_str(&ok_text(&result)).expect("JSON");
    assert_eq!(answer["text"], "forty-two");
    assert_eq!(answer["available"], true);
    assert_eq!(answer["metadata"]["fixture"], true);

    let asked = served.client.service().asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    let ElicitRequestParams::FormElicitationParams {
        message,
        requested_schema,
        ..
    } = &asked[0]
    else {
        panic!("a form elicitation: {asked:?}");
    };
    assert!(message.contains("'ask_human' (node 'Writer')"), "{message}");
    assert!(message.contains("Answer the question."), "{message}");
    assert!(message.contains("What is six times seven?"), "{message}");
    let schema = serde_json::to_value(requested_schema).unwrap();
    assert_eq!(schema["required"], json!(["response"]));
    assert_eq!(served.close().await.0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_capability_the_tool_hears_no_human_is_available() {
    let served = serve(&["--workers", "1", "serve"]).await;
    let result = served
        .call(
            "ask_then_sleep",
            json!({"question": "Anyone?", "seconds": 0}),
        )
        .await;
    assert_eq!(
        error_text(&result),
        "Tool ask_then_sleep error: HumanPromptUnavailable: no human can be asked: the MCP client \
         has no human available (it did not declare the elicitation capability)"
    );
    assert!(served.client.service().asked.lock().unwrap().is_empty());
    assert_eq!(served.close().await.0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declining_reaches_the_tool_as_declined() {
    let decline: Answer =
        Arc::new(|_: &ElicitRequestParams| ElicitResult::new(ElicitationAction::Decline));
    let served = serve_with(&["--workers", "1", "serve"], TestClient::answering(decline)).await;
    let result = served
        .call(
            "ask_then_sleep",
            json!({"question": "Approve?", "seconds": 0}),
        )
        .await;
    let text = error_text(&result);
    assert!(
        text.starts_with("Tool ask_then_sleep error: HumanPromptDeclined: "),
        "{text}"
    );
    assert_eq!(
        ok_text(&served.call("add", json!({"a": 2, "b": 3})).await),
        "5"
    );
    assert_eq!(served.close().await.0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_the_human_does_not_count_against_the_timeout() {
    let client = TestClient::answering(accept("late but fine")).after(Duration::from_millis(1500));
    let served = serve_with(&["--workers", "1", "--timeout", "1", "serve"], client).await;
    let started = Instant::now();
    let result = served
        .call(
            "ask_then_sleep",
            json!({"question": "Take your time", "seconds": 0.5}),
        )
        .await;
    assert_eq!(ok_text(&result), "late but fine");
    assert!(started.elapsed() >= Duration::from_millis(2000));
    // The timer runs again after the answer.
    let client_result = served
        .call(
            "ask_then_sleep",
            json!({"question": "Again", "seconds": 30}),
        )
        .await;
    assert!(
        error_text(&client_result).starts_with("Tool ask_then_sleep error: TimeoutError: "),
        "{client_result:?}"
    );
    assert_eq!(served.close().await.0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_call_withdraws_its_elicitation() {
    let client = TestClient::answering(accept("too late")).after(Duration::from_secs(30));
    let served = serve_with(&["--workers", "1", "serve"], client).await;
    let peer = served.client.peer().clone();
    let waiting = tokio::spawn(async move {
        call(
            &peer,
            "ask_then_sleep",
            json!({"question": "Hello?", "seconds": 0}),
        )
        .await
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while served.client.service().asked.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no elicitation request came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    waiting.abort();
    let _ = waiting.await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while served.client.service().cancelled.lock().unwrap().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the elicitation was not withdrawn"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The slot is free again.
    assert_eq!(
        ok_text(&served.call("add", json!({"a": 2, "b": 3})).await),
        "5"
    );
    assert_eq!(served.close().await.0, 0);
}
