"""JSON Schema for a function's parameters, from its resolved type hints (docs/catalog.md)."""

import enum
import math
import pathlib
from typing import get_args

from .slots import struct_slots
from .typeinfo import EMPTY, NoneType, class_of, Kind, kind_of, param_meta, strip_annotated, unwrap_alias

NOT_JSON = object()  # json_value's answer for a value JSON cannot represent

_PLAIN = {
    Kind.UNANNOTATED: {"type": "string"},
    Kind.ANY: {},
    Kind.UNKNOWN: {},
    Kind.NONE: {"type": "null"},
    Kind.BOOL: {"type": "boolean"},
    Kind.INT: {"type": "integer"},
    Kind.FLOAT: {"type": "number"},
    Kind.STR: {"type": "string"},
    Kind.BYTES: {"type": "string", "contentEncoding": "base64"},
    Kind.DATETIME: {"type": "string", "format": "date-time"},
    Kind.DATE: {"type": "string", "format": "date"},
    Kind.TIME: {"type": "string", "format": "time"},
    Kind.UUID: {"type": "string", "format": "uuid"},
    Kind.PATH: {"type": "string", "format": "path"},
    Kind.DECIMAL: {"type": "string", "format": "decimal"},
}


def parameters_schema(signature, docs: dict) -> dict:
    """The `parameters` object of a catalog entry; `docs` are descriptions from the docstring."""
    properties = {}
    required = []
    for slot in signature.visible:
        properties[slot.name] = slot_schema(slot, docs.get(slot.name))
        if slot.required:
            required.append(slot.name)
    schema = {"type": "object", "properties": properties, "required": required}
    if not signature.takes_kwargs:
        schema["additionalProperties"] = False
    return schema


def output_schema(returns, content_classes: tuple = ()) -> tuple:
    """(MCP `outputSchema`, wrapped) for a return annotation; (None, False) when it says nothing.

    MCP wants an object schema: a result whose annotation is not an object
    (a list, a number, a union) is described as `{"result": <schema>}` and sent
    that way (`wrapped`). No schema for an unannotated, `Any`, `None` or
    unknown return, nor for attachment results (they are sent as content),
    nor for a sequence that says nothing of its items (bare `list`, `tuple`,
    `list[Any]`): such a schema lets a client check nothing, and it would
    make every result travel twice (`structuredContent` beside its text), a
    table's megabytes included — fastmcp draws the same line.
    Unknown keys are allowed at every level: a result with more fields than
    declared is still a result.
    """
    if returns is EMPTY or _mentions(returns, content_classes):
        return None, False
    schema = _open(type_schema(returns))
    if not schema or schema == {"type": "null"} or _any_items(schema):
        return None, False
    if schema.get("type") == "object":
        return schema, False
    result = {**schema, "description": schema.get("description") or WRAPPED_RESULT}
    return {"type": "object", "properties": {"result": result}, "required": ["result"]}, True


def _any_items(schema: dict) -> bool:
    """True for an array schema with nothing said of its items or length."""
    return schema.get("type") == "array" and not schema.get("items") and set(schema) <= {"type", "items", "description"}


# How a wrapped result's one property is described (clients and linters want
# every property described).
WRAPPED_RESULT = "What the function returns"


def _mentions(tp, classes: tuple) -> bool:
    """True when `tp` is, or has among its arguments, one of `classes` (or a subclass)."""
    if isinstance(tp, type) and classes and issubclass(tp, classes):
        return True
    return any(_mentions(arg, classes) for arg in get_args(tp) if arg is not tp)


def _open(schema):
    """`schema` without `additionalProperties: false`, at every level."""
    if isinstance(schema, list):
        return [_open(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: _open(value)
        for key, value in schema.items()
        if not (key == "additionalProperties" and value is False)
    }


def slot_schema(slot, doc: str | None = None, expanding: frozenset = frozenset()) -> dict:
    schema = type_schema(slot.annotation, expanding)
    description = slot.description or doc
    if description and "description" not in schema:
        schema["description"] = description
    if slot.default is not EMPTY:
        default = json_value(slot.default)
        # A default its own type refuses (`null` on a string: an Optional
        # parameter) is left out: validating clients would reject the schema.
        if default is not NOT_JSON and (default is not None or _admits_null(schema)):
            schema["default"] = default
    return schema


def _admits_null(schema: dict) -> bool:
    """True when `null` is a value `schema` allows (no type, or null among them)."""
    if "anyOf" in schema or "oneOf" in schema:
        return any(_admits_null(part) for part in schema.get("anyOf", schema.get("oneOf", [])) if isinstance(part, dict))
    kind = schema.get("type")
    if kind is None:
        return "enum" not in schema or None in schema["enum"]
    return kind == "null" or (isinstance(kind, list) and "null" in kind)


def type_schema(tp, expanding: frozenset = frozenset()) -> dict:
    """The schema of one annotation. `expanding`: nested classes being expanded (recursion guard)."""
    kind = kind_of(tp)
    if kind in _PLAIN:
        return dict(_PLAIN[kind])
    return _BUILDERS[kind](tp, expanding)


def _alias(tp, expanding):
    return type_schema(unwrap_alias(tp), expanding)


def _annotated(tp, expanding):
    base, metadata = strip_annotated(tp)
    schema = type_schema(base, expanding)
    meta = param_meta(metadata)
    if meta is not None:
        if meta.enum is not None:
            _set_enum(schema, [enum_value(value) for value in meta.enum])
        if meta.description:
            schema["description"] = meta.description
    return schema


def _union(tp, expanding):
    members = [member for member in get_args(tp) if member is not NoneType]
    if len(members) == 1:
        return type_schema(members[0], expanding)
    return {"anyOf": [type_schema(member, expanding) for member in members]}


def _literal(tp, expanding):
    schema = {}
    _set_enum(schema, [enum_value(value) for value in get_args(tp)])
    return schema


def _enum(tp, expanding):
    schema = {}
    _set_enum(schema, [enum_value(member) for member in tp])
    return schema


def _array(tp, expanding, **extra):
    schema = {"type": "array"}
    args = get_args(tp)
    if args:
        schema["items"] = type_schema(args[0], expanding)
    schema.update(extra)
    return schema


def _set(tp, expanding):
    return _array(tp, expanding, uniqueItems=True)


def _tuple(tp, expanding):
    args = get_args(tp)
    if len(args) == 2 and args[1] is Ellipsis:
        return _array(tp, expanding)
    schema = {"type": "array"}
    if args:
        schema["prefixItems"] = [type_schema(arg, expanding) for arg in args]
        schema["minItems"] = schema["maxItems"] = len(args)
    return schema


def _mapping(tp, expanding):
    schema = {"type": "object"}
    args = get_args(tp)
    if len(args) == 2:
        schema["additionalProperties"] = type_schema(args[1], expanding)
    return schema


def _struct(tp, expanding):
    """Nested object for a dataclass, TypedDict or pydantic model."""
    cls = class_of(tp)
    if cls in expanding:
        return {"type": "object"}  # a type that contains itself: stop at one level
    inner = expanding | {cls}
    slots = struct_slots(cls)
    schema = {
        "type": "object",
        "properties": {slot.name: slot_schema(slot, expanding=inner) for slot in slots},
        "required": [slot.name for slot in slots if slot.required],
    }
    # A pydantic model ignores unknown keys unless it forbids them; the shim
    # refuses them for dataclasses and TypedDicts.
    if kind_of(cls) is not Kind.PYDANTIC or cls.model_config.get("extra") == "forbid":
        schema["additionalProperties"] = False
    return schema


_BUILDERS = {
    Kind.ALIAS: _alias,
    Kind.ANNOTATED: _annotated,
    Kind.UNION: _union,
    Kind.LITERAL: _literal,
    Kind.ENUM: _enum,
    Kind.ARRAY: _array,
    Kind.SET: _set,
    Kind.TUPLE: _tuple,
    Kind.MAPPING: _mapping,
    Kind.DATACLASS: _struct,
    Kind.TYPEDDICT: _struct,
    Kind.PYDANTIC: _struct,
}


def _set_enum(schema: dict, values: list) -> None:
    """Put `enum` in the schema, with the `type` the values share (no `type` when they differ)."""
    shared = json_type_of(values)
    if shared:
        schema["type"] = shared
    else:
        schema.pop("type", None)
    schema["enum"] = values


def json_type_of(values: list) -> str | None:
    """The JSON type every value has (integers count as numbers among floats), or None."""
    types = {_json_type(value) for value in values}
    if types == {"integer", "number"}:
        return "number"
    return types.pop() if len(types) == 1 else None


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def enum_value(value):
    """An allowed value as the schema lists it: its JSON form, or its str() when it has none."""
    converted = json_value(value)
    return str(value) if converted is NOT_JSON else converted


def json_value(value):
    """`value` as JSON data (Path → str, Enum → its value, tuple → list), or NOT_JSON."""
    if isinstance(value, enum.Enum):
        return json_value(value.value)
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else NOT_JSON  # MessagePack's integer range
    if isinstance(value, float):
        return value if math.isfinite(value) else NOT_JSON
    if isinstance(value, pathlib.PurePath):
        return str(value)
    if isinstance(value, (list, tuple)):
        items = [json_value(item) for item in value]
        return NOT_JSON if any(item is NOT_JSON for item in items) else items
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            return NOT_JSON
        items = {key: json_value(item) for key, item in value.items()}
        return NOT_JSON if any(item is NOT_JSON for item in items.values()) else items
    return NOT_JSON
