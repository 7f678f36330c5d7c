"""`from utils.function_catalog import ParamMeta`, as the original convention spells it."""

from toolpool import ParamMeta

__all__ = ["ParamMeta"]
