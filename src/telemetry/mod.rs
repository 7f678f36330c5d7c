//! OpenTelemetry traces over OTLP/HTTP, configured by the standard
//! environment variables (feature `otel`): one SERVER span per MCP request
//! (`src/mcp/calls/spans.rs` makes them; this module only sets up where
//! they go).
//!
//! Exporting is on when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, unless `OTEL_SDK_DISABLED=true` or
//! `OTEL_TRACES_EXPORTER=none`; otherwise [`Telemetry::from_env`] gives
//! `None` and nothing is started (no exporter, no thread, no task). The
//! exporter reads its endpoint, `OTEL_EXPORTER_OTLP_HEADERS` (and `_TRACES_`
//! variants) itself; the SDK reads `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*` and
//! `OTEL_RESOURCE_ATTRIBUTES`. The service name is `OTEL_SERVICE_NAME`,
//! else `toolpool`.
//!
//! Only `http/protobuf` is spoken, over plain HTTP (to a collector beside
//! the server: no TLS stack is built in), sent by hyper on the process's
//! tokio runtime (`http_client.rs`). `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`, or
//! an `https://` endpoint, is told in a warning and nothing is exported;
//! `http/json` is told and sent as protobuf to the same endpoint (a
//! collector takes both there).

mod http_client;

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

/// The service name when the environment names none.
pub const DEFAULT_SERVICE_NAME: &str = "toolpool";

/// The export timeout when the environment sets none (the OTLP default).
const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`Telemetry::shutdown`] waits for the last spans to be sent.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// Why traces cannot be exported as the environment asks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The OTLP exporter refused its configuration (an endpoint that is
    /// not a URL, say).
    #[error("OpenTelemetry: the OTLP exporter cannot be built: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// Not called on a tokio runtime, which sends the spans.
    #[error("OpenTelemetry: the exporter needs a tokio runtime")]
    NoRuntime,
}

/// Where the spans go: the tracer provider with its batch processor, until
/// [`Telemetry::shutdown`] (of any clone: they share the provider).
#[derive(Debug, Clone)]
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    endpoint: String,
}

/// What the environment asks for.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// Nothing: no endpoint set, or the SDK disabled.
    Off,
    /// Nothing, for the reason told in a warning.
    Refused(String),
    /// Export to the endpoint the variable names, with a warning first when
    /// some setting is not followed as written.
    Export {
        endpoint: String,
        warning: Option<String>,
        timeout: Duration,
    },
}

impl Telemetry {
    /// The exporter the standard `OTEL_*` variables ask for, or `None` when
    /// they ask for none (see the module docs); a setting toolpool cannot
    /// follow is told as a warning in the log. Call it on the tokio runtime
    /// that runs the server.
    pub fn from_env() -> Result<Option<Telemetry>, TelemetryError> {
        match decide(|name| std::env::var(name).ok()) {
            Decision::Off => Ok(None),
            Decision::Refused(why) => {
                tracing::warn!("{why}");
                Ok(None)
            }
            Decision::Export {
                endpoint,
                warning,
                timeout,
            } => {
                if let Some(warning) = warning {
                    tracing::warn!("{warning}");
                }
                let runtime =
                    tokio::runtime::Handle::try_current().map_err(|_| TelemetryError::NoRuntime)?;
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .with_timeout(timeout)
                    .with_http_client(http_client::OnRuntime::new(runtime, timeout))
                    .build()?;
                let provider = SdkTracerProvider::builder()
                    .with_batch_exporter(exporter)
                    .with_resource(resource())
                    .build();
                let scope = InstrumentationScope::builder("toolpool")
                    .with_version(env!("CARGO_PKG_VERSION"))
                    .build();
                let tracer = provider.tracer_with_scope(scope);
                tracing::info!(%endpoint, "exporting OpenTelemetry traces (OTLP/HTTP)");
                Ok(Some(Telemetry {
                    provider,
                    tracer,
                    endpoint,
                }))
            }
        }
    }

    /// The tracer the server's spans are made with.
    pub fn tracer(&self) -> &SdkTracer {
        &self.tracer
    }

    /// The endpoint as the environment gives it (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
    /// else `OTEL_EXPORTER_OTLP_ENDPOINT`, to which the exporter adds `/v1/traces`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends the spans not yet sent and stops the exporter's thread; waits
    /// at most 10 s (a collector that does not answer does not hold up the
    /// server's exit).
    pub async fn shutdown(self) {
        let provider = self.provider;
        let done = tokio::task::spawn_blocking(move || provider.shutdown());
        match tokio::time::timeout(SHUTDOWN_WAIT, done).await {
            Ok(Ok(Ok(()))) => tracing::debug!("OpenTelemetry exporter flushed and shut down"),
            Ok(Ok(Err(error))) => {
                tracing::warn!("OpenTelemetry: the last spans may not have been sent: {error}")
            }
            Ok(Err(error)) => tracing::warn!("OpenTelemetry: shutting down failed: {error}"),
            Err(_) => tracing::warn!(
                "OpenTelemetry: the collector did not take the last spans within {} s",
                SHUTDOWN_WAIT.as_secs()
            ),
        }
    }
}

/// The service's resource: what the SDK's detectors read from the
/// environment, with `service.name` toolpool's unless the environment names
/// the service.
fn resource() -> Resource {
    let named = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let by_env = named("OTEL_SERVICE_NAME").is_some()
        || named("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attributes| {
            attributes
                .split(',')
                .any(|pair| pair.split('=').next().map(str::trim) == Some("service.name"))
        });
    let builder = Resource::builder();
    if by_env {
        builder.build()
    } else {
        builder.with_service_name(DEFAULT_SERVICE_NAME).build()
    }
}

/// What the variables `var` reads ask for.
fn decide(var: impl Fn(&str) -> Option<String>) -> Decision {
    let set = |name: &str| {
        var(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Decision::Off;
    }
    if let Some(exporters) = set("OTEL_TRACES_EXPORTER") {
        let named: Vec<&str> = exporters.split(',').map(str::trim).collect();
        if named.iter().all(|e| e.eq_ignore_ascii_case("none")) {
            return Decision::Off;
        }
        if !named.iter().any(|e| e.eq_ignore_ascii_case("otlp")) {
            return Decision::Refused(format!(
                "OpenTelemetry: OTEL_TRACES_EXPORTER={exporters}: toolpool exports traces only \
                 over OTLP (otlp); none are exported"
            ));
        }
    }
    let endpoint = set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .map(|e| ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", e))
        .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| ("OTEL_EXPORTER_OTLP_ENDPOINT", e)));
    let Some((endpoint_var, endpoint)) = endpoint else {
        return Decision::Off;
    };
    let protocol = set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .map(|p| ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", p))
        .or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL").map(|p| ("OTEL_EXPORTER_OTLP_PROTOCOL", p)));
    let warning = match &protocol {
        None => None,
        Some((_, p)) if p == "http/protobuf" => None,
        Some((name, p)) if p == "grpc" => {
            return Decision::Refused(format!(
                "OpenTelemetry: {name}=grpc is not supported: toolpool exports traces over \
                 OTLP/HTTP (http/protobuf) only, so none are exported; point {endpoint_var} at \
                 the collector's OTLP/HTTP port (4318 by default) and set {name}=http/protobuf"
            ));
        }
        Some((name, p)) => Some(format!(
            "OpenTelemetry: {name}={p} is not supported; traces are sent as http/protobuf \
             to {endpoint}"
        )),
    };
    let scheme = endpoint.split("://").next().unwrap_or_default();
    if scheme.eq_ignore_ascii_case("https") {
        return Decision::Refused(format!(
            "OpenTelemetry: {endpoint_var}={endpoint}: toolpool's exporter speaks plain HTTP \
             (it carries no TLS stack), so no traces are exported; send them to a collector \
             beside the server (http://127.0.0.1:4318) and let it forward them"
        ));
    }
    if !scheme.eq_ignore_ascii_case("http") || !endpoint.contains("://") {
        return Decision::Refused(format!(
            "OpenTelemetry: {endpoint_var}={endpoint} is not an http:// URL; no traces are exported"
        ));
    }
    let timeout = [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .find_map(|name| set(name)?.parse::<u64>().ok())
    .map(Duration::from_millis)
    .unwrap_or(DEFAULT_EXPORT_TIMEOUT);
    Decision::Export {
        endpoint,
        warning,
        timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::{decide, Decision, DEFAULT_EXPORT_TIMEOUT};
    use std::time::Duration;

    fn with(vars: &[(&str, &str)]) -> Decision {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        decide(move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    fn exports(decision: &Decision) -> Option<&str> {
        match decision {
            Decision::Export { endpoint, .. } => Some(endpoint),
            _ => None,
        }
    }

    #[test]
    fn nothing_is_exported_without_an_endpoint_or_when_disabled() {
        assert_eq!(with(&[]), Decision::Off);
        assert_eq!(with(&[("OTEL_SERVICE_NAME", "x")]), Decision::Off);
        assert_eq!(with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]), Decision::Off);
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert_eq!(
            with(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]),
            Decision::Off
        );
        assert_eq!(
            with(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]),
            Decision::Off
        );
        assert!(matches!(
            with(&[endpoint, ("OTEL_TRACES_EXPORTER", "zipkin")]),
            Decision::Refused(_)
        ));
        assert_eq!(
            exports(&with(&[endpoint, ("OTEL_SDK_DISABLED", "false")])),
            Some("http://127.0.0.1:4318")
        );
    }

    #[test]
    fn the_traces_endpoint_comes_first_and_the_timeout_is_read() {
        let decision = with(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://b:4318/v1/traces",
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ]);
        assert_eq!(
            decision,
            Decision::Export {
                endpoint: "http://b:4318/v1/traces".into(),
                warning: None,
                timeout: Duration::from_millis(2500),
            }
        );
        let plain = with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318")]);
        assert!(
            matches!(plain, Decision::Export { timeout, .. } if timeout == DEFAULT_EXPORT_TIMEOUT)
        );
    }

    #[test]
    fn grpc_and_https_are_refused_with_a_reason_and_json_is_sent_as_protobuf() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317");
        let Decision::Refused(why) = with(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])
        else {
            panic!("grpc is refused");
        };
        assert!(
            why.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported"),
            "{why}"
        );
        let Decision::Refused(why) =
            with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318")])
        else {
            panic!("https is refused");
        };
        assert!(why.contains("plain HTTP"), "{why}");
        assert!(matches!(
            with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")]),
            Decision::Refused(_)
        ));
        let json = with(&[
            endpoint,
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
        ]);
        assert!(
            matches!(&json, Decision::Export { warning: Some(w), .. } if w.contains("http/json")),
            "{json:?}"
        );
    }
}
