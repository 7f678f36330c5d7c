"""A tool's return value as JSON-able data, ready for MessagePack and the agent."""

import base64
import collections.abc
import dataclasses
import datetime
import decimal
import enum
import pathlib
import sys
import uuid

_INT_MIN = -(2**63)       # the widest integers MessagePack (and serde_json) carry;
_UINT_MAX = 2**64 - 1     # anything wider is sent as its decimal string
# Deepest nesting of lists and dicts in a result. The supervisor refuses
# messages nested deeper than 128 levels (src/protocol.rs, MAX_DEPTH): a
# deeper result is this clear error instead of a killed worker.
MAX_DEPTH = 100


def to_jsonable(value):
    """JSON-able values as they are; bytes → base64; datetime/date/time → ISO 8601;
    set/frozenset/tuple → list; dataclass → dict; Enum → its value; UUID, Decimal,
    Path → str; pydantic model → model_dump(mode="json"); dict keys → str;
    anything else → str(value)."""
    return _convert(value, set())


def _convert(value, open_containers: set):
    if isinstance(value, enum.Enum):
        return _convert(value.value, open_containers)
    if value is None or isinstance(value, (str, bool, float)):
        return value
    if isinstance(value, int):
        return value if _INT_MIN <= value <= _UINT_MAX else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, decimal.Decimal, pathlib.PurePath)):
        return str(value)
    if _is_pydantic_model(value):
        return _convert(value.model_dump(mode="json"), open_containers)
    is_dataclass = dataclasses.is_dataclass(value) and not isinstance(value, type)
    is_mapping = isinstance(value, collections.abc.Mapping)
    if not (is_dataclass or is_mapping or isinstance(value, (list, tuple, set, frozenset))):
        return str(value)
    # A container that contains itself would recurse forever.
    if id(value) in open_containers:
        raise ValueError(f"the result contains itself (a {type(value).__name__} inside itself)")
    if len(open_containers) >= MAX_DEPTH:
        raise ValueError(f"the result is nested deeper than {MAX_DEPTH} levels of lists and dicts")
    open_containers.add(id(value))
    try:
        if is_dataclass:
            return {
                field.name: _convert(getattr(value, field.name), open_containers)
                for field in dataclasses.fields(value)
            }
        if is_mapping:
            return {_key(key): _convert(item, open_containers) for key, item in value.items()}
        return [_convert(item, open_containers) for item in value]
    finally:
        open_containers.discard(id(value))


def _key(key) -> str:
    """A dict key as JSON spells it (json.dumps does the same): True → "true", None → "null"."""
    if isinstance(key, str):
        return key
    if isinstance(key, enum.Enum):
        return _key(key.value)
    if key is None or isinstance(key, bool):
        return {None: "null", True: "true", False: "false"}[key]
    return str(key)


def _is_pydantic_model(value) -> bool:
    pydantic = sys.modules.get("pydantic")
    base = getattr(pydantic, "BaseModel", None) if pydantic else None
    return base is not None and isinstance(value, base) and hasattr(value, "model_dump")
