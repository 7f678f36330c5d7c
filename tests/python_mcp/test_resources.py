"""Resources that functions serve (`func.mcp_resource = "uri"`): listed by
`resources/list` (fixed URIs) and `resources/templates/list` (templates), read
by `resources/read` in the caller's session, never listed or called as tools;
over stdio and HTTP in both protocol versions."""

import base64
import json
import unittest

from mcp import MCPError

from support import check_everywhere


class FunctionResources(unittest.IsolatedAsyncioTestCase):
    async def check(self, client):
        listed = {str(r.uri): r for r in (await client.list_resources()).resources}
        self.assertEqual(listed["notes://index"].name, "notes_index")
        self.assertEqual(listed["notes://index"].title, "Notes index")
        self.assertEqual(listed["notes://index"].description, "The index of the notes.")
        self.assertEqual(listed["notes://pixel"].mime_type, "image/png")
        templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
        self.assertIn("notes://note/{name}", templates)
        tools = {t.name for t in (await client.list_tools()).tools}
        self.assertFalse({"notes_index", "note", "pixel"} & tools, tools)

        index = (await client.read_resource("notes://index")).contents[0]
        self.assertEqual((index.mime_type, json.loads(index.text)), ("application/json", {"notes": ["first", "second"]}))
        one = (await client.read_resource("notes://note/first")).contents[0]
        self.assertEqual(str(one.uri), "notes://note/first")
        self.assertTrue(one.text.startswith("note first of session "), one.text)
        pixel = (await client.read_resource("notes://pixel")).contents[0]
        self.assertTrue(base64.b64decode(pixel.blob).startswith(b"\x89PNG"))

        with self.assertRaises(MCPError) as wrong:
            await client.read_resource("notes://wrong")
        self.assertIn("returned text for the binary type image/png: it must return bytes", wrong.exception.error.message)
        with self.assertRaises(MCPError) as beyond:
            await client.read_resource("notes://note/a/b")
        self.assertEqual(beyond.exception.error.code, -32602)
        with self.assertRaises(MCPError) as called:
            await client.call_tool("notes_index", {})
        self.assertEqual(called.exception.error.code, -32602)
        self.assertIn("serves the resource notes://index", called.exception.error.message)

    async def test_over_stdio_and_http_in_both_versions(self):
        await check_everywhere(self, self.check, "--workers", "1")


if __name__ == "__main__":
    unittest.main()
