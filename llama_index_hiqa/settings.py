"""The settings models of the package: one base that refuses a bad value where it is written
([`SettingsModel`][llama_index_hiqa.settings.SettingsModel]), and one way to change a settings model ([`updated`][llama_index_hiqa.settings.updated]).

Every settings model of the package (the [`HiQAPackSettings`][llama_index_hiqa.pack.config.HiQAPackSettings] tree and the
component configs it holds) is immutable in practice: a component or a call that needs other
settings builds a new, validated model from the old one and the changes, here.
"""

from __future__ import annotations

import typing
from typing import Any, Dict, List, Mapping, Optional, Sequence, Type, TypeVar

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails

from llama_index_hiqa.errors import InvalidSettingError

M = TypeVar("M", bound=BaseModel)

# pydantic's bound checks, said as the field declares them.
_COMPARISONS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}


class SettingsModel(BaseModel):
    """A settings model: typed fields, each bounded where it is declared; an unknown key or a
    value out of range fails at construction as one
    `InvalidSettingError` naming the setting by its path
    (``multi_route.beta``) and its valid range, however deep it is given."""

    # A misspelt setting is an error, not a silently ignored keyword; NaN and infinity lie in
    # no range.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise invalid_setting(type(self), exc) from None


def invalid_setting(model: Type[BaseModel], exc: ValidationError) -> InvalidSettingError:
    """pydantic's errors of ``model`` as one `InvalidSettingError`: the first setting's
    path (a nested part's errors keep their own path under the part's name), what it must be
    (the alternatives of a union joined by "or") and the value given.

    Args:
        model: the settings class being built.
        exc: pydantic's error.

    Returns:
        The error to raise.
    """
    said: Dict[str, List[str]] = {}
    given: Dict[str, str] = {}
    for error in exc.errors():
        cause = (error.get("ctx") or {}).get("error")
        path = _path(model, error["loc"])
        if isinstance(cause, InvalidSettingError):  # a nested settings model said it already
            path, reason = ".".join(p for p in (path, cause.setting) if p), cause.reason
        else:
            reason = _reason(model, error, path)
            if error["type"] not in ("value_error", "extra_forbidden"):
                shown = repr(error.get("input"))
                given.setdefault(path, shown if len(shown) <= 60 else shown[:57] + "...")
        reasons = said.setdefault(path, [])
        if reason not in reasons:
            reasons.append(reason)

    def sentence(path: str) -> str:
        first, *rest = said[path]
        text = " or ".join([first] + [r[len("must be "):] if r.startswith("must be ") else r for r in rest])
        return f"{text} (got {given[path]})" if path in given else text

    first, *others = said
    reason = sentence(first) + "".join(f"; also {path or 'settings'}: {sentence(path)}" for path in others)
    return InvalidSettingError(first or "settings", reason)


def _path(model: Type[BaseModel], loc: Sequence[Any]) -> str:
    """The dotted path of an error's location, without pydantic's union-member tags."""
    parts: List[str] = []
    annotation: Any = model
    for item in loc:
        fields = getattr(annotation, "model_fields", None) if isinstance(annotation, type) else None
        if fields is not None and item in fields:
            parts.append(str(item))
            annotation = _inner_model(fields[item].annotation)
        elif isinstance(item, int) or typing.get_origin(annotation) in (dict, typing.Dict):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{item!r}]"]
            annotation = None
        elif fields is not None:  # an unknown key of a model (extra="forbid")
            parts.append(str(item))
    return ".".join(parts)


def _inner_model(annotation: Any) -> Any:
    """The settings model inside ``annotation`` (``Optional[Part]``), else the annotation."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return annotation


def _reason(model: Type[BaseModel], error: ErrorDetails, path: str) -> str:
    """What the setting at ``path`` must be, in the words of its declaration."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind in _COMPARISONS:
        return f"must be {_COMPARISONS[kind]} {next(iter(ctx.values()))}"
    if kind == "extra_forbidden":
        owner = _owner(model, path)
        known = ", ".join(getattr(owner, "model_fields", {})) or "none"
        return f"is not a setting of {getattr(owner, '__name__', 'this part')} (its settings: {known})"
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message[len(prefix):] if message.startswith(prefix) else message
    return message.replace("Input should be", "must be")


def _owner(model: Type[BaseModel], path: str) -> Any:
    """The settings model that holds the last key of ``path``."""
    for name in path.split(".")[:-1]:
        fields = getattr(model, "model_fields", {})
        model = _inner_model(fields[name].annotation) if name in fields else model
    return model


def updated(model: Optional[M], changes: Optional[Mapping[str, Any]] = None, *, model_class: Optional[Type[M]] = None, **settings: Any) -> M:
    """A validated copy of ``model`` with ``settings`` (and ``changes``) replacing its values.

    Unlike pydantic's ``model_copy(update=...)``, the result is validated: a misspelt key or a
    bad value fails here, naming itself. A nested setting given as a whole (``multi_route={...}``)
    replaces the nested model as a whole, as a fresh construction would.

    Args:
        model: The settings to start from; ``None`` starts from ``model_class()``'s defaults.
        changes: Settings to apply, as a mapping (for keys that are not identifiers).
        model_class: The settings class when ``model`` may be ``None``.
        **settings: Settings to apply, by name.

    Returns:
        A new model of ``model``'s class (or ``model_class``).

    Raises:
        InvalidSettingError: A setting is unknown or its value is invalid (a ``ValueError``;
            a model that is not a `SettingsModel` raises pydantic's ``ValidationError``).
    """
    if model is None:
        if model_class is None:
            raise TypeError("updated(None, ...) needs model_class=")
        return model_class(**{**(changes or {}), **settings})
    return type(model)(**{**model.model_dump(), **(changes or {}), **settings})

