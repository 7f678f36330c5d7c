"""A deployment shared by many users (`--auth-tokens FILE`): a request's
token names its tenant, and a tenant's sessions are its own — the same
session name in two tenants is two sessions, in two directories under
`tenants/`, on two sets of workers; a tenant cannot reach another's by any
name. The file is re-read on SIGHUP, and a bad file keeps the tokens in
force."""

import contextlib
import http.client
import json
import os
import signal
import subprocess
import tempfile
import unittest
from pathlib import Path
from urllib.parse import urlsplit

import anyio

from support import BIN, base_args, http_server, ok
from test_sessions import SESSION_TOOLS, client, free_port, get, whoami
from test_tasks import HttpServer, meta, wait_for

ALICE = "alice-token-0123456789abcdef"
ALICE_NEW = "alice-rotated-0123456789abcd"
BOB = "bob-token-0123456789abcdefgh"


def status_of(url: str, token: str | None) -> tuple[int, str]:
    """The status of an `initialize` sent with `token`, and the body."""
    return status_with(url, {"Authorization": f"Bearer {token}"} if token else {})


def status_with(url: str, extra: dict) -> tuple[int, str]:
    """The status of an `initialize` sent with the `extra` headers, and the body."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}).encode()
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **extra}
    try:
        connection.request("POST", parts.path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        connection.close()


async def until(check, seconds: float = 10.0):
    """Waits until `check()` is true (the server re-reads its file on SIGHUP)."""
    deadline = anyio.current_time() + seconds
    while not check():
        if anyio.current_time() > deadline:
            raise AssertionError("not within the time")
        await anyio.sleep(0.05)


@contextlib.asynccontextmanager
async def tenant_server(*options: str, workers: str = "1"):
    """`serve --http` with `--auth-tokens` for alice and bob, over the
    session tools; yields (url, sessions root)."""
    with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as tmp:
        tokens = Path(tmp) / "tokens"
        tokens.write_text(f"# the team\nalice {ALICE}\nbob {BOB}  # ops\n")
        args = ("--workers", workers, "serve", "--http", "127.0.0.1:0", "--sessions-root", root,
                "--auth-tokens", str(tokens), *options)
        async with http_server(*args, functions=SESSION_TOOLS) as (_, url):
            yield url, root


class Tenants(unittest.IsolatedAsyncioTestCase):
    async def test_each_tenant_has_its_own_sessions_files_and_workers(self):
        metrics = f"127.0.0.1:{free_port()}"
        async with tenant_server("--metrics", metrics) as (url, root):
            self.assertEqual(status_of(url, None)[0], 401)
            self.assertEqual(status_of(url, "carol-token-0123456789abcd")[0], 401)
            # The same session name, and no name at all, in each tenant.
            for name in ("shared-name", None):
                async with client(url, name, token=ALICE) as alice, client(url, name, token=BOB) as bob:
                    ok(await alice.call_tool("remember", {"value": "alice-secret"}))
                    self.assertEqual(ok(await bob.call_tool("recall", {})), "")
                    ok(await alice.call_tool("write_note", {"text": "alice's notes"}))
                    self.assertEqual(ok(await bob.call_tool("read_note", {})), "")
                    a = whoami(await alice.call_tool("whoami", {"tag": "a"}))
                    b = whoami(await bob.call_tool("whoami", {"tag": "b"}))
                    expected = name or "default"
                    self.assertEqual((a["session_id"], b["session_id"]), (f"alice~{expected}", f"bob~{expected}"))
                    tenants = Path(root).resolve() / "tenants"
                    self.assertEqual(Path(a["workspace"]), tenants / "alice" / expected / "code_workspace")
                    self.assertEqual(Path(b["workspace"]), tenants / "bob" / expected / "code_workspace")
            # A name cannot reach out of the tenant: the separator and a
            # path are not names.
            for other in ("bob~shared-name", "../bob/shared-name"):
                async with client(url, other, token=ALICE) as alice:
                    with self.assertRaisesRegex(Exception, "session name"):
                        await alice.call_tool("read_note", {})
            # A name like any other: alice's own session.
            async with client(url, "tenants", token=ALICE) as alice:
                self.assertEqual(ok(await alice.call_tool("read_note", {})), "")
            self.assertEqual(sorted(p.name for p in (Path(root) / "tenants" / "alice").iterdir()),
                             ["default", "shared-name", "tenants"])
            # Each tenant's calls, counted apart: alice made 3 calls in each
            # of 2 sessions and 1 more; bob 3 in each.
            status, body = get(f"http://{metrics}", "/metrics")
            self.assertEqual(status, 200, body)
            self.assertIn('toolpool_tenant_calls_total{tenant="alice",outcome="ok"} 7', body)
            self.assertIn('toolpool_tenant_calls_total{tenant="bob",outcome="ok"} 6', body)
            self.assertIn('toolpool_tenant_calls_total{tenant="bob",outcome="failed"} 0', body)

    async def test_sighup_rereads_the_tokens_and_a_bad_file_keeps_them(self):
        with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as tmp:
            tokens = Path(tmp) / "tokens"
            tokens.write_text(f"alice {ALICE}\n")
            log: list[str] = []
            args = ("--workers", "1", "serve", "--http", "127.0.0.1:0", "--sessions-root", root,
                    "--auth-tokens", str(tokens))
            async with http_server(*args, functions=SESSION_TOOLS, log=log) as (process, url):
                self.assertEqual(status_of(url, ALICE)[0], 200)
                self.assertEqual(status_of(url, BOB)[0], 401)
                # Rotated: alice's new token, bob added, alice's old one gone.
                tokens.write_text(f"alice {ALICE_NEW}\nbob {BOB}\n")
                process.send_signal(signal.SIGHUP)
                await until(lambda: status_of(url, BOB)[0] == 200)
                self.assertEqual(status_of(url, ALICE_NEW)[0], 200)
                self.assertEqual(status_of(url, ALICE)[0], 401)
                # A file that does not parse: the tokens in force stay.
                tokens.write_text("alice\n")
                process.send_signal(signal.SIGHUP)
                await anyio.sleep(0.5)
                self.assertIsNone(process.poll())
                self.assertEqual(status_of(url, BOB)[0], 200)
                async with client(url, token=BOB) as bob:
                    self.assertEqual(whoami(await bob.call_tool("whoami", {"tag": "b"}))["session_id"], "bob~default")
            self.assertIn("--auth-tokens re-read: 2 tokens of 2 tenants in force", log[0])
            self.assertIn("line 1: give TENANT TOKEN, two words; the tokens in force stay", log[0])

    def test_a_bad_tokens_file_or_shared_isolation_is_refused_at_the_start(self):
        with tempfile.TemporaryDirectory() as tmp:
            tokens = Path(tmp) / "tokens"
            tokens.write_text(f"alice {ALICE}\nbob {ALICE}\n")
            run = lambda *args: subprocess.run(
                [BIN, *base_args(str(Path(tmp) / "session"), *args)], stdin=subprocess.DEVNULL,
                capture_output=True, text=True, timeout=60, env=dict(os.environ))
            out = run("serve", "--http", "127.0.0.1:0", "--auth-tokens", str(tokens))
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertIn(f"--auth-tokens {tokens}, line 2: this token is given twice", out.stderr)
            tokens.write_text(f"alice {ALICE}\n")
            out = run("serve", "--http", "127.0.0.1:0", "--auth-tokens", str(tokens), "--session-isolation", "shared")
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertIn("--session-isolation shared cannot be used with tenants (--auth-tokens, --trusted-proxy, --jwks)", out.stderr)
            out = run("serve", "--http", "127.0.0.1:0", "--auth-tokens", str(tokens), "--no-auth")
            self.assertEqual(out.returncode, 2, out.stderr)


class TenantTasks(unittest.TestCase):
    def test_another_tenants_task_is_answered_as_one_that_never_was(self):
        with tempfile.TemporaryDirectory() as tmp:
            tokens = Path(tmp) / "tokens"
            tokens.write_text(f"alice {ALICE}\nbob {BOB}\n")
            server = HttpServer(tmp, "--task-after", "0.5", "--task-keep", "30", "--auth-tokens", str(tokens))
            try:
                server.extra_headers = {"Authorization": f"Bearer {ALICE}"}
                answer = server.call("slow_then_answer", {"seconds": 2, "token": "t1"})["result"]
                self.assertEqual(answer["resultType"], "task", answer)
                task_id = answer["taskId"]
                server.extra_headers = {"Authorization": f"Bearer {BOB}"}
                for method, extra in (("tasks/get", {}), ("tasks/update", {"inputResponses": {}}), ("tasks/cancel", {})):
                    theirs = server.request(method, {"taskId": task_id, **extra, "_meta": meta()})
                    never = server.request(method, {"taskId": "no-such-task", **extra, "_meta": meta()})
                    self.assertIn("error", theirs, (method, theirs))
                    self.assertEqual(theirs["error"]["code"], never["error"]["code"], method)
                    self.assertEqual(theirs["error"]["message"].replace(task_id, "ID"),
                                     never["error"]["message"].replace("no-such-task", "ID"), method)
                # Bob's cancel did nothing: alice's task finishes, hers to read.
                server.extra_headers = {"Authorization": f"Bearer {ALICE}"}
                get = lambda: server.request("tasks/get", {"taskId": task_id, "_meta": meta()})["result"]
                done = wait_for(lambda: (r := get())["status"] == "completed" and r)
                self.assertEqual(done["result"]["content"][0]["text"], "t1")
            finally:
                server.close()


def post_call(url: str, token: str, tool: str, arguments: dict) -> tuple[int, dict, str]:
    """A 2026-07-28 `tools/call` on its own connection: (status, headers, body)."""
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": tool, "arguments": arguments, "_meta": meta(tasks=False)}}
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool,
               "Authorization": f"Bearer {token}"}
    try:
        connection.request("POST", parts.path, json.dumps(message), headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()
    finally:
        connection.close()


class McpSessions(unittest.IsolatedAsyncioTestCase):
    async def test_another_tenants_mcp_session_is_answered_as_one_that_never_was(self):
        from test_http_front import INITIALIZE, request, session_id

        async with tenant_server() as (url, _):
            alice = {"Authorization": f"Bearer {ALICE}"}
            bob = {"Authorization": f"Bearer {BOB}"}
            status, headers, body = request(url, body=INITIALIZE, headers=alice)
            self.assertEqual(status, 200, body)
            sid = session_id(headers)
            initialized = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
            self.assertEqual(request(url, body=initialized, headers={**alice, "Mcp-Session-Id": sid})[0], 202)
            listing = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}).encode()
            never = request(url, body=listing, headers={**bob, "Mcp-Session-Id": "no-such-session"})
            for method, body in (("POST", listing), ("GET", None), ("DELETE", None)):
                theirs = request(url, method=method, body=body, headers={**bob, "Mcp-Session-Id": sid})
                self.assertEqual((theirs[0], theirs[2]), (404, "Not Found: Session not found"), method)
            self.assertEqual((never[0], never[2]), (404, "Not Found: Session not found"))
            # Bob's DELETE ended nothing: alice's session serves on.
            status, _, body = request(url, body=listing, headers={**alice, "Mcp-Session-Id": sid})
            self.assertEqual(status, 200, body)
            self.assertIn("whoami", body)


class TenantResources(unittest.IsolatedAsyncioTestCase):
    async def test_another_tenants_files_cannot_be_read_or_watched_by_their_uri(self):
        from mcp import MCPError

        from support import DROPIN_PROJECT, MODES

        with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as tmp:
            tokens = Path(tmp) / "tokens"
            tokens.write_text(f"alice {ALICE}\nbob {BOB}\n")
            args = ("--workers", "2", "serve", "--http", "127.0.0.1:0", "--sessions-root", root,
                    "--auth-tokens", str(tokens))
            async with http_server(*args, functions=DROPIN_PROJECT) as (_, url):
                for version, mode in MODES.items():
                    with self.subTest(version=version):
                        # The same session name in both tenants.
                        async with client(url, "reports", mode=mode, token=ALICE) as alice:
                            self.assertFalse((await alice.call_tool("export_report", {"name": "q4"})).is_error)
                            mine = next(str(r.uri) for r in (await alice.list_resources()).resources)
                            self.assertIn("report body", (await alice.read_resource(mine)).contents[0].text)
                        made_up = mine[: mine.rindex("/") + 1] + "no-such-id"
                        async with client(url, "reports", mode=mode, token=BOB) as bob:
                            self.assertEqual((await bob.list_resources()).resources, [])
                            refusals = []
                            for uri in (mine, made_up):
                                with self.assertRaises(MCPError) as refused:
                                    await bob.read_resource(uri)
                                refusals.append((refused.exception.error.code, refused.exception.error.message))
                                if mode == "legacy":
                                    with self.assertRaises(MCPError) as watched:
                                        await bob.subscribe_resource(uri)
                                    refusals.append((watched.exception.error.code, watched.exception.error.message))
                            # Alice's file is refused as one that never was.
                            half = len(refusals) // 2
                            self.assertEqual([c for c, _ in refusals[:half]], [c for c, _ in refusals[half:]])
                            self.assertEqual([m.replace(mine, "URI") for _, m in refusals[:half]],
                                             [m.replace(made_up, "URI") for _, m in refusals[half:]])


class Gateway(unittest.IsolatedAsyncioTestCase):
    async def test_a_gateway_names_the_tenant_and_nothing_else_can(self):
        secret = "gateway-secret-0123456789abc"
        with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "secret").write_text(secret + "\n")
            args = ("--workers", "1", "serve", "--http", "127.0.0.1:0", "--sessions-root", root,
                    "--trusted-proxy", str(Path(tmp) / "secret"), "--identity-header", "X-Auth-Request-User")
            async with http_server(*args, functions=SESSION_TOOLS) as (_, url):
                # A client that goes around the gateway names whom it likes, in vain.
                status, body = status_with(url, {"X-Auth-Request-User": "alice"})
                self.assertEqual(status, 401, body)
                self.assertIn("reached through its gateway only", body)
                status, body = status_with(url, {"Toolpool-Proxy-Secret": "wrong-secret-0123456789ab", "X-Auth-Request-User": "alice"})
                self.assertEqual(status, 401, body)
                status, body = status_with(url, {"Toolpool-Proxy-Secret": secret})
                self.assertEqual(status, 401, body)
                self.assertIn("the gateway named no user (the x-auth-request-user header)", body)
                # Through the gateway: the tenant it names, with its own sessions.
                headers = {"Toolpool-Proxy-Secret": secret, "X-Auth-Request-User": "alice"}
                from mcp import Client
                from mcp.client.streamable_http import streamable_http_client
                from mcp.shared._httpx_utils import create_mcp_http_client
                async with Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))) as alice:
                    who = whoami(await alice.call_tool("whoami", {"tag": "a"}))
                    self.assertEqual(who["session_id"], "alice~default")


    async def test_a_gateway_by_address_is_believed_from_there_only(self):
        user = {"X-Forwarded-User": "alice"}
        for trusted, believed in (("10.9.9.9", False), ("127.0.0.0/8", True)):
            with tempfile.TemporaryDirectory() as root:
                args = ("--workers", "1", "serve", "--http", "127.0.0.1:0", "--sessions-root", root,
                        "--trusted-proxy", trusted)
                async with http_server(*args, functions=SESSION_TOOLS) as (_, url):
                    status, body = status_with(url, user)
                    if not believed:
                        self.assertEqual(status, 401, body)
                        self.assertIn("the request came from 127.0.0.1, not a --trusted-proxy address", body)
                        continue
                    self.assertEqual(status, 200, body)
                    from mcp import Client
                    from mcp.client.streamable_http import streamable_http_client
                    from mcp.shared._httpx_utils import create_mcp_http_client
                    async with Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=user))) as alice:
                        self.assertEqual(whoami(await alice.call_tool("whoami", {"tag": "a"}))["session_id"], "alice~default")


class TenantLimits(unittest.IsolatedAsyncioTestCase):
    async def test_a_tenant_past_its_calls_in_flight_gets_429_and_others_go_on(self):
        async with tenant_server("--tenant-max-calls", "1", workers="2") as (url, _):
            async with anyio.create_task_group() as tg:
                first = {}

                async def long_call():
                    first["answer"] = await anyio.to_thread.run_sync(
                        lambda: post_call(url, ALICE, "nap", {"seconds": 2, "tag": "done"}))

                tg.start_soon(long_call)
                await anyio.sleep(0.7)
                status, headers, body = await anyio.to_thread.run_sync(
                    lambda: post_call(url, ALICE, "whoami", {"tag": "a"}))
                self.assertEqual(status, 429, body)
                self.assertEqual(headers["retry-after"], "1")
                self.assertIn("this tenant has 1 calls in flight, its limit (--tenant-max-calls)", body)
                # Another tenant is not held back by alice's call.
                status, _, body = await anyio.to_thread.run_sync(lambda: post_call(url, BOB, "whoami", {"tag": "b"}))
                self.assertEqual(status, 200, body)
            self.assertEqual(first["answer"][0], 200)
            self.assertIn("done", first["answer"][2])
            # Its call over, alice may call again.
            status, _, body = post_call(url, ALICE, "whoami", {"tag": "a"})
            self.assertEqual(status, 200, body)

    async def test_a_tenant_past_its_rate_gets_429_with_when_to_come_back(self):
        async with tenant_server("--tenant-calls-per-second", "0.2") as (url, _):
            self.assertEqual(post_call(url, ALICE, "whoami", {"tag": "a"})[0], 200)
            status, headers, body = post_call(url, ALICE, "whoami", {"tag": "a"})
            self.assertEqual(status, 429, body)
            self.assertIn(headers["retry-after"], ("4", "5"))
            self.assertIn("at most 0.2 calls a second (--tenant-calls-per-second)", body)
            self.assertEqual(post_call(url, BOB, "whoami", {"tag": "b"})[0], 200)


if __name__ == "__main__":
    unittest.main()
