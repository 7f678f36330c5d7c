"""langchain-mcp-adapters (in target/pyvenv-langchain, with the `mcp` 1.x client
it requires: 2025-11-25, an `initialize` handshake per MCP session) drives
`toolpool serve` over stdio and streamable HTTP. The tools are the LangChain
`StructuredTool`s `MultiServerMCPClient.get_tools()` gives an agent, invoked
with a tool call as LangGraph's tool node does (`ainvoke`), which hands back the
`ToolMessage` the model would get; no model is called. By default each tool
call opens an MCP session of its own (a new server process on stdio).

List, call, save then read back, a raised error, a timeout (toolpool's
TimeoutError text in a `ToolMessage` with status "error"), the next call.
Over HTTP every call's MCP session runs in the session of the token it
carries, so a file saved in one call is read in the next."""

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
        log = []
        async with runtime_http_server(log=log) as url:
            names, call = await agent_tools(http_connection(url))
            await runtime_flow(self, names, call, "langchain over HTTP")
        self.assertEqual(runtime_warnings(log[0]), [])

    async def test_over_http_a_file_saved_in_one_call_is_read_in_the_next(self):
        # Each tool call opens an MCP session of its own (2025-11-25, with
        # `mcp` 1.x): both run in the session of the token they carry.
        async with runtime_http_server() as url:
            _, call = await agent_tools(http_connection(url))
            await save_note(self, call, "kept between calls")
            await read_note(self, call, "kept between calls")

    async def test_over_http_naming_a_session(self):
        # A named session (`Toolpool-Session`) in place of the token's: every
        # call's MCP session works in it.
        async with runtime_http_server() as url:
            names, call = await agent_tools(http_connection(url, {"Toolpool-Session": "langchain-agent"}))
            await runtime_flow(self, names, call, "langchain over HTTP in a named session")


if __name__ == "__main__":
    unittest.main()
