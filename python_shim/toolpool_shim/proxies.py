"""The live services in a tool's `_context`: proxies that call back to the supervisor.

A worker is one process of a pool, so the session's services cannot be Python
objects shared in memory. `_context["attachment_store"]` and
`_context["human_prompt"]` are proxies with the original convention's
interface (`utils.attachments.AttachmentStore`, `utils.human_prompt.HumanPromptService`):
each method sends a callback frame to the supervisor and blocks until it
answers (docs/protocol.md, "Callbacks"). The supervisor owns the attachment
store, so every worker of the session sees the same records and the manifest
has one writer, and forwards human prompts to its front end.

The proxies here are mixins: `standins.py` combines them with toolpool's own
classes or with the project's (so `isinstance` against the project's class
holds), and gives them the record types to build answers from. A callback
that fails raises in the tool with the exception type the supervisor names
(FileNotFoundError, PermissionError, KeyError, ... or a HumanPrompt* error).
"""

import base64
import builtins
import enum
import json
import math
import mimetypes
import os
import pathlib
import threading
from typing import Any, Callable, Dict, Optional

from . import results
from .channel import CallbackError

# Callback method names (docs/protocol.md, "Callbacks").
REGISTER_FILE = "attachments.register_file"
REGISTER_BYTES = "attachments.register_bytes"
REGISTER_REMOTE_FILE = "attachments.register_remote_file"
UPDATE_REMOTE_FILE_ID = "attachments.update_remote_file_id"
INGEST_RECORD = "attachments.ingest_record"
GET = "attachments.get"
LIST = "attachments.list"
EXPORT_MANIFEST = "attachments.export_manifest"
HUMAN_PROMPT = "human_prompt.request"
HUMAN_PROMPT_MANY = "human_prompt.request_many"
PROGRESS = "progress.report"

# The store's layout, as the original keeps it: files and manifest under one root.
ATTACHMENTS_DIR = "attachments"
MANIFEST_FILE = "attachments_manifest.json"
DEFAULT_INLINE_LIMIT = 512 * 1024  # the original's AttachmentStore default
DEFAULT_NODE_ID = "model_function_calling"

Transport = Callable[[str, dict], Any]


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


def _no_transport(method: str, params: dict):
    raise RuntimeError("toolpool context services are only available inside a toolpool worker")


def call(transport: Transport, method: str, params: dict):
    """Run one callback; a failure becomes the exception the supervisor names."""
    try:
        return transport(method, params)
    except CallbackError as failure:
        raise exception_for(failure.type, failure.message) from None


def exception_for(type_name: str, message: str) -> BaseException:
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


def _optional_int(name: str, value) -> Optional[int]:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise TypeError(f"{name} must be an integer, not {type(value).__name__}")


def _jsonable_dict(name: str, value) -> Optional[dict]:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict, not {type(value).__name__}")
    return results.to_jsonable(value)


class StoreProxy:
    """The session's attachment store, kept by the supervisor and shared by every worker.

    The original's methods and signatures; records come back as `_record_type`
    (the project's `AttachmentRecord`, or toolpool's). Files live under
    `<workspace>/attachments/<id>/`, the persisted records in
    `<workspace>/attachments/attachments_manifest.json`; paths outside the
    workspace are refused (PermissionError).
    """

    _record_type: type = None  # set by standins.py

    def __init__(self, workspace: os.PathLike | str, transport: Optional[Transport] = None):
        # The original's public attributes; the project's __init__ is not run
        # (it would open a second store on the same files).
        self.root = pathlib.Path(workspace) / ATTACHMENTS_DIR
        self.manifest_path = self.root / MANIFEST_FILE
        self.inline_size_limit = DEFAULT_INLINE_LIMIT
        self._transport = transport or _no_transport

    def __repr__(self) -> str:
        return f"<toolpool AttachmentStore proxy for {self.root}>"

    def _call(self, method: str, params: dict):
        return call(self._transport, method, params)

    def _record(self, value):
        return self._record_type.from_dict(value)

    def register_file(
        self,
        file_path: os.PathLike | str,
        *,
        kind=None,
        display_name: Optional[str] = None,
        mime_type: Optional[str] = None,
        attachment_id: Optional[str] = None,
        copy_file: bool = True,
        description: Optional[str] = None,
        extra: Optional[Dict[str, Any]] = None,
        persist: bool = True,
        deduplicate: bool = False,
    ):
        """Register a workspace file; with copy_file (the default) it is copied under attachments/<id>/."""
        path = os.path.abspath(os.fspath(file_path))  # relative to this process's cwd, as open() would be
        if mime_type is None:
            mime_type = mimetypes.guess_type(os.path.basename(path))[0] or "application/octet-stream"
        return self._record(self._call(REGISTER_FILE, {
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
        }))

    def register_bytes(
        self,
        data: bytes | bytearray | memoryview,
        *,
        kind=None,
        mime_type: Optional[str] = None,
        display_name: Optional[str] = None,
        attachment_id: Optional[str] = None,
        description: Optional[str] = None,
        extra: Optional[Dict[str, Any]] = None,
        persist: bool = True,
        name: Optional[str] = None,
    ):
        """Register in-memory bytes as the file attachments/<id>/<display_name>."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("register_bytes expects bytes or bytearray data")
        file_name = display_name or name
        if file_name is None:
            extension = mimetypes.guess_extension(mime_type) if mime_type else None
            file_name = f"attachment{extension or '.bin'}"
        if mime_type is None:
            mime_type = mimetypes.guess_type(file_name)[0] or "application/octet-stream"
        return self._record(self._call(REGISTER_BYTES, {
            "data_base64": base64.b64encode(bytes(data)).decode("ascii"),
            "display_name": _optional_str("display_name", file_name),
            "kind": _kind_value(kind),
            "mime_type": _optional_str("mime_type", mime_type),
            "attachment_id": _optional_str("attachment_id", attachment_id),
            "description": _optional_str("description", description),
            "extra": _jsonable_dict("extra", extra),
            "persist": bool(persist),
        }))

    def register_remote_file(
        self,
        *,
        remote_file_id: str,
        name: str,
        mime_type: Optional[str] = None,
        size: Optional[int] = None,
        kind=None,
        attachment_id: Optional[str] = None,
        description: Optional[str] = None,
        extra: Optional[Dict[str, Any]] = None,
        persist: bool = True,
    ):
        """Register a file already uploaded to a provider (an OpenAI file id, say); no bytes are stored."""
        return self._record(self._call(REGISTER_REMOTE_FILE, {
            "remote_file_id": _optional_str("remote_file_id", remote_file_id),
            "name": _optional_str("name", name),
            "mime_type": _optional_str("mime_type", mime_type),
            "size": _optional_int("size", size),
            "kind": _kind_value(kind),
            "attachment_id": _optional_str("attachment_id", attachment_id),
            "description": _optional_str("description", description),
            "extra": _jsonable_dict("extra", extra),
            "persist": bool(persist),
        }))

    def update_remote_file_id(self, attachment_id: str, remote_file_id: str) -> None:
        """Attach a provider file id to an existing record; KeyError when there is none."""
        self._call(UPDATE_REMOTE_FILE_ID, {
            "attachment_id": _optional_str("attachment_id", attachment_id),
            "remote_file_id": _optional_str("remote_file_id", remote_file_id),
        })

    def ingest_record(self, record, *, copy_file: bool = True, persist: bool = True):
        """Import a record made elsewhere; with copy_file its (workspace) file is copied under attachments/<id>/."""
        to_dict = getattr(record, "to_dict", None)
        if not callable(to_dict):
            raise TypeError(f"ingest_record expects an AttachmentRecord, not {type(record).__name__}")
        return self._record(self._call(INGEST_RECORD, {
            "record": results.to_jsonable(to_dict()),
            "copy_file": bool(copy_file),
            "persist": bool(persist),
        }))

    def get(self, attachment_id: str):
        """The record of `attachment_id`, or None when there is none."""
        if not isinstance(attachment_id, str):
            return None
        value = self._call(GET, {"attachment_id": attachment_id})
        return None if value is None else self._record(value)

    def to_message_block(self, attachment_id: str):
        record = self.get(attachment_id)
        if record is None:
            raise KeyError(f"Attachment '{attachment_id}' not found")
        return record.as_message_block()

    def list_records(self) -> Dict[str, Any]:
        """Every record of the session, by id, in registration order."""
        records = (self._record(item) for item in self._call(LIST, {}) or ())
        return {record.ref.attachment_id: record for record in records}

    def export_manifest(self) -> Dict[str, Any]:
        """The persisted records as the manifest holds them: {id: record.to_dict()}."""
        return dict(self._call(EXPORT_MANIFEST, {}) or {})


class PromptProxy:
    """Asks a human through the supervisor's front end; the wait does not count against the call's timeout.

    Answers come back as `_result_type` (the project's PromptResult, or
    toolpool's) with blocks of `_block_type`.
    """

    _result_type: type = None  # set by standins.py
    _block_type: type = None

    def __init__(self, session_id: Optional[str] = None, node_id: Optional[str] = None,
                 transport: Optional[Transport] = None):
        self._session_id = session_id
        self._node_id = node_id
        self._transport = transport or _no_transport

    def __repr__(self) -> str:
        return "<toolpool HumanPromptService proxy>"

    def request(
        self,
        node_id: Optional[str],
        task_description: str,
        *,
        inputs: Any = None,
        metadata: Optional[Dict[str, Any]] = None,
    ):
        """Ask the human to do `task_description` (showing `inputs`); returns their answer as `.text`."""
        question, meta = self._question(node_id, task_description, inputs, metadata)
        return self._answer(call(self._transport, HUMAN_PROMPT, question) or {}, meta)

    def request_many(self, questions) -> list:
        """Ask several questions together; returns their answers in order.

        Each question is a dict of `request`'s arguments (`task_description`,
        and optionally `node_id`, `inputs`, `metadata`). A front end that can
        show them at once does (an MCP task lists them all, and its client
        may answer them in any order); others ask them one after another.
        The first question that fails raises, as `request` would.
        """
        if not isinstance(questions, (list, tuple)) or not questions:
            raise TypeError("request_many takes a non-empty list of questions")
        asked = []
        for number, one in enumerate(questions):
            if not isinstance(one, dict) or "task_description" not in one:
                raise TypeError(f"question {number} must be a dict with a task_description")
            unknown = set(one) - {"node_id", "task_description", "inputs", "metadata"}
            if unknown:
                raise TypeError(f"question {number} has unknown keys: {', '.join(sorted(unknown))}")
            asked.append(self._question(one.get("node_id"), one["task_description"], one.get("inputs"), one.get("metadata")))
        answers = call(self._transport, HUMAN_PROMPT_MANY, {"prompts": [question for question, _ in asked]}) or []
        if not isinstance(answers, list) or len(answers) != len(asked):
            raise HumanPromptError("the front end did not answer every question")
        return [self._answer(answer or {}, meta) for answer, (_, meta) in zip(answers, asked)]

    def _question(self, node_id, task_description, inputs, metadata) -> tuple:
        """The callback's parameters for one question, and its metadata."""
        meta = dict(metadata or {})
        if self._session_id and "session_id" not in meta:
            meta["session_id"] = self._session_id
        if inputs is not None and not isinstance(inputs, str):
            inputs = json.dumps(results.to_jsonable(inputs), ensure_ascii=False, indent=2)
        return {
            "node_id": str(node_id or self._node_id or DEFAULT_NODE_ID),
            "task_description": str(task_description),
            "inputs": inputs,
            "metadata": results.to_jsonable(meta),
        }, meta

    def _answer(self, answer: dict, meta: dict):
        raw = answer.get("text")
        text = raw if isinstance(raw, str) else ("" if raw is None else str(raw))
        # As the original's service sanitises it: no lone surrogates.
        text = text.encode("utf-8", errors="ignore").decode("utf-8", errors="ignore")
        return self._result_type(
            text=text,
            blocks=[self._block_type.text_block(text)],
            metadata={**(answer.get("metadata") or {}), **meta},
        )


class ProgressReporter:
    """`_context["progress"]`: `progress(progress, total=None, message=None)`
    tells the caller how far the call has come (MCP `notifications/progress`).

    `progress` and `total` are finite numbers, `message` a string; each
    report's `progress` must be greater than the last one's (MCP requires it).
    A report that breaks a rule raises TypeError or ValueError, whether or
    not anyone listens. Safe from any thread; when the caller asked for no
    progress, a report is checked and goes nowhere (no round trip).
    """

    def __init__(self, transport: Transport, listening: bool):
        self._transport = transport
        self._listening = listening
        self._lock = threading.Lock()
        self._last = None

    def __call__(self, progress, total=None, message=None) -> None:
        _check_number("progress", progress)
        if total is not None:
            _check_number("total", total)
        if message is not None and not isinstance(message, str):
            raise TypeError(f"message must be a string or None, not {type(message).__name__}")
        # Held across the callback: two threads' reports reach the
        # supervisor in the order they were checked in.
        with self._lock:
            if self._last is not None and progress <= self._last:
                raise ValueError(f"progress must go up with each report: {progress} after {self._last}")
            self._last = progress
            if self._listening:
                call(self._transport, PROGRESS, {"progress": progress, "total": total, "message": message})

    def __repr__(self) -> str:
        return f"<toolpool progress reporter{'' if self._listening else ' (nobody listening)'}>"


def _check_number(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int too large for a float
        finite = False
    if not finite:
        raise ValueError(f"{name} must be a finite number, got {value}")
