"""Calls: values, every kind of failure with the agent's text, the catalog
and workflow files as the command gives them."""

import json
import subprocess

import pytest

import toolpool
from toolpool._pool import find_binary

from conftest import HERE, TOOLS


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [find_binary(), "--functions-dir", str(TOOLS), *args], capture_output=True, text=True, timeout=120
    )


def test_a_call_returns_the_tools_value(pool):
    assert pool.invoke("echo", {"value": {"a": [1, 2.5, None, "é"]}}) == {"a": [1, 2.5, None, "é"]}
    assert pool.invoke("noop") is None
    assert pool.invoke("nap", {"seconds": 0}, timeout=5) == 0


def test_a_timeout_is_the_agents_text_and_a_timeout_error(pool):
    with pytest.raises(toolpool.ToolTimeout) as caught:
        pool.invoke("nap", {"seconds": 30}, timeout=0.5)
    error = caught.value
    assert isinstance(error, toolpool.ToolError) and isinstance(error, TimeoutError)
    assert str(error).startswith("Tool nap error: TimeoutError: function 'nap' timed out after 0.5 s; its worker (pid ")
    assert (error.kind, error.tool, error.type_name) == ("timeout", "nap", "TimeoutError")


def test_a_raised_exception_carries_its_type_and_traceback(pool):
    with pytest.raises(toolpool.ToolRaised) as caught:
        pool.invoke("fail", {"message": "no such row"})
    error = caught.value
    assert str(error) == "Tool fail error: ValueError: no such row"
    assert error.exc_type == "ValueError" and error.kind == "raised"
    assert "raise ValueError(message)" in error.traceback


def test_a_dead_worker_fails_only_its_call(pool):
    with pytest.raises(toolpool.WorkerDied) as caught:
        pool.invoke("die", {"code": 7})
    assert "exited with code 7" in str(caught.value), str(caught.value)
    assert pool.invoke("echo", {"value": 1}) == 1


def test_bad_arguments_and_unknown_tools_get_the_clis_text(pool):
    with pytest.raises(toolpool.InvalidArguments) as bad:
        pool.invoke("nap", {"second": 1})
    printed = cli("call", "nap", "--args", '{"second": 1}')
    assert printed.returncode == 1
    assert str(bad.value) == printed.stdout.strip()
    with pytest.raises(toolpool.ToolNotFound) as unknown:
        pool.invoke("napp")
    printed = cli("call", "napp")
    assert str(unknown.value) == printed.stdout.strip()
    assert unknown.value.kind == "not_found"


def test_a_bad_session_name_or_timeout_is_a_value_error(pool):
    with pytest.raises(ValueError, match="session"):
        pool.invoke("noop", session="../escape")
    with pytest.raises(ValueError, match="timeout"):
        pool.invoke("noop", timeout=-1)


def test_the_catalog_is_the_commands(pool):
    printed = json.loads(cli("catalog", "--format", "json").stdout)
    assert pool.catalog() == printed["functions"]
    assert pool.catalog_errors() == printed["errors"]
    assert any("broken on purpose" in json.dumps(e) for e in pool.catalog_errors())
    openai = json.loads(cli("catalog", "--format", "openai").stdout)
    assert pool.openai_tools() == openai
    assert [t["function"]["name"] for t in pool.openai_tools(["nap", "echo"])] == ["echo", "nap"]
    with pytest.raises(ValueError, match="'nope'"):
        pool.openai_tools(["nap", "nope"])


def test_resolve_is_the_commands(pool):
    workflow = HERE / "workflows" / "writer.yaml"
    printed = json.loads(cli("resolve", str(workflow), "--node", "Writer").stdout)
    assert pool.resolve(workflow, "Writer") == printed
    assert pool.resolve(workflow) == json.loads(cli("resolve", str(workflow)).stdout)
    with pytest.raises(toolpool.WorkflowError, match="Nobody"):
        pool.resolve(workflow, "Nobody")
    with pytest.raises(toolpool.WorkflowError, match="missing.yaml"):
        pool.resolve(HERE / "workflows" / "missing.yaml")


def test_a_pool_that_cannot_start_says_what_the_command_says(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(toolpool.PoolError) as caught:
        toolpool.Pool(missing)
    printed = subprocess.run([find_binary(), "--functions-dir", str(missing), "catalog"], capture_output=True, text=True)
    assert printed.returncode == 2
    assert f"toolpool: {caught.value}" == printed.stderr.strip()
    with pytest.raises(toolpool.PoolError, match="/no/such/python3"):
        toolpool.Pool(TOOLS, python="/no/such/python3")


def test_close_is_idempotent_and_a_closed_pool_says_so():
    pool = toolpool.Pool(TOOLS, workers=1)
    supervisor = pool.pid
    with pool:
        assert pool.invoke("echo", {"value": 2}) == 2
    pool.close()
    with pytest.raises(toolpool.PoolError, match="closed"):
        pool.invoke("noop")
    from conftest import wait_gone

    assert wait_gone([supervisor]) == []


def test_stats_count_the_calls(pool):
    before = pool.stats()["calls"]
    pool.invoke("noop")
    assert pool.stats()["calls"] == before + 1


def test_a_value_json_cannot_carry_is_refused_at_once(pool):
    # NaN and infinities have no JSON form: refused before anything is sent.
    with pytest.raises(ValueError, match="JSON compliant"):
        pool.invoke("echo", {"value": float("nan")})
    with pytest.raises(ValueError, match="timeout"):
        pool.invoke("noop", timeout=float("nan"))
    with pytest.raises(TypeError, match="not JSON serializable"):
        pool.invoke("echo", {"value": object()})
    assert pool.invoke("echo", {"value": 1}) == 1
