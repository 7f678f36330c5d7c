//! Workers run in the session workspace with a minimal environment.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn worker_environment_is_minimal_unless_passed() {
    std::env::set_var("TOOLPOOL_TEST_TOKEN", "secret");
    let session = tempfile::tempdir().unwrap();
    let pool = builder(&session, 1).build().await.unwrap();
    let env = call(&pool, "env", json!({})).await.unwrap();
    assert!(env.get("TOOLPOOL_TEST_TOKEN").is_none(), "leaked: {env}");
    assert!(
        env.as_object()
            .unwrap()
            .keys()
            .all(|k| !k.starts_with("PYTHON")),
        "{env}"
    );
    pool.shutdown().await;

    let pool = builder(&session, 1)
        .pass_env(["TOOLPOOL_TEST_TOKEN".to_string()])
        .build()
        .await
        .unwrap();
    let env = call(&pool, "env", json!({})).await.unwrap();
    assert_eq!(env["TOOLPOOL_TEST_TOKEN"], json!("secret"));
    pool.shutdown().await;
}

#[tokio::test]
async fn worker_cwd_is_the_session_workspace() {
    let (pool, session) = pool(1).await;
    let cwd = call(&pool, "cwd", json!({})).await.unwrap();
    let expected = session
        .path()
        .canonicalize()
        .unwrap()
        .join("code_workspace");
    assert_eq!(cwd, json!(expected));
    pool.shutdown().await;
}
