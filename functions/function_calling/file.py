"""File tools confined to the session's code workspace.

Every path a tool receives is taken relative to the workspace
(``_context["python_workspace_root"]``; the current directory when the tool runs
without a context). Paths that leave the workspace — through ``..``, as an
absolute path elsewhere, or through a symbolic link — are refused with a
ValueError naming the path. ``attachments/`` (and ``attachments_manifest.json``)
at the workspace root belong to the attachment store: tools may read them but
not write, create or delete anything there.

Paths are resolved without a check-then-use race: from an open file
descriptor of the workspace, one component at a time (``openat`` with
``O_NOFOLLOW`` relative to the directory opened before it, symbolic links
read with ``readlinkat`` and followed only while they stay inside), and the
final open goes through ``openat2`` with ``RESOLVE_BENEATH`` and
``RESOLVE_NO_SYMLINKS`` where the kernel has it. A directory swapped for a
symbolic link while a tool runs makes the tool fail; it never reads or
writes outside.
"""

import codecs
import ctypes
import errno
import fnmatch
import mimetypes
import os
import platform
import re
import stat
import struct
from pathlib import Path
from typing import Annotated, Any, Iterator, Mapping

from utils.function_catalog import ParamMeta

_ATTACHMENTS_DIR = "attachments"
_ATTACHMENTS_MANIFEST = "attachments_manifest.json"
_SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".venv", "node_modules"})
_MAX_LIST_ENTRIES = 1000
_MAX_WALK_ENTRIES = 100_000
_MAX_DEPTH = 64
_MAX_SEARCH_FILE_BYTES = 5 * 1024 * 1024
_MAX_MATCH_LINE_CHARS = 300
_WHOLE_READ_LIMIT_BYTES = 16 * 1024 * 1024
_MAX_SYMLINKS = 40  # as the kernel's own limit for one lookup

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIR_FLAGS = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC


# -- openat2 -----------------------------------------------------------------

_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437}.get(platform.machine())
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_openat2_works = _SYS_OPENAT2 is not None and hasattr(os, "O_NOFOLLOW")
_syscall = None


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int | None:
    """openat2(dir_fd, path, {flags, mode, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS}),
    or None when this kernel or platform has no openat2 (the caller falls back)."""
    global _openat2_works, _syscall
    if not _openat2_works:
        return None
    if _syscall is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _syscall = libc.syscall
            _syscall.restype = ctypes.c_long
        except (OSError, AttributeError):
            _openat2_works = False
            return None
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if not flags & os.O_CREAT and not (tmpfile and flags & tmpfile == tmpfile):
        mode = 0  # the kernel refuses a mode without O_CREAT or O_TMPFILE
    how = struct.pack(
        "QQQ", flags, mode, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
    )
    buf = ctypes.create_string_buffer(how, len(how))
    raw = os.fsencode(path)
    while True:
        fd = _syscall(
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(dir_fd),
            ctypes.c_char_p(raw),
            buf,
            ctypes.c_size_t(len(how)),
        )
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err == errno.EINTR:
            continue
        if err in (errno.ENOSYS, errno.EPERM) and not _openat2_ever_worked:
            # No openat2 here (old kernel, or a seccomp filter refusing it).
            _openat2_works = False
            return None
        if err == errno.EAGAIN:
            # A rename raced the lookup; the kernel asks for a retry.
            continue
        raise OSError(err, os.strerror(err), path)


_openat2_ever_worked = False


def _probe_openat2() -> None:
    global _openat2_ever_worked
    try:
        fd = _openat2(-100, ".", os.O_RDONLY | _DIRECTORY | _CLOEXEC, 0)  # AT_FDCWD
    except OSError:
        return
    if fd is not None:
        os.close(fd)
        _openat2_ever_worked = True


_probe_openat2()


# -- the workspace -------------------------------------------------------------


class FileToolContext:
    """The workspace a file tool works in, read from the `_context` it was given."""

    def __init__(self, ctx: Mapping[str, Any] | None = None):
        if ctx is None:
            ctx = {}
        elif not isinstance(ctx, Mapping):
            raise TypeError(f"_context must be a dict or None, not {type(ctx).__name__}")
        self._ctx = ctx
        root = ctx.get("python_workspace_root")
        if root:
            given = Path(os.path.abspath(os.fspath(root)))
            given.mkdir(parents=True, exist_ok=True)
        else:
            given = Path(os.getcwd())
        # The root as configured (possibly through a symlink, e.g. /tmp on macOS)
        # and as it really is; absolute paths under either spelling are accepted.
        self._given_root = given
        self.workspace_root = given.resolve()
        self.attachments_root = self.workspace_root / _ATTACHMENTS_DIR
        protected = [(_ATTACHMENTS_DIR,), (_ATTACHMENTS_MANIFEST,)]
        # `attachments` may itself be a link to a folder inside: protect that too.
        try:
            with self.resolve(_ATTACHMENTS_DIR) as found:
                protected.append(tuple(found.parts))
        except (OSError, ValueError):
            pass
        self._protected_parts = protected
        self.graph_directory = Path(ctx["graph_directory"]) if ctx.get("graph_directory") else None
        self.session_id = ctx.get("session_id")
        self.node_id = ctx.get("node_id")
        self.attachment_store = ctx.get("attachment_store")

    # -- path resolution -------------------------------------------------

    def _relative_parts(self, raw: Any) -> list[str]:
        """The path's components relative to the workspace root (`..` kept:
        it is resolved against the real tree), after the checks that need no
        file system."""
        raw = os.fspath(raw)
        if not isinstance(raw, str):
            raise TypeError(f"path must be a string, not {type(raw).__name__}")
        if "\x00" in raw:
            raise ValueError(f"path {raw!r} contains a NUL character")
        if raw == "~" or raw.startswith("~/"):
            raise ValueError(
                f"path {raw!r}: '~' is not expanded; give a path relative to the workspace"
            )
        root = self.workspace_root
        candidate = Path(raw)
        if candidate.is_absolute():
            lexical = Path(os.path.normpath(candidate))
            for base in (root, self._given_root):
                if lexical.is_relative_to(base):
                    return list(lexical.relative_to(base).parts)
            raise ValueError(f"path {raw!r} is outside the workspace ({root})")
        if not Path(os.path.normpath(root / candidate)).is_relative_to(root):
            raise ValueError(f"path {raw!r} escapes the workspace ({root}) through '..'")
        return [p for p in raw.split("/") if p not in ("", ".")]

    def resolve(self, path: str | os.PathLike, *, follow_symlinks: bool = True,
                make_parents: bool = False) -> "_Resolved":
        """The path resolved inside the workspace, as an open parent directory
        and a final name (use it in a ``with`` block: it holds descriptors).

        Every directory on the way is opened relative to the one before it,
        never through a symbolic link; a link is read and followed by hand,
        only while it stays inside the workspace. With ``follow_symlinks=False``
        a final component that is a link stays the link itself. With
        ``make_parents`` missing folders on the way are created (never inside
        ``attachments/``). Raises ValueError for a path that leads outside.
        """
        raw = os.fspath(path)
        pending = self._relative_parts(raw)
        root_fd = os.open(self.workspace_root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        stack: list[int] = [root_fd]  # open fds of the directories in `parts`
        parts: list[str] = []
        links = 0
        try:
            pending.reverse()  # a stack: the next component is last
            while pending:
                name = pending.pop()
                if name in ("", "."):
                    continue
                if name == "..":
                    if not parts:
                        raise ValueError(
                            f"path {raw!r} leads outside the workspace ({self.workspace_root})"
                            " through a symbolic link"
                            if links else f"path {raw!r} escapes the workspace ({self.workspace_root}) through '..'"
                        )
                    parts.pop()
                    os.close(stack.pop())
                    continue
                last = not pending
                try:
                    st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
                except FileNotFoundError:
                    st = None
                except OSError as exc:
                    raise ValueError(f"path {raw!r} cannot be resolved: {exc}") from None
                if st is not None and stat.S_ISLNK(st.st_mode) and (follow_symlinks or not last):
                    links += 1
                    if links > _MAX_SYMLINKS:
                        raise ValueError(f"path {raw!r} cannot be resolved: too many levels of symbolic links")
                    try:
                        target = os.readlink(name, dir_fd=stack[-1])
                    except OSError as exc:  # EINVAL: no longer a link
                        raise ValueError(
                            f"path {raw!r} cannot be resolved: {'/'.join(parts + [name])!r} changed while it"
                            f" was being resolved ({exc.strerror})"
                        ) from None
                    if target.startswith("/"):
                        lexical = Path(os.path.normpath(target))
                        inside = [b for b in (self.workspace_root, self._given_root) if lexical.is_relative_to(b)]
                        if not inside:
                            raise ValueError(
                                f"path {raw!r} leads outside the workspace ({self.workspace_root}) through a"
                                f" symbolic link (it points to {target})"
                            )
                        # Start again from the root with what the link names.
                        while len(stack) > 1:
                            os.close(stack.pop())
                        parts.clear()
                        rest = list(lexical.relative_to(inside[0]).parts)
                    else:
                        rest = [p for p in target.split("/") if p not in ("", ".")]
                    pending.extend(reversed(rest))
                    continue
                if last:
                    return _Resolved(self, raw, stack.pop(), name, parts + [name], st, stack)
                if st is None:
                    if not make_parents:
                        return _Resolved(self, raw, None, name, parts + [name] + list(reversed(pending)), None, stack)
                    self.ensure_editable_parts(parts + [name], raw)
                    try:
                        os.mkdir(name, dir_fd=stack[-1])
                    except FileExistsError:
                        pass
                elif not stat.S_ISDIR(st.st_mode):
                    raise NotADirectoryError(f"{raw!r}: {'/'.join(parts + [name])!r} is a file, not a folder")
                try:
                    fd = os.open(name, _DIR_FLAGS, dir_fd=stack[-1])
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise ValueError(
                            f"path {raw!r} cannot be resolved: {'/'.join(parts + [name])!r} changed while it was"
                            " being opened (a folder was replaced by a symbolic link or a file)"
                        ) from None
                    raise
                stack.append(fd)
                parts.append(name)
            # The path is the workspace root itself.
            return _Resolved(self, raw, None, "", [], os.fstat(stack[-1]), stack)
        except BaseException:
            for fd in stack:
                os.close(fd)
            raise

    def resolve_under_workspace(self, path: str | os.PathLike, *, follow_symlinks: bool = True) -> Path:
        """The absolute path inside the workspace that `path` names, or ValueError.

        Only a check: the file system can change between it and a later use of
        the path. The tools here use :meth:`resolve`, which keeps descriptors.
        """
        with self.resolve(path, follow_symlinks=follow_symlinks) as found:
            return found.path

    def to_workspace_relative(self, path: str | os.PathLike) -> str:
        """Display form of a path inside the workspace: POSIX, relative, '.' for the root."""
        target = Path(path)
        try:
            rel = target.relative_to(self.workspace_root)
        except ValueError:
            return str(target)
        return rel.as_posix() or "."

    def is_protected_parts(self, parts: list[str] | tuple[str, ...]) -> bool:
        """True for the attachment store's directory, manifest, or anything inside."""
        parts = tuple(parts)
        return any(p and parts[: len(p)] == p for p in self._protected_parts)

    def is_protected(self, resolved: Path) -> bool:
        """As :meth:`is_protected_parts`, for an absolute path inside the workspace."""
        try:
            return self.is_protected_parts(Path(resolved).relative_to(self.workspace_root).parts)
        except ValueError:
            return False

    def ensure_editable_parts(self, parts: list[str] | tuple[str, ...], raw: str) -> None:
        """Raise PermissionError when `parts` belong to the attachment store."""
        if self.is_protected_parts(parts):
            raise PermissionError(
                f"path {raw!r} is inside '{_ATTACHMENTS_DIR}/' (or is its manifest), which the"
                " attachment store manages: it can be read but not modified, created or deleted"
            )

    def ensure_editable(self, resolved: Path, raw: str) -> None:
        """As :meth:`ensure_editable_parts`, for an absolute path inside the workspace."""
        if self.is_protected(resolved):
            self.ensure_editable_parts((_ATTACHMENTS_DIR,), raw)


class _Resolved:
    """A path resolved by :meth:`FileToolContext.resolve`: the open directory
    that holds it (`dir_fd`; None when a folder on the way does not exist),
    its final `name` ('' for the root itself), its components from the root
    (`parts`) and its lstat (None when it does not exist)."""

    def __init__(self, ctx, raw, dir_fd, name, parts, st, others):
        self.ctx = ctx
        self.raw = raw
        self.dir_fd = dir_fd
        self.name = name
        self.parts = parts
        self.st = st
        # Keep the root (for openat2 beneath it) and the parent; close the rest.
        keep = [fd for fd in others[:1] if fd != dir_fd]
        for fd in others[1:]:
            if fd != dir_fd:
                os.close(fd)
        self._fds = keep + ([dir_fd] if dir_fd is not None else [])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = []

    @property
    def is_root(self) -> bool:
        return not self.parts

    @property
    def rel(self) -> str:
        return "/".join(self.parts) or "."

    @property
    def path(self) -> Path:
        return self.ctx.workspace_root.joinpath(*self.parts)

    def exists(self) -> bool:
        return self.st is not None

    def is_dir(self) -> bool:
        return self.st is not None and stat.S_ISDIR(self.st.st_mode)

    def open(self, flags: int, mode: int = 0o666) -> int:
        """Opens the final component (never through a symbolic link): with
        openat2 beneath the workspace root where the kernel has it, else with
        O_NOFOLLOW from its open directory."""
        if self.is_root:
            return os.open(".", flags | _CLOEXEC, dir_fd=self._fds[0]) if self._fds else os.open(
                self.ctx.workspace_root, flags | _CLOEXEC)
        if self.dir_fd is None:
            raise FileNotFoundError(errno.ENOENT, "no such file or folder in the workspace", self.raw)
        flags |= _NOFOLLOW | _CLOEXEC
        root_fd = self._fds[0] if len(self._fds) > 1 else None
        if root_fd is not None or len(self.parts) == 1:
            beneath_fd = root_fd if root_fd is not None else self.dir_fd
            rel = "/".join(self.parts) if root_fd is not None else self.name
            try:
                fd = _openat2(beneath_fd, rel, flags, mode)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR):
                    raise ValueError(
                        f"path {self.raw!r} changed while it was being opened (a folder was replaced by"
                        " a symbolic link)"
                    ) from None
                raise
            if fd is not None:
                return fd
        try:
            return os.open(self.name, flags, mode, dir_fd=self.dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ValueError(
                    f"path {self.raw!r} changed while it was being opened (it is now a symbolic link)"
                ) from None
            raise


# -- helpers (private: not tools) -------------------------------------------


def _check_encoding(encoding: str) -> str:
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        raise ValueError(f"unknown text encoding {encoding!r}") from None


def _open_regular(found: _Resolved, path: str) -> int:
    """An fd open for reading on the regular file `found` names (never a FIFO
    or device: the open does not block, and anything else is refused)."""
    if not found.exists():
        raise FileNotFoundError(f"no such file in the workspace: {path!r}")
    if found.is_dir():
        raise IsADirectoryError(f"{path!r} is a directory, not a file (use list_directory)")
    fd = found.open(os.O_RDONLY | _NONBLOCK)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(f"{path!r} is a directory, not a file (use list_directory)")
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path!r} is not a regular file")
        if _NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


class _Entry:
    """One directory entry and its lstat (None when it vanished meanwhile)."""

    __slots__ = ("name", "st")

    def __init__(self, name: str, st: os.stat_result | None):
        self.name = name
        self.st = st

    def is_dir(self) -> bool:
        return self.st is not None and stat.S_ISDIR(self.st.st_mode)


def _scan(dir_fd: int) -> list[_Entry]:
    """The entries of an open directory, sorted by name, each with its lstat
    taken relative to the directory (the fd stays open)."""
    fd = os.dup(dir_fd)
    try:
        with os.scandir(fd) as it:
            names = sorted(e.name for e in it)
        entries = []
        for name in names:
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                st = None
            entries.append(_Entry(name, st))
        return entries
    finally:
        os.close(fd)


def _link_target(ctx: FileToolContext, rel: str) -> str:
    """Where the symbolic link at `rel` leads, for display."""
    try:
        with ctx.resolve(rel) as found:
            return found.rel
    except ValueError as exc:
        return "(outside the workspace; not accessible)" if "outside" in str(exc) else "(unresolvable)"
    except OSError:
        return "(unresolvable)"


def _entry_info(ctx: FileToolContext, entry: _Entry, rel: str) -> dict[str, Any]:
    info: dict[str, Any] = {"name": entry.name}
    st = entry.st
    if st is None:
        info.update(type="unknown", error="it vanished while being listed")
        return info
    if stat.S_ISLNK(st.st_mode):
        info["type"] = "symlink"
        info["target"] = _link_target(ctx, rel)
    elif stat.S_ISDIR(st.st_mode):
        info["type"] = "directory"
    else:
        info["type"] = "file"
        info["size"] = st.st_size
    return info


def _iter_tree(dir_fd: int, prefix: tuple[str, ...], *, recursive: bool,
               depth: int = 0) -> Iterator[tuple[tuple[str, ...], _Entry]]:
    """Depth-first, name-sorted (parts, entry) below an open directory; folders
    are entered through descriptors, never through a symbolic link."""
    try:
        children = _scan(dir_fd)
    except OSError:
        return
    for child in children:
        if _is_hidden(child.name) or child.name in _SKIPPED_DIRS:
            continue
        parts = prefix + (child.name,)
        yield parts, child
        if recursive and depth < _MAX_DEPTH and child.is_dir():
            try:
                sub = os.open(child.name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:  # gone, or swapped for a link meanwhile
                continue
            try:
                yield from _iter_tree(sub, parts, recursive=True, depth=depth + 1)
            finally:
                os.close(sub)


def _remove_tree(dir_fd: int) -> int:
    """Empties an open directory, never following a link; the files removed."""
    removed = 0
    for entry in _scan(dir_fd):
        if entry.is_dir():
            sub = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
            try:
                removed += _remove_tree(sub)
            finally:
                os.close(sub)
            os.rmdir(entry.name, dir_fd=dir_fd)
        else:
            os.unlink(entry.name, dir_fd=dir_fd)
            removed += 1
    return removed


def _human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


# -- tools --------------------------------------------------------------------


def describe_available_files(
    recursive: Annotated[bool, ParamMeta(description="Also list files in subfolders")] = True,
    limit: Annotated[int, ParamMeta(description="Maximum number of entries to return (1 or more)")] = 200,
    _context: dict | None = None,
) -> dict:
    """List the files in the workspace with their sizes, as an overview of what can be read.

    Hidden files and tool clutter (``.git``, ``__pycache__``, ...) are skipped.
    Entries under ``attachments/`` are marked read-only.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    ctx = FileToolContext(_context)
    root = ctx.workspace_root
    entries: list[dict[str, Any]] = []
    total_files = 0
    total_bytes = 0
    truncated = False
    seen = 0
    with ctx.resolve(".") as top:
        root_fd = top.open(os.O_RDONLY | _DIRECTORY)
    try:
        for parts, item in _iter_tree(root_fd, (), recursive=recursive):
            seen += 1
            if seen > _MAX_WALK_ENTRIES:
                truncated = True
                break
            st = item.st
            if st is None:
                continue
            rel = "/".join(parts)
            entry: dict[str, Any]
            if stat.S_ISLNK(st.st_mode):
                entry = {"path": rel, "type": "symlink", "target": _link_target(ctx, rel)}
            elif stat.S_ISDIR(st.st_mode):
                entry = {"path": rel + "/", "type": "directory"}
            else:
                total_files += 1
                total_bytes += st.st_size
                entry = {"path": rel, "type": "file", "size": st.st_size}
            if ctx.is_protected_parts(parts):
                entry["read_only"] = True
            if len(entries) < limit:
                entries.append(entry)
            else:
                truncated = True
    finally:
        os.close(root_fd)
    summary = f"{total_files} file(s), {_human_size(total_bytes)}"
    if seen > _MAX_WALK_ENTRIES:
        summary = f"more than {_MAX_WALK_ENTRIES} entries; counted so far: " + summary
    if truncated:
        summary += f"; showing the first {limit} entries"
    return {
        "workspace": str(root),
        "summary": summary,
        "entries": entries,
        "truncated": truncated,
    }


def list_directory(
    path: Annotated[str, ParamMeta(description="Workspace-relative folder to list ('.' is the workspace root)")] = ".",
    include_hidden: Annotated[bool, ParamMeta(description="Include names starting with '.'")] = False,
    _context: dict | None = None,
) -> dict:
    """List the entries of one workspace folder: name, type (file, directory, symlink) and size.

    Folders come first, then files, each sorted by name.
    """
    ctx = FileToolContext(_context)
    with ctx.resolve(path) as found:
        if not found.exists():
            raise FileNotFoundError(f"no such folder in the workspace: {path!r}")
        if not found.is_dir():
            raise NotADirectoryError(f"{path!r} is a file, not a folder (use read_text_file_snippet)")
        dir_fd = found.open(os.O_RDONLY | _DIRECTORY)
        parts = tuple(found.parts)
        shown = found.rel
    try:
        children = [c for c in _scan(dir_fd) if include_hidden or not _is_hidden(c.name)]
    finally:
        os.close(dir_fd)
    infos = []
    for child in children:
        info = _entry_info(ctx, child, "/".join(parts + (child.name,)))
        if ctx.is_protected_parts(parts + (child.name,)):
            info["read_only"] = True
        infos.append(info)
    infos.sort(key=lambda i: (i.get("type") != "directory", i["name"]))
    truncated = len(infos) > _MAX_LIST_ENTRIES
    result: dict[str, Any] = {
        "path": shown,
        "entries": infos[:_MAX_LIST_ENTRIES],
        "count": len(infos),
    }
    if truncated:
        result["truncated"] = True
    return result


def read_text_file_snippet(
    path: Annotated[str, ParamMeta(description="Workspace-relative path of a text file")],
    offset: Annotated[int, ParamMeta(description="Number of characters to skip from the start (0 or more)")] = 0,
    limit: Annotated[int, ParamMeta(description="Maximum number of characters to return (1 or more)")] = 4000,
    encoding: Annotated[str, ParamMeta(description="Text encoding of the file, e.g. utf-8, gbk, latin-1")] = "utf-8",
    _context: dict | None = None,
) -> dict:
    """Read up to `limit` characters of a workspace text file, starting at character `offset`.

    Undecodable bytes are shown as U+FFFD. When more text follows, `next_offset`
    gives the offset to continue from.
    """
    if offset < 0:
        raise ValueError("offset must be 0 or more")
    if limit < 1:
        raise ValueError("limit must be at least 1")
    encoding = _check_encoding(encoding)
    ctx = FileToolContext(_context)
    with ctx.resolve(path) as found:
        fd = _open_regular(found, path)
        shown = found.rel
    total: int | None = None
    with open(fd, "r", encoding=encoding, errors="replace", newline="") as handle:
        if os.fstat(fd).st_size <= _WHOLE_READ_LIMIT_BYTES:
            text = handle.read()
            total = len(text)
            snippet = text[offset:offset + limit]
            more = offset + len(snippet) < total
        else:  # large file: stream instead of loading it whole
            remaining = offset
            while remaining > 0:
                chunk = handle.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                remaining -= len(chunk)
            snippet = handle.read(limit)
            more = bool(handle.read(1))
    result: dict[str, Any] = {
        "path": shown,
        "offset": offset,
        "content": snippet,
        "characters": len(snippet),
        "total_characters": total,
        "truncated": more,
        "next_offset": offset + len(snippet) if more else None,
    }
    return result


def read_file_segment(
    path: Annotated[str, ParamMeta(description="Workspace-relative path of a text file")],
    start_line: Annotated[int, ParamMeta(description="First line to return, counting from 1")] = 1,
    line_count: Annotated[int, ParamMeta(description="Number of lines to return (1 or more)")] = 200,
    encoding: Annotated[str, ParamMeta(description="Text encoding of the file, e.g. utf-8, gbk, latin-1")] = "utf-8",
    _context: dict | None = None,
) -> dict:
    """Read a range of lines from a workspace text file, each prefixed with its line number.

    The result also gives the file's total line count, so the next range is easy to ask for.
    """
    if start_line < 1:
        raise ValueError("start_line must be 1 or more")
    if line_count < 1:
        raise ValueError("line_count must be at least 1")
    encoding = _check_encoding(encoding)
    ctx = FileToolContext(_context)
    with ctx.resolve(path) as found:
        fd = _open_regular(found, path)
        shown = found.rel
    end_line = start_line + line_count - 1
    selected: list[tuple[int, str]] = []
    total = 0
    with open(fd, "r", encoding=encoding, errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            total = number
            if start_line <= number <= end_line:
                selected.append((number, line.rstrip("\r\n")))
    if total == 0:
        return {"path": shown, "start_line": 1, "end_line": 0,
                "total_lines": 0, "content": "", "truncated": False}
    if start_line > total:
        raise ValueError(f"start_line {start_line} is past the end of {path!r}, which has {total} line(s)")
    width = len(str(selected[-1][0]))
    content = "\n".join(f"{n:>{width}}: {text}" for n, text in selected)
    last = selected[-1][0]
    return {
        "path": shown,
        "start_line": start_line,
        "end_line": last,
        "total_lines": total,
        "content": content,
        "truncated": last < total,
    }


def load_file(
    path_or_id: Annotated[str, ParamMeta(description="An attachment id, or the workspace-relative path of a file to register as an attachment")],
    _context: dict | None = None,
) -> list:
    """Load an attachment by its id, or register a workspace file as an attachment, and return it as a content block.

    A registered workspace file is referenced where it is (not copied) and
    shared with every tool of the session; registering the same file again
    returns the same attachment.
    """
    ctx = FileToolContext(_context)
    store = ctx.attachment_store
    if store is None:
        raise RuntimeError("no attachment store in _context: load_file needs the session's attachment store")
    record = store.get(path_or_id)
    if record is None:
        with ctx.resolve(path_or_id) as found:
            os.close(_open_regular(found, path_or_id))
            # The store (in the supervisor) checks the path again when it
            # reads it: it is given the resolved path, free of links.
            target = found.path
            shown = found.rel
        mime_type = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        record = store.register_file(
            target,
            kind=_kind_for_mime(mime_type),
            display_name=target.name,
            mime_type=mime_type,
            copy_file=False,
            persist=False,
            deduplicate=True,
            extra={
                "source": "workspace",
                "workspace_path": shown,
                "storage": "reference",
            },
        )
    # A message block: the agent gets the file as an attachment (an image as
    # an image), its text is "[file attachment: name]".
    return [record.as_message_block()]


def _kind_for_mime(mime_type: str) -> str:
    for prefix in ("image", "audio", "video"):
        if mime_type.startswith(prefix + "/"):
            return prefix
    return "file"


def save_file(
    path: Annotated[str, ParamMeta(description="Workspace-relative path of the file to write; missing folders are created")],
    content: Annotated[str, ParamMeta(description="Text to write")],
    *,
    encoding: Annotated[str, ParamMeta(description="Text encoding to write with")] = "utf-8",
    overwrite: Annotated[bool, ParamMeta(description="Replace the file if it already exists; when false an existing file is an error")] = True,
    append: Annotated[bool, ParamMeta(description="Add the text to the end of the file instead of replacing it")] = False,
    _context: dict | None = None,
) -> dict:
    """Write text to a file in the workspace, creating it and its parent folders as needed.

    Files under ``attachments/`` cannot be written.
    """
    encoding = _check_encoding(encoding)
    data = content.encode(encoding)
    ctx = FileToolContext(_context)
    # Checked before any folder is made for it.
    with ctx.resolve(path) as found:
        ctx.ensure_editable_parts(found.parts, path)
    with ctx.resolve(path, make_parents=True) as found:
        ctx.ensure_editable_parts(found.parts, path)
        if found.is_root or found.is_dir():
            raise IsADirectoryError(f"{path!r} is a folder; give a file path")
        existed = found.exists()
        if existed and not overwrite and not append:
            raise FileExistsError(f"{path!r} already exists; pass overwrite=true to replace it or append=true to add to it")
        flags = os.O_WRONLY | os.O_CREAT
        if append:
            flags |= os.O_APPEND
        elif overwrite:
            flags |= os.O_TRUNC
        else:
            flags |= os.O_EXCL  # overwrite=false: never clobber a file that appeared meanwhile
        fd = found.open(flags | _NONBLOCK, 0o666)
        shown = found.rel
    with os.fdopen(fd, "wb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path!r} is not a regular file")
        os.set_blocking(fd, True)
        handle.write(data)
        handle.flush()
        size = os.fstat(fd).st_size
    return {
        "path": shown,
        "action": "appended" if append else ("overwritten" if existed else "created"),
        "bytes_written": len(data),
        "size": size,
    }


def create_folder(
    path: Annotated[str, ParamMeta(description="Workspace-relative folder to create, with any missing parents")],
    _context: dict | None = None,
) -> dict:
    """Create a folder (and its missing parents) in the workspace; an existing folder is not an error."""
    ctx = FileToolContext(_context)
    with ctx.resolve(path) as found:
        ctx.ensure_editable_parts(found.parts, path)
    with ctx.resolve(path, make_parents=True) as found:
        ctx.ensure_editable_parts(found.parts, path)
        if found.exists() and not found.is_dir():
            raise FileExistsError(f"{path!r} exists and is a file, not a folder")
        existed = found.exists()
        if not existed:
            try:
                os.mkdir(found.name, dir_fd=found.dir_fd)
            except FileExistsError:
                existed = True
        return {"path": found.rel, "created": not existed}


def delete_path(
    path: Annotated[str, ParamMeta(description="Workspace-relative file or folder to delete")],
    recursive: Annotated[bool, ParamMeta(description="Allow deleting a folder that is not empty, with everything in it")] = False,
    _context: dict | None = None,
) -> dict:
    """Delete a file, a symbolic link, or a folder in the workspace.

    A non-empty folder needs recursive=true. The workspace root and
    ``attachments/`` cannot be deleted; a symbolic link is removed itself,
    never its target.
    """
    ctx = FileToolContext(_context)
    with ctx.resolve(path, follow_symlinks=False) as found:
        if found.is_root:
            raise ValueError(f"refusing to delete the workspace root ({path!r})")
        ctx.ensure_editable_parts(found.parts, path)
        rel = found.rel
        if not found.exists() or found.dir_fd is None:
            raise FileNotFoundError(f"no such file or folder in the workspace: {path!r}")
        if stat.S_ISLNK(found.st.st_mode):
            os.unlink(found.name, dir_fd=found.dir_fd)
            return {"path": rel, "deleted": "symlink"}
        if not found.is_dir():
            os.unlink(found.name, dir_fd=found.dir_fd)
            return {"path": rel, "deleted": "file"}
        sub = found.open(os.O_RDONLY | _DIRECTORY)
        try:
            removed = 0
            if _scan(sub):
                if not recursive:
                    raise OSError(f"folder {path!r} is not empty; pass recursive=true to delete it and its contents")
                removed = _remove_tree(sub)
        finally:
            os.close(sub)
        os.rmdir(found.name, dir_fd=found.dir_fd)
        return {"path": rel, "deleted": "directory", "files_removed": removed}


def search_in_files(
    pattern: Annotated[str, ParamMeta(description="Text to look for (a regular expression when regex=true)")],
    path: Annotated[str, ParamMeta(description="Workspace-relative folder to search in, or a single file")] = ".",
    *,
    glob: Annotated[str, ParamMeta(description="Only search files whose name matches this glob, e.g. '*.py'; a glob with '/' matches the relative path")] = "*",
    regex: Annotated[bool, ParamMeta(description="Treat pattern as a Python regular expression")] = False,
    case_sensitive: Annotated[bool, ParamMeta(description="Match upper/lower case exactly")] = False,
    max_results: Annotated[int, ParamMeta(description="Stop after this many matching lines (1 or more)")] = 100,
    _context: dict | None = None,
) -> dict:
    """Search the workspace's text files for a pattern and return the matching lines with file and line number.

    Hidden files, binary files and files over 5 MB are skipped.
    """
    if not pattern:
        raise ValueError("pattern must not be empty")
    if max_results < 1:
        raise ValueError("max_results must be at least 1")
    flags = 0 if case_sensitive else re.IGNORECASE
    try:
        compiled = re.compile(pattern if regex else re.escape(pattern), flags)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    ctx = FileToolContext(_context)
    with ctx.resolve(path) as found:
        if not found.exists():
            raise FileNotFoundError(f"no such file or folder in the workspace: {path!r}")
        base_parts = tuple(found.parts)
        single = None if found.is_dir() else _open_regular(found, path)
        base_fd = found.open(os.O_RDONLY | _DIRECTORY) if single is None else None

    def candidates() -> Iterator[tuple[str, int | None]]:
        """(shown path, fd open on the file or None when it must be skipped)."""
        if single is not None:
            yield "/".join(base_parts), single
            return
        for parts, item in _iter_tree(base_fd, base_parts, recursive=True):
            if item.is_dir() or item.st is None:
                continue
            rel = "/".join(parts[len(base_parts):])
            if not fnmatch.fnmatch(rel if "/" in glob else item.name, glob):
                continue
            shown = "/".join(parts)
            try:
                with ctx.resolve(shown) as entry:
                    fd = _open_regular(entry, shown)
            except IsADirectoryError:  # a link to a folder: never entered
                continue
            except (OSError, ValueError):
                fd = None
            yield shown if fd is None else "/".join(parts), fd

    matches: list[dict[str, Any]] = []
    searched = 0
    skipped = 0
    limited = False
    try:
        for shown, fd in candidates():
            if fd is None:
                skipped += 1
                continue
            with open(fd, "rb") as handle:
                try:
                    if os.fstat(handle.fileno()).st_size > _MAX_SEARCH_FILE_BYTES or b"\x00" in handle.read(8192):
                        skipped += 1
                        continue
                    handle.seek(0)
                    searched += 1
                    for number, raw_line in enumerate(handle, start=1):
                        line = raw_line.decode("utf-8", errors="replace")
                        if compiled.search(line):
                            text = line.rstrip("\r\n")
                            if len(text) > _MAX_MATCH_LINE_CHARS:
                                text = text[:_MAX_MATCH_LINE_CHARS] + "…"
                            matches.append({"path": shown, "line": number, "text": text})
                            if len(matches) >= max_results:
                                limited = True
                                break
                except OSError:
                    skipped += 1
                    continue
            if limited:
                break
    finally:
        if base_fd is not None:
            os.close(base_fd)
    return {
        "pattern": pattern,
        "matches": matches,
        "files_searched": searched,
        "files_skipped": skipped,
        "truncated": limited,
    }


# Titles and MCP behaviour hints: plain attributes, read by toolpool and
# ignored by runtimes that do not know them.
describe_available_files.mcp_title = 'Describe available files'
describe_available_files.mcp_annotations = {'readOnlyHint': True, 'openWorldHint': False}
list_directory.mcp_title = 'List a directory'
list_directory.mcp_annotations = {'readOnlyHint': True, 'openWorldHint': False}
read_text_file_snippet.mcp_title = 'Read a snippet of a text file'
read_text_file_snippet.mcp_annotations = {'readOnlyHint': True, 'openWorldHint': False}
read_file_segment.mcp_title = 'Read part of a file'
read_file_segment.mcp_annotations = {'readOnlyHint': True, 'openWorldHint': False}
load_file.mcp_title = 'Load a file as an attachment'
load_file.mcp_annotations = {'readOnlyHint': False, 'destructiveHint': False, 'idempotentHint': True, 'openWorldHint': False}
save_file.mcp_title = 'Save a file'
save_file.mcp_annotations = {'readOnlyHint': False, 'destructiveHint': True, 'idempotentHint': True, 'openWorldHint': False}
create_folder.mcp_title = 'Create a folder'
create_folder.mcp_annotations = {'readOnlyHint': False, 'destructiveHint': False, 'idempotentHint': True, 'openWorldHint': False}
delete_path.mcp_title = 'Delete a file or folder'
delete_path.mcp_annotations = {'readOnlyHint': False, 'destructiveHint': True, 'idempotentHint': True, 'openWorldHint': False}
search_in_files.mcp_title = 'Search in files'
search_in_files.mcp_annotations = {'readOnlyHint': True, 'openWorldHint': False}
