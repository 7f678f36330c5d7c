"""`toolpool.tool`: a tool's own settings, set where the tool is written."""

from __future__ import annotations

import math
from typing import Any, Callable, TypeVar, overload

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["tool"]

# Longest timeout a tool may set itself, as for `--timeout`: a day; and
# longest grace after it, as for `--timeout-grace`: an hour.
_MAX_TIMEOUT = 86400.0
_MAX_GRACE = 3600.0

_HINTS = (
    ("read_only", "readOnlyHint"),
    ("destructive", "destructiveHint"),
    ("idempotent", "idempotentHint"),
    ("open_world", "openWorldHint"),
)


@overload
def tool(func: F) -> F: ...


@overload
def tool(
    func: None = None,
    *,
    timeout: float | None = None,
    title: str | None = None,
    read_only: bool | None = None,
    destructive: bool | None = None,
    idempotent: bool | None = None,
    open_world: bool | None = None,
    timeout_grace: float | None = None,
) -> Callable[[F], F]: ...


def tool(
    func=None,
    *,
    timeout=None,
    title=None,
    read_only=None,
    destructive=None,
    idempotent=None,
    open_world=None,
    timeout_grace=None,
):
    """Gives a tool its own settings, and returns the function itself
    unchanged (only attributes are set on it), so that a runtime that knows
    nothing of toolpool still calls it as it is:

        @tool(timeout=300, title="Render a video", read_only=False, destructive=False)
        def render(script: str) -> str: ...

    `timeout` (seconds): the tool's own timeout, which a caller's or a
    workflow file's wins over, and which wins over the pool's default.
    `timeout_grace` (seconds): how long the tool may clean up after its
    timeout — `TimeoutError` is raised in its main thread (an async tool's
    task is cancelled), so `finally` and `with` run — before its worker is
    killed; the same order of precedence.
    `title` and the behaviour hints (`read_only`, `destructive`,
    `idempotent`, `open_world`) are what MCP's `tools/list` shows; they are
    the `mcp_title` and `mcp_annotations` attributes a folder may also set
    by hand. A setting left None is not set.
    """

    for name, value, most in (("timeout", timeout, _MAX_TIMEOUT), ("timeout_grace", timeout_grace, _MAX_GRACE)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"tool({name}=...): expected seconds as a number, got {type(value).__name__}")
        if not (0 < value <= most) or math.isnan(value):
            raise ValueError(f"tool({name}=...): expected more than 0 and at most {most:g} seconds, got {value}")
    if title is not None and (not isinstance(title, str) or not title.strip()):
        raise ValueError("tool(title=...): expected a non-empty string")
    hints = {}
    for name, hint in _HINTS:
        value = locals()[name]
        if value is not None:
            if not isinstance(value, bool):
                raise TypeError(f"tool({name}=...): expected True or False, got {type(value).__name__}")
            hints[hint] = value

    def mark(function: F) -> F:
        if timeout is not None:
            function.mcp_timeout = float(timeout)
        if timeout_grace is not None:
            function.mcp_timeout_grace = float(timeout_grace)
        if title is not None:
            function.mcp_title = title.strip()
        if hints:
            given = getattr(function, "mcp_annotations", None)
            function.mcp_annotations = {**(given if isinstance(given, dict) else {}), **hints}
        return function

    if func is not None:
        return mark(func)
    return mark
