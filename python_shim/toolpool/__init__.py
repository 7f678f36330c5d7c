"""The Python API for tool authors.

Tools are plain top-level functions; the only thing they may import from
toolpool is `ParamMeta`, the per-parameter annotation metadata:

    from typing import Annotated
    from toolpool import ParamMeta

    def save_file(path: Annotated[str, ParamMeta(description="workspace-relative path")]) -> str:
        ...
"""

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ParamMeta"]


@dataclass(frozen=True)
class ParamMeta:
    """Schema details for one parameter, given as `Annotated[T, ParamMeta(...)]`.

    `description` becomes the parameter's JSON Schema description; `enum`, when
    given, replaces the allowed values (and the schema's `type` when they all
    share one).
    """

    description: str | None = None
    enum: Sequence | None = None
