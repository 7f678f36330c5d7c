"""The worker's end of the frame channel to the supervisor.

Incoming frames are read by whichever thread is waiting for one: the main
thread while it waits for the next request, or a thread waiting for the
answer to its call. One thread reads at a time and hands what it reads for
the others to them. No thread sits between the pipe and the main thread, so
a request costs no thread switch (one switch costs about half a bare echo
round trip).

Before it runs a call the worker stores the request's id in eight bytes of
memory it shares with the supervisor (`Ack`): the supervisor reads them only
if the worker dies, to know whether the call had started. Nothing is written
on the pipe for it, so a call costs one write (its reply) and wakes the
supervisor once.

A watcher thread ends the process the moment the supervisor closes its end of
stdin, even while a tool hangs and nobody reads. It also reads for a tool that
has run for a while with nobody reading: the supervisor may have queued the
next request behind the running one (pipelining) and then asked for it back
(`withdraw`) because another worker came free, and the answer must not wait
for the running call to end. Short calls never see the watcher: it only
looks every `WATCH_INTERVAL` seconds.
"""

import collections
import itertools
import os
import select
import struct
import sys
import threading

from . import codec, frames


# MessagePack of {"t": "started", "id": ...} up to the id's encoding.
_STARTED = b"\x82\xa1t\xa7started\xa2id"
# How often the watcher looks for a long-running tool with frames waiting.
WATCH_INTERVAL = 0.025


class Ack:
    """The supervisor's memfd (inherited on `fd`) holding the id of the
    request this worker started last, in the machine's byte order.

    Written with pwrite, not through a mapping: importing `mmap` would tell
    results.py that a tool may return a buffer, which costs every result
    its fast path. A pwrite to a memfd wakes no one.
    """

    _ID = struct.Struct("=Q")

    def __init__(self, fd: int):
        os.set_inheritable(fd, False)  # the tools' children have no use for it
        self._fd = fd

    def started(self, request_id: int) -> None:
        os.pwrite(self._fd, self._ID.pack(request_id), 0)


class CallbackError(Exception):
    """The supervisor answered a worker-originated call with an error."""

    def __init__(self, error: dict):
        self.type = error.get("type", "Error")
        self.message = error.get("message", "")
        super().__init__(f"{self.type}: {self.message}")


class Channel:
    def __init__(self, in_fd: int, out_fd: int, max_frame: int, ack: Ack | None = None):
        self._in_fd = in_fd
        # Every whole frame a read brings in is routed at once (see
        # _read_and_route): what waits unrouted is in the pipe, where the
        # watcher's poll sees it, not only in the reader's buffer.
        self._reader = frames.FrameReader(in_fd, max_frame)
        self._out_fd = out_fd
        self.max_frame = max_frame
        self._write_lock = threading.Lock()
        # Without it (a supervisor that shares no memory, tests) the worker
        # says `started` in a frame.
        self._ack = ack
        # Guards everything below; notified whenever a frame has been routed
        # and a thread waits (never taken twice by one thread: a plain lock).
        self._state = threading.Condition(threading.Lock())
        self._waiting = 0  # threads waiting on _state
        self._reading = False  # a thread is reading a frame right now
        self._requests = collections.deque()
        self._open_calls = set()  # ids of calls waiting for their reply
        self._replies = {}  # call id -> reply, until its caller takes it
        self._call_ids = itertools.count(1)
        # Bumped as each request starts; read by the watcher to tell a
        # long-running call from a new one (plain ints: the GIL guards them).
        self._started_count = 0
        self._running = False

    def watch_for_hangup(self) -> None:
        """Exit (code 0) as soon as the supervisor closes stdin, whatever the threads
        are doing; read what arrives while a long call runs with nobody reading."""
        threading.Thread(target=self._watch, name="toolpool-hangup", daemon=True).start()

    def next_request(self) -> dict:
        """Block until the supervisor sends the next request (catalog, invoke, ...)."""
        self._running = False

        def take():
            return self._requests.popleft() if self._requests else None

        return self._receive(take)

    def send(self, message: dict) -> None:
        """Encode and send one message.

        Raises frames.FrameTooLarge (nothing is sent) when the encoded message is
        over the frame limit, and the codec's error when it cannot be encoded.
        """
        self.send_body(codec.pack(message))

    def send_body(self, body: bytes) -> None:
        """Send one message already encoded; raises frames.FrameTooLarge as send does."""
        with self._write_lock:
            try:
                frames.write_frame(self._out_fd, body, self.max_frame)
            except OSError:
                # The supervisor closed its end: there is nobody left to answer.
                os._exit(0)

    def acknowledge(self, request_id: int) -> None:
        """Say that the request was taken and is about to run: in the shared
        memory, or else as {"t": "started", "id": request_id}.

        The frame is encoded by hand (the map is always the same but for
        the id) rather than through the codec.
        """
        self._started_count += 1
        self._running = True
        if not (isinstance(request_id, int) and 0 <= request_id < 2 ** 64):
            body = codec.pack({"t": "started", "id": request_id})
        elif self._ack is not None:
            self._ack.started(request_id)
            return
        elif request_id < 128:
            body = _STARTED + bytes((request_id,))
        else:
            body = _STARTED + b"\xcf" + request_id.to_bytes(8, "big")
        self.send_body(body)

    def call(self, method: str, params: dict):
        """Ask the supervisor to run `method` (a context service) and wait for its answer."""
        call_id = next(self._call_ids)
        with self._state:
            self._open_calls.add(call_id)
        try:
            self.send({"t": "call", "id": call_id, "method": method, "params": params})
            reply = self._receive(lambda: self._replies.pop(call_id, None))
        finally:
            with self._state:
                self._open_calls.discard(call_id)
        if reply.get("ok"):
            return reply.get("value")
        raise CallbackError(reply.get("error") or {})

    def _receive(self, take):
        """Return take()'s first non-None answer, reading frames meanwhile unless another thread is."""
        with self._state:
            while True:
                found = take()
                if found is not None:
                    return found
                if self._reading:
                    self._waiting += 1
                    try:
                        self._state.wait()
                    finally:
                        self._waiting -= 1
                    continue
                self._read_and_route()

    def _read_and_route(self) -> None:
        """Read one frame, and every other whole one the read brought in,
        and route them; called with the state held, which is released
        during the read (others may queue calls meanwhile)."""
        self._reading = True
        self._state.release()
        try:
            messages = [self._read_message()]
            while self._reader.has_frame():
                messages.append(self._read_message())
        finally:
            self._state.acquire()
            self._reading = False
        for message in messages:
            self._route(message)
        if self._waiting:
            self._state.notify_all()

    def _read_message(self) -> dict:
        try:
            body = self._reader.read_frame()
            if body is None:
                os._exit(0)  # stdin closed: the supervisor is done with us
            message = codec.unpack(body)
            if not isinstance(message, dict):
                raise frames.FrameError(f"message is a {type(message).__name__}, not a map")
        except Exception as exc:
            _fatal(f"bad frame from the supervisor: {type(exc).__name__}: {exc}")
        return message

    def _route(self, message: dict) -> None:
        kind = message.get("t")
        if kind == "withdraw":
            self._withdraw(message.get("id"))
            return
        if kind != "reply":
            self._requests.append(message)
            return
        call_id = message.get("id")
        if isinstance(call_id, int) and call_id in self._open_calls:
            self._replies[call_id] = message
        # else: no call of ours is waiting for that id; drop the reply.

    def _withdraw(self, request_id) -> None:
        """The supervisor wants a queued request back: give it back unless it started.

        Called with the state held, so a request is either still queued here
        (removed, and `withdrawn` sent) or already taken by the main thread
        (then its `started` is on the way and this is ignored).
        """
        for index, queued in enumerate(self._requests):
            if queued.get("id") == request_id and queued.get("t") == "invoke":
                del self._requests[index]
                self.send({"t": "withdrawn", "id": request_id})
                return

    def _watch(self) -> None:
        hangup = select.poll()
        hangup.register(self._in_fd, 0)  # no events asked for: returns only on hang-up or error
        readable = select.poll()
        readable.register(self._in_fd, select.POLLIN)
        interval_ms = int(WATCH_INTERVAL * 1000)
        seen = -1
        while True:
            if hangup.poll(interval_ms):
                os._exit(0)
            # The same call is still running a whole interval later: read for it.
            count = self._started_count
            if not (self._running and count == seen):
                seen = count
                continue
            with self._state:
                while (self._running and self._started_count == count and not self._reading
                       and readable.poll(0)):
                    self._read_and_route()


def _fatal(reason: str) -> None:
    try:
        sys.stderr.write(f"toolpool worker: {reason}\n")
        sys.stderr.flush()
    finally:
        os._exit(2)
