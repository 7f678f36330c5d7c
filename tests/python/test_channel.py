"""The worker's channel and replies, over real pipes: worker-originated calls, oversized
and unencodable replies."""

import os
import queue
import struct
import threading
import time
import unittest

import support  # noqa: F401  (puts the shim on sys.path)
from toolpool_shim import codec, frames, worker
from toolpool_shim.channel import Ack, CallbackError, Channel
from toolpool_shim.results import Encoded

MAX_FRAME = 1 << 20


class ChannelCase(unittest.TestCase):
    """A Channel whose supervisor end is held by the test."""

    def setUp(self):
        to_worker_r, self.to_worker = os.pipe()
        from_worker_r, from_worker_w = os.pipe()
        self.channel = Channel(to_worker_r, from_worker_w, MAX_FRAME)
        # Frames from the worker are drained all along, as the supervisor does:
        # a reply larger than the pipe buffer would block the writer otherwise.
        self.from_worker = queue.SimpleQueue()
        drain = threading.Thread(target=self._drain, args=(from_worker_r,))
        drain.start()
        self.addCleanup(drain.join)
        self.addCleanup(os.close, from_worker_w)
        # self.to_worker stays open: at EOF a reading thread would end the test process.

    def _drain(self, fd: int) -> None:
        reader = frames.FrameReader(fd, MAX_FRAME)
        while (body := reader.read_frame()) is not None:
            self.from_worker.put(codec.unpack(body))
        os.close(fd)

    def send_to_worker(self, message: dict) -> None:
        frames.write_frame(self.to_worker, codec.pack(message), MAX_FRAME)

    def read_from_worker(self) -> dict:
        return self.from_worker.get(timeout=5)


class WorkerCalls(ChannelCase):
    def test_a_call_waits_for_the_reply_with_its_id(self):
        answers = []
        caller = threading.Thread(target=lambda: answers.append(self.channel.call("attachments.get", {"id": "a1"})))
        caller.start()
        call = self.read_from_worker()
        self.assertEqual(
            {key: call[key] for key in ("t", "method", "params")},
            {"t": "call", "method": "attachments.get", "params": {"id": "a1"}},
        )
        self.send_to_worker({"t": "reply", "id": call["id"] + 1000, "ok": True, "value": "not for this call"})
        self.send_to_worker({"t": "catalog", "id": 5})
        self.send_to_worker({"t": "reply", "id": call["id"], "ok": True, "value": {"name": "a.txt"}})
        caller.join(5)
        self.assertEqual(answers, [{"name": "a.txt"}])
        self.assertEqual(self.channel.next_request(), {"t": "catalog", "id": 5}, "requests still reach the main thread")

    def test_an_error_reply_raises_callback_error(self):
        raised = []

        def call():
            try:
                self.channel.call("human_prompt.request", {})
            except CallbackError as exc:
                raised.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        call_id = self.read_from_worker()["id"]
        self.send_to_worker({"t": "reply", "id": call_id, "ok": False,
                             "error": {"type": "Cancelled", "message": "the user declined"}})
        caller.join(5)
        self.assertEqual([(exc.type, exc.message, str(exc)) for exc in raised],
                         [("Cancelled", "the user declined", "Cancelled: the user declined")])

    def test_each_call_gets_a_new_id(self):
        ids = set()
        for _ in range(3):
            threading.Thread(target=self.channel.call, args=("m", {}), daemon=True).start()
            ids.add(self.read_from_worker()["id"])
        self.assertEqual(len(ids), 3)


class Replies(ChannelCase):
    def setUp(self):
        super().setUp()
        self.addCleanup(os.close, self.channel._in_fd)  # no reader thread uses it here

    def test_a_value_reply(self):
        worker._reply_value(self.channel, 3, Encoded(value=[1, "a"]))
        self.assertEqual(self.read_from_worker(), {"t": "reply", "id": 3, "ok": True, "value": [1, "a"]})

    def test_a_result_over_the_frame_limit_is_a_result_too_large_error(self):
        worker._reply_value(self.channel, 4, Encoded(value="x" * (2 * MAX_FRAME)))
        self.assertEqual(self.read_from_worker(), {"t": "reply", "id": 4, "ok": False, "error": {
            "type": "ResultTooLarge",
            "message": "result is 2.0 MB encoded, over the 1.0 MB frame limit",
            "traceback": None,
        }})

    def test_a_result_msgpack_cannot_encode_is_an_error(self):
        worker._reply_value(self.channel, 5, Encoded(value="bad \ud800 text"))
        reply = self.read_from_worker()
        self.assertEqual((reply["id"], reply["ok"], reply["error"]["type"]), (5, False, "UnicodeEncodeError"))
        self.assertTrue(reply["error"]["message"].startswith("the result cannot be encoded: "))

    def test_error_texts_are_made_encodable_and_clipped_to_fit(self):
        worker._reply_error(self.channel, 6, {"type": "OSError", "message": "no file \udcff", "traceback": None})
        self.assertEqual(self.read_from_worker()["error"]["message"], "no file \\udcff")
        huge = "é" * MAX_FRAME
        worker._reply_error(self.channel, 7, {"type": "ValueError", "message": huge, "traceback": huge})
        error = self.read_from_worker()["error"]
        self.assertEqual(error["type"], "ValueError")
        self.assertTrue(error["message"].startswith("é" * (MAX_FRAME // 16) + "… ("))
        self.assertTrue(error["message"].endswith(" more characters cut)"))
        self.assertEqual(error["traceback"], error["message"])


class Withdrawals(ChannelCase):
    """A request queued behind a running call is given back on `withdraw`, unless it started."""

    def setUp(self):
        super().setUp()
        self.channel.watch_for_hangup()  # the watcher reads for a long-running call

    def start(self, request_id: int) -> None:
        self.send_to_worker({"t": "invoke", "id": request_id, "name": "nap"})
        self.assertEqual(self.channel.next_request()["id"], request_id)
        self.channel.acknowledge(request_id)
        self.assertEqual(self.read_from_worker(), {"t": "started", "id": request_id})

    def test_a_queued_request_is_given_back_while_a_call_runs(self):
        self.start(1)
        # The call "runs" (nobody reads) while the next request and its withdraw arrive.
        self.send_to_worker({"t": "invoke", "id": 2, "name": "nap"})
        self.send_to_worker({"t": "withdraw", "id": 2})
        self.assertEqual(self.read_from_worker(), {"t": "withdrawn", "id": 2})
        self.send_to_worker({"t": "ping", "id": 3})
        self.assertEqual(self.channel.next_request(), {"t": "ping", "id": 3}, "the withdrawn request never runs")

    def test_a_request_that_started_is_not_given_back(self):
        self.start(4)
        self.send_to_worker({"t": "withdraw", "id": 4})
        time.sleep(0.3)  # a dozen of the watcher's looks
        self.assertTrue(self.from_worker.empty(), "a started request was answered as withdrawn")

    def test_a_request_and_its_withdraw_read_in_one_go_are_both_routed(self):
        self.start(5)
        # One write: the watcher's single read takes both frames in.
        frames.write_frames(self.to_worker, [
            codec.pack({"t": "invoke", "id": 6, "name": "nap"}),
            codec.pack({"t": "withdraw", "id": 6}),
        ], MAX_FRAME)
        self.assertEqual(self.read_from_worker(), {"t": "withdrawn", "id": 6})


class StartedInSharedMemory(ChannelCase):
    """With the supervisor's memfd, a started request's id goes there and nothing to the pipe."""

    def setUp(self):
        super().setUp()
        cell = os.memfd_create("ack")
        os.ftruncate(cell, 8)
        self.cell = os.dup(cell)  # the supervisor's view (the channel's Ack takes `cell`)
        self.addCleanup(os.close, self.cell)
        self.channel = Channel(self.channel._in_fd, self.channel._out_fd, MAX_FRAME, Ack(cell))

    def last_started(self) -> int:
        return struct.unpack("=Q", os.pread(self.cell, 8, 0))[0]

    def test_each_started_id_is_stored_and_no_frame_is_sent(self):
        for request_id in (0, 7, 2**32, 2**64 - 1):
            self.send_to_worker({"t": "invoke", "id": request_id, "name": "nap"})
            self.assertEqual(self.channel.next_request()["id"], request_id)
            self.channel.acknowledge(request_id)
            self.assertEqual(self.last_started(), request_id)
            self.channel.send({"t": "reply", "id": request_id, "ok": True, "value": None})
            self.assertEqual(self.read_from_worker(), {"t": "reply", "id": request_id, "ok": True, "value": None},
                             "the reply is the first frame: no `started` before it")

    def test_a_tools_child_does_not_inherit_the_descriptor(self):
        self.assertFalse(os.get_inheritable(self.channel._ack._fd))


if __name__ == "__main__":
    unittest.main()
