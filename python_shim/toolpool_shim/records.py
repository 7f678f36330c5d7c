"""toolpool's own record types, shaped as the original convention's.

`entity.messages` (MessageBlockType, MessageBlock, AttachmentRef, MessageRole),
`utils.attachments` (AttachmentRecord) and `utils.human_prompt` (PromptResult)
of the original project; the compatibility modules re-export them. When the
project has its own classes, the context proxies use those instead
(standins.py), and these are not used.
"""

import dataclasses
import enum
from typing import Any, Dict, List, Optional



class MessageBlockType(str, enum.Enum):
    """Kinds of content block (and of attachment)."""

    TEXT = "text"
    IMAGE = "image"
    AUDIO = "audio"
    VIDEO = "video"
    FILE = "file"
    DATA = "data"

    @classmethod
    def from_mime_type(cls, mime_type: Optional[str]) -> "MessageBlockType":
        if not mime_type:
            return cls.FILE
        for prefix, kind in (("image/", cls.IMAGE), ("audio/", cls.AUDIO), ("video/", cls.VIDEO)):
            if mime_type.startswith(prefix):
                return kind
        return cls.FILE


class MessageRole(str, enum.Enum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclasses.dataclass
class AttachmentRef:
    """Where an attachment's bytes are and what they are."""

    attachment_id: str
    mime_type: Optional[str] = None
    name: Optional[str] = None
    size: Optional[int] = None
    sha256: Optional[str] = None
    local_path: Optional[str] = None
    remote_file_id: Optional[str] = None
    data_uri: Optional[str] = None
    metadata: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self, include_data: bool = True) -> Dict[str, Any]:
        payload = {
            "attachment_id": self.attachment_id,
            "mime_type": self.mime_type,
            "name": self.name,
            "size": self.size,
            "sha256": self.sha256,
            "local_path": self.local_path,
            "remote_file_id": self.remote_file_id,
            "metadata": dict(self.metadata),
        }
        if self.data_uri:
            payload["data_uri"] = self.data_uri if include_data else "[omitted]"
        return {key: value for key, value in payload.items() if value is not None and value != {}}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "AttachmentRef":
        return cls(
            attachment_id=data.get("attachment_id", ""),
            mime_type=data.get("mime_type"),
            name=data.get("name"),
            size=data.get("size"),
            sha256=data.get("sha256"),
            local_path=data.get("local_path"),
            remote_file_id=data.get("remote_file_id"),
            data_uri=data.get("data_uri"),
            metadata=data.get("metadata") or {},
        )

    def copy(self) -> "AttachmentRef":
        return dataclasses.replace(self, metadata=dict(self.metadata))


@dataclasses.dataclass
class MessageBlock:
    """One block of multimodal content: text, or a reference to an attachment."""

    type: MessageBlockType
    text: Optional[str] = None
    attachment: Optional[AttachmentRef] = None
    data: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self, include_data: bool = True) -> Dict[str, Any]:
        payload: Dict[str, Any] = {"type": MessageBlockType(self.type).value}
        if self.text is not None:
            payload["text"] = self.text
        if self.attachment:
            payload["attachment"] = self.attachment.to_dict(include_data=include_data)
        if self.data:
            payload["data"] = self.data
        return payload

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "MessageBlock":
        try:
            block_type = MessageBlockType(data.get("type") or "text")
        except ValueError:
            block_type = MessageBlockType.DATA
        attachment = data.get("attachment")
        return cls(
            type=block_type,
            text=data.get("text"),
            attachment=AttachmentRef.from_dict(attachment) if isinstance(attachment, dict) else None,
            data=data.get("data") or {},
        )

    @classmethod
    def text_block(cls, text: str) -> "MessageBlock":
        return cls(type=MessageBlockType.TEXT, text=text)

    def describe(self) -> str:
        if self.type is MessageBlockType.TEXT and self.text:
            return self.text
        if self.attachment:
            return f"[{self.type.value} attachment: {self.attachment.name or self.attachment.attachment_id}]"
        if self.text:
            return self.text
        if "text" in self.data:
            return str(self.data["text"])
        return f"[{self.type.value} block]"

    def copy(self) -> "MessageBlock":
        return MessageBlock(self.type, self.text, self.attachment.copy() if self.attachment else None, dict(self.data))


@dataclasses.dataclass
class AttachmentRecord:
    """One attachment of the session: `record.ref` plus what the registering tool said about it."""

    ref: AttachmentRef
    kind: MessageBlockType = MessageBlockType.FILE
    description: Optional[str] = None
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "ref": self.ref.to_dict(),
            "kind": MessageBlockType(self.kind).value,
            "description": self.description,
            "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "AttachmentRecord":
        try:
            kind = MessageBlockType(data.get("kind") or "file")
        except ValueError:
            kind = MessageBlockType.FILE
        return cls(
            ref=AttachmentRef.from_dict(data.get("ref") or {}),
            kind=kind,
            description=data.get("description"),
            extra=data.get("extra") or {},
        )

    def as_message_block(self) -> MessageBlock:
        return MessageBlock(type=self.kind, attachment=self.ref.copy(), data=dict(self.extra))


@dataclasses.dataclass
class PromptResult:
    """A human's answer."""

    text: str
    blocks: Optional[List[MessageBlock]] = None
    metadata: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def as_message_content(self):
        return self.blocks if self.blocks is not None else self.text
