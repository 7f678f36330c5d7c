"""`from utils.function_catalog import ParamMeta`, as the original convention
spells it; `tool`, a tool's own settings, from the same place."""

from toolpool import ParamMeta, tool

__all__ = ["ParamMeta", "tool"]
