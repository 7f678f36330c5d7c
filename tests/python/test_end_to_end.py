"""The shim as the supervisor runs it: `python3 -I toolpool_boot.py '<config>'` over pipes,
with this test playing the supervisor. Functions: tests/python/e2e_project."""

import json
import marshal
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import support
from toolpool_shim import codec, frames, results

MAX_FRAME = 1 << 20
E2E_TOOLS = os.path.join(support.E2E_FUNCTIONS, "e2e_tools.py")


class Guardian:
    """One guardian + worker, started the way the supervisor starts them."""

    def __init__(self, functions_dir: str = support.E2E_FUNCTIONS, expect_hello: bool = True):
        self._tmp = tempfile.TemporaryDirectory()
        session_dir = os.path.join(self._tmp.name, "session")
        self.workspace = os.path.join(session_dir, "code_workspace")
        os.makedirs(self.workspace)
        self.dump_in, dump_out = os.pipe()
        config = {
            "protocol": 7,
            "functions_dir": functions_dir,
            "session_dir": session_dir,
            "workspace": self.workspace,
            "session_id": "e2e",
            "dump_fd": dump_out,
            "max_frame": MAX_FRAME,
            "extra_sys_path": [],
        }
        self.process = subprocess.Popen(
            [sys.executable, "-I", support.BOOT_SCRIPT, json.dumps(config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(dump_out,), cwd=self.workspace, start_new_session=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
        )
        os.close(dump_out)
        self.replies = queue.SimpleQueue()
        self.stderr = bytearray()
        self._threads = [
            threading.Thread(target=self._read_frames, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        self._next_id = 1
        self.worker_pid = None
        if expect_hello:
            self.hello = self.receive()
            self.worker_pid = self.hello["pid"]

    def _read_frames(self):
        reader = frames.FrameReader(self.process.stdout.fileno(), MAX_FRAME)
        while (body := reader.read_frame()) is not None:
            message = codec.unpack(body)
            # Announcements of each import: the tests here look at the answers.
            if message.get("t") != "importing":
                self.replies.put(message)
        self.replies.put(None)  # end of stdout: the worker is gone

    def _read_stderr(self):
        while chunk := self.process.stderr.read1(65536):
            self.stderr += chunk

    def send(self, message: dict) -> None:
        frames.write_frame(self.process.stdin.fileno(), codec.pack(message), MAX_FRAME)

    def receive(self, timeout: float = 10):
        return self.replies.get(timeout=timeout)

    def request(self, kind: str, **fields) -> dict:
        request_id, self._next_id = self._next_id, self._next_id + 1
        self.send({"t": kind, "id": request_id, **fields})
        reply = self.receive()
        assert reply is not None and reply["id"] == request_id, reply
        if "value_json" in reply:  # results travel as JSON text
            reply["value"] = json.loads(reply.pop("value_json"))
        if "value_marshal" in reply:  # or as one marshal blob (the supervisor decodes it)
            reply["value"] = results.to_jsonable(marshal.loads(reply.pop("value_marshal")))
        return reply

    def invoke(self, name: str, args: dict, context: dict | None = None) -> dict:
        return self.request("invoke", name=name, args_marshal=marshal.dumps(args, 4), context_json=json.dumps(
            context or {"session_id": "e2e", "node_id": None, "vars": {}}))

    def read_dump(self, wanted: str, timeout: float = 5) -> str:
        """What faulthandler has written to the dump pipe, once it contains `wanted`."""
        text = b""
        deadline = time.monotonic() + timeout
        while wanted.encode() not in text and time.monotonic() < deadline:
            if select.select([self.dump_in], [], [], 0.1)[0]:
                text += os.read(self.dump_in, 65536)
        return text.decode("utf-8", "replace")

    def wait(self, timeout: float = 5) -> int:
        return self.process.wait(timeout)

    def close(self) -> None:
        for group in (self.worker_pid, self.process.pid):
            if group:
                try:
                    os.killpg(group, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.process.wait(5)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            try:
                stream.close()
            except BrokenPipeError:
                pass
        os.close(self.dump_in)
        self._tmp.cleanup()


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_until_gone(pid: int, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not _alive(pid)


def _line_of(marker: str) -> int:
    with open(E2E_TOOLS, encoding="utf-8") as source:
        return next(number for number, line in enumerate(source, start=1) if marker in line)


class EndToEnd(unittest.TestCase):
    def setUp(self):
        self.guardian = Guardian()
        self.addCleanup(self.guardian.close)

    def test_hello_names_the_worker_and_its_python(self):
        hello = self.guardian.hello
        self.assertEqual(set(hello), {"t", "protocol", "pid", "python", "codec", "executable"})
        self.assertEqual((hello["t"], hello["protocol"]), ("hello", 7))
        self.assertEqual(hello["python"], sys.version.split()[0])
        self.assertEqual(hello["codec"], codec.NAME)
        self.assertEqual(os.path.realpath(hello["executable"]), os.path.realpath(sys.executable))
        self.assertNotEqual(hello["pid"], self.guardian.process.pid)
        self.assertEqual(os.getpgid(hello["pid"]), hello["pid"], "the worker leads a process group of its own")
        self.assertEqual(os.getpgid(self.guardian.process.pid), self.guardian.process.pid)

    def test_catalog_lists_the_tools_and_the_module_that_failed(self):
        reply = self.guardian.request("catalog")
        self.assertTrue(reply["ok"], reply)
        functions = {entry["name"]: entry for entry in reply["value"]["functions"]}
        self.assertEqual(sorted(functions), [
            "big_text", "exit_now", "greet", "nap", "noisy", "show_context", "spawn_sleeper",
        ])
        self.assertEqual(functions["greet"]["parameters"], {
            "type": "object",
            "properties": {"name": {"type": "string", "description": "Who to greet"}},
            "required": ["name"],
            "additionalProperties": False,
        })
        self.assertEqual(reply["value"]["errors"], [{
            "module": "failing_import", "file": "failing_import.py",
            "error": "RuntimeError: this module refuses to load",
        }])

    def test_invoke_answers_with_the_result(self):
        reply = self.guardian.invoke("greet", {"name": "Ann"})
        self.assertEqual(reply, {"t": "reply", "id": reply["id"], "ok": True, "value": "hello, Ann"})

    def test_what_a_tool_prints_goes_to_stderr_not_into_the_frames(self):
        reply = self.guardian.invoke("noisy", {"count": 300})
        self.assertEqual((reply["ok"], reply["value"]), (True, 300))
        self.assertEqual(self.guardian.invoke("greet", {"name": "B"})["value"], "hello, B")
        deadline = time.monotonic() + 5
        while b"a child process writing" not in self.guardian.stderr and time.monotonic() < deadline:
            time.sleep(0.02)
        for text in (b"print to stdout", b"sys.stdout.write", b"os.write to fd 1", b"a child process writing"):
            self.assertIn(text, self.guardian.stderr)

    def test_context_is_injected_from_the_session_and_the_request(self):
        reply = self.guardian.invoke("show_context", {}, {"session_id": "s9", "node_id": "n1", "vars": {"k": "v"}})
        self.assertEqual(reply["value"], {
            "python_workspace_root": ["PosixPath", self.guardian.workspace],
            "graph_directory": ["PosixPath", os.path.dirname(self.guardian.workspace)],
            "session_id": ["str", "s9"],
            "node_id": ["str", "n1"],
            "vars": ["dict", "{'k': 'v'}"],
            "attachment_store": ["AttachmentStore", f"<toolpool AttachmentStore proxy for {self.guardian.workspace}/attachments>"],
            "human_prompt": ["NoneType", "None"],
            "progress": ["ProgressReporter", "<toolpool progress reporter (nobody listening)>"],
            "traceparent": ["NoneType", "None"],
            "tracestate": ["NoneType", "None"],
        })

    def test_unknown_functions_and_bad_arguments_are_error_replies(self):
        reply = self.guardian.invoke("gret", {})
        self.assertEqual(reply["error"]["type"], "NotFound")
        self.assertEqual(reply["error"]["message"], (
            f"function 'gret' not found under function directory {support.E2E_FUNCTIONS} (did you mean 'greet'?); "
            "modules that failed to import: failing_import (RuntimeError: this module refuses to load)"
        ))
        reply = self.guardian.invoke("greet", {"name": "x", "_context": {}})
        self.assertEqual(reply["error"]["type"], "InvalidArguments")

    def test_a_result_over_the_frame_limit_is_an_error_and_the_worker_goes_on(self):
        reply = self.guardian.invoke("big_text", {"size": 2 * MAX_FRAME})
        self.assertEqual(reply["error"], {
            "type": "ResultTooLarge",
            "message": "result is 2.0 MB encoded, over the 1.0 MB frame limit",
            "traceback": None,
        })
        self.assertEqual(self.guardian.invoke("greet", {"name": "C"})["value"], "hello, C")

    def test_sigusr1_dumps_the_stack_of_a_sleeping_tool_then_stdin_eof_ends_it(self):
        self.guardian.send({"t": "invoke", "id": 99, "name": "nap", "args": {"seconds": 60},
                            "context_json": json.dumps({"session_id": "e2e", "node_id": None, "vars": {}})})
        where = f'File "{E2E_TOOLS}", line {_line_of("NAP_LINE")} in nap'
        dump = ""
        deadline = time.monotonic() + 10
        while where not in dump and time.monotonic() < deadline:
            time.sleep(0.1)  # the call may not have started yet: ask again
            os.kill(self.guardian.worker_pid, signal.SIGUSR1)
            dump += self.guardian.read_dump(where, timeout=0.5)
        self.assertIn(where, dump)
        self.assertTrue(self.guardian.replies.empty(), "the dump does not disturb the call")

        started = time.monotonic()
        self.guardian.process.stdin.close()
        self.assertEqual(self.guardian.wait(), 0, "the worker exits 0 at stdin EOF and the guardian mirrors it")
        self.assertLess(time.monotonic() - started, 5)
        self.assertIsNone(self.guardian.receive(), "stdout reaches EOF, with no reply to the call")
        self.assertFalse(_alive(self.guardian.worker_pid))

    def test_the_tools_children_die_with_the_worker(self):
        sleeper = self.guardian.invoke("spawn_sleeper", {})["value"]
        self.assertTrue(_alive(sleeper))
        self.guardian.process.stdin.close()
        self.assertEqual(self.guardian.wait(), 0)
        self.assertTrue(_wait_until_gone(sleeper), "the guardian kills the worker's process group")

    def test_killing_the_worker_group_shows_as_sigkill_on_the_guardian(self):
        os.killpg(self.guardian.worker_pid, signal.SIGKILL)
        self.assertEqual(self.guardian.wait(), -signal.SIGKILL)
        self.assertIsNone(self.guardian.receive())

    def test_the_workers_exit_code_is_the_guardians(self):
        self.guardian.send({"t": "invoke", "id": 50, "name": "exit_now", "args": {"code": 3},
                            "context_json": json.dumps({"session_id": "e2e", "node_id": None, "vars": {}})})
        self.assertEqual(self.guardian.wait(), 3)
        self.assertIsNone(self.guardian.receive())

    def test_sigterm_to_the_guardian_kills_the_worker_and_its_children(self):
        sleeper = self.guardian.invoke("spawn_sleeper", {})["value"]
        self.guardian.process.send_signal(signal.SIGTERM)
        self.assertEqual(self.guardian.wait(), -signal.SIGKILL, "mirrors the SIGKILL it gave the worker")
        self.assertTrue(_wait_until_gone(self.guardian.worker_pid))
        self.assertTrue(_wait_until_gone(sleeper))

    def test_the_worker_dies_with_its_guardian(self):
        self.guardian.process.send_signal(signal.SIGKILL)
        self.assertEqual(self.guardian.wait(), -signal.SIGKILL)
        self.assertTrue(_wait_until_gone(self.guardian.worker_pid), "PR_SET_PDEATHSIG kills the worker")

    def test_a_frame_over_the_limit_from_the_supervisor_ends_the_worker_with_code_2(self):
        self.guardian.process.stdin.write((MAX_FRAME + 1).to_bytes(4, "big"))
        self.guardian.process.stdin.flush()
        self.assertEqual(self.guardian.wait(), 2)
        deadline = time.monotonic() + 5
        while b"bad frame" not in self.guardian.stderr and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertIn(b"toolpool worker: bad frame from the supervisor: FrameTooLarge", self.guardian.stderr)

    def test_a_worker_that_cannot_start_exits_1_and_says_why_on_stderr(self):
        broken = Guardian("/no/such/functions/dir", expect_hello=False)
        self.addCleanup(broken.close)
        self.assertEqual(broken.wait(), 1)
        self.assertIsNone(broken.receive(), "no hello: stdout ends")
        deadline = time.monotonic() + 5
        while b"does not exist" not in broken.stderr and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertIn(b"FileNotFoundError: the functions directory /no/such/functions/dir does not exist", broken.stderr)

    def test_a_message_that_is_not_a_map_ends_the_worker_with_code_2(self):
        frames.write_frame(self.guardian.process.stdin.fileno(), codec.pack([1, 2]), MAX_FRAME)
        self.assertEqual(self.guardian.wait(), 2)


if __name__ == "__main__":
    unittest.main()
