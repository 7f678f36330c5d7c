"""`toolpool.Pool`: the supervisor, run as a child process, called from Python.

The pool is the `toolpool` binary of this wheel (`toolpool host`), started
once per `Pool` and spoken to in JSON lines over its stdin and stdout
(docs/python.md, "The channel"). Not a library loaded into this process:
the supervisor reaps and adopts processes (it would take this program's own
children), its runtime would not survive `os.fork()`, and a crash of it
stays in its own process.

Threads: one starts the supervisor and lives as long as it (the
supervisor's parent-death signal fires when the thread that started it
exits), forwarding its log; one reads its answers and hands each to the
waiting caller. A caller writes its request under a lock and waits on its
own lock, with the GIL released.
"""

from __future__ import annotations

import atexit
import collections
import itertools
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._errors import PoolError, WorkflowError, tool_error

__all__ = ["Pool"]

_log = logging.getLogger("toolpool")

# A line of the supervisor's log: `<time>  WARN toolpool::calls: text`.
_LOG_LINE = re.compile(r"^\S+\s+(TRACE|DEBUG|INFO|WARN|ERROR)\s+([\w:]+):\s?(.*)$")
_LEVELS = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING, "ERROR": logging.ERROR}

# `_context` keys the pool places itself rather than passing along: the
# workspace (from `graph_directory`), the attachment store (shared through
# its manifest in that workspace), the human prompt (called back here).
_PLACED_KEYS = frozenset(("python_workspace_root", "graph_directory", "attachment_store", "human_prompt"))

_DEFAULT_TIMEOUT = 60.0

_pools: weakref.WeakSet[Pool] = weakref.WeakSet()


def find_binary() -> str:
    """The `toolpool` binary: `$TOOLPOOL_BIN`, else the one this wheel
    installed beside the interpreter's scripts, else the first on `PATH`."""
    explicit = os.environ.get("TOOLPOOL_BIN")
    if explicit:
        return explicit
    scripts = sysconfig.get_path("scripts")
    if scripts:
        beside = os.path.join(scripts, "toolpool")
        if os.access(beside, os.X_OK):
            return beside
    found = shutil.which("toolpool")
    if found:
        return found
    raise PoolError(
        "the toolpool binary is not found (not in the interpreter's scripts directory "
        f"{scripts!r} nor on PATH): install the toolpool wheel, or set TOOLPOOL_BIN"
    )


class _Waiter:
    """A blocked caller: the reader thread releases its lock with the answer."""

    __slots__ = ("_lock", "answer")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.answer: dict | None = None

    def settle(self, answer: dict) -> None:
        self.answer = answer
        self._lock.release()

    def wait(self) -> dict:
        self._lock.acquire()
        assert self.answer is not None
        return self.answer


class _FutureSlot:
    """An awaiting coroutine: the answer is set on its own loop."""

    __slots__ = ("_loop", "_future")

    def __init__(self, loop, future) -> None:
        self._loop, self._future = loop, future

    def settle(self, answer: dict) -> None:
        try:
            self._loop.call_soon_threadsafe(_set_result, self._future, answer)
        except RuntimeError:
            pass  # the loop is closed: nobody awaits the answer any more


def _set_result(future, answer: dict) -> None:
    if not future.done():
        future.set_result(answer)


def _options(
    functions_dir, workers, timeout, session_dir, session_id, sandbox, python, pass_env, env_file,
    max_calls_per_worker, memory_limit_mb, human_timeout, timeout_grace=None,
) -> list[str]:
    """The command line's global options for what was given; what was not
    is left to the command's defaults and environment variables."""
    args: list[str] = []

    def add(flag: str, value: Any) -> None:
        if value is not None:
            args.extend((flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)))

    add("--functions-dir", functions_dir)
    add("--workers", workers)
    if timeout != _DEFAULT_TIMEOUT:
        add("--timeout", timeout)
    add("--session-dir", session_dir)
    add("--session-id", session_id)
    add("--python", python)
    add("--max-calls-per-worker", max_calls_per_worker)
    add("--memory-limit", memory_limit_mb)
    add("--human-timeout", human_timeout)
    add("--timeout-grace", timeout_grace)
    if isinstance(pass_env, str):
        pass_env = (pass_env,)
    for name in pass_env:
        add("--pass-env", name)
    if env_file is not None:
        files = [env_file] if isinstance(env_file, (str, os.PathLike)) else list(env_file)
        for file in files:
            add("--env-file", file)
    if sandbox is True:
        args.append("--sandbox")
    elif sandbox:
        args.append(f"--sandbox={sandbox}")
    return args


def _split_context(context: Mapping[str, Any]) -> tuple[dict, Any, str | None, str | None]:
    """(JSON values for the tool's `_context`, the host's human prompt, the
    session directory, the node id) from a host's `_context` mapping; `vars`
    and `node_id` are among the values, for the request's own fields."""
    passed: dict[str, Any] = {}
    prompt = context.get("human_prompt")
    if prompt is not None and not callable(getattr(prompt, "request", None)):
        _log.debug("context key 'human_prompt' left out: %r has no request() method", type(prompt).__name__)
        prompt = None
    directory = context.get("graph_directory")
    if directory is None and context.get("python_workspace_root") is not None:
        directory = os.path.dirname(os.fspath(context["python_workspace_root"]))
    node_id = context.get("node_id")
    for key, value in context.items():
        if key in _PLACED_KEYS or (key == "node_id" and isinstance(value, str)):
            continue
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as e:
            _log.debug("context key %r left out: it cannot cross a process boundary (%s)", key, e)
            continue
        passed[key] = value
    return passed, prompt, (os.fspath(directory) if directory is not None else None), (
        node_id if isinstance(node_id, str) else None
    )


class Pool:
    """A pool of isolated `python3` workers running the tools of a folder,
    with timeouts that hold: a call that runs too long has its worker, and
    every process it started, killed; the caller gets `ToolTimeout`.

    ``Pool(functions_dir=None, *, workers=None, timeout=60.0, ...)`` takes the
    `toolpool` command's global options, with its defaults and environment
    variables (`TOOLPOOL_FUNCTIONS_DIR`, `MAC_FUNCTIONS_DIR`, `TOOLPOOL_WORKERS`,
    ...) for what is not given. A bad folder or interpreter raises `PoolError`
    with the command's text.

    Use it as a context manager, or call `close()`; it is closed at interpreter
    exit, and if this process is killed, even with SIGKILL, its workers die
    with it. Calls may come from any number of threads (`invoke`) and asyncio
    loops (`ainvoke`) at once.
    """

    def __init__(
        self,
        functions_dir: str | os.PathLike[str] | None = None,
        *,
        workers: int | None = None,
        timeout: float = _DEFAULT_TIMEOUT,
        session_dir: str | os.PathLike[str] | None = None,
        session_id: str | None = None,
        sandbox: bool | str = False,
        python: str | None = None,
        pass_env: Iterable[str] = (),
        env_file: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
        max_calls_per_worker: int | None = None,
        memory_limit_mb: int | None = None,
        human_timeout: float | None = None,
        timeout_grace: float | None = None,
    ) -> None:
        self._pid = os.getpid()
        self._closed = False
        self._dead: str | None = None
        self._calls: dict[int, Any] = {}
        self._prompts: dict[int, Any] = {}
        self._ids = itertools.count(1)
        self._write_lock = threading.Lock()
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=30)
        self._exited = threading.Event()
        self._proc: subprocess.Popen | None = None
        command = [find_binary(), "--color", "never"]
        command += _options(
            functions_dir, workers, timeout, session_dir, session_id, sandbox, python, pass_env, env_file,
            max_calls_per_worker, memory_limit_mb, human_timeout, timeout_grace,
        )
        command.append("host")
        env = dict(os.environ)
        env["TOOLPOOL_HOST_PID"] = str(self._pid)
        started = threading.Event()
        outcome: dict[str, Any] = {}
        threading.Thread(
            target=self._supervise, args=(command, env, started, outcome), name="toolpool-supervisor", daemon=True
        ).start()
        started.wait()
        if "error" in outcome:
            raise PoolError(f"cannot start {command[0]}: {outcome['error']}")
        self._proc = outcome["proc"]
        self._stdin = self._proc.stdin.fileno()
        ready = self._first_message()
        self._catalog: dict = ready.get("catalog") or {}
        self._openai: list = ready.get("openai") or []
        #: The supervisor's process id.
        self.pid: int = ready.get("pid", self._proc.pid)
        #: The timeout, in seconds, of a call that names none.
        self.default_timeout: float = ready.get("default_timeout", timeout)
        threading.Thread(target=self._read_answers, name="toolpool-answers", daemon=True).start()
        _pools.add(self)

    # -- the supervisor process -------------------------------------------------

    def _supervise(self, command: list[str], env: dict, started: threading.Event, outcome: dict) -> None:
        """Starts the supervisor, forwards its log, and lives as long as it."""
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                # Not in this program's process group: a Ctrl-C meant for
                # the program does not stop its pool.
                start_new_session=True,
            )
        except OSError as e:
            outcome["error"] = e
            started.set()
            return
        outcome["proc"] = proc
        started.set()
        for raw in proc.stderr:
            self._log_line(raw.decode("utf-8", "replace").rstrip("\n"))
        proc.wait()
        self._exited.set()

    def _log_line(self, line: str) -> None:
        self._stderr_tail.append(line)
        match = _LOG_LINE.match(line)
        if match is None:
            # The command's own error ("toolpool: ...") is raised as PoolError.
            _log.log(logging.DEBUG if line.startswith("toolpool: ") else logging.WARNING, "%s", line)
            return
        level, target, text = match.groups()
        # A failed call's line: the caller gets it as the exception.
        number = logging.DEBUG if target == "toolpool::calls" else _LEVELS[level]
        _log.log(number, "%s", text)

    def _first_message(self) -> dict:
        line = self._proc.stdout.readline()
        message: dict = {}
        if line:
            try:
                message = json.loads(line)
            except ValueError:
                message = {"op": "fatal", "text": f"the supervisor said {line[:200]!r}"}
        if message.get("op") == "ready":
            return message
        self._exited.wait(10)
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        text = message.get("text")
        if not text:
            lines = [l.removeprefix("toolpool: ") for l in self._stderr_tail if l.strip()]
            text = "\n".join(lines) or f"the supervisor exited with code {self._proc.returncode}"
        raise PoolError(text)

    def _read_answers(self) -> None:
        stdout = self._proc.stdout
        for line in stdout:
            try:
                message = json.loads(line)
            except ValueError:
                _log.error("toolpool: a line that is not JSON from the supervisor: %r", line[:200])
                continue
            op = message.get("op")
            if op == "done":
                call_id = message.get("id")
                self._prompts.pop(call_id, None)
                slot = self._calls.pop(call_id, None)
                if slot is not None:
                    slot.settle(message)
            elif op == "ask":
                self._ask(message)
            elif op == "error":
                _log.error("toolpool: the supervisor could not read a request: %s", message.get("text"))
            # "withdraw": the call ended; its prompt's answer will be ignored.
        self._exited.wait(10)
        code = self._proc.poll()
        if self._closed:
            reason = "the pool is closed"
        else:
            tail = "; ".join(l for l in list(self._stderr_tail)[-3:] if l.strip())
            reason = f"the toolpool supervisor (pid {self._proc.pid}) exited with code {code}" + (
                f": {tail}" if tail else ""
            )
        self._dead = reason
        for call_id in list(self._calls):
            slot = self._calls.pop(call_id, None)
            if slot is not None:
                slot.settle({"op": "done", "id": call_id, "ok": False, "kind": "pool_closed", "text": reason})

    def _ask(self, question: dict) -> None:
        """Asks the host's human prompt, in a thread of its own (it may
        block for as long as the human takes), and sends the answer."""
        prompt = self._prompts.get(question.get("call"))

        def answer() -> None:
            reply: dict[str, Any] = {"op": "answer", "id": question.get("id")}
            try:
                if prompt is None:
                    raise RuntimeError("no human prompt for this call")
                result = prompt.request(
                    question.get("node_id") or "",
                    question.get("task_description") or "",
                    inputs=question.get("inputs"),
                    metadata=question.get("metadata") or {},
                )
                if hasattr(result, "__await__"):
                    import asyncio

                    async def settle(awaitable=result):
                        return await awaitable

                    result = asyncio.run(settle())
                if isinstance(result, str):
                    reply["text"] = result
                else:
                    reply["text"] = str(getattr(result, "text", "") if result is not None else "")
                    metadata = getattr(result, "metadata", None)
                    if isinstance(metadata, Mapping):
                        reply["metadata"] = {k: v for k, v in metadata.items() if _is_json(v)}
            except BaseException as e:  # the tool gets it as its prompt's error
                reply = {"op": "answer", "id": question.get("id"), "error": f"{type(e).__name__}: {e}"}
            try:
                self._write(reply)
            except PoolError:
                pass

        threading.Thread(target=answer, name="toolpool-human-prompt", daemon=True).start()

    def _write(self, message: dict) -> None:
        # Strict JSON: NaN and infinities are refused here (ValueError),
        # never sent as tokens the supervisor cannot read.
        data = (json.dumps(message, separators=(",", ":"), allow_nan=False) + "\n").encode()
        view = memoryview(data)
        with self._write_lock:
            try:
                while view:
                    view = view[os.write(self._stdin, view):]
            except (BrokenPipeError, OSError) as e:
                raise PoolError(self._dead or f"the toolpool supervisor cannot be reached: {e}") from None

    def _usable(self) -> None:
        if os.getpid() != self._pid:
            raise PoolError(
                f"this toolpool.Pool was made in process {self._pid}; its forked child {os.getpid()} cannot use "
                "it (the pool's supervisor serves the parent): make a new toolpool.Pool in the child"
            )
        if self._closed:
            raise PoolError("the pool is closed")
        if self._dead:
            raise PoolError(self._dead)

    # -- calls -----------------------------------------------------------------

    def _start(self, name: str, args: Any, timeout, session, context, slot) -> int:
        self._usable()
        call_id = next(self._ids)
        request: dict[str, Any] = {"op": "invoke", "id": call_id, "name": name}
        if args is not None:
            request["args"] = args
        if timeout is not None:
            timeout = float(timeout)
            if not 0 < timeout < float("inf"):
                raise ValueError(f"timeout: expected a positive number of seconds, got {timeout}")
            request["timeout"] = timeout
        if session is not None:
            request["session"] = session
        if context:
            values, prompt, directory, node_id = _split_context(context)
            if isinstance(values.get("vars"), Mapping):
                request["vars"] = values.pop("vars")
            if values:
                request["context"] = values
            if directory is not None:
                request["session_dir"] = directory
            if node_id is not None:
                request["node_id"] = node_id
            if prompt is not None:
                request["prompt"] = True
                self._prompts[call_id] = prompt
        self._calls[call_id] = slot
        try:
            if self._dead:
                raise PoolError(self._dead)
            self._write(request)
        except BaseException:
            self._calls.pop(call_id, None)
            self._prompts.pop(call_id, None)
            raise
        return call_id

    def _cancel(self, call_id: int) -> None:
        """Gives a call up: its worker is killed and replaced."""
        self._calls.pop(call_id, None)
        self._prompts.pop(call_id, None)
        if os.getpid() == self._pid and not self._dead:
            try:
                self._write({"op": "cancel", "id": call_id})
            except PoolError:
                pass

    def invoke(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        session: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> Any:
        """Calls tool `name` with `args` and returns its value, converted as
        ``toolpool call --json`` converts it; raises a `ToolError` when the
        call fails (`ToolTimeout`, `ToolRaised`, ...).

        `timeout` (seconds) overrides the pool's. `session` names a session
        of the pool (its own workspace, attachments and packages). `context`
        is the host's `_context` (the original runtime's `global_state`):
        its JSON values reach the tool's `_context` as they are, its
        `human_prompt` is called back in this process while the tool waits
        (the wait does not count against the timeout), and its
        `graph_directory` places the call's workspace. Blocks this thread
        only; an interrupt (Ctrl-C) cancels the call.
        """
        waiter = _Waiter()
        call_id = self._start(name, args, timeout, session, context, waiter)
        try:
            answer = waiter.wait()
        except BaseException:
            self._cancel(call_id)
            raise
        return _outcome(answer)

    async def ainvoke(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        session: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> Any:
        """`invoke` for asyncio, on any loop (also a new `asyncio.run` per
        call). Cancelling the awaiting task cancels the call: its worker is
        killed and replaced."""
        import asyncio

        loop = asyncio.get_running_loop()
        future = loop.create_future()
        call_id = self._start(name, args, timeout, session, context, _FutureSlot(loop, future))
        try:
            answer = await future
        except BaseException:
            self._cancel(call_id)
            raise
        return _outcome(answer)

    def _request(self, request: dict) -> dict:
        self._usable()
        call_id = next(self._ids)
        request["id"] = call_id
        waiter = _Waiter()
        self._calls[call_id] = waiter
        try:
            self._write(request)
        except BaseException:
            self._calls.pop(call_id, None)
            raise
        return waiter.wait()

    # -- the catalog and workflow files -------------------------------------------

    def catalog(self) -> list[dict]:
        """The tools: the `functions` list of ``toolpool catalog --format json``."""
        return json.loads(json.dumps(self._catalog.get("functions", [])))

    def catalog_errors(self) -> list[dict]:
        """The modules that failed to load: the catalog's `errors`."""
        return json.loads(json.dumps(self._catalog.get("errors", [])))

    def openai_tools(self, names: Iterable[str] | None = None) -> list[dict]:
        """The tools in OpenAI's tools format (``catalog --format openai``),
        all of them or those `names` names, in the catalog's order."""
        tools = json.loads(json.dumps(self._openai))
        if names is None:
            return tools
        wanted = [names] if isinstance(names, str) else list(names)
        known = {tool["function"]["name"] for tool in tools}
        unknown = [name for name in wanted if name not in known]
        if unknown:
            raise ValueError(f"no such tool: {', '.join(map(repr, unknown))}")
        return [tool for tool in tools if tool["function"]["name"] in wanted]

    def resolve(self, workflow: str | os.PathLike[str], node: str | None = None) -> Any:
        """What ``toolpool resolve WORKFLOW [--node NODE]`` prints: each
        agent node's tools with their schemas and timeouts. Raises
        `WorkflowError` with the command's text for a file it cannot use."""
        request = {"op": "resolve", "workflow": os.path.abspath(os.fspath(workflow))}
        if node is not None:
            request["node"] = node
        answer = self._request(request)
        if answer.get("ok"):
            return answer.get("value")
        if answer.get("kind") == "pool_closed":
            raise PoolError(answer.get("text", ""))
        raise WorkflowError(answer.get("text", ""))

    def stats(self) -> dict:
        """The pool's counters (calls, timeouts, worker deaths, retirements
        by cause, ...), as the metrics report them."""
        answer = self._request({"op": "stats"})
        if not answer.get("ok"):
            raise PoolError(answer.get("text", ""))
        return answer.get("value")

    # -- the end -----------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> None:
        """Stops the pool: calls still running are killed (their callers get
        `PoolError`) and every worker is reaped. Idempotent; returns within
        `timeout` seconds (then the supervisor is killed)."""
        if self._closed or os.getpid() != self._pid:
            self._closed = True
            return
        self._closed = True
        _pools.discard(self)
        proc = self._proc
        if proc is None:
            return
        try:
            with self._write_lock:
                proc.stdin.close()
        except OSError:
            pass
        if not self._exited.wait(timeout):
            proc.kill()  # SIGKILL: its workers die with it
            self._exited.wait(5)

    def _forked(self) -> None:
        """In a forked child: let go of the parent's pipes, so the parent's
        pool still ends when the parent closes it."""
        proc = self._proc
        if proc is None:
            return
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None and not stream.closed:
                    os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __reduce__(self):
        raise TypeError("a toolpool.Pool cannot be sent to another process: make one there")

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("dead" if self._dead else f"supervisor pid {self.pid}")
        return f"<toolpool.Pool {state}, {len(self._catalog.get('functions', []))} tools>"


def _outcome(answer: dict) -> Any:
    """A call's value, or the exception its failure is."""
    if answer.get("ok"):
        return answer.get("value")
    raise tool_error(answer)


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _after_fork_in_child() -> None:
    for pool in list(_pools):
        pool._forked()


def _close_all() -> None:
    for pool in list(_pools):
        pool.close(timeout=5.0)


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all)
