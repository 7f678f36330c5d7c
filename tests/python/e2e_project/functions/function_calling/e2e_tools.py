"""Tools for tests/python/test_end_to_end.py, in a folder laid out as the original convention.

They import from the project root (`functions.function_calling._shared`) and
take ParamMeta from the compatibility module `utils.function_catalog`.
"""

import os
import subprocess
import sys
import time
from typing import Annotated

from functions.function_calling._shared import GREETING
from utils.function_catalog import ParamMeta


def greet(name: Annotated[str, ParamMeta(description="Who to greet")]) -> str:
    """Say hello."""
    return f"{GREETING}, {name}"


def noisy(count: int) -> int:
    """Writes to stdout in every way a tool can, then answers."""
    for _ in range(count):
        print("print to stdout " * 8)
    sys.stdout.write("sys.stdout.write\n")
    os.write(1, b"os.write to fd 1\n")
    subprocess.run(["echo", "a child process writing to its stdout"], check=True)
    return count


def nap(seconds: float) -> str:
    """Sleeps; the end-to-end test takes a stack dump meanwhile."""
    time.sleep(seconds)  # NAP_LINE: the stack dump must point here
    return "rested"


def show_context(_context: dict | None = None) -> dict:
    """The `_context` the worker injected, with its values' types."""
    return {key: [type(value).__name__, str(value)] for key, value in (_context or {}).items()}


def spawn_sleeper() -> int:
    """Starts a grandchild process that would outlive the worker if nothing killed it."""
    return subprocess.Popen(["sleep", "60"]).pid


def exit_now(code: int) -> None:
    """Ends the worker at once, as a crashing extension would."""
    os._exit(code)


def big_text(size: int) -> str:
    return "x" * size
