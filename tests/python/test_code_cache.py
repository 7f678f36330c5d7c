"""Tool modules compile from source, never from __pycache__, with their code
kept in the supervisor's code cache under a hash of path and source."""

import os
import sys
import tempfile
import unittest

import support  # noqa: F401  (puts the shim on sys.path)
from toolpool_shim import discovery


class CodeCache(unittest.TestCase):
    def setUp(self):
        self.tools = tempfile.TemporaryDirectory()
        self.cache = tempfile.TemporaryDirectory()
        self.addCleanup(self.tools.cleanup)
        self.addCleanup(self.cache.cleanup)
        self.path = os.path.join(self.tools.name, "versioned.py")
        previous = discovery.CODE_CACHE
        discovery.CODE_CACHE = self.cache.name
        self.addCleanup(setattr, discovery, "CODE_CACHE", previous)

    def write(self, version: int, mtime=None) -> None:
        with open(self.path, "w") as out:
            out.write(f"def version() -> int:\n    return {version}\n")
        if mtime is not None:
            os.utime(self.path, (mtime, mtime))

    def load(self, name: str):
        loader = discovery._FreshSourceLoader(name, self.path)
        module = type(sys)(name)
        module.__file__ = self.path
        exec(loader.get_code(name), module.__dict__)
        return module

    def entries(self) -> list:
        return sorted(os.listdir(self.cache.name))

    def test_the_second_load_takes_the_cached_code_without_compiling(self):
        self.write(1)
        self.assertEqual(self.load("first").version(), 1)
        self.assertEqual(len(self.entries()), 1)
        loader = discovery._FreshSourceLoader("second", self.path)

        def refuse(*args, **kwargs):
            raise AssertionError("compiled although the code was cached")

        loader.source_to_code = refuse
        module = type(sys)("second")
        exec(loader.get_code("second"), module.__dict__)
        self.assertEqual(module.version(), 1)

    def test_an_edit_keeping_size_and_mtime_is_compiled_anew(self):
        self.write(1, mtime=1_700_000_000)
        self.assertEqual(self.load("before").version(), 1)
        self.write(2, mtime=1_700_000_000)
        self.assertEqual(self.load("after").version(), 2)
        self.assertEqual(len(self.entries()), 2)

    def test_a_broken_or_foreign_entry_is_compiled_over(self):
        self.write(3)
        entry = discovery._cache_entry(self.path, open(self.path, "rb").read())
        for junk in (b"\x00garbage", b"N"):  # not marshal; marshal of None, not code
            with self.subTest(junk=junk):
                with open(entry, "wb") as out:
                    out.write(junk)
                self.assertEqual(self.load("junk").version(), 3)

    def test_without_a_cache_nothing_is_written_anywhere(self):
        discovery.CODE_CACHE = None
        self.write(4)
        self.assertEqual(self.load("uncached").version(), 4)
        self.assertEqual(self.entries(), [])
        self.assertEqual(os.listdir(self.tools.name), ["versioned.py"])

    def test_an_unwritable_cache_costs_a_compile_not_the_import(self):
        discovery.CODE_CACHE = os.path.join(self.path, "not-a-directory")
        self.write(5)
        self.assertEqual(self.load("unwritable").version(), 5)

    def test_past_its_size_the_least_recently_used_half_is_pruned(self):
        previous = discovery.CODE_CACHE_ENTRIES
        discovery.CODE_CACHE_ENTRIES = 4
        self.addCleanup(setattr, discovery, "CODE_CACHE_ENTRIES", previous)
        for version in range(4):
            self.write(version)
            self.load(f"v{version}")
            entry = discovery._cache_entry(self.path, open(self.path, "rb").read())
            os.utime(entry, (1_000_000 + version, 1_000_000 + version))
        self.write(0)
        self.load("used again")  # version 0's entry: used last now
        self.write(9)
        self.load("the fifth")
        kept = self.entries()
        self.assertEqual(len(kept), 3, kept)
        def source(version):
            return f"def version() -> int:\n    return {version}\n".encode()

        for version, expected in ((0, True), (1, False), (2, False), (3, True), (9, True)):
            name = os.path.basename(discovery._cache_entry(self.path, source(version)))
            self.assertEqual(name in kept, expected, version)


if __name__ == "__main__":
    unittest.main()
