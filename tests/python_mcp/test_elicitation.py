"""A tool's human prompt through `toolpool serve` as an MCP elicitation
request to the Python client, and "no human available" without one."""

import json
import unittest

import anyio
import mcp_types as types

from support import error, ok, served


class Elicitation(unittest.IsolatedAsyncioTestCase):
    async def test_round_trip(self):
        asked = []

        async def answer(context, params):
            asked.append(params)
            await anyio.sleep(1.5)  # longer than the timeout: waiting does not count
            return types.ElicitResult(action="accept", content={"response": "forty-two"})

        async with served("--workers", "1", "--timeout", "1", "serve", mode="legacy", elicitation_callback=answer) as client:
            result = await client.call_tool("ask_human", {"question": "Six times seven?", "node": "Writer"})
            answer_json = json.loads(ok(result))
            self.assertEqual(answer_json["text"], "forty-two")
            self.assertEqual(answer_json["available"], True)
            self.assertEqual(len(asked), 1)
            self.assertIn("Six times seven?", asked[0].message)
            self.assertIn("node 'Writer'", asked[0].message)
            self.assertEqual(asked[0].requested_schema["required"], ["response"])

    async def test_decline(self):
        async def decline(context, params):
            return types.ElicitResult(action="decline")

        async with served("--workers", "1", "serve", mode="legacy", elicitation_callback=decline) as client:
            text = error(await client.call_tool("ask_then_sleep", {"question": "Approve?", "seconds": 0}))
            self.assertTrue(text.startswith("Tool ask_then_sleep error: HumanPromptDeclined: "), text)

    async def test_without_the_capability_no_human_is_available(self):
        async with served("--workers", "1", "serve", mode="legacy") as client:
            text = error(await client.call_tool("ask_then_sleep", {"question": "Anyone?", "seconds": 0}))
            self.assertTrue(text.startswith("Tool ask_then_sleep error: HumanPromptUnavailable: "), text)
            self.assertIn("no human available", text)


if __name__ == "__main__":
    unittest.main()
