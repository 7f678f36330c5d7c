"""ChatDev's own ToolManager (PyPI's `chatdev`, unpacked under
target/chatdev by scripts/test-deps), its function path delegated as
docs/python.md shows, on ChatDev's own function folder: the workflow's
timeouts are enforced, and `_context` (the runtime's `global_state`)
reaches the tools. Run by tests/suite/python_api.rs with target/chatdev on
PYTHONPATH; skipped elsewhere."""

import asyncio
import time

import pytest

import toolpool

tool_manager = pytest.importorskip("runtime.node.agent.tool.tool_manager")

from entity.configs.node.tooling import ToolingConfig  # noqa: E402

from delegation import delegating_function  # noqa: E402

tool_manager.ToolManager._execute_function_tool = delegating_function()


class Prompt:
    """ChatDev's HumanPromptService shape."""

    def __init__(self):
        self.asked = []

    def request(self, node_id, task_description, *, inputs=None, metadata=None):
        self.asked.append((node_id, inputs, metadata))
        return "approved"


def tooling(name, timeout=None):
    config = {"tools": [{"name": name}]}
    if timeout is not None:
        config["timeout"] = timeout
    return ToolingConfig.from_dict({"type": "function", "config": config}, path="tooling[0]")


def call(name, arguments, config, global_state=None):
    manager = tool_manager.ToolManager()
    # As ChatDev's agent executor runs a tool call: a new loop per call.
    return asyncio.run(manager.execute_tool(name, arguments, config, tool_context=global_state))


def test_the_folder_is_chatdevs_own():
    assert tool_manager.FUNCTION_CALLING_DIR.name == "function_calling"
    assert (tool_manager.FUNCTION_CALLING_DIR / "utils.py").is_file()


def test_a_timeout_from_the_workflow_is_enforced():
    started = time.monotonic()
    with pytest.raises(toolpool.ToolTimeout) as caught:
        call("wait", {"seconds": 60}, tooling("wait", timeout=1))
    assert time.monotonic() - started < 15
    assert "function 'wait' timed out after 1 s" in str(caught.value)


def test_global_state_reaches_the_tools(tmp_path):
    graph = tmp_path / "WareHouse" / "demo_session"
    workspace = graph / "code_workspace"
    prompt = Prompt()
    global_state = {
        "graph_directory": graph,
        "vars": {},
        "python_workspace_root": workspace,
        "human_prompt": prompt,
    }
    saved = call("save_file", {"path": "notes/plan.md", "content": "# Plan\n"}, tooling("save_file"), global_state)
    assert (workspace / "notes" / "plan.md").read_text() == "# Plan\n", saved
    answer = call("call_user", {"instruction": "Ship it?"}, tooling("call_user"), global_state)
    assert answer == "approved"
    assert prompt.asked and prompt.asked[0][1] == "Ship it?" and prompt.asked[0][2]["source"] == "function_tool"


def test_an_unknown_tool_is_chatdevs_value_error():
    # ChatDev's configuration refuses a tool its folder does not have; a
    # model that names one anyway gets ChatDev's own error.
    with pytest.raises(ValueError, match="Tool no_such_tool not found in .*function_calling"):
        call("no_such_tool", {}, tooling("wait"))


def test_chatdevs_own_loader_still_runs_a_decorated_function_in_process(tmp_path):
    # `toolpool.tool` leaves the function as it is: ChatDev's FunctionManager,
    # without the delegation, imports and calls it itself.
    from utils.function_manager import FunctionManager

    (tmp_path / "marked.py").write_text(
        "from toolpool import tool\n\n"
        "@tool(timeout=300, title='Twice', read_only=True, timeout_grace=5)\n"
        "def twice(x: int) -> int:\n"
        '    """Doubles x."""\n'
        "    return 2 * x\n"
    )
    manager = FunctionManager(tmp_path)
    manager.load_functions()
    twice = manager.get_function("twice")
    assert twice(x=21) == 42
    assert (twice.mcp_timeout, twice.mcp_timeout_grace) == (300.0, 5.0)
