"""The bundled file tools (functions/function_calling/file.py) against a
process that swaps a workspace folder and a link to outside in a loop
(renameat2 RENAME_EXCHANGE), both with openat2 and with the fallback that
walks the path one O_NOFOLLOW component at a time: nothing outside is ever
read, written or deleted."""

import ctypes
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import unittest

import support  # noqa: F401  (puts the shim and the compat modules on sys.path)

FILE_TOOLS = os.path.join(support.REPO, "functions", "function_calling", "file.py")

RACER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b = (os.fsencode(p) for p in sys.argv[1:3])
deadline, swaps = time.monotonic() + 60, 0
print("racing", flush=True)
while swaps < 5_000_000 and time.monotonic() < deadline:
    if libc.renameat2(-100, a, -100, b, 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
        sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
    swaps += 1
"""


def load_file_tools():
    spec = importlib.util.spec_from_file_location("bundled_file_tools", FILE_TOOLS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def has_renameat2() -> bool:
    return hasattr(ctypes.CDLL(None), "renameat2")


@unittest.skipUnless(sys.platform.startswith("linux") and has_renameat2(), "needs Linux renameat2")
class SwappedFolder(unittest.TestCase):
    def race(self, use_openat2: bool) -> None:
        tools = load_file_tools()
        if not use_openat2:
            tools._openat2_works = False
        with tempfile.TemporaryDirectory() as tmp:
            workspace = os.path.join(tmp, "ws")
            outside = os.path.join(tmp, "outside")
            os.makedirs(os.path.join(workspace, "d"))
            os.makedirs(outside)
            with open(os.path.join(outside, "f.txt"), "w") as handle:
                handle.write("OUTSIDE")
            with open(os.path.join(outside, "keep.txt"), "w") as handle:
                handle.write("keep")
            with open(os.path.join(workspace, "d", "f.txt"), "w") as handle:
                handle.write("inside")
            with open(os.path.join(workspace, "d", "keep.txt"), "w") as handle:
                handle.write("keep")
            os.symlink(outside, os.path.join(workspace, "swap"))
            racer = subprocess.Popen(
                [sys.executable, "-c", RACER, os.path.join(workspace, "d"), os.path.join(workspace, "swap")],
                stdout=subprocess.PIPE,
            )
            context = {"python_workspace_root": workspace}
            worked = refused = 0
            try:
                self.assertEqual(racer.stdout.readline().strip(), b"racing")
                deadline = time.monotonic() + 60
                for i in range(400):
                    if time.monotonic() > deadline:
                        break
                    steps = [
                        lambda: self.assertEqual(
                            tools.read_text_file_snippet("d/f.txt", _context=context)["content"], "inside"
                        ),
                        lambda: tools.save_file(f"d/w{i}.txt", "w", _context=context),
                        lambda: tools.create_folder(f"d/sub{i}", _context=context),
                        lambda: tools.delete_path(f"d/sub{i}", _context=context),
                        # A delete that escaped would take outside/keep.txt.
                        lambda: tools.save_file("d/keep.txt", "keep", _context=context),
                        lambda: tools.delete_path("d/keep.txt", _context=context),
                        lambda: self.assertNotIn(
                            "OUTSIDE", str(tools.search_in_files("OUTSIDE", "d", _context=context)["matches"])
                        ),
                        lambda: tools.list_directory("d", _context=context),
                    ]
                    for step in steps:
                        try:
                            step()
                            worked += 1
                        except (ValueError, FileNotFoundError, NotADirectoryError, FileExistsError):
                            refused += 1
            finally:
                racer.kill()
                racer.wait()
                racer.stdout.close()
            self.assertEqual(sorted(os.listdir(outside)), ["f.txt", "keep.txt"], "written outside")
            with open(os.path.join(outside, "f.txt")) as handle:
                self.assertEqual(handle.read(), "OUTSIDE")
            self.assertGreater(worked, 0)
            self.assertGreater(refused, 0, "the race never hit")

    def test_with_openat2(self):
        if not load_file_tools()._openat2_ever_worked:
            self.skipTest("this kernel has no openat2")
        self.race(use_openat2=True)

    def test_with_the_component_walk(self):
        self.race(use_openat2=False)


if __name__ == "__main__":
    unittest.main()
