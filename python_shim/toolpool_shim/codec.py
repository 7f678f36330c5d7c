"""MessagePack for frame bodies: the `msgpack` C extension when importable, else minipack.

Both produce identical bytes (see docs/protocol.md), so the supervisor never
needs to know which one a worker uses; the hello message reports it anyway.
"""

try:
    import msgpack
except ImportError:
    msgpack = None

if msgpack is not None and not msgpack.Packer.__module__.startswith("msgpack._cmsgpack"):
    msgpack = None  # msgpack's pure-Python fallback: minipack is as fast and byte-identical

if msgpack is not None:
    NAME = "msgpack"

    def pack(obj) -> bytes:
        # packb, not one shared Packer: frames are sent from several threads.
        return msgpack.packb(obj, use_bin_type=True)

    def unpack(data: bytes):
        return msgpack.unpackb(data, raw=False, strict_map_key=False)

else:
    from .minipack import pack, unpack

    NAME = "builtin"

__all__ = ["NAME", "pack", "unpack"]
