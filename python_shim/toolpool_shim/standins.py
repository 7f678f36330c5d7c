"""Which classes the `_context` services are instances of: the project's own, or toolpool's.

Tool folders written for the original convention check their context:
`isinstance(ctx["attachment_store"], AttachmentStore)` with the project's own
`utils.attachments.AttachmentStore`. When the project provides that class
(and `utils.human_prompt.HumanPromptService`, `entity.messages.MessageBlock`),
the proxies are made subclasses of it, and build the project's own record
types from what the supervisor answers. A project class that cannot be stood
in for (it cannot be subclassed, its record type has another shape) is a
warning in the catalog, naming the class and what is missing, and toolpool's
own class is used for that service.

Only modules that the project itself provides count: toolpool's compatibility
modules (python_shim/compat) answer the same names when the project has none.
"""

import dataclasses
import importlib
import importlib.util
import os
import sys
import traceback

from . import proxies, records

COMPAT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "compat")


@dataclasses.dataclass
class Classes:
    """The classes a worker's `_context` services and attachment results are made of."""

    store: type
    prompt: type
    # Every class a result may be an instance of to count as an attachment result.
    blocks: tuple
    records: tuple
    warnings: list  # [{"module", "file", "warning"}]


class _Unusable(Exception):
    """A project class toolpool cannot stand in for; the message says what is missing."""


class AttachmentStore(proxies.StoreProxy):
    """toolpool's own attachment store class (`utils.attachments.AttachmentStore` when the project has none)."""

    _record_type = records.AttachmentRecord


class HumanPromptService(proxies.PromptProxy):
    """toolpool's own human prompt service class (`utils.human_prompt.HumanPromptService` when the project has none)."""

    _result_type = records.PromptResult
    _block_type = records.MessageBlock


def own() -> Classes:
    """toolpool's classes only: for a project without classes of its own."""
    return Classes(AttachmentStore, HumanPromptService, (records.MessageBlock,), (records.AttachmentRecord,), [])


def resolve() -> Classes:
    """The classes to use, after the tool modules were imported (they may have imported the project's)."""
    classes = own()
    warnings = classes.warnings
    entity = _project_module("entity.messages", warnings)
    block_type = _attribute(entity, "MessageBlock", warnings)
    if block_type is not None:
        classes.blocks += (block_type,)
    attachments = _project_module("utils.attachments", warnings)
    if attachments is not None:
        try:
            classes.store = _store_stand_in(attachments)
            classes.records += (attachments.AttachmentRecord,)
        except _Unusable as unusable:
            warnings.append(_warning(attachments, str(unusable)))
    prompts = _project_module("utils.human_prompt", warnings)
    if prompts is not None:
        try:
            classes.prompt = _prompt_stand_in(prompts, block_type or records.MessageBlock)
        except _Unusable as unusable:
            warnings.append(_warning(prompts, str(unusable)))
    for warning in warnings:
        print(f"toolpool: {warning['module']}: {warning['warning']}", file=sys.stderr)
    return classes


def _project_module(name: str, warnings: list):
    """The project's module `name`, imported; None when only toolpool's compatibility module has that name."""
    module = sys.modules.get(name)
    if module is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # no such package at all
            return None
        except Exception as exc:
            warnings.append({"module": name, "file": "", "warning": f"cannot be looked up: {_describe(exc)}"})
            return None
        if spec is None or _is_compat(spec.origin):
            return None
        try:
            module = importlib.import_module(name)
        except BaseException as exc:  # SystemExit too: a project module never ends the worker
            warnings.append({"module": name, "file": spec.origin or "", "warning": (
                f"cannot be imported ({_describe(exc)}); toolpool's own classes are used instead"
            )})
            return None
    return None if _is_compat(getattr(module, "__file__", None)) else module


def _is_compat(path) -> bool:
    return bool(path) and os.path.abspath(path).startswith(COMPAT_DIR + os.sep)


def _attribute(module, name: str, warnings: list):
    if module is None:
        return None
    value = getattr(module, name, None)
    if isinstance(value, type):
        return value
    warnings.append(_warning(module, f"has no class {name}; toolpool's own is used instead"))
    return None


def _store_stand_in(module) -> type:
    project_store = _class(module, "AttachmentStore")
    record_type = _class(module, "AttachmentRecord")
    for method in ("from_dict", "as_message_block", "to_dict"):
        if not callable(getattr(record_type, method, None)):
            raise _Unusable(f"AttachmentRecord has no {method}(): the attachment store proxy cannot return its records")
    try:
        record = record_type.from_dict({"ref": {"attachment_id": "probe", "name": "probe.txt"}, "kind": "file"})
        if record.ref.attachment_id != "probe":
            raise _Unusable("AttachmentRecord.from_dict does not keep ref.attachment_id")
        record.as_message_block()
    except _Unusable:
        raise
    except Exception as exc:
        raise _Unusable(f"AttachmentRecord.from_dict of a plain record failed: {_describe(exc)}") from None
    stand_in = _subclass(proxies.StoreProxy, project_store, {"_record_type": record_type})
    try:
        stand_in("/nonexistent-probe")
    except Exception as exc:
        raise _Unusable(f"a stand-in for AttachmentStore cannot be made: {_describe(exc)}") from None
    return stand_in


def _prompt_stand_in(module, block_type: type) -> type:
    project_service = _class(module, "HumanPromptService")
    result_type = _class(module, "PromptResult")
    if not callable(getattr(block_type, "text_block", None)):
        raise _Unusable(f"{block_type.__module__}.{block_type.__name__} has no text_block(): answers cannot be built")
    try:
        result_type(text="probe", blocks=[block_type.text_block("probe")], metadata={})
    except Exception as exc:
        raise _Unusable(f"PromptResult(text=, blocks=, metadata=) failed: {_describe(exc)}") from None
    stand_in = _subclass(proxies.PromptProxy, project_service, {"_result_type": result_type, "_block_type": block_type})
    try:
        stand_in()
    except Exception as exc:
        raise _Unusable(f"a stand-in for HumanPromptService cannot be made: {_describe(exc)}") from None
    return stand_in


def _class(module, name: str) -> type:
    value = getattr(module, name, None)
    if not isinstance(value, type):
        raise _Unusable(f"has no class {name}")
    return value


def _subclass(proxy: type, project_class: type, attributes: dict) -> type:
    """`project_class` with the proxy's methods first: isinstance holds, the project's code is not run."""
    try:
        return type(project_class.__name__, (proxy, project_class), {
            "__module__": project_class.__module__,
            "__qualname__": project_class.__qualname__,
            "__doc__": proxy.__doc__,
            **attributes,
        })
    except Exception as exc:
        raise _Unusable(f"{project_class.__name__} cannot be subclassed: {_describe(exc)}") from None


def _warning(module, text: str) -> dict:
    return {"module": module.__name__, "file": getattr(module, "__file__", "") or "", "warning": text}


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = "<str() failed>"
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" at {os.path.basename(where[0].filename)}:{where[0].lineno}" if where else ""
    return f"{type(exc).__name__}: {text}{at}"
