"""fastmcp's client (PyPI `fastmcp`, a client nobody on this project wrote)
against `toolpool serve`, over stdio and HTTP, in both protocol versions:
list, call, raised error, timeout, cancellation, human prompt, structured
result, list change (on 2026-07-28 through a `subscriptions/listen` stream)."""

import shutil
import tempfile
import unittest
from pathlib import Path

import anyio
import mcp_types as types
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from mcp.client.subscriptions import listen
from mcp.shared.subscriptions import ToolsListChanged

from support import BIN, FIXTURES, MODES, alive, base_args, gone_within, http_server, parent_of, read_pid_file

WAIT = 30


class FastMcp(unittest.IsolatedAsyncioTestCase):
    async def flows(self, transport, version: str, mode: str, functions: Path, tmp: str):
        changed = anyio.Event()

        async def on_message(message):
            root = getattr(message, "root", message)
            if isinstance(root, types.ToolListChangedNotification):
                changed.set()

        async def answer(message, response_type, params, context):
            self.assertIn("Six times seven?", message)
            return {"response": "forty-two"}

        client = Client(transport, mode=mode, elicitation_handler=answer, message_handler=on_message)
        async with client:
            self.assertEqual(client.protocol_version, version)
            tools = {t.name: t for t in await client.list_tools()}
            self.assertIn("add", tools)

            # A call, and its structured result as fastmcp reads it.
            result = await client.call_tool("add", {"a": 2, "b": 3})
            self.assertEqual(result.content[0].text, "5")
            self.assertEqual(result.structured_content, {"result": 5})
            self.assertEqual(result.data, 5)
            point = await client.call_tool("return_dataclass", {})
            self.assertEqual(point.structured_content, {"x": 1, "y": 2, "label": "p"})

            raised = await client.call_tool("raise_value_error", {"message": "boom"}, raise_on_error=False)
            self.assertTrue(raised.is_error)
            self.assertEqual(raised.content[0].text, "Tool raise_value_error error: ValueError: boom")

            timed_out = await client.call_tool("sleep_forever", {}, raise_on_error=False)
            self.assertTrue(timed_out.is_error)
            self.assertTrue(timed_out.content[0].text.startswith("Tool sleep_forever error: TimeoutError: "))

            pid_file = Path(tmp) / f"grandchild-{mode}"
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(client.call_tool, "spawn_grandchild", {"pid_file": str(pid_file)})
                    grandchild = await read_pid_file(pid_file)
                    worker = parent_of(grandchild)
                    scope.cancel()
            self.assertTrue(await gone_within(worker, 10), f"worker {worker} survived")
            self.assertTrue(await gone_within(grandchild, 10), f"grandchild {grandchild} survived")
            self.assertEqual((await client.call_tool("add", {"a": 1, "b": 1})).data, 2)

            # An elicitation request on 2025-11-25, a multi-round-trip result on 2026-07-28.
            asked = await client.call_tool("ask_human", {"question": "Six times seven?"})
            self.assertEqual(asked.data["text"], "forty-two")

            # A module added under --watch: on 2025-11-25 a notification on the
            # session; on 2026-07-28 (no sessions) an event on the client's open
            # `subscriptions/listen` stream, which fastmcp's client opens through
            # the session it is built on and also hands to its message handler.
            added = f"added_{mode}"
            module = functions / f"{added}.py"
            if version == "2025-11-25":
                self.assertTrue(client.initialize_result.capabilities.tools.list_changed)
                module.write_text(f"def {added}() -> str:\n    return 'new'\n")
                with anyio.fail_after(WAIT):
                    await changed.wait()
            else:
                async with listen(client.session, tools_list_changed=True) as subscription:
                    self.assertTrue(subscription.honored.tools_list_changed)
                    module.write_text(f"def {added}() -> str:\n    return 'new'\n")
                    with anyio.fail_after(WAIT):
                        event = await subscription.__anext__()
                self.assertIsInstance(event, ToolsListChanged)
                with anyio.fail_after(WAIT):
                    await changed.wait()
            self.assertIn(added, [t.name for t in await client.list_tools()])
            self.assertEqual((await client.call_tool(added, {})).data, "new")

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name
        self.functions = Path(self.tmp) / "functions"
        shutil.copytree(FIXTURES, self.functions, ignore=shutil.ignore_patterns("__pycache__"))

    def tearDown(self):
        self._tmp.cleanup()

    def args(self, *extra):
        return base_args(str(Path(self.tmp) / "session"), "--workers", "2", "--timeout", "1",
                         "serve", "--watch", *extra, functions=self.functions)

    async def test_over_stdio_in_both_versions(self):
        for version, mode in MODES.items():
            with self.subTest(version=version):
                transport = StdioTransport(BIN, self.args(), keep_alive=False, log_file=Path(self.tmp) / "stderr.txt")
                await self.flows(transport, version, mode, self.functions, self.tmp)

    async def test_over_http_in_both_versions(self):
        for version, mode in MODES.items():
            with self.subTest(version=version):
                async with http_server("--workers", "2", "--timeout", "1", "serve", "--watch", "--http", "127.0.0.1:0",
                                       functions=self.functions) as (_, url):
                    await self.flows(url, version, mode, self.functions, self.tmp)


if __name__ == "__main__":
    unittest.main()
