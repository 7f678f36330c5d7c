//! An OTLP/HTTP receiver for the trace tests (`tests/fixtures/otlp_receiver.py`,
//! run with the `opentelemetry-proto` package of target/pyvenv-otel), the
//! spans it wrote, and `serve --http` spoken to with raw HTTP/1.1.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Every `OTEL_*` variable the tests' own environment may carry: removed
/// from each server's, so that only what a test sets counts.
pub const OTEL_VARIABLES: &[&str] = &[
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_EXPORTER",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
];

/// The python with `opentelemetry-proto` (None: the test is skipped, but
/// in CI, where it is required).
pub fn otel_python() -> Option<PathBuf> {
    crate::mcp_python::venv_python(
        "TOOLPOOL_TEST_OTEL_VENV",
        "target/pyvenv-otel",
        "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
    )
}

/// The receiver, killed when dropped.
pub struct Receiver {
    child: Child,
    pub port: u16,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Receiver {
    pub fn start(python: &Path) -> Receiver {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("spans.jsonl");
        let script = crate::common::fixtures()
            .parent()
            .expect("tests/fixtures")
            .join("otlp_receiver.py");
        let mut child = Command::new(python)
            .arg(&script)
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the receiver starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the receiver's port");
        let port = line.trim().parse().expect("a port number");
        Receiver {
            child,
            port,
            out,
            _dir: dir,
        }
    }

    /// `OTEL_EXPORTER_OTLP_ENDPOINT` for this receiver.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The spans received so far.
    pub fn spans(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect()
    }

    /// The spans once one is named `name` and passes `check` (polled, 30 s
    /// at most).
    pub fn span_named(&self, name: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans();
            if let Some(span) = spans.iter().find(|s| s["name"] == name && check(s)) {
                return span.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no span {name:?} as expected arrived within 30 s; got {spans:#?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A span's attribute.
pub fn attribute<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

/// The names of a span's events.
pub fn event_names(span: &Value) -> Vec<String> {
    span["events"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter_map(|e| e["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// An HTTP answer: status, headers (lowercase names), body.
pub struct HttpAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC message of the body: the JSON itself, or the SSE
    /// event that answers `id`.
    pub fn reply(&self, id: u64) -> Value {
        if self
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream"))
        {
            for line in self.body.lines() {
                if let Some(data) = line.strip_prefix("data:") {
                    if let Ok(message) = serde_json::from_str::<Value>(data.trim()) {
                        if message["id"] == id {
                            return message;
                        }
                    }
                }
            }
            panic!("no answer to {id} in {:?}", self.body);
        }
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body))
    }
}

/// POSTs `message` to `serve --http` on `port` (one connection, closed
/// after the answer), with `headers` besides the usual ones.
pub fn post(port: u16, message: &Value, headers: &[(&str, &str)]) -> HttpAnswer {
    let body = message.to_string();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    stream.write_all(request.as_bytes()).expect("request sent");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("answer read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    HttpAnswer {
        status,
        headers,
        body,
    }
}

/// A chunked body's data.
fn dechunk(mut body: &str) -> String {
    let mut data = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        let (Some(chunk), Some(after)) = (rest.get(..size), rest.get(size..)) else {
            break;
        };
        if size == 0 {
            break;
        }
        data.push_str(chunk);
        body = after.trim_start_matches("\r\n");
    }
    data
}
