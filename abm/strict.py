"""What every config section and every policy's parameters share: numbers and flags as written, and a
"did you mean" for a misspelled name.

Pydantic's lax mode reads ``true`` as 1, ``"7"`` as 7 and ``1`` as true; a scenario file that
writes one of those is almost always a mistake, so ``refuse_loose_scalars`` (a ``mode="before"``
model validator's body) refuses it with the field's name. It sits at the bottom of the layers,
so the scenario schema (``abm.config``) and the policy protocol (``policies.base``) both use it.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticCustomError

_EXPONENT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def _loose_scalar(annotation: Any, value: Any) -> str | None:
    """Why ``value`` is a surprising spelling of a number or flag for ``annotation``, or None
    when it is fine."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if value is None:
            return None
        reasons = [_loose_scalar(a, value) for a in options]
        return None if any(r is None for r in reasons) else reasons[0]
    if origin in (list, tuple) and isinstance(value, (list, tuple)):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        if len(args) == 1 or (origin is tuple and len(set(args)) == 1):
            return next((r for r in (_loose_scalar(args[0], v) for v in value) if r), None)
        return None
    shown = ("true" if value else "false") if isinstance(value, bool) else repr(value)
    if annotation is float and isinstance(value, str) and _EXPONENT.match(value):
        return None  # YAML 1.1 reads 1e6 (no dot) as text; it is a number as written (YAML 1.2)
    if annotation in (int, float) and (isinstance(value, bool) or isinstance(value, str)):
        return f"expected a number, got {shown}"
    if annotation is bool and not isinstance(value, bool):
        return f"expected true or false, got {shown}"
    return None


def refuse_loose_scalars(model: type[BaseModel], data: Any) -> Any:
    """A ``mode="before"`` check: numbers must be numbers and flags true/false, as written in the
    YAML (no ``"7"`` for 7, no ``true`` for 1, no ``1`` for true)."""
    if isinstance(data, dict):
        for name, info in model.model_fields.items():
            key = info.alias or name
            if key in data:
                reason = _loose_scalar(info.annotation, data[key])
                if reason:  # the message's formatter (format_validation_error) adds the key to the path
                    raise PydanticCustomError("loose_scalar", "{key}: {reason}", {"key": key, "reason": reason})
    return data


def did_you_mean(word: Any, choices) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to a misspelled ``word``, else ''."""
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's annotation holds (through Optional, unions, lists, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models_in(a)]


def fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The field names (aliases where set) of the model at ``loc`` under ``model``: where an
    unknown key stood, the keys that would have been known. List indices are stepped over."""
    models = [model]
    for part in loc:
        if isinstance(part, int):
            continue
        models = [m for parent in models for name, info in parent.model_fields.items()
                  if part in (name, info.alias) for m in _models_in(info.annotation)]
    return sorted({info.alias or name for m in models for name, info in m.model_fields.items()})
