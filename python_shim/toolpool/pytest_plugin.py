"""The pytest plugin of `toolpool` (registered as a `pytest11` entry point).

The `toolpool_pool` fixture is a `toolpool.Pool` on a functions folder,
given by the ini option `toolpool_functions_dir` (relative to the rootdir)
or by a marker, which may also set the pool's options:

    @pytest.mark.toolpool(functions_dir="tests/tools", timeout=5, workers=2)
    def test_a_hung_tool_is_killed(toolpool_pool):
        with pytest.raises(toolpool.ToolTimeout):
            toolpool_pool.invoke("hang", timeout=1)

Pools of the same folder and options are made once per test session and
closed at its end; a timeout's kill replaces the worker, so one test's
timeout leaves the next test a whole pool.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "toolpool_functions_dir",
        "the functions folder of the toolpool_pool fixture (relative to the rootdir)",
        default=None,
    )
    parser.addini("toolpool_workers", "the toolpool_pool fixture's number of workers", default=None)
    parser.addini("toolpool_timeout", "the toolpool_pool fixture's default timeout, in seconds", default=None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "toolpool(functions_dir=None, **options): the folder and toolpool.Pool options of the toolpool_pool fixture",
    )


@pytest.fixture(scope="session")
def _toolpool_pools() -> Iterator[dict]:
    pools: dict[Any, Any] = {}
    yield pools
    for pool in pools.values():
        pool.close()


@pytest.fixture
def toolpool_pool(request: pytest.FixtureRequest, _toolpool_pools: dict) -> Any:
    """A `toolpool.Pool` on the folder the `toolpool` marker or the
    `toolpool_functions_dir` ini option names."""
    from toolpool import Pool

    config = request.config
    options: dict[str, Any] = {}
    ini_dir = config.getini("toolpool_functions_dir")
    if ini_dir:
        options["functions_dir"] = os.path.join(str(config.rootpath), ini_dir)
    if config.getini("toolpool_workers"):
        options["workers"] = int(config.getini("toolpool_workers"))
    if config.getini("toolpool_timeout"):
        options["timeout"] = float(config.getini("toolpool_timeout"))
    marker = request.node.get_closest_marker("toolpool")
    if marker is not None:
        if marker.args:
            options["functions_dir"] = marker.args[0]
        options.update(marker.kwargs)
    if "functions_dir" not in options:
        pytest.fail(
            "toolpool_pool needs a functions folder: the ini option toolpool_functions_dir, or "
            "@pytest.mark.toolpool(functions_dir=...)",
            pytrace=False,
        )
    options["functions_dir"] = os.path.abspath(os.fspath(options["functions_dir"]))
    key = tuple(sorted((name, repr(value)) for name, value in options.items()))
    pool = _toolpool_pools.get(key)
    if pool is None:
        pool = _toolpool_pools[key] = Pool(**options)
    return pool
