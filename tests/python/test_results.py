"""Result conversion: what a tool returns, as the JSON-able data the reply carries."""

import array
import collections
import dataclasses
import datetime
import decimal
import enum
import marshal
import math
import pathlib
import sys
import unittest
import unittest.mock
import uuid

import support  # noqa: F401  (puts the shim on sys.path)
import json

from toolpool_shim import results
from toolpool_shim.results import encode, to_jsonable


class Shade(enum.Enum):
    DARK = "dark"


class Rank(enum.IntEnum):
    ONE = 1


@dataclasses.dataclass
class Inner:
    when: datetime.date
    shade: Shade


@dataclasses.dataclass
class Outer:
    name: str
    inner: Inner
    tags: tuple


class Opaque:
    def __str__(self):
        return "opaque!"


class ResultConversion(unittest.TestCase):
    def test_json_values_pass_as_they_are(self):
        value = {"a": [1, 2.5, "x", None, True, {"b": []}]}
        self.assertEqual(to_jsonable(value), value)

    def test_scalars_that_json_lacks(self):
        moment = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
        self.assertEqual(to_jsonable(b"hi\x00"), "aGkA")
        self.assertEqual(to_jsonable(bytearray(b"hi")), "aGk=")
        self.assertEqual(to_jsonable(moment), "2024-01-02T03:04:05+00:00")
        self.assertEqual(to_jsonable(datetime.date(2024, 1, 2)), "2024-01-02")
        self.assertEqual(to_jsonable(datetime.time(10, 20)), "10:20:00")
        self.assertEqual(to_jsonable(uuid.UUID(int=1)), "00000000-0000-0000-0000-000000000001")
        self.assertEqual(to_jsonable(decimal.Decimal("1.10")), "1.10")
        self.assertEqual(to_jsonable(pathlib.Path("/tmp/x")), "/tmp/x")
        self.assertEqual(to_jsonable(Shade.DARK), "dark")
        self.assertEqual(to_jsonable(Rank.ONE), 1)

    def test_collections_become_lists(self):
        self.assertEqual(to_jsonable((1, (2, 3))), [1, [2, 3]])
        self.assertEqual(to_jsonable({3}), [3])
        self.assertEqual(to_jsonable(frozenset({"a"})), ["a"])

    def test_dataclasses_become_dicts_recursively(self):
        value = Outer("o", Inner(datetime.date(2024, 1, 2), Shade.DARK), (1, b"\x01"))
        self.assertEqual(to_jsonable(value), {
            "name": "o", "inner": {"when": "2024-01-02", "shade": "dark"}, "tags": [1, "AQ=="],
        })

    def test_dict_keys_become_strings_as_json_spells_them(self):
        self.assertEqual(
            to_jsonable({7: "a", 2.5: "b", True: "c", None: "d", Shade.DARK: "e", ("t", 1): "f"}),
            {"7": "a", "2.5": "b", "true": "c", "null": "d", "dark": "e", "('t', 1)": "f"},
        )

    def test_integers_beyond_64_bits_become_strings(self):
        self.assertEqual(to_jsonable(2**64 - 1), 2**64 - 1)
        self.assertEqual(to_jsonable(-(2**63)), -(2**63))
        self.assertEqual(to_jsonable(2**64), str(2**64))
        self.assertEqual(to_jsonable(-(2**63) - 1), str(-(2**63) - 1))

    def test_floats_stay_floats_even_when_json_has_no_spelling_for_them(self):
        self.assertTrue(math.isnan(to_jsonable(float("nan"))))
        self.assertEqual(to_jsonable(float("inf")), float("inf"))

    def test_anything_else_is_its_str(self):
        self.assertEqual(to_jsonable(Opaque()), "opaque!")
        self.assertEqual(to_jsonable([Opaque()]), ["opaque!"])
        self.assertTrue(to_jsonable(x for x in ()).startswith("<generator object"))

    def test_a_result_that_contains_itself_is_an_error(self):
        loop = [1]
        loop.append(loop)
        with self.assertRaisesRegex(ValueError, "contains itself"):
            to_jsonable(loop)
        shared = [1]
        self.assertEqual(to_jsonable([shared, shared]), [[1], [1]], "a value seen twice is not a cycle")

    def test_a_result_nested_past_the_depth_limit_is_an_error(self):
        from toolpool_shim.results import MAX_DEPTH

        def nest(depth):
            value = None
            for _ in range(depth):
                value = [value]
            return value

        self.assertEqual(to_jsonable(nest(MAX_DEPTH)), nest(MAX_DEPTH))
        with self.assertRaisesRegex(ValueError, f"nested deeper than {MAX_DEPTH} levels"):
            to_jsonable(nest(MAX_DEPTH + 1))
        with self.assertRaisesRegex(ValueError, "nested deeper"):
            to_jsonable(nest(5000))  # a clear error, not a RecursionError

    def test_pydantic_models_dump_in_json_mode(self):
        try:
            import pydantic
        except ImportError:
            self.skipTest("pydantic is not installed for this Python")

        class Model(pydantic.BaseModel):
            when: datetime.date
            items: set[int]

        self.assertEqual(to_jsonable(Model(when="2024-01-02", items={1})), {"when": "2024-01-02", "items": [1]})


class MarshalledResults(unittest.TestCase):
    """encode() sends a marshal blob for what marshal writes exactly (the
    supervisor's decoding of it is compared with the walk in
    src/protocol/marshal.rs and tests/suite/results.rs)."""

    def test_exact_builtin_values_are_marshalled(self):
        table = [{"id": i, "name": f"item-{i}", "score": i * 0.5, "tags": ["a", "b"]} for i in range(100)]
        for value in [table, "text", 2**70, float("nan"), 1 + 2j, (1, {3}), {(1, "t"): b"x"}, bytearray(b"ab")]:
            encoded = encode(value)
            self.assertEqual(encoded.reply_field(), ("value_marshal", marshal.dumps(value, 4)), repr(value))

    def test_what_marshal_refuses_or_would_misspell_takes_the_other_paths(self):
        moment = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
        for value in [Shade.DARK, Rank.ONE, [moment], {"k": Opaque()}, collections.OrderedDict(a=1),
                      Outer("o", Inner(datetime.date(2024, 1, 2), Shade.DARK), (1, b"\x01"))]:
            self.assertIsNone(encode(value).marshalled, repr(value))
        # marshal writes any buffer as bytes; with the array module loaded
        # (this test imports it) the blob is checked and an array walked.
        self.assertIn("array", sys.modules)
        encoded = encode({"a": array.array("i", [1, 2]), "b": b"ok"})
        self.assertIsNone(encoded.marshalled)
        self.assertEqual(encoded.data(), {"a": "array('i', [1, 2])", "b": "b2s="})


class OneEncodedBlob(unittest.TestCase):
    """encode() where marshal does not take the result: the C encoder's JSON
    text where it gives exactly what the walk gives, else the walk."""

    def setUp(self):
        patcher = unittest.mock.patch.object(results, "_marshalled", lambda value: None)
        patcher.start()
        self.addCleanup(patcher.stop)

    def test_the_c_encoder_gives_what_the_walk_gives(self):
        table = [{"id": i, "name": f"item-{i}", "score": i * 0.5, "tags": ["a", "b"]} for i in range(100)]
        moment = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
        for value in [
            table, "text", 42, 10**18 - 1, -(10**18) + 1, 2.5, None, True, {"a": [1, {"b": ()}]},
            b"hi\x00", moment, datetime.date(2024, 1, 2), datetime.time(10, 20), uuid.UUID(int=1),
            decimal.Decimal("1.10"), pathlib.Path("/tmp/x"), Shade.DARK, Rank.ONE, (1, (2, 3)), {3},
            frozenset({"a"}), Outer("o", Inner(datetime.date(2024, 1, 2), Shade.DARK), (1, b"\x01")),
            {7: "a", 2.5: "b", True: "c", None: "d"}, Opaque(), [Opaque()], "ünï \u2603",
        ]:
            encoded = encode(value)
            self.assertIsNotNone(encoded.json_text, repr(value))
            self.assertEqual(json.loads(encoded.json_text), to_jsonable(value), repr(value))

    def test_what_only_the_walk_converts_exactly_is_walked(self):
        shared = [1]
        for value in [2**64, -(2**63) - 1, {Shade.DARK: "e"}, {("t", 1): "f"}, [shared, shared, {(1,): 2}]]:
            encoded = encode(value)
            self.assertIsNone(encoded.json_text, repr(value))
            self.assertEqual(encoded.value, to_jsonable(value))
        self.assertTrue(math.isnan(encode(float("nan")).value))
        loop = [1]
        loop.append(loop)
        with self.assertRaisesRegex(ValueError, "contains itself"):
            encode(loop)

    def test_deep_results_are_left_to_the_supervisors_depth_check_or_named_by_the_walk(self):
        value = None
        for _ in range(5000):
            value = [value]
        with self.assertRaisesRegex(ValueError, "nested deeper"):
            encode(value)


if __name__ == "__main__":
    unittest.main()
