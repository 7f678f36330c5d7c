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
import time
from pathlib import Path
from typing import Annotated, Any, Iterator

from utils.function_catalog import ParamMeta

# A requirement such as `requests`, `numpy==1.26.4`, `pandas>=2,<3`,
# `rich[jupyter]~=13.0`: a name first, then only characters of version
# specifiers and extras. No spaces, quotes or shell characters, and no leading
# '-' (options such as --index-url or -r are refused) or '.'/'/' (local paths).
_SPEC_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-+=<>!~\[\],]*")
_MAX_PACKAGES = 50
_MAX_SPEC_LENGTH = 200
# pip may take a while (downloads, builds), but never forever.
_INSTALL_TIMEOUT = float(os.environ.get("TOOLPOOL_INSTALL_TIMEOUT", "300"))
_OUTPUT_LIMIT = 8000


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
        spec = item.strip()
        if spec.startswith("-"):
            raise ValueError(f"{item!r} looks like a pip option; options are not allowed, only package specifiers")
        if len(spec) > _MAX_SPEC_LENGTH or not _SPEC_RE.fullmatch(spec):
            raise ValueError(
                f"{item!r} is not an allowed package specifier: use a package name, optionally with extras"
                " and a version (e.g. 'requests', 'numpy==1.26.4', 'rich[jupyter]>=13'); letters, digits"
                " and _ . - + = < > ! ~ [ ] , only"
            )
        specs.append(spec)
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

    Only package specifiers are accepted (no pip options, URLs or paths). The
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
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            errors="replace",
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
