"""Three `toolpool serve --http` replicas behind a real HAProxy balancing
round-robin, with no affinity at all: the state of a call that waits for its
client (a suspended question's `requestState`, a task's id) lives in the
replica that made it, its id names that replica (sealed with
`--cluster-secret`), and a replica that gets a request naming another's
forwards it there. Driven by hand on protocol 2026-07-28 (each request a
POST of its own):
- a tool that asks two questions in turn, again and again: each retry lands
  on whichever replica the balancer picks, and reaches its call;
- tasks created on one replica, polled and cancelled through the balancer;
- a replica killed with SIGKILL: its tasks and questions are answered with a
  retryable error naming them, and the others' keep working.

Needs `haproxy` on PATH (scripts/test-deps installs it)."""

import base64
import contextlib
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from urllib.parse import urlsplit

from support import BIN, REPO
from test_load_balancer import HAPROXY, free_port, haproxy_config, status_of
from test_tasks import HttpServer, wait_for
from test_tasks import meta as tasks_meta

CONFORMANCE = REPO / "tests" / "fixtures" / "conformance"
SECRET = "cluster-secret-0123456789abcdef0123456789"
TWO_QUESTIONS = "test_input_required_result_multi_round"


class Through(HttpServer):
    """The 2026-07-28 client of tests/python_mcp/test_tasks.py, speaking to
    the balancer."""

    def __init__(self, url: str):
        self.url = urlsplit(url)
        self.next_id = 0


def replica_of(state_or_id: str) -> str:
    """The address an id's tag names (instance, MAC, then the address)."""
    tag = state_or_id.split("~", 1)[1]
    return base64.urlsafe_b64decode(tag + "=" * (-len(tag) % 4))[24:].decode()


@contextlib.contextmanager
def cluster():
    """Three replicas and HAProxy: yields (client, {name: (port, process)})."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        secret = tmp / "cluster-secret"
        secret.write_text(SECRET + "\n")
        replicas, logs = {}, []
        try:
            for name in ("r1", "r2", "r3"):
                port = free_port()
                log = open(tmp / f"{name}.log", "w")
                logs.append(log)
                process = subprocess.Popen(
                    [BIN, "--functions-dir", str(CONFORMANCE), "--session-dir", str(tmp / name / "default"),
                     "--workers", "2", "serve", "--http", f"127.0.0.1:{port}", "--sessions-root", str(tmp / name),
                     "--task-after", "1", "--cluster-secret", str(secret), "--advertise", f"127.0.0.1:{port}"],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
                replicas[name] = (port, process)
            for name, (port, process) in replicas.items():
                wait_for(lambda: process.poll() is not None or status_of(port, "/readyz") == 200)
                assert process.poll() is None, (tmp / f"{name}.log").read_text()
            lb_port = free_port()
            config = tmp / "haproxy.cfg"
            config.write_text(haproxy_config(lb_port, {n: p for n, (p, _) in replicas.items()}, sticky=False))
            proxy = subprocess.Popen([HAPROXY, "-db", "-f", str(config)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                wait_for(lambda: status_of(lb_port, "/readyz") == 200)
                time.sleep(0.6)  # every server up (rise 2 at 200 ms)
                yield Through(f"http://127.0.0.1:{lb_port}/mcp"), replicas
            finally:
                proxy.terminate()
                proxy.wait(timeout=10)
        finally:
            for _, process in replicas.values():
                if process.poll() is None:
                    process.kill()
                process.wait(timeout=30)
            for log in logs:
                log.close()


def meta(tasks: bool = True) -> dict:
    """A 2026-07-28 request's `_meta`: a client that can ask its user, and
    takes tasks when `tasks`."""
    sent = tasks_meta(tasks)
    sent["io.modelcontextprotocol/clientCapabilities"]["elicitation"] = {"form": {}}
    return sent


def answer(key: str, field: str, value: str) -> dict:
    return {key: {"action": "accept", "content": {field: value}}}


@unittest.skipIf(HAPROXY is None, "haproxy is not installed (scripts/test-deps installs it)")
class Replicas(unittest.TestCase):
    def two_questions(self, client: Through, name: str) -> tuple[str, set]:
        """The tool's two questions answered, each retry through the
        balancer; its answer, and the replicas the states named."""
        call = lambda **more: client.request(
            "tools/call", {"name": TWO_QUESTIONS, "arguments": {}, "_meta": meta(tasks=False), **more})
        first = call()["result"]
        self.assertEqual(first["resultType"], "input_required", first)
        second = call(inputResponses=answer("step1", "name", name), requestState=first["requestState"])["result"]
        self.assertEqual(second["resultType"], "input_required", second)
        self.assertIn("step2", second["inputRequests"])
        self.assertNotEqual(second["requestState"], first["requestState"])
        done = call(inputResponses=answer("step2", "color", "blue"), requestState=second["requestState"])
        self.assertEqual(done["result"]["content"][0]["text"], f"{name} likes blue", done)
        return name, {replica_of(first["requestState"]), replica_of(second["requestState"])}

    def test_questions_and_tasks_reach_their_replica_through_round_robin(self):
        with cluster() as (client, replicas):
            # Two questions in turn, six times: without routing, a retry
            # would reach the replica holding its call one time in three.
            held = set()
            for i in range(6):
                _, named = self.two_questions(client, f"user{i}")
                held |= named
                # Three requests a flow: one more, so that the next starts
                # on the next replica.
                self.assertIn("result", client.request("tools/list", {"_meta": meta()}))
            self.assertEqual(len(held), 3, "the questions were not held all round")

            # Tasks made round the replicas, polled through the balancer.
            get = lambda task: client.request("tasks/get", {"taskId": task, "_meta": meta()})
            tasks = {}
            for i in range(6):
                made = client.call("slow_compute", {"seconds": 1.5, "label": f"job{i}"})["result"]
                self.assertEqual(made["resultType"], "task", made)
                tasks[made["taskId"]] = f"job{i}"
            self.assertEqual(len({replica_of(t) for t in tasks}), 3)
            for task, label in tasks.items():
                done = wait_for(lambda: (r := get(task)["result"])["status"] == "completed" and r)
                self.assertIn(repr(label), done["result"]["content"][0]["text"])

            # A cancel through the balancer reaches the task's replica.
            long = client.call("slow_compute", {"seconds": 60, "label": "long"})["result"]["taskId"]
            self.assertEqual(get(long)["result"]["status"], "working")
            cancelled = client.request("tasks/cancel", {"taskId": long, "_meta": meta()})
            self.assertNotIn("error", cancelled)
            for _ in range(3):
                self.assertEqual(get(long)["result"]["status"], "cancelled")

            # A forged tag: the same answer as a task never made.
            forged = long.split("~")[0] + "~" + "A" * 40
            self.assertIn("error", get(forged))

    def test_a_2025_session_its_stream_and_its_questions_reach_their_replica(self):
        """An MCP session (2025-11-25) lives in the replica that answered its
        `initialize`: its id is tagged too, so its POSTs, its GET stream and
        the answers to the server's elicitation requests reach it."""
        import anyio
        import mcp_types as types
        from mcp import Client

        async def answer(context, params):
            wanted = params.requested_schema["properties"]
            return types.ElicitResult(action="accept", content={"name": "Ada"} if "name" in wanted else {"color": "blue"})

        async def session(url):
            async with Client(url, mode="legacy", elicitation_callback=answer) as c:
                for _ in range(4):
                    result = await c.call_tool(TWO_QUESTIONS, {})
                    self.assertEqual(result.content[0].text, "Ada likes blue")
                    self.assertIn(TWO_QUESTIONS, [t.name for t in (await c.list_tools()).tools])

        with cluster() as (client, _):
            url = f"http://{client.url.hostname}:{client.url.port}/mcp"
            for _ in range(3):  # a session opened on each replica in turn
                anyio.run(session, url)

    def test_a_killed_replicas_state_is_named_lost_and_the_others_go_on(self):
        with cluster() as (client, replicas):
            get = lambda task: client.request("tasks/get", {"taskId": task, "_meta": meta()})
            tasks = [client.call("slow_compute", {"seconds": 4, "label": f"job{i}"})["result"]["taskId"]
                     for i in range(6)]
            questions = []
            for _ in range(3):
                first = client.request("tools/call", {"name": TWO_QUESTIONS, "arguments": {},
                                                      "_meta": meta(tasks=False)})["result"]
                questions.append(first["requestState"])
            victim_port, victim = replicas["r2"]
            victim_address = f"127.0.0.1:{victim_port}"
            victim.kill()
            victim.wait()
            lost = [t for t in tasks if replica_of(t) == victim_address]
            kept = [t for t in tasks if replica_of(t) != victim_address]
            self.assertTrue(lost and kept)
            for task in lost:
                error = get(task)["error"]
                self.assertIn(f"the task {task} was held by the replica at {victim_address}, which is gone", error["message"])
                self.assertTrue(error["data"]["retryable"])
            for task in kept:
                done = wait_for(lambda: (r := get(task)["result"])["status"] == "completed" and r)
                self.assertEqual(done["status"], "completed")
            for state in questions:
                reply = client.request("tools/call", {
                    "name": TWO_QUESTIONS, "arguments": {}, "_meta": meta(tasks=False),
                    "inputResponses": answer("step1", "name", "Ada"), "requestState": state})
                if replica_of(state) == victim_address:
                    self.assertIn("the question (requestState)", reply["error"]["message"])
                    self.assertIn("which is gone", reply["error"]["message"])
                else:
                    self.assertEqual(reply["result"]["resultType"], "input_required", reply)
            # New calls go on on the two left.
            for _ in range(4):
                self.two_questions(client, "again")


if __name__ == "__main__":
    unittest.main()
