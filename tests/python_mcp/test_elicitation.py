"""A tool's human prompt through `toolpool serve`: on 2025-11-25 an MCP
elicitation request to the Python client, on 2026-07-28 a multi-round-trip
result (`InputRequiredResult` with a sealed `requestState`) that the client's
retry resumes; "no human available" without the capability."""

import json
import tempfile
import unittest

import anyio
import mcp_types as types

from mcp.shared.exceptions import MCPError

from mcp import Client

from support import MODES, asking_tools, error, gone_within, http_server, ok, served, started_with


class Elicitation(unittest.IsolatedAsyncioTestCase):
    async def test_round_trip_in_both_versions(self):
        for version, mode in MODES.items():
            with self.subTest(version=version):
                await self.round_trip(version, mode)

    async def round_trip(self, version, mode):
        asked = []

        async def answer(context, params):
            asked.append(params)
            await anyio.sleep(1.5)  # longer than the timeout: waiting does not count
            return types.ElicitResult(action="accept", content={"response": "forty-two"})

        async with served("--workers", "1", "--timeout", "1", "serve", mode=mode, elicitation_callback=answer) as client:
            self.assertEqual(client.protocol_version, version)
            result = await client.call_tool("ask_human", {"question": "Six times seven?", "node": "Writer"})
            answer_json = json.loads(ok(result))
            self.assertEqual(answer_json["text"], "forty-two")
            self.assertEqual(answer_json["available"], True)
            self.assertEqual(len(asked), 1)
            self.assertIn("Six times seven?", asked[0].message)
            self.assertIn("node 'Writer'", asked[0].message)
            self.assertEqual(asked[0].requested_schema["required"], ["response"])

    async def test_decline_in_both_versions(self):
        async def decline(context, params):
            return types.ElicitResult(action="decline")

        for version, mode in MODES.items():
            with self.subTest(version=version):
                async with served("--workers", "1", "serve", mode=mode, elicitation_callback=decline) as client:
                    text = error(await client.call_tool("ask_then_sleep", {"question": "Approve?", "seconds": 0}))
                    self.assertTrue(text.startswith("Tool ask_then_sleep error: HumanPromptDeclined: "), text)

    async def test_without_the_capability_no_human_is_available(self):
        for version, mode in MODES.items():
            with self.subTest(version=version):
                async with served("--workers", "1", "serve", mode=mode) as client:
                    text = error(await client.call_tool("ask_then_sleep", {"question": "Anyone?", "seconds": 0}))
                    self.assertTrue(text.startswith("Tool ask_then_sleep error: HumanPromptUnavailable: "), text)
                    self.assertIn("no human available", text)

    async def test_the_request_state_is_checked(self):
        """2026-07-28, driven by hand: a forged, tampered, replayed or
        misapplied requestState is refused; the real one resumes the call."""

        async def unused(context, params):
            raise AssertionError("driven by hand")

        async with served("--workers", "1", "serve", mode="auto", elicitation_callback=unused) as client:
            session = client.session
            args = {"question": "Six times seven?", "node": "Writer"}
            first = await session.call_tool("ask_human", args, allow_input_required=True)
            self.assertEqual(first.result_type, "input_required")
            request = first.input_requests["human"]
            self.assertIn("Six times seven?", request.params.message)
            state = first.request_state
            accept = {"human": {"action": "accept", "content": {"response": "forty-two"}}}

            async def refused(state, arguments=args, responses=accept):
                with self.assertRaises(MCPError) as caught:
                    await session.call_tool("ask_human", arguments, input_responses=responses,
                                            request_state=state, allow_input_required=True)
                return str(caught.exception)

            self.assertIn("not one this server gave", await refused("AAAA" + state[4:]))
            self.assertIn("not one this server gave", await refused("made-up"))
            # Bound to the call: the same handle with other arguments.
            self.assertIn("not one this server gave", await refused(state, {**args, "question": "Other?"}))
            done = await session.call_tool("ask_human", args, input_responses=accept, request_state=state,
                                           allow_input_required=True)
            self.assertEqual(json.loads(ok(done))["text"], "forty-two")
            # Replayed: the call it stood for is over.
            self.assertIn("already used", await refused(state))
            self.assertEqual(ok(await client.call_tool("add", {"a": 2, "b": 3})), "5")


class Expiry(unittest.IsolatedAsyncioTestCase):
    """2026-07-28: a call suspended for its human's answer waits at most
    `--human-timeout`; then it is ended (the tool is told no answer came, what
    still runs is killed, the worker replaced), and a late retry with the old
    requestState gets the call's end as a tool error."""

    async def expires(self, client):
        session = client.session
        marker = f"toolpool-expiry-{id(client)}"
        args = {"marker": marker}
        first = await session.call_tool("spawn_then_ask", args, allow_input_required=True)
        self.assertEqual(first.result_type, "input_required")
        grandchild = await started_with(marker)
        # With one worker, this call waits until the suspended one is ended.
        with anyio.fail_after(30):
            self.assertEqual(ok(await client.call_tool("add", {"a": 2, "b": 3})), "5")
        self.assertTrue(await gone_within(grandchild, 10), "the expired call's grandchild survived")
        accept = {"human": {"action": "accept", "content": {"response": "too late"}}}
        for _ in range(2):  # the handle stays expired; it does not turn into "already used"
            late = await session.call_tool("spawn_then_ask", args, input_responses=accept,
                                           request_state=first.request_state, allow_input_required=True)
            self.assertEqual(
                error(late),
                "Tool spawn_then_ask error: HumanPromptUnavailable: no answer within 1 s (--human-timeout); the call was ended",
            )

    async def test_over_stdio(self):
        async def unused(context, params):
            raise AssertionError("driven by hand")

        with tempfile.TemporaryDirectory() as tmp:
            async with served("--workers", "1", "--human-timeout", "1", "serve", functions=asking_tools(tmp),
                              mode="auto", elicitation_callback=unused) as client:
                self.assertEqual(client.protocol_version, "2026-07-28")
                await self.expires(client)

    async def test_over_http(self):
        async def unused(context, params):
            raise AssertionError("driven by hand")

        with tempfile.TemporaryDirectory() as tmp:
            async with http_server("--workers", "1", "--human-timeout", "1", "serve", "--http", "127.0.0.1:0",
                                   functions=asking_tools(tmp)) as (_, url):
                async with Client(url, mode="auto", elicitation_callback=unused) as client:
                    self.assertEqual(client.protocol_version, "2026-07-28")
                    await self.expires(client)


if __name__ == "__main__":
    unittest.main()
