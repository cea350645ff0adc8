"""The pack's object arguments checked where they are given, not where they are first used.

``HiQAPackSettings`` checks every setting that is a value. The objects a caller passes beside
it — the LLM, the embedding model, the vector store, the store location, the documents — were
used unchecked: ``llm="gpt-4"`` failed at the first question, ``vector_store="x"`` and
``store=123`` after a whole folder was ingested, ``add_documents(["text"])`` deep inside the
pipeline. Each is an [`InvalidSettingError`][llama_index_hiqa.errors.InvalidSettingError] naming the argument
and what to pass instead.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Iterator

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import Document
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_hiqa.errors import InvalidSettingError


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:80]


def check_pack_arguments(llm: Any = None, embed_model: Any = None, vector_store: Any = None, store: Any = None) -> None:
    """Check the types of a pack's component arguments.

    ``None`` is always accepted: the defaults apply.

    Args:
        llm: a LlamaIndex ``LLM`` or ``None``.
        embed_model: a LlamaIndex ``BaseEmbedding`` or ``None``.
        vector_store: a LlamaIndex vector store (``BasePydanticVectorStore``) or ``None``.
        store: a folder path or a ``postgresql://`` URL, or ``None``.

    Raises:
        InvalidSettingError: the first argument of the wrong type (names it; a model name given
            as ``llm`` gets a hint to use [`llm_from_spec`][llama_index_hiqa.models.llm_spec.llm_from_spec]).
    """
    if llm is not None and not isinstance(llm, LLM):
        hint = (
            f"; for a model name use llm_from_spec('openai:{llm}') or --llm openai:{llm}"
            if isinstance(llm, str) else ""
        )
        raise InvalidSettingError("llm", f"expected a LlamaIndex LLM (e.g. OpenAI(model=...)) or None, got {_shown(llm)}{hint}")
    if embed_model is not None and not isinstance(embed_model, BaseEmbedding):
        raise InvalidSettingError(
            "embed_model", f"expected a LlamaIndex embedding model (BaseEmbedding) or None, got {_shown(embed_model)}"
        )
    if vector_store is not None and not isinstance(vector_store, BasePydanticVectorStore):
        raise InvalidSettingError(
            "vector_store",
            f"expected a LlamaIndex vector store (e.g. MatrixVectorStore(), a QdrantVectorStore) or None, "
            f"got {_shown(vector_store)}",
        )
    if store is not None:
        check_location("store", store)


def check_location(name: str, value: Any) -> None:
    """Check that a store location or a folder argument is a path (or a URL string).

    Args:
        name: the argument's name, for the error.
        value: what was given.

    Raises:
        InvalidSettingError: ``value`` is not a string or a path.
    """
    if not isinstance(value, (str, os.PathLike)):
        raise InvalidSettingError(name, f"expected a folder path or a postgresql:// URL, got {_shown(value)}")


def checked_documents(documents: Iterable[Any]) -> Iterator[Document]:
    """``documents`` one at a time, each checked to be a LlamaIndex ``Document``.

    A generator stays lazy: the first wrong item stops ingestion before its batch is parsed.

    Args:
        documents: an iterable of Documents (a list or a generator).

    Yields:
        Each document, in order.

    Raises:
        InvalidSettingError: ``documents`` is not an iterable (or is a string), or an item is
            not a Document (names ``documents[i]``).
    """
    if isinstance(documents, (str, bytes, Document)) or not hasattr(documents, "__iter__"):
        raise InvalidSettingError(
            "documents", f"expected an iterable of LlamaIndex Documents (a list or a generator), got {_shown(documents)}"
        )
    for i, document in enumerate(documents):
        if not isinstance(document, Document):
            raise InvalidSettingError(
                f"documents[{i}]",
                f"expected a LlamaIndex Document, got {_shown(document)}; wrap text as Document(text=...)"
                if isinstance(document, str) else f"expected a LlamaIndex Document, got {_shown(document)}",
            )
        yield document
