"""A workflow node's tools over stdio, and the server over streamable HTTP."""

import signal
import tempfile
import unittest
from pathlib import Path

import anyio
from mcp import Client
from mcp.shared.exceptions import MCPError

from support import cli_json, error, http_server, ok, served, workflow_file


class WorkflowNode(unittest.IsolatedAsyncioTestCase):
    async def test_a_node_lists_exactly_its_tools(self):
        with tempfile.TemporaryDirectory() as tmp:
            workflow = str(workflow_file(Path(tmp)))
            resolved = await anyio.to_thread.run_sync(
                cli_json, "--timeout", "9", "resolve", workflow, "--node", "Agent"
            )
            async with served(
                "--workers", "1", "--timeout", "9", "serve", "--config", workflow, "--node", "Agent"
            ) as client:
                tools = (await client.list_tools()).tools
                expected = resolved["nodes"][0]["tools"]
                self.assertEqual([t.name for t in tools], ["fx_add", "fx_sleep_forever", "echo"])
                for tool, spec in zip(tools, expected):
                    self.assertEqual(tool.name, spec["name"])
                    self.assertEqual(tool.description, spec["description"])
                    self.assertEqual(tool.input_schema, spec["parameters"])
                    self.assertEqual(tool.meta["toolpool/timeout"], spec["timeout"])
                    self.assertEqual(tool.meta["toolpool/function"], spec["function"])
                self.assertEqual(ok(await client.call_tool("fx_add", {"a": 2, "b": 3})), "5")
                self.assertTrue(
                    error(await client.call_tool("fx_sleep_forever", {})).startswith(
                        "Tool fx_sleep_forever error: TimeoutError: function 'sleep_forever' timed out after 0.5 s"
                    )
                )
                with self.assertRaises(MCPError) as outside:
                    await client.call_tool("getpid", {})
                self.assertEqual(outside.exception.error.code, -32602)
                self.assertIn("NotFound", outside.exception.error.message)


class StreamableHttp(unittest.IsolatedAsyncioTestCase):
    async def test_list_and_call_over_http_then_sigterm_exits_0(self):
        async with http_server("--workers", "2", "--timeout", "0.5", "serve", "--http", "127.0.0.1:0") as (
            process,
            url,
        ):
            self.assertTrue(url.startswith("http://127.0.0.1:") and url.endswith("/mcp"), url)
            async with Client(url) as client:
                self.assertEqual(client.server_info.name, "toolpool")
                names = [t.name for t in (await client.list_tools()).tools]
                self.assertIn("add", names)
                self.assertEqual(ok(await client.call_tool("add", {"a": 2, "b": 3})), "5")
                self.assertIn("TimeoutError", error(await client.call_tool("sleep_forever", {})))
                results = {}

                async def one(i):
                    results[i] = ok(await client.call_tool("echo", {"value": f"v{i}"}))

                async with anyio.create_task_group() as tg:
                    for i in range(20):
                        tg.start_soon(one, i)
                self.assertEqual(results, {i: f"v{i}" for i in range(20)})
            # A second client (a new MCP session) on the same pool.
            async with Client(url) as client:
                self.assertEqual(ok(await client.call_tool("add", {"a": 1, "b": 1})), "2")
            process.send_signal(signal.SIGTERM)
            self.assertEqual(await anyio.to_thread.run_sync(lambda: process.wait(timeout=20)), 0)
            self.assertEqual(process.stdout.read(), b"", "nothing on stdout in HTTP mode")


if __name__ == "__main__":
    unittest.main()
