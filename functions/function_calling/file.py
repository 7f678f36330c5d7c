"""File tools confined to the session's code workspace.

Every path a tool receives is taken relative to the workspace
(``_context["python_workspace_root"]``; the current directory when the tool runs
without a context). Paths that leave the workspace — through ``..``, as an
absolute path elsewhere, or through a symbolic link — are refused with a
ValueError naming the path. ``attachments/`` (and ``attachments_manifest.json``)
at the workspace root belong to the attachment store: tools may read them but
not write, create or delete anything there.
"""

import codecs
import fnmatch
import mimetypes
import os
import re
import shutil
import stat
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
        try:
            real_attachments = self.attachments_root.resolve()
        except (OSError, RuntimeError):
            real_attachments = self.attachments_root
        self._protected = (
            self.attachments_root,
            real_attachments,
            self.workspace_root / _ATTACHMENTS_MANIFEST,
        )
        self.graph_directory = Path(ctx["graph_directory"]) if ctx.get("graph_directory") else None
        self.session_id = ctx.get("session_id")
        self.node_id = ctx.get("node_id")
        self.attachment_store = ctx.get("attachment_store")

    # -- path resolution -------------------------------------------------

    def resolve_under_workspace(self, path: str | os.PathLike, *, follow_symlinks: bool = True) -> Path:
        """Return the absolute, symlink-resolved path for `path`, or raise ValueError.

        Relative paths are taken from the workspace root. The result always lies
        inside the workspace. With ``follow_symlinks=False`` a final component that
        is a symbolic link is kept as the link itself (for deleting the link rather
        than its target); every directory above it is still resolved and checked.
        """
        raw = os.fspath(path)
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
        is_absolute = candidate.is_absolute()
        if not is_absolute:
            candidate = root / candidate
        lexical = Path(os.path.normpath(candidate))
        if is_absolute:
            if not (lexical.is_relative_to(root) or lexical.is_relative_to(self._given_root)):
                raise ValueError(f"path {raw!r} is outside the workspace ({root})")
        elif not lexical.is_relative_to(root):
            raise ValueError(f"path {raw!r} escapes the workspace ({root}) through '..'")

        try:
            if follow_symlinks or candidate.name in ("", ".", ".."):
                resolved = candidate.resolve()
            else:
                resolved = candidate.parent.resolve() / candidate.name
        except (OSError, RuntimeError) as exc:  # symlink loop, unreadable component
            raise ValueError(f"path {raw!r} cannot be resolved: {exc}") from None
        if not resolved.is_relative_to(root):
            raise ValueError(
                f"path {raw!r} leads outside the workspace ({root}) through a symbolic link"
                f" (it resolves to {resolved})"
            )
        return resolved

    def to_workspace_relative(self, path: str | os.PathLike) -> str:
        """Display form of a path inside the workspace: POSIX, relative, '.' for the root."""
        target = Path(path)
        try:
            rel = target.relative_to(self.workspace_root)
        except ValueError:
            return str(target)
        return rel.as_posix() or "."

    def is_protected(self, resolved: Path) -> bool:
        """True when `resolved` is the attachment store's directory, manifest, or inside it."""
        return any(resolved.is_relative_to(p) for p in self._protected)

    def ensure_editable(self, resolved: Path, raw: str) -> None:
        """Raise PermissionError when `resolved` belongs to the attachment store."""
        if self.is_protected(resolved):
            raise PermissionError(
                f"path {raw!r} is inside '{_ATTACHMENTS_DIR}/' (or is its manifest), which the"
                " attachment store manages: it can be read but not modified, created or deleted"
            )


# -- helpers (private: not tools) -------------------------------------------


def _check_encoding(encoding: str) -> str:
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        raise ValueError(f"unknown text encoding {encoding!r}") from None


def _require_file(ctx: FileToolContext, path: str) -> Path:
    target = ctx.resolve_under_workspace(path)
    if not target.exists():
        raise FileNotFoundError(f"no such file in the workspace: {path!r}")
    if target.is_dir():
        raise IsADirectoryError(f"{path!r} is a directory, not a file (use list_directory)")
    return target


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _entry_info(ctx: FileToolContext, entry: Path) -> dict[str, Any]:
    info: dict[str, Any] = {"name": entry.name}
    try:
        st = entry.lstat()
    except OSError as exc:
        info.update(type="unknown", error=exc.strerror or str(exc))
        return info
    if stat.S_ISLNK(st.st_mode):
        info["type"] = "symlink"
        try:
            real = entry.resolve()
        except (OSError, RuntimeError):
            info["target"] = "(unresolvable)"
        else:
            if real.is_relative_to(ctx.workspace_root):
                info["target"] = ctx.to_workspace_relative(real)
            else:
                info["target"] = "(outside the workspace; not accessible)"
    elif stat.S_ISDIR(st.st_mode):
        info["type"] = "directory"
    else:
        info["type"] = "file"
        info["size"] = st.st_size
    return info


def _iter_tree(directory: Path | str, *, recursive: bool, depth: int = 0) -> Iterator[os.DirEntry]:
    """Depth-first, name-sorted entries below `directory`; symlinked folders are not entered."""
    try:
        with os.scandir(directory) as it:
            children = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    for child in children:
        if _is_hidden(child.name) or child.name in _SKIPPED_DIRS:
            continue
        yield child
        if recursive and depth < _MAX_DEPTH and child.is_dir(follow_symlinks=False):
            yield from _iter_tree(child.path, recursive=True, depth=depth + 1)


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
    for item in _iter_tree(root, recursive=recursive):
        seen += 1
        if seen > _MAX_WALK_ENTRIES:
            truncated = True
            break
        full = Path(item.path)
        try:
            st = item.stat(follow_symlinks=False)
        except OSError:
            continue
        rel = ctx.to_workspace_relative(full)
        entry: dict[str, Any]
        if stat.S_ISLNK(st.st_mode):
            entry = {"path": rel, "type": "symlink", "target": _entry_info(ctx, full).get("target")}
        elif stat.S_ISDIR(st.st_mode):
            entry = {"path": rel + "/", "type": "directory"}
        else:
            total_files += 1
            total_bytes += st.st_size
            entry = {"path": rel, "type": "file", "size": st.st_size}
        if ctx.is_protected(full):
            entry["read_only"] = True
        if len(entries) < limit:
            entries.append(entry)
        else:
            truncated = True
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
    target = ctx.resolve_under_workspace(path)
    if not target.exists():
        raise FileNotFoundError(f"no such folder in the workspace: {path!r}")
    if not target.is_dir():
        raise NotADirectoryError(f"{path!r} is a file, not a folder (use read_text_file_snippet)")
    children = [c for c in target.iterdir() if include_hidden or not _is_hidden(c.name)]
    infos = []
    for child in children:
        info = _entry_info(ctx, child)
        if ctx.is_protected(child):
            info["read_only"] = True
        infos.append(info)
    infos.sort(key=lambda i: (i.get("type") != "directory", i["name"]))
    truncated = len(infos) > _MAX_LIST_ENTRIES
    result: dict[str, Any] = {
        "path": ctx.to_workspace_relative(target),
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
    target = _require_file(ctx, path)
    total: int | None = None
    with open(target, "r", encoding=encoding, errors="replace", newline="") as handle:
        if target.stat().st_size <= _WHOLE_READ_LIMIT_BYTES:
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
        "path": ctx.to_workspace_relative(target),
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
    target = _require_file(ctx, path)
    end_line = start_line + line_count - 1
    selected: list[tuple[int, str]] = []
    total = 0
    with open(target, "r", encoding=encoding, errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            total = number
            if start_line <= number <= end_line:
                selected.append((number, line.rstrip("\r\n")))
    if total == 0:
        return {"path": ctx.to_workspace_relative(target), "start_line": 1, "end_line": 0,
                "total_lines": 0, "content": "", "truncated": False}
    if start_line > total:
        raise ValueError(f"start_line {start_line} is past the end of {path!r}, which has {total} line(s)")
    width = len(str(selected[-1][0]))
    content = "\n".join(f"{n:>{width}}: {text}" for n, text in selected)
    last = selected[-1][0]
    return {
        "path": ctx.to_workspace_relative(target),
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
        target = _require_file(ctx, path_or_id)
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
                "workspace_path": ctx.to_workspace_relative(target),
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
    ctx = FileToolContext(_context)
    target = ctx.resolve_under_workspace(path)
    ctx.ensure_editable(target, path)
    if target == ctx.workspace_root or target.is_dir():
        raise IsADirectoryError(f"{path!r} is a folder; give a file path")
    existed = target.exists()
    if existed and not overwrite and not append:
        raise FileExistsError(f"{path!r} already exists; pass overwrite=true to replace it or append=true to add to it")
    data = content.encode(encoding)
    target.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    if append:
        flags |= os.O_APPEND
    elif overwrite:
        flags |= os.O_TRUNC
    else:
        flags |= os.O_EXCL  # overwrite=false: never clobber a file that appeared meanwhile
    fd = os.open(target, flags, 0o666)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return {
        "path": ctx.to_workspace_relative(target),
        "action": "appended" if append else ("overwritten" if existed else "created"),
        "bytes_written": len(data),
        "size": target.stat().st_size,
    }


def create_folder(
    path: Annotated[str, ParamMeta(description="Workspace-relative folder to create, with any missing parents")],
    _context: dict | None = None,
) -> dict:
    """Create a folder (and its missing parents) in the workspace; an existing folder is not an error."""
    ctx = FileToolContext(_context)
    target = ctx.resolve_under_workspace(path)
    ctx.ensure_editable(target, path)
    if target.exists() and not target.is_dir():
        raise FileExistsError(f"{path!r} exists and is a file, not a folder")
    existed = target.exists()
    target.mkdir(parents=True, exist_ok=True)
    return {"path": ctx.to_workspace_relative(target), "created": not existed}


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
    target = ctx.resolve_under_workspace(path, follow_symlinks=False)
    if target == ctx.workspace_root:
        raise ValueError(f"refusing to delete the workspace root ({path!r})")
    ctx.ensure_editable(target, path)
    rel = ctx.to_workspace_relative(target)
    if target.is_symlink():
        target.unlink()
        return {"path": rel, "deleted": "symlink"}
    if not target.exists():
        raise FileNotFoundError(f"no such file or folder in the workspace: {path!r}")
    if target.is_dir():
        if any(target.iterdir()):
            if not recursive:
                raise OSError(f"folder {path!r} is not empty; pass recursive=true to delete it and its contents")
            removed = sum(len(files) for _, _, files in os.walk(target))
            shutil.rmtree(target)  # fd-based on Linux: never follows symlinks inside
            return {"path": rel, "deleted": "directory", "files_removed": removed}
        target.rmdir()
        return {"path": rel, "deleted": "directory", "files_removed": 0}
    target.unlink()
    return {"path": rel, "deleted": "file"}


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
    base = ctx.resolve_under_workspace(path)
    if not base.exists():
        raise FileNotFoundError(f"no such file or folder in the workspace: {path!r}")

    def candidates() -> Iterator[Path]:
        if base.is_file():
            yield base
            return
        for item in _iter_tree(base, recursive=True):
            if item.is_dir():  # folders, and symlinks to folders (never entered)
                continue
            full = Path(item.path)
            rel = full.relative_to(base).as_posix()
            if fnmatch.fnmatch(rel if "/" in glob else item.name, glob):
                yield full

    matches: list[dict[str, Any]] = []
    searched = 0
    skipped = 0
    limited = False
    for full in candidates():
        try:
            real = full.resolve()
            if not real.is_relative_to(ctx.workspace_root) or not real.is_file():
                skipped += 1
                continue
            if real.stat().st_size > _MAX_SEARCH_FILE_BYTES:
                skipped += 1
                continue
            with open(real, "rb") as handle:
                if b"\x00" in handle.read(8192):
                    skipped += 1
                    continue
            searched += 1
            with open(real, "r", encoding="utf-8", errors="replace") as handle:
                for number, line in enumerate(handle, start=1):
                    if compiled.search(line):
                        text = line.rstrip("\r\n")
                        if len(text) > _MAX_MATCH_LINE_CHARS:
                            text = text[:_MAX_MATCH_LINE_CHARS] + "…"
                        matches.append({"path": ctx.to_workspace_relative(full), "line": number, "text": text})
                        if len(matches) >= max_results:
                            limited = True
                            break
        except (OSError, RuntimeError):
            skipped += 1
            continue
        if limited:
            break
    return {
        "pattern": pattern,
        "matches": matches,
        "files_searched": searched,
        "files_skipped": skipped,
        "truncated": limited,
    }
