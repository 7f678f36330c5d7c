//! A tool folder written for the original convention (file tools that insist
//! on a real `utils.attachments.AttachmentStore`, `MessageBlock` results,
//! `call_user`) runs unchanged, with its services shared across workers.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use toolpool::context::prompt_fn;
use toolpool::context::{PromptAnswer, PromptRequest};
use toolpool::{InvokeOptions, Pool};

fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/original_convention/functions/function_calling")
}

async fn call(pool: &Pool, name: &str, args: Value) -> Value {
    pool.invoke(name, args, InvokeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", e.traceback.as_deref().unwrap_or_default()))
}

#[tokio::test]
async fn original_convention_tools_run_unchanged() {
    let session = tempfile::tempdir().unwrap();
    let prompt = prompt_fn(|request: PromptRequest| async move {
        Ok(PromptAnswer::text(format!(
            "{} -> approved",
            request.inputs.unwrap_or_default()
        )))
    });
    let pool = Pool::builder()
        .functions_dir(folder())
        .workers(3)
        .session_dir(session.path())
        .timeout(Duration::from_secs(30))
        .human_prompt(prompt)
        .build()
        .await
        .unwrap();
    assert!(
        pool.catalog().errors.is_empty(),
        "{:?}",
        pool.catalog().errors
    );

    call(
        &pool,
        "write_text",
        json!({"path": "out/report.md", "content": "# Report\n"}),
    )
    .await;
    call(
        &pool,
        "write_text",
        json!({"path": "out/chart.png", "content": "not really a png"}),
    )
    .await;
    // Registered concurrently from several workers.
    let loads: Vec<_> = ["out/report.md", "out/chart.png"]
        .into_iter()
        .map(|path| {
            let pool = pool.clone();
            tokio::spawn(async move { call(&pool, "load_file", json!({"path_or_id": path})).await })
        })
        .collect();
    let mut blocks = Vec::new();
    for load in loads {
        blocks.push(load.await.unwrap());
    }
    // MessageBlock dataclasses, converted for the agent.
    assert_eq!(blocks[0][0]["type"], json!("file"));
    assert_eq!(
        blocks[0][0]["attachment"]["mime_type"],
        json!("text/markdown")
    );
    assert_eq!(blocks[1][0]["type"], json!("image"));
    assert_eq!(
        blocks[1][0]["data"]["workspace_path"],
        json!("out/chart.png")
    );

    let ids: HashSet<String> = blocks
        .iter()
        .map(|b| {
            b[0]["attachment"]["attachment_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let listed = call(&pool, "list_attachments", json!({})).await;
    let listed_ids: HashSet<String> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed_ids, ids);
    // Loading by id gives the same block, whichever worker answers.
    for block in &blocks {
        let id = block[0]["attachment"]["attachment_id"].clone();
        assert_eq!(
            &call(&pool, "load_file", json!({"path_or_id": id})).await,
            block
        );
    }
    let entries = call(&pool, "list_workspace", json!({})).await;
    assert!(
        entries
            .as_array()
            .unwrap()
            .contains(&json!("out/report.md")),
        "{entries}"
    );

    let answer = call(&pool, "call_user", json!({"instruction": "Ship it?"})).await;
    assert_eq!(answer, json!("Ship it? -> approved"));
    pool.shutdown().await;

    // Without a prompt service: the convention's default text.
    let quiet = Pool::builder()
        .functions_dir(folder())
        .workers(1)
        .session_dir(session.path())
        .build()
        .await
        .unwrap();
    let answer = call(&quiet, "call_user", json!({"instruction": "Ship it?"})).await;
    assert_eq!(
        answer,
        json!("Human prompt unavailable, default response for instruction: Ship it?")
    );
    // The persisted attachments are there for the next process.
    let listed = call(&quiet, "list_attachments", json!({})).await;
    assert_eq!(listed.as_array().unwrap().len(), 2);
    quiet.shutdown().await;
}
