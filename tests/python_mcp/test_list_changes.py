"""`--watch`: the server declares `tools.listChanged` and tells its clients
when the tool list changes: a session from `initialize` (2025-11-25) by a
notification, a 2026-07-28 client on its `subscriptions/listen` stream; in
workflow-node mode the node is re-resolved against the new catalog."""

import tempfile
import unittest
from pathlib import Path

import anyio
import mcp_types as types
from mcp import Client

from support import MODES, http_server, ok, served, warnings_in

FIRST = "def first(a: int) -> int:\n    \"\"\"The first tool.\"\"\"\n    return a\n"
SECOND = "def second(a: int) -> int:\n    \"\"\"The second tool.\"\"\"\n    return a * 2\n"
WAIT = 30  # seconds a change may take to be seen (the watcher polls; the machine is shared)


def tools_dir(tmp: str) -> Path:
    functions = Path(tmp) / "functions"
    functions.mkdir()
    (functions / "first.py").write_text(FIRST)
    return functions


class LegacyListener:
    """A message handler that records `notifications/tools/list_changed`."""

    def __init__(self):
        self.changed = anyio.Event()

    async def __call__(self, message):
        root = getattr(message, "root", message)
        if isinstance(root, types.ToolListChangedNotification):
            self.changed.set()


class ResourceListener:
    """A message handler that records `notifications/resources/updated` (their URIs) and `.../list_changed`."""

    def __init__(self):
        self.updated = anyio.Event()
        self.list_changed = anyio.Event()
        self.uris = []

    async def __call__(self, message):
        root = getattr(message, "root", message)
        if isinstance(root, types.ResourceUpdatedNotification):
            self.uris.append(str(root.params.uri))
            self.updated.set()
        elif isinstance(root, types.ResourceListChangedNotification):
            self.list_changed.set()


async def names(client) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


class ListChanges(unittest.IsolatedAsyncioTestCase):
    async def see_a_new_module(self, client, functions: Path, mode: str, listener: LegacyListener):
        self.assertTrue(client.server_capabilities.tools.list_changed)
        self.assertEqual(await names(client), ["first"])
        if mode == "legacy":
            (functions / "second.py").write_text(SECOND)
            with anyio.fail_after(WAIT):
                await listener.changed.wait()
        else:
            async with client.listen(tools_list_changed=True) as subscription:
                (functions / "second.py").write_text(SECOND)
                with anyio.fail_after(WAIT):
                    await subscription.__anext__()
        self.assertEqual(await names(client), ["first", "second"])
        self.assertEqual(ok(await client.call_tool("second", {"a": 21})), "42")

    async def test_stdio_clients_are_told_in_both_versions(self):
        for version, mode in MODES.items():
            with self.subTest(version=version), tempfile.TemporaryDirectory() as tmp:
                functions = tools_dir(tmp)
                listener = LegacyListener()
                log = []
                async with served(
                    "--workers", "1", "serve", "--watch",
                    functions=functions, mode=mode, message_handler=listener, log=log,
                ) as client:
                    self.assertEqual(client.protocol_version, version)
                    await self.see_a_new_module(client, functions, mode, listener)
                self.assertEqual(warnings_in(log[0]), [])

    async def test_http_clients_are_told_in_both_versions(self):
        for version, mode in MODES.items():
            with self.subTest(version=version), tempfile.TemporaryDirectory() as tmp:
                functions = tools_dir(tmp)
                log = []
                async with http_server(
                    "--workers", "1", "serve", "--watch", "--http", "127.0.0.1:0", functions=functions, log=log
                ) as (_, url):
                    listener = LegacyListener()
                    async with Client(url, mode=mode, message_handler=listener) as client:
                        self.assertEqual(client.protocol_version, version)
                        await self.see_a_new_module(client, functions, mode, listener)
                self.assertEqual(warnings_in(log[0]), [])

    async def test_subscribed_resources_and_the_resource_list_are_told_in_both_versions(self):
        weather = 'def weather() -> str:\n    """Today."""\n    return "{}"\n\n\nweather.mcp_resource = "demo://weather"\n'
        tides = 'def tides() -> str:\n    """Tides."""\n    return "low"\n\n\ntides.mcp_resource = "demo://tides"\n'
        for version, mode in MODES.items():
            with self.subTest(version=version), tempfile.TemporaryDirectory() as tmp:
                functions = tools_dir(tmp)
                (functions / "weather.py").write_text(weather.format("sunny"))
                listener = ResourceListener()
                async with served(
                    "--workers", "1", "serve", "--watch",
                    functions=functions, mode=mode, message_handler=listener,
                ) as client:
                    resources = client.server_capabilities.resources
                    self.assertTrue(resources.subscribe and resources.list_changed)
                    read = lambda: client.read_resource("demo://weather")  # noqa: E731
                    self.assertEqual((await read()).contents[0].text, "sunny")
                    if mode == "legacy":
                        # Only what the session can read may be watched.
                        with self.assertRaises(Exception) as refused:
                            await client.subscribe_resource("demo://nope")
                        self.assertEqual(getattr(refused.exception, "code", None) or refused.exception.error.code, -32602)
                        await client.subscribe_resource("demo://weather")
                        (functions / "weather.py").write_text(weather.format("rain"))
                        with anyio.fail_after(WAIT):
                            await listener.updated.wait()
                        self.assertEqual(listener.uris, ["demo://weather"])
                        self.assertEqual((await read()).contents[0].text, "rain")
                        # Unsubscribed: the next reload tells of the new list
                        # (after any update, which would come first) and
                        # not of the weather.
                        await client.unsubscribe_resource("demo://weather")
                        (functions / "weather.py").write_text(weather.format("snow"))
                        (functions / "tides.py").write_text(tides)
                        with anyio.fail_after(WAIT):
                            while "demo://tides" not in [r.uri for r in (await client.list_resources()).resources]:
                                await anyio.sleep(0.2)
                            await listener.list_changed.wait()
                        self.assertEqual(listener.uris, ["demo://weather"])
                    else:
                        async with client.listen(resources_list_changed=True,
                                                 resource_subscriptions=["demo://weather"]) as subscription:
                            (functions / "weather.py").write_text(weather.format("rain"))
                            with anyio.fail_after(WAIT):
                                event = await subscription.__anext__()
                            self.assertIn("demo://weather", repr(event))
                        self.assertEqual((await read()).contents[0].text, "rain")

    async def test_without_watch_the_list_is_fixed(self):
        with tempfile.TemporaryDirectory() as tmp:
            async with served("--workers", "1", "serve", functions=tools_dir(tmp)) as client:
                self.assertFalse(client.server_capabilities.tools.list_changed)
                # resources.subscribe is declared all the same: a listen stream
                # is acknowledged (not -32601), honouring no list change.
                self.assertTrue(client.server_capabilities.resources.subscribe)
                async with client.listen(tools_list_changed=True, resources_list_changed=True) as subscription:
                    self.assertFalse(subscription.honored.tools_list_changed)
                    self.assertFalse(subscription.honored.resources_list_changed)
                self.assertEqual(await names(client), ["first"])

    async def test_a_workflow_node_is_re_resolved(self):
        with tempfile.TemporaryDirectory() as tmp:
            functions = tools_dir(tmp)
            workflow = Path(tmp) / "workflow.yaml"
            workflow.write_text(
                "nodes:\n"
                "  - id: Agent\n"
                "    type: agent\n"
                "    config:\n"
                "      tooling:\n"
                "        - type: function\n"
                "          prefix: fx\n"
                "          config:\n"
                "            tools:\n"
                "              - name: first:All\n"
            )
            listener = LegacyListener()
            log_file = []
            async with served(
                "--workers", "1", "serve", "--watch", "--config", str(workflow), "--node", "Agent",
                functions=functions, mode="legacy", message_handler=listener, log_file=log_file,
            ) as client:
                self.assertEqual(await names(client), ["fx_first"])
                # A second function in the module the node takes whole.
                (functions / "first.py").write_text(FIRST + "\n\n" + SECOND)
                with anyio.fail_after(WAIT):
                    await listener.changed.wait()
                self.assertEqual(await names(client), ["fx_first", "fx_second"])
                self.assertEqual(ok(await client.call_tool("fx_second", {"a": 2})), "4")
                # The module gone: the workflow no longer resolves; the node keeps its list.
                (functions / "first.py").unlink()
                with anyio.fail_after(WAIT):
                    while "no longer resolves" not in log_file[0].read_text():
                        await anyio.sleep(0.2)
                self.assertEqual(await names(client), ["fx_first", "fx_second"])


if __name__ == "__main__":
    unittest.main()
