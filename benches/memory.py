"""The supervisor's memory against what clients and tools send (issue 26, 3).

Starts `toolpool serve --http` on benches/tools and reports its resident
memory: the peak (VmHWM) while one request carries a 57 MiB argument (one
string; then 30 M zeros, which is refused before it is parsed), while a tool
returns [0] * 10 000 000, and the resident memory a minute after.

    python3 benches/memory.py [path/to/toolpool]   # default target/release/toolpool
"""

import http.client
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BINARY = sys.argv[1] if len(sys.argv) > 1 else str(REPO / "target" / "release" / "toolpool")


def status(pid: int, field: str) -> float:
    """A /proc/<pid>/status memory field, in MiB."""
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", text, re.M).group(1)) / 1024


def post(port: int, body: bytes, headers: dict) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    connection.request("POST", "/mcp", body, headers)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, data


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [BINARY, "--workers", "1", "--functions-dir", str(REPO / "benches" / "tools"),
             "--session-dir", f"{tmp}/session", "serve", "--http", "127.0.0.1:0", "--sessions-root", f"{tmp}/sessions"],
            stderr=subprocess.PIPE, text=True,
        )
        port = None
        for line in server.stderr:
            found = re.search(r"http://127\.0\.0\.1:(\d+)/mcp", line)
            if found:
                port = int(found.group(1))
                break
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": "2025-06-18", "Toolpool-Session": "memory"}
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "m", "version": "0"}}}
        connection = http.client.HTTPConnection("127.0.0.1", port)
        connection.request("POST", "/mcp", json.dumps(init), headers)
        response = connection.getresponse()
        headers["Mcp-Session-Id"] = response.getheader("mcp-session-id")
        response.read()
        post(port, json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode(), headers)
        print(f"idle: {status(server.pid, 'VmRSS'):.0f} MiB")

        def call(name: str, arguments_json: bytes) -> None:
            body = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"' + name.encode() + b'","arguments":' + arguments_json + b"}}"
            started = time.monotonic()
            code, answer = post(port, body, headers)
            print(f"{name} ({len(body) / 2**20:.0f} MiB body): HTTP {code}, {len(answer) / 2**20:.1f} MiB answer, "
                  f"{time.monotonic() - started:.1f} s; peak so far {status(server.pid, 'VmHWM'):.0f} MiB, "
                  f"now {status(server.pid, 'VmRSS'):.0f} MiB; {answer[:160]!r}")

        call("take_text", b'{"text":"' + b"x" * (57 * 2**20) + b'"}')
        call("take_text", b'{"text":[' + b",".join([b"0"] * 30_000_000) + b"]}")
        call("zeros", b'{"count":10000000}')
        # Results (issue 42, 4): 60 MB of letters is 120 MB as text and
        # structuredContent, past the 64 MiB frame limit; 30 MB fits; 60 MB of
        # U+0001 would be 720 MB. Each is refused or sent without being held
        # more than once.
        call("text_of", b'{"character":"a","megabytes":30}')
        call("text_of", b'{"character":"a","megabytes":60}')
        call("text_of", b'{"character":"\\u0001","megabytes":60}')
        time.sleep(60)
        print(f"a minute after: {status(server.pid, 'VmRSS'):.0f} MiB (peak {status(server.pid, 'VmHWM'):.0f} MiB)")
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
