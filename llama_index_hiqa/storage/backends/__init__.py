"""Store backends: the objects [`HiQAPack`][llama_index_hiqa.pack.HiQAPack] holds for the place its nodes live.

Each implements [`StoreBackend`][llama_index_hiqa.storage.backends.base.StoreBackend]:
[`FolderBackend`][llama_index_hiqa.storage.backends.folder.FolderBackend] (in memory, saved as snapshots of
a folder; any LlamaIndex vector store),
[`EmbeddedBackend`][llama_index_hiqa.storage.backends.embedded.EmbeddedBackend] (SQLite and memory-mapped
vectors in a folder) and [`PostgresBackend`][llama_index_hiqa.storage.backends.postgres.PostgresBackend].
[`open_backend`][llama_index_hiqa.storage.backends.open_backend] picks one for a ``store`` argument. The leaf stores they are built on
(``storage/*.py``) never import a backend, and no backend imports the pack.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_hiqa.errors import InvalidSettingError
from llama_index_hiqa.pack_config import HiQAPackConfig
from llama_index_hiqa.settings import updated
from llama_index_hiqa.storage.backends.base import Resolvers, StoreBackend


def is_database(store: Any) -> bool:
    """Whether ``store`` names a PostgreSQL database rather than a folder.

    Args:
        store: A ``store`` argument.

    Returns:
        ``True`` for a ``postgresql://`` URL.
    """
    from llama_index_hiqa.storage.postgres import is_postgres_url

    return is_postgres_url(store)


def store_kind(store: Any, settings: Mapping[str, Any]) -> Optional[str]:
    """``"database"``, ``"embedded"`` (asked for, or the folder holds one already), ``"folder"``
    or ``None`` (no store).

    Args:
        store: A ``store`` argument.
        settings: ``HiQAPackConfig`` fields (``store_format``).

    Returns:
        The kind.
    """
    if store is None:
        return None
    if is_database(store):
        return "database"
    from llama_index_hiqa.storage.embedded import is_embedded_store

    if settings.get("store_format") == "embedded" or is_embedded_store(store):
        return "embedded"
    return "folder"


def open_backend(
    store: Any,
    *,
    config: Optional[HiQAPackConfig] = None,
    settings: Optional[Mapping[str, Any]] = None,
    llm: Optional[LLM] = None,
    embed_model: Optional[BaseEmbedding] = None,
    vector_store: Optional[BasePydanticVectorStore] = None,
    create: bool = False,
    resolvers: Resolvers = Resolvers(),
) -> StoreBackend:
    """The backend of ``store``: a new one with ``create`` (``HiQAPack.empty``), else the stored
    one (``HiQAPack.load``).

    Args:
        store: A ``postgresql://`` URL, a store folder, or ``None`` (in memory; with ``create``).
        config: The pack's settings as an object (``settings`` override its fields).
        settings: ``HiQAPackConfig`` fields: a new store's settings or a stored one's overrides.
        llm: The pack's LLM (the chunk graph's question keywords).
        embed_model: The embedding model (the packaged MiniLM when ``None``).
        vector_store: Any LlamaIndex vector store, for the folder store only.
        create: Create the store (a folder store is created in memory and written by its first save).
        resolvers: How the embedding model and keyword extractor are made from the settings.

    Returns:
        The backend.

    Raises:
        InvalidSettingError: ``store_format="embedded"`` without a store folder.
        ValueError: A ``vector_store`` with a store that brings its own.
        PackStoreError: The store cannot be opened (named in the error).
    """
    settings = dict(settings or {})
    merged: Dict[str, Any] = {**(config.model_dump() if config is not None else {}), **settings}
    kind = store_kind(store, merged) if create else ("database" if is_database(store) else None)
    if create and kind is None and settings.get("store_format", getattr(config, "store_format", None)) == "embedded":
        raise InvalidSettingError("store_format", "an embedded store lives in a folder: pass store=FOLDER with it")
    if not create and kind is None:
        from llama_index_hiqa.storage.embedded import is_embedded_store

        kind = "embedded" if is_embedded_store(store) else "folder"
    if kind == "embedded":
        if vector_store is not None:
            raise ValueError("an embedded store brings its own vector store (MemmapVectorStore); pass no vector_store")
        from llama_index_hiqa.storage.backends.embedded import EmbeddedBackend

        return EmbeddedBackend.open(
            store, merged, embed_model=embed_model, llm=llm, create=create, resolvers=resolvers
        )
    if kind == "database":
        if vector_store is not None:
            raise ValueError("a PostgreSQL store brings its own vector store (pgvector); pass no vector_store")
        from llama_index_hiqa.storage.backends.postgres import PostgresBackend

        return PostgresBackend.open(
            str(store), merged, embed_model=embed_model, llm=llm, create=create, resolvers=resolvers
        )
    from llama_index_hiqa.storage.backends.folder import FolderBackend

    if create:  # in memory: from_directory writes the folder once it has read the documents
        return FolderBackend.create(
            updated(config, settings, model_class=HiQAPackConfig), embed_model, vector_store, llm, resolvers
        )
    return FolderBackend.open(
        store, settings, embed_model=embed_model, llm=llm, vector_store=vector_store, resolvers=resolvers
    )


__all__ = ["Resolvers", "StoreBackend", "is_database", "open_backend", "store_kind"]
