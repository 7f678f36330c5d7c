"""Trace context from the official Python client: with an OpenTelemetry span
current, `mcp` 2.3 puts its `traceparent` into every request's `_meta`
(SEP-414); toolpool's SERVER span is its child, exported over OTLP/HTTP to a
receiver (tests/fixtures/otlp_receiver.py, run with the python of
TOOLPOOL_TEST_OTEL_PYTHON, which has `opentelemetry-proto`), and the tool sees
toolpool's span as `_context["traceparent"]` and `TRACEPARENT` — over stdio and
HTTP, in both protocol versions."""

import json
import os
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from support import FIXTURES, MODES, http_server, ok, served

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TOOLS = FIXTURES.parent / "trace_tools"
RECEIVER = FIXTURES.parent / "otlp_receiver.py"


class Receiver:
    def __init__(self, tmp):
        self.out = Path(tmp) / "spans.jsonl"
        self.process = subprocess.Popen(
            [os.environ["TOOLPOOL_TEST_OTEL_PYTHON"], str(RECEIVER), str(self.out)],
            stdout=subprocess.PIPE, text=True,
        )
        self.endpoint = f"http://127.0.0.1:{int(self.process.stdout.readline())}"

    def span(self, parent_span_id, seconds=30):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            text = self.out.read_text() if self.out.exists() else ""
            for line in text.splitlines():
                span = json.loads(line)
                if span["parent_span_id"] == parent_span_id:
                    return span
            time.sleep(0.05)
        raise AssertionError(f"no span under {parent_span_id} arrived:\n{text}")

    def close(self):
        self.process.kill()
        self.process.wait()
        self.process.stdout.close()


def client_span(span_id: str):
    """A current span of the client's (the API alone: no SDK needed)."""
    context = SpanContext(trace_id=int(TRACE_ID, 16), span_id=int(span_id, 16), is_remote=False,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.use_span(NonRecordingSpan(context))


class Traces(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.receiver = Receiver(self.tmp.name)
        self.addCleanup(self.tmp.cleanup)
        self.addCleanup(self.receiver.close)
        self.env = {"OTEL_EXPORTER_OTLP_ENDPOINT": self.receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        self.calls = []  # (transport, version, the client's span id, what the tool saw)

    async def call(self, client, transport, span_id):
        with client_span(span_id):
            seen = json.loads(ok(await client.call_tool("trace_seen", {})))
        self.calls.append((transport, client.protocol_version, span_id, seen))

    def check_spans(self):
        for transport, version, span_id, seen in self.calls:
            with self.subTest(transport=transport, version=version):
                span = self.receiver.span(span_id)
                self.assertEqual((span["trace_id"], span["kind"], span["name"]),
                                 (TRACE_ID, "SERVER", "tools/call trace_seen"))
                attributes = span["attributes"]
                self.assertEqual(attributes["mcp.protocol.version"], version)
                self.assertEqual(attributes["network.transport"], "pipe" if transport == "stdio" else "tcp")
                self.assertEqual(attributes["gen_ai.tool.name"], "trace_seen")
                toolpool_span = f"00-{TRACE_ID}-{span['span_id']}-01"
                self.assertEqual(seen, {"context": [toolpool_span, None], "environ": [toolpool_span, None]})

    async def test_the_python_clients_span_parents_toolpools_which_the_tool_continues(self):
        span_ids = iter(f"{n:016x}" for n in range(0xa1, 0xb0))
        for version, mode in MODES.items():
            async with served("--workers", "1", "serve", functions=TOOLS, mode=mode, env=self.env) as client:
                self.assertEqual(client.protocol_version, version)
                await self.call(client, "stdio", next(span_ids))
        async with http_server("--workers", "1", "serve", "--http", "127.0.0.1:0",
                               functions=TOOLS, env=self.env) as (_, url):
            from mcp import Client

            for version, mode in MODES.items():
                async with Client(url, mode=mode) as client:
                    self.assertEqual(client.protocol_version, version)
                    await self.call(client, "http", next(span_ids))
        self.check_spans()


if __name__ == "__main__":
    unittest.main()
