"""Context services (proxies.py, standins.py): the proxies' callbacks, the records they return, the
exceptions failed callbacks raise, the compatibility modules, and the bundled
install_python_packages' checks."""

import contextlib
import importlib.util
import io
import os
import subprocess
import tempfile
import unittest
from unittest import mock

import support
from toolpool_shim import proxies, records, standins
from toolpool_shim.channel import CallbackError
from toolpool_shim.invoke import Invoker

RECORD = {
    "ref": {"attachment_id": "abc", "mime_type": "text/plain", "name": "a.txt", "size": 3,
            "sha256": "00", "local_path": "/ws/attachments/abc/a.txt"},
    "kind": "file",
    "description": "d",
    "extra": {"k": 1},
}


class FakeSupervisor:
    """A transport that records each callback and answers from a table (or raises CallbackError)."""

    def __init__(self, answers=None):
        self.calls = []
        self.answers = answers or {}

    def __call__(self, method, params):
        self.calls.append((method, params))
        answer = self.answers.get(method)
        if isinstance(answer, dict) and "error" in answer:
            raise CallbackError(answer["error"])
        return answer


class AttachmentStoreProxy(unittest.TestCase):
    def setUp(self):
        self.supervisor = FakeSupervisor({
            proxies.REGISTER_FILE: RECORD,
            proxies.REGISTER_BYTES: RECORD,
            proxies.GET: RECORD,
            proxies.LIST: [RECORD, {**RECORD, "ref": {**RECORD["ref"], "attachment_id": "def"}, "kind": "image"}],
            proxies.EXPORT_MANIFEST: {"abc": RECORD},
        })
        self.store = standins.AttachmentStore("/ws", self.supervisor)

    def test_register_file_sends_an_absolute_path_and_a_mime_guess(self):
        record = self.store.register_file("notes/a.md", kind=records.MessageBlockType.IMAGE,
                                          extra={"when": __import__("datetime").date(2024, 5, 1)})
        method, params = self.supervisor.calls[-1]
        self.assertEqual(method, "attachments.register_file")
        self.assertEqual(params["path"], os.path.join(os.getcwd(), "notes/a.md"))
        self.assertEqual(params["mime_type"], "text/markdown")
        self.assertEqual(params["kind"], "image")
        self.assertEqual(params["extra"], {"when": "2024-05-01"})
        self.assertEqual((params["copy_file"], params["persist"], params["deduplicate"]), (True, True, False))
        self.assertIsInstance(record, records.AttachmentRecord)
        self.assertEqual((record.ref.attachment_id, record.ref.size, record.kind), ("abc", 3, "file"))
        self.assertEqual(record.to_dict(), {**RECORD, "ref": {**RECORD["ref"]}})

    def test_register_bytes_sends_base64_and_a_file_name(self):
        self.store.register_bytes(b"\x00\xffdata", mime_type="image/png")
        params = self.supervisor.calls[-1][1]
        self.assertEqual(params["data_base64"], "AP9kYXRh")
        self.assertEqual(params["display_name"], "attachment.png")
        self.store.register_bytes(b"x", name="report.csv")
        params = self.supervisor.calls[-1][1]
        self.assertEqual((params["display_name"], params["mime_type"]), ("report.csv", "text/csv"))
        with self.assertRaises(TypeError):
            self.store.register_bytes("not bytes")

    def test_get_list_and_export(self):
        self.assertEqual(self.store.get("abc").description, "d")
        self.assertIsNone(self.store.get(42))
        self.supervisor.answers[proxies.GET] = None
        self.assertIsNone(self.store.get("nope"))
        listed = self.store.list_records()
        self.assertEqual(list(listed), ["abc", "def"])
        self.assertIs(listed["def"].kind, records.MessageBlockType.IMAGE)
        self.assertEqual(self.store.export_manifest(), {"abc": RECORD})
        block = listed["abc"].as_message_block()
        self.assertEqual(block.to_dict()["attachment"]["name"], "a.txt")
        with self.assertRaises(KeyError):
            self.store.to_message_block("nope")

    def test_failed_callbacks_raise_the_named_exception(self):
        for type_name, expected in [
            ("FileNotFoundError", FileNotFoundError),
            ("PermissionError", PermissionError),
            ("ValueError", ValueError),
            ("HumanPromptUnavailable", proxies.HumanPromptUnavailable),
            ("SomethingElse", proxies.ContextServiceError),
            ("UnicodeDecodeError", proxies.ContextServiceError),  # needs other constructor arguments
            ("SystemExit", proxies.ContextServiceError),  # not an Exception: never raised into a tool
        ]:
            self.supervisor.answers[proxies.GET] = {"error": {"type": type_name, "message": "why"}}
            with self.assertRaises(expected) as raised:
                self.store.get("abc")
            self.assertIn("why", str(raised.exception))


class HumanPromptProxy(unittest.TestCase):
    def test_request_sends_the_question_and_merges_metadata(self):
        supervisor = FakeSupervisor({proxies.HUMAN_PROMPT: {"text": "yes\udcff", "metadata": {"via": "tty"}}})
        prompt = standins.HumanPromptService("s1", "node-a", supervisor)
        result = prompt.request(None, "Decide.", inputs={"options": [1, 2]}, metadata={"source": "t"})
        method, params = supervisor.calls[-1]
        self.assertEqual(method, "human_prompt.request")
        self.assertEqual(params["node_id"], "node-a")
        self.assertEqual(params["inputs"], '{\n  "options": [\n    1,\n    2\n  ]\n}')
        self.assertEqual(params["metadata"], {"source": "t", "session_id": "s1"})
        self.assertEqual(result.text, "yes")
        self.assertEqual(result.metadata, {"via": "tty", "source": "t", "session_id": "s1"})
        self.assertEqual(result.as_message_content()[0].text, "yes")
        standins.HumanPromptService(None, None, supervisor).request(None, "x")
        self.assertEqual(supervisor.calls[-1][1]["node_id"], "model_function_calling")

    def test_request_many_sends_every_question_and_answers_in_order(self):
        supervisor = FakeSupervisor({proxies.HUMAN_PROMPT_MANY: [{"text": "one"}, {"text": "two", "metadata": {"k": 1}}]})
        prompt = standins.HumanPromptService("s1", "node-a", supervisor)
        first, second = prompt.request_many([
            {"task_description": "First?"},
            {"task_description": "Second?", "node_id": "node-b", "inputs": {"x": 1}, "metadata": {"m": True}},
        ])
        method, params = supervisor.calls[-1]
        self.assertEqual(method, "human_prompt.request_many")
        self.assertEqual([q["task_description"] for q in params["prompts"]], ["First?", "Second?"])
        self.assertEqual([q["node_id"] for q in params["prompts"]], ["node-a", "node-b"])
        self.assertEqual(params["prompts"][1]["metadata"], {"m": True, "session_id": "s1"})
        self.assertEqual((first.text, second.text), ("one", "two"))
        self.assertEqual(second.metadata, {"k": 1, "m": True, "session_id": "s1"})

    def test_request_many_refuses_what_is_not_a_list_of_questions(self):
        prompt = standins.HumanPromptService("s", None, FakeSupervisor())
        for bad in ([], "First?", [{"inputs": "no task"}], [{"task_description": "x", "colour": "red"}], ["x"]):
            with self.assertRaises(TypeError):
                prompt.request_many(bad)

    def test_request_many_with_a_missing_answer_raises(self):
        supervisor = FakeSupervisor({proxies.HUMAN_PROMPT_MANY: [{"text": "one"}]})
        with self.assertRaises(proxies.HumanPromptError):
            standins.HumanPromptService("s", None, supervisor).request_many(
                [{"task_description": "a"}, {"task_description": "b"}])

    def test_a_declined_prompt_raises(self):
        supervisor = FakeSupervisor({proxies.HUMAN_PROMPT: {"error": {"type": "HumanPromptDeclined", "message": "no"}}})
        with self.assertRaises(proxies.HumanPromptDeclined):
            standins.HumanPromptService("s", None, supervisor).request("n", "x")

    def test_invoker_builds_the_proxies_on_the_given_transport(self):
        supervisor = FakeSupervisor({proxies.HUMAN_PROMPT: {"text": "hi"}})

        def asks(_context=None):
            return _context["human_prompt"].request(_context["node_id"], "Say hi.").text

        toolset = support.toolset_of(asks)
        config = {"workspace": "/ws", "session_dir": "/s", "session_id": "s", "packages_dir": "/s/site-packages"}
        invoker = Invoker(toolset, config, supervisor)
        value, blocks = invoker.invoke("asks", {}, {"node_id": "n1", "human_prompt": True})
        self.assertEqual((value.data(), blocks), ("hi", None))
        self.assertEqual(supervisor.calls[-1][1]["node_id"], "n1")
        context = invoker._context({})
        self.assertIsNone(context["human_prompt"])
        self.assertEqual(str(context["python_packages_dir"]), "/s/site-packages")


class CompatibilityModules(unittest.TestCase):
    def test_the_original_import_paths_give_the_proxies_and_records(self):
        from entity.messages import AttachmentRef, MessageBlock, MessageBlockType
        from utils.attachments import AttachmentRecord, AttachmentStore
        from utils.human_prompt import HumanPromptService, PromptResult

        self.assertIs(AttachmentStore, standins.AttachmentStore)
        self.assertIs(AttachmentRecord, records.AttachmentRecord)
        self.assertIs(HumanPromptService, standins.HumanPromptService)
        self.assertIs(PromptResult, records.PromptResult)
        self.assertIs(MessageBlock, records.MessageBlock)
        self.assertIs(MessageBlockType.from_mime_type("video/mp4"), MessageBlockType.VIDEO)
        self.assertEqual(AttachmentRef("x", data_uri="d").to_dict(include_data=False),
                         {"attachment_id": "x", "data_uri": "[omitted]"})

    def test_workspace_scanner(self):
        from utils.workspace_scanner import iter_workspace_entries

        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "b", "c"))
            os.makedirs(os.path.join(root, ".hidden"))
            with open(os.path.join(root, "b", "c", "f.txt"), "w") as f:
                f.write("12345")
            entries = list(iter_workspace_entries(root, max_depth=3))
            self.assertEqual([(e.path, e.type, e.size, e.depth) for e in entries],
                             [("b", "directory", None, 1), ("b/c", "directory", None, 2),
                              ("b/c/f.txt", "file", 5, 3)])
            self.assertEqual(len(list(iter_workspace_entries(root, recursive=False))), 1)


def _load_bundled_packages_tool():
    path = os.path.join(support.REPO, "functions", "function_calling", "packages.py")
    spec = importlib.util.spec_from_file_location("bundled_packages_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class InstallPythonPackages(unittest.TestCase):
    def setUp(self):
        self.tool = _load_bundled_packages_tool()
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.context = {"python_packages_dir": os.path.join(self.tmp.name, "site-packages")}

    def test_bad_specs_are_refused_before_pip_runs(self):
        with mock.patch.object(subprocess, "Popen") as popen:
            for packages in (["--index-url", "x"], ["ok", "-e."], ["a b"], ["x;y"], ["x|y"], ["./x"],
                             ["https://x/y.whl"], ["name@git+https://x"], "requests", [], [3], ["x" * 201]):
                with self.assertRaises((ValueError, TypeError), msg=repr(packages)):
                    self.tool.install_python_packages(packages, _context=self.context)
            popen.assert_not_called()

    def test_good_specs_make_one_pip_command_into_the_session_directory(self):
        fake = mock.MagicMock()
        fake.communicate.return_value = ("Successfully installed x", "")
        fake.returncode = 0
        with mock.patch.object(subprocess, "Popen", return_value=fake) as popen:
            result = self.tool.install_python_packages(
                ["numpy==1.26.4", "rich[jupyter]>=13,<14", "pkg~=1.0"], upgrade=True, _context=self.context)
        command = popen.call_args.args[0]
        target = self.context["python_packages_dir"]
        self.assertEqual(command[1:5], ["-m", "pip", "install", "--target"])
        self.assertEqual(command[5], target)
        self.assertEqual(command[-4:], ["--", "numpy==1.26.4", "rich[jupyter]>=13,<14", "pkg~=1.0"])
        self.assertIn("--upgrade", command)
        self.assertEqual((result["ok"], result["stdout"], result["target"]), (True, "Successfully installed x", target))

    def test_a_pip_that_runs_too_long_is_stopped(self):
        fake = mock.MagicMock()
        fake.communicate.side_effect = [subprocess.TimeoutExpired("pip", 1), ("partial output", "")]
        with mock.patch.object(subprocess, "Popen", return_value=fake):
            with self.assertRaises(TimeoutError) as raised:
                self.tool.install_python_packages(["x"], _context=self.context)
        fake.kill.assert_called_once()
        self.assertIn("partial output", str(raised.exception))


if __name__ == "__main__":
    with contextlib.redirect_stderr(io.StringIO()):
        unittest.main()
