"""Turning the agent's JSON arguments into the values a function's annotations ask for.

Lax where models commonly err (`lax=True`): "5" for an integer, "2.5" for a
number, "true"/"false"/"1"/"0" for a boolean, a JSON string for an array or
object, an integer for a number, a number for a string, an enum member's name
for the member. A union is tried member by member, first without the lax
conversions, so that `int | str` keeps "5" a string.
"""

import base64
import binascii
import datetime
import decimal
import json
import re
from typing import get_args

from .schema import enum_value, json_value
from .slots import struct_slots
from .typeinfo import NoneType, class_of, is_optional, Kind, kind_of, param_meta, strip_annotated, unwrap_alias

_INTEGER = re.compile(r"[+-]?\d+")
_BOOLEANS = {"true": True, "1": True, "false": False, "0": False}


class Mismatch(Exception):
    """A value does not fit its annotation. `path` locates it inside the argument: ".size[2]"."""

    def __init__(self, problem: str, path: str = ""):
        super().__init__(problem)
        self.problem = problem
        self.path = path


def coerce(value, tp, lax: bool = True):
    """`value` converted to what `tp` asks for; raises Mismatch."""
    return _COERCERS[kind_of(tp)](value, tp, lax)


def _at(step: str, value, tp, lax: bool):
    try:
        return coerce(value, tp, lax)
    except Mismatch as mismatch:
        raise Mismatch(mismatch.problem, step + mismatch.path) from None


def _expected(what: str, value) -> Mismatch:
    return Mismatch(f"expected {what}, got {_describe(value)}")


def _describe(value) -> str:
    """How a received JSON value is named in messages: "string 'abc'", "integer 5", "array"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {'true' if value else 'false'}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value!r}"
    if isinstance(value, str):
        text = repr(value)
        return "string " + (text if len(text) <= 60 else text[:59] + "…")
    if isinstance(value, (bytes, bytearray)):
        return f"binary of {len(value)} bytes"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _label(tp) -> str:
    """What a type is called in messages: "integer", "date-time string", "object (Point)"."""
    kind = kind_of(tp)
    if kind is Kind.ALIAS:
        return _label(unwrap_alias(tp))
    if kind is Kind.ANNOTATED:
        return _label(strip_annotated(tp)[0])
    if kind is Kind.UNION:
        return " or ".join(_label(member) for member in get_args(tp))
    if kind is Kind.LITERAL:
        return _one_of(get_args(tp))
    if kind is Kind.ENUM:
        return _one_of(list(tp))
    if kind in (Kind.DATACLASS, Kind.TYPEDDICT, Kind.PYDANTIC):
        return f"object ({class_of(tp).__name__})"
    return _LABELS[kind]


_LABELS = {
    Kind.UNANNOTATED: "any value", Kind.ANY: "any value", Kind.UNKNOWN: "any value", Kind.NONE: "null",
    Kind.BOOL: "boolean", Kind.INT: "integer", Kind.FLOAT: "number", Kind.STR: "string",
    Kind.BYTES: "base64 string", Kind.DATETIME: "date-time string (ISO 8601)",
    Kind.DATE: "date string (ISO 8601)", Kind.TIME: "time string (ISO 8601)",
    Kind.UUID: "UUID string", Kind.PATH: "path string", Kind.DECIMAL: "decimal string",
    Kind.ARRAY: "array", Kind.SET: "array", Kind.TUPLE: "array", Kind.MAPPING: "object",
}


def _one_of(values) -> str:
    return "one of " + ", ".join(repr(enum_value(value)) for value in values)


def _as_is(value, tp, lax):
    return value


def _none(value, tp, lax):
    if value is None:
        return None
    raise _expected("null", value)


def _alias(value, tp, lax):
    return coerce(value, unwrap_alias(tp), lax)


def _annotated(value, tp, lax):
    base, metadata = strip_annotated(tp)
    result = coerce(value, base, lax)
    meta = param_meta(metadata)
    if meta is None or meta.enum is None or (result is None and is_optional(base)):
        return result
    allowed = list(meta.enum)
    if result in allowed or json_value(result) in [json_value(item) for item in allowed]:
        return result
    raise _expected(_one_of(allowed), value)


def _union(value, tp, lax):
    members = get_args(tp)
    if value is None and NoneType in members:
        return None
    others = [member for member in members if member is not NoneType]
    if len(others) == 1:
        return coerce(value, others[0], lax)
    for strict_first in ((False, True) if lax else (False,)):
        for member in others:
            try:
                return coerce(value, member, strict_first)
            except Mismatch:
                pass
    raise _expected(_label(tp), value)


def _literal(value, tp, lax):
    for literal in get_args(tp):
        if _same(value, json_value(literal)):
            return literal
    if lax and isinstance(value, str):
        for literal in get_args(tp):
            if _spelled_as(value, json_value(literal)):
                return literal
    raise _expected(_label(tp), value)


def _enum(value, tp, lax):
    for member in tp:
        if _same(value, member.value):
            return member
    if lax and isinstance(value, str):
        for member in tp:
            if value == member.name or _spelled_as(value, member.value):
                return member
    raise _expected(_label(tp), value)


def _same(received, wanted) -> bool:
    """Equal and of the same JSON type (so True is not 1)."""
    return type(received) is type(wanted) and received == wanted


def _spelled_as(text: str, wanted) -> bool:
    """Whether a string spells a non-string value: "5" for 5, "TRUE" for True."""
    if isinstance(wanted, bool):
        return _BOOLEANS.get(text.strip().lower()) is wanted
    return not isinstance(wanted, str) and text.strip() == str(wanted)


def _bool(value, tp, lax):
    if isinstance(value, bool):
        return value
    if lax and isinstance(value, str) and value.strip().lower() in _BOOLEANS:
        return _BOOLEANS[value.strip().lower()]
    raise _expected("boolean", value)


def _int(value, tp, lax):
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if lax and isinstance(value, float) and value.is_integer():
        return int(value)
    if lax and isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        return int(value.strip())
    raise _expected("integer", value)


def _float(value, tp, lax):
    if isinstance(value, float):
        return value
    if lax and isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            pass
    if lax and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise _expected("number", value)


def _str(value, tp, lax):
    if isinstance(value, str):
        return value
    if lax and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise _expected("string", value)


def _bytes(value, tp, lax):
    if isinstance(value, (bytes, bytearray)):  # MessagePack bin: already bytes
        return class_of(tp)(value)
    if isinstance(value, str):
        try:
            return class_of(tp)(base64.b64decode(value, validate=True))
        except binascii.Error:
            pass
    raise _expected(_label(tp), value)


def _from_string(parse):
    """A coercer for a type written as a string: parse(text, cls) may raise ValueError."""
    def coercer(value, tp, lax):
        if isinstance(value, str):
            try:
                return parse(value, class_of(tp))
            except (ValueError, decimal.InvalidOperation):
                pass
        raise _expected(_label(tp), value)
    return coercer


def _iso(text: str, cls):
    # Python 3.10's fromisoformat does not take the "Z" UTC suffix.
    if cls is not datetime.date and text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    return cls.fromisoformat(text)


_decimal_from_text = _from_string(lambda text, cls: cls(text.strip()))


def _decimal(value, tp, lax):
    if isinstance(value, int) and not isinstance(value, bool):
        return decimal.Decimal(value)
    if lax and isinstance(value, float):
        return decimal.Decimal(repr(value))  # the float as written, not its binary expansion
    return _decimal_from_text(value, tp, lax)


def _as_json(value, lax, container: type, what: str):
    if isinstance(value, container):
        return value
    if lax and isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, container):
            return parsed
    raise _expected(what, value)


def _array(value, tp, lax) -> list:
    items = _as_json(value, lax, list, _label(tp))
    args = get_args(tp)
    if not args:
        return list(items)
    return [_at(f"[{index}]", item, args[0], lax) for index, item in enumerate(items)]


def _set(value, tp, lax):
    items = _array(value, tp, lax)
    try:
        return (frozenset if class_of(tp) is frozenset else set)(items)
    except TypeError:
        raise Mismatch("expected an array of hashable items (numbers, strings, ...)") from None


def _tuple(value, tp, lax):
    items = _as_json(value, lax, list, "array")
    args = get_args(tp)
    if len(args) == 2 and args[1] is Ellipsis:
        item_types = [args[0]] * len(items)
    elif args:
        if len(items) != len(args):
            raise Mismatch(f"expected an array of {len(args)} items, got an array of {len(items)}")
        item_types = args
    else:
        return tuple(items)
    return tuple(_at(f"[{index}]", item, item_type, lax) for index, (item, item_type) in enumerate(zip(items, item_types)))


def _mapping(value, tp, lax):
    obj = _as_json(value, lax, dict, "object")
    args = get_args(tp)
    if len(args) != 2:
        return dict(obj)
    key_type, value_type = args
    # JSON object keys are always strings: "1" becomes 1 for dict[int, ...].
    return {
        _at(f"[{json.dumps(key)}]", key, key_type, True): _at(f"[{json.dumps(key)}]", item, value_type, lax)
        for key, item in obj.items()
    }


def _struct(value, tp, lax):
    """A dataclass or TypedDict built from an object, field by field."""
    cls = class_of(tp)
    obj = _as_json(value, lax, dict, _label(tp))
    slots = struct_slots(cls)
    known = {slot.name for slot in slots}
    problems = [f"unexpected field '{key}'" for key in obj if key not in known]
    problems += [f"missing required field '{slot.name}'" for slot in slots if slot.required and slot.name not in obj]
    if problems:
        raise Mismatch("; ".join(problems))
    fields = {}
    for slot in slots:
        if slot.name in obj:
            fields[slot.name] = _at(f".{slot.name}", obj[slot.name], slot.annotation, lax)
        elif not slot.may_omit:
            fields[slot.name] = None
    if kind_of(cls) is Kind.TYPEDDICT:
        return fields
    try:
        return cls(**fields)
    except Exception as exc:
        raise Mismatch(f"cannot build {cls.__name__}: {type(exc).__name__}: {exc}") from None


def _pydantic(value, tp, lax):
    cls = class_of(tp)
    obj = _as_json(value, lax, dict, _label(tp))
    try:
        return cls.model_validate(obj)
    except Exception as exc:  # pydantic.ValidationError, with a multi-line message
        raise Mismatch(f"invalid {cls.__name__}: {' '.join(str(exc).split())}") from None


_COERCERS = {
    Kind.UNANNOTATED: _as_is,
    Kind.ANY: _as_is,
    Kind.UNKNOWN: _as_is,
    Kind.NONE: _none,
    Kind.ALIAS: _alias,
    Kind.ANNOTATED: _annotated,
    Kind.UNION: _union,
    Kind.LITERAL: _literal,
    Kind.ENUM: _enum,
    Kind.BOOL: _bool,
    Kind.INT: _int,
    Kind.FLOAT: _float,
    Kind.STR: _str,
    Kind.BYTES: _bytes,
    Kind.DATETIME: _from_string(_iso),
    Kind.DATE: _from_string(_iso),
    Kind.TIME: _from_string(_iso),
    Kind.UUID: _from_string(lambda text, cls: cls(text)),
    Kind.PATH: _from_string(lambda text, cls: cls(text)),
    Kind.DECIMAL: _decimal,
    Kind.ARRAY: _array,
    Kind.SET: _set,
    Kind.TUPLE: _tuple,
    Kind.MAPPING: _mapping,
    Kind.DATACLASS: _struct,
    Kind.TYPEDDICT: _struct,
    Kind.PYDANTIC: _pydantic,
}
