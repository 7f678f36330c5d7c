"""`context=`: the host's `_context` (ChatDev's `global_state`) reaching the
tool, its human prompt called back here, and sessions per call."""

import logging
import pathlib
import threading
import time

import pytest

import toolpool


class Prompt:
    """ChatDev's HumanPromptService shape: request(node_id, task_description, *, inputs, metadata)."""

    def __init__(self, answers, delay=0.0):
        self.answers, self.delay, self.asked = list(answers), delay, []

    def request(self, node_id, task_description, *, inputs=None, metadata=None):
        self.asked.append((node_id, task_description, inputs, metadata, threading.current_thread().name))
        time.sleep(self.delay)
        return self.answers.pop(0)


class Result:
    """ChatDev's PromptResult shape."""

    def __init__(self, text):
        self.text, self.metadata = text, {"channel": "test", "not json": object()}


def test_json_values_reach_the_tools_context_as_they_are(pool, tmp_path, caplog):
    graph = tmp_path / "WareHouse" / "run_1"
    context = {
        "graph_directory": graph,
        "python_workspace_root": graph / "code_workspace",
        "vars": {"language": "en"},
        "node_id": "Writer",
        "task": {"steps": [1, 2], "done": False},
        "token_tracker": object(),
    }
    with caplog.at_level(logging.DEBUG, logger="toolpool"):
        seen = pool.invoke("show_context", context=context)
    assert seen["task"] == {"steps": [1, 2], "done": False}
    assert seen["vars"] == {"language": "en"} and seen["node_id"] == "Writer"
    assert seen["graph_directory"] == str(graph.resolve())
    assert seen["python_workspace_root"] == str((graph / "code_workspace").resolve())
    assert seen["cwd"] == seen["python_workspace_root"]
    assert "token_tracker" not in seen
    assert any("'token_tracker' left out" in r.getMessage() for r in caplog.records)
    assert seen["human_prompt"] is None and seen["attachment_store"] is not None


def test_the_workspace_is_the_graph_directorys(pool, tmp_path):
    graph = tmp_path / "run_2"
    path = pool.invoke("write_note", {"text": "hello"}, context={"graph_directory": str(graph)})
    assert pathlib.Path(path) == (graph / "code_workspace" / "note.txt").resolve()
    assert (graph / "code_workspace" / "note.txt").read_text() == "hello"


def test_a_session_per_call(pool):
    first = pathlib.Path(pool.invoke("write_note", {"text": "a"}, session="alpha"))
    second = pathlib.Path(pool.invoke("write_note", {"text": "b"}, session="beta"))
    assert first.parent != second.parent
    assert first.parent.parent.name == "alpha" and second.parent.parent.name == "beta"
    assert first.read_text() == "a" and second.read_text() == "b"
    with pytest.raises(ValueError, match="not both"):
        pool.invoke("noop", session="alpha", context={"graph_directory": "/tmp/x"})


def test_the_human_prompt_is_called_back_in_the_host(pool):
    prompt = Prompt(["yes", Result("sure")])
    answer = pool.invoke("ask", {"question": "Publish?"}, context={"human_prompt": prompt})
    assert answer == "yes / sure"
    assert [a[:4] for a in prompt.asked] == [
        ("writer", "Publish?", "the draft", {"round": 1, "session_id": "default"}),
        ("writer", "Publish? again", None, {"round": 2, "session_id": "default"}),
    ]
    assert prompt.asked[0][4] != threading.current_thread().name


def test_the_wait_for_a_human_does_not_count_against_the_timeout(pool):
    prompt = Prompt(["late", "later"], delay=1.0)
    started = time.monotonic()
    assert pool.invoke("ask", {"question": "Q"}, timeout=1.5, context={"human_prompt": prompt}) == "late / later"
    assert time.monotonic() - started >= 2.0


def test_an_exception_in_the_prompt_reaches_the_tool(pool):
    class Broken:
        def request(self, node_id, task_description, *, inputs=None, metadata=None):
            raise RuntimeError("the operator went home")

    answer = pool.invoke("ask", {"question": "Q"}, context={"human_prompt": Broken()})
    assert answer.startswith("prompt failed: ") and "RuntimeError: the operator went home" in answer, answer


def test_without_a_prompt_the_tool_has_none(pool):
    assert pool.invoke("ask", {"question": "Q"}, context={"vars": {}}) == "no human"
