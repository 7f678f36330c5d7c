"""Structured results: a tool's return annotation as its `outputSchema`, and
its result as `structuredContent` beside the text, in both protocol versions,
over stdio and HTTP."""

import json
import tempfile
import unittest
from pathlib import Path

import anyio

from support import check_everywhere, cli_json, ok

INT_RESULT = {"type": "object", "properties": {"result": {"type": "integer", "description": "What the function returns"}},
              "required": ["result"]}


class Structured(unittest.IsolatedAsyncioTestCase):
    async def check(self, client):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        # A non-object result is wrapped as MCP asks: {"result": ...}.
        # (marked as fastmcp marks a wrapped result, so its client unwraps it)
        self.assertEqual(tools["add"].output_schema, {**INT_RESULT, "x-fastmcp-wrap-result": True})
        result = await client.call_tool("add", {"a": 2, "b": 3})
        self.assertEqual(ok(result), "5")
        self.assertEqual(result.structured_content, {"result": 5})
        # An object result is sent as it is.
        self.assertEqual(tools["return_dataclass"].output_schema["type"], "object")
        self.assertEqual(set(tools["return_dataclass"].output_schema["properties"]), {"x", "y", "label"})
        result = await client.call_tool("return_dataclass", {})
        self.assertEqual(result.structured_content, json.loads(ok(result)))
        self.assertEqual(set(result.structured_content), {"x", "y", "label"})
        # `list[...]` is wrapped too.
        self.assertEqual(tools["kwargs_tool"].output_schema["properties"]["result"]["type"], "array")
        result = await client.call_tool("kwargs_tool", {"a": 1, "b": 2})
        self.assertEqual(result.structured_content, {"result": json.loads(ok(result))})
        self.assertIn("b", result.structured_content["result"])
        # A bare `tuple` (or `list`) says nothing a client could check: no
        # schema, and the result travels once, as text.
        self.assertIsNone(tools["return_tuple"].output_schema)
        result = await client.call_tool("return_tuple", {})
        self.assertIsNone(result.structured_content)
        self.assertIsInstance(json.loads(ok(result)), list)
        # No annotation worth a schema (`Any`): text only.
        self.assertIsNone(tools["echo"].output_schema)
        result = await client.call_tool("echo", {"value": {"k": 1}})
        self.assertIsNone(result.structured_content)
        self.assertEqual(json.loads(ok(result)), {"k": 1})

    async def test_over_stdio_and_http_in_both_versions(self):
        await check_everywhere(self, self.check, "--workers", "1")

    async def test_the_catalog_carries_the_output_schema(self):
        catalog = (await anyio.to_thread.run_sync(cli_json, "catalog", "--format", "json"))["functions"]
        by_name = {f["name"]: f for f in catalog}
        self.assertEqual(by_name["add"]["output_schema"], INT_RESULT)
        self.assertTrue(by_name["add"]["output_wrapped"])
        self.assertNotIn("output_wrapped", by_name["return_dataclass"])
        self.assertNotIn("output_schema", by_name["echo"])
        # The keys that were there are as they were.
        self.assertEqual(
            set(by_name["echo"]), {"name", "module", "description", "parameters", "file", "line"}
        )


    async def test_a_large_text_reaches_every_client_whole(self):
        """A large text goes out as a stand-in spliced into what is sent (the
        response's body, stdout) as it is written: what the client reads is
        the text, escaped as JSON, in both places, over both transports
        (within the Python client's 1 MiB limit on an HTTP event)."""
        from mcp import Client

        from support import MODES, http_server, served

        cases = (("\u0001", 80_000), ('é"\n\\', 50_000), ("a", 480_000), ("😀", 100_000))

        async def check(client):
            for character, count in cases:
                result = await client.call_tool("text", {"character": character, "count": count})
                self.assertEqual(ok(result), character * count, repr(character))
                self.assertEqual(result.structured_content, {"result": character * count})
                untyped = await client.call_tool("text_untyped", {"character": character, "count": count})
                self.assertEqual(ok(untyped), character * count, repr(character))

        with tempfile.TemporaryDirectory() as tmp:
            functions = Path(tmp) / "functions"
            functions.mkdir()
            (functions / "texts.py").write_text(TEXTS)
            for version, mode in MODES.items():
                with self.subTest(transport="stdio", version=version):
                    async with served("--workers", "1", "serve", functions=functions, mode=mode) as client:
                        await check(client)
            async with http_server("--workers", "1", "serve", "--http", "127.0.0.1:0", functions=functions) as (_, url):
                for version, mode in MODES.items():
                    with self.subTest(transport="http", version=version):
                        async with Client(url, mode=mode) as client:
                            await check(client)


TEXTS = '''
def text(character: str, count: int) -> str:
    """`character` repeated `count` times."""
    return character * count


def text_untyped(character, count):
    """The same, untyped: text content only."""
    return character * count
'''


if __name__ == "__main__":
    unittest.main()
