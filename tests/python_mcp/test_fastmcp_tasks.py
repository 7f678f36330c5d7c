"""fastmcp's client with the `fastmcp-tasks` package (PyPI; clients nobody on
this project wrote) driving `toolpool serve --task-after` over stdio and HTTP
on 2026-07-28, through the client's own tasks API: a long `call_tool` is
answered with a task that the client polls (`tasks/get`) to the tool's result
without the caller seeing it; `call_tool_task` hands back the task, whose
`cancel()` (`tasks/cancel`) kills the worker and its grandchild; an exception
raised inside a task comes back as the tool's error text.

`fastmcp-tasks` pins `fastmcp-slim` at its own version, so these run in a
virtual environment of their own, target/pyvenv-fastmcp-tasks
(scripts/test-deps).

Over HTTP, fastmcp-tasks sends `tasks/get` and `tasks/cancel` through the
Python `mcp` 2.3 session, which mirrors the `Mcp-Name` header only for
`tools/call`, `prompts/get` and `resources/read`; rmcp 3.11 requires it (the
task id) on task requests too. toolpool's HTTP front end fills it in from the
body when it is absent, so these flows run over HTTP as over stdio."""

import shutil
import tempfile
import unittest
from pathlib import Path

from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from fastmcp_tasks import ToolTask, call_tool_task

from support import BIN, FIXTURES, alive, base_args, gone_within, http_server, parent_of, read_pid_file

WAIT = 30

# A tool that raises only after it has become a task (--task-after 0.5).
SLOW_RAISE = '''\
import time


def slow_then_raise(seconds: float, message: str) -> None:
    """Sleep `seconds`, then raise ValueError(message)."""
    time.sleep(seconds)
    raise ValueError(message)
'''


class FastMcpTasks(unittest.IsolatedAsyncioTestCase):
    async def flows(self, transport):
        client = Client(transport, mode="auto")
        async with client:
            self.assertEqual(client.protocol_version, "2026-07-28")

            # A quick call is answered at once, as ever.
            self.assertEqual((await client.call_tool("add", {"a": 2, "b": 3})).data, 5)

            # A long call becomes a task; fastmcp-tasks polls it to the result,
            # which call_tool returns as if the call had been answered.
            answered = await client.call_tool("slow_then_answer", {"seconds": 2, "token": "t1"}, timeout=WAIT)
            self.assertEqual(answered.content[0].text, "t1")
            self.assertEqual(answered.data, "t1")

            # The same through the task handle: working, then its result.
            task = await call_tool_task(client, "slow_then_answer", {"seconds": 2, "token": "t2"})
            self.assertIsInstance(task, ToolTask)
            self.assertEqual((await task.status()).status, "working")
            finished = await task.wait(timeout=WAIT)
            self.assertEqual(finished.status, "completed")
            self.assertEqual((await task.result()).data, "t2")

            # Cancelling the task kills its worker and the worker's child.
            pid_file = Path(self.tmp) / f"grandchild-{id(transport)}"
            task = await call_tool_task(client, "spawn_grandchild", {"pid_file": str(pid_file)})
            grandchild = await read_pid_file(pid_file)
            worker = parent_of(grandchild)
            self.assertTrue(alive(worker))
            await task.cancel()
            self.assertTrue(await gone_within(worker, 10), f"worker {worker} survived")
            self.assertTrue(await gone_within(grandchild, 10), f"grandchild {grandchild} survived")
            self.assertEqual((await task.wait(timeout=WAIT)).status, "cancelled")
            cancelled = await ToolTask(client, "spawn_grandchild", task.create_result, raise_on_error=False).result()
            self.assertTrue(cancelled.is_error)
            self.assertEqual(cancelled.content[0].text, f"Task {task.task_id} was cancelled")
            self.assertEqual((await client.call_tool("add", {"a": 1, "b": 1})).data, 2)

            # An exception raised inside a task: the tool's error text, through
            # call_tool and through the handle.
            raised = await client.call_tool(
                "slow_then_raise", {"seconds": 1.5, "message": "boom"}, raise_on_error=False, timeout=WAIT
            )
            self.assertTrue(raised.is_error)
            self.assertEqual(raised.content[0].text, "Tool slow_then_raise error: ValueError: boom")
            task = await call_tool_task(
                client, "slow_then_raise", {"seconds": 1.5, "message": "bang"}, raise_on_error=False
            )
            handled = await task.result()
            self.assertTrue(handled.is_error)
            self.assertEqual(handled.content[0].text, "Tool slow_then_raise error: ValueError: bang")

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name
        self.functions = Path(self.tmp) / "functions"
        shutil.copytree(FIXTURES, self.functions, ignore=shutil.ignore_patterns("__pycache__"))
        (self.functions / "slow_raise.py").write_text(SLOW_RAISE)

    def tearDown(self):
        self._tmp.cleanup()

    SERVE = ("--workers", "2", "serve", "--task-after", "0.5")

    async def test_over_stdio(self):
        args = base_args(str(Path(self.tmp) / "session"), *self.SERVE, functions=self.functions)
        transport = StdioTransport(BIN, args, keep_alive=False, log_file=Path(self.tmp) / "stderr.txt")
        try:
            await self.flows(transport)
        except BaseException:
            print((Path(self.tmp) / "stderr.txt").read_text())
            raise

    async def test_over_http(self):
        # The client sends `tasks/get` and `tasks/cancel` without the
        # `Mcp-Name` header rmcp requires on them; toolpool's HTTP front end
        # fills it in from the body's taskId (src/mcp/http/mod.rs).
        async with http_server(*self.SERVE, "--http", "127.0.0.1:0", functions=self.functions) as (_, url):
            await self.flows(url)


if __name__ == "__main__":
    unittest.main()
