"""Log messages: a tool's Python `logging` records reach a client that asked
for a level — `logging/setLevel` on 2025-11-25, `_meta`'s
`io.modelcontextprotocol/logLevel` on 2026-07-28 — as `notifications/message`
from that level up, from any thread of the tool, before the call's answer;
a client that asked for no level gets none.

Over HTTP on 2025-11-25 the messages travel on the session's GET stream, not
the call's response stream, so they may arrive just after the answer: the
check waits for them there."""

import unittest
import warnings

import anyio

from support import check_everywhere, ok, served

# `logging/setLevel` is what a 2025-11-25 client has, deprecated or not.
warnings.filterwarnings("ignore", message="The logging capability is deprecated")

HEARD = [
    ("info", "fixture.logs", "an info record"),
    ("warning", "fixture.logs", "a warning record"),
    ("error", "fixture.logs", "an error from a thread"),
]


class Logs(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        self.heard = []

    async def on_message(self, params):
        self.heard.append((params.level, params.logger, params.data))

    async def check(self, client):
        self.heard.clear()
        if client.protocol_version == "2025-11-25":
            await client.set_logging_level("info")
        self.assertEqual(ok(await client.call_tool("log_some", {})), "logged")
        with anyio.move_on_after(10):
            while len(self.heard) < len(HEARD):
                await anyio.sleep(0.02)
        self.assertEqual(self.heard, HEARD)

    async def test_from_the_level_asked_over_stdio_and_http_in_both_versions(self):
        await check_everywhere(self, self.check, "--workers", "1",
                               logging_callback=self.on_message, log_level="info")

    async def test_no_level_asked_no_message(self):
        for mode in ("legacy", "auto"):
            with self.subTest(mode=mode):
                async with served("--workers", "1", "serve", mode=mode, logging_callback=self.on_message) as client:
                    self.assertEqual(ok(await client.call_tool("log_some", {})), "logged")
                self.assertEqual(self.heard, [])


if __name__ == "__main__":
    unittest.main()
