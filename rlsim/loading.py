"""Validate a parsed YAML document against a pydantic model; every failure becomes a Problem with file, line and field."""
from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from rlsim.errors import Problem, ScenarioError
from rlsim.fields import Variants
from rlsim.yamlsource import PathKey, YamlDocument

ModelT = TypeVar("ModelT", bound=BaseModel)


def validate_document(model: type[ModelT], doc: YamlDocument, *, context: dict | None = None) -> ModelT:
    """Validate `doc.data` as `model`; raise ScenarioError naming file, line and field for each error."""
    if not isinstance(doc.data, dict):
        raise ScenarioError(
            Problem(
                f"expected a mapping of fields at the top level, found {_kind(doc.data)}",
                file=doc.file,
                line=doc.line_of(()),
                value=doc.data,
                valid=f"a mapping with keys {', '.join(model.model_fields)}",
            )
        )
    try:
        return model.model_validate(doc.data, context=context)
    except ValidationError as exc:
        problems = [problem_from_error(model, doc, error) for error in exc.errors(include_url=False)]
        problems.sort(key=lambda p: (p.line if p.line is not None else 10**9))
        raise ScenarioError(problems) from None


def closest(word: str, options: typing.Iterable[str]) -> str | None:
    """The option a typo most likely meant, or None when nothing is close."""
    options = list(options)
    lowered = {o.lower(): o for o in options}
    match = difflib.get_close_matches(str(word).lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


def problem_from_error(model: type[BaseModel], doc: YamlDocument, error: Mapping[str, Any]) -> Problem:
    path, parent = _yaml_path(model, error["loc"])
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    valid = suggestion = None
    if kind == "extra_forbidden":
        key = str(path[-1])
        fields = _field_names(parent)
        message = f"unknown field {key!r}"
        suggestion = closest(key, fields)
        valid = ", ".join(fields) if fields else None
        value = key
    elif kind == "missing":
        message = "required field is missing"
        value = None
    elif kind == "literal_error":
        options = [o.strip().strip("'") for o in str(ctx.get("expected", "")).replace(" or ", ", ").split(",")]
        message = f"{value!r} is not one of the choices"
        valid = ", ".join(o for o in options if o)
        suggestion = closest(str(value), options) if isinstance(value, str) else None
    elif kind == "union_tag_invalid":
        options = [o.strip().strip("'") for o in str(ctx.get("expected_tags", "")).split(",")]
        message = f"{ctx.get('tag')!r} is not a known {ctx.get('discriminator', 'kind').strip(chr(39))}"
        valid = ", ".join(options)
        suggestion = closest(str(ctx.get("tag")), options)
        value = ctx.get("tag")
    elif kind == "union_tag_not_found":
        message = f"needs a {ctx.get('discriminator', 'kind')!s} field to say which variant this is"
    elif kind in {"model_type", "model_attributes_type", "dict_type"}:
        message = f"expected a mapping of fields, found {_kind(value)}"
        fields = _field_names(_target_model(model, error["loc"]))
        valid = f"a mapping with keys {', '.join(fields)}" if fields else "a mapping"
    elif kind == "list_type":
        message = f"expected a list, found {_kind(value)}"
    else:
        message = str(error["msg"]).removeprefix("Value error, ")
        if "valid" in ctx:
            valid = str(ctx["valid"])
        if ctx.get("suggestion"):
            suggestion = str(ctx["suggestion"])
        if not isinstance(value, (dict, list)) and "got" not in message:
            message += f" (got {value!r})"
    return doc.problem(path, message, value=value, valid=valid, suggestion=suggestion)


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


def _field_names(model: type[BaseModel] | None) -> list[str]:
    if model is None:
        return []
    return [info.alias or name for name, info in model.model_fields.items()]


def _yaml_path(model: type[BaseModel], loc: tuple) -> tuple[PathKey, type[BaseModel] | None]:
    """Strip pydantic's union-member tags from `loc`, giving the path as written in YAML and the model owning its last key."""
    path: list[str | int] = []
    current: Any = model
    parent: type[BaseModel] | None = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, _UnionOf):
            member = current.member(part)
            if member is not None:
                current = member
                continue
            current = None
        if _is_model(current):
            parent = current
            field = current.model_fields.get(part) if isinstance(part, str) else None
            path.append(part)
            current = _annotation(field) if field is not None else None
        elif isinstance(current, _ContainerOf):
            path.append(part)
            current = current.item
        else:
            path.append(part)
            current = None
    return tuple(path), parent


def _target_model(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model expected at `loc` (used to list its keys when a scalar was given instead)."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, _UnionOf):
            current = current.member(part) or current
            if isinstance(current, _UnionOf):
                continue
        if _is_model(current):
            field = current.model_fields.get(part) if isinstance(part, str) else None
            current = _annotation(field) if field is not None else None
        elif isinstance(current, _ContainerOf):
            current = current.item
    current = _unwrap(current)
    if isinstance(current, _UnionOf):
        models = [m for m in current.members if _is_model(m)]
        return models[0] if len(models) == 1 else None
    return current if _is_model(current) else None


def _annotation(field: FieldInfo) -> Any:
    """A field's type with the metadata pydantic keeps apart (a bare `Annotated[T, Variants(...)]` field's)."""
    return typing.Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation


class _UnionOf:
    def __init__(self, members: list[Any]):
        self.members = members

    def member(self, tag: object) -> Any:
        for candidate in self.members:
            if _is_model(candidate):
                kind_field = candidate.model_fields.get("kind")
                if kind_field is not None and typing.get_args(kind_field.annotation) == (tag,):
                    return candidate
                if candidate.__name__ == tag:
                    return candidate
            elif getattr(candidate, "__name__", None) == tag:
                return candidate
        return None


class _ContainerOf:
    def __init__(self, item: Any):
        self.item = item


def _is_model(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseModel)


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation, *metadata = typing.get_args(annotation)
            variants = [m for m in metadata if isinstance(m, Variants)]
            if variants:
                return _UnionOf(list(variants[0].members()))
            continue
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) == 1:
                annotation = members[0]
                continue
            return _UnionOf([_unwrap_plain(m) for m in members])
        if origin in (list, tuple, set, frozenset):
            args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
            return _ContainerOf(args[0] if args else Any)
        if origin is dict:
            return _ContainerOf(typing.get_args(annotation)[1])
        return annotation


def _unwrap_plain(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation
