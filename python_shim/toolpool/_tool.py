"""`toolpool.tool`: a tool's own settings, set where the tool is written."""

from __future__ import annotations

import math
from typing import Any, Callable, TypeVar, overload

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["tool"]

# Longest timeout a tool may set itself, as for `--timeout`: a day.
_MAX_TIMEOUT = 86400.0

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
):
    """Gives a tool its own settings, and returns the function itself
    unchanged (only attributes are set on it), so that a runtime that knows
    nothing of toolpool still calls it as it is:

        @tool(timeout=300, title="Render a video", read_only=False, destructive=False)
        def render(script: str) -> str: ...

    `timeout` (seconds): the tool's own timeout, which a caller's or a
    workflow file's wins over, and which wins over the pool's default.
    `title` and the behaviour hints (`read_only`, `destructive`,
    `idempotent`, `open_world`) are what MCP's `tools/list` shows; they are
    the `mcp_title` and `mcp_annotations` attributes a folder may also set
    by hand. A setting left None is not set.
    """

    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(f"tool(timeout=...): expected seconds as a number, got {type(timeout).__name__}")
        if not (0 < timeout <= _MAX_TIMEOUT) or math.isnan(timeout):
            raise ValueError(f"tool(timeout=...): expected more than 0 and at most {_MAX_TIMEOUT:g} seconds, got {timeout}")
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
        if title is not None:
            function.mcp_title = title.strip()
        if hints:
            given = getattr(function, "mcp_annotations", None)
            function.mcp_annotations = {**(given if isinstance(given, dict) else {}), **hints}
        return function

    if func is not None:
        return mark(func)
    return mark
