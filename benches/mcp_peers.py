"""MCP-level figures (docs/benchmarks.md, M1–M5, H1, H2): `toolpool serve`
against FastMCP serving the same functions (benches/fastmcp_server.py),
driven by the same client (the official Python `mcp` package), the two
sides alternating round by round.

    target/pyvenv-test/bin/python benches/mcp_peers.py [--quick] [--json FILE]

Run by benches/peers with the rest; run it alone with nothing else running.
TOOLPOOL_BIN names the binary (default target/release/toolpool).
"""

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TOOLS = HERE / "tools"
BIN = os.environ.get("TOOLPOOL_BIN") or str(REPO / "target" / "release" / "toolpool")
PYTHON = sys.executable


def toolpool_args(session: str, *args: str) -> list:
    return ["--functions-dir", str(TOOLS), "--session-dir", session, "--workers", "4", *args]


def stdio_params(side: str, session: str, *extra: str) -> StdioServerParameters:
    if side == "toolpool":
        return StdioServerParameters(command=BIN, args=toolpool_args(session, *extra, "serve"), env={"RUST_LOG": "warn"})
    return StdioServerParameters(command=PYTHON, args=[str(HERE / "fastmcp_server.py")], env=dict(os.environ))


def p50(samples):
    return statistics.median(samples)


async def m1_start_to_listed(side: str, rounds: int) -> float:
    """Start the server as a client does and list its tools: median seconds."""
    times = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            async with Client(stdio_client(stdio_params(side, tmp + "/s"), errlog=open(os.devnull, "w"))) as client:
                await client.list_tools()
                times.append(time.perf_counter() - started)
    return p50(times)


async def serial_p50(side: str, tool: str, args: dict, calls: int) -> float:
    """Serial calls over stdio, after a warm-up: median seconds per call."""
    with tempfile.TemporaryDirectory() as tmp:
        async with Client(stdio_client(stdio_params(side, tmp + "/s"), errlog=open(os.devnull, "w"))) as client:
            for _ in range(min(20, calls)):
                await client.call_tool(tool, args)
            times = []
            for _ in range(calls):
                started = time.perf_counter()
                result = await client.call_tool(tool, args)
                times.append(time.perf_counter() - started)
                assert not result.is_error, result
    return p50(times)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    """A server of `side` on streamable HTTP, for the length of a `with`
    (`extra`: more `serve` options)."""

    def __init__(self, side: str, *extra: str, port: int | None = None):
        self.side, self.extra, self.port = side, extra, port

    def __enter__(self):
        self.tmp = tempfile.TemporaryDirectory()
        port = self.port or free_port()
        if self.side == "toolpool":
            command = [BIN, *toolpool_args(self.tmp.name + "/s"), "serve", "--http", f"127.0.0.1:{port}", *self.extra]
        else:
            command = [PYTHON, str(HERE / "fastmcp_server.py"), "--http", str(port)]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, env={**os.environ, "RUST_LOG": "warn"})
        self.url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"{self.side} did not start on port {port}")
                time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.tmp.cleanup()


async def calls_per_second(clients: list, concurrency: int, seconds: float) -> float:
    """`concurrency` loops, each calling `noop` through the clients in turn, for `seconds`."""
    done = 0
    turn = 0
    stop = time.perf_counter() + seconds

    async def loop():
        nonlocal done, turn
        while time.perf_counter() < stop:
            client = clients[turn % len(clients)]
            turn += 1
            result = await client.call_tool("noop", {})
            assert not result.is_error, result
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    return done / (time.perf_counter() - started)


async def m4_sessions(side: str, sessions: int, seconds: float) -> float:
    """Calls per second from `sessions` concurrent HTTP clients (each a session of its own)."""
    with HttpServer(side) as server:
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(Client(server.url, mode="legacy")) for _ in range(sessions)]
            await calls_per_second(clients, sessions, 1.0)  # warm-up
            return await calls_per_second(clients, sessions, seconds)


async def m5_timeout(side: str) -> tuple:
    """A CPU-bound tool under a 1 s timeout: seconds to the error, and whether it ran on after."""
    with tempfile.TemporaryDirectory() as tmp:
        beat = os.path.join(tmp, "beat")
        extra = ("--timeout", "1") if side == "toolpool" else ()
        async with Client(stdio_client(stdio_params(side, tmp + "/s", *extra), errlog=open(os.devnull, "w"))) as client:
            started = time.perf_counter()
            try:
                result = await asyncio.wait_for(client.call_tool("spin", {"seconds": 8, "beat_file": beat}), 60)
                errored = result.is_error
            except Exception:
                errored = True
            elapsed = time.perf_counter() - started
            before = Path(beat).read_text() if os.path.exists(beat) else ""
            await asyncio.sleep(0.5)
            after = Path(beat).read_text() if os.path.exists(beat) else ""
    return elapsed, errored, before != after


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
}


def raw_p50(port: int, method: str, params: dict, calls: int, nagle: bool = False, headers: str = "") -> float:
    """Serial stateless (2026-07-28) requests over one kept-alive
    connection: median seconds. `nagle`: the client leaves Nagle on (no
    TCP_NODELAY) and writes head and body apart, as many clients do;
    `headers`: more header lines."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0 if nagle else 1)
    reader = sock.makefile("rb")
    name = params.get("name", params.get("taskId", ""))
    times = []
    for i in range(calls + 20):
        body = json.dumps({"jsonrpc": "2.0", "id": i, "method": method,
                           "params": {**params, "_meta": MODERN_META}}).encode()
        head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
                f"Mcp-Method: {method}\r\nMcp-Name: {name}\r\n{headers}Content-Length: {len(body)}\r\n\r\n").encode()
        started = time.perf_counter()
        if nagle:
            sock.sendall(head)
            sock.sendall(body)  # two writes: Nagle holds the second
        else:
            sock.sendall(head + body)
        answer = read_response(reader)
        if b'"error"' in answer[:200]:
            raise RuntimeError(f"{method}: {answer[:300]!r}")
        if i >= 20:
            times.append(time.perf_counter() - started)
    sock.close()
    return p50(times)


def port_of(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


def h1_raw_keepalive(calls: int) -> float:
    """Serial tools/call from a client that leaves Nagle on: median seconds."""
    with HttpServer("toolpool") as server:
        return raw_p50(port_of(server.url), "tools/call", {"name": "noop", "arguments": {}}, calls, nagle=True)


def j1_jwt(calls: int) -> dict:
    """Serial tools/call p50, ms: unauthenticated, and with an RS256 JWT
    checked against a JWKS (`--jwks`)."""
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with tempfile.TemporaryDirectory() as tmp:
        jwks = Path(tmp) / "jwks.json"
        jwks.write_text(json.dumps({"keys": [{**RSAAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": "k1"}]}))
        now = int(time.time())
        token = jwt.encode({"iss": "https://issuer.example", "aud": "bench", "sub": "alice", "iat": now,
                            "exp": now + 3600}, key, algorithm="RS256", headers={"kid": "k1"})
        noop = {"name": "noop", "arguments": {}}
        figures = {}
        with HttpServer("toolpool") as server:
            figures["none"] = raw_p50(port_of(server.url), "tools/call", noop, calls) * 1000
        with HttpServer("toolpool", "--jwks", str(jwks), "--issuer", "https://issuer.example",
                        "--audience", "bench") as server:
            figures["jwt"] = raw_p50(port_of(server.url), "tools/call", noop, calls,
                                     headers=f"Authorization: Bearer {token}\r\n") * 1000
        return figures


def j2_routed(calls: int) -> dict:
    """tasks/get p50, ms, of a task on replica A: asked of A, and of B,
    which forwards it to A (`--cluster-secret`)."""
    with tempfile.TemporaryDirectory() as tmp:
        secret = Path(tmp) / "secret"
        secret.write_text("bench-cluster-secret-0123456789abcdef\n")
        ports = [free_port(), free_port()]
        cluster = lambda port: ("--task-after", "0.2", "--cluster-secret", str(secret), "--advertise", f"127.0.0.1:{port}")
        with HttpServer("toolpool", *cluster(ports[0]), port=ports[0]) as a, \
                HttpServer("toolpool", *cluster(ports[1]), port=ports[1]) as b:
            connection = socket.create_connection(("127.0.0.1", ports[0]))
            reader = connection.makefile("rb")
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "sleep", "arguments": {"seconds": 600}, "_meta": MODERN_META}}).encode()
            connection.sendall((f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{ports[0]}\r\nContent-Type: application/json\r\n"
                                "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
                                f"Mcp-Method: tools/call\r\nMcp-Name: sleep\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
            answer = read_response(reader).decode()
            connection.close()
            task = json.loads(next(line[5:] for line in answer.splitlines() if line.startswith("data:") and "taskId" in line)
                              if "data:" in answer else answer)["result"]["taskId"]
            get = {"taskId": task}
            return {"local": raw_p50(port_of(a.url), "tasks/get", get, calls) * 1000,
                    "forwarded": raw_p50(port_of(b.url), "tasks/get", get, calls) * 1000}


def read_response(reader) -> bytes:
    """One HTTP/1.1 response (Content-Length or chunked); its body."""
    status = reader.readline()
    if not status.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"H1: {status!r}")
    length, chunked = None, False
    while True:
        line = reader.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
        if name.lower() == "transfer-encoding" and "chunked" in value:
            chunked = True
    if length is not None:
        return reader.read(length)
    body = b""
    while chunked:
        size = int(reader.readline().split(b";")[0], 16)
        if size == 0:
            reader.readline()
            break
        body += reader.read(size)
        reader.readline()
    return body


async def h2_interleaved(isolation: str, sessions: int, seconds: float) -> float:
    """Calls per second, 16 at once, through `sessions` named sessions in turn."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    with HttpServer("toolpool", "--session-isolation", isolation) as server:
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(Client(streamable_http_client(
                server.url, http_client=create_mcp_http_client(headers={"Toolpool-Session": f"s{n}"}))))
                for n in range(sessions)]
            await calls_per_second(clients, 16, 1.0)
            return await calls_per_second(clients, 16, seconds)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    options = parser.parse_args()
    rounds = 1 if options.quick else 3
    calls = 100 if options.quick else 400
    seconds = 2.0 if options.quick else 5.0
    sides = ("toolpool", "fastmcp")
    figures = {}

    def best(values):
        return min(values)

    for name, measure in (
        ("M1 start to tools listed, s", lambda side: m1_start_to_listed(side, 3)),
        ("M2 serial no-op p50, ms", lambda side: serial_p50(side, "noop", {}, calls)),
        ("M3 records(10000) p50, ms", lambda side: serial_p50(side, "records", {"count": 10000}, calls // 10)),
        ("M4 16 HTTP sessions, calls/s", lambda side: m4_sessions(side, 16, seconds)),
    ):
        runs = {side: [] for side in sides}
        for _ in range(rounds):
            for side in sides:  # alternating
                runs[side].append(await measure(side))
        higher_is_better = "calls/s" in name
        pick = max if higher_is_better else best
        scale = 1000 if name.endswith("ms") else 1
        figures[name] = {side: pick(runs[side]) * scale for side in sides}
    for side in sides:
        elapsed, errored, ran_on = await m5_timeout(side)
        figures.setdefault("M5 1 s timeout on a CPU-bound tool: error after, s", {})[side] = elapsed
        figures.setdefault("M5 the tool still runs after the error", {})[side] = ran_on
    figures["H1 raw keep-alive, Nagle on, p50, ms"] = {"toolpool": h1_raw_keepalive(calls) * 1000}
    j1 = j1_jwt(calls)
    figures["J1 serial no-op p50, ms: unauthenticated, JWT (RS256)"] = j1
    figures["J1 JWT / unauthenticated"] = {"toolpool": j1["jwt"] / j1["none"]}
    j2 = j2_routed(calls)
    figures["J2 tasks/get p50, ms: at its replica, forwarded"] = j2
    figures["J2 added by forwarding, ms"] = {"toolpool": j2["forwarded"] - j2["local"]}
    for isolation in ("shared", "process"):
        for sessions in (1, 4, 64):
            figures.setdefault(f"H2 {sessions} sessions, calls/s", {})[isolation] = await h2_interleaved(
                isolation, sessions, seconds)

    for name, values in figures.items():
        cells = "  ".join(f"{side} {value:.2f}" if isinstance(value, float) else f"{side} {value}"
                          for side, value in values.items())
        ratio = ""
        if "toolpool" in values and "fastmcp" in values and isinstance(values["fastmcp"], float) and values["fastmcp"]:
            ratio = f"  ({values['toolpool'] / values['fastmcp']:.2f} x FastMCP)"
        print(f"{name:55} {cells}{ratio}")
    if options.json:
        Path(options.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
