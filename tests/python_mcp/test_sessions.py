"""Sessions of their own over streamable HTTP: a client's calls run in the
session of its credential (every MCP session it opens shares it) or in the
session it names, in that session's workspace, and under
`--session-isolation process` (the default for HTTP) on workers no other
session has used; idle session directories go after `--keep-sessions`. And
the health endpoints: `/healthz`, `/readyz`, which turns 503 at once on
SIGTERM while the calls in flight finish."""

import http.client
import re
import signal
import socket
import tempfile
import time
import unittest
from pathlib import Path
from urllib.parse import urlsplit

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from support import REPO, error, http_server, ok

SESSION_TOOLS = REPO / "tests" / "fixtures" / "session_tools"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, path: str) -> tuple[int, str]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def client(url: str, name: str | None = None, mode: str = "legacy", token: str | None = None):
    """A client of its own MCP session; `name`: the toolpool session it names;
    `token`: the bearer token it sends."""
    headers = {"Toolpool-Session": name} if name else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers)), mode=mode)


def counter(metrics: str, name: str) -> int:
    """toolpool_<name> from the `--metrics` listener."""
    status, body = get(f"http://{metrics}", "/metrics")
    assert status == 200, body
    return int(re.search(rf"^toolpool_{name} (\d+)$", body, re.M).group(1))


def displaced(metrics: str) -> int:
    """How often a worker gave its place to another session's call: parked
    (and resumed later by its own session) or recycled."""
    return counter(metrics, "session_recycles_total") + counter(metrics, "parked_resumes_total")


def whoami(result) -> dict:
    import json

    return json.loads(ok(result))


class OwnSessions(unittest.IsolatedAsyncioTestCase):
    async def test_two_clients_never_see_each_others_files_or_worker_memory(self):
        # Two clients apart: by session name (a server has one token, so one
        # credential; those of two clients would keep them apart the same way).
        with tempfile.TemporaryDirectory() as root:
            # One worker: the second client's call must come to the worker
            # the first one used, which is parked (or recycled) first.
            metrics = f"127.0.0.1:{free_port()}"
            args = ("--workers", "1", "serve", "--http", "127.0.0.1:0", "--sessions-root", root, "--metrics", metrics)
            async with http_server(*args, functions=SESSION_TOOLS) as (_, url):
                async with client(url, "alice") as alice, client(url, "bob") as bob:
                    self.assertEqual(ok(await alice.call_tool("remember", {"value": "alice-token-123"})), "alice-token-123")
                    self.assertEqual(ok(await bob.call_tool("recall", {})), "")
                    ok(await alice.call_tool("write_note", {"text": "alice's notes"}))
                    self.assertEqual(ok(await bob.call_tool("read_note", {})), "")
                    ok(await bob.call_tool("write_note", {"text": "bob's notes"}))
                    self.assertEqual(ok(await alice.call_tool("read_note", {})), "alice's notes")
                    self.assertEqual(ok(await bob.call_tool("read_note", {})), "bob's notes")
                    a, b = whoami(await alice.call_tool("whoami", {"tag": "a"})), whoami(await bob.call_tool("whoami", {"tag": "b"}))
                    self.assertNotEqual(a["session_id"], b["session_id"])
                    for who in (a, b):
                        # Each under the root, named by its session, and the
                        # call ran there.
                        self.assertEqual(Path(who["workspace"]), Path(root).resolve() / who["session_id"] / "code_workspace")
                        self.assertEqual(who["cwd"], who["workspace"])
                        self.assertEqual((Path(who["workspace"]) / "notes.txt").read_text(), f"{'alice' if who is a else 'bob'}'s notes")
                self.assertGreaterEqual(displaced(metrics), 5)

    async def test_mcp_sessions_of_one_credential_share_its_files(self):
        with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as tmp:
            token = "one-client-token-0123456789"
            (Path(tmp) / "token").write_text(token + "\n")
            metrics = f"127.0.0.1:{free_port()}"
            args = ("--workers", "1", "serve", "--http", "127.0.0.1:0", "--sessions-root", root,
                    "--auth-token-file", str(Path(tmp) / "token"), "--keep-sessions", "1", "--metrics", metrics)
            async with http_server(*args, functions=SESSION_TOOLS) as (_, url):
                async with client(url, token=token) as staying:
                    results = {}
                    async with anyio.create_task_group() as tg:
                        async with client(url, token=token) as leaving:
                            ok(await leaving.call_tool("write_note", {"text": "shared"}))
                            self.assertEqual(ok(await staying.call_tool("read_note", {})), "shared")
                            here = whoami(await staying.call_tool("whoami", {"tag": "s"}))
                            there = whoami(await leaving.call_tool("whoami", {"tag": "l"}))
                            self.assertEqual(here["session_id"], there["session_id"])
                            self.assertRegex(here["session_id"], r"^client-[0-9a-f]{16}$")

                            async def in_flight():
                                results["nap"] = await staying.call_tool("nap", {"seconds": 2, "tag": "finished"})

                            tg.start_soon(in_flight)
                            await anyio.sleep(0.5)
                        # `leaving` sent DELETE: its calls are cancelled, not
                        # those of the other MCP session of its credential.
                    self.assertEqual(ok(results["nap"]), "finished")
                    # Idle past --keep-sessions (1 s), the session is kept
                    # while an MCP session of it is open.
                    await anyio.sleep(3)
                    self.assertEqual(ok(await staying.call_tool("read_note", {})), "shared")
                # One directory for the credential, none per MCP session; one
                # toolpool session, so its worker was never displaced for it.
                self.assertEqual([p.name for p in Path(root).iterdir()], [here["session_id"]])
                self.assertEqual(displaced(metrics), 0)

    async def test_shared_isolation_shares_worker_memory_but_not_files(self):
        with tempfile.TemporaryDirectory() as root:
            args = ("--workers", "1", "serve", "--http", "127.0.0.1:0", "--sessions-root", root, "--session-isolation", "shared")
            async with http_server(*args, functions=SESSION_TOOLS) as (_, url):
                async with client(url, "alice") as alice, client(url, "bob") as bob:
                    ok(await alice.call_tool("remember", {"value": "alice-token-123"}))
                    # What `shared` means: the one worker kept its globals.
                    self.assertEqual(ok(await bob.call_tool("recall", {})), "alice-token-123")
                    ok(await alice.call_tool("write_note", {"text": "alice's notes"}))
                    self.assertEqual(ok(await bob.call_tool("read_note", {})), "")

    async def test_a_named_session_comes_back_to_its_files(self):
        with tempfile.TemporaryDirectory() as root:
            args = ("--workers", "1", "serve", "--http", "127.0.0.1:0", "--sessions-root", root)
            async with http_server(*args, functions=SESSION_TOOLS) as (_, url):
                async with client(url, "project-7") as first:
                    ok(await first.call_tool("write_note", {"text": "kept"}))
                # A new MCP session, in either protocol version, same name.
                for mode in ("legacy", "auto"):
                    async with client(url, "project-7", mode) as again:
                        self.assertEqual(ok(await again.call_tool("read_note", {})), "kept")
                        self.assertEqual(whoami(await again.call_tool("whoami", {"tag": "x"}))["session_id"], "project-7")
                # Requests naming no session, in either protocol version: on
                # a server without tokens, the one session `anonymous`, kept
                # across calls and clients.
                async with client(url, mode="auto") as anonymous:
                    self.assertEqual(ok(await anonymous.call_tool("read_note", {})), "")
                    ok(await anonymous.call_tool("write_note", {"text": "kept by default"}))
                for mode in ("legacy", "auto"):
                    async with client(url, mode=mode) as later:
                        self.assertEqual(ok(await later.call_tool("read_note", {})), "kept by default")
                self.assertEqual(sorted(p.name for p in Path(root).iterdir()), ["anonymous", "project-7"])
                self.assertTrue((Path(root) / "project-7" / ".toolpool-session").is_file())
                for bad, why in (("../etc", "must not start with '.'"), ("a/b", "'/'"), ("x" * 200, "1 to 128")):
                    async with client(url, bad) as hostile:
                        with self.assertRaises(Exception) as caught:
                            await hostile.call_tool("read_note", {})
                        self.assertIn(why, str(caught.exception))
                self.assertEqual(sorted(p.name for p in Path(root).iterdir()), ["anonymous", "project-7"])

    async def test_idle_session_directories_are_removed_after_keep_sessions(self):
        with tempfile.TemporaryDirectory() as root:
            # A project folder under the root, and one that only looks like
            # a session: toolpool made neither, so neither is adopted or swept.
            precious = Path(root) / "precious"
            precious.mkdir()
            (precious / "notes.txt").write_text("mine")
            (Path(root) / "lookalike" / "code_workspace").mkdir(parents=True)
            args = ("--workers", "1", "serve", "--http", "127.0.0.1:0", "--sessions-root", root, "--keep-sessions", "1")
            async with http_server(*args, functions=SESSION_TOOLS) as (_, url):
                async with client(url, "precious") as intruder:
                    with self.assertRaises(Exception) as caught:
                        await intruder.call_tool("write_note", {"text": "adopted"})
                    self.assertIn("session 'precious' is not a toolpool session", str(caught.exception))
                async with client(url, "short-lived") as c:
                    ok(await c.call_tool("write_note", {"text": "soon gone"}))
                directory = Path(root) / "short-lived"
                deadline = time.monotonic() + 30
                while directory.exists():
                    self.assertLess(time.monotonic(), deadline, "the idle session directory was never removed")
                    await anyio.sleep(0.2)
                self.assertEqual(sorted(p.name for p in precious.iterdir()), ["notes.txt"])
                self.assertTrue((Path(root) / "lookalike" / "code_workspace").is_dir())
                # A session still open is kept, however idle.
                async with client(url) as held:
                    sid = whoami(await held.call_tool("whoami", {"tag": "x"}))["session_id"]
                    await anyio.sleep(4)
                    self.assertTrue((Path(root) / sid / "code_workspace").is_dir())
                    self.assertEqual(ok(await held.call_tool("read_note", {})), "")


class Health(unittest.IsolatedAsyncioTestCase):
    async def test_healthz_readyz_and_the_drain_on_sigterm(self):
        with tempfile.TemporaryDirectory() as root:
            args = ("--workers", "2", "serve", "--http", "127.0.0.1:0", "--sessions-root", root, "--grace", "30")
            async with http_server(*args, functions=SESSION_TOOLS) as (process, url):
                self.assertEqual(get(url, "/healthz"), (200, "ok\n"))
                self.assertEqual(get(url, "/readyz"), (200, "ready\n"))
                async with client(url) as busy:
                    # The client lists the tools after its first call (for
                    # their output schemas): before the drain, here.
                    await busy.list_tools()
                    async with anyio.create_task_group() as tg:
                        results = {}

                        async def in_flight():
                            results["nap"] = await busy.call_tool("nap", {"seconds": 8, "tag": "finished"})

                        tg.start_soon(in_flight)
                        await anyio.sleep(1)
                        process.send_signal(signal.SIGTERM)
                        deadline = time.monotonic() + 5
                        while get(url, "/readyz")[0] != 503:
                            self.assertLess(time.monotonic(), deadline, "readyz did not turn 503 on SIGTERM")
                            await anyio.sleep(0.05)
                        # 503 while the call still runs.
                        self.assertNotIn("nap", results)
                        status, body = get(url, "/readyz")
                        self.assertIn("draining", body)
                        self.assertEqual(get(url, "/healthz")[0], 200)
                        # No new session while it drains.
                        with self.assertRaises(Exception):
                            async with client(url) as late:
                                await late.call_tool("recall", {})
                    self.assertEqual(ok(results["nap"]), "finished")
                code = await anyio.to_thread.run_sync(lambda: process.wait(timeout=30))
                self.assertEqual(code, 0)


if __name__ == "__main__":
    unittest.main()
