"""A ToolManager-shaped host, its function path delegated to toolpool as
docs/python.md shows: the workflow's timeout enforced, `_context` (the
runtime's `global_state`) reaching the tool, a fresh `asyncio.run` per tool
call as the original runtime makes them."""

import asyncio
import pathlib
import time
from dataclasses import dataclass

import pytest

import toolpool

from conftest import TOOLS, wait_for_file, wait_gone
from delegation import delegating_function


@dataclass
class FunctionToolConfig:
    """The fields of ChatDev's FunctionToolConfig that the function path reads."""

    tools: list
    auto_load: bool = True
    timeout: float | None = None


class ToolManager:
    """The shape of ChatDev's ToolManager: `execute_tool` (async) calls
    `_execute_function_tool` for `type: function` tooling."""

    def __init__(self, functions_dir: pathlib.Path):
        self._functions_dir = functions_dir

    async def execute_tool(self, tool_name, arguments, config, *, tool_context=None):
        return self._execute_function_tool(tool_name, arguments, config, tool_context)


ToolManager._execute_function_tool = delegating_function()


class Prompt:
    def request(self, node_id, task_description, *, inputs=None, metadata=None):
        return f"ok from {node_id}"


def run(manager, name, arguments, timeout=None, context=None):
    config = FunctionToolConfig(tools=[{"name": name}], timeout=timeout)
    return asyncio.run(manager.execute_tool(name, arguments, config, tool_context=context))


def test_the_workflows_timeout_is_enforced(tmp_path):
    manager = ToolManager(TOOLS)
    marker = tmp_path / "child"
    started = time.monotonic()
    with pytest.raises(toolpool.ToolTimeout):
        run(manager, "hang_with_a_child", {"marker": str(marker)}, timeout=1)
    assert time.monotonic() - started < 10
    assert wait_gone([int(wait_for_file(marker)), int(wait_for_file(tmp_path / "child.worker"))]) == []


def test_global_state_reaches_the_tool(tmp_path):
    manager = ToolManager(TOOLS)
    graph = tmp_path / "WareHouse" / "session_1"
    global_state = {
        "graph_directory": graph,
        "python_workspace_root": graph / "code_workspace",
        "vars": {"topic": "tides"},
        "human_prompt": Prompt(),
    }
    seen = run(manager, "show_context", {}, context=global_state)
    assert seen["vars"] == {"topic": "tides"}
    assert seen["python_workspace_root"] == str((graph / "code_workspace").resolve())
    assert run(manager, "ask", {"question": "go?"}, context=global_state) == "ok from writer / ok from writer"


def test_an_unknown_tool_is_chatdevs_value_error():
    manager = ToolManager(TOOLS)
    with pytest.raises(ValueError, match=f"Tool napp not found in {TOOLS}"):
        run(manager, "napp", {})
