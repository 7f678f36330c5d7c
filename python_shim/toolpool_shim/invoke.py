"""Running one tool call: find, check and coerce arguments, call, convert the result."""

import copy
import difflib
import inspect
import os
import pathlib
import signal
import sys
import traceback

from . import call_logs, content, proxies, results, standins, trace_env
from .coerce import Mismatch, coerce


class ToolFailure(Exception):
    """A call that ends in an error reply: {"type", "message", "traceback"}."""

    def __init__(self, type_name: str, message: str, traceback_text: str | None = None):
        super().__init__(f"{type_name}: {message}")
        self.error = {"type": type_name, "message": message, "traceback": traceback_text}

    @classmethod
    def from_exception(cls, exc: BaseException, tb=None) -> "ToolFailure":
        """The error reply for an exception; `tb`: where its traceback starts (default: all of it)."""
        text = "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
        return cls(type(exc).__name__, _safe_str(exc), text)


class _Deadline:
    """A call whose deadline passed, with a grace: the supervisor sends
    SIGUSR2, and the tool's main thread gets TimeoutError (an async tool's
    task is cancelled), so its `finally` and `with` run before the worker is
    killed. Only while the tool's own code runs: never inside the shim."""

    running = False
    task = None  # an async tool's task


_DEADLINE_MESSAGE = "the call's timeout passed: clean up now, the worker is killed when the grace ends"


def _deadline_passed(signum, frame) -> None:
    if not _Deadline.running:
        return
    _Deadline.running = False
    task = _Deadline.task
    if task is not None:
        # Raised here, inside the event loop, it would leave the task
        # unfinished and its `finally` unrun: the task is cancelled instead.
        task.get_loop().call_soon_threadsafe(task.cancel, _DEADLINE_MESSAGE)
        return
    raise TimeoutError(_DEADLINE_MESSAGE)


def hear_deadlines() -> None:
    """Installs the handler of the supervisor's deadline signal (once, at start)."""
    signal.signal(signal.SIGUSR2, _deadline_passed)


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"<str() of the {type(exc).__name__} failed>"


class Invoker:
    def __init__(self, toolset, config: dict, transport, classes=None):
        self._toolset = toolset
        self._config = config
        self._loop = None  # the worker's event loop for async tools, made on first use
        # How the service proxies reach the supervisor: the worker's channel (tests pass their own).
        self._transport = transport
        self._classes = classes or standins.own()
        # One per workspace, made on first use; a store holds no state of its own.
        self._attachment_stores = {}
        # The last call's parsed context (worker.py reuses it while the text
        # repeats) and its session paths.
        self._last_context, self._last_paths = None, None
        # The session packages directory this worker's sys.path holds now.
        self._packages_on_path = config.get("packages_dir")

    def invoke(self, name: str, args, context: dict, trace=None) -> tuple:
        """(the tool's result encoded for the reply (results.Encoded), its content blocks or None); raises ToolFailure.

        Content blocks are there when the tool returned an attachment result
        (a MessageBlock, a list of them, an AttachmentRecord). `trace`: the
        call's (traceparent, tracestate or None), or None (trace_env.py).
        """
        tool = self._find(name)
        self._enter_session(context)
        try:
            signature = tool.signature
        except Exception as exc:
            raise ToolFailure.from_exception(exc) from None
        positional, keywords = _bind(signature, args)
        if signature.takes_context:
            keywords["_context"] = self._context(context, trace)
        try:
            with trace_env.exported(trace), call_logs.forwarded(self._transport, context.get("log_level")):
                _Deadline.running = True
                try:
                    result = tool.func(*positional, **keywords)
                    if type(result) not in _PLAIN and inspect.isawaitable(result):
                        result = self._run_to_completion(result)
                finally:
                    _Deadline.running = False
            blocks = content.blocks_of(result, self._classes)
            if blocks is not None:
                return results.encode(content.value_of(result)), blocks
            return results.encode(result), None
        except BaseException as exc:
            # SystemExit and KeyboardInterrupt too: a tool never ends the worker.
            # The traceback starts below this frame, at the tool.
            raise ToolFailure.from_exception(exc, exc.__traceback__.tb_next) from None
        finally:
            _disarm_interval_timers()

    def _find(self, name: str):
        tool = self._toolset.tools.get(name)
        if tool is not None:
            return tool
        message = f"function '{name}' not found under function directory"
        if self._config.get("functions_dir"):
            message += f" {self._config['functions_dir']}"
        matches = difflib.get_close_matches(name, list(self._toolset.tools), n=3)
        if matches:
            message += " (did you mean " + ", ".join(f"'{match}'" for match in matches) + "?)"
        failed = [error for error in self._toolset.errors if error.failed_import]
        if failed:
            message += "; modules that failed to import: " + ", ".join(
                f"{error.module} ({error.error})" for error in failed
            )
        if self._config.get("bundled_tools_hidden"):
            # The default picked ./functions/function_calling over the bundled
            # tools: a newcomer who made that folder may expect both.
            message += (
                "; the bundled tools are not used, since functions/function_calling exists "
                "in the current directory (--functions-dir chooses the directory)"
            )
        raise ToolFailure("NotFound", message)

    def _session_paths(self, context: dict) -> tuple:
        """(session dir, workspace, packages dir) of the call: its own session's
        when the supervisor sent them (one MCP session each), else the pool's."""
        if context is self._last_context:
            return self._last_paths  # the same parsed context as the last call's
        session = context.get("session") or {}
        paths = (
            session.get("dir") or self._config["session_dir"],
            session.get("workspace") or self._config["workspace"],
            session.get("packages_dir") or self._config.get("packages_dir"),
        )
        self._last_context, self._last_paths = context, paths
        return paths

    def _enter_session(self, context: dict) -> None:
        """The call runs in its session: its workspace as the current directory,
        its packages directory on sys.path (in place of the last session's).

        One call runs at a time in a worker, so this holds for the whole call.
        """
        _, workspace, packages = self._session_paths(context)
        try:
            os.chdir(workspace)
        except OSError:
            pass  # the tool gets the path in _context; a missing cwd is its own error
        if packages and packages != self._packages_on_path:
            if self._packages_on_path in sys.path:
                sys.path[sys.path.index(self._packages_on_path)] = packages
            else:
                sys.path.append(packages)
            self._packages_on_path = packages

    def _context(self, context: dict, trace=None) -> dict:
        """The `_context` a tool receives. Paths are pathlib.Path, as in the original convention.

        `attachment_store` and `human_prompt` are proxies that call back to the
        supervisor (proxies.py), instances of the project's own classes where
        it has them (standins.py); `human_prompt` is None when the call has no
        one to ask, as in the original convention. `progress` reports how far
        the call has come (a check and nothing more when nobody listens).
        `traceparent` and `tracestate` are the W3C trace context the call
        continues (None when it continues none, or has no tracestate).
        """
        session_id = context.get("session_id") or self._config.get("session_id")
        session_dir, workspace, packages = self._session_paths(context)
        store = self._attachment_stores.get(workspace)
        if store is None:
            store = self._attachment_stores[workspace] = self._classes.store(workspace, self._transport)
        prompt = None
        if context.get("human_prompt"):
            prompt = self._classes.prompt(session_id, context.get("node_id"), self._transport)
        built = {
            "python_workspace_root": pathlib.Path(workspace),
            "graph_directory": pathlib.Path(session_dir),
            "session_id": session_id,
            "node_id": context.get("node_id"),
            # A copy: the parsed context is reused for the session's next calls.
            "vars": copy.deepcopy(context["vars"]) if context.get("vars") else {},
            "attachment_store": store,
            "human_prompt": prompt,
            "progress": proxies.ProgressReporter(self._transport, bool(context.get("progress"))),
            "traceparent": trace[0] if trace else None,
            "tracestate": trace[1] if trace else None,
        }
        if packages:
            built["python_packages_dir"] = pathlib.Path(packages)
        host = context.get("host")
        if host:
            # The host program's own keys (`import toolpool`'s `context=`), as
            # they are; toolpool's keys above keep their values. A copy, as `vars`.
            for key, value in copy.deepcopy(host).items():
                built.setdefault(key, value)
        return built

    def _run_to_completion(self, awaitable):
        # One loop for the worker's lifetime: state an async tool keeps between
        # calls (a client session, a cached connection) stays bound to a live loop.
        import asyncio  # only workers that run async tools pay for the import

        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
        task = asyncio.ensure_future(awaitable, loop=self._loop)
        _Deadline.task = task
        try:
            return self._loop.run_until_complete(task)
        finally:
            _Deadline.task = None


# Results no coroutine hides behind (checked before inspect.isawaitable, per call).
_PLAIN = frozenset((type(None), bool, int, float, str, bytes, list, dict, tuple))

# Interval timers (setitimer, alarm) have no /proc file the supervisor could
# compare: one a call left armed would fire in the next call, so the shim
# disarms them after every call. The functions as they were when the shim
# started, before any tool module could replace them.
_INTERVAL_TIMERS = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)
_getitimer, _setitimer = signal.getitimer, signal.setitimer


def _disarm_interval_timers() -> None:
    for which in _INTERVAL_TIMERS:
        if _getitimer(which)[0]:
            _setitimer(which, 0)


def _bind(signature, args) -> tuple:
    """(positional, keyword) arguments for the call; every problem at once as InvalidArguments."""
    if not isinstance(args, dict):
        raise ToolFailure(
            "InvalidArguments", f"arguments must be an object (a map of names to values), got {type(args).__name__}"
        )
    if not args and not signature.visible:
        return [], {}  # a tool without parameters, called without arguments
    visible = {slot.name: slot for slot in signature.visible}
    missing, unexpected, wrong, hidden = [], [], [], []
    for key in args:
        if isinstance(key, str) and key.startswith("_"):
            hidden.append(f"argument '{key}': names starting with '_' cannot be set by the caller")
        elif not isinstance(key, str) or (key not in visible and not signature.takes_kwargs):
            unexpected.append(f"unexpected argument '{key}'")
    positional, keywords = [], {}
    for slot in signature.visible:
        if slot.name in args:
            try:
                value = coerce(args[slot.name], slot.annotation)
            except Mismatch as mismatch:
                wrong.append(f"argument '{slot.name}{mismatch.path}': {mismatch.problem}")
                continue
        elif slot.required:
            missing.append(f"missing required argument '{slot.name}'")
            continue
        elif not slot.may_omit:
            value = None  # optional without a default
        elif slot.positional_only:
            value = slot.default  # cannot be skipped when a later one is passed
        else:
            continue  # the function's own default applies
        if slot.positional_only:
            positional.append(value)
        else:
            keywords[slot.name] = value
    problems = missing + unexpected + wrong + hidden
    if problems:
        raise ToolFailure("InvalidArguments", "; ".join(problems))
    if signature.takes_kwargs:
        keywords.update((key, value) for key, value in args.items() if key not in visible)
    return positional, keywords
