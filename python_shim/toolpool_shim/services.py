"""The live services in a tool's `_context`: proxies that call back to the supervisor.

A worker is one process of a pool, so the session's services cannot be Python
objects shared in memory. `_context["attachment_store"]` and
`_context["human_prompt"]` are proxies with the original convention's
interface (`utils.attachments.AttachmentStore`, `utils.human_prompt.HumanPromptService`):
each method sends a callback frame to the supervisor and blocks until it
answers (docs/protocol.md). The supervisor owns the attachment store, so every
worker of the session sees the same records, and forwards human prompts to its
front end (terminal, MCP elicitation, the library's HumanPrompt trait).

A callback that fails raises here, in the tool, with the exception type the
supervisor names (FileNotFoundError, PermissionError, ValueError, ... or one
of the HumanPrompt* errors below).

The record types (AttachmentRef, AttachmentRecord, MessageBlock,
MessageBlockType, PromptResult) mirror the original's; the compatibility
modules `utils.attachments`, `utils.human_prompt` and `entity.messages`
re-export them.
"""

import base64
import builtins
import dataclasses
import enum
import json
import mimetypes
import os
import pathlib
from typing import Any, Callable, Dict, List, Optional

from . import results

# Callback method names (docs/protocol.md, "Callbacks").
REGISTER_FILE = "attachments.register_file"
REGISTER_BYTES = "attachments.register_bytes"
GET = "attachments.get"
LIST = "attachments.list"
EXPORT_MANIFEST = "attachments.export_manifest"
HUMAN_PROMPT = "human_prompt.request"

ATTACHMENTS_DIR = "attachments"
MANIFEST_FILE = "attachments_manifest.json"
DEFAULT_NODE_ID = "model_function_calling"


class ContextServiceError(RuntimeError):
    """The supervisor could not serve a context service call (an error with no better-fitting type)."""


class HumanPromptError(RuntimeError):
    """Asking a human failed."""


class HumanPromptUnavailable(HumanPromptError):
    """Nobody can be asked: no terminal, stdin at its end, a client without elicitation, ..."""


class HumanPromptDeclined(HumanPromptError):
    """The human saw the question and declined to answer."""


class HumanPromptCancelled(HumanPromptError):
    """The human or the front end cancelled the question."""


_OWN_ERRORS = {cls.__name__: cls for cls in (
    ContextServiceError, HumanPromptError, HumanPromptUnavailable, HumanPromptDeclined, HumanPromptCancelled,
)}


def _default_transport(method: str, params: dict):
    from . import worker  # imported late: worker imports invoke, which imports this module

    return worker.callback(method, params)


def _call(transport: Callable[[str, dict], Any], method: str, params: dict):
    """Run one callback; a failure becomes the exception the supervisor names."""
    from .channel import CallbackError

    try:
        return transport(method, params)
    except CallbackError as failure:
        raise _exception_for(failure.type, failure.message) from None


def _exception_for(type_name: str, message: str) -> BaseException:
    cls = _OWN_ERRORS.get(type_name)
    if cls is None:
        candidate = getattr(builtins, type_name, None)
        if isinstance(candidate, type) and issubclass(candidate, Exception):
            cls = candidate
    if cls is None:
        return ContextServiceError(f"{type_name}: {message}")
    try:
        return cls(message)
    except Exception:  # an exception class with a different constructor (UnicodeDecodeError, ...)
        return ContextServiceError(f"{type_name}: {message}")


# -- record types (the original's entity.messages and utils.attachments) ---------------------------


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


# -- the attachment store proxy ---------------------------------------------------------------------


def _kind_value(kind) -> Optional[str]:
    if kind is None:
        return None
    if isinstance(kind, enum.Enum):
        kind = kind.value
    if not isinstance(kind, str):
        raise TypeError(f"kind must be a MessageBlockType or a string, not {type(kind).__name__}")
    return kind


def _optional_str(name: str, value) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{name} must be a string, not {type(value).__name__}")


def _jsonable_dict(name: str, value) -> Optional[dict]:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict, not {type(value).__name__}")
    return results.to_jsonable(value)


class AttachmentStore:
    """The session's attachment store, kept by the supervisor and shared by every worker.

    Files live under `<workspace>/attachments/<id>/`, the persisted records in
    `<workspace>/attachments_manifest.json`. Paths outside the workspace are
    refused (PermissionError).
    """

    def __init__(self, workspace: os.PathLike | str, transport: Callable[[str, dict], Any] | None = None):
        workspace = pathlib.Path(workspace)
        self.root = workspace / ATTACHMENTS_DIR
        self.manifest_path = workspace / MANIFEST_FILE
        self._transport = transport or _default_transport

    def __repr__(self) -> str:
        return f"<toolpool AttachmentStore proxy for {self.root}>"

    def _call(self, method: str, params: dict):
        return _call(self._transport, method, params)

    def register_file(
        self,
        file_path: os.PathLike | str,
        *,
        kind: MessageBlockType | str | None = None,
        display_name: Optional[str] = None,
        mime_type: Optional[str] = None,
        attachment_id: Optional[str] = None,
        copy_file: bool = True,
        description: Optional[str] = None,
        extra: Optional[Dict[str, Any]] = None,
        persist: bool = True,
        deduplicate: bool = False,
    ) -> AttachmentRecord:
        """Register a workspace file; with copy_file (the default) it is copied under attachments/<id>/."""
        path = os.path.abspath(os.fspath(file_path))  # relative to this process's cwd, as open() would be
        if mime_type is None:
            mime_type = mimetypes.guess_type(os.path.basename(path))[0] or "application/octet-stream"
        value = self._call(REGISTER_FILE, {
            "path": path,
            "kind": _kind_value(kind),
            "display_name": _optional_str("display_name", display_name),
            "mime_type": _optional_str("mime_type", mime_type),
            "attachment_id": _optional_str("attachment_id", attachment_id),
            "copy_file": bool(copy_file),
            "description": _optional_str("description", description),
            "extra": _jsonable_dict("extra", extra),
            "persist": bool(persist),
            "deduplicate": bool(deduplicate),
        })
        return AttachmentRecord.from_dict(value)

    def register_bytes(
        self,
        data: bytes | bytearray | memoryview,
        *,
        name: Optional[str] = None,
        kind: MessageBlockType | str | None = None,
        mime_type: Optional[str] = None,
        display_name: Optional[str] = None,
        attachment_id: Optional[str] = None,
        description: Optional[str] = None,
        extra: Optional[Dict[str, Any]] = None,
        persist: bool = True,
    ) -> AttachmentRecord:
        """Register in-memory bytes as the file attachments/<id>/<name>."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("register_bytes expects bytes or bytearray data")
        file_name = display_name or name
        if file_name is None:
            extension = mimetypes.guess_extension(mime_type) if mime_type else None
            file_name = f"attachment{extension or '.bin'}"
        if mime_type is None:
            mime_type = mimetypes.guess_type(file_name)[0] or "application/octet-stream"
        value = self._call(REGISTER_BYTES, {
            "data_base64": base64.b64encode(bytes(data)).decode("ascii"),
            "display_name": _optional_str("name", file_name),
            "kind": _kind_value(kind),
            "mime_type": _optional_str("mime_type", mime_type),
            "attachment_id": _optional_str("attachment_id", attachment_id),
            "description": _optional_str("description", description),
            "extra": _jsonable_dict("extra", extra),
            "persist": bool(persist),
        })
        return AttachmentRecord.from_dict(value)

    def get(self, attachment_id: str) -> Optional[AttachmentRecord]:
        """The record of `attachment_id`, or None when there is none."""
        if not isinstance(attachment_id, str):
            return None
        value = self._call(GET, {"attachment_id": attachment_id})
        return None if value is None else AttachmentRecord.from_dict(value)

    def list_records(self) -> Dict[str, AttachmentRecord]:
        """Every record of the session, by id, in registration order."""
        records = (AttachmentRecord.from_dict(item) for item in self._call(LIST, {}) or ())
        return {record.ref.attachment_id: record for record in records}

    def export_manifest(self) -> Dict[str, Any]:
        """The persisted records as the manifest holds them: {id: record.to_dict()}."""
        return dict(self._call(EXPORT_MANIFEST, {}) or {})

    def to_message_block(self, attachment_id: str) -> MessageBlock:
        record = self.get(attachment_id)
        if record is None:
            raise KeyError(f"Attachment '{attachment_id}' not found")
        return record.as_message_block()


# -- the human prompt proxy ---------------------------------------------------------------------------


@dataclasses.dataclass
class PromptResult:
    """A human's answer."""

    text: str
    blocks: Optional[List[MessageBlock]] = None
    metadata: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def as_message_content(self):
        return self.blocks if self.blocks is not None else self.text


class HumanPromptService:
    """Asks a human through the supervisor's front end; the wait does not count against the call's timeout."""

    def __init__(self, session_id: Optional[str] = None, node_id: Optional[str] = None,
                 transport: Callable[[str, dict], Any] | None = None):
        self._session_id = session_id
        self._node_id = node_id
        self._transport = transport or _default_transport

    def __repr__(self) -> str:
        return "<toolpool HumanPromptService proxy>"

    def request(
        self,
        node_id: Optional[str],
        task_description: str,
        *,
        inputs: Any = None,
        metadata: Optional[Dict[str, Any]] = None,
    ) -> PromptResult:
        """Ask the human to do `task_description` (showing `inputs`); returns their answer as `.text`."""
        meta = dict(metadata or {})
        if self._session_id and "session_id" not in meta:
            meta["session_id"] = self._session_id
        if inputs is not None and not isinstance(inputs, str):
            inputs = json.dumps(results.to_jsonable(inputs), ensure_ascii=False, indent=2)
        answer = _call(self._transport, HUMAN_PROMPT, {
            "node_id": str(node_id or self._node_id or DEFAULT_NODE_ID),
            "task_description": str(task_description),
            "inputs": inputs,
            "metadata": results.to_jsonable(meta),
        }) or {}
        raw = answer.get("text")
        text = raw if isinstance(raw, str) else ("" if raw is None else str(raw))
        text = text.encode("utf-8", errors="ignore").decode("utf-8", errors="ignore")
        return PromptResult(
            text=text,
            blocks=[MessageBlock.text_block(text)],
            metadata={**(answer.get("metadata") or {}), **meta},
        )
