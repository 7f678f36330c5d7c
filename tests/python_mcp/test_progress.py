"""Progress: a tool's `_context["progress"]` reports reach a client that sent a
`progressToken` as `notifications/progress`, in order and going up, over stdio
and HTTP in both protocol versions; a client that asked for none gets none;
a call waiting for a human sends heartbeats, and so does a silent call under
`serve --progress-heartbeat`, only to a client that gave a `progressToken`."""

import json
import unittest

import anyio
from support import check_everywhere, ok, served

REFUSED = {
    "back": "ValueError: progress must go up with each report: 1 after 12",
    "nan": "ValueError: progress must be a finite number, got nan",
    "text": "TypeError: progress must be a number, not str",
    "bool": "TypeError: progress must be a number, not bool",
}


class Progress(unittest.IsolatedAsyncioTestCase):
    async def check(self, client):
        seen = []

        async def on_progress(progress, total, message):
            seen.append((progress, total, message))

        result = await client.call_tool("report_progress", {"steps": 12, "threads": 3}, progress_callback=on_progress)
        self.assertEqual(json.loads(ok(result)), {"reported": 12, "refused": REFUSED})
        # Every report, in order, before the answer.
        self.assertEqual(seen, [(step, 12, f"step {step} of 12") for step in range(1, 13)])
        # Asked for none: the tool's reports are checked and go nowhere.
        result = await client.call_tool("report_progress", {"steps": 3})
        self.assertEqual(json.loads(ok(result)), {"reported": 3, "refused": {**REFUSED, "back": REFUSED["back"].replace("12", "3")}})

    async def test_over_stdio_and_http_in_both_versions(self):
        await check_everywhere(self, self.check, "--workers", "2")

    async def test_a_call_waiting_for_a_human_sends_heartbeats(self):
        # 2025-11-25: the question is an elicitation request while the call
        # waits; the client's timeout (reset on progress) must not fire.
        async def slow_human(context, params):
            await anyio.sleep(6)
            from mcp.types import ElicitResult

            return ElicitResult(action="accept", content={"response": "later"})

        seen = []

        async def on_progress(progress, total, message):
            seen.append((progress, total, message))

        async with served("--workers", "1", "serve", mode="legacy", elicitation_callback=slow_human) as client:
            result = await client.call_tool("ask_with_progress", {"question": "Ready?"}, progress_callback=on_progress)
            self.assertEqual(ok(result), "later")
        self.assertEqual(seen[0], (1, 2, "asking"))
        self.assertEqual(seen[-1], (2, 2, "answered"))
        heartbeats = seen[1:-1]
        self.assertGreaterEqual(len(heartbeats), 1, seen)
        for progress, total, message in heartbeats:
            self.assertEqual((total, message), (2, "waiting for a human's answer"))
            self.assertTrue(1 < progress < 1.000001, progress)
        values = [progress for progress, _, _ in seen]
        self.assertEqual(values, sorted(set(values)), "progress only goes up")

    async def test_a_silent_call_beats_under_progress_heartbeat(self):
        seen = []

        async def on_progress(progress, total, message):
            seen.append((progress, total, message))

        async with served("--workers", "2", "serve", "--progress-heartbeat", "0.3", mode="legacy") as client:
            result = await client.call_tool("sleep", {"seconds": 1.4}, progress_callback=on_progress)
            self.assertEqual(ok(result), "slept 1.4")
            # No progressToken: no notification, and the call answers all the same.
            before = len(seen)
            result = await client.call_tool("sleep", {"seconds": 0.7})
            self.assertEqual(ok(result), "slept 0.7")
            self.assertEqual(len(seen), before)
        self.assertGreaterEqual(len(seen), 3, seen)
        for progress, total, message in seen:
            self.assertRegex(message, r"^still running after \d+(\.\d+)? s$")
        values = [progress for progress, _, _ in seen]
        self.assertEqual(values, sorted(set(values)), "progress only goes up")


if __name__ == "__main__":
    unittest.main()
