"""The official Python `mcp` client against `toolpool serve`, every flow in one
connection, over stdio and HTTP, in both protocol versions: list, call,
structured result, raised error, timeout, cancellation (the worker and its
grandchild die), human prompt (an elicitation request on 2025-11-25, a
multi-round-trip result on 2026-07-28), list change (a notification on
2025-11-25, an event on a `subscriptions/listen` stream on 2026-07-28).
Tasks are in test_tasks (this client has no tasks API)."""

import shutil
import tempfile
import unittest
from pathlib import Path

import anyio
import mcp_types as types
from mcp import Client

from support import FIXTURES, MODES, error, gone_within, http_server, ok, parent_of, read_pid_file, served, warnings_in

WAIT = 30  # seconds a list change may take to be seen (the watcher polls; the machine is shared)
ARGS = ("--workers", "2", "--timeout", "1", "serve", "--watch")


def unexpected_warnings(log: str) -> list[str]:
    """The log's warnings but for the call log of the failures provoked here,
    and the reaper's sweep at shutdown when it comes just after the reload
    this test ends with (a worker retired by the reload may still be going:
    a known race of the reload with shutdown, not of MCP)."""
    return [
        line for line in warnings_in(log)
        if "toolpool::calls" not in line and "killing a process a worker left behind" not in line
    ]


class OfficialClient(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = Path(self._tmp.name)
        self.functions = self.tmp / "functions"
        shutil.copytree(FIXTURES, self.functions, ignore=shutil.ignore_patterns("__pycache__"))

    def tearDown(self):
        self._tmp.cleanup()

    async def flows(self, client, version: str, changed: anyio.Event, asked: list):
        self.assertEqual(client.protocol_version, version)
        tools = {t.name: t for t in (await client.list_tools()).tools}
        self.assertIn("add", tools)
        self.assertEqual(tools["add"].output_schema["properties"],
                         {"result": {"type": "integer", "description": "What the function returns"}})

        added = await client.call_tool("add", {"a": 2, "b": 3})
        self.assertEqual(ok(added), "5")
        self.assertEqual(added.structured_content, {"result": 5})
        point = await client.call_tool("return_dataclass", {})
        self.assertEqual(point.structured_content, {"x": 1, "y": 2, "label": "p"})

        raised = error(await client.call_tool("raise_value_error", {"message": "boom"}))
        self.assertEqual(raised, "Tool raise_value_error error: ValueError: boom")

        timed_out = error(await client.call_tool("sleep_forever", {}))
        self.assertTrue(timed_out.startswith("Tool sleep_forever error: TimeoutError: "), timed_out)

        pid_file = self.tmp / f"grandchild-{version}"
        scope = anyio.CancelScope()

        async def doomed():
            with scope:
                await client.call_tool("spawn_grandchild", {"pid_file": str(pid_file)})

        async with anyio.create_task_group() as tg:
            tg.start_soon(doomed)
            grandchild = await read_pid_file(pid_file)
            worker = parent_of(grandchild)
            scope.cancel()
        self.assertTrue(await gone_within(worker, 10), f"worker {worker} survived")
        self.assertTrue(await gone_within(grandchild, 10), f"grandchild {grandchild} survived")
        self.assertEqual(ok(await client.call_tool("add", {"a": 1, "b": 1})), "2")

        answer = await client.call_tool("ask_human", {"question": "Six times seven?"})
        self.assertEqual(answer.structured_content["text"], "forty-two")
        self.assertEqual(len(asked), 1)
        self.assertIn("Six times seven?", asked[0].message)

        self.assertTrue(client.server_capabilities.tools.list_changed)
        name = f"added_{version.replace('-', '_')}"
        module = self.functions / f"{name}.py"
        source = f"def {name}() -> str:\n    \"\"\"Added while serving.\"\"\"\n    return 'new'\n"
        if version == "2025-11-25":
            module.write_text(source)
            with anyio.fail_after(WAIT):
                await changed.wait()
        else:
            async with client.listen(tools_list_changed=True) as subscription:
                module.write_text(source)
                with anyio.fail_after(WAIT):
                    await subscription.__anext__()
        self.assertIn(name, [t.name for t in (await client.list_tools()).tools])
        self.assertEqual(ok(await client.call_tool(name, {})), "new")

    def handlers(self):
        changed, asked = anyio.Event(), []

        async def on_message(message):
            if isinstance(getattr(message, "root", message), types.ToolListChangedNotification):
                changed.set()

        async def answer(context, params):
            asked.append(params)
            return types.ElicitResult(action="accept", content={"response": "forty-two"})

        return changed, asked, {"message_handler": on_message, "elicitation_callback": answer}

    async def test_over_stdio_in_both_versions(self):
        for version, mode in MODES.items():
            with self.subTest(version=version):
                changed, asked, options = self.handlers()
                log = []
                async with served(*ARGS, functions=self.functions, mode=mode, log=log, **options) as client:
                    await self.flows(client, version, changed, asked)
                self.assertEqual(unexpected_warnings(log[0]), [])

    async def test_over_http_in_both_versions(self):
        for version, mode in MODES.items():
            with self.subTest(version=version):
                changed, asked, options = self.handlers()
                log = []
                async with http_server(*ARGS, "--http", "127.0.0.1:0", functions=self.functions, log=log) as (_, url):
                    async with Client(url, mode=mode, **options) as client:
                        await self.flows(client, version, changed, asked)
                self.assertEqual(unexpected_warnings(log[0]), [])


if __name__ == "__main__":
    unittest.main()
