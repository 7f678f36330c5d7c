"""Frames: a 4-byte big-endian length, then the body; over-long frames are refused unread."""

import io
import os
import threading
import unittest

import support  # noqa: F401  (puts the shim on sys.path)
from toolpool_shim import frames


class ReadFrame(unittest.TestCase):
    def test_reads_consecutive_frames_then_none_at_the_end(self):
        stream = io.BytesIO(b"\x00\x00\x00\x03abc" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x01z")
        self.assertEqual(frames.read_frame(stream, 100), b"abc")
        self.assertEqual(frames.read_frame(stream, 100), b"")
        self.assertEqual(frames.read_frame(stream, 100), b"z")
        self.assertIsNone(frames.read_frame(stream, 100))

    def test_a_length_over_the_limit_is_refused_before_reading_the_body(self):
        stream = io.BytesIO(b"\x7f\xff\xff\xff" + b"x" * 10)
        with self.assertRaises(frames.FrameTooLarge) as refused:
            frames.read_frame(stream, 1024)
        self.assertEqual(refused.exception.size, 0x7FFFFFFF)
        self.assertEqual(stream.tell(), 4, "nothing past the header may be read")

    def test_a_frame_exactly_at_the_limit_is_accepted(self):
        stream = io.BytesIO(b"\x00\x00\x00\x04" + b"1234")
        self.assertEqual(frames.read_frame(stream, 4), b"1234")

    def test_a_stream_ending_inside_a_frame_is_an_error(self):
        for data in (b"\x00\x00", b"\x00\x00\x00\x05ab"):
            with self.subTest(data=data):
                with self.assertRaises(frames.FrameError):
                    frames.read_frame(io.BytesIO(data), 100)


    def test_a_frame_arriving_in_pieces_on_an_unbuffered_pipe_is_read_whole(self):
        read_fd, write_fd = os.pipe()
        body = b"x" * 100_000  # more than a pipe holds: the reader gets it in parts
        writer = threading.Thread(target=frames.write_frame, args=(write_fd, body, 1 << 20))
        writer.start()
        with open(read_fd, "rb", buffering=0) as stream:
            self.assertEqual(frames.read_frame(stream, 1 << 20), body)
            writer.join()
            os.close(write_fd)
            self.assertIsNone(frames.read_frame(stream, 1 << 20))


class WriteFrame(unittest.TestCase):
    def test_writes_the_length_then_the_body(self):
        read_end, write_end = os.pipe()
        try:
            frames.write_frame(write_end, b"hello", 100)
            self.assertEqual(os.read(read_end, 100), b"\x00\x00\x00\x05hello")
        finally:
            os.close(read_end)
            os.close(write_end)

    def test_a_body_larger_than_the_pipe_buffer_arrives_whole(self):
        body = bytes(range(256)) * 8192  # 2 MiB: many partial writes on a pipe
        read_end, write_end = os.pipe()
        received = []

        def read():
            with open(read_end, "rb") as stream:
                received.append(frames.read_frame(stream, len(body)))

        reader = threading.Thread(target=read)
        reader.start()
        try:
            frames.write_frame(write_end, body, len(body))
        finally:
            os.close(write_end)
            reader.join()
        self.assertEqual(received, [body])

    def test_a_body_over_the_limit_is_refused_and_nothing_is_written(self):
        read_end, write_end = os.pipe()
        try:
            with self.assertRaises(frames.FrameTooLarge):
                frames.write_frame(write_end, b"x" * 11, 10)
            os.set_blocking(read_end, False)
            with self.assertRaises(BlockingIOError):
                os.read(read_end, 100)
        finally:
            os.close(read_end)
            os.close(write_end)


if __name__ == "__main__":
    unittest.main()
