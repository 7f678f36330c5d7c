"""The ChatDev delegation exactly as docs/python.md shows it: the code block
after the `<!-- chatdev-delegation -->` line, loaded as a function the
tests assign to a ToolManager's `_execute_function_tool`."""

import pathlib

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"
MARK = "<!-- chatdev-delegation -->"


def delegating_function():
    """`_execute_function_tool` as docs/python.md writes it."""
    text = DOC.read_text()
    assert MARK in text, f"{DOC} has no {MARK} block"
    block = text.split(MARK, 1)[1].split("```python", 1)[1].split("```", 1)[0]
    namespace: dict = {"__name__": "chatdev_delegation"}
    exec(compile(block, f"{DOC}:chatdev-delegation", "exec"), namespace)
    return namespace["_execute_function_tool"]
