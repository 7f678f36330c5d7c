"""The Python `mcp` client against `toolpool serve` over stdio: the
handshake, the tool list, calls, and failures as tool errors."""

import json
import time
import unittest

from mcp.shared.exceptions import MCPError

import anyio

from support import MODES, VERSION, cli_json, error, ok, served, warnings_in


class Basics(unittest.IsolatedAsyncioTestCase):
    async def test_both_protocol_versions_name_toolpool(self):
        for version, mode in MODES.items():
            with self.subTest(version=version):
                log = []
                async with served("--workers", "1", "serve", mode=mode, log=log) as client:
                    self.assertEqual(client.server_info.name, "toolpool")
                    if VERSION:
                        self.assertEqual(client.server_info.version, VERSION)
                    self.assertIsNotNone(client.server_capabilities.tools)
                    self.assertEqual(client.protocol_version, version)
                    self.assertEqual(ok(await client.call_tool("add", {"a": 2, "b": 3})), "5")
                # The auto mode's `server/discover` probe is no warning.
                self.assertEqual(warnings_in(log[0]), [])

    async def test_a_pinned_2026_client_is_served(self):
        async with served("--workers", "1", "serve", mode="2026-07-28") as client:
            self.assertEqual(client.protocol_version, "2026-07-28")
            self.assertEqual(ok(await client.call_tool("add", {"a": 1, "b": 2})), "3")

    async def test_list_is_the_catalog(self):
        async with served("--workers", "1", "serve") as client:
            tools = (await client.list_tools()).tools
        catalog = (await anyio.to_thread.run_sync(cli_json, "catalog", "--format", "json"))["functions"]
        # Functions that serve a resource are read, not called.
        catalog = [f for f in catalog if "resource" not in f]
        self.assertEqual([t.name for t in tools], [f["name"] for f in catalog])
        for tool, function in zip(tools, catalog):
            self.assertEqual(tool.description, function["description"])
            self.assertEqual(tool.input_schema, function["parameters"])

    async def test_call_raise_and_unknown(self):
        async with served("--workers", "1", "serve") as client:
            self.assertEqual(ok(await client.call_tool("add", {"a": 2, "b": 3})), "5")
            value = {"list": [1, "二"], "nested": {"x": None}}
            self.assertEqual(json.loads(ok(await client.call_tool("echo", {"value": value}))), value)
            self.assertEqual(
                error(await client.call_tool("raise_value_error", {"message": "boom"})),
                "Tool raise_value_error error: ValueError: boom",
            )
            # An unknown tool is a protocol error (-32602), with the same text.
            with self.assertRaises(MCPError) as unknown:
                await client.call_tool("nope", {})
            self.assertEqual(unknown.exception.error.code, -32602)
            self.assertTrue(
                unknown.exception.error.message.startswith("Tool nope error: NotFound: function 'nope' not found")
            )
            self.assertTrue(
                error(await client.call_tool("add", {"a": "x"})).startswith(
                    "Tool add error: InvalidArguments: "
                )
            )
            self.assertIn("WorkerDied", error(await client.call_tool("segfault", {})))
            self.assertEqual(ok(await client.call_tool("add", {"a": 1, "b": 1})), "2")

    async def test_timeout_is_a_tool_error_and_the_server_serves_on(self):
        async with served("--workers", "1", "--timeout", "0.5", "serve") as client:
            started = time.monotonic()
            text = error(await client.call_tool("sleep_forever", {}))
            self.assertTrue(
                text.startswith(
                    "Tool sleep_forever error: TimeoutError: function 'sleep_forever' timed out after 0.5 s"
                ),
                text,
            )
            self.assertIn("was killed", text)
            self.assertLess(time.monotonic() - started, 5)
            self.assertEqual(ok(await client.call_tool("add", {"a": 2, "b": 3})), "5")


if __name__ == "__main__":
    unittest.main()
