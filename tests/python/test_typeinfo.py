"""typeinfo's Kind: every annotation sorts into one member, and every table
that schema.py and coerce.py dispatch on has an entry for every member it
must handle (a Kind added without its entries fails here, not at a call)."""

import dataclasses
import datetime
import decimal
import enum
import pathlib
import typing
import unittest
import uuid
from typing import Annotated, Any, Literal, NewType, Optional, TypedDict

import support  # noqa: F401  (puts the shim on sys.path)
from toolpool_shim import coerce, schema
from toolpool_shim.typeinfo import EMPTY, Kind, is_optional, kind_of, unwrap_alias


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int


class Movie(TypedDict):
    title: str


UserId = NewType("UserId", int)
T = typing.TypeVar("T")


class KindOfTest(unittest.TestCase):
    def test_each_annotation_has_its_kind(self):
        cases = [
            (EMPTY, Kind.UNANNOTATED), (Any, Kind.ANY), (object, Kind.ANY), (None, Kind.NONE),
            (type(None), Kind.NONE), (UserId, Kind.ALIAS), (Annotated[int, "x"], Kind.ANNOTATED),
            (Optional[int], Kind.UNION), (int | str, Kind.UNION), (Literal["a"], Kind.LITERAL),
            (Colour, Kind.ENUM), (bool, Kind.BOOL), (int, Kind.INT), (float, Kind.FLOAT),
            (str, Kind.STR), (bytes, Kind.BYTES), (bytearray, Kind.BYTES),
            (datetime.datetime, Kind.DATETIME), (datetime.date, Kind.DATE), (datetime.time, Kind.TIME),
            (uuid.UUID, Kind.UUID), (decimal.Decimal, Kind.DECIMAL), (pathlib.Path, Kind.PATH),
            (list[int], Kind.ARRAY), (typing.Sequence[str], Kind.ARRAY), (set[int], Kind.SET),
            (frozenset, Kind.SET), (tuple[int, str], Kind.TUPLE), (dict[str, int], Kind.MAPPING),
            (Point, Kind.DATACLASS), (Movie, Kind.TYPEDDICT), (T, Kind.UNKNOWN), (complex, Kind.UNKNOWN),
        ]
        for annotation, kind in cases:
            with self.subTest(annotation=annotation):
                self.assertIs(kind_of(annotation), kind)
        self.assertEqual({kind for _, kind in cases}, set(Kind) - {Kind.PYDANTIC})

    def test_aliases_unwrap_and_optional_is_seen_through_them(self):
        self.assertIs(unwrap_alias(UserId), int)
        self.assertTrue(is_optional(Annotated[Optional[UserId], "x"]))
        self.assertFalse(is_optional(UserId))


class DispatchTablesTest(unittest.TestCase):
    def assert_keyed_by_kind(self, table):
        # Kind mixes in str for speed, so a stray string key would still be
        # found: check the keys' type, not only their values.
        self.assertTrue(all(type(key) is Kind for key in table), sorted(map(repr, table)))

    def test_every_kind_has_a_coercer(self):
        self.assert_keyed_by_kind(coerce._COERCERS)
        self.assertEqual(set(coerce._COERCERS), set(Kind))

    def test_every_kind_has_a_schema_once(self):
        self.assert_keyed_by_kind(schema._PLAIN)
        self.assert_keyed_by_kind(schema._BUILDERS)
        self.assertFalse(set(schema._PLAIN) & set(schema._BUILDERS))
        self.assertEqual(set(schema._PLAIN) | set(schema._BUILDERS), set(Kind))

    def test_every_kind_without_a_label_of_its_own_has_one_in_the_table(self):
        self.assert_keyed_by_kind(coerce._LABELS)
        own = {Kind.ALIAS, Kind.ANNOTATED, Kind.UNION, Kind.LITERAL, Kind.ENUM,
               Kind.DATACLASS, Kind.TYPEDDICT, Kind.PYDANTIC}
        self.assertEqual(set(coerce._LABELS), set(Kind) - own)


if __name__ == "__main__":
    unittest.main()
