"""Threads, asyncio loops (a new `asyncio.run` per call too) and cancels."""

import asyncio
import threading
import time

import pytest

import toolpool

from conftest import wait_for_file, wait_gone


def test_many_threads_call_at_once(pool):
    results, errors = {}, []

    def caller(n: int) -> None:
        try:
            results[n] = [pool.invoke("echo", {"value": [n, i]}) for i in range(10)]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert results == {n: [[n, i] for i in range(10)] for n in range(16)}


def test_a_blocked_call_does_not_hold_the_gil(pool):
    ticks = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    counter = threading.Thread(target=count)
    counter.start()
    pool.invoke("nap", {"seconds": 0.3})
    stop.set()
    counter.join()
    assert ticks > 1000, ticks


def test_a_new_asyncio_run_per_call(pool):
    # As ChatDev runs each tool call: the pool is tied to no loop.
    for n in range(5):
        assert asyncio.run(pool.ainvoke("echo", {"value": n})) == n


def test_calls_at_once_on_one_loop(pool):
    async def main():
        return await asyncio.gather(*(pool.ainvoke("nap", {"seconds": 0.2}) for _ in range(4)))

    started = time.monotonic()
    assert asyncio.run(main()) == [0.2] * 4
    # Two workers, four calls of 0.2 s: two rounds, not four.
    assert time.monotonic() - started < 0.75


def test_an_async_failure_is_the_same_exception(pool):
    with pytest.raises(toolpool.ToolTimeout):
        asyncio.run(pool.ainvoke("nap", {"seconds": 10}, timeout=0.3))


def test_cancelling_the_task_kills_the_worker_and_its_child(pool, tmp_path):
    marker = tmp_path / "child"

    async def main():
        task = asyncio.ensure_future(pool.ainvoke("hang_with_a_child", {"marker": str(marker)}))
        await asyncio.get_running_loop().run_in_executor(None, wait_for_file, marker)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    cancelled_before = pool.stats()["cancelled"]
    asyncio.run(main())
    child = int(marker.read_text())
    worker = int(wait_for_file(tmp_path / "child.worker"))
    assert wait_gone([worker, child]) == []
    assert pool.stats()["cancelled"] == cancelled_before + 1
    # The pool replaced the worker: calls go on.
    assert pool.invoke("echo", {"value": "after"}) == "after"


def test_a_timeout_kills_the_process_the_tool_started(pool, tmp_path):
    marker = tmp_path / "child"
    with pytest.raises(toolpool.ToolTimeout):
        pool.invoke("hang_with_a_child", {"marker": str(marker)}, timeout=1)
    child = int(marker.read_text())
    worker = int((tmp_path / "child.worker").read_text())
    assert wait_gone([worker, child], within=2) == []
