"""One way to change a settings model: [`updated`][llama_index_hiqa.settings.updated].

Every settings model of the package (the [`HiQAPackConfig`][llama_index_hiqa.pack_config.HiQAPackConfig] tree and the
component configs it holds) is immutable in practice: a component or a call that needs other
settings builds a new, validated model from the old one and the changes, here.
"""

from __future__ import annotations

from typing import Any, Optional, Type, TypeVar

from llama_index.core.bridge.pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def updated(model: Optional[M], changes: Optional[dict] = None, *, model_class: Optional[Type[M]] = None, **settings: Any) -> M:
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
        pydantic.ValidationError: A setting is unknown or its value is invalid (a
            ``ValueError``).
    """
    if model is None:
        if model_class is None:
            raise TypeError("updated(None, ...) needs model_class=")
        return model_class(**{**(changes or {}), **settings})
    return type(model)(**{**model.model_dump(), **(changes or {}), **settings})
