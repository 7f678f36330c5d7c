"""Two `toolpool serve --http` replicas behind a real HAProxy on loopback,
with affinity on `Mcp-Session-Id` and `/readyz` as the health check (the
configuration docs/deploy.md shows), driven by the official `mcp` client:

- 200 sessions x 10 calls: every call answered with its own result, each
  session on one replica, its files on that replica;
- one replica killed with SIGKILL mid-run: only its sessions fail, their
  clients start new sessions, which land on the other replica;
- one replica sent SIGTERM: `/readyz` 503 at once, HAProxy sends its new
  sessions to the other replica, nothing in flight is lost.

Needs `haproxy` on PATH (scripts/test-deps installs it); without it the
tests are skipped with the reason, except in CI (`CI` set).
"""

import asyncio
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from support import BIN, REPO

SESSION_TOOLS = REPO / "tests" / "fixtures" / "session_tools"
HAPROXY = shutil.which("haproxy") or next(
    (p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy") if os.access(p, os.X_OK)), None
)
if HAPROXY is None and os.environ.get("CI"):
    raise RuntimeError("haproxy is not installed (scripts/test-deps installs it)")

SESSIONS = int(os.environ.get("TOOLPOOL_LB_SESSIONS", "200"))
CALLS = 10
CONCURRENCY = 16


def haproxy_config(port: int, replicas: dict[str, int], sticky: bool = True) -> str:
    """The configuration of docs/deploy.md, on loopback ports; without
    `sticky`, no affinity (replicas that route their state themselves)."""
    servers = "\n".join(f"    server {name} 127.0.0.1:{p} check" for name, p in replicas.items())
    affinity = """\
    # Affinity: the replica that answered initialize with an Mcp-Session-Id
    # gets every later request carrying it.
    stick-table type string len 64 size 100k expire 30m
    stick match req.hdr(mcp-session-id)
    stick store-response res.hdr(mcp-session-id)
""" if sticky else ""
    return f"""\
global
    maxconn 4096

defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    timeout http-request 10s
    # A request whose server is down goes to another one (a session's
    # requests then get 404 there: the client starts a new session).
    option redispatch
    retries 3
    # A new session refused by a draining replica (503) is retried on the other.
    retry-on conn-failure empty-response 503

frontend mcp
    bind 127.0.0.1:{port}
    default_backend toolpool

backend toolpool
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    # A replica is out at its first failed check (a 503 from /readyz while
    # it drains); a slow answer on a busy host is not a failure.
    default-server inter 200ms fall 1 rise 2
    timeout check 5s
{affinity}{servers}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_of(port: int, path: str) -> int | None:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request("GET", path)
        return connection.getresponse().status
    except OSError:
        return None
    finally:
        connection.close()


class Replica:
    """One `toolpool serve --http` on a fixed loopback port, its sessions
    under its own root."""

    def __init__(self, name: str, port: int, tmp: Path):
        self.name, self.port = name, port
        self.root = tmp / name
        self.log = tmp / f"{name}.log"
        self.process = None
        self._log_file = None

    def start(self):
        self.root.mkdir(exist_ok=True)
        if self._log_file is None:
            self._log_file = open(self.log, "a")
        self.process = subprocess.Popen(
            [
                BIN, "--functions-dir", str(SESSION_TOOLS), "--session-dir", str(self.root / "default"),
                # 4 workers: the drain's 4 naps run at once on either replica.
                "--workers", "4", "--pass-env", "TOOLPOOL_TEST_REPLICA",
                "serve", "--http", f"127.0.0.1:{self.port}", "--sessions-root", str(self.root),
                "--grace", "30", "--session-isolation", "shared",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log_file,
            env={**os.environ, "TOOLPOOL_TEST_REPLICA": self.name, "RUST_LOG": "warn"},
        )
        deadline = time.monotonic() + 30
        while status_of(self.port, "/readyz") != 200:
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, f"{self.name} never became ready"
            time.sleep(0.05)

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self._log_file is not None:
            self._log_file.close()


@contextlib.contextmanager
def cluster():
    """Two replicas and HAProxy in front: yields (url, replicas by name)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        replicas = {name: Replica(name, free_port(), tmp) for name in ("r1", "r2")}
        lb_port = free_port()
        config = tmp / "haproxy.cfg"
        config.write_text(haproxy_config(lb_port, {n: r.port for n, r in replicas.items()}))
        check = subprocess.run([HAPROXY, "-c", "-f", str(config)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        for replica in replicas.values():
            replica.start()
        proxy = subprocess.Popen([HAPROXY, "-db", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_until(lambda: status_of(lb_port, "/readyz") == 200, "HAProxy never answered")
            time.sleep(0.6)  # a few health checks: both replicas up
            yield f"http://127.0.0.1:{lb_port}/mcp", replicas
        finally:
            proxy.terminate()
            proxy.wait()
            for replica in replicas.values():
                replica.stop()


def wait_until(condition, message: str, seconds: float = 30):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(0.05)


class Session:
    """One client session's run: its calls, and where they ran."""

    def __init__(self, number: int):
        self.number = number
        self.done = 0  # calls answered so far (a new session goes on from here)
        # Per MCP session: {"replica", "session_id", "failed", "napped", "wrote"}.
        self.attempts: list[dict] = []


def connect(url: str, session: Session) -> Client:
    """A new MCP session of the client `session`, in the toolpool session it
    names (clients with neither a name nor a token would all share one)."""
    headers = {"Toolpool-Session": f"s{session.number}"}
    return Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers)), mode="legacy")


async def nap_once(url: str, session: Session, seconds: float):
    """One session whose one call is in flight for `seconds` (the test finds
    its replica by the file the nap tool writes)."""
    async with connect(url, session) as client:
        tag = f"s{session.number}-nap"
        # The client lists the tools after its first call (for their output
        # schemas); on a replica that finished draining that would fail.
        await client.list_tools()
        result = await client.call_tool("nap", {"seconds": seconds, "tag": tag})
        assert not result.is_error, result
        assert result.content[0].text == tag, (tag, result)
        session.done = CALLS


async def run_session(url: str, session: Session, nap: float = 0.0, failures_allowed: bool = False):
    """Makes the session's CALLS calls; when its MCP session fails, opens a
    new one and goes on. Every answer must be the call's own."""
    while session.done < CALLS:
        attempt = {"replica": None, "session_id": None, "failed": False}
        session.attempts.append(attempt)
        try:
            async with connect(url, session) as client:
                while session.done < CALLS:
                    tag = f"s{session.number}-c{session.done}"
                    if nap and attempt["replica"] is not None and not attempt.get("napped"):
                        # In flight for a while, once the replica is known.
                        attempt["napped"] = True
                        result = await client.call_tool("nap", {"seconds": nap, "tag": tag})
                        assert not result.is_error, result
                        assert result.content[0].text == tag, (tag, result)
                    result = await client.call_tool("whoami", {"tag": tag})
                    assert not result.is_error, result
                    who = json.loads(result.content[0].text)
                    # The call's own answer, from the session's one replica.
                    assert who["tag"] == tag, (tag, who)
                    for key in ("replica", "session_id"):
                        if attempt[key] is None:
                            attempt[key] = who[key]
                        assert who[key] == attempt[key], (tag, key, who, attempt)
                    if session.done == 0 or attempt.get("wrote") is None:
                        note = f"notes of {who['session_id']}"
                        result = await client.call_tool("write_note", {"text": note})
                        assert not result.is_error, result
                        attempt["wrote"] = note
                    session.done += 1
                result = await client.call_tool("read_note", {})
                assert result.content[0].text == attempt["wrote"], (result, attempt)
        except AssertionError:
            raise
        except Exception:  # noqa: BLE001 - the replica went away: a new session
            if not failures_allowed:
                raise
            attempt["failed"] = True
            await anyio.sleep(0.05)


async def run_all(url: str, sessions: list[Session], **options):
    limiter = anyio.Semaphore(CONCURRENCY)

    async def one(session):
        async with limiter:
            await run_session(url, session, **options)

    async with anyio.create_task_group() as tg:
        for session in sessions:
            tg.start_soon(one, session)


@unittest.skipIf(HAPROXY is None, "haproxy is not installed (scripts/test-deps installs it)")
class BehindHAProxy(unittest.IsolatedAsyncioTestCase):
    async def test_sessions_failover_and_drain(self):
        # unittest runs the loop in debug mode, which slows 2 000 calls a lot.
        asyncio.get_running_loop().set_debug(False)
        with cluster() as (url, replicas):
            # 1. 200 sessions x 10 calls, spread over both replicas.
            sessions = [Session(n) for n in range(SESSIONS)]
            with anyio.fail_after(300):  # a bound against hangs, not a speed check
                await run_all(url, sessions)
            placed = {name: 0 for name in replicas}
            for session in sessions:
                (attempt,) = session.attempts
                placed[attempt["replica"]] += 1
                # Its files are on the replica that holds it, and only there.
                notes = replicas[attempt["replica"]].root / attempt["session_id"] / "code_workspace" / "notes.txt"
                self.assertEqual(notes.read_text(), attempt["wrote"])
                other = next(r for n, r in replicas.items() if n != attempt["replica"])
                self.assertFalse((other.root / attempt["session_id"]).exists())
            self.assertTrue(all(count > SESSIONS // 4 for count in placed.values()), placed)

            # 2. SIGKILL one replica mid-run: only its sessions fail, and their
            # new sessions land on the other one.
            sessions = [Session(SESSIONS + n) for n in range(CONCURRENCY)]
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: run_all(url, sessions, nap=2.0, failures_allowed=True))
                with anyio.fail_after(30):
                    # Killed once some of r1's sessions have a call in flight.
                    while sum(s.attempts[-1].get("napped", False) and s.attempts[-1]["replica"] == "r1"
                              for s in sessions if s.attempts) < 3:
                        await anyio.sleep(0.02)
                replicas["r1"].process.kill()
                replicas["r1"].process.wait()
            for session in sessions:
                self.assertEqual(session.done, CALLS)
                for attempt in session.attempts:
                    if attempt["failed"]:
                        # Failed sessions were r1's (or never got an answer).
                        self.assertIn(attempt["replica"], ("r1", None), session.attempts)
                    else:
                        self.assertIsNotNone(attempt["replica"])
                if any(a["failed"] for a in session.attempts):
                    self.assertEqual(session.attempts[-1]["replica"], "r2", session.attempts)
            self.assertTrue(any(a["failed"] for s in sessions for a in s.attempts), "no session was on r1")

            # 3. r1 back; then SIGTERM to the replica with the most calls in
            # flight: it drains.
            replicas["r1"].start()
            await anyio.to_thread.run_sync(lambda: time.sleep(1))  # HAProxy's rise: 2 checks
            in_flight = [Session(1000 + n) for n in range(4)]
            later = [Session(2000 + n) for n in range(16)]
            async with anyio.create_task_group() as tg:
                for session in in_flight:
                    tg.start_soon(nap_once, url, session, 8.0)
                def napping(s):
                    """The replica whose worker runs the session's nap (the
                    tool marks its start in the session's workspace)."""
                    for name, replica in replicas.items():
                        if any(replica.root.glob(f"*/code_workspace/napping-s{s.number}-nap")):
                            return name
                    return None

                with anyio.fail_after(60):
                    while not all(napping(s) for s in in_flight):
                        await anyio.sleep(0.02)
                held = [napping(s) for s in in_flight]
                for session, name in zip(in_flight, held):
                    session.attempts.append({"replica": name, "failed": False})
                target = max(replicas, key=held.count)
                other = next(name for name in replicas if name != target)
                replicas[target].process.send_signal(signal.SIGTERM)
                with anyio.fail_after(5):
                    while status_of(replicas[target].port, "/readyz") != 503:
                        await anyio.sleep(0.02)
                # 503 while its calls are still running.
                self.assertTrue(all(s.done < CALLS for s in in_flight))
                tg.start_soon(lambda: run_all(url, later))
            # Nothing in flight was lost (the calls running on r2 when it got
            # SIGTERM finished with their own results); every new session
            # went to r1.
            for session in in_flight + later:
                self.assertEqual(session.done, CALLS)
                self.assertEqual(len(session.attempts), 1, session.attempts)
            self.assertIn(target, {s.attempts[0]["replica"] for s in in_flight})
            self.assertEqual({s.attempts[0]["replica"] for s in later}, {other})
            code = await anyio.to_thread.run_sync(lambda: replicas[target].process.wait(timeout=60))
            self.assertEqual(code, 0, replicas[target].log.read_text()[-3000:])


if __name__ == "__main__":
    unittest.main()
