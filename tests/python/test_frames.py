"""Frames: a 4-byte big-endian length, then the body; over-long frames are refused unread."""

import os
import threading
import unittest

import support  # noqa: F401  (puts the shim on sys.path)
from toolpool_shim import frames


def reader_of(data: bytes, max_frame: int) -> frames.FrameReader:
    """A FrameReader on a pipe that holds `data`, its write end closed."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, data)
    os.close(write_fd)
    return frames.FrameReader(read_fd, max_frame)


class ReadFrame(unittest.TestCase):
    def test_reads_consecutive_frames_then_none_at_the_end(self):
        reader = reader_of(b"\x00\x00\x00\x03abc" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x01z", 100)
        self.assertEqual(reader.read_frame(), b"abc")
        # The first read brought the other frames in: no system call needed.
        self.assertTrue(reader.has_frame())
        self.assertEqual(reader.read_frame(), b"")
        self.assertEqual(reader.read_frame(), b"z")
        self.assertFalse(reader.has_frame())
        self.assertIsNone(reader.read_frame())

    def test_a_length_over_the_limit_is_refused_without_waiting_for_the_body(self):
        read_fd, write_fd = os.pipe()
        try:
            os.write(write_fd, b"\x7f\xff\xff\xff")  # the body never comes: the write end stays open
            reader = frames.FrameReader(read_fd, 1024)
            # The body would never come: reading does not wait for it.
            with self.assertRaises(frames.FrameTooLarge) as refused:
                reader.read_frame()
            self.assertEqual(refused.exception.size, 0x7FFFFFFF)
        finally:
            os.close(read_fd)
            os.close(write_fd)

    def test_a_frame_exactly_at_the_limit_is_accepted(self):
        self.assertEqual(reader_of(b"\x00\x00\x00\x04" + b"1234", 4).read_frame(), b"1234")

    def test_a_stream_ending_inside_a_frame_is_an_error(self):
        for data in (b"\x00\x00", b"\x00\x00\x00\x05ab"):
            with self.subTest(data=data):
                with self.assertRaises(frames.FrameError):
                    reader_of(data, 100).read_frame()

    def test_a_frame_arriving_in_pieces_on_a_pipe_is_read_whole(self):
        read_fd, write_fd = os.pipe()
        body = b"x" * 300_000  # more than a pipe holds: the reader gets it in parts
        writer = threading.Thread(target=frames.write_frames, args=(write_fd, [body, b"next"], 1 << 20))
        writer.start()
        reader = frames.FrameReader(read_fd, 1 << 20)
        self.assertEqual(reader.read_frame(), body)
        self.assertEqual(reader.read_frame(), b"next")
        writer.join()
        os.close(write_fd)
        self.assertIsNone(reader.read_frame())
        os.close(read_fd)


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
            received.append(frames.FrameReader(read_end, len(body)).read_frame())

        reader = threading.Thread(target=read)
        reader.start()
        try:
            frames.write_frame(write_end, body, len(body))
        finally:
            os.close(write_end)
            reader.join()
            os.close(read_end)
        self.assertEqual(received, [body])

    def test_frames_written_together_arrive_in_order_in_one_write(self):
        read_end, write_end = os.pipe()
        try:
            frames.write_frames(write_end, [b"one", b"", b"three"], 100)
            self.assertEqual(
                os.read(read_end, 100),
                b"\x00\x00\x00\x03one" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x05three",
            )
        finally:
            os.close(read_end)
            os.close(write_end)

    def test_a_body_over_the_limit_is_refused_and_nothing_is_written(self):
        read_end, write_end = os.pipe()
        try:
            with self.assertRaises(frames.FrameTooLarge):
                frames.write_frames(write_end, [b"fine", b"x" * 11], 10)
            os.set_blocking(read_end, False)
            with self.assertRaises(BlockingIOError):
                os.read(read_end, 100)
        finally:
            os.close(read_end)
            os.close(write_end)


if __name__ == "__main__":
    unittest.main()
