"""The worker's channel and replies, over real pipes: worker-originated calls, oversized
and unencodable replies."""

import os
import queue
import threading
import unittest

import support  # noqa: F401  (puts the shim on sys.path)
from toolpool_shim import codec, frames, worker
from toolpool_shim.channel import CallbackError, Channel
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


class OneRequestAtATime(ChannelCase):
    """The worker says nothing before it runs a request: its reply is the first frame."""

    def test_the_reply_is_the_first_frame_after_a_request(self):
        self.send_to_worker({"t": "invoke", "id": 7, "name": "nap"})
        self.assertEqual(self.channel.next_request()["id"], 7)
        self.channel.send({"t": "reply", "id": 7, "ok": True, "value": None})
        self.assertEqual(self.read_from_worker(), {"t": "reply", "id": 7, "ok": True, "value": None})


if __name__ == "__main__":
    unittest.main()
