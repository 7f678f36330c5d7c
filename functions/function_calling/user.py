"""Asking the human in the loop.

The question goes through ``_context["human_prompt"]`` to whatever front end
runs the tools: the terminal for ``toolpool call`` (stdin, piped or typed),
an elicitation request over MCP, the embedder's HumanPrompt in the library.
The time spent waiting for the answer does not count against the call's
timeout.
"""

from typing import Annotated

from utils.function_catalog import ParamMeta


def call_user(
    instruction: Annotated[str, ParamMeta(description="The question or instruction to show to the user")],
    _context: dict | None = None,
) -> str:
    """Send an instruction or question to the user and return their response.

    Use it when you need information or a decision only the user can give.
    """
    prompt = _context.get("human_prompt") if _context else None
    if prompt is None:
        return f"Human prompt unavailable, default response for instruction: {instruction}"
    result = prompt.request(
        node_id=_context.get("node_id") or "model_function_calling",
        task_description="Please respond to the model's instruction.",
        inputs=instruction,
        metadata={"source": "function_tool"},
    )
    return result.text


# Titles and MCP behaviour hints: plain attributes, read by toolpool and
# ignored by runtimes that do not know them.
call_user.mcp_title = 'Ask the user'
call_user.mcp_annotations = {'readOnlyHint': True, 'openWorldHint': True}
