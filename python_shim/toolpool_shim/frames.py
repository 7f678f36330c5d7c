"""Length-prefixed frames: a 4-byte big-endian body length, then the body."""

import os
import struct

_HEADER = struct.Struct(">I")
# What one read asks the pipe for: a burst of pipelined requests in one call.
_READ_SIZE = 64 * 1024
# The most one read asks for while a large frame comes in (a pipe gives less).
_MAX_READ = 1 << 20


class FrameError(Exception):
    """The peer broke the framing rules; the channel cannot be trusted any more."""


class FrameTooLarge(FrameError):
    def __init__(self, size: int, max_frame: int):
        super().__init__(f"frame of {size} bytes is over the {max_frame}-byte limit")
        self.size = size
        self.max_frame = max_frame


class FrameReader:
    """Reads frames from a file descriptor through a buffer of its own.

    One read takes whatever has arrived (often several small frames at
    once), so a burst of requests costs one system call, not two per frame.
    Not thread-safe: the channel lets one thread read at a time.
    """

    def __init__(self, fd: int, max_frame: int):
        self._fd = fd
        self._max_frame = max_frame
        self._buffer = bytearray()

    def has_frame(self) -> bool:
        """Whether a whole frame is buffered already (read_frame will not block)."""
        if len(self._buffer) < _HEADER.size:
            return False
        (size,) = _HEADER.unpack_from(self._buffer)
        # One over the limit is "whole" too: reading it raises at once.
        return size > self._max_frame or len(self._buffer) - _HEADER.size >= size

    def read_frame(self) -> bytes | None:
        """The next frame's body; None at a clean end of stream.

        The length is checked against the limit as soon as the header is
        in, before the body is waited for or room made for it.
        """
        if not self._fill(_HEADER.size):
            if self._buffer:
                raise FrameError("end of stream inside a frame header")
            return None
        (size,) = _HEADER.unpack_from(self._buffer)
        if size > self._max_frame:
            raise FrameTooLarge(size, self._max_frame)
        end = _HEADER.size + size
        if not self._fill(end):
            got = len(self._buffer) - _HEADER.size
            raise FrameError(f"end of stream after {got} of {size} frame bytes")
        with memoryview(self._buffer) as view:
            body = bytes(view[_HEADER.size:end])  # one copy, not a slice and then a copy
        del self._buffer[:end]
        return body

    def _fill(self, size: int) -> bool:
        """Read until `size` bytes are buffered; False if the stream ends first."""
        while len(self._buffer) < size:
            chunk = os.read(self._fd, max(_READ_SIZE, min(size - len(self._buffer), _MAX_READ)))
            if not chunk:
                return False
            self._buffer += chunk
        return True


def write_frames(fd: int, bodies: list, max_frame: int) -> None:
    """Write frames to a file descriptor in one system call where the pipe
    takes them; refuse (writing none) if a body is over `max_frame`."""
    parts = []
    for body in bodies:
        if len(body) > max_frame:
            raise FrameTooLarge(len(body), max_frame)
        parts.append(_HEADER.pack(len(body)))
        parts.append(body)
    # One writev for headers and bodies: no copy of a large body, and small
    # frames go out in a single system call.
    written = os.writev(fd, parts)
    # A pipe takes at most its free space per call: finish what writev left.
    for part in parts:
        if written >= len(part):
            written -= len(part)
            continue
        _write_all(fd, memoryview(part)[written:])
        written = 0


def write_frame(fd: int, body: bytes, max_frame: int) -> None:
    """Write one frame to a file descriptor; refuse a body over `max_frame`."""
    write_frames(fd, [body], max_frame)


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data):]
