"""Descriptions from docstrings: the function's summary and its parameters' entries.

Parameter entries are read from the three common styles:

    Google:  Args:                 NumPy:  Parameters         Sphinx:  :param path: where
                 path (str): where          ----------                   to write
                     to write               path : str
                                                where to write

A description that runs over several lines is joined with single spaces.
"""

import inspect
import re

MAX_DESCRIPTION = 600

_GOOGLE_HEADER = re.compile(
    r"(\s*)(?:Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters)\s*:\s*"
)
_GOOGLE_ENTRY = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:(.*)")
_NUMPY_HEADERS = {"Parameters", "Other Parameters"}
_NUMPY_UNDERLINE = re.compile(r"\s*-{3,}\s*")
_SPHINX_FIELD = re.compile(r"\s*:(?:param|parameter|arg|argument|key|keyword)\s+(?:[^:]*?\s)?\*{0,2}(\w+)\s*:(.*)")


def summary(doc: str | None) -> str:
    """The first paragraph, lines joined by single spaces, cut to MAX_DESCRIPTION characters."""
    if not doc:
        return ""
    lines = []
    for line in inspect.cleandoc(doc).splitlines():
        if not line.strip():
            break
        lines.append(line.strip())
    text = " ".join(lines)
    if len(text) > MAX_DESCRIPTION:
        text = text[: MAX_DESCRIPTION - 1].rstrip() + "…"
    return text


def param_docs(doc: str | None) -> dict:
    """{parameter name: description} from every Args/Parameters/:param: entry found."""
    if not doc:
        return {}
    lines = inspect.cleandoc(doc).splitlines()
    found = {}
    for parse in (_google, _numpy, _sphinx):
        for name, parts in parse(lines):
            text = " ".join(part.strip() for part in parts if part.strip())
            if text:
                found.setdefault(name, text)
    return found


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google(lines):
    """Entries of each `Args:` section: `name (type): text`, continued on deeper-indented lines."""
    for start, line in enumerate(lines):
        header = _GOOGLE_HEADER.fullmatch(line)
        if not header:
            continue
        section_indent = len(header.group(1))
        entry_indent = None
        name, parts = None, []
        for line in lines[start + 1:]:
            if not line.strip():
                continue
            indent = _indent(line)
            if indent <= section_indent:
                break
            if entry_indent is None:
                entry_indent = indent
            entry = _GOOGLE_ENTRY.fullmatch(line.strip()) if indent <= entry_indent else None
            if entry:
                if name:
                    yield name, parts
                name, parts = entry.group(1), [entry.group(2)]
            elif name:
                parts.append(line)
        if name:
            yield name, parts


def _numpy(lines):
    """Entries of a `Parameters` section underlined with dashes: `name : type`, text indented below."""
    for start, line in enumerate(lines[:-1]):
        if line.strip() not in _NUMPY_HEADERS or not _NUMPY_UNDERLINE.fullmatch(lines[start + 1]):
            continue
        section_indent = _indent(line)
        names, parts = [], []
        body = lines[start + 2:]
        for index, line in enumerate(body):
            if not line.strip():
                continue
            indent = _indent(line)
            if indent > section_indent:
                parts.append(line)
                continue
            next_line = body[index + 1] if index + 1 < len(body) else ""
            if indent < section_indent or _NUMPY_UNDERLINE.fullmatch(next_line):
                break  # the next section starts
            yield from ((name, parts) for name in names)
            names = [part.strip().lstrip("*") for part in line.split(":", 1)[0].split(",")]
            names = [name for name in names if name.isidentifier()]
            parts = []
        yield from ((name, parts) for name in names)


def _sphinx(lines):
    """`:param [type] name: text` fields, continued on indented lines."""
    name, parts = None, []
    for line in lines:
        field = _SPHINX_FIELD.fullmatch(line)
        if field:
            if name:
                yield name, parts
            name, parts = field.group(1), [field.group(2)]
        elif name and line.strip() and _indent(line) > 0 and not line.lstrip().startswith(":"):
            parts.append(line)
        else:
            if name:
                yield name, parts
            name, parts = None, []
    if name:
        yield name, parts
