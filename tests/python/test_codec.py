"""Both MessagePack codecs against fixed byte vectors, and against each other.

The vectors are written out here, not produced by either codec: the builtin
codec must give exactly the bytes msgpack.packb(obj, use_bin_type=True) gives.
The msgpack extension is checked in target/pyvenv-test (scripts/test-deps), a venv with
msgpack installed (created on first use), since the test interpreter may
not have it.
"""

import os
import random
import subprocess
import sys
import unittest

import support
from toolpool_shim import codec, minipack


# (value, its exact encoding). Values decode back to themselves.
VECTORS = [
    (None, b"\xc0"),
    (False, b"\xc2"),
    (True, b"\xc3"),
    # positive fixint / uint8 / uint16 / uint32 / uint64, at each boundary
    (0, b"\x00"),
    (1, b"\x01"),
    (127, b"\x7f"),
    (128, b"\xcc\x80"),
    (255, b"\xcc\xff"),
    (256, b"\xcd\x01\x00"),
    (65535, b"\xcd\xff\xff"),
    (65536, b"\xce\x00\x01\x00\x00"),
    (2**32 - 1, b"\xce\xff\xff\xff\xff"),
    (2**32, b"\xcf\x00\x00\x00\x01\x00\x00\x00\x00"),
    (2**64 - 1, b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff"),
    # negative fixint / int8 / int16 / int32 / int64, at each boundary
    (-1, b"\xff"),
    (-32, b"\xe0"),
    (-33, b"\xd0\xdf"),
    (-128, b"\xd0\x80"),
    (-129, b"\xd1\xff\x7f"),
    (-32768, b"\xd1\x80\x00"),
    (-32769, b"\xd2\xff\xff\x7f\xff"),
    (-(2**31), b"\xd2\x80\x00\x00\x00"),
    (-(2**31) - 1, b"\xd3\xff\xff\xff\xff\x7f\xff\xff\xff"),
    (-(2**63), b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00"),
    # floats are always float64
    (0.0, b"\xcb\x00\x00\x00\x00\x00\x00\x00\x00"),
    (1.5, b"\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00"),
    (-2.0, b"\xcb\xc0\x00\x00\x00\x00\x00\x00\x00"),
    (float("inf"), b"\xcb\x7f\xf0\x00\x00\x00\x00\x00\x00"),
    # str: fixstr up to 31 bytes, then str8 / str16 / str32 (length in UTF-8 bytes)
    ("", b"\xa0"),
    ("é", b"\xa2\xc3\xa9"),
    ("a" * 31, b"\xbf" + b"a" * 31),
    ("a" * 32, b"\xd9\x20" + b"a" * 32),
    ("a" * 255, b"\xd9\xff" + b"a" * 255),
    ("a" * 256, b"\xda\x01\x00" + b"a" * 256),
    ("a" * 65535, b"\xda\xff\xff" + b"a" * 65535),
    ("a" * 65536, b"\xdb\x00\x01\x00\x00" + b"a" * 65536),
    # bin8 / bin16 / bin32
    (b"", b"\xc4\x00"),
    (b"\x01\x02", b"\xc4\x02\x01\x02"),
    (b"z" * 255, b"\xc4\xff" + b"z" * 255),
    (b"z" * 256, b"\xc5\x01\x00" + b"z" * 256),
    (b"z" * 65536, b"\xc6\x00\x01\x00\x00" + b"z" * 65536),
    # fixarray up to 15 items, then array16 / array32
    ([], b"\x90"),
    ([1, 2, 3], b"\x93\x01\x02\x03"),
    (list(range(15)), b"\x9f" + bytes(range(15))),
    (list(range(16)), b"\xdc\x00\x10" + bytes(range(16))),
    ([None] * 65535, b"\xdc\xff\xff" + b"\xc0" * 65535),
    ([None] * 65536, b"\xdd\x00\x01\x00\x00" + b"\xc0" * 65536),
    # fixmap up to 15 entries, then map16 / map32; keys in insertion order
    ({}, b"\x80"),
    ({"a": 1}, b"\x81\xa1a\x01"),
    ({"b": 1, "a": 2}, b"\x82\xa1b\x01\xa1a\x02"),
    ({i: i for i in range(15)}, b"\x8f" + b"".join(bytes([i, i]) for i in range(15))),
    ({i: None for i in range(16)}, b"\xde\x00\x10" + b"".join(bytes([i]) + b"\xc0" for i in range(16))),
    (
        {f"k{i:05d}": None for i in range(65536)},
        b"\xdf\x00\x01\x00\x00" + b"".join(b"\xa6" + f"k{i:05d}".encode() + b"\xc0" for i in range(65536)),
    ),
    # nested: a reply message
    (
        {"t": "reply", "id": 7, "ok": True, "value": [None, {"x": b"\x00"}, -1.0]},
        b"\x84\xa1t\xa5reply\xa2id\x07\xa2ok\xc3\xa5value\x93\xc0\x81\xa1x\xc4\x01\x00"
        b"\xcb\xbf\xf0\x00\x00\x00\x00\x00\x00",
    ),
]

# Encodings only the decoder meets: what another MessagePack writer may send.
DECODE_ONLY = [
    (b"\xca\x3f\xc0\x00\x00", 1.5),          # float32
    (b"\xcd\x00\x01", 1),                     # uint16 holding a small number
    (b"\xd0\x01", 1),                         # int8 holding a positive number
    (b"\xd9\x01a", "a"),                      # str8 holding a short string
    (b"\xdc\x00\x01\xc0", [None]),            # array16 holding one item
    (b"\x81\x01\xa1a", {1: "a"}),             # an integer map key
]


class CodecVectors:
    """Runs every vector through `self.pack` / `self.unpack` (set by the subclass)."""

    def test_pack_gives_the_exact_bytes(self):
        for value, encoded in VECTORS:
            with self.subTest(value=repr(value)[:40]):
                self.assertEqual(self.pack(value), encoded)

    def test_unpack_gives_the_value_back(self):
        for value, encoded in VECTORS:
            with self.subTest(value=repr(value)[:40]):
                self.assertEqual(self.unpack(encoded), value)

    def test_unpack_reads_other_encodings(self):
        for encoded, value in DECODE_ONLY:
            with self.subTest(encoded=encoded):
                self.assertEqual(self.unpack(encoded), value)

    def test_tuples_and_bytearrays_pack_as_arrays_and_bin(self):
        self.assertEqual(self.pack((1, 2)), b"\x92\x01\x02")
        self.assertEqual(self.pack(bytearray(b"\x05")), b"\xc4\x01\x05")

    def test_values_msgpack_cannot_carry_are_refused(self):
        self.assertRaises(OverflowError, self.pack, 2**64)
        self.assertRaises(OverflowError, self.pack, -(2**63) - 1)
        self.assertRaises(TypeError, self.pack, object())
        self.assertRaises(UnicodeEncodeError, self.pack, "\ud800")

    def test_random_structures_round_trip(self):
        rng = random.Random(1234)
        for _ in range(300):
            value = _random_value(rng, depth=3)
            with self.subTest(value=repr(value)[:60]):
                self.assertEqual(self.unpack(self.pack(value)), value)


class BuiltinCodec(CodecVectors, unittest.TestCase):
    pack = staticmethod(minipack.pack)
    unpack = staticmethod(minipack.unpack)

    def test_malformed_input_is_refused(self):
        for data in (b"", b"\x92\x01", b"\xda\x00\x05ab", b"\x01\x02", b"\xc1", b"\xd4\x01\x00", b"\xa1\xff", b"\x81\x90\x01",
                     b"\x81", b"\x81\xa3ab", b"\x81\xa1a", b"\x81\xa1a\xa3xy", b"\x81\xa1\xff\x01", b"\x82\xa1a\x01"):
            with self.subTest(data=data):
                self.assertRaises(ValueError, minipack.unpack, data)


class ReplyBody(unittest.TestCase):
    """The hand-encoded reply is the bytes the codec gives for the same map."""

    def test_reply_body_is_the_packed_reply(self):
        for request_id in (0, 1, 127, 128, 70000, 2**64 - 1):
            for key, held in (("value_json", "null"), ("value_json", "é" * 40), ("value_marshal", b"N"), ("value_marshal", b"x" * 300)):
                with self.subTest(id=request_id, key=key, size=len(held)):
                    expected = {"t": "reply", "id": request_id, "ok": True, key: held}
                    self.assertEqual(minipack.reply_body(request_id, key, held), codec.pack(expected))
                    self.assertEqual(codec.unpack(minipack.reply_body(request_id, key, held)), expected)


class InvokeRequest(unittest.TestCase):
    """The invoke request read at its fixed places gives what the general decoder gives."""

    @staticmethod
    def general(data: bytes):
        value, end = minipack._decode(data, 0)
        if end != len(data):
            raise ValueError("extra data")
        return value

    def requests(self):
        for request_id in (0, 127, 128, 70000, 2**32, 2**64 - 1):
            for name in ("t", "é" * 20, "n" * 40, "x" * 300):
                for args in (b"{0", b"a" * 300, b"b" * 70000):
                    for context in ("{}", "c" * 200, "ü" * 40000):
                        yield {"t": "invoke", "id": request_id, "name": name,
                               "args_marshal": args, "context_json": context}

    def test_every_size_of_every_field_takes_the_fast_path(self):
        for request in self.requests():
            data = minipack.pack(request)
            with self.subTest(id=request["id"], name=len(request["name"]), args=len(request["args_marshal"])):
                self.assertEqual(minipack._invoke_request(data), request)
                self.assertEqual(minipack.unpack(data), request)

    def test_anything_else_is_decoded_or_refused_as_in_general(self):
        request = {"t": "invoke", "id": 5, "name": "nap", "args_marshal": b"{0", "context_json": "{}"}
        data = minipack.pack(request)
        variants = [data[:cut] for cut in range(len(data))] + [
            data + b"\x00",
            minipack.pack({"t": "invoke", "id": 5, "name": "nap", "context_json": "{}", "args_marshal": b"{0"}),
            minipack.pack({"t": "invoke", "id": -1, "name": "nap", "args_marshal": b"{0", "context_json": "{}"}),
            minipack.pack({"t": "invoke", "id": 5, "name": "nap", "args_marshal": "{0", "context_json": "{}"}),
            minipack.pack({"t": "invoke", "id": 5, "name": 7, "args_marshal": b"{0", "context_json": "{}"}),
            data.replace(b"\xa3nap", b"\xa3n\xffp"),
        ]
        for variant in variants:
            with self.subTest(variant=variant):
                try:
                    expected = self.general(variant)
                except ValueError:
                    self.assertRaises(ValueError, minipack.unpack, variant)
                else:
                    self.assertEqual(minipack.unpack(variant), expected)


class MsgpackExtensionCodec(CodecVectors, unittest.TestCase):
    """The vectors against the msgpack extension; runs in the msgpack venv (see below)."""

    def setUp(self):
        if codec.NAME != "msgpack":
            self.skipTest("msgpack is not importable here; MsgpackExtensionInVenv runs this class where it is")

    pack = staticmethod(codec.pack)
    unpack = staticmethod(codec.unpack)

    def test_both_codecs_give_identical_bytes(self):
        rng = random.Random(99)
        for _ in range(500):
            value = _random_value(rng, depth=4)
            with self.subTest(value=repr(value)[:60]):
                self.assertEqual(minipack.pack(value), codec.pack(value))


class CodecSelection(unittest.TestCase):
    def test_the_codec_in_use_matches_what_is_importable(self):
        try:
            import msgpack  # noqa: F401
        except ImportError:
            self.assertEqual(codec.NAME, "builtin")
            self.assertIs(codec.pack, minipack.pack)
        else:
            self.assertEqual(codec.NAME, "msgpack")


class MsgpackExtensionInVenv(unittest.TestCase):
    """Runs MsgpackExtensionCodec and CodecSelection under a Python that has msgpack."""

    def test_vectors_pass_with_the_msgpack_extension(self):
        python = _msgpack_python(self)
        run = subprocess.run(
            [python, "-m", "unittest", "-v", "test_codec.MsgpackExtensionCodec", "test_codec.CodecSelection"],
            cwd=support.TESTS_DIR, capture_output=True, text=True, timeout=300,
        )
        self.assertEqual(run.returncode, 0, run.stderr[-5000:])
        self.assertNotIn("skipped", run.stderr)
        self.assertRegex(run.stderr, r"test_both_codecs_give_identical_bytes \(.*\) \.\.\. ok")


def _msgpack_python(test: unittest.TestCase) -> str:
    """The venv's python, with msgpack installed; the test is skipped if that cannot be had."""
    python = os.path.join(support.MSGPACK_VENV, "bin", "python")
    check = [python, "-c", "import msgpack._cmsgpack"]  # the C extension, not msgpack's fallback
    if os.path.exists(python) and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    steps = [
        [sys.executable, "-m", "venv", support.MSGPACK_VENV],
        [python, "-m", "pip", "install", "--quiet", "msgpack"],
    ]
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            test.skipTest(f"cannot set up {support.MSGPACK_VENV} with msgpack: {exc}")
        if done.returncode != 0:
            test.skipTest(f"cannot set up {support.MSGPACK_VENV} with msgpack: {' '.join(step)} failed: {done.stderr[-500:]}")
    if subprocess.run(check, capture_output=True).returncode != 0:
        test.skipTest("msgpack installed without its C extension")
    return python


def _random_value(rng: random.Random, depth: int):
    kind = rng.randrange(10 if depth > 0 else 8)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-(2**63), 2**64 - 1)
    if kind == 2:
        return rng.choice([0, 1, 127, 128, 255, 256, -1, -32, -33, 65535, 65536, -32769])
    if kind == 3:
        return rng.uniform(-1e9, 1e9)
    if kind in (4, 5):
        return "".join(rng.choice("aé€𝄞 \n") for _ in range(rng.choice([0, 5, 31, 32, 300])))
    if kind == 6:
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 3, 255, 256])))
    if kind == 7:
        return rng.randint(-100, 100)
    if kind == 8:
        return [_random_value(rng, depth - 1) for _ in range(rng.choice([0, 2, 15, 16]))]
    return {f"k{i}": _random_value(rng, depth - 1) for i in range(rng.choice([0, 2, 15, 16]))}


if __name__ == "__main__":
    unittest.main()
