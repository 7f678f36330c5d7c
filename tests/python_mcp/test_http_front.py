"""The streamable HTTP front end as a hostile or careless client meets it:
Host and Origin checks, bearer tokens, session and connection caps, idle
sessions, half-open connections, the body limit, and DELETE of a session
whose call is running. Raw requests go through http.client and raw sockets;
the sessions through the official `mcp` client."""

import contextlib
import http.client
import json
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from urllib.parse import urlsplit

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from support import BIN, alive, asking_tools, base_args, gone_within, http_server, ok, read_pid_file, started_with

TOKEN = "test-token-0123456789abcdef"

INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
).encode()

MCP_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
}


def request(url, method="POST", body=INITIALIZE, headers=None, host=None):
    """One request on its own connection: (status, headers, body text)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.putrequest(method, parts.path, skip_host=host is not None, skip_accept_encoding=True)
        if host is not None:
            connection.putheader("Host", host)
        all_headers = dict(MCP_HEADERS)
        all_headers.update(headers or {})
        for name, value in all_headers.items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(body or b"")))
        connection.endheaders(body or b"")
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode("utf-8", "replace")
    finally:
        connection.close()


def state_of(pid: int) -> str:
    """The process's state letter in /proc (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def session_id(headers) -> str:
    for name, value in headers.items():
        if name.lower() == "mcp-session-id":
            return value
    raise AssertionError(f"no session id in {headers}")


def open_session(url: str, capabilities: dict | None = None) -> str:
    """A raw MCP session (2025-06-18) with the client `capabilities`,
    initialized: its id."""
    initialize = json.loads(INITIALIZE)
    initialize["params"]["capabilities"] = capabilities or {}
    status, headers, body = request(url, body=json.dumps(initialize).encode())
    assert status == 200, body
    sid = session_id(headers)
    initialized = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    assert request(url, body=initialized, headers={"Mcp-Session-Id": sid})[0] == 202
    return sid


def tool_call(name: str, arguments: dict) -> bytes:
    """The body of a `tools/call` request (id 2)."""
    return json.dumps(
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    ).encode()


async def call(url, tool, args, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            return await client.call_tool(tool, args)


def run(*args, env=None):
    with tempfile.TemporaryDirectory() as tmp:
        return subprocess.run(
            [BIN, *base_args(str(Path(tmp) / "session"), *args)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **(env or {})},
        )


class HostAndOrigin(unittest.IsolatedAsyncioTestCase):
    async def test_foreign_origins_and_hosts_are_refused_loopback_ones_served(self):
        async with http_server(
            "--workers", "1", "serve", "--http", "127.0.0.1:0", "--allow-origin", "https://app.example.com"
        ) as (_, url):
            port = urlsplit(url).port
            status, _, body = request(url, headers={"Origin": "http://evil.example"})
            self.assertEqual(status, 403, body)
            self.assertIn("Origin 'http://evil.example' is not allowed", body)
            # DNS rebinding: the attacker's name in Host and Origin.
            status, _, body = request(
                url, host=f"attacker.example:{port}", headers={"Origin": f"http://attacker.example:{port}"}
            )
            self.assertEqual(status, 403, body)
            self.assertIn("Host 'attacker.example", body)
            status, _, body = request(url, headers={"Origin": "null"})
            self.assertEqual(status, 403, body)
            for origin in (f"http://localhost:{port}", f"http://127.0.0.1:{port}", "https://app.example.com"):
                status, headers, body = request(url, headers={"Origin": origin})
                self.assertEqual(status, 200, f"{origin}: {body}")
                self.assertIn('"serverInfo"', body)
                request(url, "DELETE", b"", headers={"Mcp-Session-Id": session_id(headers)})
            # A tools/call from a foreign origin never reaches the tools.
            status, headers, _ = request(url)
            sid = session_id(headers)
            call_body = json.dumps(
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1, "b": 2}}}
            ).encode()
            status, _, body = request(url, body=call_body, headers={"Mcp-Session-Id": sid, "Origin": "http://evil.example"})
            self.assertEqual(status, 403, body)

    async def test_two_hosts_two_origins_or_a_foreign_target_are_refused(self):
        async with http_server("--workers", "1", "serve", "--http", "127.0.0.1:0") as (_, url):
            parts = urlsplit(url)
            good = f"127.0.0.1:{parts.port}"

            def raw(head: str) -> str:
                with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
                    body = INITIALIZE.decode()
                    sock.sendall(
                        (head + "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}").encode()
                    )
                    reply = b""
                    while chunk := sock.recv(65536):
                        reply += chunk
                    return reply.decode("utf-8", "replace")

            # The check must not read only the first of two headers.
            for head, why in (
                (f"POST /mcp HTTP/1.1\r\nHost: {good}\r\nHost: attacker.example\r\n", "2 host headers"),
                (f"POST /mcp HTTP/1.1\r\nHost: {good}\r\nOrigin: http://{good}\r\nOrigin: http://attacker.example\r\n", "2 origin headers"),
                (f"POST http://attacker.example:{parts.port}/mcp HTTP/1.1\r\nHost: {good}\r\n", "the request target names 'attacker.example"),
            ):
                reply = raw(head)
                self.assertTrue(reply.startswith("HTTP/1.1 403"), reply)
                self.assertIn(why, reply)
            # The same requests with one of each are served.
            self.assertTrue(raw(f"POST /mcp HTTP/1.1\r\nHost: {good}\r\nOrigin: http://{good}\r\n").startswith("HTTP/1.1 200"))
            self.assertTrue(raw(f"POST http://{good}/mcp HTTP/1.1\r\nHost: {good}\r\n").startswith("HTTP/1.1 200"))

    async def test_a_public_bind_checks_host_too(self):
        async with http_server(
            "--workers", "1", "serve", "--http", "0.0.0.0:0", "--no-auth", "--allow-host", "mcp.example.com"
        ) as (_, url):
            url = url.replace("0.0.0.0", "127.0.0.1")
            port = urlsplit(url).port
            status, _, body = request(url, host=f"attacker.example:{port}")
            self.assertEqual(status, 403, body)
            for host in (f"127.0.0.1:{port}", "mcp.example.com", f"mcp.example.com:{port}"):
                status, _, body = request(url, host=host)
                self.assertEqual(status, 200, f"{host}: {body}")


class Tokens(unittest.IsolatedAsyncioTestCase):
    async def test_a_public_bind_needs_a_token_unless_no_auth(self):
        result = run("--workers", "1", "serve", "--http", "0.0.0.0:0")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("is not a loopback address", result.stderr)
        self.assertIn("--no-auth", result.stderr)
        result = run("--workers", "1", "serve", "--http", "0.0.0.0:0", env={"TOOLPOOL_AUTH_TOKEN": "short"})
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("at least 16 characters", result.stderr)

    async def test_every_request_needs_the_bearer_token(self):
        with tempfile.TemporaryDirectory() as tmp:
            token_file = Path(tmp) / "token"
            token_file.write_text(TOKEN + "\n")
            async with http_server(
                "--workers", "1", "serve", "--http", "0.0.0.0:0", "--auth-token-file", str(token_file)
            ) as (_, url):
                url = url.replace("0.0.0.0", "127.0.0.1")
                status, headers, body = request(url)
                self.assertEqual(status, 401, body)
                self.assertEqual(headers.get("www-authenticate"), 'Bearer realm="toolpool"')
                status, headers, body = request(url, headers={"Authorization": "Bearer " + TOKEN[:-1] + "x"})
                self.assertEqual(status, 401, body)
                self.assertIn('error="invalid_token"', headers.get("www-authenticate"))
                status, headers, body = request(url, headers={"Authorization": "Basic " + TOKEN})
                self.assertEqual(status, 401, body)
                self.assertEqual(ok(await call(url, "add", {"a": 2, "b": 3}, token=TOKEN)), "5")

    async def test_the_token_from_the_environment(self):
        with tempfile.TemporaryDirectory() as tmp:
            process = subprocess.Popen(
                [BIN, *base_args(str(Path(tmp) / "s"), "--workers", "1", "serve", "--http", "127.0.0.1:0")],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env={**os.environ, "TOOLPOOL_AUTH_TOKEN": TOKEN},
            )
            try:
                line = process.stderr.readline().decode()
                while "serving MCP" not in line:
                    self.assertTrue(line, "the server ended before listening")
                    line = process.stderr.readline().decode()
                url = line.split(" at ", 1)[1].strip()
                self.assertEqual(request(url)[0], 401)
                self.assertEqual(ok(await call(url, "add", {"a": 1, "b": 1}, token=TOKEN)), "2")
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
                process.stderr.close()


class Sessions(unittest.IsolatedAsyncioTestCase):
    async def test_the_session_cap_answers_503_until_one_closes(self):
        async with http_server("--workers", "1", "serve", "--http", "127.0.0.1:0", "--max-sessions", "2") as (_, url):
            ids = []
            for _ in range(2):
                status, headers, body = request(url)
                self.assertEqual(status, 200, body)
                ids.append(session_id(headers))
            status, _, body = request(url)
            self.assertEqual(status, 503, body)
            self.assertIn("at most 2", body)
            self.assertIn("--max-sessions", body)
            status, _, body = request(url, "DELETE", b"", headers={"Mcp-Session-Id": ids[0]})
            self.assertEqual(status, 200, body)
            status, _, body = request(url)
            self.assertEqual(status, 200, body)

    async def test_idle_sessions_end(self):
        async with http_server("--workers", "1", "serve", "--http", "127.0.0.1:0", "--session-idle", "1", "--max-sessions", "3") as (_, url):
            ids = []
            for _ in range(3):
                status, headers, _ = request(url)
                ids.append(session_id(headers))
            self.assertEqual(request(url)[0], 503)
            deadline = time.monotonic() + 30
            while request(url)[0] == 503:
                self.assertLess(time.monotonic(), deadline, "idle sessions never ended")
                await anyio.sleep(0.5)
            ping = json.dumps({"jsonrpc": "2.0", "id": 5, "method": "ping"}).encode()
            status, _, body = request(url, body=ping, headers={"Mcp-Session-Id": ids[0]})
            self.assertEqual(status, 404, body)

    async def test_delete_cancels_the_sessions_running_call(self):
        async with http_server("--workers", "1", "--timeout", "600", "serve", "--http", "127.0.0.1:0") as (_, url):
            sid = open_session(url)
            with tempfile.TemporaryDirectory() as tmp:
                pid_file = Path(tmp) / "grandchild.pid"
                call_body = tool_call("spawn_grandchild", {"pid_file": str(pid_file)})
                async with anyio.create_task_group() as tg:
                    # The call's response stream stays open while it runs; it
                    # ends when the session goes.
                    tg.start_soon(
                        anyio.to_thread.run_sync,
                        lambda: request(url, body=call_body, headers={"Mcp-Session-Id": sid}),
                    )
                    grandchild = await read_pid_file(pid_file)
                    self.assertTrue(alive(grandchild))
                    status, _, body = request(url, "DELETE", b"", headers={"Mcp-Session-Id": sid})
                    self.assertEqual(status, 200, body)
                    self.assertTrue(await gone_within(grandchild, 3), "the call's worker tree outlived the DELETE")
            # The pool's one worker was replaced: the next call runs.
            self.assertEqual(ok(await call(url, "add", {"a": 1, "b": 2})), "3")

    async def test_delete_cancels_a_call_waiting_for_its_human(self):
        """A 2025-11-25 call whose tool asks a human: the elicitation request
        is open on the session's stream, the worker stopped. DELETE kills the
        worker and what it started, as for a running call. (2026-07-28 has no
        sessions: a DELETE naming it is refused and cancels nothing; its
        suspended calls end at the human timeout, its tasks by tasks/cancel.)"""
        with tempfile.TemporaryDirectory() as tmp:
            async with http_server("--workers", "1", "--timeout", "600", "serve", "--http", "127.0.0.1:0",
                                   functions=asking_tools(tmp)) as (_, url):
                sid = open_session(url, {"elicitation": {}})
                marker = "toolpool-delete-while-asking"
                call_body = tool_call("spawn_then_ask", {"marker": marker})
                async with anyio.create_task_group() as tg:
                    tg.start_soon(
                        anyio.to_thread.run_sync,
                        lambda: request(url, body=call_body, headers={"Mcp-Session-Id": sid}),
                    )
                    grandchild = await started_with(marker)
                    # Asking: the tool's processes are stopped while it waits.
                    with anyio.fail_after(10):
                        while state_of(grandchild) != "T":
                            await anyio.sleep(0.05)
                    # A DELETE that names 2026-07-28 is not one of a session.
                    modern = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2026-07-28"}
                    status, _, body = request(url, "DELETE", b"", headers=modern)
                    self.assertEqual(status, 405, body)
                    await anyio.sleep(0.5)
                    self.assertTrue(alive(grandchild), "a refused DELETE cancelled the call")
                    status, _, body = request(url, "DELETE", b"", headers={"Mcp-Session-Id": sid})
                    self.assertEqual(status, 200, body)
                    self.assertTrue(await gone_within(grandchild, 10), "the call's worker tree outlived the DELETE")
                self.assertEqual(ok(await call(url, "add", {"a": 1, "b": 2})), "3")

    async def test_the_official_client_closes_its_session_without_an_error(self):
        async with http_server("--workers", "1", "serve", "--http", "127.0.0.1:0") as (_, url):
            with self.assertNoLogs("mcp.client.streamable_http", level="WARNING"):
                self.assertEqual(ok(await call(url, "add", {"a": 2, "b": 2})), "4")


MEGABYTES = 16


def start_slow_answer(url: str) -> tuple[socket.socket, http.client.HTTPResponse, bytes]:
    """A session's call for a 16 MB answer, on a socket with a 64 KiB receive
    window that is read only up to the answer's first bytes: (the socket,
    its response, what was read)."""
    sid = open_session(url)
    parts = urlsplit(url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.settimeout(60)
    sock.connect((parts.hostname, parts.port))
    body = tool_call("huge_result", {"megabytes": MEGABYTES})
    head = f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nMcp-Session-Id: {sid}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in MCP_HEADERS.items())
    sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    response = http.client.HTTPResponse(sock)
    response.begin()
    assert response.status == 200, response.status
    received = b""
    while b"xxxx" not in received:
        received += response.read(4096)
    return sock, response, received


class Drain(unittest.IsolatedAsyncioTestCase):
    async def test_an_answer_read_slowly_is_sent_whole_before_the_server_exits(self):
        """SIGTERM while an answer is still on its way: its client reads it
        slowly (a 16 MB answer through a 64 KiB receive window). The server
        keeps the connection until the answer is sent, within the grace, and
        only then ends the sessions and exits."""
        async with http_server("--workers", "1", "serve", "--http", "127.0.0.1:0", "--grace", "60") as (process, url):
            sock, response, received = await anyio.to_thread.run_sync(start_slow_answer, url)
            process.send_signal(signal.SIGTERM)
            # With no call in flight the drain itself is over at once; the
            # answer holds the server (it used to exit 2 s later, the answer cut).
            with self.assertRaises(subprocess.TimeoutExpired):
                await anyio.to_thread.run_sync(lambda: process.wait(timeout=5))
            received += await anyio.to_thread.run_sync(response.read)
            answers = [
                json.loads(line[len(b"data:"):])
                for line in received.split(b"\n")
                if line.startswith(b"data:") and line[len(b"data:"):].strip()
            ]
            self.assertEqual([answer["id"] for answer in answers], [2])
            self.assertEqual(answers[0]["result"]["content"][0]["text"], "x" * (MEGABYTES * 1024 * 1024))
            sock.close()
            code = await anyio.to_thread.run_sync(lambda: process.wait(timeout=30))
            self.assertEqual(code, 0)

    async def test_a_second_sigterm_ends_the_wait_for_a_slow_reader(self):
        """The wait for answers still being sent ends at a second SIGTERM, as
        the drain does: the server exits long before its grace is over."""
        async with http_server("--workers", "1", "serve", "--http", "127.0.0.1:0", "--grace", "600") as (process, url):
            sock, _, _ = await anyio.to_thread.run_sync(start_slow_answer, url)
            process.send_signal(signal.SIGTERM)
            with self.assertRaises(subprocess.TimeoutExpired):
                await anyio.to_thread.run_sync(lambda: process.wait(timeout=2))
            process.send_signal(signal.SIGTERM)
            code = await anyio.to_thread.run_sync(lambda: process.wait(timeout=60))
            self.assertEqual(code, 0)
            sock.close()


def connections_sending(url: str, count: int, first: bytes) -> list:
    """`count` connections to the server of `url`, each having sent `first`."""
    parts = urlsplit(url)
    socks = []
    for _ in range(count):
        sock = socket.create_connection((parts.hostname, parts.port), timeout=60)
        sock.sendall(first)
        socks.append(sock)
    return socks


class Connections(unittest.IsolatedAsyncioTestCase):
    async def test_half_open_connections_are_closed_and_capped(self):
        async with http_server("--workers", "1", "serve", "--http", "127.0.0.1:0", "--max-connections", "4") as (_, url):
            parts = urlsplit(url)
            stalled = connections_sending(url, 4, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
            await anyio.sleep(0.5)
            # Over the cap: answered 503 and closed.
            extra = socket.create_connection((parts.hostname, parts.port), timeout=30)
            reply = extra.recv(4096).decode()
            self.assertTrue(reply.startswith("HTTP/1.1 503"), reply)
            self.assertIn("--max-connections", reply)
            extra.close()
            # The stalled ones are closed by the header timeout (10 s).
            started = time.monotonic()
            for sock in stalled:
                self.assertEqual(await anyio.to_thread.run_sync(sock.recv, 4096), b"")
                sock.close()
            self.assertLess(time.monotonic() - started, 45)
            # With them gone, requests are served again.
            self.assertEqual(request(url)[0], 200)

    async def test_bodies_sent_a_byte_at_a_time_are_cut_off(self):
        # Every connection the server keeps sends a whole header and then
        # trickles its body: they are answered 408 and closed, and the
        # server serves again, as with half-sent headers.
        async with http_server("--workers", "1", "serve", "--http", "127.0.0.1:0", "--max-connections", "4") as (_, url):
            trickling = connections_sending(
                url,
                4,
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Accept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{",
            )
            started = time.monotonic()

            def trickle_until_answered(sock) -> bytes:
                sock.settimeout(1)
                while time.monotonic() - started < 60:
                    try:
                        reply = sock.recv(4096)
                        return reply
                    except TimeoutError:
                        try:
                            sock.sendall(b" ")
                        except OSError:
                            return b""
                return b"never answered"

            for sock in trickling:
                reply = (await anyio.to_thread.run_sync(trickle_until_answered, sock)).decode()
                self.assertTrue(reply.startswith("HTTP/1.1 408"), reply)
                self.assertIn("the request body came too slowly", reply)
                sock.close()
            self.assertLess(time.monotonic() - started, 45)
            self.assertEqual(request(url)[0], 200)

    async def test_a_body_over_the_frame_limit_is_refused(self):
        async with http_server("--workers", "1", "serve", "--http", "127.0.0.1:0") as (_, url):
            # Refused on its Content-Length, before the body is sent.
            parts = urlsplit(url)
            with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
                sock.sendall(
                    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    b"Accept: application/json, text/event-stream\r\n"
                    + f"Content-Length: {64 * 1024 * 1024 + 1}\r\n\r\n".encode()
                    + b" " * 1024
                )
                reply = sock.recv(4096).decode()
            self.assertTrue(reply.startswith("HTTP/1.1 413"), reply)
            self.assertIn("the request body is over 67108864 bytes", reply)
            # Without one (chunked), refused once it passes the limit.
            parts_sent = [b" " * (1024 * 1024)] * 65
            connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
            try:
                connection.putrequest("POST", "/mcp")
                for name, value in MCP_HEADERS.items():
                    connection.putheader(name, value)
                connection.putheader("Transfer-Encoding", "chunked")
                connection.endheaders()
                for piece in parts_sent:
                    try:
                        connection.send(b"%x\r\n%s\r\n" % (len(piece), piece))
                    except OSError:
                        break  # refused while sending: the answer is waiting
                response = connection.getresponse()
                self.assertEqual(response.status, 413, response.read())
            finally:
                connection.close()
            status, _, body = request(url, body=INITIALIZE + b" " * (1024 * 1024))
            self.assertEqual(status, 200, body)
            # Small enough, but more values than the server parses: 413 before any parse.
            zeros = b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add","arguments":{"a":[' + b",".join([b"0"] * 2_100_000) + b"]}}}"
            status, _, body = request(url, body=zeros)
            self.assertEqual(status, 413, body)
            self.assertIn("at most 2000000 are taken", body)


if __name__ == "__main__":
    unittest.main()
