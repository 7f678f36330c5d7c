"""`toolpool.tool`: settings on the function, which stays as it was."""

import pytest

import toolpool
from toolpool import tool


def test_the_function_is_returned_unchanged_with_its_settings():
    def double(x: int) -> int:
        return 2 * x

    marked = tool(timeout=5, title=" Double it ", read_only=True, timeout_grace=2)(double)
    assert marked is double and marked(21) == 42
    assert (double.mcp_timeout, double.mcp_title) == (5.0, "Double it")
    assert double.mcp_timeout_grace == 2.0
    assert double.mcp_annotations == {"readOnlyHint": True}

    @tool
    def bare() -> str:
        return "as it was"

    assert bare() == "as it was" and not hasattr(bare, "mcp_timeout")


def test_hints_add_to_those_set_by_hand():
    def f():
        pass

    f.mcp_annotations = {"openWorldHint": True}
    tool(destructive=False)(f)
    assert f.mcp_annotations == {"openWorldHint": True, "destructiveHint": False}


@pytest.mark.parametrize(
    "settings, error",
    [
        ({"timeout": 0}, ValueError),
        ({"timeout_grace": 0}, ValueError),
        ({"timeout_grace": 7200}, ValueError),
        ({"timeout_grace": "5"}, TypeError),
        ({"timeout": float("nan")}, ValueError),
        ({"timeout": "5"}, TypeError),
        ({"timeout": True}, TypeError),
        ({"title": ""}, ValueError),
        ({"read_only": "yes"}, TypeError),
    ],
)
def test_a_bad_setting_is_refused_where_the_tool_is_written(settings, error):
    with pytest.raises(error):
        tool(**settings)


def test_the_tools_own_timeout_holds_through_the_pool(tmp_path):
    (tmp_path / "own.py").write_text(
        "import time\nfrom toolpool import tool\n\n"
        "@tool(timeout=0.5)\ndef linger(seconds: float) -> float:\n"
        "    time.sleep(seconds)\n    return seconds\n"
    )
    with toolpool.Pool(tmp_path, workers=1) as pool:
        assert [f.get("timeout") for f in pool.catalog()] == [0.5]
        with pytest.raises(toolpool.ToolTimeout, match="timed out after 0.5 s"):
            pool.invoke("linger", {"seconds": 10})
        assert pool.invoke("linger", {"seconds": 1}, timeout=5) == 1


def test_a_grace_lets_the_tools_finally_run_through_the_pool(tmp_path):
    (tmp_path / "graced.py").write_text(
        "import os, time\nfrom toolpool import tool\n\n"
        "@tool(timeout=0.5, timeout_grace=5)\ndef tidy(marker: str) -> str:\n"
        "    try:\n        time.sleep(60)\n    finally:\n"
        "        open(marker, 'w').write('tidied')\n    return 'never'\n"
    )
    marker = tmp_path / "marker"
    with toolpool.Pool(tmp_path, workers=1) as pool:
        assert [f.get("timeout_grace") for f in pool.catalog()] == [5.0]
        with pytest.raises(toolpool.ToolTimeout, match=r"timed out after 0.5 s; .* cleaned up in \d+ ms"):
            pool.invoke("tidy", {"marker": str(marker)})
    assert marker.read_text() == "tidied"
