"""Attachment results of a project in the original convention's shape, as the
official Python client receives them: an image as image content, a file as a
resource link, text blocks as text."""

import base64
import unittest

import mcp_types as types

from support import DROPIN_PROJECT, served


class Attachments(unittest.IsolatedAsyncioTestCase):
    async def test_images_files_and_text_arrive_as_their_content_types(self):
        async with served("--workers", "1", "serve", functions=DROPIN_PROJECT) as client:
            chart = await client.call_tool("render_chart", {"title": "sales"})
            self.assertFalse(chart.is_error, chart)
            self.assertEqual(len(chart.content), 1, chart)
            image = chart.content[0]
            self.assertIsInstance(image, types.ImageContent)
            self.assertEqual(image.mime_type, "image/png")
            self.assertTrue(base64.b64decode(image.data).startswith(b"\x89PNG"))

            report = await client.call_tool("export_report", {"name": "q3"})
            text, link = report.content
            self.assertIsInstance(text, types.TextContent)
            self.assertEqual(text.text, "Exported q3")
            self.assertIsInstance(link, types.ResourceLink)
            self.assertEqual((link.name, link.mime_type, link.size), ("q3.txt", "text/plain", 1200))
            self.assertTrue(str(link.uri).startswith("file:///") and str(link.uri).endswith("/q3.txt"), link.uri)

            blocks = await client.call_tool("text_blocks", {})
            self.assertEqual([c.text for c in blocks.content], ["first", "second"])


if __name__ == "__main__":
    unittest.main()
