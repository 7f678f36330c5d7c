"""Attachment results of a project in the original convention's shape, as the
official Python client receives them: an image as image content, a small text
file embedded, a larger file as a resource link that `resources/read`
resolves, text blocks as text; the session's files as resources, never
another session's."""

import base64
import unittest

import mcp_types as types
from mcp import MCPError

from support import DROPIN_PROJECT, MODES, http_server, named_client, served

ATTACHMENT = "toolpool://attachments/"
SMALL = "report body\n" * 100  # 1 200 bytes: embedded
LARGE = "report body\n" * 6000  # 72 000 bytes: past the 64 KiB embed limit, linked


class Attachments(unittest.IsolatedAsyncioTestCase):
    async def check(self, client):
        chart = await client.call_tool("render_chart", {"title": "sales"})
        self.assertFalse(chart.is_error, chart)
        self.assertEqual(len(chart.content), 1, chart)
        image = chart.content[0]
        self.assertIsInstance(image, types.ImageContent)
        self.assertEqual(image.mime_type, "image/png")
        self.assertTrue(base64.b64decode(image.data).startswith(b"\x89PNG"))

        report = await client.call_tool("export_report", {"name": "q3"})
        text, embedded = report.content
        self.assertIsInstance(text, types.TextContent)
        self.assertEqual(text.text, "Exported q3")
        self.assertIsInstance(embedded, types.EmbeddedResource)
        self.assertEqual((embedded.resource.mime_type, embedded.resource.text), ("text/plain", SMALL))
        self.assertTrue(str(embedded.resource.uri).startswith(ATTACHMENT), embedded.resource.uri)

        big = await client.call_tool("export_report", {"name": "q4", "lines": 6000})
        link = big.content[1]
        self.assertIsInstance(link, types.ResourceLink)
        self.assertEqual((link.name, link.mime_type, link.size), ("q4.txt", "text/plain", len(LARGE)))
        self.assertTrue(str(link.uri).startswith(ATTACHMENT), link.uri)
        # The link resolves through the server, wherever the client runs.
        read = await client.read_resource(str(link.uri))
        self.assertEqual([(str(c.uri), c.mime_type, c.text) for c in read.contents],
                         [(str(link.uri), "text/plain", LARGE)])
        chart_read = await client.read_resource(self.uri_of(await client.list_resources(), "sales.png"))
        self.assertTrue(base64.b64decode(chart_read.contents[0].blob).startswith(b"\x89PNG"))

        listed = await client.list_resources()
        names = {r.name for r in listed.resources}
        self.assertTrue({"sales.png", "q3.txt", "q4.txt"} <= names, names)
        templates = await client.list_resource_templates()
        self.assertEqual([t.uri_template for t in templates.resource_templates], [ATTACHMENT + "{attachment_id}"])

        blocks = await client.call_tool("text_blocks", {})
        self.assertEqual([c.text for c in blocks.content], ["first", "second"])

        with self.assertRaises(MCPError) as unknown:
            await client.read_resource(ATTACHMENT + "no-such-id")
        self.assertEqual(unknown.exception.error.code, -32602)
        self.assertIn("resource not found", unknown.exception.error.message)

    @staticmethod
    def uri_of(listed, name: str) -> str:
        return next(str(r.uri) for r in listed.resources if r.name == name)

    async def test_over_stdio_in_both_versions(self):
        for version, mode in MODES.items():
            with self.subTest(version=version):
                async with served("--workers", "1", "serve", functions=DROPIN_PROJECT, mode=mode) as client:
                    await self.check(client)

    async def test_over_http_a_session_reads_its_own_files_only(self):
        async with http_server("--workers", "2", "serve", "--http", "127.0.0.1:0",
                               functions=DROPIN_PROJECT) as (_, url):
            for version, mode in MODES.items():
                with self.subTest(version=version):
                    async with named_client(url, f"alice-{mode}", mode) as alice:
                        await self.check(alice)
                        mine = self.uri_of(await alice.list_resources(), "q4.txt")
                    async with named_client(url, f"bob-{mode}", mode) as bob:
                        self.assertEqual((await bob.list_resources()).resources, [])
                        with self.assertRaises(MCPError) as theirs:
                            await bob.read_resource(mine)
                        self.assertEqual(theirs.exception.error.code, -32602)
                        self.assertEqual(theirs.exception.error.data, {"uri": mine})


if __name__ == "__main__":
    unittest.main()
