//! `toolpool serve --http` over tests/fixtures/results: what one result
//! costs the server over streamable HTTP, read from its /proc status (VmHWM
//! reset through `clear_refs` before each call). rmcp encodes each message
//! whole into its event; a large text goes out as a stand-in, spliced back
//! into the body 64 KiB at a time as the client reads it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

use crate::results::{costs_at_most_four_times, delivered_whole, peak_rise};

struct Server {
    child: Child,
    port: u16,
    _session: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let session = tempfile::tempdir().unwrap();
        let functions = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/results");
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolpool"))
            .arg("--session-dir")
            .arg(session.path().join("default"))
            .args(["--workers", "1", "--functions-dir", functions])
            .args(["serve", "--http", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let port = loop {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "no HTTP server");
            if let Some(at) = line.find("serving MCP (streamable HTTP) at http://127.0.0.1:") {
                let rest = &line[at + "serving MCP (streamable HTTP) at http://127.0.0.1:".len()..];
                break rest.split('/').next().unwrap().parse().unwrap();
            }
        };
        // The log goes on being read, so the server never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        Server {
            child,
            port,
            _session: session,
        }
    }

    /// A 2026-07-28 `tools/call`: its answer (from the JSON body or the SSE
    /// event), and how many bytes the server's peak resident memory rose
    /// above what it held before the call.
    fn call(&mut self, tool: &str, character: &str, megabytes: u64) -> (Value, u64) {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": tool, "arguments": {"character": character, "megabytes": megabytes},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientInfo": {"name": "results", "version": "0"},
                      "io.modelcontextprotocol/clientCapabilities": {}}}})
        .to_string();
        let port = self.port;
        let (response, rise) = peak_rise(self.child.id(), || {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            // HTTP/1.0: the body runs to the connection's end, unchunked.
            write!(
                stream,
                "POST /mcp HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: tools/call\r\nMcp-Name: {tool}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let mut response = Vec::new();
            stream.read_to_end(&mut response).unwrap();
            response
        });
        let text = String::from_utf8(response).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.0 200"), "{head}");
        let json = match body.trim_start().starts_with('{') {
            true => body.to_string(),
            false => body
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(str::trim)
                .find(|data| data.contains("\"id\":1"))
                .unwrap()
                .to_string(),
        };
        (serde_json::from_str(&json).unwrap(), rise)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Results that fit, each delivered whole for at most 4 × its size: a
/// large text is held once and escaped into the body as it is sent.
#[test]
fn results_cost_at_most_four_times_their_size_over_http() {
    let mut server = Server::start();
    costs_at_most_four_times(|tool, character, megabytes| server.call(tool, character, megabytes));
}

/// 40 MB of letters, untyped: delivered whole for at most 4 × its size.
#[test]
fn a_large_result_is_delivered_at_most_four_times_its_size_over_http() {
    let mut server = Server::start();
    server.call("text_untyped", "x", 1);
    let n = 40_000_000;
    let (answer, rise) = server.call("text_untyped", "a", n / 1_000_000);
    delivered_whole(&answer, rise, 'a', n, false);
}
