"""Many calls at once through `toolpool serve`: parallel calls on all
workers, cancellation, and a soak of 2 000 calls with failures mixed in."""

import tempfile
import time
import unittest
from pathlib import Path

import anyio

from support import MODES, gone_within, warnings_in, ok, parent_of, read_pid_file, served, text_of


class Concurrency(unittest.IsolatedAsyncioTestCase):
    async def test_n_parallel_calls_on_n_workers_take_one_calls_time(self):
        async with served("--workers", "4", "serve") as client:
            # Every worker up and warm.
            async with anyio.create_task_group() as tg:
                for _ in range(4):
                    tg.start_soon(client.call_tool, "sleep", {"seconds": 0.2})
            results = {}

            async def one(i):
                results[i] = await client.call_tool("slow_then_answer", {"seconds": 1, "token": f"t{i}"})

            started = time.monotonic()
            async with anyio.create_task_group() as tg:
                for i in range(4):
                    tg.start_soon(one, i)
            elapsed = time.monotonic() - started
            self.assertEqual({i: ok(r) for i, r in results.items()}, {i: f"t{i}" for i in range(4)})
            self.assertLess(elapsed, 1.8, f"4 one-second calls on 4 workers took {elapsed:.2f} s")

    async def test_cancelling_a_call_kills_its_worker(self):
        for version, mode in MODES.items():
            with self.subTest(version=version):
                log = []
                await self.cancel_a_call(mode, log)
                # An ordinary cancellation is no warning.
                self.assertEqual(warnings_in(log[0]), [])

    async def cancel_a_call(self, mode, log):
        with tempfile.TemporaryDirectory() as tmp:
            pid_file = Path(tmp) / "grandchild"
            async with served("--workers", "1", "serve", mode=mode, log=log) as client:
                scope = anyio.CancelScope()

                async def doomed():
                    with scope:
                        await client.call_tool("spawn_grandchild", {"pid_file": str(pid_file)})

                async with anyio.create_task_group() as tg:
                    tg.start_soon(doomed)
                    grandchild = await read_pid_file(pid_file)
                    worker = parent_of(grandchild)
                    self.assertIsNotNone(worker)
                    scope.cancel()
                self.assertTrue(await gone_within(worker, 3), f"worker {worker} survived")
                self.assertTrue(await gone_within(grandchild, 3), f"grandchild {grandchild} survived")
                # The only slot is free again.
                self.assertEqual(ok(await client.call_tool("add", {"a": 2, "b": 3})), "5")

    async def test_two_thousand_calls_with_timeouts_and_crashes(self):
        calls, in_flight = 2000, 32
        wrong = []
        async with served("--workers", "4", "--timeout", "0.5", "serve") as client:
            next_call = iter(range(calls))

            async def caller():
                for i in next_call:
                    name, args, check = plan(i)
                    result = await client.call_tool(name, args)
                    if not check(result):
                        wrong.append((i, name, result))

            started = time.monotonic()
            async with anyio.create_task_group() as tg:
                for _ in range(in_flight):
                    tg.start_soon(caller)
            elapsed = time.monotonic() - started
            self.assertEqual(wrong[:5], [], f"{len(wrong)} wrong answers")
            self.assertEqual(ok(await client.call_tool("add", {"a": 2, "b": 3})), "5")
            print(f"{calls} calls, {in_flight} in flight: {elapsed:.1f} s")


def plan(i):
    """Call `i`: its tool, arguments, and the check of its own answer."""
    kind = i % 50
    if kind == 7:
        return "sleep_forever", {}, lambda r: r.is_error and "TimeoutError" in text_of(r)
    if kind == 19:
        return "exit_3", {}, lambda r: r.is_error and text_of(r).startswith("Tool exit_3 error: WorkerDied: ")
    if kind == 31:
        return "segfault", {}, lambda r: r.is_error and text_of(r).startswith("Tool segfault error: WorkerDied: ")
    if kind % 10 == 3:
        want = f"Tool raise_value_error error: ValueError: m{i}"
        return "raise_value_error", {"message": f"m{i}"}, lambda r: r.is_error and text_of(r) == want
    return "echo", {"value": f"v{i}"}, lambda r: not r.is_error and text_of(r) == f"v{i}"


if __name__ == "__main__":
    unittest.main()
