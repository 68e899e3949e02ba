"""Turn a pydantic ValidationError into one line per problem: `field.path: what is wrong (the value)`.

The path uses the manifest's names (camelCase aliases, `[i]` for list items), so a message reads like
the YAML the user wrote, e.g. `spec.rules.emptyGroupRetention: invalid duration '0s': must be positive`.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails


def validation_messages(
    error: ValidationError,
    model: type[BaseModel],
    missing: Mapping[str, tuple[str, str]] | None = None,
) -> list[str]:
    """One message per error, each naming the field path and the offending value.

    `missing` replaces the generic "required field is missing" of a path (e.g. `spec.selector`) with
    `(path to name, explanation)`, so a missing parent can name the field the user must write.
    """
    details = error.errors(include_url=False)
    # An optional field is a union with None; its "should be None" branch error is noise.
    useful = [d for d in details if d["type"] != "none_required"] or details
    return [_one_message(detail, model, missing or {}) for detail in useful]


def _one_message(detail: ErrorDetails, model: type[BaseModel], missing: Mapping[str, tuple[str, str]]) -> str:
    path, parent = _path_and_parent(detail["loc"], model)
    if detail["type"] == "missing" and path in missing:
        named, explanation = missing[path]
        return f"{named}: {explanation}"
    return f"{path or '(document)'}: {_describe(detail, parent)}"


def _path_and_parent(
    loc: tuple[int | str, ...], model: type[BaseModel]
) -> tuple[str, type[BaseModel] | None]:
    """The dotted manifest path of `loc`, plus the model that holds its last element."""
    path = ""
    current: type[BaseModel] | None = model
    parent: type[BaseModel] | None = model
    for element in loc:
        parent = current
        if isinstance(element, int):
            path += f"[{element}]"
            continue
        if _is_union_tag(element, current):
            continue
        name = element
        next_model: type[BaseModel] | None = None
        if current is not None:
            for field_name, field in current.model_fields.items():
                if element in (field_name, field.alias):
                    name = field.alias or field_name
                    next_model = _model_in(field.annotation)
                    break
        path = f"{path}.{name}" if path else name
        current = next_model
    return path, parent


def _is_union_tag(element: str, current: type[BaseModel] | None) -> bool:
    """pydantic adds the union member it tried (`none`, `SecretReference`, `function-plain[...]`)."""
    if current is not None and element == current.__name__:
        return True
    return element == "none" or "[" in element


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, tuple, Sequence):
        for argument in typing.get_args(annotation):
            found = _model_in(argument)
            if found is not None:
                return found
    return None


def _describe(detail: ErrorDetails, parent: type[BaseModel] | None) -> str:
    kind = detail["type"]
    value = detail.get("input")
    message = detail["msg"]
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        text = f"unknown field (value {show_value(value)})"
        return text + _suggestion(detail["loc"], parent)
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping, got {show_value(value)}"
    return f"{message[:1].lower()}{message[1:]}, got {show_value(value)}"


def _suggestion(loc: tuple[int | str, ...], parent: type[BaseModel] | None) -> str:
    if parent is None or not loc or not isinstance(loc[-1], str):
        return ""
    known = [field.alias or name for name, field in parent.model_fields.items()]
    close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def show_value(value: object, limit: int = 80) -> str:
    """A short repr of a user-supplied value for an error message."""
    if isinstance(value, Mapping):
        text = "{" + ", ".join(f"{k}: {v!r}" for k, v in value.items()) + "}"
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
