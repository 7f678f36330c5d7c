"""Attachment results: a returned MessageBlock, list of them, or AttachmentRecord, as content blocks.

The original runtime hands such results to the model as message blocks (text,
images, files), not as text. The reply carries them as `content` beside the
JSON value (docs/protocol.md, "Content"); the supervisor turns each block into
what its front end has (MCP image/audio/resource content, `call --json`
attachments). Which classes count is the worker's `standins.Classes`:
toolpool's own and the project's.
"""

from . import results


# Results that are never attachments.
_PLAIN = frozenset((type(None), bool, int, float, str, bytes, dict))


def blocks_of(value, classes):
    """[block, ...] when `value` is an attachment result, else None."""
    if type(value) in _PLAIN:
        return None  # most results: no isinstance checks against the classes
    if isinstance(value, classes.records):
        return [_block(value.as_message_block())]
    if isinstance(value, classes.blocks):
        return [_block(value)]
    if isinstance(value, (list, tuple)) and value and all(isinstance(item, classes.blocks) for item in value):
        return [_block(item) for item in value]
    return None


def value_of(value):
    """The JSON value of an attachment result: its `to_dict()` (a list of them for a list)."""
    if isinstance(value, (list, tuple)):
        return [value_of(item) for item in value]
    return results.to_jsonable(value.to_dict())


def _block(block) -> dict:
    kind = getattr(block, "type", None)
    kind = getattr(kind, "value", kind)
    attachment = getattr(block, "attachment", None)
    return {
        "type": kind if isinstance(kind, str) else "data",
        "text": _text(getattr(block, "text", None)),
        "attachment": None if attachment is None else results.to_jsonable(attachment.to_dict()),
        "data": results.to_jsonable(getattr(block, "data", None) or {}),
        "summary": _summary(block),
    }


def _text(text):
    return text if isinstance(text, str) else None


def _summary(block) -> str:
    """What the original runtime shows the model for the block as text (`block.describe()`)."""
    try:
        summary = block.describe()
    except Exception as exc:
        return f"[block: describe() failed: {type(exc).__name__}]"
    return summary if isinstance(summary, str) else str(summary)
