"""The pytest plugin, used as docs/python.md shows: the `toolpool_pool`
fixture on a folder the marker names, and a test that relies on
kill-on-timeout."""

import os

import pytest

import toolpool

from conftest import TOOLS, wait_for_file, wait_gone


@pytest.mark.toolpool(functions_dir=TOOLS, workers=1, timeout=5)
def test_a_hung_tool_is_killed_with_what_it_started(toolpool_pool, tmp_path):
    marker = tmp_path / "child"
    with pytest.raises(toolpool.ToolTimeout):
        toolpool_pool.invoke("hang_with_a_child", {"marker": str(marker)}, timeout=1)
    # The tool's child wrote its pid as the host sees it (readlink /proc/self):
    # the kernel says it is gone, with the worker.
    child = int(wait_for_file(marker))
    worker = int(wait_for_file(tmp_path / "child.worker"))
    assert wait_gone([child, worker], within=2) == []


@pytest.mark.toolpool(TOOLS, workers=1, timeout=5)
def test_pools_of_the_same_options_are_shared(toolpool_pool, request):
    again = request.getfixturevalue("toolpool_pool")
    assert again is toolpool_pool
    assert toolpool_pool.invoke("echo", {"value": os.getpid()}) == os.getpid()
