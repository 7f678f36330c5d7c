"""What a type annotation means for the agent: shared by the schema builder and the argument coercion.

`kind_of` sorts an annotation into one `Kind`; both
schema.py and coerce.py dispatch on that kind, so they can never disagree on
what an annotation is.
"""

import collections.abc
import dataclasses
import datetime
import decimal
import enum
import inspect
import pathlib
import sys
import types
import typing
import uuid
from typing import Annotated, Any, Literal, Union, get_args, get_origin

EMPTY = inspect.Parameter.empty
NoneType = type(None)

# Wrappers that only say something about presence in a TypedDict (3.11+).
_PRESENCE_WRAPPERS = tuple(
    wrapper for wrapper in (getattr(typing, "Required", None), getattr(typing, "NotRequired", None)) if wrapper
)


class Kind(str, enum.Enum):
    """What an annotation is, as far as the agent is concerned.

    A str mixin for speed only: the dispatch tables are looked up once per
    value converted, and str's hash is C where Enum's is Python code. Compare
    kinds with `is`.
    """

    UNANNOTATED = "unannotated"
    ANY = "any"  # Any, object
    NONE = "none"
    ALIAS = "alias"  # NewType, Required[T], NotRequired[T]: see unwrap_alias
    ANNOTATED = "annotated"
    UNION = "union"
    LITERAL = "literal"
    ENUM = "enum"
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    STR = "str"
    BYTES = "bytes"  # bytes, bytearray
    DATETIME = "datetime"
    DATE = "date"
    TIME = "time"
    UUID = "uuid"
    DECIMAL = "decimal"
    PATH = "path"  # any pathlib.PurePath
    ARRAY = "array"  # list and the sequence ABCs
    SET = "set"
    TUPLE = "tuple"
    MAPPING = "mapping"
    DATACLASS = "dataclass"
    TYPEDDICT = "typeddict"
    PYDANTIC = "pydantic"  # a pydantic v2 model
    UNKNOWN = "unknown"  # a TypeVar, an unresolved string, any other class


_ARRAY_ORIGINS = {
    list, collections.abc.Sequence, collections.abc.MutableSequence,
    collections.abc.Iterable, collections.abc.Collection,
}
_SET_ORIGINS = {set, frozenset, collections.abc.Set, collections.abc.MutableSet}
_MAPPING_ORIGINS = {dict, collections.abc.Mapping, collections.abc.MutableMapping}
# Exact classes only: a subclass of str or int is some other type the
# function expects to receive, which the agent cannot send.
_SCALAR_KINDS = {
    bool: Kind.BOOL, int: Kind.INT, float: Kind.FLOAT, str: Kind.STR,
    bytes: Kind.BYTES, bytearray: Kind.BYTES,
    datetime.datetime: Kind.DATETIME, datetime.date: Kind.DATE, datetime.time: Kind.TIME,
    uuid.UUID: Kind.UUID, decimal.Decimal: Kind.DECIMAL,
}


def kind_of(tp) -> "Kind":
    """The Kind of an annotation; Kind.ALIAS means: look at unwrap_alias(tp)."""
    if tp is EMPTY:
        return Kind.UNANNOTATED
    if tp is Any or tp is object:
        return Kind.ANY
    if tp is None or tp is NoneType:
        return Kind.NONE
    origin = get_origin(tp)
    if hasattr(tp, "__supertype__") or (origin is not None and origin in _PRESENCE_WRAPPERS):
        return Kind.ALIAS
    if origin is Annotated:
        return Kind.ANNOTATED
    if origin is Union or origin is types.UnionType:
        return Kind.UNION
    if origin is Literal:
        return Kind.LITERAL
    cls = origin or tp
    if not isinstance(cls, type):
        return Kind.UNKNOWN  # a TypeVar, a string that could not be resolved, ...
    if issubclass(cls, enum.Enum):
        return Kind.ENUM
    if cls in _SCALAR_KINDS:
        return _SCALAR_KINDS[cls]
    if issubclass(cls, pathlib.PurePath):
        return Kind.PATH
    if cls in _ARRAY_ORIGINS:
        return Kind.ARRAY
    if cls in _SET_ORIGINS:
        return Kind.SET
    if cls is tuple:
        return Kind.TUPLE
    if dataclasses.is_dataclass(cls):
        return Kind.DATACLASS
    if issubclass(cls, dict) and hasattr(cls, "__required_keys__"):
        return Kind.TYPEDDICT
    if cls in _MAPPING_ORIGINS:
        return Kind.MAPPING
    if _is_pydantic_model(cls):
        return Kind.PYDANTIC
    return Kind.UNKNOWN


def unwrap_alias(tp):
    """Strip what does not change the value: NewType, Required[...] and NotRequired[...]."""
    while kind_of(tp) is Kind.ALIAS:
        tp = tp.__supertype__ if hasattr(tp, "__supertype__") else get_args(tp)[0]
    return tp


def strip_annotated(tp) -> tuple:
    """(the annotated type, its metadata) for Annotated[T, ...]; (tp, ()) otherwise."""
    if get_origin(tp) is Annotated:
        return tp.__origin__, tuple(tp.__metadata__)
    return tp, ()


def param_meta(metadata):
    """The first ParamMeta in Annotated metadata, or None.

    Recognised by class name and fields rather than identity: a project may
    bring its own `utils.function_catalog.ParamMeta`, which then shadows ours.
    """
    for item in metadata:
        if type(item).__name__ == "ParamMeta" and hasattr(item, "description") and hasattr(item, "enum"):
            return item
    return None


def is_optional(tp) -> bool:
    """True for Optional[T], T | None, Union[..., None], also inside Annotated[...]."""
    base = unwrap_alias(strip_annotated(unwrap_alias(tp))[0])
    return kind_of(base) is Kind.UNION and NoneType in get_args(base)


def class_of(tp) -> type:
    """The class behind a possibly subscripted type: list for list[int]."""
    return get_origin(tp) or tp


def _is_pydantic_model(cls) -> bool:
    # Only models of pydantic v2 (model_fields); pydantic is never imported
    # here: a tool that uses it has imported it already.
    pydantic = sys.modules.get("pydantic")
    base = getattr(pydantic, "BaseModel", None) if pydantic else None
    return base is not None and issubclass(cls, base) and cls is not base and hasattr(cls, "model_fields")
