"""`serve --http --sandbox`: each session's sandboxed workers (a session
named by its clients, or a credential's) see that session's folders and no
other's. Run by tests/suite/mcp_python.rs when the kernel
has every sandbox piece (scripts/test-sandboxed requires it).

The tools are the bundled ones (save_file, read_text_file_snippet,
list_directory) and a hostile module that reads and lists whatever path it
is given. Host folders are made outside /tmp (TOOLPOOL_TEST_HOST_TMP), as the
sandbox gives each worker a /tmp of its own.
"""

import json
import os
import shutil
import tempfile
import unittest
from pathlib import Path

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from support import REPO, error, http_server, ok

HOSTILE = '''\
import os

# Which worker process (its pid is 1 in its own PID namespace).
WORKER = os.urandom(8).hex()


def read_path(path: str) -> str:
    """The text of any file, by absolute path."""
    with open(path) as f:
        return f.read()


def list_path(path: str) -> list:
    """The names in any folder, by absolute path."""
    return sorted(os.listdir(path))


def where(_context: dict | None = None) -> dict:
    """The session this call runs in, and which worker runs it."""
    return {"session_id": _context["session_id"], "workspace": str(_context["python_workspace_root"]),
            "cwd": os.getcwd(), "worker": WORKER}


def nap(seconds: float) -> str:
    """Sleeps (to be killed by the call timeout)."""
    import time

    time.sleep(seconds)
    return "woke"
'''


def host_tmp() -> str | None:
    return os.environ.get("TOOLPOOL_TEST_HOST_TMP") or None


def client(url: str, name: str | None = None, mode: str = "legacy"):
    headers = {"Toolpool-Session": name} if name else None
    return Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers)), mode=mode)


def tools_dir(base: Path) -> Path:
    """The bundled tools and the hostile module, in a folder of the host."""
    functions = base / "functions"
    shutil.copytree(REPO / "functions" / "function_calling", functions,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (functions / "hostile.py").write_text(HOSTILE)
    return functions


def snippet(result) -> str:
    return json.loads(ok(result))["content"]


def names(result) -> list[str]:
    return [entry["name"] for entry in json.loads(ok(result))["entries"]]


class SandboxedSessions(unittest.IsolatedAsyncioTestCase):
    async def test_each_session_sees_its_own_folders_only(self):
        with tempfile.TemporaryDirectory(dir=host_tmp()) as base:
            base = Path(base)
            root = base / "sessions"
            functions = tools_dir(base)
            args = ("--sandbox", "--workers", "2", "--timeout", "8",
                    "serve", "--http", "127.0.0.1:0", "--sessions-root", str(root))
            log: list[str] = []
            async with http_server(*args, functions=functions, log=log) as (_, url):
                async with client(url, "alice") as alice, client(url, "bob") as bob:
                    for who, c in (("alice", alice), ("bob", bob)):
                        ok(await c.call_tool("save_file", {"path": f"{who}.txt", "content": f"{who}'s file"}))
                    for who, c in (("alice", alice), ("bob", bob)):
                        self.assertEqual(snippet(await c.call_tool("read_text_file_snippet", {"path": f"{who}.txt"})),
                                         f"{who}'s file")
                        listed = names(await c.call_tool("list_directory", {}))
                        self.assertIn(f"{who}.txt", listed)
                        self.assertNotIn("bob.txt" if who == "alice" else "alice.txt", listed)
                        # On the host, in the session's own workspace.
                        host_file = root / who / "code_workspace" / f"{who}.txt"
                        self.assertEqual(host_file.read_text(), f"{who}'s file")
                        here = json.loads(ok(await c.call_tool("where", {})))
                        self.assertEqual(here["session_id"], who)
                        self.assertEqual(Path(here["cwd"]), root.resolve() / who / "code_workspace")

                    # A hostile tool of alice's reads her file by absolute
                    # path (the tool works), not bob's, nor lists the root.
                    own = root.resolve() / "alice" / "code_workspace" / "alice.txt"
                    theirs = root.resolve() / "bob" / "code_workspace" / "bob.txt"
                    self.assertEqual(ok(await alice.call_tool("read_path", {"path": str(own)})), "alice's file")
                    refused = error(await alice.call_tool("read_path", {"path": str(theirs)}))
                    self.assertIn("FileNotFoundError", refused)
                    refused = error(await alice.call_tool("list_path", {"path": str(root.resolve() / "bob")}))
                    self.assertIn("FileNotFoundError", refused)
                    refused = error(await alice.call_tool("list_path", {"path": str(root.resolve())}))
                    self.assertIn("PermissionError", refused)

                    # A timeout kill in alice's session: her next call works,
                    # on a new worker, with her files.
                    before = json.loads(ok(await alice.call_tool("where", {})))["worker"]
                    timed_out = error(await alice.call_tool("nap", {"seconds": 120}))
                    self.assertIn("TimeoutError", timed_out)
                    self.assertEqual(snippet(await alice.call_tool("read_text_file_snippet", {"path": "alice.txt"})),
                                     "alice's file")
                    after = json.loads(ok(await alice.call_tool("where", {})))
                    self.assertNotEqual(after["worker"], before)
                    self.assertEqual(after["session_id"], "alice")
                    self.assertNotIn("bob.txt", names(await alice.call_tool("list_directory", {})))
                    self.assertEqual(snippet(await bob.call_tool("read_text_file_snippet", {"path": "bob.txt"})),
                                     "bob's file")

                # Stateless requests naming no session: the one session of a
                # server without tokens (`anonymous`), sandboxed like the others.
                async with client(url, mode="auto") as anonymous:
                    saved = ok(await anonymous.call_tool("save_file", {"path": "kept.txt", "content": "kept"}))
                    self.assertIn("kept.txt", saved)
                    here = json.loads(ok(await anonymous.call_tool("where", {})))
                    self.assertEqual(here["session_id"], "anonymous")
                    self.assertEqual(Path(here["cwd"]), Path(here["workspace"]))
                    self.assertEqual(Path(here["workspace"]).parent.parent, root.resolve())
                    self.assertIn("kept.txt", names(await anonymous.call_tool("list_directory", {})))
                self.assertEqual(sorted(p.name for p in root.iterdir()), ["alice", "anonymous", "bob"])
            self.assertNotIn("panicked", "".join(log))

    async def test_the_same_hostile_read_works_without_the_sandbox(self):
        # What the sandbox denies above is there to be read: the test can fail.
        with tempfile.TemporaryDirectory(dir=host_tmp()) as base:
            base = Path(base)
            root = base / "sessions"
            functions = tools_dir(base)
            args = ("--workers", "1", "serve", "--http", "127.0.0.1:0", "--sessions-root", str(root))
            async with http_server(*args, functions=functions) as (_, url):
                async with client(url, "alice") as alice, client(url, "bob") as bob:
                    ok(await bob.call_tool("save_file", {"path": "bob.txt", "content": "bob's file"}))
                    theirs = root.resolve() / "bob" / "code_workspace" / "bob.txt"
                    self.assertEqual(ok(await alice.call_tool("read_path", {"path": str(theirs)})), "bob's file")
                    self.assertIn("bob", json.loads(ok(await alice.call_tool("list_path", {"path": str(root)}))))


if __name__ == "__main__":
    unittest.main()
