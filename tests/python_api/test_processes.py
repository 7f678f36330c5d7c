"""The host's own processes: fork (plain, and both multiprocessing start
methods), a host killed with SIGKILL, and a host that exits with calls in
flight. Whether a process is gone is read from /proc."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

import toolpool

from conftest import TOOLS, run_host, wait_for_file, wait_gone


def _use_inherited(pool, queue) -> None:
    try:
        queue.put(("value", pool.invoke("echo", {"value": 1})))
    except Exception as e:  # noqa: BLE001 - the parent reads it
        queue.put((type(e).__name__, str(e)))


def _use_own(folder, queue) -> None:
    with toolpool.Pool(folder, workers=1) as pool:
        queue.put(("value", pool.invoke("echo", {"value": "spawned"})))


def test_a_forked_child_gets_a_pool_error_at_once(pool):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        started = time.monotonic()
        try:
            pool.invoke("echo", {"value": 1})
            message = "no error"
        except toolpool.PoolError as e:
            message = f"{time.monotonic() - started:.3f} {e}"
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        message = answer.read()
    os.waitpid(pid, 0)
    took, text = message.split(" ", 1)
    assert "forked child" in text and "make a new toolpool.Pool in the child" in text, text
    assert float(took) < 0.5
    # The parent's pool is untouched.
    assert pool.invoke("echo", {"value": 2}) == 2


def test_a_forked_child_does_not_hold_the_parents_pool_open():
    pool = toolpool.Pool(TOOLS, workers=1)
    supervisor = pool.pid
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    try:
        started = time.monotonic()
        pool.close()
        assert time.monotonic() - started < 3
        assert wait_gone([supervisor]) == []
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_multiprocessing_fork_child_gets_a_pool_error(pool):
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_use_inherited, args=(pool, queue))
    child.start()
    kind, text = queue.get(timeout=30)
    child.join(30)
    assert kind == "PoolError" and "forked child" in text, (kind, text)


def test_multiprocessing_spawn_cannot_take_a_pool_but_can_make_one(pool):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    with pytest.raises(TypeError, match="cannot be sent to another process"):
        context.Process(target=_use_inherited, args=(pool, queue)).start()
    child = context.Process(target=_use_own, args=(str(TOOLS), queue))
    child.start()
    assert queue.get(timeout=60) == ("value", "spawned")
    child.join(30)
    assert child.exitcode == 0


HOST = """
import os, sys, threading, time, toolpool
pool = toolpool.Pool(sys.argv[1], workers=2)
marker = sys.argv[2]
threading.Thread(target=pool.invoke, args=("hang_with_a_child", {"marker": marker}), daemon=True).start()
print(pool.pid, flush=True)
while not (os.path.exists(marker) and open(marker).read()):
    time.sleep(0.01)
if sys.argv[3] == "wait":
    threading.Event().wait()
# else: the main thread ends with the call in flight
"""


def test_no_process_outlives_a_host_killed_with_sigkill(tmp_path):
    marker = tmp_path / "child"
    host = run_host(HOST, str(marker), "wait", stdout=subprocess.PIPE, text=True)
    supervisor = int(host.stdout.readline())
    child = int(wait_for_file(marker))
    worker = int(wait_for_file(tmp_path / "child.worker"))
    host.kill()
    host.wait()
    assert wait_gone([supervisor, worker, child]) == []


def test_a_host_that_exits_with_calls_in_flight_ends_them(tmp_path):
    marker = tmp_path / "child"
    host = run_host(HOST, str(marker), "exit", stdout=subprocess.PIPE, text=True)
    supervisor = int(host.stdout.readline())
    started = time.monotonic()
    assert host.wait(timeout=30) == 0
    assert time.monotonic() - started < 10
    child = int(wait_for_file(marker))
    worker = int(wait_for_file(tmp_path / "child.worker"))
    assert wait_gone([supervisor, worker, child]) == []
