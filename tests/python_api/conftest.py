"""Shared pieces of the Python API's tests: the tools folder, a pool, and
process checks read from /proc (the kernel's word, not a tool's)."""

import os
import pathlib
import subprocess
import sys
import time

import pytest

import toolpool

HERE = pathlib.Path(__file__).resolve().parent
TOOLS = HERE / "tools"


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie is not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_gone(pids, within: float = 5.0) -> list:
    """The pids still alive after `within` seconds (empty when all died)."""
    deadline = time.monotonic() + within
    left = [pid for pid in pids if alive(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [pid for pid in left if alive(pid)]
    return left


def wait_for_file(path: pathlib.Path, within: float = 10.0) -> str:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.01)
    raise AssertionError(f"{path} was not written within {within} s")


def run_host(script: str, *args: str, **popen) -> subprocess.Popen:
    """Runs `script` in a Python of its own (a host program), with the tools
    folder as its first argument."""
    return subprocess.Popen([sys.executable, "-c", script, str(TOOLS), *args], **popen)


@pytest.fixture(scope="session")
def pool():
    with toolpool.Pool(TOOLS, workers=2, timeout=10) as pool:
        yield pool
