"""`--task-after`: on 2026-07-28 a call from a client that declares the tasks
extension and runs past the limit is answered with a task; `tasks/get`
reports it and its result; `tasks/cancel` kills its worker and everything it
started; a finished task is kept `--task-keep` seconds, then `tasks/get` says
it is gone. Over stdio and streamable HTTP.

None of the client libraries installed drives tasks (the Python `mcp` client
and fastmcp's have no tasks API without the separate `fastmcp-tasks` package,
the TypeScript SDK 1.32 speaks up to 2025-11-25), so this speaks JSON-RPC
itself: on the server's stdio, and over HTTP with http.client."""

import http.client
import json
import re
import signal
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from urllib.parse import urlsplit

from support import BIN, alive, base_args, parent_of

TASKS = "io.modelcontextprotocol/tasks"


def meta(tasks=True):
    capabilities = {"extensions": {TASKS: {}}} if tasks else {}
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }


class Server:
    """`toolpool serve` on stdio, spoken to line by line."""

    def __init__(self, tmp, *args):
        self.stderr = open(Path(tmp) / "stderr.txt", "w")
        self.process = subprocess.Popen(
            [BIN, *base_args(str(Path(tmp) / "session"), "--workers", "2", "serve", *args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
        )
        self.next_id = 0

    def request(self, method, params):
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        while True:
            reply = json.loads(self.process.stdout.readline())
            if reply.get("id") == self.next_id:
                return reply

    def call(self, name, arguments, tasks=True):
        return self.request("tools/call", {"name": name, "arguments": arguments, "_meta": meta(tasks)})

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.process.stdout.close()
        self.stderr.close()


class HttpServer(Server):
    """`toolpool serve --http` spoken to with http.client: each request a POST
    of its own (2026-07-28 has no sessions), its answer read from the JSON or
    SSE body."""

    # Sent with every request (a bearer token, say).
    extra_headers: dict = {}

    def __init__(self, tmp, *args):
        self.stderr_path = Path(tmp) / "stderr.txt"
        self.stderr = open(self.stderr_path, "w")
        self.process = subprocess.Popen(
            [BIN, *base_args(str(Path(tmp) / "session"), "--workers", "2", "serve", "--http", "127.0.0.1:0", *args)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.stderr,
        )
        url = wait_for(lambda: (m := re.search(r"at (http://\S+)", self.stderr_path.read_text())) and m.group(1))
        self.url = urlsplit(url)
        self.next_id = 0

    def request(self, method, params, name=...):
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": method,
        }
        # SEP-2243: the tool's name, or the task's id, in a header too (unless
        # the test says which, or None for none).
        if name is ...:
            name = params.get("name", params.get("taskId"))
        if name is not None:
            headers["Mcp-Name"] = name
        headers.update(self.extra_headers)
        connection = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=60)
        try:
            connection.request("POST", self.url.path, json.dumps(message), headers)
            response = connection.getresponse()
            body = response.read().decode()
        finally:
            connection.close()
        if response.getheader("Content-Type", "").startswith("text/event-stream"):
            replies = [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:") and line[5:].strip()]
        else:
            replies = [json.loads(body)]
        for reply in replies:
            if reply.get("id") == self.next_id:
                return reply
        raise AssertionError(f"no answer to {method} in HTTP {response.status}: {body!r}")

    def close(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)
        self.stderr.close()


def wait_for(check, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


class Tasks(unittest.TestCase):
    """Over stdio; `HttpTasks` runs the same over HTTP."""

    transport = Server

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.server = self.transport(self._tmp.name, "--task-after", "0.5", "--task-keep", "3")

    def tearDown(self):
        self.server.close()
        self._tmp.cleanup()

    def get(self, task_id):
        return self.server.request("tasks/get", {"taskId": task_id, "_meta": meta()})

    def test_a_long_call_becomes_a_task_with_its_result(self):
        quick = self.server.call("add", {"a": 2, "b": 3})["result"]
        self.assertEqual(quick["resultType"], "complete")
        self.assertEqual(quick["content"][0]["text"], "5")

        answer = self.server.call("slow_then_answer", {"seconds": 2, "token": "t1"})["result"]
        self.assertEqual(answer["resultType"], "task", answer)
        task_id = answer["taskId"]
        self.assertEqual(answer["status"], "working")
        self.assertEqual(self.get(task_id)["result"]["status"], "working")
        done = wait_for(lambda: (r := self.get(task_id)["result"])["status"] == "completed" and r)
        self.assertEqual(done["result"]["content"][0]["text"], "t1")
        self.assertEqual(done["ttlMs"], 3_000)

        # Without the extension the same call holds its request to the end.
        plain = self.server.call("slow_then_answer", {"seconds": 1, "token": "t2"}, tasks=False)["result"]
        self.assertEqual(plain["content"][0]["text"], "t2")

        unknown = self.get("no-such-task")
        self.assertIn("no task 'no-such-task'", unknown["error"]["message"])

        # Kept --task-keep (3 s) after it finished, then forgotten, and said so.
        gone = wait_for(lambda: "error" in (r := self.get(task_id)) and r, 30)
        self.assertEqual(
            gone["error"]["message"],
            f"no task '{task_id}': none was made here, or it finished more than 3 s ago and was forgotten (--task-keep)",
        )

    def test_cancelling_a_task_kills_its_worker(self):
        pid_file = Path(self._tmp.name) / "grandchild"
        answer = self.server.call("spawn_grandchild", {"pid_file": str(pid_file)})["result"]
        self.assertEqual(answer["resultType"], "task", answer)
        grandchild = wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() and int(pid_file.read_text()))
        worker = parent_of(grandchild)
        cancelled = self.server.request("tasks/cancel", {"taskId": answer["taskId"], "_meta": meta()})
        self.assertNotIn("error", cancelled)
        wait_for(lambda: not alive(worker), 10)
        wait_for(lambda: not alive(grandchild), 10)
        self.assertEqual(self.get(answer["taskId"])["result"]["status"], "cancelled")
        self.assertEqual(self.server.call("add", {"a": 1, "b": 1})["result"]["content"][0]["text"], "2")


class HttpTasks(Tasks):
    transport = HttpServer

    def test_a_task_request_without_mcp_name_is_served_and_one_naming_another_task_refused(self):
        # The Python `mcp` client (under fastmcp-tasks) sends no Mcp-Name on
        # task requests; the front end takes it from the body. One that names
        # another task is still refused (rmcp, SEP-2243).
        answer = self.server.call("slow_then_answer", {"seconds": 2, "token": "t3"})["result"]
        task_id = answer["taskId"]
        params = {"taskId": task_id, "_meta": meta()}
        unnamed = self.server.request("tasks/get", params, name=None)
        self.assertEqual(unnamed["result"]["taskId"], task_id, unnamed)
        wrong = self.server.request("tasks/get", params, name="another-task")
        self.assertEqual(
            wrong["error"]["message"], f"Mcp-Name header `another-task` does not match body value `{task_id}`"
        )
        cancelled = self.server.request("tasks/cancel", params, name=None)
        self.assertNotIn("error", cancelled)
        self.assertEqual(self.get(task_id)["result"]["status"], "cancelled")


if __name__ == "__main__":
    unittest.main()
