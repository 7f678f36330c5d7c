"""Shared set-up for the MCP client tests: `toolpool serve` on the fixture
tools, driven by the official Python `mcp` package.

The Rust test `tests/mcp_python.rs` runs these modules with the virtual
environment that `scripts/test-deps` prepares, and passes the binary's path in
TOOLPOOL_BIN.
"""

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "functions"
BIN = os.environ.get("TOOLPOOL_BIN") or str(REPO / "target" / "debug" / "toolpool")
VERSION = os.environ.get("TOOLPOOL_VERSION")


DROPIN_PROJECT = REPO / "tests" / "fixtures" / "original_project" / "functions" / "function_calling"


def base_args(session_dir: str, *args: str, functions: Path = FIXTURES) -> list[str]:
    return ["--functions-dir", str(functions), "--session-dir", session_dir, *args]


@contextlib.asynccontextmanager
async def served(
    *args: str, functions: Path = FIXTURES, log: list | None = None, log_file: list | None = None, **client_options
):
    """A connected `Client` on `toolpool <args>` (args end with `serve ...`) over the tools in `functions`.

    The server's stderr goes to a file; on failure it is printed, and once the
    client has closed its text is appended to `log` when one is given; the
    file's path is appended to `log_file` at the start, to read it meanwhile.
    `mode="legacy"` in `client_options` makes the client use the `initialize`
    handshake (2025-11-25); by default it discovers 2026-07-28.
    """
    with tempfile.TemporaryDirectory() as tmp:
        stderr_path = Path(tmp) / "stderr.txt"
        if log_file is not None:
            log_file.append(stderr_path)
        params = StdioServerParameters(
            command=BIN,
            args=base_args(str(Path(tmp) / "session"), *args, functions=functions),
            env={"RUST_LOG": "info"},
        )
        with open(stderr_path, "w") as errlog:
            try:
                async with Client(stdio_client(params, errlog=errlog), **client_options) as client:
                    yield client
                if log is not None:
                    errlog.flush()
                    log.append(stderr_path.read_text())
            except BaseException:
                errlog.flush()
                sys.stderr.write(f"--- toolpool stderr:\n{stderr_path.read_text()}\n")
                raise


MODES = {"2026-07-28": "auto", "2025-11-25": "legacy"}
"""Protocol version → the client's `mode` that speaks it."""


# Expected in every log of these tests: the fixture folder holds modules that
# fail to load on purpose (broken.py, dup_b.py); and when a test client drops
# its open `subscriptions/listen` stream, rmcp reports the answer to it that
# it can no longer send: on stdio while the server drains, over HTTP (where
# the stream is the request's own response) as a closed channel.
EXPECTED = (
    "tool module not loaded",
    "failed to send pending response during drain",
    "fail to response message error=channel closed",
)


def warnings_in(log: str) -> list[str]:
    """The WARN (and worse) lines of a server log, but for the expected ones."""
    return [
        line for line in log.splitlines()
        if (" WARN " in line or " ERROR " in line) and not any(text in line for text in EXPECTED)
    ]


def text_of(result) -> str:
    assert len(result.content) == 1, result
    return result.content[0].text


def ok(result) -> str:
    assert not result.is_error, result
    return text_of(result)


def error(result) -> str:
    assert result.is_error, result
    return text_of(result)


def parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


async def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        await anyio.sleep(0.02)
    return not alive(pid)


async def read_pid_file(path: Path, seconds: float = 10.0) -> int:
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(OSError, ValueError):
            return int(path.read_text().strip())
        assert time.monotonic() < deadline, f"{path} was not written in time"
        await anyio.sleep(0.02)


def workflow_file(directory: Path) -> Path:
    """A workflow whose node `Agent` has `add` and `sleep_forever` under the
    prefix `fx` with a 0.5 s timeout, and `echo` with the pool's default."""
    path = directory / "workflow.yaml"
    path.write_text(
        """\
nodes:
  - id: Agent
    type: agent
    config:
      tooling:
        - type: function
          prefix: fx
          config:
            timeout: 0.5
            tools:
              - name: add
              - name: sleep_forever
                description: Never returns.
        - type: function
          config:
            tools:
              - name: echo
  - id: Other
    type: agent
    config:
      tooling:
        - type: function
          config:
            tools:
              - name: getpid
"""
    )
    return path


def cli_json(*args: str):
    """What a plain CLI command prints, parsed."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [BIN, *base_args(tmp, *args)], check=True, capture_output=True, text=True
        )
    return json.loads(out.stdout)


@contextlib.asynccontextmanager
async def http_server(*args: str, functions: Path = FIXTURES, log: list | None = None):
    """`toolpool <args>` (args end with `serve --http ...`) as a process over
    the tools in `functions`; yields (process, url) once it listens; SIGTERM
    and wait at the end, then the server's stderr is appended to `log`."""
    with tempfile.TemporaryDirectory() as tmp:
        stderr_path = Path(tmp) / "stderr.txt"
        with open(stderr_path, "w") as errlog:
            process = subprocess.Popen(
                [BIN, *base_args(str(Path(tmp) / "session"), *args, functions=functions)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errlog,
            )
            try:
                deadline = time.monotonic() + 30
                url = None
                while url is None:
                    # Not the `--metrics` line, which may come first.
                    found = re.search(r"serving MCP \(streamable HTTP\) at (http://\S+)", stderr_path.read_text())
                    if found:
                        url = found.group(1)
                    elif process.poll() is not None or time.monotonic() > deadline:
                        raise AssertionError(f"no HTTP server:\n{stderr_path.read_text()}")
                    else:
                        await anyio.sleep(0.05)
                yield process, url
            finally:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    try:
                        await anyio.to_thread.run_sync(lambda: process.wait(timeout=20))
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait()
                if process.stdout is not None:
                    process.stdout.close()
                if log is not None:
                    log.append(stderr_path.read_text())


ASKING_TOOLS = '''\
import subprocess
import sys
import time


def spawn_then_ask(marker: str, _context: dict | None = None) -> str:
    """Start a grandchild whose command line holds `marker`, then ask a human;
    without an answer carry on (sleep): only the server can end this call."""
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)", marker], stdin=subprocess.DEVNULL)
    try:
        return _context["human_prompt"].request(None, "Approve?").text
    except Exception:
        time.sleep(1000)
        return "never"


def add(a: int, b: int) -> int:
    """a + b"""
    return a + b
'''
"""A tool module whose call starts a grandchild and then waits for a human."""


def asking_tools(directory: Path) -> Path:
    """A functions folder holding `ASKING_TOOLS`."""
    functions = Path(directory) / "asking"
    functions.mkdir()
    (functions / "asking.py").write_text(ASKING_TOOLS)
    return functions


def process_with(marker: str) -> int | None:
    """The live process whose command line holds `marker` (seen from the host,
    whatever PID namespace it runs in), if any."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if marker.encode() in (entry / "cmdline").read_bytes().split(b"\0") and alive(int(entry.name)):
                return int(entry.name)
    return None


async def started_with(marker: str, seconds: float = 30.0) -> int:
    deadline = time.monotonic() + seconds
    while (pid := process_with(marker)) is None:
        assert time.monotonic() < deadline, f"no process with {marker} started"
        await anyio.sleep(0.05)
    return pid
