"""The exceptions of `import toolpool`.

`ToolError` is a failed call: `str(error)` is exactly the text the agent
gets (the CLI prints the same), `.kind` says why in one word, `.tool` names
the tool. `PoolError` is a pool that cannot serve at all.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "PoolError",
    "WorkflowError",
    "ToolError",
    "ToolTimeout",
    "WorkerDied",
    "InvalidArguments",
    "ToolNotFound",
    "ToolRaised",
    "PoolBusy",
    "tool_error",
]


class PoolError(Exception):
    """A pool that cannot start, is closed, or is used where it cannot serve
    (a forked child of the process that made it). `str(error)` is the text
    the `toolpool` command prints for the same problem."""


class WorkflowError(ValueError):
    """A workflow file that cannot be resolved (`Pool.resolve`): the text
    `toolpool resolve` prints."""


class ToolError(Exception):
    """A failed call. `str(error)` is the agent-facing text, e.g.
    ``Tool wait error: TimeoutError: function 'wait' timed out after 2 s; ...``.

    Attributes: `kind` (``"timeout"``, ``"raised"``, ``"worker_died"``,
    ``"invalid_arguments"``, ``"not_found"``, ``"pool_busy"``,
    ``"result_too_large"``, ``"protocol_error"``), `tool` (the name called),
    `type_name` (the ``<Type>`` of the text) and `message` (the text after it).
    """

    kind: str = "error"

    def __init__(self, text: str, *, kind: str | None = None, tool: str = "", type_name: str = "", message: str = ""):
        super().__init__(text)
        self.text = text
        if kind is not None:
            self.kind = kind
        self.tool = tool
        self.type_name = type_name
        self.message = message

    def __str__(self) -> str:
        return self.text


class ToolTimeout(ToolError, TimeoutError):
    """The call ran past its timeout: its worker, and every process it
    started, was killed."""

    kind = "timeout"


class WorkerDied(ToolError):
    """The worker process died (or broke the protocol) during the call."""

    kind = "worker_died"


class InvalidArguments(ToolError):
    """The arguments do not fit the tool's parameters; the text names each
    problem, so a model can correct them."""

    kind = "invalid_arguments"


class ToolNotFound(ToolError):
    """No tool of that name (or its module failed to import)."""

    kind = "not_found"


class ToolRaised(ToolError):
    """The tool raised. `exc_type` is the exception's type name, `traceback`
    its Python traceback text (None when the worker sent none)."""

    kind = "raised"

    def __init__(self, text: str, *, exc_type: str, traceback: str | None, **fields: Any):
        super().__init__(text, **fields)
        self.exc_type = exc_type
        self.traceback = traceback


class PoolBusy(ToolError):
    """No worker became free within the queue-wait limit."""

    kind = "pool_busy"


_BY_KIND: dict[str, type[ToolError]] = {
    cls.kind: cls for cls in (ToolTimeout, WorkerDied, InvalidArguments, ToolNotFound, PoolBusy)
}


def tool_error(done: dict) -> Exception:
    """The exception for a failed call's `done` message of the channel."""
    kind = done.get("kind", "error")
    text = done.get("text", "")
    if kind == "pool_closed":
        return PoolError(text)
    if kind == "bad_request":  # a session name or timeout the caller got wrong
        return ValueError(text)
    error = done.get("error") or {}
    fields = {
        "kind": kind,
        "tool": done.get("tool", ""),
        "type_name": error.get("type", ""),
        "message": error.get("message", ""),
    }
    if kind == "raised":
        return ToolRaised(text, exc_type=error.get("type", ""), traceback=error.get("traceback"), **fields)
    return _BY_KIND.get(kind, ToolError)(text, **fields)
