"""The named values an agent fills, read from resolved type hints: a function's
parameters (`describe`) and the fields of a nested dataclass, TypedDict or
pydantic model (`struct_slots`)."""

import dataclasses
import functools
import inspect
import sys
import typing
from typing import Annotated, Any

from .typeinfo import EMPTY, is_optional, Kind, kind_of


@dataclasses.dataclass(frozen=True)
class Slot:
    """One named value. When the agent leaves it out: `required` → an error;
    `may_omit` → nothing is passed and the callee's own default applies;
    otherwise (optional without a default) → None is passed."""

    name: str
    annotation: Any = EMPTY
    required: bool = False
    may_omit: bool = False
    default: Any = EMPTY  # EMPTY when there is no plain default value
    description: str | None = None
    positional_only: bool = False


@dataclasses.dataclass(frozen=True)
class Signature:
    visible: tuple         # Slots the agent may set, in declaration order
    takes_kwargs: bool     # **kwargs: unknown arguments are passed through
    takes_context: bool    # gets `_context` (declares it, or takes **kwargs)
    returns: Any = EMPTY   # the resolved return annotation


def describe(func) -> Signature:
    """A function's parameters as the agent sees them: no `_` names, no *args/**kwargs."""
    signature = inspect.signature(func)
    hints = resolved_hints(func, f"{func.__module__}.{func.__qualname__}")
    visible = []
    takes_kwargs = declares_context = False
    for param in signature.parameters.values():
        if param.kind is param.VAR_KEYWORD:
            takes_kwargs = True
        elif param.kind is param.VAR_POSITIONAL:
            continue
        elif param.name.startswith("_"):
            if param.name == "_context" and param.kind is not param.POSITIONAL_ONLY:
                declares_context = True
        else:
            annotation = hints.get(param.name, EMPTY)
            has_default = param.default is not EMPTY
            visible.append(Slot(
                name=param.name,
                annotation=annotation,
                required=not has_default and not is_optional(annotation),
                may_omit=has_default,
                default=param.default,
                positional_only=param.kind is param.POSITIONAL_ONLY,
            ))
    return Signature(tuple(visible), takes_kwargs, declares_context or takes_kwargs, hints.get("return", EMPTY))


@functools.lru_cache(maxsize=None)
def struct_slots(cls) -> tuple:
    """The fields of a dataclass, TypedDict or pydantic model (computed once per class)."""
    kind = kind_of(cls)
    if kind is Kind.DATACLASS:
        return _dataclass_slots(cls)
    if kind is Kind.TYPEDDICT:
        return _typeddict_slots(cls)
    return _pydantic_slots(cls)


def _dataclass_slots(cls) -> tuple:
    hints = resolved_hints(cls, cls.__qualname__)
    slots = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        annotation = hints.get(field.name, EMPTY)
        has_default = field.default is not dataclasses.MISSING
        may_omit = has_default or field.default_factory is not dataclasses.MISSING
        slots.append(Slot(
            name=field.name,
            annotation=annotation,
            required=not may_omit and not is_optional(annotation),
            may_omit=may_omit,
            default=field.default if has_default else EMPTY,
        ))
    return tuple(slots)


def _typeddict_slots(cls) -> tuple:
    required_keys = cls.__required_keys__
    return tuple(
        Slot(name=name, annotation=annotation, required=name in required_keys, may_omit=name not in required_keys)
        for name, annotation in resolved_hints(cls, cls.__qualname__).items()
    )


def _pydantic_slots(cls) -> tuple:
    slots = []
    for name, field in cls.model_fields.items():
        # pydantic keeps Annotated metadata (a ParamMeta among it) in field.metadata.
        annotation = field.annotation
        if field.metadata:
            annotation = Annotated[(annotation, *field.metadata)]
        required = field.is_required()
        plain_default = not required and field.default_factory is None
        slots.append(Slot(
            name=field.alias or name,
            annotation=annotation,
            required=required,
            may_omit=not required,
            default=field.default if plain_default else EMPTY,
            description=field.description,
        ))
    return tuple(slots)


def resolved_hints(obj, owner: str) -> dict:
    """typing.get_type_hints(obj, include_extras=True), one annotation at a time if that fails.

    An annotation that cannot be resolved (a name that is not defined, a typo
    in a string annotation) is left out, as if it were not there, and logged
    to stderr: one bad annotation must not take the whole catalog down.
    """
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except Exception:
        pass
    hints = {}
    for annotations, globalns, localns in _annotation_sources(obj):
        for name, annotation in annotations.items():
            try:
                hints[name] = _resolve_one(name, annotation, globalns, localns)
            except Exception as exc:
                hints.pop(name, None)
                print(
                    f"toolpool: {owner}: cannot resolve the annotation of {name!r} "
                    f"({type(exc).__name__}: {exc}); treating it as unannotated",
                    file=sys.stderr,
                )
    return hints


def _annotation_sources(obj):
    """(raw annotations, globals, locals) for a function, or for each class in an MRO."""
    if not isinstance(obj, type):
        func = inspect.unwrap(obj)
        yield getattr(obj, "__annotations__", {}), getattr(func, "__globals__", {}), None
        return
    for cls in reversed(obj.__mro__):
        module = sys.modules.get(cls.__module__)
        yield cls.__dict__.get("__annotations__", {}), getattr(module, "__dict__", {}), dict(vars(cls))


class _AnnotationHolder:
    """Lets typing.get_type_hints resolve a single annotation."""

    def __init__(self, name, annotation):
        self.__annotations__ = {name: annotation}


def _resolve_one(name, annotation, globalns, localns):
    holder = _AnnotationHolder(name, annotation)
    return typing.get_type_hints(holder, globalns, localns, include_extras=True)[name]
