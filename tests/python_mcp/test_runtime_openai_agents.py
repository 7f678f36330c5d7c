"""The OpenAI Agents SDK (`openai-agents`, in target/pyvenv-openai-agents)
drives `toolpool serve` over stdio (`MCPServerStdio`) and streamable HTTP
(`MCPServerStreamableHttp`), with its default protocol settings (the `mcp` 2.x
client in `mode="auto"`: 2026-07-28, stateless). The tools are the
`FunctionTool`s the SDK gives an agent (`Agent.get_mcp_tools`), invoked as the
agent's runner does (`on_invoke_tool` with the model's JSON arguments); no
model is called. List, call, save then read back, a raised error, a timeout
(toolpool's TimeoutError text is the tool output), the next call; over HTTP a
file saved by one client is read back by the next (same token, no session
named)."""

import json
import tempfile
import unittest
from pathlib import Path

from agents import Agent, RunContextWrapper
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp
from agents.tool_context import ToolContext

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


def stdio_server(session_dir: str) -> MCPServerStdio:
    command, args = runtime_stdio_command(session_dir)
    # client_session_timeout_seconds is 5 by default: below a long tool's
    # timeout the SDK would give up before toolpool answers.
    return MCPServerStdio(
        params={"command": command, "args": args},
        client_session_timeout_seconds=CLIENT_TIMEOUT,
        cache_tools_list=True,
    )


def http_server(url: str) -> MCPServerStreamableHttp:
    return MCPServerStreamableHttp(
        params={"url": url, "headers": RUNTIME_HEADERS, "timeout": CLIENT_TIMEOUT},
        client_session_timeout_seconds=CLIENT_TIMEOUT,
        cache_tools_list=True,
    )


async def agent_tools(server):
    """(names, call) over the FunctionTools an agent with `server` gets."""
    tools = {t.name: t for t in await Agent(name="toolpool", mcp_servers=[server]).get_mcp_tools(RunContextWrapper(None))}
    count = 0

    async def call(name, arguments):
        nonlocal count
        count += 1
        raw = json.dumps(arguments)
        context = ToolContext(None, tool_name=name, tool_call_id=f"call-{count}", tool_arguments=raw)
        output = await tools[name].on_invoke_tool(context, raw)
        # One text content: a ToolOutputTextDict. The SDK keeps no error mark:
        # the model is given the text.
        if isinstance(output, dict):
            output = output["text"]
        assert isinstance(output, str), output
        return output, None

    return list(tools), call


class OpenAIAgents(unittest.IsolatedAsyncioTestCase):
    async def test_over_stdio(self):
        with tempfile.TemporaryDirectory() as tmp:
            async with stdio_server(str(Path(tmp) / "session")) as server:
                self.assertEqual(server.session.protocol_version, "2026-07-28")
                names, call = await agent_tools(server)
                await runtime_flow(self, names, call, "openai-agents over stdio")

    async def test_over_http(self):
        log = []
        async with runtime_http_server(log=log) as url:
            async with http_server(url) as server:
                self.assertEqual(server.session.protocol_version, "2026-07-28")
                names, call = await agent_tools(server)
                await runtime_flow(self, names, call, "openai-agents over HTTP")
        self.assertEqual(runtime_warnings(log[0]), [])

    async def test_over_http_the_next_client_reads_the_file_back(self):
        # Stateless requests naming no session run in the session of their
        # credential: a new client with the same token finds the file.
        async with runtime_http_server() as url:
            async with http_server(url) as server:
                _, call = await agent_tools(server)
                await save_note(self, call, "kept for the next client")
            async with http_server(url) as server:
                _, call = await agent_tools(server)
                await read_note(self, call, "kept for the next client")


if __name__ == "__main__":
    unittest.main()
