"""pydantic-ai 2.x (`pydantic-ai-slim[mcp]`, in target/pyvenv-pydantic-ai)
drives `toolpool serve` over stdio and streamable HTTP through its
`MCPToolset` (built on fastmcp's client, `mcp` 2.x: 2026-07-28, stateless),
with its default protocol settings. Each call is a real agent run
(`Agent.run`) whose model is a scripted `FunctionModel`, so the toolset's
tools are listed, called and their results (or errors, as a `ToolReturnPart`
with outcome "retried" under the default `tool_error_behavior="retry"`) handed
to the model exactly as with an LLM; no LLM is called. List, call, save then
read back, a raised error, a timeout (toolpool's TimeoutError text is what the
model is given), the next call; over HTTP a file saved by one toolset is read
back by the next (same token, no session named)."""

import json
import tempfile
import unittest
from pathlib import Path

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

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


def stdio_toolset(session_dir: str) -> MCPToolset:
    command, args = runtime_stdio_command(session_dir)
    # read_timeout (5 min by default) bounds each request; init_timeout (5 s
    # by default) the start, which a busy machine may need more for.
    return MCPToolset(StdioTransport(command=command, args=args), read_timeout=CLIENT_TIMEOUT, init_timeout=CLIENT_TIMEOUT)


def http_toolset(url: str) -> MCPToolset:
    return MCPToolset(url, headers=RUNTIME_HEADERS, read_timeout=CLIENT_TIMEOUT, init_timeout=CLIENT_TIMEOUT)


def agent_tools(test, toolset: MCPToolset):
    """call(name, arguments): one agent run whose scripted model asks for
    that one tool call, then ends with what it was given back."""

    async def call(name, arguments):
        given = []

        def model(messages, info: AgentInfo) -> ModelResponse:
            if len(messages) == 1:
                test.assertIn(name, [tool.name for tool in info.function_tools])
                return ModelResponse(parts=[ToolCallPart(name, arguments, tool_call_id="call-1")])
            given.append(messages[-1].parts[-1])
            return ModelResponse(parts=[TextPart("done")])

        await Agent(FunctionModel(model), toolsets=[toolset]).run(f"Call {name}.")
        part = given[0]
        test.assertIsInstance(part, ToolReturnPart)
        if part.outcome == "success":
            # What the model is given: the structured result, as JSON.
            return part.model_response_str(), False
        test.assertEqual(part.outcome, "retried")
        return part.content, True

    return call


class PydanticAI(unittest.IsolatedAsyncioTestCase):
    async def flow(self, toolset: MCPToolset, text: str):
        names = [tool.name for tool in await toolset.list_tools()]
        self.assertEqual(toolset.client.protocol_version, "2026-07-28")
        await runtime_flow(self, names, agent_tools(self, toolset), text)

    async def test_over_stdio(self):
        with tempfile.TemporaryDirectory() as tmp:
            async with stdio_toolset(str(Path(tmp) / "session")) as toolset:
                await self.flow(toolset, "pydantic-ai over stdio")

    async def test_over_http(self):
        log = []
        async with runtime_http_server(log=log) as url:
            async with http_toolset(url) as toolset:
                await self.flow(toolset, "pydantic-ai over HTTP")
        self.assertEqual(runtime_warnings(log[0]), [])

    async def test_over_http_the_next_client_reads_the_file_back(self):
        # Stateless requests naming no session run in the session of their
        # credential: a new toolset with the same token finds the file.
        async with runtime_http_server() as url:
            async with http_toolset(url) as toolset:
                await save_note(self, agent_tools(self, toolset), "kept for the next client")
            async with http_toolset(url) as toolset:
                await read_note(self, agent_tools(self, toolset), "kept for the next client")


if __name__ == "__main__":
    unittest.main()
