//! Trace context and OpenTelemetry spans of MCP requests.
//!
//! Every request may carry a W3C `traceparent` (and `tracestate`) in its
//! `_meta`, as protocol 2026-07-28 reserves them; both protocol versions
//! are read the same way. An invalid one is ignored, never an error.
//!
//! With an exporter (feature `otel`, `OTEL_EXPORTER_OTLP_*` set:
//! `src/telemetry/`), each request handled here is a SERVER span, child of
//! the client's span, named and attributed as OpenTelemetry's MCP semantic
//! conventions say: `{mcp.method.name} {target}` (`tools/call wait`),
//! `mcp.method.name`, `jsonrpc.request.id`, `mcp.session.id` (when the
//! request belongs to one), `mcp.protocol.version`, `network.transport`
//! (`pipe` on stdio, `tcp` over HTTP); a tool call adds
//! `gen_ai.operation.name = execute_tool` and `gen_ai.tool.name`. An
//! `isError` result sets `error.type = tool_error`, a JSON-RPC error its
//! code as a string; either sets the span's status to Error. What happens
//! to the call's worker is recorded as span events: `toolpool.timeout`
//! then `toolpool.worker_killed` (`toolpool.kill.reason = timeout`) for a
//! call that ran past its timeout, `toolpool.worker_died` for a worker that
//! died under its call, `toolpool.cancelled` for a call the client
//! cancelled (its worker killed, or the call taken out of the queue); and
//! `toolpool.worker.pid` as an attribute.
//!
//! The tool continues the trace (`_context["traceparent"]`, `TRACEPARENT`):
//! with an exporter it sees toolpool's span (the client's trace id, the
//! server span's id); without one, the client's `traceparent` unchanged.
//! The `tracestate` is passed on as the client sent it. Without an exporter
//! nothing here costs more than reading `_meta`.

use rmcp::model::{CallToolResponse, ErrorCode};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};

use crate::pool::CallReport;
use crate::trace_context::TraceContext;

/// How the server is reached (`network.transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::mcp) enum Transport {
    /// stdio.
    Pipe,
    /// Streamable HTTP.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    Tcp,
}

/// What the server makes spans with: nothing, or an exporter's tracer.
#[derive(Clone, Default)]
pub(in crate::mcp) struct Tracing {
    #[cfg(feature = "otel")]
    tracer: Option<opentelemetry_sdk::trace::SdkTracer>,
}

impl Tracing {
    /// Whether spans are made (else only the client's trace is read).
    pub(in crate::mcp) fn is_exporting(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.tracer.is_some();
        #[cfg(not(feature = "otel"))]
        false
    }

    #[cfg(feature = "otel")]
    pub(in crate::mcp) fn exporting(tracer: opentelemetry_sdk::trace::SdkTracer) -> Tracing {
        Tracing {
            tracer: Some(tracer),
        }
    }
}

/// What a span names of its request.
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(in crate::mcp) struct Request<'a> {
    /// `mcp.method.name`.
    pub method: &'static str,
    /// The tool's name for `tools/call` (the span name's `{target}`).
    pub tool: Option<&'a str>,
    /// `mcp.resource.uri`, for `resources/read`.
    pub resource: Option<&'a str>,
    /// `mcp.session.id`, when the request belongs to an MCP session.
    pub session_id: Option<&'a str>,
    pub transport: Transport,
}

/// One request's span (when exporting) and the trace its tool continues.
pub(in crate::mcp) struct RequestSpan {
    call: CallTrace,
}

/// What a call takes along from its request's span: the trace the tool
/// continues, and the span to record the worker's fate on.
#[derive(Clone, Default)]
pub(in crate::mcp) struct CallTrace {
    /// What the tool sees.
    tool: Option<TraceContext>,
    #[cfg(feature = "otel")]
    span: Option<opentelemetry::Context>,
}

/// How a request ended, for `error.type` and the span's status.
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(in crate::mcp) enum Outcome<'a> {
    Ok,
    /// An `isError` result; its text.
    ToolError(&'a str),
    /// A JSON-RPC error.
    Protocol(ErrorCode, &'a str),
}

impl Outcome<'_> {
    /// Of a request whose result has no `isError`.
    pub(in crate::mcp) fn of<T>(result: &Result<T, McpError>) -> Outcome<'_> {
        match result {
            Ok(_) => Outcome::Ok,
            Err(error) => Outcome::Protocol(error.code, &error.message),
        }
    }

    /// Of a `tools/call`.
    pub(in crate::mcp) fn of_call(result: &Result<CallToolResponse, McpError>) -> Outcome<'_> {
        match result {
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
                let text = result
                    .content
                    .first()
                    .and_then(|block| block.as_text())
                    .map_or("", |text| text.text.as_str());
                Outcome::ToolError(text)
            }
            _ => Outcome::of(result),
        }
    }
}

/// The client's trace context in the request's `_meta`, if valid.
fn client_trace(context: &RequestContext<RoleServer>) -> Option<TraceContext> {
    let traceparent = context.meta.get_traceparent()?;
    let trace = TraceContext::parse(traceparent, context.meta.get_tracestate());
    if trace.is_none() {
        tracing::debug!(traceparent, "ignoring an invalid traceparent in _meta");
    }
    trace
}

impl RequestSpan {
    /// The span of the request in `context` (started when exporting).
    pub(in crate::mcp) fn start(
        tracing: &Tracing,
        context: &RequestContext<RoleServer>,
        request: Request<'_>,
    ) -> RequestSpan {
        let client = client_trace(context);
        #[cfg(feature = "otel")]
        if let Some(tracer) = &tracing.tracer {
            return RequestSpan {
                call: live::start(tracer, context, &request, client),
            };
        }
        let _ = (tracing, request);
        RequestSpan {
            call: CallTrace {
                tool: client,
                #[cfg(feature = "otel")]
                span: None,
            },
        }
    }

    /// What a call of this request takes along.
    pub(in crate::mcp) fn call(&self) -> CallTrace {
        self.call.clone()
    }

    /// Records how the request ended and ends the span.
    pub(in crate::mcp) fn end(self, outcome: Outcome<'_>) {
        #[cfg(feature = "otel")]
        if let Some(span) = &self.call.span {
            live::end(span, outcome);
        }
        #[cfg(not(feature = "otel"))]
        let _ = outcome;
    }
}

impl CallTrace {
    /// The trace `call_tool` put into the request's extensions (none for
    /// a request that did not come through it).
    pub(in crate::mcp) fn of(context: &RequestContext<RoleServer>) -> CallTrace {
        context
            .extensions
            .get::<CallTrace>()
            .cloned()
            .unwrap_or_default()
    }

    /// The trace context the tool continues.
    pub(in crate::mcp) fn for_tool(&self) -> Option<TraceContext> {
        self.tool.clone()
    }

    /// Records what became of the call's worker.
    pub(in crate::mcp) fn call_ended(&self, report: &CallReport) {
        #[cfg(feature = "otel")]
        if let Some(span) = &self.span {
            live::call_ended(span, report);
        }
        #[cfg(not(feature = "otel"))]
        let _ = report;
    }

    /// Records that the client cancelled the call.
    pub(in crate::mcp) fn cancelled(&self) {
        #[cfg(feature = "otel")]
        if let Some(span) = &self.span {
            live::event(span, "toolpool.cancelled", Vec::new());
        }
    }
}

#[cfg(feature = "otel")]
mod live {
    use std::str::FromStr;

    use opentelemetry::trace::{
        Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
        TraceState, Tracer as _,
    };
    use opentelemetry::{Context, KeyValue};
    use opentelemetry_sdk::trace::SdkTracer;
    use rmcp::service::RequestContext;
    use rmcp::RoleServer;

    use rmcp::model::RequestId;

    use super::{CallTrace, Outcome, Request, Transport};
    use crate::error::ErrorKind;
    use crate::pool::CallReport;
    use crate::trace_context::TraceContext;

    /// The most of a tool's error text a span's status carries.
    const STATUS_TEXT: usize = 1024;

    pub(in crate::mcp) fn start(
        tracer: &SdkTracer,
        context: &RequestContext<RoleServer>,
        request: &Request<'_>,
        client: Option<TraceContext>,
    ) -> CallTrace {
        let parent = match &client {
            Some(trace) => Context::new().with_remote_span_context(remote(trace)),
            None => Context::new(),
        };
        let name = match request.tool {
            Some(tool) => format!("{} {tool}", request.method),
            None => request.method.to_string(),
        };
        let mut attributes = vec![
            KeyValue::new("mcp.method.name", request.method),
            KeyValue::new("jsonrpc.request.id", request_id(&context.id)),
            KeyValue::new(
                "network.transport",
                match request.transport {
                    Transport::Pipe => "pipe",
                    Transport::Tcp => "tcp",
                },
            ),
        ];
        if let Some(version) = context.protocol_version() {
            attributes.push(KeyValue::new(
                "mcp.protocol.version",
                version.as_str().to_string(),
            ));
        }
        if let Some(id) = request.session_id {
            attributes.push(KeyValue::new("mcp.session.id", id.to_string()));
        }
        if let Some(tool) = request.tool {
            attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
            attributes.push(KeyValue::new("gen_ai.tool.name", tool.to_string()));
        }
        if let Some(uri) = request.resource {
            attributes.push(KeyValue::new("mcp.resource.uri", uri.to_string()));
        }
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(tracer, &parent);
        let ids = span.span_context().clone();
        let span = parent.with_span(span);
        // The tool continues toolpool's span; the client's tracestate goes
        // on as it came (toolpool adds no member of its own).
        let tool = TraceContext::from_ids(
            &ids.trace_id().to_string(),
            &ids.span_id().to_string(),
            ids.trace_flags().to_u8(),
            client.as_ref().and_then(TraceContext::tracestate),
        );
        CallTrace {
            tool,
            span: Some(span),
        }
    }

    /// The client's span, as the parent of the server's.
    fn remote(trace: &TraceContext) -> SpanContext {
        let fields = trace.fields();
        SpanContext::new(
            TraceId::from_hex(fields.trace_id).unwrap_or(TraceId::INVALID),
            SpanId::from_hex(fields.parent_id).unwrap_or(SpanId::INVALID),
            TraceFlags::new(fields.flags),
            true,
            trace
                .tracestate()
                .and_then(|state| TraceState::from_str(state).ok())
                .unwrap_or_default(),
        )
    }

    pub(in crate::mcp) fn end(span: &Context, outcome: Outcome<'_>) {
        let span = span.span();
        match outcome {
            Outcome::Ok => {}
            Outcome::ToolError(text) => {
                span.set_attribute(KeyValue::new("error.type", "tool_error"));
                span.set_status(Status::error(clip(text)));
            }
            Outcome::Protocol(code, message) => {
                span.set_attribute(KeyValue::new("error.type", code.0.to_string()));
                span.set_status(Status::error(clip(message)));
            }
        }
        span.end();
    }

    pub(in crate::mcp) fn call_ended(span: &Context, report: &CallReport) {
        if let Some(pid) = report.worker_pid {
            span.span()
                .set_attribute(KeyValue::new("toolpool.worker.pid", i64::from(pid)));
        }
        for (name, reason, message) in worker_fate(report) {
            let mut attributes = vec![KeyValue::new("toolpool.message", message)];
            if let Some(reason) = reason {
                attributes.push(KeyValue::new("toolpool.kill.reason", reason));
            }
            if let Some(pid) = report.worker_pid {
                attributes.push(KeyValue::new("toolpool.worker.pid", i64::from(pid)));
            }
            event(span, name, attributes);
        }
    }

    pub(in crate::mcp) fn event(span: &Context, name: &'static str, attributes: Vec<KeyValue>) {
        span.span().add_event(name, attributes);
    }

    fn clip(text: &str) -> String {
        crate::context::cut(text.to_string(), STATUS_TEXT)
    }

    /// `jsonrpc.request.id`'s text.
    fn request_id(id: &RequestId) -> String {
        id.to_string()
    }

    /// What a call's end says of its worker: (event, kill reason, message).
    fn worker_fate(report: &CallReport) -> Vec<(&'static str, Option<&'static str>, String)> {
        let Err(error) = &report.result else {
            return Vec::new();
        };
        match error.kind {
            ErrorKind::Timeout => vec![
                ("toolpool.timeout", None, error.message.clone()),
                (
                    "toolpool.worker_killed",
                    Some("timeout"),
                    error.message.clone(),
                ),
            ],
            ErrorKind::WorkerDied => vec![("toolpool.worker_died", None, error.message.clone())],
            _ => Vec::new(),
        }
    }
}
