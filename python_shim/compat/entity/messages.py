"""`from entity.messages import MessageBlock, MessageBlockType, AttachmentRef`, as the original convention spells it."""

from toolpool_shim.records import AttachmentRef, MessageBlock, MessageBlockType, MessageRole

__all__ = ["AttachmentRef", "MessageBlock", "MessageBlockType", "MessageRole"]
