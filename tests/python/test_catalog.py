"""The catalog: discovery, import errors, duplicates, ordering, and the exact JSON Schema
of every function in tests/fixtures/functions/schema.py and schema_future.py (docs/catalog.md)."""

import contextlib
import importlib
import io
import os
import sys
import tempfile
import textwrap
import unittest

import support
from toolpool_shim import catalog, discovery, docstrings, slots

OBJECT = {"type": "object"}


def _params(properties, required, closed=True):
    schema = {"type": "object", "properties": properties, "required": required}
    if closed:
        schema["additionalProperties"] = False
    return schema


POINT = {
    "type": "object",
    "properties": {
        "x": {"type": "integer"},
        "y": {"type": "integer", "default": 0},
        "label": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["x"],
    "additionalProperties": False,
}

# name -> (description, parameters), for schema.py and schema_future.py.
EXPECTED = {
    "schema_unannotated": ("No annotation: a string.", _params({"value": {"type": "string"}}, ["value"])),
    "schema_any": ("Any: no constraint at all.", _params({"value": {}}, ["value"])),
    "schema_scalars": ("str, int, float, bool.", _params({
        "text": {"type": "string"},
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
    }, ["text", "count", "ratio", "flag"])),
    "schema_sequences": ("list[T], List[T], Sequence[T], tuple[T, ...]: arrays.", _params({
        "a": {"type": "array", "items": {"type": "integer"}},
        "b": {"type": "array", "items": {"type": "string"}},
        "c": {"type": "array", "items": {"type": "number"}},
        "d": {"type": "array", "items": {"type": "integer"}},
    }, ["a", "b", "c", "d"])),
    "schema_sets": ("set[T], frozenset[T]: arrays of unique items.", _params({
        "a": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "b": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
    }, ["a", "b"])),
    "schema_pair": ("tuple[A, B]: a fixed-length array.", _params({
        "pair": {
            "type": "array",
            "prefixItems": [{"type": "integer"}, {"type": "string"}],
            "minItems": 2,
            "maxItems": 2,
        },
    }, ["pair"])),
    "schema_mappings": ("dict, Mapping, dict[str, T]: objects.", _params({
        "a": {"type": "object"},
        "b": {"type": "object"},
        "c": {"type": "object", "additionalProperties": {"type": "integer"}},
        "d": {"type": "object", "additionalProperties": {"type": "boolean"}},
    }, ["a", "b", "c", "d"])),
    "schema_optionals": ("Optional[T], T | None, Union[T, None]: the schema of T, not required.", _params({
        "a": {"type": "integer"},
        "b": {"type": "string"},
        "c": {"type": "number"},
        "d": {"type": "integer", "default": 3},
    }, [])),
    "schema_unions": ("Union[A, B], A | B: anyOf.", _params({
        "a": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "b": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "string"}}]},
        "c": {"anyOf": [{"type": "number"}, {"type": "integer"}]},
    }, ["a", "b", "c"])),
    "schema_literals": ("Literal: enum, with the type when all values share one.", _params({
        "mode": {"type": "string", "enum": ["r", "w"]},
        "level": {"type": "integer", "enum": [1, 2, 3]},
        "mixed": {"enum": ["a", 1, True]},
    }, ["mode", "level", "mixed"])),
    "schema_enums": ("Enum subclasses: enum of the values; the function gets the member.", _params({
        "color": {"type": "string", "enum": ["red", "green"]},
        "level": {"type": "integer", "enum": [1, 2]},
    }, ["color", "level"])),
    "schema_dataclass": ("A dataclass: a nested object; the function gets the instance.",
                         _params({"point": POINT}, ["point"])),
    "schema_typed_dict": ("TypedDict: nested objects with the required keys of the class.", _params({
        "movie": {
            "type": "object",
            "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
            "required": ["title", "year"],
            "additionalProperties": False,
        },
        "draft": {
            "type": "object",
            "properties": {"title": {"type": "string"}, "rating": {"type": "number"}},
            "required": [],
            "additionalProperties": False,
        },
    }, ["movie", "draft"])),
    "schema_recursive": ("A self-referential dataclass.", _params({
        "tree": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                # Python 3.10's get_type_hints leaves list["TreeNode"] unresolved: any item.
                "children": {"type": "array", "items": OBJECT if sys.version_info >= (3, 11) else {}},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    }, ["tree"])),
    "schema_formats": (
        "datetime, date, time, UUID, Path, Decimal: strings with a format, converted on the way in.",
        _params({
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "at": {"type": "string", "format": "time"},
            "ident": {"type": "string", "format": "uuid"},
            "where": {"type": "string", "format": "path"},
            "amount": {"type": "string", "format": "decimal"},
        }, ["when", "day", "at", "ident", "where", "amount"]),
    ),
    "schema_bytes": ("bytes: base64 text, decoded on the way in.", _params({
        "data": {"type": "string", "contentEncoding": "base64"},
    }, ["data"])),
    "schema_param_meta": ("Annotated[T, ParamMeta(...)]: description, and enum replacing the values.", _params({
        "path": {"type": "string", "description": "Where to write"},
        "mode": {"type": "string", "enum": ["r", "w"], "description": "How to open"},
        "count": {"type": "integer", "enum": [1, 2],
                  "description": "Taken, because ParamMeta gives no description here."},
        "mixed": {"enum": ["x", 1]},
        "outer": {"type": "integer", "description": "Optional outside"},
        "inner": {"type": "string", "enum": ["a", "b"], "description": "Optional inside"},
        "color": {"type": "string", "enum": ["red"], "default": "red"},
    }, ["path", "mode", "count", "mixed"])),
    "doc_google": ("Summary on two lines.", _params({
        "path": {"type": "string", "description": "The file to read, relative to the workspace."},
        "count": {"type": "integer", "description": "How many times.", "default": 1},
        "verbose": {"type": "boolean", "description": "Say more.", "default": False},
    }, ["path"])),
    "doc_numpy": ("NumPy style.", _params({
        "path": {"type": "string", "description": "The file to read, relative to the workspace."},
        "first": {"type": "integer", "description": "Two numbers."},
        "second": {"type": "integer", "description": "Two numbers."},
    }, ["path", "first", "second"])),
    "doc_sphinx": ("Sphinx style.", _params({
        "path": {"type": "string", "description": "The file to read, relative to the workspace."},
        "count": {"type": "integer", "description": "How many times."},
    }, ["path", "count"])),
    "doc_none": ("", _params({"x": {"type": "integer"}}, ["x"])),
    "doc_long": (None, _params({}, [])),  # description: see Docstrings
    "schema_defaults": ("Defaults: shown when JSON can represent them.", _params({
        "where": {"type": "string", "format": "path", "default": "/tmp/out"},
        "color": {"type": "string", "enum": ["red", "green"], "default": "green"},
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}],
                 "minItems": 2, "maxItems": 2, "default": [1, 2]},
        "when": {"type": "string", "format": "date-time"},
        "text": {"type": "string", "default": "hi"},
        "ratio": {"type": "number", "default": 0.5},
        "nothing": {"type": "string"},
        "huge": {"type": "integer"},
        "nan": {"type": "number"},
        "items": {"type": "array", "default": [1, "two"]},
    }, [])),
    "schema_hidden": ("*args, _private and _context are not shown; additionalProperties stays false.",
                      _params({"visible": {"type": "integer"}}, ["visible"])),
    "schema_kwargs": ("**kwargs: unknown arguments are accepted and passed through.",
                      _params({"a": {"type": "integer"}}, ["a"], closed=False)),
    "schema_keyword_only": ("Keyword-only parameters are included.", _params({
        "a": {"type": "integer"},
        "b": {"type": "string", "default": "x"},
        "c": {"type": "boolean"},
    }, ["a", "c"])),
    "schema_positional_only": ("Positional-only parameters are included too.", _params({
        "a": {"type": "integer"},
        "b": {"type": "integer", "default": 2},
        "c": {"type": "integer", "default": 3},
    }, ["a"])),
    "schema_new_type": ("NewType: the schema of its base type.", _params({"user": {"type": "integer"}}, ["user"])),
    "schema_unresolvable": ("An annotation that cannot be resolved is treated as none, and logged.", _params({
        "x": {"type": "string"},
        "y": {"type": "integer"},
    }, ["x", "y"])),
    "schema_decorated": ("Decorated with functools.wraps: the wrapped signature is used.",
                         _params({"word": {"type": "string"}}, ["word"])),
    "schema_async": ("async def: same schema as def.", _params({"x": {"type": "integer"}}, ["x"])),
    "future_types": ("String annotations resolve like real ones.", _params({
        "count": {"type": "integer"},
        "names": {"type": "array", "items": {"type": "string"}},
        "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
        "note": {"type": "string", "description": "A note"},
    }, ["count"])),
    "future_forward": ("`Box` is defined below this function.", _params({
        "box": {
            "type": "object",
            "properties": {
                "size": {"type": "integer"},
                "inner": {"type": "object"},
            },
            "required": ["size"],
            "additionalProperties": False,
        },
    }, ["box"])),
}


def _fixture_catalog() -> dict:
    with contextlib.redirect_stderr(io.StringIO()):  # schema_unresolvable logs on purpose
        return catalog.build_catalog(support.fixture_toolset())


def _line_of(filename: str, text: str) -> int:
    with open(os.path.join(support.FIXTURE_FUNCTIONS, filename), encoding="utf-8") as source:
        for number, line in enumerate(source, start=1):
            if line.startswith(text):
                return number
    raise AssertionError(f"{text!r} not in {filename}")


class FixtureCatalog(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.catalog = _fixture_catalog()
        cls.by_name = {entry["name"]: entry for entry in cls.catalog["functions"]}

    def test_every_schema_fixture_has_its_exact_schema_and_description(self):
        for name, (description, parameters) in EXPECTED.items():
            with self.subTest(name):
                entry = self.by_name[name]
                self.assertEqual(entry["parameters"], parameters)
                if description is not None:
                    self.assertEqual(entry["description"], description)

    def test_every_function_of_the_schema_modules_is_covered(self):
        listed = {entry["name"] for entry in self.catalog["functions"] if entry["module"].startswith("schema")}
        self.assertEqual(listed, set(EXPECTED))

    def test_entries_name_module_file_and_line(self):
        scalars = self.by_name["schema_scalars"]
        self.assertEqual(
            {key: scalars[key] for key in ("module", "file", "line")},
            {"module": "schema", "file": "schema.py", "line": _line_of("schema.py", "def schema_scalars(")},
        )
        future = self.by_name["future_forward"]
        self.assertEqual((future["module"], future["file"]), ("schema_future", "schema_future.py"))
        self.assertEqual(self.by_name["schema_async"]["line"], _line_of("schema.py", "async def schema_async("))
        # A decorated function starts at its first decorator, as Python counts it.
        self.assertEqual(self.by_name["schema_decorated"]["line"], _line_of("schema.py", "@_shout"))

    def test_keys_come_in_the_documented_order(self):
        entry = self.by_name["schema_param_meta"]
        self.assertEqual(list(entry)[:6], ["name", "module", "description", "parameters", "file", "line"])
        self.assertLessEqual(set(list(entry)[6:]), {"output_schema", "output_wrapped"})
        self.assertEqual(list(entry["parameters"]), ["type", "properties", "required", "additionalProperties"])
        self.assertEqual(list(entry["parameters"]["properties"]), [
            "path", "mode", "count", "mixed", "outer", "inner", "color",
        ])

    def test_a_module_that_fails_to_import_is_an_error_entry(self):
        self.assertIn(
            {"module": "broken", "file": "broken.py", "error": "ModuleNotFoundError: No module named 'nope'"},
            self.catalog["errors"],
        )
        self.assertNotIn("unreachable_tool", self.by_name)

    def test_a_duplicated_name_stays_with_the_first_module_and_the_second_is_an_error(self):
        self.assertEqual(self.by_name["duplicated_name"]["module"], "dup_a")
        self.assertEqual(self.by_name["dup_b_only"]["module"], "dup_b")
        line = _line_of("dup_a.py", "def duplicated_name(")
        self.assertIn({
            "module": "dup_b",
            "file": "dup_b.py",
            "error": (
                f"DuplicateFunction: 'duplicated_name' is defined in dup_a.py:{line} "
                f"and in dup_b.py:{_line_of('dup_b.py', 'def duplicated_name(')}; the one in dup_a.py is used"
            ),
        }, self.catalog["errors"])

    def test_functions_are_sorted_by_module_then_name_and_errors_by_module(self):
        keys = [(entry["module"], entry["name"]) for entry in self.catalog["functions"]]
        self.assertEqual(keys, sorted(keys))
        modules = [error["module"] for error in self.catalog["errors"]]
        self.assertEqual(modules, sorted(modules))

    def test_imported_names_and_classes_are_not_tools(self):
        for name in ("Path", "dataclass", "field", "Point", "Color", "ParamMeta", "_shout"):
            self.assertNotIn(name, self.by_name)


def _admits(schema: dict, value) -> bool:
    """Whether `value` fits `schema`'s type and enum (what a validating client checks first)."""
    if "anyOf" in schema:
        return any(_admits(part, value) for part in schema["anyOf"])
    if "enum" in schema and value not in schema["enum"]:
        return False
    kinds = schema.get("type")
    if kinds is None:
        return True
    checks = {
        "null": lambda v: v is None,
        "boolean": lambda v: isinstance(v, bool),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "string": lambda v: isinstance(v, str),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
    }
    return any(checks[kind](value) for kind in (kinds if isinstance(kinds, list) else [kinds]))


def _defaults(schema, path=""):
    """Every (path, schema, default) below `schema`."""
    if isinstance(schema, dict):
        if "default" in schema:
            yield path, schema, schema["default"]
        for key, value in schema.items():
            yield from _defaults(value, f"{path}/{key}")
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from _defaults(value, f"{path}/{index}")


class Defaults(unittest.TestCase):
    def test_no_schema_states_a_default_its_own_type_refuses(self):
        # Every bundled and fixture tool: an Optional parameter defaulting to
        # None advertises no `"default": null` on a string (validating
        # clients then reject every call that omits it).
        bundled = os.path.join(support.REPO, "functions", "function_calling")
        with support.isolated_imports(), contextlib.redirect_stderr(io.StringIO()):
            catalogs = [_fixture_catalog(), catalog.build_catalog(discovery.load_tools(bundled))]
        checked = 0
        for built in catalogs:
            for entry in built["functions"]:
                for path, schema, default in _defaults(entry["parameters"]):
                    checked += 1
                    with self.subTest(entry["name"], path=path):
                        self.assertTrue(_admits(schema, default), f"{schema}")
        self.assertGreater(checked, 20)
        current_time = next(e for e in catalogs[1]["functions"] if e["name"] == "get_current_time")
        self.assertNotIn("default", current_time["parameters"]["properties"]["timezone"])
        self.assertNotIn("timezone", current_time["parameters"].get("required", []))


class Presentation(unittest.TestCase):
    def test_the_bundled_tools_carry_true_hints_and_titles(self):
        bundled = os.path.join(support.REPO, "functions", "function_calling")
        with support.isolated_imports(), contextlib.redirect_stderr(io.StringIO()):
            entries = {e["name"]: e for e in catalog.build_catalog(discovery.load_tools(bundled))["functions"]}
        for entry in entries.values():
            with self.subTest(entry["name"]):
                self.assertTrue(entry.get("title"))
                self.assertEqual(set(entry["annotations"]) - set(catalog.HINTS), set())
        self.assertTrue(entries["read_file_segment"]["annotations"]["readOnlyHint"])
        self.assertTrue(entries["save_file"]["annotations"]["destructiveHint"])
        self.assertTrue(entries["delete_path"]["annotations"]["destructiveHint"])
        self.assertTrue(entries["install_python_packages"]["annotations"]["openWorldHint"])


class Discovery(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        isolation = support.isolated_imports()
        isolation.__enter__()
        self.addCleanup(isolation.__exit__, None, None, None)

    def write(self, relative: str, source: str) -> str:
        path = os.path.join(self._tmp.name, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as file:
            file.write(textwrap.dedent(source))
        return path

    def load(self, functions_dir: str) -> dict:
        importlib.invalidate_caches()
        return catalog.build_catalog(discovery.load_tools(os.path.join(self._tmp.name, functions_dir)))

    def test_an_exception_whose_str_raises_is_still_reported(self):
        self.write("tools/unprintable.py", """
            class Unprintable(Exception):
                def __str__(self):
                    raise SystemExit("not even this")

            raise Unprintable()
        """)
        self.write("tools/fine.py", "def fine() -> None:\n    pass\n")
        found = self.load("tools")
        self.assertEqual([entry["name"] for entry in found["functions"]], ["fine"])
        self.assertEqual(found["errors"], [{
            "module": "unprintable", "file": "unprintable.py",
            "error": "Unprintable: <its message cannot be shown: __str__ raised SystemExit>",
        }])

    def test_modules_that_broke_a_worker_are_reported_without_being_imported(self):
        self.write("tools/hazard.py", "raise SystemExit('imported after all')\n")
        skip = [{"module": "hazard", "file": "hazard.py", "error": "ImportHazard: importing hazard.py hung"}]
        importlib.invalidate_caches()
        toolset = discovery.load_tools(os.path.join(self._tmp.name, "tools"), skip=skip)
        self.assertEqual([error.as_dict() for error in toolset.errors], skip)

    def test_walks_subfolders_and_skips_underscore_and_dot_names(self):
        tool = "def {name}() -> None:\n    pass\n"
        self.write("tools/top.py", tool.format(name="top"))
        self.write("tools/sub/deeper/inner.py", tool.format(name="inner"))
        self.write("tools/_private.py", tool.format(name="private"))
        self.write("tools/_helpers/hidden.py", tool.format(name="in_helpers"))
        self.write("tools/__pycache__/cached.py", tool.format(name="cached"))
        self.write("tools/.ipynb_checkpoints/top-checkpoint.py", tool.format(name="checkpoint"))
        self.write("tools/notes.txt", "not python")
        found = self.load("tools")
        self.assertEqual(
            [(entry["module"], entry["name"], entry["file"]) for entry in found["functions"]],
            [("sub/deeper/inner", "inner", "sub/deeper/inner.py"), ("top", "top", "top.py")],
        )
        self.assertEqual(found["errors"], [])

    def test_convention_folders_import_from_the_project_root(self):
        self.write("project/shared_lib.py", "VALUE = 41\n")
        self.write("project/functions/function_calling/_helper.py", "def plus_one(x):\n    return x + 1\n")
        self.write("project/functions/function_calling/sub/tool.py", """
            from shared_lib import VALUE
            from functions.function_calling._helper import plus_one
            from . import sibling

            def answer() -> int:
                return plus_one(VALUE) + sibling.ZERO
        """)
        self.write("project/functions/function_calling/sub/sibling.py", "ZERO = 0\n")
        found = self.load("project/functions/function_calling")
        self.assertEqual(found["errors"], [])
        self.assertEqual([entry["name"] for entry in found["functions"]], ["answer"])
        module = sys.modules["functions.function_calling.sub.tool"]
        self.assertEqual(module.answer(), 42)
        self.assertEqual(module.answer.__module__, "functions.function_calling.sub.tool")
        self.assertIn(os.path.join(self._tmp.name, "project"), sys.path)

    def test_other_folders_import_from_their_parent(self):
        self.write("proj/helpers_lib.py", "NAME = 'lib'\n")
        self.write("proj/my_tools/tool.py", """
            from helpers_lib import NAME

            def name() -> str:
                return NAME
        """)
        found = self.load("proj/my_tools")
        self.assertEqual(found["errors"], [])
        self.assertEqual(sys.modules["my_tools.tool"].name(), "lib")

    def test_names_that_are_not_identifiers_load_under_a_synthetic_name(self):
        self.write("proj/my-tools/some file.py", "def spaced() -> str:\n    return 'ok'\n")
        self.write("proj/my-tools/class/kw.py", "def keyworded() -> str:\n    return 'ok'\n")
        found = self.load("proj/my-tools")
        self.assertEqual(found["errors"], [])
        self.assertEqual(
            [(entry["module"], entry["name"]) for entry in found["functions"]],
            [("class/kw", "keyworded"), ("some file", "spaced")],
        )
        self.assertIn("toolpool_functions.my-tools.some file", sys.modules)

    def test_a_folder_named_like_an_imported_package_does_not_load_that_package(self):
        self.write("proj/json/mine.py", "def mine() -> str:\n    return 'mine'\n")
        found = self.load("proj/json")
        self.assertEqual(found["errors"], [])
        self.assertEqual([entry["name"] for entry in found["functions"]], ["mine"])

    def test_every_kind_of_import_failure_is_reported(self):
        self.write("tools/a_syntax.py", "def broken(:\n")
        self.write("tools/b_exit.py", "import sys\nsys.exit(3)\n")
        self.write("tools/c_interrupt.py", "raise KeyboardInterrupt\n")
        self.write("tools/d_fine.py", "def fine() -> None:\n    pass\n")
        found = self.load("tools")
        errors = {error["module"]: error["error"] for error in found["errors"]}
        self.assertEqual(set(errors), {"a_syntax", "b_exit", "c_interrupt"})
        self.assertTrue(errors["a_syntax"].startswith("SyntaxError: "), errors["a_syntax"])
        self.assertEqual(errors["b_exit"], "SystemExit: 3")
        self.assertEqual(errors["c_interrupt"], "KeyboardInterrupt: ")
        self.assertEqual([entry["name"] for entry in found["functions"]], ["fine"])

    def test_only_public_defs_of_the_module_itself_are_tools(self):
        self.write("tools/other.py", "def imported_helper() -> None:\n    pass\n")
        self.write("tools/mod.py", """
            from .other import imported_helper
            from os.path import join

            def public() -> None:
                pass

            def _private() -> None:
                pass

            alias = public
            lam = lambda: None

            class NotAFunction:
                def method(self) -> None:
                    pass
        """)
        found = self.load("tools")
        self.assertEqual(
            [(entry["module"], entry["name"]) for entry in found["functions"]],
            [("mod", "public"), ("other", "imported_helper")],
        )

    def test_a_schema_that_cannot_be_built_costs_only_that_function(self):
        self.write("tools/odd.py", """
            import inspect

            def fine(x: int) -> int:
                return x

            def odd(x: int) -> int:
                return x

            odd.__signature__ = "not a signature"
        """)
        with contextlib.redirect_stderr(io.StringIO()) as log:
            found = self.load("tools")
        self.assertEqual([entry["name"] for entry in found["functions"]], ["fine"])
        self.assertEqual(len(found["errors"]), 1)
        self.assertTrue(found["errors"][0]["error"].startswith("cannot describe function 'odd': "))
        self.assertIn("cannot describe function 'odd'", log.getvalue())

    def test_a_hand_written_schema_is_served_as_written_and_a_bad_one_costs_its_function(self):
        self.write("tools/hand.py", """
            def contact(phone: str | None = None, email: str | None = None) -> str:
                return phone or email

            contact.mcp_input_schema = {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {"phone": {"type": "string"}, "email": {"type": "string"}},
                "anyOf": [{"required": ["phone"]}, {"required": ["email"]}],
            }

            def not_an_object(x: int) -> int:
                return x

            not_an_object.mcp_input_schema = {"type": "string"}

            def listed(x: int) -> int:
                return x

            listed.mcp_resource = "notes://{x}"
            listed.mcp_mime_type = "text/plain"

            def routed(region: str, query: str = "") -> str:
                return region

            routed.mcp_param_headers = {"region": "Region"}

            def misrouted(region: str) -> str:
                return region

            misrouted.mcp_param_headers = {"zone": "Zone"}
        """)
        with contextlib.redirect_stderr(io.StringIO()):
            found = self.load("tools")
        by_name = {entry["name"]: entry for entry in found["functions"]}
        self.assertEqual(sorted(by_name), ["contact", "listed", "routed"])
        self.assertEqual(by_name["routed"]["parameters"]["properties"]["region"]["x-mcp-header"], "Region")
        self.assertNotIn("x-mcp-header", by_name["routed"]["parameters"]["properties"]["query"])
        self.assertEqual(by_name["contact"]["parameters"]["anyOf"], [{"required": ["phone"]}, {"required": ["email"]}])
        self.assertEqual(by_name["contact"]["parameters"]["$schema"], "https://json-schema.org/draft/2020-12/schema")
        self.assertEqual(by_name["listed"]["resource"], {"uri": "notes://{x}", "mime_type": "text/plain"})
        errors = sorted(error["error"] for error in found["errors"])
        self.assertEqual(len(errors), 2, errors)
        self.assertIn("mcp_param_headers names 'zone', which is not a parameter", errors[0])
        self.assertIn('mcp_input_schema must be a JSON Schema of "type": "object"', errors[1])


class Annotations(unittest.TestCase):
    def test_an_unresolvable_annotation_is_logged_and_treated_as_none(self):
        namespace = {}
        exec("def f(x: 'Missing', y: 'int', z: 'list[Missing]') -> 'AlsoMissing': pass", namespace)
        with contextlib.redirect_stderr(io.StringIO()) as log:
            resolved = slots.resolved_hints(namespace["f"], "mod.f")
        self.assertEqual(resolved, {"y": int})
        self.assertIn("mod.f: cannot resolve the annotation of 'x' (NameError: name 'Missing' is not defined)", log.getvalue())
        self.assertIn("'z'", log.getvalue())

    def test_parammeta_from_the_compat_module_is_the_same_class(self):
        from utils.function_catalog import ParamMeta as CompatParamMeta

        from toolpool import ParamMeta

        self.assertIs(CompatParamMeta, ParamMeta)

    def test_a_projects_own_parammeta_class_is_recognised(self):
        from typing import Annotated

        from toolpool_shim import schema

        class ParamMeta:  # what a project's own utils.function_catalog may define
            def __init__(self, description=None, enum=None):
                self.description, self.enum = description, enum

        self.assertEqual(
            schema.type_schema(Annotated[str, ParamMeta(description="d", enum=["a"])]),
            {"type": "string", "enum": ["a"], "description": "d"},
        )


class Docstrings(unittest.TestCase):
    def test_the_summary_is_the_first_paragraph_on_one_line(self):
        self.assertEqual(docstrings.summary("\n    First line\n    second line.\n\n    More.\n"), "First line second line.")
        self.assertEqual(docstrings.summary(None), "")
        self.assertEqual(docstrings.summary("   "), "")

    def test_a_long_summary_is_cut_to_600_characters_with_an_ellipsis(self):
        self.assertEqual(docstrings.summary("x" * 600), "x" * 600)
        # The first 599 characters end in spaces: they are trimmed before the "…".
        self.assertEqual(docstrings.summary("a" * 597 + "  " + "b" * 10), "a" * 597 + "…")
        self.assertEqual(len(docstrings.summary("y" * 601)), 600)

    def test_the_600_character_fixture_is_cut(self):
        entry = {e["name"]: e for e in _fixture_catalog()["functions"]}["doc_long"]
        self.assertEqual(len(entry["description"]), 600)
        self.assertTrue(entry["description"].startswith("Lorem ipsum dolor sit amet, consectetur"))
        self.assertTrue(entry["description"].endswith(" quis…"))

    def test_google_sections_end_at_the_next_section(self):
        doc = """Summary.

        Args:
            a: First.
            b (int, optional): Second,
                continued.

        Returns:
            c: not a parameter.
        """
        self.assertEqual(docstrings.param_docs(doc), {"a": "First.", "b": "Second, continued."})

    def test_numpy_sections_end_at_the_next_section(self):
        doc = """Summary.

        Parameters
        ----------
        a : int
            First.
        *args
            Extra.

        Returns
        -------
        c : int
            Not a parameter.
        """
        self.assertEqual(docstrings.param_docs(doc), {"a": "First.", "args": "Extra."})

    def test_sphinx_fields_with_and_without_types(self):
        doc = """Summary.

        :param a: First
            continued.
        :param dict[str, int] b: Second.
        :type a: int
        :returns: not a parameter
        """
        self.assertEqual(docstrings.param_docs(doc), {"a": "First continued.", "b": "Second."})


class Pydantic(unittest.TestCase):
    def test_a_pydantic_model_is_a_nested_object(self):
        try:
            import pydantic
        except ImportError:
            self.skipTest("pydantic is not installed for this Python")
        from typing import Annotated, Optional

        from toolpool import ParamMeta
        from toolpool_shim import schema

        class Address(pydantic.BaseModel):
            street: str
            number: int = 1

        class Strict(pydantic.BaseModel, extra="forbid"):
            code: Annotated[str, ParamMeta(description="The code")]
            note: Optional[str] = pydantic.Field(default=None, description="A note")
            address: Address

        self.assertEqual(schema.type_schema(Strict), {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The code"},
                "note": {"type": "string", "description": "A note"},
                "address": {
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "number": {"type": "integer", "default": 1}},
                    "required": ["street"],
                },
            },
            "required": ["code", "address"],
            "additionalProperties": False,
        })


if __name__ == "__main__":
    unittest.main()


class OutputSchemas(unittest.TestCase):
    """The return annotation as MCP's outputSchema: an object, a non-object wrapped."""

    def output(self, returns, content_classes=()):
        from toolpool_shim import schema
        return schema.output_schema(returns, content_classes)

    def test_object_results_are_their_own_schema(self):
        import dataclasses
        import typing

        class Movie(typing.TypedDict):
            title: str
            year: int

        @dataclasses.dataclass
        class Point:
            x: int
            y: int = 0

        self.assertEqual(self.output(dict[str, int]), ({"type": "object", "additionalProperties": {"type": "integer"}}, False))
        movie, wrapped = self.output(Movie)
        self.assertFalse(wrapped)
        self.assertEqual(movie["properties"], {"title": {"type": "string"}, "year": {"type": "integer"}})
        self.assertNotIn("additionalProperties", movie, "a result with more keys than declared is still a result")
        point, _ = self.output(Point)
        self.assertEqual(point["required"], ["x"])

    def test_other_results_are_wrapped(self):
        self.assertEqual(
            self.output(list[int]),
            ({"type": "object", "properties": {"result": {"type": "array", "items": {"type": "integer"},
                                                          "description": "What the function returns"}},
              "required": ["result"]}, True),
        )
        schema, wrapped = self.output(int | None)
        self.assertTrue(wrapped)
        self.assertEqual(schema["required"], ["result"])

    def test_no_schema_when_the_annotation_says_nothing(self):
        import inspect
        import typing

        class Block:
            pass

        for returns in (inspect.Parameter.empty, typing.Any, object, None, type(None)):
            self.assertEqual(self.output(returns), (None, False), returns)
        self.assertEqual(self.output(Block, (Block,)), (None, False))
        self.assertEqual(self.output(list[Block], (Block,)), (None, False))

    def test_no_schema_for_a_sequence_that_says_nothing_of_its_items(self):
        import typing

        # A table-shaped `-> list` result would otherwise travel twice.
        for returns in (list, tuple, typing.List, list[typing.Any], tuple[typing.Any, ...]):
            self.assertEqual(self.output(returns), (None, False), returns)
        schema, wrapped = self.output(list[dict])
        self.assertTrue(wrapped, "items described: a schema a client can check")
        self.assertEqual(schema["properties"]["result"]["items"], {"type": "object"})
