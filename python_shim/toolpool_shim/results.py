"""A tool's return value as JSON-able data, ready for MessagePack and the agent."""

import base64
import collections.abc
import dataclasses
import datetime
import decimal
import enum
import importlib.machinery
import json
import marshal
import pathlib
import sys
import sysconfig
import uuid

_INT_MIN = -(2**63)       # the widest integers MessagePack (and serde_json) carry;
_UINT_MAX = 2**64 - 1     # anything wider is sent as its decimal string
# Deepest nesting of lists and dicts in a result. The supervisor refuses
# messages nested deeper than 128 levels (src/protocol/mod.rs, MAX_DEPTH): a
# deeper result is this clear error instead of a killed worker.
MAX_DEPTH = 100


class Encoded:
    """A result ready for its reply, as one blob encoded in C where the
    supervisor gets exactly what to_jsonable gives from it: `marshal.dumps`
    (`marshalled`, turned into JSON by src/protocol/marshal.rs), else JSON
    text from the standard library's C encoder (`json_text`); otherwise the
    walked value."""

    __slots__ = ("json_text", "marshalled", "value")

    def __init__(self, json_text=None, value=None, marshalled=None):
        self.json_text = json_text
        self.marshalled = marshalled
        self.value = value

    def reply_field(self) -> tuple:
        """(the reply's key for the result, what it holds)."""
        if self.marshalled is not None:
            return "value_marshal", self.marshalled
        return ("value_json", self.json_text) if self.json_text is not None else ("value", self.value)

    def data(self):
        """The JSON-able data any way it was encoded (for tests and logs)."""
        if self.marshalled is not None:
            return to_jsonable(marshal.loads(self.marshalled))
        return json.loads(self.json_text) if self.json_text is not None else self.value


_NULL = Encoded(json_text="null")


def encode(value) -> Encoded:
    """The result as one encoded blob when a C encoder can give exactly what
    to_jsonable gives, else the walked value; raises what to_jsonable raises."""
    if value is None:
        return _NULL  # the result of every tool that returns nothing
    marshalled = _marshalled(value)
    if marshalled is not None:
        return Encoded(marshalled=marshalled)
    text = _json_text(value)
    return Encoded(json_text=text) if text is not None else Encoded(value=to_jsonable(value))


def _marshalled(value):
    """`marshal.dumps(value, 4)` when it holds only what marshal writes
    exactly: None, bool, int, float, complex, str, bytes, bytearray,
    memoryview, tuple, list, set, frozenset and dict, exact types only
    (marshal refuses subclasses, enums, dates, dataclasses... with
    ValueError: the JSON encoder or the walk converts those). marshal also
    writes any other object with the buffer protocol as bytes (a numpy
    scalar or array, array.array); where a module that defines such types
    is loaded and the blob may hold bytes, the blob is read back and
    compared, and a result that differs takes the other paths."""
    try:
        blob = marshal.dumps(value, 4)
    except ValueError:
        return None
    if (b"s" in blob or b"\xf3" in blob) and _foreign_buffers_possible():
        try:
            if marshal.loads(blob) != value:
                return None
        except Exception:  # a comparison that raises (a numpy array), or recurses without end
            return None
    return blob


# Modules of the standard library whose types have the buffer protocol.
_BUFFER_MODULES = frozenset({"array", "mmap", "_ctypes"})
# Third-party extension modules known to define no result-worthy buffer type.
_NO_BUFFER_PACKAGES = frozenset({"msgpack"})
_STDLIB_DIRS = tuple(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib"))
_EXTENSION_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)
_buffer_check = [-1, False]  # (len(sys.modules) when checked, the answer)


def _foreign_buffers_possible() -> bool:
    """Whether a loaded module may define a buffer type marshal would write
    as bytes: array, mmap, ctypes, or any extension module from outside the
    standard library. Recomputed when the count of loaded modules changes."""
    count = len(sys.modules)
    if _buffer_check[0] != count:
        _buffer_check[:] = [count, any(_may_define_buffers(name, module)
                                       for name, module in list(sys.modules.items()))]
    return _buffer_check[1]


def _may_define_buffers(name: str, module) -> bool:
    if name in _BUFFER_MODULES:
        return True
    path = getattr(module, "__file__", None)
    if not isinstance(path, str) or not path.endswith(_EXTENSION_SUFFIXES):
        return False
    return not path.startswith(_STDLIB_DIRS) and name.partition(".")[0] not in _NO_BUFFER_PACKAGES


_NOT_TEXT = object()


def _as_text(value):
    """Scalars JSON has no type for, as text: bytes as base64, dates in ISO
    8601, UUID/Decimal/Path as str; _NOT_TEXT for anything else."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, decimal.Decimal, pathlib.PurePath)):
        return str(value)
    return _NOT_TEXT


def _default(value):
    """The C encoder's hook for what JSON has no type for: as _convert converts it."""
    if isinstance(value, enum.Enum):
        return value.value
    text = _as_text(value)
    if text is not _NOT_TEXT:
        return text
    if _is_pydantic_model(value):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    if isinstance(value, collections.abc.Mapping):
        return dict(value)
    if isinstance(value, (set, frozenset)):
        return list(value)
    return str(value)


# No circular check (a quarter of the encoder's time): a container inside
# itself recurses until RecursionError, and the walk then names it.
_ENCODER = json.JSONEncoder(default=_default, ensure_ascii=False, allow_nan=False,
                            check_circular=False, separators=(",", ":"))
# Nineteen digits in a row may be an integer outside 64 bits, which
# to_jsonable sends as a string: such a value is walked instead. Digits are
# folded to "0" and the run searched for (C string operations; a regular
# expression takes twenty times as long on digit-heavy text).
_DIGITS_TO_ZERO = str.maketrans("123456789", "000000000")
_WIDE_RUN = "0" * 19


def _json_text(value):
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError):
        # Keys JSON cannot have, NaN, a container inside itself, very deep
        # nesting: the walk converts these or names the problem.
        return None
    return None if _WIDE_RUN in text.translate(_DIGITS_TO_ZERO) else text


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
    text = _as_text(value)
    if text is not _NOT_TEXT:
        return text
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
