//! Human prompts from tools as MCP elicitation requests.
//!
//! Each `tools/call` gets its own [`HumanPrompt`]: an [`Elicitation`] on the
//! connection the call came from when that client declared the elicitation
//! capability (form mode) on a protocol version with server-to-client
//! requests (2025-11-25 and older), else [`NoHuman`], which answers every
//! prompt with a clear "no human available" error. On 2026-07-28 a client
//! with the capability is asked through multi-round-trip results instead
//! (`super::mrtr`), with the same message and form. A pool-wide prompt (such as the
//! terminal) is never used in serve mode: stdin is the MCP transport.
//!
//! The request is a form with one required string, `response`; the tool gets
//! its text. Decline and cancel reach the tool as the matching prompt errors.
//! If the call ends while the human is being asked (cancelled, timed out,
//! shut down), the prompt future is dropped and the client is sent
//! `notifications/cancelled` for the elicitation request.

use std::sync::Arc;

use rmcp::model::{
    CancelledNotificationParam, ClientResult, ElicitRequest, ElicitRequestParams,
    ElicitationAction, ElicitationSchema, ProtocolVersion, RequestId, ServerRequest,
};
use rmcp::service::{ElicitationMode, PeerRequestOptions, RequestContext};
use rmcp::{Peer, RoleServer};
use serde_json::{Map, Value};

use crate::context::{BoxFuture, HumanPrompt, PromptAnswer, PromptError, PromptRequest};

/// The prompt service for one call, made in `context`.
pub(crate) fn for_request(context: &RequestContext<RoleServer>) -> Arc<dyn HumanPrompt> {
    if is_modern(context) {
        // With the capability the call goes through `mrtr` instead.
        return Arc::new(NoHuman(
            "the MCP client has no human available (its request did not declare the elicitation capability)",
        ));
    }
    if context
        .peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
    {
        Arc::new(Elicitation {
            peer: context.peer.clone(),
        })
    } else {
        Arc::new(NoHuman(
            "the MCP client has no human available (it did not declare the elicitation capability)",
        ))
    }
}

/// Asks the MCP client's user through an elicitation request.
pub(crate) struct Elicitation {
    peer: Peer<RoleServer>,
}

/// True for a request on 2026-07-28 or later: no server-to-client requests.
pub(crate) fn is_modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
}

/// The key of a prompt's metadata that holds the form the tool wants.
pub(in crate::mcp) const REQUESTED_SCHEMA: &str = "requested_schema";

/// For clients that cannot be asked; carries the reason the tool is told.
pub(crate) struct NoHuman(pub &'static str);

impl HumanPrompt for NoHuman {
    fn request(&self, _request: PromptRequest) -> BoxFuture<'_, Result<PromptAnswer, PromptError>> {
        let reason = self.0;
        Box::pin(async move { Err(PromptError::Unavailable(reason.into())) })
    }
}

/// The text the user is shown: who asks, the task, and what to look at.
pub(in crate::mcp) fn message(request: &PromptRequest) -> String {
    let who = match request.node_id.as_str() {
        "" => format!("The tool '{}'", request.tool),
        node => format!("The tool '{}' (node '{node}')", request.tool),
    };
    let mut text = format!("{who} asks:\n{}", request.task_description.trim_end());
    if let Some(inputs) = request.inputs.as_deref().filter(|i| !i.trim().is_empty()) {
        text.push_str("\n\nInputs:\n");
        text.push_str(inputs.trim_end());
    }
    text
}

/// The form the user fills in: the one the tool gave as
/// `metadata["requested_schema"]` when it is one MCP can send (a flat object
/// of strings, numbers, booleans and enums), else one required string,
/// `response`, described by the task.
pub(in crate::mcp) fn schema(request: &PromptRequest) -> ElicitationSchema {
    if let Some(given) = request.metadata.get(REQUESTED_SCHEMA) {
        match serde_json::from_value::<ElicitationSchema>(given.clone()) {
            Ok(schema) => return schema,
            Err(e) => tracing::warn!(
                tool = %request.tool,
                "the tool's requested_schema is not an elicitation form ({e}); asking for one text answer"
            ),
        }
    }
    let mut description = request.task_description.trim().to_string();
    if description.chars().count() > 200 {
        description = description.chars().take(199).collect::<String>() + "…";
    }
    ElicitationSchema::builder()
        .required_string_property("response", |s| s.title("Response").description(description))
        .build_unchecked()
}

/// Sends `notifications/cancelled` for an elicitation request still
/// unanswered when its prompt future is dropped.
struct WithdrawOnDrop {
    peer: Peer<RoleServer>,
    id: Option<RequestId>,
}

impl Drop for WithdrawOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let reason = "the tool call ended before the human answered".to_string();
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(Some(id), Some(reason)))
                    .await;
            });
        }
    }
}

impl HumanPrompt for Elicitation {
    fn request(&self, request: PromptRequest) -> BoxFuture<'_, Result<PromptAnswer, PromptError>> {
        Box::pin(async move {
            let form = schema(&request);
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: message(&request),
                requested_schema: form.clone(),
            };
            let sent = self
                .peer
                .send_request_with_option(
                    ServerRequest::ElicitRequest(ElicitRequest::new(params)),
                    PeerRequestOptions::no_options(),
                )
                .await
                .map_err(|e| PromptError::Failed(format!("cannot ask the MCP client: {e}")))?;
            let mut withdraw = WithdrawOnDrop {
                peer: self.peer.clone(),
                id: Some(sent.id.clone()),
            };
            let response = sent.await_response().await;
            withdraw.id = None;
            let result = match response {
                Ok(ClientResult::ElicitResult(result)) => result,
                Ok(other) => {
                    return Err(PromptError::Failed(format!(
                        "the MCP client answered the elicitation with {other:?}"
                    )))
                }
                Err(e) => {
                    return Err(PromptError::Failed(format!(
                        "the elicitation request failed: {e}"
                    )))
                }
            };
            match result.action {
                ElicitationAction::Accept => answer(result.content, &form),
                ElicitationAction::Decline => Err(PromptError::Declined(None)),
                ElicitationAction::Cancel => Err(PromptError::Cancelled(None)),
                other => Err(PromptError::Failed(format!(
                    "the MCP client answered the elicitation with {other:?}"
                ))),
            }
        })
    }
}

/// The tool's answer from the accepted `form`: the `response` text; any
/// other fields go into the answer's metadata. Content that does not fit
/// the form (a required field missing, a field of the wrong type or not one
/// of its choices) is a declined prompt saying why, never an empty answer.
pub(in crate::mcp) fn answer(
    content: Option<Value>,
    form: &ElicitationSchema,
) -> Result<PromptAnswer, PromptError> {
    let mut fields = match content {
        Some(Value::Object(fields)) => fields,
        None => Map::new(),
        Some(other) => {
            return Err(PromptError::Declined(Some(format!(
                "the answer does not fit the form: the content is {other}, not an object of fields"
            ))))
        }
    };
    let form = serde_json::to_value(form).unwrap_or(Value::Null);
    if let Some(misfit) = misfit(&form, &fields) {
        return Err(PromptError::Declined(Some(format!(
            "the answer does not fit the form: {misfit}"
        ))));
    }
    let text = match fields.remove("response") {
        Some(Value::String(text)) => text,
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    Ok(PromptAnswer {
        text,
        metadata: fields,
    })
}

/// Why `fields` do not fit `form` (an elicitation schema as JSON), if they
/// do not: the first required field missing, or field of the wrong type or
/// not among its choices. Fields the form does not name are let through.
fn misfit(form: &Value, fields: &Map<String, Value>) -> Option<String> {
    let required = form["required"].as_array().into_iter().flatten();
    for name in required.filter_map(Value::as_str) {
        if fields.get(name).is_none_or(Value::is_null) {
            return Some(format!("the required field '{name}' is missing"));
        }
    }
    let properties = form["properties"].as_object()?;
    for (name, value) in fields {
        let Some(property) = properties.get(name) else {
            continue;
        };
        if value.is_null() {
            continue;
        }
        let fits = match property["type"].as_str() {
            Some("string") => value.is_string(),
            Some("integer") => value.is_i64() || value.is_u64(),
            Some("number") => value.is_number(),
            Some("boolean") => value.is_boolean(),
            Some("array") => value.is_array(),
            _ => true,
        };
        if !fits {
            return Some(format!(
                "the field '{name}' must be of type {}, got {value}",
                property["type"]
            ));
        }
        let choices = choices(property);
        let chosen = match value {
            Value::Array(items) => items
                .iter()
                .all(|item| choices.is_empty() || choices.contains(item)),
            single => choices.is_empty() || choices.contains(single),
        };
        if !chosen {
            return Some(format!(
                "the field '{name}' got {value}, which is not one of its choices"
            ));
        }
    }
    None
}

/// The values a form field offers (`enum`, `oneOf`/`anyOf` consts, or an
/// array's items'); empty when it offers any value.
fn choices(property: &Value) -> Vec<Value> {
    let of = |schema: &Value| -> Vec<Value> {
        if let Some(values) = schema["enum"].as_array() {
            return values.clone();
        }
        ["oneOf", "anyOf"]
            .iter()
            .filter_map(|key| schema[*key].as_array())
            .flatten()
            .filter_map(|option| option.get("const").cloned())
            .collect()
    };
    match of(property).as_slice() {
        [] => of(&property["items"]),
        found => found.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request() -> PromptRequest {
        PromptRequest {
            session_id: "s".into(),
            node_id: "Writer".into(),
            task_description: "Approve the draft?".into(),
            inputs: Some("the draft".into()),
            metadata: Map::new(),
            tool: "ask".into(),
        }
    }

    #[test]
    fn the_message_names_the_tool_the_node_and_the_inputs() {
        assert_eq!(
            message(&request()),
            "The tool 'ask' (node 'Writer') asks:\nApprove the draft?\n\nInputs:\nthe draft"
        );
    }

    #[test]
    fn the_form_asks_for_one_required_response() {
        let schema = serde_json::to_value(schema(&request())).unwrap();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["response"]));
        assert_eq!(schema["properties"]["response"]["type"], "string");
    }

    #[test]
    fn the_tools_own_form_is_sent_when_mcp_can_carry_it() {
        let mut asked = request();
        let form = json!({
            "type": "object",
            "properties": {
                "age": {"type": "integer", "default": 30},
                "status": {"type": "string", "enum": ["active", "inactive"], "default": "active"},
                "verified": {"type": "boolean", "default": true},
            },
            "required": [],
        });
        asked.metadata.insert(REQUESTED_SCHEMA.into(), form);
        let sent = serde_json::to_value(schema(&asked)).unwrap();
        assert_eq!(sent["properties"]["age"]["default"], json!(30));
        assert_eq!(
            sent["properties"]["status"]["enum"],
            json!(["active", "inactive"])
        );
        assert_eq!(sent["properties"]["verified"]["type"], "boolean");
        // Not a form (a nested object): the one-answer form instead.
        asked.metadata.insert(
            REQUESTED_SCHEMA.into(),
            json!({"type": "object", "properties": {"a": {"type": "object"}}}),
        );
        let sent = serde_json::to_value(schema(&asked)).unwrap();
        assert_eq!(sent["required"], json!(["response"]));
    }

    #[test]
    fn the_answer_is_the_response_text() {
        let answer = answer(
            Some(json!({"response": "yes", "extra": 1})),
            &schema(&request()),
        )
        .unwrap();
        assert_eq!(answer.text, "yes");
        assert_eq!(answer.metadata["extra"], json!(1));
    }

    #[test]
    fn an_answer_that_does_not_fit_the_form_is_declined_saying_why() {
        let declined = |content: serde_json::Value, form: &ElicitationSchema| match answer(
            Some(content),
            form,
        ) {
            Err(PromptError::Declined(Some(why))) => why,
            other => panic!("{other:?}"),
        };
        let one_text = schema(&request());
        assert_eq!(
            declined(json!({}), &one_text),
            "the answer does not fit the form: the required field 'response' is missing"
        );
        assert!(declined(json!({"response": 5}), &one_text)
            .contains("'response' must be of type \"string\""));
        let mut asked = request();
        asked.metadata.insert(
            REQUESTED_SCHEMA.into(),
            json!({"type": "object", "properties": {
                "status": {"type": "string", "enum": ["active", "inactive"]},
                "age": {"type": "integer"}}, "required": []}),
        );
        let form = schema(&asked);
        assert!(declined(json!({"status": "gone"}), &form).contains("not one of its choices"));
        assert!(declined(json!({"age": 1.5}), &form).contains("'age' must be of type"));
        let fits = answer(Some(json!({"status": "active", "age": 30})), &form).unwrap();
        assert_eq!(fits.metadata["age"], json!(30));
    }
}
