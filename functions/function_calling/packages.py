"""Installing Python packages for the session's tools.

Packages go into the session's own directory (``_context["python_packages_dir"]``,
``<session>/site-packages``), which every worker of the session has on
``sys.path`` from the start, so a package installed by one call can be
imported by the next, in whichever worker it runs — and by workers started
later. Nothing is installed into the interpreter itself.
"""

import contextlib
import fcntl
import importlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, Iterator

from utils.function_catalog import ParamMeta

_MAX_PACKAGES = 50
_MAX_SPEC_LENGTH = 200
# pip may take a while (downloads, builds), but never forever.
_INSTALL_TIMEOUT = float(os.environ.get("TOOLPOOL_INSTALL_TIMEOUT", "300"))
_OUTPUT_LIMIT = 8000

# -- requirement specifiers (PEP 508, without direct references) ---------------
#
# Only what names a project on the package index is accepted: a name, extras,
# version specifiers and an environment marker. Anything pip would take as a
# file, a folder or a URL (``x.whl``, ``./x``, ``x.tar.gz``, ``file:...``,
# ``git+https://...``, ``name @ url``) or as an option (``-e``, ``-r``,
# ``--index-url``) is refused before pip runs.

_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_IDENTIFIER_RE = _NAME_RE
# PEP 440 (the canonical pattern, case-insensitive); `==` and `!=` also take a
# trailing `.*`.
_VERSION_RE = re.compile(
    r"""v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*"""
    r"""(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?"""
    r"""(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?"""
    r"""(?:[-_.]?dev[-_.]?[0-9]*)?"""
    r"""(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?""",
    re.IGNORECASE,
)
_VERSION_OPS = ("===", "~=", "==", "!=", "<=", ">=", "<", ">")
_MARKER_VARS = frozenset({
    "python_version", "python_full_version", "os_name", "sys_platform", "platform_release",
    "platform_system", "platform_version", "platform_machine", "platform_python_implementation",
    "implementation_name", "implementation_version", "extra",
})
# What pip reads as an archive file, whatever else the text says.
_ARCHIVE_SUFFIXES = (
    ".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz",
    ".tar.lz", ".tlz", ".tar.lzma", ".egg", ".gz", ".bz2", ".xz",
)


class _SpecError(ValueError):
    pass


class _Requirement:
    """A strict PEP 508 parser for one requirement, index form only."""

    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def fail(self, expected: str) -> None:
        rest = self.text[self.pos:]
        found = f"{rest[:20]!r}" if rest else "the end"
        raise _SpecError(f"expected {expected} at character {self.pos + 1}, found {found}")

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def at(self, literal: str) -> bool:
        return self.text.startswith(literal, self.pos)

    def take(self, literal: str) -> bool:
        if self.at(literal):
            self.pos += len(literal)
            return True
        return False

    def match(self, pattern: re.Pattern, expected: str) -> str:
        found = pattern.match(self.text, self.pos)
        if not found:
            self.fail(expected)
        self.pos = found.end()
        return found.group(0)

    def parse(self) -> str:
        """The requirement's name; raises _SpecError naming what is wrong."""
        self.skip_ws()
        name = self.match(_NAME_RE, "a package name (letters, digits, '.', '_', '-')")
        self.skip_ws()
        if self.take("["):
            self.skip_ws()
            if not self.take("]"):
                while True:
                    self.skip_ws()
                    self.match(_IDENTIFIER_RE, "an extra's name")
                    self.skip_ws()
                    if self.take("]"):
                        break
                    if not self.take(","):
                        self.fail("',' or ']' in the extras")
            self.skip_ws()
        if self.at("@"):
            raise _SpecError("a direct reference ('name @ URL') is not allowed: only packages from the index")
        if self.take("("):
            self.versions()
            self.skip_ws()
            if not self.take(")"):
                self.fail("')'")
        elif any(self.at(op) for op in _VERSION_OPS):
            self.versions()
        self.skip_ws()
        if self.take(";"):
            self.skip_ws()
            self.marker()
            self.skip_ws()
        if self.pos != len(self.text):
            self.fail("a version specifier, ';' and a marker, or the end")
        return name

    def versions(self) -> None:
        while True:
            self.skip_ws()
            op = next((op for op in _VERSION_OPS if self.at(op)), None)
            if op is None:
                self.fail("a version operator (== != <= >= < > ~=)")
            if op == "===":
                raise _SpecError("arbitrary equality ('===') is not allowed: use '=='")
            self.pos += len(op)
            self.skip_ws()
            self.match(_VERSION_RE, f"a version after {op!r} (such as 1.2 or 2.0.1rc1)")
            if op in ("==", "!=") and self.take(".*"):
                pass
            self.skip_ws()
            if not self.take(","):
                return

    # marker = and_expr ('or' and_expr)*; and_expr = expr ('and' expr)*
    def marker(self) -> None:
        self.marker_and()
        while self.keyword("or"):
            self.marker_and()

    def marker_and(self) -> None:
        self.marker_expr()
        while self.keyword("and"):
            self.marker_expr()

    def keyword(self, word: str) -> bool:
        self.skip_ws()
        end = self.pos + len(word)
        if self.text.startswith(word, self.pos) and (end == len(self.text) or self.text[end] in " \t()'\""):
            self.pos = end
            return True
        return False

    def marker_expr(self) -> None:
        self.skip_ws()
        if self.take("("):
            self.marker()
            self.skip_ws()
            if not self.take(")"):
                self.fail("')' closing the marker")
            return
        self.marker_value()
        self.skip_ws()
        if self.keyword("not"):
            if not self.keyword("in"):
                self.fail("'in' after 'not'")
        elif not self.keyword("in"):
            op = next((op for op in _VERSION_OPS if self.at(op)), None)
            if op is None:
                self.fail("a marker operator (== != < <= > >= ~= in, not in)")
            self.pos += len(op)
        self.marker_value()

    def marker_value(self) -> None:
        self.skip_ws()
        quote = self.text[self.pos] if self.pos < len(self.text) else ""
        if quote in ("'", '"'):
            end = self.text.find(quote, self.pos + 1)
            if end < 0:
                self.fail(f"a closing {quote}")
            self.pos = end + 1
            return
        found = re.compile(r"[a-z_]+").match(self.text, self.pos)
        if not found or found.group(0) not in _MARKER_VARS:
            self.fail("a marker variable (python_version, sys_platform, ...) or a quoted string")
        self.pos = found.end()


def _check_spec(item: str) -> str:
    """`item` as pip gets it, or ValueError saying why it is refused."""
    spec = item.strip()
    if not spec:
        raise ValueError("an empty package specifier")
    if len(spec) > _MAX_SPEC_LENGTH:
        raise ValueError(f"{item!r} is longer than {_MAX_SPEC_LENGTH} characters")
    if spec.startswith("-"):
        raise ValueError(f"{item!r} is a pip option; options are not allowed, only package specifiers")
    head = spec.split(";", 1)[0].strip()
    if "://" in head or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", head):
        raise ValueError(f"{item!r} is a URL; only packages from the package index can be installed")
    if head.startswith((".", "/", "~")) or "/" in head or "\\" in head:
        raise ValueError(f"{item!r} is a path; only packages from the package index can be installed")
    if head.lower().endswith(_ARCHIVE_SUFFIXES):
        raise ValueError(
            f"{item!r} names a file (a wheel or an archive); only packages from the package index can be installed"
        )
    try:
        _Requirement(spec).parse()
    except _SpecError as exc:
        raise ValueError(
            f"{item!r} is not a package specifier: {exc}; use a name, optionally with extras, versions"
            " and a marker (e.g. 'requests', 'numpy==1.26.4', 'rich[jupyter]>=13', 'tomli; python_version < \"3.11\"')"
        ) from None
    return spec


def _check_specs(packages: Any) -> list[str]:
    if isinstance(packages, str) or not isinstance(packages, (list, tuple)):
        raise TypeError("packages must be a list of package names or requirement specifiers")
    if not packages:
        raise ValueError("packages is empty: name at least one package")
    if len(packages) > _MAX_PACKAGES:
        raise ValueError(f"at most {_MAX_PACKAGES} packages at a time (got {len(packages)})")
    specs = []
    for item in packages:
        if not isinstance(item, str):
            raise TypeError(f"package {item!r} is not a string")
        specs.append(_check_spec(item))
    return specs


def _target_dir(context: dict | None) -> Path:
    context = context or {}
    target = context.get("python_packages_dir")
    if not target and context.get("graph_directory"):
        target = Path(context["graph_directory"]) / "site-packages"
    if not target:
        raise RuntimeError("no session package directory in _context (python_packages_dir)")
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    return target


@contextlib.contextmanager
def _install_lock(target: Path) -> Iterator[None]:
    """One install at a time per session: two pips writing one --target would mix their files."""
    with open(target / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _tail(text: str) -> str:
    if len(text) <= _OUTPUT_LIMIT:
        return text
    return f"[... {len(text) - _OUTPUT_LIMIT} characters cut ...]\n" + text[-_OUTPUT_LIMIT:]


def install_python_packages(
    packages: Annotated[list[str], ParamMeta(description="Package names or requirement specifiers, e.g. ['requests', 'numpy==1.26.4']")],
    *,
    upgrade: Annotated[bool, ParamMeta(description="Upgrade packages that are already installed")] = False,
    _context: dict | None = None,
) -> dict:
    """Install Python packages with pip for this session's tools, so later tool calls can import them.

    Only package specifiers for the package index are accepted (no pip options, URLs, files or paths). The
    result carries pip's exit code and output; `ok` is false when pip failed.
    """
    specs = _check_specs(packages)
    target = _target_dir(_context)
    command = [
        sys.executable, "-m", "pip", "install",
        "--target", str(target),
        "--disable-pip-version-check", "--no-input", "--no-color", "--progress-bar", "off",
    ]
    if upgrade:
        command.append("--upgrade")
    command += ["--", *specs]
    started = time.monotonic()
    with _install_lock(target):
        # pip stays in the worker's process group: a call that times out
        # takes it (and whatever it started) down with the worker.
        # pip runs in an empty folder: even a name it mistook for a local
        # file or project would find nothing there.
        with tempfile.TemporaryDirectory(prefix="toolpool-pip-") as empty:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                errors="replace", cwd=empty,
            )
            try:
                stdout, stderr = process.communicate(timeout=_INSTALL_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                stdout, stderr = process.communicate()
                raise TimeoutError(
                    f"pip did not finish within {_INSTALL_TIMEOUT:g} s and was stopped; its last output:\n"
                    + _tail((stdout or "") + (stderr or ""))[-2000:]
                ) from None
    # Workers that already imported from the directory notice new files
    # through its mtime; this worker forgets what it cached just now.
    importlib.invalidate_caches()
    return {
        "ok": process.returncode == 0,
        "packages": specs,
        "target": str(target),
        "returncode": process.returncode,
        "seconds": round(time.monotonic() - started, 2),
        "stdout": _tail(stdout or ""),
        "stderr": _tail(stderr or ""),
    }


# Titles and MCP behaviour hints: plain attributes, read by toolpool and
# ignored by runtimes that do not know them.
install_python_packages.mcp_title = 'Install Python packages'
install_python_packages.mcp_annotations = {'readOnlyHint': False, 'destructiveHint': False, 'idempotentHint': True, 'openWorldHint': True}
