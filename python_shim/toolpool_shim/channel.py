"""The worker's end of the frame channel to the supervisor.

Incoming frames are read by whichever thread is waiting for one: the main
thread while it waits for the next request, or a thread waiting for the
answer to its call. One thread reads at a time and hands what it reads for
the others to them. No thread sits between the pipe and the main thread, so
a request costs no thread switch (one switch costs about half a bare echo
round trip).

The supervisor writes one request at a time, and only to an idle worker:
while a tool runs, nothing arrives but the answers to its own callbacks.
Whether a request was ever read is the kernel's to say (the bytes left in
the pipe), so the worker acknowledges nothing.

A watcher thread ends the process the moment the supervisor closes its end of
stdin, even while a tool hangs and nobody reads.
"""

import collections
import itertools
import os
import select
import sys
import threading

from . import codec, frames


class CallbackError(Exception):
    """The supervisor answered a worker-originated call with an error."""

    def __init__(self, error: dict):
        self.type = error.get("type", "Error")
        self.message = error.get("message", "")
        super().__init__(f"{self.type}: {self.message}")


class Channel:
    def __init__(self, in_fd: int, out_fd: int, max_frame: int):
        self._in_fd = in_fd
        self._reader = frames.FrameReader(in_fd, max_frame)
        self._out_fd = out_fd
        self.max_frame = max_frame
        self._write_lock = threading.Lock()
        # Guards everything below; notified whenever a frame has been routed
        # and a thread waits (never taken twice by one thread: a plain lock).
        self._state = threading.Condition(threading.Lock())
        self._waiting = 0  # threads waiting on _state
        self._reading = False  # a thread is reading a frame right now
        self._requests = collections.deque()
        self._open_calls = set()  # ids of calls waiting for their reply
        self._replies = {}  # call id -> reply, until its caller takes it
        self._call_ids = itertools.count(1)

    def watch_for_hangup(self) -> None:
        """Exit (code 0) as soon as the supervisor closes stdin, whatever the threads
        are doing."""
        threading.Thread(target=self._watch, name="toolpool-hangup", daemon=True).start()

    def next_request(self) -> dict:
        """Block until the supervisor sends the next request (catalog, invoke, ...)."""

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
        if kind != "reply":
            self._requests.append(message)
            return
        call_id = message.get("id")
        if isinstance(call_id, int) and call_id in self._open_calls:
            self._replies[call_id] = message
        # else: no call of ours is waiting for that id; drop the reply.

    def _watch(self) -> None:
        hangup = select.poll()
        hangup.register(self._in_fd, 0)  # no events asked for: returns only on hang-up or error
        while True:
            if hangup.poll():
                os._exit(0)


def _fatal(reason: str) -> None:
    try:
        sys.stderr.write(f"toolpool worker: {reason}\n")
        sys.stderr.flush()
    finally:
        os._exit(2)
