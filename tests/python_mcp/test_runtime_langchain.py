"""langchain-mcp-adapters (in target/pyvenv-langchain, with the `mcp` 1.x client
it requires: 2025-11-25, an `initialize` handshake per MCP session) drives
`toolpool serve` over stdio and streamable HTTP. The tools are the LangChain
`StructuredTool`s `MultiServerMCPClient.get_tools()` gives an agent, invoked
with a tool call as LangGraph's tool node does (`ainvoke`), which hands back the
`ToolMessage` the model would get; no model is called. By default each tool
call opens an MCP session of its own (a new server process on stdio).

List, call, save then read back, a raised error, a timeout (toolpool's
TimeoutError text in a `ToolMessage` with status "error"), the next call.
Over HTTP with the default settings a file saved in one call is not found by
the next: see test_over_http_a_file_saved_in_one_call_is_read_in_the_next."""

import tempfile
import unittest
from datetime import timedelta
from pathlib import Path

from langchain_mcp_adapters.client import MultiServerMCPClient

from support import (
    CLIENT_TIMEOUT,
    RUNTIME_HEADERS,
    read_note,
    runtime_flow,
    runtime_http_server,
    runtime_stdio_command,
    runtime_warnings,
    save_note,
)

# The client's read timeout for a request (mcp 1.x takes a timedelta); without
# it a stdio call waits forever, and an HTTP one as long as `sse_read_timeout`.
SESSION = {"read_timeout_seconds": timedelta(seconds=CLIENT_TIMEOUT)}


def stdio_connection(session_dir: str) -> dict:
    command, args = runtime_stdio_command(session_dir)
    return {"transport": "stdio", "command": command, "args": args, "session_kwargs": SESSION}


def http_connection(url: str, headers: dict | None = None) -> dict:
    return {
        "transport": "streamable_http",
        "url": url,
        "headers": {**RUNTIME_HEADERS, **(headers or {})},
        "timeout": timedelta(seconds=CLIENT_TIMEOUT),
        "session_kwargs": SESSION,
    }


async def agent_tools(connection: dict):
    """(names, call) over the tools MultiServerMCPClient gives an agent."""
    client = MultiServerMCPClient({"toolpool": connection})
    tools = {t.name: t for t in await client.get_tools()}
    count = 0

    async def call(name, arguments):
        nonlocal count
        count += 1
        message = await tools[name].ainvoke({"name": name, "args": arguments, "id": f"call-{count}", "type": "tool_call"})
        text = "".join(block["text"] for block in message.content if block["type"] == "text")
        return text, message.status == "error"

    return list(tools), call


class LangChain(unittest.IsolatedAsyncioTestCase):
    async def test_over_stdio(self):
        # Every call starts `toolpool serve` anew: the file is in --session-dir.
        with tempfile.TemporaryDirectory() as tmp:
            names, call = await agent_tools(stdio_connection(str(Path(tmp) / "session")))
            await runtime_flow(self, names, call, "langchain over stdio")

    async def test_over_http(self):
        # The default settings, without the files: see the next test.
        log = []
        async with runtime_http_server(log=log) as url:
            names, call = await agent_tools(http_connection(url))
            await runtime_flow(self, names, call, "langchain over HTTP", files=False)
        self.assertEqual(runtime_warnings(log[0]), [])

    # toolpool bug: a 2025-11-25 MCP session that names no session gets a
    # toolpool session (and session directory) of its own, named by its
    # Mcp-Session-Id; only stateless 2026-07-28 requests are given the session
    # of their credential. langchain-mcp-adapters opens an MCP session per
    # tool call (and `mcp` 1.x speaks 2025-11-25), so the file saved by one
    # call is not there for the next, though both carry the same token:
    # `Tool read_file_segment error: FileNotFoundError: no such file in the
    # workspace: 'notes/runtime.txt'`.
    @unittest.expectedFailure
    async def test_over_http_a_file_saved_in_one_call_is_read_in_the_next(self):
        async with runtime_http_server() as url:
            _, call = await agent_tools(http_connection(url))
            await save_note(self, call, "kept between calls")
            await read_note(self, call, "kept between calls")

    async def test_over_http_naming_a_session(self):
        # The way round it: name the session (`Toolpool-Session`), and every
        # call's MCP session works in it.
        async with runtime_http_server() as url:
            names, call = await agent_tools(http_connection(url, {"Toolpool-Session": "langchain-agent"}))
            await runtime_flow(self, names, call, "langchain over HTTP in a named session")


if __name__ == "__main__":
    unittest.main()
