"""`from utils.workspace_scanner import iter_workspace_entries`, as the original convention spells it."""

import dataclasses
from pathlib import Path
from typing import Iterator, Optional


@dataclasses.dataclass
class WorkspaceEntry:
    """A file or folder under the workspace."""

    path: str  # relative to the workspace root
    type: str  # "file" or "directory"
    size: Optional[int]
    modified_ts: Optional[float]
    depth: int


def iter_workspace_entries(
    root: Path | str,
    *,
    recursive: bool = True,
    max_depth: int = 5,
    include_hidden: bool = False,
) -> Iterator[WorkspaceEntry]:
    """Entries under `root`, depth first, names sorted case-insensitively; hidden ones only on request."""
    base = Path(root).resolve()
    if not base.exists():
        return
    stack = [(base, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            children = sorted(folder.iterdir(), key=lambda p: p.name.lower())
        except OSError:
            continue
        for child in children:
            relative = child.relative_to(base)
            if not include_hidden and any(part.startswith(".") for part in relative.parts):
                continue
            is_dir = child.is_dir()
            size = modified = None
            try:
                st = child.stat()
                modified = st.st_mtime
                if not is_dir:
                    size = st.st_size
            except OSError:
                pass
            yield WorkspaceEntry(str(relative), "directory" if is_dir else "file", size, modified, depth + 1)
            if recursive and is_dir and depth + 1 < max_depth:
                stack.append((child, depth + 1))
