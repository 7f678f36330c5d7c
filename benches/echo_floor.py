"""P1's floor: a bare length-prefixed MessagePack echo over stdio, with the shim's codec.

Reads a frame, decodes it, encodes a reply map and writes it back: the least
work any pool over these pipes must do per call.
"""

import os
import struct
import sys

sys.path.insert(0, sys.argv[1])  # the shim directory, for its codec
from toolpool_shim import codec  # noqa: E402

HEADER = struct.Struct(">I")
stdin = sys.stdin.buffer
out = sys.stdout.fileno()
while True:
    header = stdin.read(4)
    if len(header) < 4:
        break
    request = codec.unpack(stdin.read(HEADER.unpack(header)[0]))
    body = codec.pack({"t": "reply", "id": request["id"], "ok": True, "value": None})
    os.write(out, HEADER.pack(len(body)) + body)
