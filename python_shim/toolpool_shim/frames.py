"""Length-prefixed frames: a 4-byte big-endian body length, then the body."""

import os
import struct

_HEADER = struct.Struct(">I")


class FrameError(Exception):
    """The peer broke the framing rules; the channel cannot be trusted any more."""


class FrameTooLarge(FrameError):
    def __init__(self, size: int, max_frame: int):
        super().__init__(f"frame of {size} bytes is over the {max_frame}-byte limit")
        self.size = size
        self.max_frame = max_frame


def read_frame(stream, max_frame: int) -> bytes | None:
    """Read one frame body from a binary stream; None at a clean end of stream.

    The length is checked against `max_frame` before anything is allocated.
    """
    header = _read_exactly(stream, _HEADER.size)
    if not header:
        return None
    if len(header) < _HEADER.size:
        raise FrameError("end of stream inside a frame header")
    (size,) = _HEADER.unpack(header)
    if size > max_frame:
        raise FrameTooLarge(size, max_frame)
    body = _read_exactly(stream, size)
    if len(body) < size:
        raise FrameError(f"end of stream after {len(body)} of {size} frame bytes")
    return body


def _read_exactly(stream, size: int) -> bytes:
    """`size` bytes, fewer only at the end of the stream. An unbuffered
    stream (a pipe) returns what has arrived, so this reads until it has all."""
    data = stream.read(size)
    if not data or len(data) == size:
        return data or b""
    chunks = [data]
    got = len(data)
    while got < size:
        more = stream.read(size - got)
        if not more:
            break
        chunks.append(more)
        got += len(more)
    return b"".join(chunks)


def write_frame(fd: int, body: bytes, max_frame: int) -> None:
    """Write one frame to a file descriptor; refuse a body over `max_frame`."""
    if len(body) > max_frame:
        raise FrameTooLarge(len(body), max_frame)
    header = _HEADER.pack(len(body))
    # One writev for header and body: no copy of a large body, and a small
    # frame goes out in a single system call.
    written = os.writev(fd, [header, body])
    # A pipe takes at most its free space per call: finish what writev left.
    if written < len(header):
        _write_all(fd, memoryview(header)[written:])
        written = len(header)
    _write_all(fd, memoryview(body)[written - len(header):])


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data):]
