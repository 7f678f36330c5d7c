"""Invocation: argument checks and coercion for every schema row, `_context`,
async tools, exceptions of every kind, unknown functions."""

import asyncio
import contextlib
import io
import os
import sys
import unittest

import support
from toolpool_shim.discovery import LoadError
from toolpool_shim.invoke import Invoker, ToolFailure

CONFIG = {
    "functions_dir": "/project/functions/function_calling",
    "workspace": "/sessions/s1/code_workspace",
    "session_dir": "/sessions/s1",
    "session_id": "s1",
}


class InvokeCase(unittest.TestCase):
    toolset = None  # set by subclasses; default: the fixture functions

    def setUp(self):
        if self.toolset is None:
            with contextlib.redirect_stderr(io.StringIO()):
                type(self).toolset = support.fixture_toolset()
        self.invoker = Invoker(self.toolset, CONFIG, None)

    def call(self, name, args=None, context=None, trace=None):
        with contextlib.redirect_stderr(io.StringIO()):
            value, blocks = self.invoker.invoke(name, {} if args is None else args, context or {}, trace)
            self.assertIsNone(blocks)  # no attachment results among these tools
            return value.data()

    def failure(self, name, args=None, context=None) -> dict:
        with self.assertRaises(ToolFailure) as failed:
            self.call(name, args, context)
        return failed.exception.error

    def assertInvalid(self, name, args, message):
        error = self.failure(name, args)
        self.assertEqual((error["type"], error["message"]), ("InvalidArguments", message))


class CoercionOfEachSchemaRow(InvokeCase):
    def test_scalars_take_exact_values(self):
        self.assertEqual(self.call("schema_scalars", {"text": "hi", "count": 5, "ratio": 2.5, "flag": True}),
                         ["hi", 5, 2.5, True])

    def test_scalars_are_coerced_where_models_commonly_err(self):
        self.assertEqual(self.call("schema_scalars", {"text": 12, "count": "5", "ratio": "2.5", "flag": "TRUE"}),
                         ["12", 5, 2.5, True])
        self.assertEqual(self.call("schema_scalars", {"text": "", "count": " -7 ", "ratio": 3, "flag": "0"}),
                         ["", -7, 3.0, False])
        self.assertEqual(self.call("schema_scalars", {"text": "", "count": 4.0, "ratio": "1e3", "flag": "False"}),
                         ["", 4, 1000.0, False])

    def test_an_int_for_a_float_becomes_a_float(self):
        self.assertIsInstance(self.call("schema_scalars", {"text": "", "count": 1, "ratio": 3, "flag": "1"})[2], float)

    def test_scalars_that_do_not_fit_are_named(self):
        self.assertInvalid("schema_scalars", {"text": True, "count": "abc", "ratio": "x", "flag": "yes"}, "; ".join([
            "argument 'text': expected string, got boolean true",
            "argument 'count': expected integer, got string 'abc'",
            "argument 'ratio': expected number, got string 'x'",
            "argument 'flag': expected boolean, got string 'yes'",
        ]))
        self.assertInvalid("schema_scalars", {"text": [], "count": 2.5, "ratio": None, "flag": 1}, "; ".join([
            "argument 'text': expected string, got array",
            "argument 'count': expected integer, got number 2.5",
            "argument 'ratio': expected number, got null",
            "argument 'flag': expected boolean, got integer 1",
        ]))

    def test_sequences_become_lists_and_tuples_with_coerced_items(self):
        self.assertEqual(
            self.call("schema_sequences", {"a": "[1, \"2\"]", "b": ["x"], "c": [1, "2.5"], "d": ["3", 4]}),
            [[1, 2], ["x"], [1.0, 2.5], [3, 4], "tuple"],
        )

    def test_a_bad_item_is_named_by_its_index(self):
        self.assertInvalid("schema_sequences", {"a": [1, "x"], "b": "not json", "c": [], "d": []}, "; ".join([
            "argument 'a[1]': expected integer, got string 'x'",
            "argument 'b': expected array, got string 'not json'",
        ]))

    def test_sets_and_frozensets(self):
        self.assertEqual(self.call("schema_sets", {"a": ["y", "x", "y"], "b": ["2", 1]}),
                         [["x", "y"], [1, 2], "set", "frozenset"])

    def test_a_fixed_tuple_checks_its_length_and_each_item(self):
        self.assertEqual(self.call("schema_pair", {"pair": ["1", "x"]}), ["tuple", 1, "x"])
        self.assertInvalid("schema_pair", {"pair": [1]}, "argument 'pair': expected an array of 2 items, got an array of 1")
        self.assertInvalid("schema_pair", {"pair": [1, [2]]}, "argument 'pair[1]': expected string, got array")

    def test_mappings_take_objects_or_json_text_and_convert_keys_and_values(self):
        self.assertEqual(
            self.call("schema_mappings", {"a": '{"k": [1]}', "b": {}, "c": {"n": "3"}, "d": {"1": "true"}}),
            [{"k": [1]}, {}, {"n": 3}, [[1, True]]],
        )
        self.assertInvalid("schema_mappings", {"a": [], "b": {}, "c": {"n": "x"}, "d": {"k": True}}, "; ".join([
            "argument 'a': expected object, got array",
            "argument 'c[\"n\"]': expected integer, got string 'x'",
            "argument 'd[\"k\"]': expected integer, got string 'k'",
        ]))

    def test_optional_parameters_left_out_get_none_or_their_default(self):
        self.assertEqual(self.call("schema_optionals", {}), [None, None, None, 3])
        self.assertEqual(self.call("schema_optionals", {"a": "4", "b": None, "c": 1, "d": None}), [4, None, 1.0, None])

    def test_unions_try_exact_matches_before_lax_ones(self):
        self.assertEqual(self.call("schema_unions", {"a": "5", "b": ["x"], "c": 5}),
                         [["str", "5"], ["list", ["x"]], ["int", 5]])
        self.assertEqual(self.call("schema_unions", {"a": 5, "b": "7", "c": 2.5}),
                         [["int", 5], ["int", 7], ["float", 2.5]])
        self.assertInvalid("schema_unions", {"a": [1], "b": {}, "c": "x"}, "; ".join([
            "argument 'a': expected integer or string, got array",
            "argument 'b': expected integer or array, got object",
            "argument 'c': expected number or integer, got string 'x'",
        ]))

    def test_literals(self):
        self.assertEqual(self.call("schema_literals", {"mode": "w", "level": "2", "mixed": True}),
                         ["w", 2, ["bool", True]])
        self.assertEqual(self.call("schema_literals", {"mode": "r", "level": 3, "mixed": 1}), ["r", 3, ["int", 1]])
        self.assertInvalid("schema_literals", {"mode": "x", "level": 4, "mixed": "b"}, "; ".join([
            "argument 'mode': expected one of 'r', 'w', got string 'x'",
            "argument 'level': expected one of 1, 2, 3, got integer 4",
            "argument 'mixed': expected one of 'a', 1, True, got string 'b'",
        ]))

    def test_enums_receive_the_member(self):
        self.assertEqual(self.call("schema_enums", {"color": "red", "level": 2}), ["<Color.RED: 'red'>", "<Level.HIGH: 2>"])
        self.assertEqual(self.call("schema_enums", {"color": "GREEN", "level": "1"}), ["<Color.GREEN: 'green'>", "<Level.LOW: 1>"])
        self.assertInvalid("schema_enums", {"color": "blue", "level": True}, "; ".join([
            "argument 'color': expected one of 'red', 'green', got string 'blue'",
            "argument 'level': expected one of 1, 2, got boolean true",
        ]))

    def test_a_dataclass_is_built_from_an_object(self):
        self.assertEqual(self.call("schema_dataclass", {"point": {"x": "3", "tags": ["a"]}}), ["Point", 3, 0, None, ["a"]])
        self.assertEqual(self.call("schema_dataclass", {"point": '{"x": 1, "y": 2, "label": "p"}'}), ["Point", 1, 2, "p", []])
        self.assertInvalid("schema_dataclass", {"point": {"x": "a"}}, "argument 'point.x': expected integer, got string 'a'")
        self.assertInvalid("schema_dataclass", {"point": {"z": 1}},
                           "argument 'point': unexpected field 'z'; missing required field 'x'")
        self.assertInvalid("schema_dataclass", {"point": 5}, "argument 'point': expected object (Point), got integer 5")

    def test_typed_dicts_are_checked_and_stay_dicts(self):
        self.assertEqual(self.call("schema_typed_dict", {"movie": {"title": "T", "year": "1999"}, "draft": {}}),
                         [{"title": "T", "year": 1999}, {}])
        self.assertInvalid("schema_typed_dict", {"movie": {"title": "T"}, "draft": {"rating": "x"}}, "; ".join([
            "argument 'movie': missing required field 'year'",
            "argument 'draft.rating': expected number, got string 'x'",
        ]))

    @unittest.skipIf(sys.version_info < (3, 11), 'Python 3.10 leaves list["TreeNode"] unresolved')
    def test_a_self_referential_dataclass_is_built_all_the_way_down(self):
        self.assertEqual(self.call("schema_recursive", {"tree": {"name": "root", "children": [{"name": "leaf"}]}}),
                         ["root", ["TreeNode"]])

    def test_formats_are_converted(self):
        self.assertEqual(self.call("schema_formats", {
            "when": "2024-01-02T03:04:05Z",
            "day": "2024-01-02",
            "at": "10:20:30",
            "ident": "12345678-1234-5678-1234-567812345678",
            "where": "/tmp/x",
            "amount": "1.10",
        }), [
            "datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)",
            "datetime.date(2024, 1, 2)",
            "datetime.time(10, 20, 30)",
            "UUID('12345678-1234-5678-1234-567812345678')",
            "PosixPath('/tmp/x')",
            "Decimal('1.10')",
        ])

    def test_decimals_also_take_numbers(self):
        args = {"when": "2024-01-02T03:04:05+02:00", "day": "2024-01-02", "at": "10:20:30Z",
                "ident": "12345678123456781234567812345678", "where": "rel", "amount": 0.1}
        result = self.call("schema_formats", args)
        self.assertEqual(result[5], "Decimal('0.1')")
        self.assertEqual(self.call("schema_formats", {**args, "amount": 3})[5], "Decimal('3')")
        self.assertEqual(result[2], "datetime.time(10, 20, 30, tzinfo=datetime.timezone.utc)")

    def test_formats_that_do_not_parse_are_named(self):
        self.assertInvalid("schema_formats", {
            "when": "yesterday", "day": "2024-13-01", "at": 5, "ident": "nope", "where": 1, "amount": "a lot",
        }, "; ".join([
            "argument 'when': expected date-time string (ISO 8601), got string 'yesterday'",
            "argument 'day': expected date string (ISO 8601), got string '2024-13-01'",
            "argument 'at': expected time string (ISO 8601), got integer 5",
            "argument 'ident': expected UUID string, got string 'nope'",
            "argument 'where': expected path string, got integer 1",
            "argument 'amount': expected decimal string, got string 'a lot'",
        ]))

    def test_bytes_are_decoded_from_base64(self):
        self.assertEqual(self.call("schema_bytes", {"data": "aGk="}), ["bytes", 2, "hi"])
        self.assertInvalid("schema_bytes", {"data": "not base64!"},
                           "argument 'data': expected base64 string, got string 'not base64!'")

    def test_parammeta_enums_are_enforced(self):
        self.assertEqual(
            self.call("schema_param_meta", {"path": "p", "mode": "r", "count": "2", "mixed": "x", "inner": "b"}),
            ["p", "r", 2, "x", None, "b", "<Color.RED: 'red'>"],
        )
        self.assertInvalid("schema_param_meta", {"path": "p", "mode": "a", "count": 3, "mixed": "y", "inner": "c",
                                                 "color": "green"}, "; ".join([
            "argument 'mode': expected one of 'r', 'w', got string 'a'",
            "argument 'count': expected one of 1, 2, got integer 3",
            "argument 'mixed': expected one of 'x', 1, got string 'y'",
            "argument 'inner': expected one of 'a', 'b', got string 'c'",
            "argument 'color': expected one of 'red', got string 'green'",
        ]))

    def test_new_types_coerce_as_their_base(self):
        self.assertEqual(self.call("schema_new_type", {"user": "7"}), ["int", 7])

    def test_unannotated_and_any_take_anything(self):
        self.assertEqual(self.call("schema_unannotated", {"value": [1, {"a": None}]}), [1, {"a": None}])
        self.assertEqual(self.call("schema_any", {"value": 2.5}), 2.5)

    def test_keyword_only_and_positional_only_parameters(self):
        self.assertEqual(self.call("schema_keyword_only", {"a": 1, "c": "true"}), [1, "x", True])
        self.assertEqual(self.call("schema_positional_only", {"a": 1, "c": 5}), [1, 2, 5])

    def test_hidden_parameters_keep_their_defaults_and_context_is_injected(self):
        self.assertEqual(self.call("schema_hidden", {"visible": 1}), [1, [], 0, True])

    def test_kwargs_take_unknown_arguments_and_the_context(self):
        result = self.call("schema_kwargs", {"a": "1", "colour": "red"})
        self.assertEqual(result["a"], 1)
        self.assertEqual(set(result["kwargs"]), {"colour", "_context"})
        self.assertEqual(result["kwargs"]["colour"], "'red'")

    def test_decorated_and_async_functions(self):
        self.assertEqual(self.call("schema_decorated", {"word": "hi"}), "HI")
        self.assertEqual(self.call("schema_async", {"x": "2"}), 4)

    def test_string_annotations(self):
        self.assertEqual(self.call("future_types", {"count": "1", "names": '["a"]'}), [1, ["a"], "fast", None])
        self.assertEqual(self.call("future_forward", {"box": {"size": 1, "inner": {"size": "2"}}}), ["Box", 1, 2])


def needs_path_and_count(path: str, count: int, _context: dict | None = None) -> str:
    return path * count


def returns_context(_context=None) -> dict:
    return {key: [type(value).__name__, value] for key, value in _context.items()}


def returns_trace_environ(fail: bool = False) -> list:
    if fail:
        raise RuntimeError("after reading the environment")
    return [os.environ.get("TRACEPARENT"), os.environ.get("TRACESTATE")]


def raises_value_error(message: str) -> None:
    raise ValueError(message)


def exits(code: int) -> None:
    sys.exit(code)


def interrupted() -> None:
    raise KeyboardInterrupt


async def async_raises() -> None:
    await asyncio.sleep(0)
    raise RuntimeError("async failure")


async def async_interrupted() -> None:
    raise KeyboardInterrupt


async def loop_identity() -> int:
    return id(asyncio.get_running_loop())


def ok() -> str:
    return "still serving"


class ArgumentChecks(InvokeCase):
    toolset = support.toolset_of(needs_path_and_count)

    def test_all_problems_are_named_in_one_message(self):
        self.assertInvalid("needs_path_and_count", {"count": "abc", "colour": "red", "_context": {}}, (
            "missing required argument 'path'; unexpected argument 'colour'; "
            "argument 'count': expected integer, got string 'abc'; "
            "argument '_context': names starting with '_' cannot be set by the caller"
        ))

    def test_arguments_must_be_a_map(self):
        self.assertInvalid("needs_path_and_count", ["a", 1],
                           "arguments must be an object (a map of names to values), got list")

    def test_valid_arguments_run_the_function(self):
        self.assertEqual(self.call("needs_path_and_count", {"path": "ab", "count": "2"}), "abab")


class UnknownFunctions(InvokeCase):
    toolset = support.toolset_of(needs_path_and_count, returns_context, errors=[
        LoadError("broken", "broken.py", "ModuleNotFoundError: No module named 'nope'", failed_import=True),
        LoadError("dup_b", "dup_b.py", "DuplicateFunction: ...", failed_import=False),
        LoadError("sub/bad", "sub/bad.py", "SyntaxError: invalid syntax (bad.py, line 1)", failed_import=True),
    ])

    def test_not_found_names_close_matches_and_modules_that_failed_to_import(self):
        error = self.failure("needs_path_and_cont")
        self.assertEqual((error["type"], error["message"]), ("NotFound", (
            "function 'needs_path_and_cont' not found under function directory "
            "/project/functions/function_calling (did you mean 'needs_path_and_count'?); modules that failed to import: "
            "broken (ModuleNotFoundError: No module named 'nope'), "
            "sub/bad (SyntaxError: invalid syntax (bad.py, line 1))"
        )))

    def test_no_close_match_and_no_failed_import(self):
        self.invoker = Invoker(support.toolset_of(needs_path_and_count), CONFIG, None)
        self.assertEqual(
            self.failure("zzz")["message"],
            "function 'zzz' not found under function directory /project/functions/function_calling",
        )

    def test_a_local_functions_folder_says_the_bundled_tools_are_not_used(self):
        config = dict(CONFIG, bundled_tools_hidden=True)
        self.invoker = Invoker(support.toolset_of(needs_path_and_count), config, None)
        self.assertEqual(self.failure("get_current_time")["message"], (
            "function 'get_current_time' not found under function directory "
            "/project/functions/function_calling; the bundled tools are not used, since "
            "functions/function_calling exists in the current directory "
            "(--functions-dir chooses the directory)"
        ))


class Context(InvokeCase):
    toolset = support.toolset_of(returns_context)

    def test_context_carries_the_session_and_the_request(self):
        context = self.call("returns_context", {}, {"session_id": "s2", "node_id": "n1", "vars": {"k": 1}})
        self.assertEqual(context, {
            "python_workspace_root": ["PosixPath", "/sessions/s1/code_workspace"],
            "graph_directory": ["PosixPath", "/sessions/s1"],
            "session_id": ["str", "s2"],
            "node_id": ["str", "n1"],
            "vars": ["dict", {"k": 1}],
            "attachment_store": ["AttachmentStore", "<toolpool AttachmentStore proxy for /sessions/s1/code_workspace/attachments>"],
            "human_prompt": ["NoneType", None],
            "progress": ["ProgressReporter", "<toolpool progress reporter (nobody listening)>"],
            "traceparent": ["NoneType", None],
            "tracestate": ["NoneType", None],
        })

    def test_human_prompt_is_a_proxy_only_when_the_call_has_one(self):
        context = self.call("returns_context", {}, {"human_prompt": True})
        self.assertEqual(context["human_prompt"][0], "HumanPromptService")

    def test_context_defaults_without_request_context(self):
        context = self.call("returns_context")
        self.assertEqual((context["session_id"], context["node_id"], context["vars"]),
                         (["str", "s1"], ["NoneType", None], ["dict", {}]))

    def test_an_agent_supplied_context_is_refused(self):
        self.assertInvalid("returns_context", {"_context": {"python_workspace_root": "/"}},
                           "argument '_context': names starting with '_' cannot be set by the caller")


class TraceContext(InvokeCase):
    toolset = None

    PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    def setUp(self):
        super().setUp()
        self.invoker = Invoker(support.toolset_of(returns_context, returns_trace_environ), CONFIG, None)
        saved = {name: os.environ.pop(name, None) for name in ("TRACEPARENT", "TRACESTATE")}
        self.addCleanup(lambda: [os.environ.__setitem__(k, v) for k, v in saved.items() if v is not None])

    def test_the_trace_is_in_context_and_environ_while_the_call_runs(self):
        context = self.call("returns_context", trace=(self.PARENT, "k=v"))
        self.assertEqual((context["traceparent"], context["tracestate"]),
                         (["str", self.PARENT], ["str", "k=v"]))
        self.assertEqual(self.call("returns_trace_environ", trace=(self.PARENT, "k=v")), [self.PARENT, "k=v"])

    def test_the_environment_is_put_back_after_the_call_even_when_it_raises(self):
        os.environ["TRACESTATE"] = "worker=own"
        self.assertEqual(self.call("returns_trace_environ", trace=(self.PARENT, None)), [self.PARENT, None])
        self.assertEqual((os.environ.get("TRACEPARENT"), os.environ.get("TRACESTATE")), (None, "worker=own"))
        self.assertEqual(self.call("returns_trace_environ"), [None, "worker=own"])
        self.failure("returns_trace_environ", {"fail": True})
        self.assertIsNone(os.environ.get("TRACEPARENT"))


class Exceptions(InvokeCase):
    toolset = support.toolset_of(raises_value_error, exits, interrupted, async_raises, async_interrupted,
                                 loop_identity, ok)

    def test_an_exception_becomes_type_message_and_traceback(self):
        error = self.failure("raises_value_error", {"message": "bad value"})
        self.assertEqual((error["type"], error["message"]), ("ValueError", "bad value"))
        self.assertTrue(error["traceback"].startswith("Traceback (most recent call last):\n"))
        self.assertIn("raise ValueError(message)", error["traceback"])
        self.assertNotIn("toolpool_shim", error["traceback"], "the traceback starts at the tool")
        self.assertTrue(error["traceback"].endswith("ValueError: bad value\n"))

    def test_system_exit_and_keyboard_interrupt_are_caught_and_the_worker_goes_on(self):
        error = self.failure("exits", {"code": 3})
        self.assertEqual((error["type"], error["message"]), ("SystemExit", "3"))
        error = self.failure("interrupted")
        self.assertEqual((error["type"], error["message"]), ("KeyboardInterrupt", ""))
        self.assertEqual(self.call("ok"), "still serving")

    def test_async_tools_run_to_completion_in_one_loop(self):
        error = self.failure("async_raises")
        self.assertEqual((error["type"], error["message"]), ("RuntimeError", "async failure"))
        first = self.call("loop_identity")
        self.assertEqual(self.failure("async_interrupted")["type"], "KeyboardInterrupt")
        self.assertEqual(self.call("loop_identity"), first)


if __name__ == "__main__":
    unittest.main()
