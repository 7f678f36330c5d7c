"""Shared set-up for the shim's tests: where things are, and the shim on sys.path.

sys.path is arranged as in a worker: the shim first, the compatibility
modules last.
"""

import contextlib
import functools
import os
import sys

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(TESTS_DIR))
SHIM_DIR = os.path.join(REPO, "python_shim")
BOOT_SCRIPT = os.path.join(SHIM_DIR, "toolpool_boot.py")
FIXTURE_FUNCTIONS = os.path.join(REPO, "tests", "fixtures", "functions")
E2E_FUNCTIONS = os.path.join(TESTS_DIR, "e2e_project", "functions", "function_calling")
# A venv with the msgpack C extension: the one scripts/test-deps prepares
# (or TOOLPOOL_TEST_VENV), made on first use when missing.
MSGPACK_VENV = os.environ.get("TOOLPOOL_TEST_VENV") or os.path.join(REPO, "target", "pyvenv-test")

if SHIM_DIR not in sys.path:
    sys.path.insert(0, SHIM_DIR)
if os.path.join(SHIM_DIR, "compat") not in sys.path:
    sys.path.append(os.path.join(SHIM_DIR, "compat"))

from toolpool_shim import discovery  # noqa: E402  (needs the path above)


@functools.lru_cache(maxsize=None)
def fixture_toolset() -> discovery.ToolSet:
    """tests/fixtures/functions, imported once per test run."""
    return discovery.load_tools(FIXTURE_FUNCTIONS)


def toolset_of(*funcs, errors=()) -> discovery.ToolSet:
    """A ToolSet of the given functions, as if each came from module "local"."""
    tools = {
        func.__name__: discovery.Tool(func.__name__, "local", "local.py", func.__code__.co_firstlineno, func)
        for func in funcs
    }
    return discovery.ToolSet(tools, list(errors))


@contextlib.contextmanager
def isolated_imports():
    """Undo, afterwards, what loading a functions directory does to sys.modules and sys.path.

    Modules named `functions...` (the fixtures' package) are hidden meanwhile,
    so that a test's own `functions/function_calling` layout imports by name
    as it would in a fresh worker.
    """
    saved_modules, saved_path = dict(sys.modules), list(sys.path)
    for name in [name for name in sys.modules if name == "functions" or name.startswith("functions.")]:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.modules.clear()
        sys.modules.update(saved_modules)
        sys.path[:] = saved_path
