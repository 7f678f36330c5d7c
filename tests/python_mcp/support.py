"""Shared set-up for the MCP client tests: `toolpool serve` on the fixture
tools, driven by the official Python `mcp` package.

The Rust test `tests/suite/mcp_python.rs` runs these modules with the virtual
environment that `scripts/test-deps` prepares, and passes the binary's path in
TOOLPOOL_BIN.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

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
    *args: str,
    functions: Path = FIXTURES,
    log: list | None = None,
    log_file: list | None = None,
    env: dict | None = None,
    **client_options,
):
    """A connected `Client` on `toolpool <args>` (args end with `serve ...`) over the tools in `functions`.

    The server's stderr goes to a file; on failure it is printed, and once the
    client has closed its text is appended to `log` when one is given; the
    file's path is appended to `log_file` at the start, to read it meanwhile.
    `mode="legacy"` in `client_options` makes the client use the `initialize`
    handshake (2025-11-25); by default it discovers 2026-07-28. `env`: more
    variables for the server (it gets only the client's default ones else).
    """
    # Imported here, not at the top: the agent runtimes' tests import this
    # module in venvs of their own, one of which holds `mcp` 1.x (no `Client`).
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    with tempfile.TemporaryDirectory() as tmp:
        stderr_path = Path(tmp) / "stderr.txt"
        if log_file is not None:
            log_file.append(stderr_path)
        params = StdioServerParameters(
            command=BIN,
            args=base_args(str(Path(tmp) / "session"), *args, functions=functions),
            env={"RUST_LOG": "info", **(env or {})},
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
async def http_server(*args: str, functions: Path = FIXTURES, log: list | None = None, env: dict | None = None):
    """`toolpool <args>` (args end with `serve --http ...`) as a process over
    the tools in `functions`; yields (process, url) once it listens; SIGTERM
    and wait at the end, then the server's stderr is appended to `log`.
    `env`: its `OTEL_*` variables (the tests' own are left out) and others."""
    with tempfile.TemporaryDirectory() as tmp:
        stderr_path = Path(tmp) / "stderr.txt"
        with open(stderr_path, "w") as errlog:
            process = subprocess.Popen(
                [BIN, *base_args(str(Path(tmp) / "session"), *args, functions=functions)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errlog,
                env={
                    **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
                    **(env or {}),
                },
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
                try:
                    yield process, url
                except BaseException:
                    # What the server said and how it ended explain a
                    # failure at its door (a refused connection, a 5xx).
                    print(f"\nthe server at {url} (exit status {process.poll()}) wrote:\n"
                          f"{stderr_path.read_text()}", file=sys.stderr)
                    raise
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


async def check_everywhere(test, check, *args: str, **client_options) -> None:
    """`await check(client)` for a client of each protocol version, over stdio
    (`toolpool <args> serve`) and over HTTP (one `toolpool <args> serve --http`),
    each a subtest of `test`; `client_options` go to each `Client`."""
    from mcp import Client

    for version, mode in MODES.items():
        with test.subTest(transport="stdio", version=version):
            async with served(*args, "serve", mode=mode, **client_options) as client:
                test.assertEqual(client.protocol_version, version)
                await check(client)
    async with http_server(*args, "serve", "--http", "127.0.0.1:0") as (_, url):
        for version, mode in MODES.items():
            with test.subTest(transport="http", version=version):
                async with Client(url, mode=mode, **client_options) as client:
                    test.assertEqual(client.protocol_version, version)
                    await check(client)


def named_client(url: str, name: str | None = None, mode: str = "legacy"):
    """A client of `url` over HTTP; `name`: the toolpool session it names
    (the `Toolpool-Session` header)."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Toolpool-Session": name} if name else None
    return Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers)), mode=mode)


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


# The agent runtimes (tests/python_mcp/test_runtime_*.py): the OpenAI Agents
# SDK, langchain-mcp-adapters, pydantic-ai and Google ADK, each in a venv of
# its own, drive `toolpool serve` over the bundled tools through their own tool
# objects (no model is called), with their default protocol settings.

BUNDLED_FUNCTIONS = REPO / "functions" / "function_calling"
RUNTIME_TIMEOUT = 2
"""toolpool's `--timeout` in the runtime tests: `wait` past it is killed."""
CLIENT_TIMEOUT = 60
"""The runtimes' own client timeouts there, well above RUNTIME_TIMEOUT: the
runtime must get toolpool's TimeoutError, not give up first."""
RUNTIME_TOKEN = "runtime-token-0123456789abcdef"
RUNTIME_HEADERS = {"Authorization": f"Bearer {RUNTIME_TOKEN}"}
"""What a runtime sends `serve --http` (which has `--auth-token-file`)."""
RUNTIME_TOOLS = {"save_file", "read_file_segment", "wait", "word_count"}
"""Bundled tools the runtime tests call (a runtime lists them all)."""


def runtime_stdio_command(session_dir: str) -> tuple[str, list[str]]:
    """The command and arguments a runtime starts `toolpool serve` on stdio
    with: the bundled tools, `--timeout RUNTIME_TIMEOUT`, files in `session_dir`."""
    return BIN, base_args(session_dir, "--timeout", str(RUNTIME_TIMEOUT), "serve", functions=BUNDLED_FUNCTIONS)


@contextlib.asynccontextmanager
async def runtime_http_server(log: list | None = None):
    """`toolpool serve --http` on a free port over the bundled tools, with
    `--timeout RUNTIME_TIMEOUT` and a bearer token (RUNTIME_HEADERS); yields
    its URL. Its stderr is appended to `log` at the end."""
    with tempfile.TemporaryDirectory() as tmp:
        token_file = Path(tmp) / "token"
        token_file.write_text(RUNTIME_TOKEN + "\n")
        args = ("--timeout", str(RUNTIME_TIMEOUT), "serve", "--http", "127.0.0.1:0", "--auth-token-file", str(token_file))
        async with http_server(*args, functions=BUNDLED_FUNCTIONS, log=log) as (_, url):
            yield url


def runtime_warnings(log: str) -> list[str]:
    """A runtime test's server log's warnings, but for the call log of the
    error and timeout provoked on purpose."""
    return [line for line in warnings_in(log) if "toolpool::calls" not in line]


NOTE = "notes/runtime.txt"
"""The workspace file the runtime tests save and read back."""


async def save_note(test, call, text: str) -> None:
    """Save `text` (one line) to NOTE through a runtime's `call` (see runtime_flow)."""
    result, failed = await call("save_file", {"path": NOTE, "content": text + "\n"})
    test.assertIn(failed, (None, False), result)
    saved = json.loads(result)
    test.assertEqual((saved["path"], saved["bytes_written"]), (NOTE, len(text.encode()) + 1), result)


async def read_note(test, call, text: str) -> None:
    """Read NOTE back through a runtime's `call`: it holds `text`."""
    result, failed = await call("read_file_segment", {"path": NOTE})
    test.assertIn(failed, (None, False), result)
    test.assertEqual(json.loads(result)["content"], f"1: {text}", result)


async def runtime_flow(test, names, call, text: str) -> None:
    """Every runtime test's flow: the tools the runtime listed (`names`) hold
    RUNTIME_TOOLS; a call; save then read back; a raised error; a timeout;
    the next call. `call(name, arguments)` calls a tool as the runtime's agent
    would and returns (text, failed): the text the model would be given, and
    whether the runtime marks the call as failed (None when it has no such
    mark)."""
    test.assertLessEqual(RUNTIME_TOOLS, set(names))

    result, failed = await call("word_count", {"text": "one two three"})
    test.assertIn(failed, (None, False), result)
    test.assertEqual(json.loads(result)["words"], 3, result)

    await save_note(test, call, text)
    await read_note(test, call, text)

    result, failed = await call("wait", {"seconds": -1})
    test.assertIn(failed, (None, True), result)
    test.assertIn("Tool wait error: ValueError: seconds must be a finite number, 0 or more (got -1.0)", result)

    start = time.monotonic()
    result, failed = await call("wait", {"seconds": 120})
    test.assertIn(failed, (None, True), result)
    test.assertIn(f"Tool wait error: TimeoutError: function 'wait' timed out after {RUNTIME_TIMEOUT} s", result)
    test.assertIn("was killed", result)
    test.assertLess(time.monotonic() - start, CLIENT_TIMEOUT)

    # The next call runs (on a fresh worker); the file outlived the kill.
    result, failed = await call("word_count", {"text": "after the timeout"})
    test.assertIn(failed, (None, False), result)
    test.assertEqual(json.loads(result)["words"], 3, result)
    await read_note(test, call, text)
