//! Arguments are checked against the function before it runs; every problem
//! is named in one InvalidArguments message; lax coercions fix what models
//! commonly get wrong; `_context` is injected, never taken from the agent.

use crate::common::*;
use serde_json::json;
use toolpool::ErrorKind;

#[tokio::test]
async fn every_bad_argument_is_named_in_one_message() {
    let (pool, _session) = pool(1).await;
    let error = call(&pool, "add", json!({"a": "abc", "colour": 1, "_secret": 2}))
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::InvalidArguments, "{error}");
    let text = error.to_string();
    assert!(
        text.starts_with("Tool add error: InvalidArguments: "),
        "{text}"
    );
    for needle in ["'b'", "'colour'", "'a'", "'_secret'"] {
        assert!(text.contains(needle), "{needle} not named in: {text}");
    }
    pool.shutdown().await;
}

#[tokio::test]
async fn agent_supplied_context_is_refused() {
    let (pool, _session) = pool(1).await;
    let error = call(
        &pool,
        "show_context",
        json!({"_context": {"session_id": "evil"}}),
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind, ErrorKind::InvalidArguments, "{error}");
    assert!(error.message.contains("'_context'"), "{error}");
    pool.shutdown().await;
}

#[tokio::test]
async fn context_is_injected_with_session_paths() {
    let (pool, session) = pool(1).await;
    let context = call(&pool, "show_context", json!({})).await.unwrap();
    let dir = session.path().canonicalize().unwrap();
    assert_eq!(context["session_id"], json!("default"));
    assert_eq!(context["graph_directory"], json!(dir));
    assert_eq!(
        context["python_workspace_root"],
        json!(dir.join("code_workspace"))
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn node_id_and_vars_reach_the_tool() {
    let (pool, _session) = pool(1).await;
    let mut vars = serde_json::Map::new();
    vars.insert("lang".into(), json!("de"));
    let options = toolpool::InvokeOptions {
        timeout: None,
        context: toolpool::InvokeContext {
            node_id: Some("summarize".into()),
            vars,
            ..Default::default()
        },
        ..Default::default()
    };
    let context = pool
        .invoke("show_context", json!({}), options)
        .await
        .unwrap();
    assert_eq!(context["node_id"], json!("summarize"));
    assert_eq!(context["vars"], json!({"lang": "de"}));
    pool.shutdown().await;
}

/// A session's calls send the same context and the worker parses it once: a
/// tool that writes into its `vars` must not change what the next call gets.
#[tokio::test]
async fn a_tool_that_overwrites_its_vars_does_not_change_the_next_calls() {
    let (pool, _session) = pool(1).await;
    let mut vars = serde_json::Map::new();
    vars.insert("lang".into(), json!("de"));
    vars.insert("list".into(), json!(["a"]));
    let options = || toolpool::InvokeOptions {
        context: toolpool::InvokeContext {
            node_id: None,
            vars: vars.clone(),
            ..Default::default()
        },
        ..Default::default()
    };
    for _ in 0..3 {
        let seen = pool
            .invoke("scribble_vars", json!({}), options())
            .await
            .unwrap();
        assert_eq!(seen, json!({"lang": "de", "list": ["a"]}));
    }
    pool.shutdown().await;
}

#[tokio::test]
async fn common_model_mistakes_are_coerced() {
    let (pool, _session) = pool(1).await;
    assert_eq!(
        call(&pool, "add", json!({"a": "5", "b": 1})).await.unwrap(),
        json!(6)
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn unknown_function_is_not_found_with_close_matches() {
    let (pool, _session) = pool(1).await;
    let error = call(&pool, "ad", json!({})).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::NotFound, "{error}");
    let text = error.to_string();
    assert!(
        text.starts_with(
            "Tool ad error: NotFound: function 'ad' not found under function directory"
        ),
        "{text}"
    );
    assert!(text.contains("did you mean"), "{text}");
    assert!(text.contains("'add'"), "{text}");
    assert!(
        text.contains("broken"),
        "names the module that failed to import: {text}"
    );
    assert_serves(&pool).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn kwargs_tool_accepts_extra_arguments_but_not_underscored_ones() {
    let (pool, _session) = pool(1).await;
    assert!(call(&pool, "kwargs_tool", json!({"a": 1, "extra": 2}))
        .await
        .is_ok());
    let error = call(&pool, "kwargs_tool", json!({"a": 1, "_context": {}}))
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::InvalidArguments, "{error}");
    pool.shutdown().await;
}
