"""Without the shared memory, the hand-encoded `started` frame decodes as the message it stands for."""

import os
import unittest

import support  # noqa: F401  (puts the shim on sys.path)
from toolpool_shim import codec, frames
from toolpool_shim.channel import Channel


class Acknowledge(unittest.TestCase):
    def test_every_id_size_decodes_to_the_started_message(self):
        for request_id in (0, 1, 127, 128, 255, 65536, 2**32, 2**64 - 1):
            read_end, write_end = os.pipe()
            in_read, in_write = os.pipe()
            try:
                channel = Channel(in_read, write_end, 1024)
                channel.acknowledge(request_id)
                body = frames.FrameReader(read_end, 1024).read_frame()
                self.assertEqual(codec.unpack(body), {"t": "started", "id": request_id})
            finally:
                for fd in (read_end, write_end, in_write, in_read):
                    os.close(fd)


if __name__ == "__main__":
    unittest.main()
