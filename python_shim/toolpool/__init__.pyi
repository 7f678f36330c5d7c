# Type stubs of `toolpool`: everything is imported lazily at run time
# (__init__.py's __getattr__), which type checkers cannot follow.
from collections.abc import Sequence
from dataclasses import dataclass

from ._errors import InvalidArguments as InvalidArguments
from ._errors import PoolBusy as PoolBusy
from ._errors import PoolError as PoolError
from ._errors import ToolError as ToolError
from ._errors import ToolNotFound as ToolNotFound
from ._errors import ToolRaised as ToolRaised
from ._errors import ToolTimeout as ToolTimeout
from ._errors import WorkerDied as WorkerDied
from ._errors import WorkflowError as WorkflowError
from ._pool import Pool as Pool
from ._tool import tool as tool

__all__ = [
    "ParamMeta",
    "tool",
    "Pool",
    "PoolError",
    "WorkflowError",
    "ToolError",
    "ToolTimeout",
    "WorkerDied",
    "InvalidArguments",
    "ToolNotFound",
    "ToolRaised",
    "PoolBusy",
]

@dataclass(frozen=True)
class ParamMeta:
    description: str | None = None
    enum: Sequence | None = None
