"""What ``to_dict`` / ``from_dict`` do with the parts of a component that are not settings.

LlamaIndex's ``BaseComponent.to_dict`` serialises a component's pydantic fields, and
``from_dict(data, **kwargs)`` constructs it again from them and ``kwargs``. A component's
settings round-trip that way; its *parts* (an LLM client, an embedding model, a reranker, a
tokenizer) cannot: they hold connections, keys or models (LlamaIndex's own ``to_dict`` leaves
them out, so its ``from_dict`` builds a component without them). ``to_dict`` records each part that is
set by its class name only (never its key or contents), and ``from_dict`` takes it back from
the caller (``from_dict(data, llm=my_llm)``) or fails with
[`UnserializedPartError`][llama_index_hiqa.errors.UnserializedPartError] naming it, instead of constructing a
component that silently lost its LLM. A part left unset (``None``: the default, e.g.
``Settings.llm``) round-trips as ``None``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Iterable, Mapping, Tuple

from llama_index.core import Settings

from llama_index_hiqa.errors import UnserializedPartError

# The key of a recorded part's dictionary that says it was left out.
NOT_SERIALISED = "not_serialised"


def with_parts(data: Dict[str, Any], parts: Mapping[str, Any]) -> Dict[str, Any]:
    """``data`` (a ``to_dict``) with each part recorded by its class name, or ``None``.

    Args:
        data: the component's ``to_dict``.
        parts: part name -> the part the component holds (``None`` when unset).

    Returns:
        ``data``, changed in place.
    """
    for name, part in parts.items():
        data[name] = None if part is None or _is_global(part) else {"class_name": type(part).__name__, NOT_SERIALISED: True}
    return data


def _is_global(part: Any) -> bool:
    # LlamaIndex's global Settings.llm / embed_model, which a component resolved at
    # construction: not the component's own, so from_dict resolves it from Settings again.
    # The private attributes are read so that an unset Settings.llm is not resolved here.
    return part is getattr(Settings, "_llm", None) or part is getattr(Settings, "_embed_model", None)


def restored(component: str, data: Mapping[str, Any], supplied: Mapping[str, Any], parts: Iterable[str]) -> Dict[str, Any]:
    """The constructor arguments of ``from_dict``: ``data`` with the caller's parts.

    Args:
        component: the component's class name (named in the error).
        data: the ``to_dict`` dictionary.
        supplied: the keyword arguments given to ``from_dict``.
        parts: the component's part names.

    Returns:
        ``data`` updated with ``supplied``; an unset part is left out (its default).

    Raises:
        UnserializedPartError: a part recorded by ``to_dict`` was not supplied.
    """
    merged = {**data, **supplied}
    for name in parts:
        value = merged.get(name)
        if isinstance(value, Mapping) and value.get(NOT_SERIALISED):
            raise UnserializedPartError(component, name, str(value.get("class_name")))
        if value is None:
            merged.pop(name, None)
    return merged


def default_id_func(component: str, data: Dict[str, Any]) -> Dict[str, Any]:
    """``data`` without a node parser's serialised ``id_func`` when it is LlamaIndex's default
    (``NodeParser`` writes the function's name, which its own ``from_dict`` cannot read back).

    Args:
        component: the parser's class name (named in the error).
        data: the constructor arguments.

    Returns:
        ``data``, changed in place.

    Raises:
        UnserializedPartError: the parser had an ``id_func`` of its own.
    """
    id_func = data.get("id_func")
    if isinstance(id_func, Mapping):
        if id_func.get("id_func_name") != "default_id_func":
            raise UnserializedPartError(component, "id_func", f"function {id_func.get('id_func_name')}")
        del data["id_func"]
    return data


class PartsRoundTrip:
    """``to_dict`` / ``from_dict`` of a LlamaIndex component with parts (see the module).

    A component lists its parts in ``part_names``; ``held_parts`` reads them (override it for
    a part kept in a private attribute).
    """

    part_names: ClassVar[Tuple[str, ...]] = ()

    def held_parts(self) -> Dict[str, Any]:
        """The parts this component holds.

        Returns:
            Part name -> the part (``None`` when unset).
        """
        return {name: getattr(self, name) for name in self.part_names}

    def to_dict(self, **kwargs: Any) -> Dict[str, Any]:
        """LlamaIndex's ``to_dict``, each part recorded by its class name only.

        Args:
            **kwargs: passed to ``BaseComponent.to_dict``.

        Returns:
            The dictionary.
        """
        return with_parts(super().to_dict(**kwargs), self.held_parts())  # type: ignore[misc]

    @classmethod
    def from_dict(cls, data: Dict[str, Any], **kwargs: Any) -> Any:
        """The component again from ``to_dict``'s dictionary and the parts passed here.

        Args:
            data: the dictionary.
            **kwargs: the parts (``llm=...``) and any settings to override.

        Returns:
            The component.

        Raises:
            UnserializedPartError: a part that was set is not passed back.
        """
        merged = default_id_func(cls.__name__, restored(cls.__name__, data, kwargs, cls.part_names))
        return super().from_dict(merged)  # type: ignore[misc]
