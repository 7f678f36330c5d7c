"""toolpool: Python function tools run out of process, with timeouts that hold.

For tool authors, what a tool may import is `ParamMeta`, the per-parameter
annotation metadata, and `tool`, its own settings (a timeout, a title, MCP's
behaviour hints), neither of which changes the function:

    from typing import Annotated
    from toolpool import ParamMeta, tool

    @tool(timeout=120, destructive=False)
    def save_file(path: Annotated[str, ParamMeta(description="workspace-relative path")]) -> str:
        ...

For programs that run tools (agent runtimes, test suites), `Pool` runs a
folder of them in a pool of isolated worker processes:

    import toolpool

    with toolpool.Pool("my_tools", workers=4, timeout=30) as pool:
        pool.invoke("convert_temperature", {"value": 100})      # '212.0 °F'
        pool.invoke("wait", {"seconds": 60}, timeout=2)         # raises toolpool.ToolTimeout

Everything but `ParamMeta` and `tool` is imported on first use: a worker that
imports them pays for nothing else.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._tool import tool

_LAZY = {
    "Pool": "_pool",
    "PoolError": "_errors",
    "WorkflowError": "_errors",
    "ToolError": "_errors",
    "ToolTimeout": "_errors",
    "WorkerDied": "_errors",
    "InvalidArguments": "_errors",
    "ToolNotFound": "_errors",
    "ToolRaised": "_errors",
    "PoolBusy": "_errors",
}

__all__ = ["ParamMeta", "tool", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'toolpool' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))


@dataclass(frozen=True)
class ParamMeta:
    """Schema details for one parameter, given as `Annotated[T, ParamMeta(...)]`.

    `description` becomes the parameter's JSON Schema description; `enum`, when
    given, replaces the allowed values (and the schema's `type` when they all
    share one).
    """

    description: str | None = None
    enum: Sequence | None = None
