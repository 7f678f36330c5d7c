//! The `tools/list` entries: each tool's schema, output schema, title,
//! behaviour hints and `_meta`, from the catalog (or a workflow node).

use super::*;

/// The `tools/list` entries.
pub(super) fn list_tools(pool: &Pool, tools: &ToolSet) -> Vec<Tool> {
    let default_timeout = pool.default_timeout();
    let catalog = pool.catalog();
    let function_of = |function: &str| catalog.functions.iter().find(|f| f.name == function);
    match tools {
        ToolSet::Catalog => catalog
            .functions
            .iter()
            // Functions that serve resources are read, not called.
            .filter(|f| f.resource.is_none())
            .map(|f| {
                let meta = json!({
                    "toolpool/function": f.name,
                    "toolpool/module": f.module,
                    "toolpool/timeout": seconds(default_timeout),
                });
                tool(&f.name, &f.description, &f.parameters, meta, Some(f), None)
            })
            .collect(),
        ToolSet::Node(node) => node
            .tools
            .iter()
            .map(|t| {
                let meta = json!({
                    "toolpool/function": t.function,
                    "toolpool/node": node.id,
                    "toolpool/timeout": seconds(t.timeout.unwrap_or(default_timeout)),
                });
                tool(
                    &t.name,
                    &t.description,
                    &t.parameters,
                    meta,
                    function_of(&t.function),
                    Some((t.title.as_deref(), t.annotations.as_ref())),
                )
            })
            .collect(),
    }
}

/// A function's MCP `outputSchema`. A wrapped one (`{"result": ...}`) is
/// marked the way fastmcp marks its own, so that its client (and others that
/// follow it) hands the caller the result itself rather than the wrapper.
pub(super) fn output_schema(function: &FunctionSpec) -> Option<Value> {
    let mut schema = function.output_schema.clone()?;
    if let (true, Value::Object(fields)) = (function.output_wrapped, &mut schema) {
        fields.insert("x-fastmcp-wrap-result".into(), Value::Bool(true));
    }
    Some(schema)
}

/// The MCP tool for `name`, with what its catalog `function` (when known)
/// says of its result, title and behaviour.
pub(super) fn tool(
    name: &str,
    description: &str,
    parameters: &Value,
    meta: Value,
    function: Option<&FunctionSpec>,
    // A workflow entry's own title and hints, in place of the function's.
    entry: Option<(Option<&str>, Option<&ToolHints>)>,
) -> Tool {
    let output = function.and_then(output_schema);
    // The catalog and `resolve` only produce object schemas; anything else
    // would be rejected by clients, so fall back to "no parameters".
    let schema: JsonObject = match parameters {
        Value::Object(schema) => schema.clone(),
        _ => json!({"type": "object", "properties": {}})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    };
    let meta = match meta {
        Value::Object(meta) => MetaObject(meta),
        _ => MetaObject(JsonObject::new()),
    };
    let tool = Tool::new_with_raw(
        name.to_string(),
        Some(Cow::Owned(description.to_string())),
        Arc::new(schema),
    )
    .with_meta(meta);
    // The shim only makes object schemas (a non-object result is wrapped).
    let mut tool = match output {
        Some(Value::Object(output)) => tool.with_raw_output_schema(Arc::new(output)),
        _ => tool,
    };
    let (entry_title, entry_hints) = entry.unwrap_or_default();
    let title = entry_title
        .map(str::to_string)
        .or_else(|| function.and_then(|f| f.title.clone()));
    let hints = entry_hints.or_else(|| function.and_then(|f| f.annotations.as_ref()));
    tool.title = title.clone();
    tool.annotations = hints.map(|hints| {
        let mut annotations = rmcp::model::ToolAnnotations::default();
        // The title here too: clients of versions before `Tool.title` read it here.
        annotations.title = title.clone();
        annotations.read_only_hint = hints.read_only_hint;
        annotations.destructive_hint = hints.destructive_hint;
        annotations.idempotent_hint = hints.idempotent_hint;
        annotations.open_world_hint = hints.open_world_hint;
        annotations
    });
    tool
}

/// Seconds as a JSON number: `30`, not `30.0`, when whole.
pub(super) fn seconds(duration: Duration) -> Value {
    if duration.subsec_nanos() == 0 {
        Value::from(duration.as_secs())
    } else {
        json!(duration.as_secs_f64())
    }
}
