"""A pure-Python MessagePack codec, used when the `msgpack` extension is missing.

`pack` produces exactly the bytes of `msgpack.packb(obj, use_bin_type=True)`:
the smallest integer encoding, float64 for every float, str8/16/32 for text,
bin8/16/32 for bytes, fix/16/32 arrays and maps, map keys in insertion order.
`unpack` reads what `msgpack.unpackb(data, raw=False, strict_map_key=False)`
reads, except extension types, which the protocol never sends.
"""

import struct

_UINT8 = struct.Struct(">B").pack
_UINT16 = struct.Struct(">H").pack
_UINT32 = struct.Struct(">I").pack
_UINT64 = struct.Struct(">Q").pack
_INT8 = struct.Struct(">b").pack
_INT16 = struct.Struct(">h").pack
_INT32 = struct.Struct(">i").pack
_INT64 = struct.Struct(">q").pack
_FLOAT64 = struct.Struct(">d").pack


def pack(obj) -> bytes:
    """Encode `obj` (None, bool, int, float, str, bytes-like, list, tuple, dict)."""
    chunks: list[bytes] = []
    _pack_into(obj, chunks.append)
    return b"".join(chunks)


# MessagePack of {"t": "reply", "id": ...} up to the id's encoding.
_REPLY_HEAD = b"\x84\xa1t\xa5reply\xa2id"


# The keys a successful reply holds its result under, packed.
_RESULT_KEYS = {"value_marshal": b"\xadvalue_marshal", "value_json": b"\xaavalue_json"}


def reply_body(request_id, key: str, held) -> bytes:
    """The bytes `pack({"t": "reply", "id": request_id, "ok": True, key: held})`
    gives, without walking the map: the reply every successful call sends."""
    chunks = [_REPLY_HEAD]
    _pack_into(request_id, chunks.append)
    chunks.append(b"\xa2ok\xc3")
    chunks.append(_RESULT_KEYS.get(key) or pack(key))
    _pack_into(held, chunks.append)
    return b"".join(chunks)


def _pack_into(obj, out) -> None:
    # Same order of checks as msgpack's packer, so subclasses (an IntEnum is
    # an int) land where msgpack would put them.
    if obj is None:
        out(b"\xc0")
    elif obj is True:
        out(b"\xc3")
    elif obj is False:
        out(b"\xc2")
    elif isinstance(obj, int):
        out(_int_bytes(obj))
    elif isinstance(obj, float):
        out(b"\xcb" + _FLOAT64(obj))
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        data = obj if type(obj) is bytes else bytes(obj)
        out(_sized_header(len(data), None, b"\xc4", b"\xc5", b"\xc6"))
        out(data)
    elif isinstance(obj, str):
        data = obj.encode("utf-8")
        out(_sized_header(len(data), 0xA0, b"\xd9", b"\xda", b"\xdb", fix_limit=32))
        out(data)
    elif isinstance(obj, dict):
        out(_sized_header(len(obj), 0x80, None, b"\xde", b"\xdf"))
        for key, value in obj.items():
            _pack_into(key, out)
            _pack_into(value, out)
    elif isinstance(obj, (list, tuple)):
        out(_sized_header(len(obj), 0x90, None, b"\xdc", b"\xdd"))
        for item in obj:
            _pack_into(item, out)
    else:
        raise TypeError(f"can not serialize {type(obj).__name__!r} object")


def _int_bytes(value: int) -> bytes:
    if value >= 0:
        if value < 0x80:
            return _UINT8(value)
        if value <= 0xFF:
            return b"\xcc" + _UINT8(value)
        if value <= 0xFFFF:
            return b"\xcd" + _UINT16(value)
        if value <= 0xFFFFFFFF:
            return b"\xce" + _UINT32(value)
        if value <= 0xFFFFFFFFFFFFFFFF:
            return b"\xcf" + _UINT64(value)
    else:
        if value >= -32:
            return _INT8(value)
        if value >= -0x80:
            return b"\xd0" + _INT8(value)
        if value >= -0x8000:
            return b"\xd1" + _INT16(value)
        if value >= -0x80000000:
            return b"\xd2" + _INT32(value)
        if value >= -0x8000000000000000:
            return b"\xd3" + _INT64(value)
    raise OverflowError("Integer value out of range")


def _sized_header(size, fix_base, marker8, marker16, marker32, fix_limit=16) -> bytes:
    """The header of a str/bin/array/map of `size` elements (None: no such form)."""
    if fix_base is not None and size < fix_limit:
        return _UINT8(fix_base | size)
    if marker8 is not None and size <= 0xFF:
        return marker8 + _UINT8(size)
    if size <= 0xFFFF:
        return marker16 + _UINT16(size)
    if size <= 0xFFFFFFFF:
        return marker32 + _UINT32(size)
    raise ValueError(f"object too large for MessagePack ({size} elements or bytes)")


def unpack(data: bytes):
    """Decode exactly one MessagePack value filling all of `data`."""
    if data.startswith(_INVOKE_HEAD):
        request = _invoke_request(data)
        if request is not None:
            return request
    value, end = _decode(data, 0)
    if end != len(data):
        raise ValueError(f"extra data after the MessagePack value ({len(data) - end} bytes)")
    return value


# The supervisor's invoke request, {"t": "invoke", "id": ..., "name": ...,
# "args_marshal": ..., "context_json": ...}, up to the id's encoding.
_INVOKE_HEAD = b"\x85\xa1t\xa6invoke\xa2id"
_NAME_KEY = b"\xa4name"
_ARGS_KEY = b"\xacargs_marshal"
_CONTEXT_KEY = b"\xaccontext_json"
# Marker -> bytes of the length that follows it; fix* forms are handled inline.
_UINT_SIZES = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
_STR_SIZES = {0xD9: 1, 0xDA: 2, 0xDB: 4}
_BIN_SIZES = {0xC4: 1, 0xC5: 2, 0xC6: 4}


def _invoke_request(data: bytes):
    """The invoke request read field by field at the places the supervisor
    writes them (every call sends one), or None when `data` is laid out any
    other way, to be decoded in general: the same dict either way."""
    pos = len(_INVOKE_HEAD)
    request_id, pos = _sized(data, pos, _UINT_SIZES, 0x00, 0x7F)
    if request_id is None or not data.startswith(_NAME_KEY, pos):
        return None
    pos += len(_NAME_KEY)
    size, pos = _sized(data, pos, _STR_SIZES, 0xA0, 0xBF)
    if size is None or not data.startswith(_ARGS_KEY, pos + size):
        return None
    name = data[pos:pos + size]
    pos += size + len(_ARGS_KEY)
    size, pos = _sized(data, pos, _BIN_SIZES, -1, -1)
    if size is None or not data.startswith(_CONTEXT_KEY, pos + size):
        return None
    args = data[pos:pos + size]
    pos += size + len(_CONTEXT_KEY)
    size, pos = _sized(data, pos, _STR_SIZES, 0xA0, 0xBF)
    if size is None or pos + size != len(data):
        return None
    try:
        return {
            "t": "invoke", "id": request_id, "name": name.decode("utf-8"),
            "args_marshal": args, "context_json": data[pos:].decode("utf-8"),
        }
    except UnicodeDecodeError:
        return None  # the general decoder raises it as the error it is


def _sized(data: bytes, pos: int, sizes: dict, fix_low: int, fix_high: int):
    """(the number at data[pos] — a fix form between the markers fix_low and
    fix_high holds it in its low bits, else `sizes[marker]` bytes follow —
    the position after it), or (None, pos) for any other marker."""
    if pos >= len(data):
        return None, pos
    marker = data[pos]
    if fix_low <= marker <= fix_high:
        return marker - fix_low, pos + 1
    width = sizes.get(marker)
    end = pos + 1 + width if width is not None else 0
    if width is None or end > len(data):
        return None, pos
    if width == 1:
        return data[pos + 1], end
    return int.from_bytes(data[pos + 1:end], "big"), end


# Fixed-size payloads after a one-byte marker: marker -> (format, length).
_FIXED = {
    0xCA: (struct.Struct(">f"), 4),
    0xCB: (struct.Struct(">d"), 8),
    0xCC: (struct.Struct(">B"), 1),
    0xCD: (struct.Struct(">H"), 2),
    0xCE: (struct.Struct(">I"), 4),
    0xCF: (struct.Struct(">Q"), 8),
    0xD0: (struct.Struct(">b"), 1),
    0xD1: (struct.Struct(">h"), 2),
    0xD2: (struct.Struct(">i"), 4),
    0xD3: (struct.Struct(">q"), 8),
}
# Markers followed by a big-endian length: marker -> (kind, length of the length).
_SIZED = {
    0xD9: ("str", 1), 0xDA: ("str", 2), 0xDB: ("str", 4),
    0xC4: ("bin", 1), 0xC5: ("bin", 2), 0xC6: ("bin", 4),
    0xDC: ("array", 2), 0xDD: ("array", 4),
    0xDE: ("map", 2), 0xDF: ("map", 4),
}
_CONSTANTS = {0xC0: None, 0xC2: False, 0xC3: True}


def _decode(data: bytes, pos: int):
    """(the value starting at data[pos], the position after it).

    The fix* forms are tested first: requests are small maps of short
    strings, and this runs on every request of every call.
    """
    if pos >= len(data):
        raise ValueError("truncated MessagePack data")
    marker = data[pos]
    pos += 1
    if marker <= 0x7F:
        return marker, pos
    if marker >= 0xE0:
        return marker - 0x100, pos
    if 0xA0 <= marker <= 0xBF:
        return _text(data, pos, marker & 0x1F)
    if 0x80 <= marker <= 0x8F:
        return _map(data, pos, marker & 0x0F)
    if 0x90 <= marker <= 0x9F:
        return _array(data, pos, marker & 0x0F)
    if marker in _CONSTANTS:
        return _CONSTANTS[marker], pos
    if marker in _FIXED:
        fmt, size = _FIXED[marker]
        _need(data, pos + size)
        return fmt.unpack_from(data, pos)[0], pos + size
    if marker in _SIZED:
        kind, length_size = _SIZED[marker]
        _need(data, pos + length_size)
        size = int.from_bytes(data[pos:pos + length_size], "big")
        pos += length_size
        if kind == "str":
            return _text(data, pos, size)
        if kind == "bin":
            _need(data, pos + size)
            return bytes(data[pos:pos + size]), pos + size
        return _array(data, pos, size) if kind == "array" else _map(data, pos, size)
    raise ValueError(f"unsupported MessagePack marker 0x{marker:02x}")


def _need(data: bytes, end: int) -> None:
    if end > len(data):
        raise ValueError("truncated MessagePack data")


def _text(data: bytes, pos: int, size: int):
    end = pos + size
    _need(data, end)
    return data[pos:end].decode("utf-8"), end


def _array(data: bytes, pos: int, size: int):
    items = []
    for _ in range(size):
        item, pos = _decode(data, pos)
        items.append(item)
    return items, pos


def _map(data: bytes, pos: int, size: int):
    # Keys are short strings and many values short strings or small ints:
    # those are decoded inline, which halves the cost of a request.
    result = {}
    end = len(data)
    for _ in range(size):
        marker = data[pos] if pos < end else -1
        if 0xA0 <= marker <= 0xBF:
            after = pos + 1 + (marker & 0x1F)
            if after > end:
                raise ValueError("truncated MessagePack data")
            key = data[pos + 1:after].decode("utf-8")
            pos = after
        else:
            key, pos = _decode(data, pos)
            if isinstance(key, (list, dict)):
                raise ValueError("MessagePack map key is an array or map")
        marker = data[pos] if pos < end else -1
        if 0xA0 <= marker <= 0xBF:
            after = pos + 1 + (marker & 0x1F)
            if after > end:
                raise ValueError("truncated MessagePack data")
            result[key] = data[pos + 1:after].decode("utf-8")
            pos = after
        elif 0 <= marker <= 0x7F:
            result[key] = marker
            pos += 1
        else:
            result[key], pos = _decode(data, pos)
    return result, pos
