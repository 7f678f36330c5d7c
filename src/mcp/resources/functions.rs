//! Resources that functions of the tool folder serve: a function with
//! `func.mcp_resource = "uri"` (and optionally `func.mcp_mime_type`) is read
//! by `resources/read` instead of being called as a tool. A URI with
//! `{name}` parts is a template: each part matches one path segment and is
//! passed to the function as the argument of that name
//! (`test://items/{id}` → `items(id="42")` for `test://items/42`).
//!
//! What the function returns becomes the resource's contents: a `str` is
//! text (`text/plain` unless the function names a type), `bytes` are a blob
//! for a binary type (the worker sends them as base64), any other JSON value
//! is its JSON text (`application/json`).

use base64::Engine as _;
use rmcp::model::{CacheScope, ReadResourceResult, Resource, ResourceContents, ResourceTemplate};
use rmcp::ErrorData as McpError;
use serde_json::{json, Map, Value};

use super::{is_textual, text_contents};
use crate::catalog::{Catalog, FunctionSpec};
use crate::error::ToolError;

/// One part of a URI template.
#[derive(Debug, PartialEq)]
enum Part<'a> {
    Literal(&'a str),
    Variable(&'a str),
}

/// The parts of `template`; `None` when its braces do not pair up.
fn parts(template: &str) -> Option<Vec<Part<'_>>> {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            parts.push(Part::Literal(&rest[..open]));
        }
        let close = rest[open..].find('}')? + open;
        let name = &rest[open + 1..close];
        if name.is_empty() || name.contains('{') {
            return None;
        }
        parts.push(Part::Variable(name));
        rest = &rest[close + 1..];
    }
    if rest.contains('}') {
        return None;
    }
    if !rest.is_empty() {
        parts.push(Part::Literal(rest));
    }
    Some(parts)
}

/// Whether `uri` is a template (has `{name}` parts).
fn is_template(uri: &str) -> bool {
    uri.contains('{')
}

/// The arguments `uri` gives the template's variables, when it matches:
/// each variable takes a non-empty run up to the next literal part, within
/// one path segment.
fn matches(template: &str, uri: &str) -> Option<Map<String, Value>> {
    let parts = parts(template)?;
    let mut args = Map::new();
    let mut rest = uri;
    for (i, part) in parts.iter().enumerate() {
        match part {
            Part::Literal(literal) => rest = rest.strip_prefix(literal)?,
            Part::Variable(name) => {
                let end = match parts.get(i + 1) {
                    Some(Part::Literal(next)) => rest.find(next)?,
                    // Two variables side by side cannot be told apart.
                    Some(Part::Variable(_)) => return None,
                    None => rest.len(),
                };
                let value = &rest[..end];
                if value.is_empty() || value.contains('/') {
                    return None;
                }
                args.insert((*name).to_string(), Value::String(value.to_string()));
                rest = &rest[end..];
            }
        }
    }
    rest.is_empty().then_some(args)
}

/// The functions of `catalog` that serve resources.
fn served(catalog: &Catalog) -> impl Iterator<Item = &FunctionSpec> {
    catalog.functions.iter().filter(|f| f.resource.is_some())
}

/// The function-served resources with a fixed URI.
pub(crate) fn listed(catalog: &Catalog) -> Vec<Resource> {
    served(catalog)
        .filter_map(|f| {
            let spec = f.resource.as_ref()?;
            if is_template(&spec.uri) {
                return None;
            }
            let mut resource = Resource::new(spec.uri.clone(), f.name.clone());
            resource.title = f.title.clone();
            resource.description = Some(f.description.clone()).filter(|d| !d.is_empty());
            resource.mime_type = spec.mime_type.clone();
            Some(resource)
        })
        .collect()
}

/// The function-served resource templates.
pub(crate) fn templates(catalog: &Catalog) -> Vec<ResourceTemplate> {
    served(catalog)
        .filter_map(|f| {
            let spec = f.resource.as_ref()?;
            if !is_template(&spec.uri) || parts(&spec.uri).is_none() {
                return None;
            }
            let mut template = ResourceTemplate::new(spec.uri.clone(), f.name.clone());
            template.title = f.title.clone();
            template.description = Some(f.description.clone()).filter(|d| !d.is_empty());
            template.mime_type = spec.mime_type.clone();
            Some(template)
        })
        .collect()
}

/// The function that serves `uri` and the arguments to call it with: a
/// fixed URI first, then the first template that matches.
pub(crate) fn find<'a>(
    catalog: &'a Catalog,
    uri: &str,
) -> Option<(&'a FunctionSpec, Map<String, Value>)> {
    let exact = served(catalog).find(|f| f.resource.as_ref().is_some_and(|r| r.uri == uri));
    if let Some(function) = exact {
        return Some((function, Map::new()));
    }
    served(catalog).find_map(|f| {
        let template = &f.resource.as_ref()?.uri;
        if !is_template(template) {
            return None;
        }
        matches(template, uri).map(|args| (f, args))
    })
}

/// The contents of `uri` from what its function returned.
pub(crate) fn contents(
    function: &FunctionSpec,
    uri: &str,
    result: Result<Value, ToolError>,
) -> Result<ReadResourceResult, McpError> {
    let failed = |message: String| McpError::internal_error(message, Some(json!({"uri": uri})));
    let value = result.map_err(|error| failed(error.to_string()))?;
    let declared = function.resource.as_ref().and_then(|r| r.mime_type.clone());
    let contents = match value {
        Value::String(text) => {
            let mime_type = declared.unwrap_or_else(|| "text/plain".into());
            if is_textual(&mime_type) {
                text_contents(uri, Some(mime_type), text)
            } else {
                // Bytes arrive as base64; anything else is the function's mistake.
                if base64::engine::general_purpose::STANDARD
                    .decode(&text)
                    .is_err()
                {
                    return Err(failed(format!(
                        "resource function '{}' returned text for the binary type {mime_type}: it must return bytes",
                        function.name
                    )));
                }
                ResourceContents::BlobResourceContents {
                    uri: uri.to_string(),
                    mime_type: Some(mime_type),
                    blob: text,
                    meta: None,
                }
            }
        }
        other => text_contents(
            uri,
            Some(declared.unwrap_or_else(|| "application/json".into())),
            other.to_string(),
        ),
    };
    Ok(ReadResourceResult::new(vec![contents])
        .with_ttl_ms(0)
        .with_cache_scope(CacheScope::Private))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_one_segment_per_variable() {
        let args = |template, uri| matches(template, uri);
        assert_eq!(
            args("test://template/{id}/data", "test://template/123/data"),
            Some(json!({"id": "123"}).as_object().cloned().unwrap())
        );
        assert_eq!(
            args("test://{kind}/{id}", "test://a/b"),
            Some(
                json!({"kind": "a", "id": "b"})
                    .as_object()
                    .cloned()
                    .unwrap()
            )
        );
        for (template, uri) in [
            ("test://template/{id}/data", "test://template//data"),
            ("test://template/{id}/data", "test://template/1/2/data"),
            ("test://template/{id}/data", "test://template/1/data/more"),
            ("test://template/{id}/data", "other://template/1/data"),
            ("test://{a}{b}", "test://ab"),
            ("test://{broken", "test://x"),
        ] {
            assert_eq!(args(template, uri), None, "{template} ~ {uri}");
        }
    }

    fn function(uri: &str, mime_type: Option<&str>) -> FunctionSpec {
        let mut spec: FunctionSpec = serde_json::from_value(json!({
            "name": "r", "module": "m", "description": "", "parameters": {},
            "file": "m.py", "line": 1,
            "resource": {"uri": uri},
        }))
        .unwrap();
        if let Some(resource) = spec.resource.as_mut() {
            resource.mime_type = mime_type.map(str::to_string);
        }
        spec
    }

    #[test]
    fn results_become_text_blobs_or_json() {
        let text = contents(&function("t://a", None), "t://a", Ok(json!("hi"))).unwrap();
        assert_eq!(
            text.contents,
            vec![text_contents(
                "t://a",
                Some("text/plain".into()),
                "hi".into()
            )]
        );
        let json_value = contents(&function("t://j", None), "t://j", Ok(json!({"a": 1}))).unwrap();
        assert_eq!(
            json_value.contents,
            vec![text_contents(
                "t://j",
                Some("application/json".into()),
                r#"{"a":1}"#.into()
            )]
        );
        let png = function("t://p", Some("image/png"));
        let blob = contents(&png, "t://p", Ok(json!("iVBORw=="))).unwrap();
        assert!(matches!(
            &blob.contents[0],
            ResourceContents::BlobResourceContents { blob, .. } if blob == "iVBORw=="
        ));
        let wrong = contents(&png, "t://p", Ok(json!("not base64!"))).unwrap_err();
        assert!(
            wrong.message.contains("must return bytes"),
            "{}",
            wrong.message
        );
    }
}
