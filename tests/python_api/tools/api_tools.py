"""Tools the Python API's tests call (tests/python_api)."""

import os
import subprocess
import sys
import time


def noop() -> None:
    """Does nothing."""


def echo(value: object) -> object:
    """Returns its argument."""
    return value


def nap(seconds: float) -> float:
    """Sleeps, then returns how long it slept."""
    time.sleep(seconds)
    return seconds


def host_pid() -> int:
    """The worker's pid on the host (it is PID 1 of its own PID namespace)."""
    return int(os.readlink("/proc/self"))


def hang_with_a_child(marker: str) -> None:
    """Starts a child that writes its host pid to `marker`, then hangs."""
    code = "import os, time; open(%r, 'w').write(os.readlink('/proc/self')); time.sleep(600)" % marker
    subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    with open(marker + ".worker", "w") as handle:
        handle.write(os.readlink("/proc/self"))
    time.sleep(600)


def fail(message: str) -> None:
    """Raises ValueError(message)."""
    raise ValueError(message)


def die(code: int) -> None:
    """Ends the worker process at once."""
    os._exit(code)


def show_context(_context: dict) -> dict:
    """What the tool sees of its `_context`, as JSON."""
    shown = {}
    for key, value in _context.items():
        if key in ("attachment_store", "human_prompt", "progress"):
            shown[key] = None if value is None else type(value).__name__
        elif isinstance(value, os.PathLike):
            shown[key] = os.fspath(value)
        else:
            shown[key] = value
    shown["cwd"] = os.getcwd()
    return shown


def ask(question: str, _context: dict) -> str:
    """Asks the human twice; returns both answers, or the prompt's error."""
    prompt = _context["human_prompt"]
    if prompt is None:
        return "no human"
    try:
        first = prompt.request("writer", question, inputs="the draft", metadata={"round": 1})
        second = prompt.request("writer", question + " again", metadata={"round": 2})
    except Exception as e:  # noqa: BLE001 - the error is what the test reads
        return f"prompt failed: {type(e).__name__}: {e}"
    return f"{first.text} / {second.text}"


def write_note(text: str, _context: dict) -> str:
    """Writes note.txt in the call's workspace; returns its path."""
    path = os.path.join(os.fspath(_context["python_workspace_root"]), "note.txt")
    with open(path, "w") as handle:
        handle.write(text)
    return path
