"""Google ADK (`google-adk[mcp]`, in target/pyvenv-adk) drives `toolpool
serve` over stdio and streamable HTTP through its `McpToolset`, with its
default protocol settings (`mcp` 2.x, but the `initialize` handshake:
2025-11-25 with a session, kept in ADK's pool for the toolset's life; the
2026-07-28 probe is behind ADK's experimental MCP_MODERN_PROTOCOL feature).
The tools are the `McpTool`s `McpToolset.get_tools()` gives an agent, run as
ADK's flow runs them (`run_async` with a `ToolContext`); their result dict is
the function response the model would get; no model is called. List, call,
save then read back, a raised error, a timeout (toolpool's TimeoutError text
in a result with `isError`), the next call. Over HTTP a new toolset (a new
MCP session) with the same token finds the file the last one saved, in
2025-11-25 as in 2026-07-28 (ADK_ENABLE_MCP_MODERN_PROTOCOL=1)."""

import os

# ADK probes Google's default credentials for mTLS before every HTTP session
# (google.auth.default, which may ask the GCE metadata server): not here.
os.environ["GOOGLE_API_USE_CLIENT_CERTIFICATE"] = "false"
os.environ["NO_GCE_CHECK"] = "True"

import tempfile  # noqa: E402
import unittest  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from unittest import mock  # noqa: E402

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.agents.invocation_context import InvocationContext  # noqa: E402
from google.adk.sessions import InMemorySessionService  # noqa: E402
from google.adk.tools.mcp_tool import McpToolset, StdioConnectionParams, StreamableHTTPConnectionParams  # noqa: E402
from google.adk.tools.tool_context import ToolContext  # noqa: E402
from mcp import StdioServerParameters  # noqa: E402

from support import (  # noqa: E402
    CLIENT_TIMEOUT,
    RUNTIME_HEADERS,
    read_note,
    runtime_flow,
    runtime_http_server,
    runtime_stdio_command,
    runtime_warnings,
    save_note,
)


def stdio_toolset(session_dir: str) -> McpToolset:
    command, args = runtime_stdio_command(session_dir)
    # On stdio `timeout` (5 s by default) is also every request's read
    # timeout: keep it above toolpool's --timeout.
    return McpToolset(
        connection_params=StdioConnectionParams(
            server_params=StdioServerParameters(command=command, args=args), timeout=CLIENT_TIMEOUT
        )
    )


def http_toolset(url: str) -> McpToolset:
    # Over HTTP `timeout` bounds connecting; a request's read timeout is
    # `sse_read_timeout` (5 min by default).
    return McpToolset(
        connection_params=StreamableHTTPConnectionParams(
            url=url, headers=RUNTIME_HEADERS, timeout=CLIENT_TIMEOUT, sse_read_timeout=CLIENT_TIMEOUT
        )
    )


async def agent_tools(toolset: McpToolset):
    """(names, call) over the tools an ADK agent with `toolset` gets."""
    agent = LlmAgent(name="toolpool_agent", model="gemini-2.5-flash", tools=[toolset])
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="toolpool", user_id="tester")
    invocation = InvocationContext(session_service=sessions, invocation_id="invocation-1", agent=agent, session=session)
    tools = {tool.name: tool for tool in await toolset.get_tools()}
    count = 0

    async def call(name, arguments):
        nonlocal count
        count += 1
        response = await tools[name].run_async(args=arguments, tool_context=ToolContext(invocation, function_call_id=f"call-{count}"))
        text = "".join(block["text"] for block in response["content"] if block["type"] == "text")
        return text, bool(response.get("isError"))

    return list(tools), call


class GoogleADK(unittest.IsolatedAsyncioTestCase):
    async def test_over_stdio(self):
        with tempfile.TemporaryDirectory() as tmp:
            toolset = stdio_toolset(str(Path(tmp) / "session"))
            try:
                names, call = await agent_tools(toolset)
                await runtime_flow(self, names, call, "google-adk over stdio")
            finally:
                await toolset.close()

    async def test_over_http(self):
        log = []
        async with runtime_http_server(log=log) as url:
            toolset = http_toolset(url)
            try:
                names, call = await agent_tools(toolset)
                await runtime_flow(self, names, call, "google-adk over HTTP")
            finally:
                await toolset.close()
        self.assertEqual(runtime_warnings(log[0]), [])

    async def test_over_http_the_next_client_reads_the_file_back(self):
        # ADK speaks 2025-11-25 by default: each toolset an MCP session of its
        # own, both in the session of the token they carry.
        async with runtime_http_server() as url:
            for step in (save_note, read_note):
                toolset = http_toolset(url)
                try:
                    _, call = await agent_tools(toolset)
                    await step(self, call, "kept for the next client")
                finally:
                    await toolset.close()

    async def test_over_http_in_2026_07_28_the_next_client_reads_the_file_back(self):
        # ADK's experimental 2026-07-28 probe: stateless requests, in the
        # session of their credential as well.
        with mock.patch.dict(os.environ, {"ADK_ENABLE_MCP_MODERN_PROTOCOL": "1"}), warnings.catch_warnings():
            warnings.filterwarnings("ignore", r"\[EXPERIMENTAL\] feature MCP_MODERN_PROTOCOL")
            async with runtime_http_server() as url:
                for step in (save_note, read_note):
                    toolset = http_toolset(url)
                    try:
                        _, call = await agent_tools(toolset)
                        await step(self, call, "kept for the next client")
                    finally:
                        await toolset.close()


if __name__ == "__main__":
    unittest.main()
