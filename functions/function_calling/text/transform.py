"""Text tools: counting, changing case, normalising whitespace, replacing and diffing."""

import difflib
import re
from typing import Annotated, Literal

from utils.function_catalog import ParamMeta

# CJK ideographs, kana and hangul are counted one character = one word.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_WORD_RE = re.compile(rf"[{_CJK}]|[^\s{_CJK}]+")
_SENTENCE_END_RE = re.compile(r"[.!?。！？]+(?=\s|$)|[。！？]+")
_ALNUM_RUN_RE = re.compile(r"[^\W_]+")
# camelCase and acronym boundaries: parseHTTPResponse -> parse HTTP Response
_CAMEL_BOUNDARY_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def word_count(
    text: Annotated[str, ParamMeta(description="The text to measure")],
) -> dict:
    """Count the characters, words, lines, sentences and paragraphs of a text.

    Words are runs of non-space characters containing a letter or digit; each
    CJK character counts as one word.
    """
    stripped = text.strip()
    return {
        "characters": len(text),
        "characters_excluding_spaces": sum(1 for c in text if not c.isspace()),
        "words": sum(1 for w in _WORD_RE.findall(text) if any(c.isalnum() for c in w)),
        "lines": len(text.splitlines()),
        "sentences": sum(1 for part in _SENTENCE_END_RE.split(stripped) if any(c.isalnum() for c in part)),
        "paragraphs": len([p for p in re.split(r"\n\s*\n", stripped) if p.strip()]),
    }


def _words(text: str) -> list[str]:
    text = text.replace("'", "").replace("\u2019", "")  # it's -> its, not it_s
    words: list[str] = []
    for run in _ALNUM_RUN_RE.findall(text):
        words.extend(w for w in _CAMEL_BOUNDARY_RE.split(run) if w)
    return words


def change_case(
    text: Annotated[str, ParamMeta(description="The text to convert")],
    case: Annotated[
        Literal["upper", "lower", "title", "sentence", "snake", "kebab", "camel", "pascal", "constant"],
        ParamMeta(description="Target case: upper, lower, title (Each Word), sentence (First word only), snake (snake_case), kebab (kebab-case), camel (camelCase), pascal (PascalCase), constant (CONSTANT_CASE)"),
    ],
) -> str:
    """Convert text to another letter case or identifier style (snake_case, camelCase, ...)."""
    if case == "upper":
        return text.upper()
    if case == "lower":
        return text.lower()
    if case == "title":
        return re.sub(r"[^\W_]+('[^\W_]+)?", lambda m: m.group(0)[:1].upper() + m.group(0)[1:].lower(), text)
    if case == "sentence":
        lowered = text.lower()
        return re.sub(r"(^\s*|[.!?]\s+)([^\W_])", lambda m: m.group(1) + m.group(2).upper(), lowered)
    words = [w.lower() for w in _words(text)]
    if case == "snake":
        return "_".join(words)
    if case == "kebab":
        return "-".join(words)
    if case == "constant":
        return "_".join(words).upper()
    if case == "camel":
        return "".join(w if i == 0 else w.capitalize() for i, w in enumerate(words))
    if case == "pascal":
        return "".join(w.capitalize() for w in words)
    raise ValueError(f"unknown case {case!r}")


def normalize_whitespace(
    text: Annotated[str, ParamMeta(description="The text to clean up")],
    mode: Annotated[
        str,
        ParamMeta(
            description="collapse: every run of whitespace becomes one space; strip_lines: trim each line and drop trailing blank lines; squeeze_blank_lines: trim line ends and keep at most one blank line in a row",
            enum=["collapse", "strip_lines", "squeeze_blank_lines"],
        ),
    ] = "collapse",
) -> str:
    """Tidy the whitespace of a text: collapse it to single spaces, or trim lines and blank lines."""
    if mode == "collapse":
        return " ".join(text.split())
    if mode == "strip_lines":
        return "\n".join(line.strip() for line in text.splitlines()).strip("\n")
    if mode == "squeeze_blank_lines":
        lines = [line.rstrip() for line in text.splitlines()]
        out: list[str] = []
        for line in lines:
            if line or (out and out[-1]):
                out.append(line)
        while out and not out[-1]:
            out.pop()
        return "\n".join(out)
    raise ValueError(f"unknown mode {mode!r}: use collapse, strip_lines or squeeze_blank_lines")


def replace_text(
    text: Annotated[str, ParamMeta(description="The text to edit")],
    find: Annotated[str, ParamMeta(description="What to look for (a regular expression when regex=true)")],
    replace: Annotated[str, ParamMeta(description="Replacement text; with regex=true, \\1 or \\g<name> insert groups")],
    regex: Annotated[bool, ParamMeta(description="Treat find as a Python regular expression")] = False,
    case_sensitive: Annotated[bool, ParamMeta(description="Match upper/lower case exactly")] = True,
    count: Annotated[int, ParamMeta(description="Maximum number of replacements; 0 replaces every occurrence")] = 0,
) -> dict:
    """Replace occurrences of a string or regular expression in a text and report how many were replaced."""
    if not find:
        raise ValueError("find must not be empty")
    if count < 0:
        raise ValueError("count must be 0 (all) or more")
    flags = 0 if case_sensitive else re.IGNORECASE
    try:
        compiled = re.compile(find if regex else re.escape(find), flags)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {find!r}: {exc}") from None
    template = replace if regex else replace.replace("\\", "\\\\")
    try:
        result, replaced = compiled.subn(template, text, count=count)
    except (re.error, IndexError) as exc:
        raise ValueError(f"invalid replacement {replace!r}: {exc}") from None
    return {"text": result, "replacements": replaced}


def text_diff(
    original: Annotated[str, ParamMeta(description="The earlier version of the text")],
    modified: Annotated[str, ParamMeta(description="The later version of the text")],
    context_lines: Annotated[int, ParamMeta(description="Unchanged lines to show around each change")] = 3,
) -> str:
    """Show the differences between two texts as a unified diff (empty when they are identical)."""
    if context_lines < 0:
        raise ValueError("context_lines must be 0 or more")
    diff = difflib.unified_diff(
        original.splitlines(),
        modified.splitlines(),
        fromfile="original",
        tofile="modified",
        n=context_lines,
        lineterm="",
    )
    return "\n".join(diff)


# Titles and MCP behaviour hints: plain attributes, read by toolpool and
# ignored by runtimes that do not know them.
word_count.mcp_title = 'Count words'
word_count.mcp_annotations = {'readOnlyHint': True, 'openWorldHint': False}
change_case.mcp_title = 'Change the case of text'
change_case.mcp_annotations = {'readOnlyHint': True, 'openWorldHint': False}
normalize_whitespace.mcp_title = 'Normalize whitespace'
normalize_whitespace.mcp_annotations = {'readOnlyHint': True, 'openWorldHint': False}
replace_text.mcp_title = 'Replace text'
replace_text.mcp_annotations = {'readOnlyHint': True, 'openWorldHint': False}
text_diff.mcp_title = 'Compare two texts'
text_diff.mcp_annotations = {'readOnlyHint': True, 'openWorldHint': False}
