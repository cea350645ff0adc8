"""Store backends: the objects [`HiQAPack`][llama_index_hiqa.pack.hiqa_pack.HiQAPack] holds for the place its nodes live.

Each implements [`StoreBackend`][llama_index_hiqa.storage.backends.base.StoreBackend]:
[`FolderBackend`][llama_index_hiqa.storage.backends.folder.FolderBackend] (in memory, saved as snapshots of
a folder; any LlamaIndex vector store),
[`EmbeddedBackend`][llama_index_hiqa.storage.backends.embedded.EmbeddedBackend] (SQLite and memory-mapped
vectors in a folder) and [`PostgresBackend`][llama_index_hiqa.storage.backends.postgres.PostgresBackend].
[`open_backend`][llama_index_hiqa.storage.backends.open_backend] picks one for a ``store`` argument. The leaf stores they are built on
(``storage/*.py``) never import a backend, and no backend imports the pack.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_hiqa.errors import PackStoreError
from llama_index_hiqa.figures import FIGURES_DIRNAME
from llama_index_hiqa.pack.config import HiQAPackSettings
from llama_index_hiqa.storage.backends.base import Resolvers, StoreBackend
from llama_index_hiqa.storage.backends.embedded import EmbeddedBackend
from llama_index_hiqa.storage.backends.folder import FolderBackend, check_writable, holds_folder_store
from llama_index_hiqa.storage.backends.folder import store_writer as folder_writer
from llama_index_hiqa.storage.embedded import DATABASE_FILENAME, is_embedded_store
from llama_index_hiqa.storage.os_boundary import check_store_writable, os_errors
from llama_index_hiqa.storage.pg_connection import is_postgres_url, mask_url
from llama_index_hiqa.storage.snapshots import LOCK_FILE, writer_lock

# The kind of an existing store is read from the store; a location holding none is a folder store.
_AS_STORED = HiQAPackSettings(store_format="folder")


def is_database(store: Any) -> bool:
    """Whether ``store`` names a PostgreSQL database rather than a folder.

    Args:
        store: A ``store`` argument.

    Returns:
        ``True`` for a ``postgresql://`` URL.
    """
    return is_postgres_url(store)


def store_kind(store: Any, settings: HiQAPackSettings, own_vector_store: bool = False) -> Optional[str]:
    """``"database"``, ``"embedded"``, ``"folder"`` or ``None`` (no store): the kind a store
    folder holds already, else the kind a new one gets (``HiQAPackSettings.new_store_format``).

    Args:
        store: A ``store`` argument.
        settings: The settings of a new store (``store_format``, ``use_chunk_graph``).
        own_vector_store: The caller gave the pack a LlamaIndex vector store of its own.

    Returns:
        The kind.
    """
    if store is None:
        return None
    if is_database(store):
        return "database"
    if is_embedded_store(store):
        return "embedded"
    if holds_folder_store(store):
        return "folder"
    return settings.new_store_format(own_vector_store)


def store_exists(store: Any) -> bool:
    """Whether ``store`` (a folder or a ``postgresql://`` URL) holds a store already.

    Args:
        store: A ``store`` argument.

    Returns:
        ``True`` when a store is there (a database: one holding a pack).
    """
    if is_database(store):
        # Imported here: the PostgreSQL store is needed only for a postgresql:// URL (0.1 s, measured).
        from llama_index_hiqa.storage.postgres import PostgresStore

        database = PostgresStore(str(store)).connect()
        try:
            return database.read_pack() is not None
        finally:
            database.dispose()
    return is_embedded_store(store) or holds_folder_store(store)


def location_exists(store: Any) -> bool:
    """Whether ``store`` names a place that may hold a store: a folder that exists, or a
    database URL (whose pack is checked when it is opened).

    Args:
        store: A ``store`` argument.

    Returns:
        ``False`` for a folder that does not exist.
    """
    return is_database(store) or Path(store).exists()


@contextlib.contextmanager
def store_writer(
    store: Any, settings: HiQAPackSettings, on_wait: Optional[Callable[[str], Any]] = None
) -> Iterator[None]:
    """Hold the lock a writer holds from opening ``store`` to saving it, so a second writer
    (another ``hiqa ingest --add``, ``hiqa delete``) waits and then reads what this one wrote. The
    folder store is checked writable, with room for a new snapshot, before any work; a database
    serialises its writers itself. A store folder created here and never saved into is removed
    again.

    Args:
        store: A store folder or a ``postgresql://`` URL.
        settings: The settings of a new store (its kind decides the lock).
        on_wait: Told once when another writer holds the lock.

    Yields:
        Nothing.
    """
    kind = store_kind(store, settings)
    if kind == "database":
        yield
        return
    root = Path(store)
    created = not root.exists()
    if kind == "embedded":
        # SQLite serialises the writes; the lock keeps a second `hiqa ingest --add` from
        # planning its upserts on what the first is about to change.
        lock = writer_lock(root, on_wait=on_wait, legacy_marker=DATABASE_FILENAME, shared_dirs=(FIGURES_DIRNAME,))
    else:
        check_writable(root)
        lock = folder_writer(root, on_wait=on_wait)
    try:
        with lock:
            yield
    finally:
        if created and not store_exists(root):
            with contextlib.suppress(OSError):
                (root / LOCK_FILE).unlink()
                root.rmdir()


def check_replaceable(store: Any) -> None:
    """Before a rebuild: only a folder store is replaced whole (a new snapshot, switched to
    atomically); an embedded store or a database is rebuilt into a new location.

    Args:
        store: A store folder or a ``postgresql://`` URL holding a store.

    Raises:
        PackStoreError: ``store`` is an embedded store or a database.
    """
    kind = store_kind(store, _AS_STORED)
    if kind != "folder":
        raise PackStoreError(
            mask_url(str(store)) if kind == "database" else Path(store),
            f"a rebuild replaces a folder store; this {kind} store is rebuilt by ingesting into a new "
            f"{'database' if kind == 'database' else 'folder'}",
        )


def open_backend(
    store: Any,
    *,
    settings: Optional[HiQAPackSettings] = None,
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
        settings: A new store's settings; for a stored one, the fields set on it (pydantic's
            ``model_fields_set``) override the stored ones in this process
            (`HiQAPackSettings.applied_to`). ``None``: the defaults, or the stored settings.
        llm: The pack's LLM (the chunk graph's question keywords).
        embed_model: The embedding model (the packaged MiniLM when ``None``).
        vector_store: Any LlamaIndex vector store, for the folder store only.
        create: Create the store (a folder store is created in memory and written by its first
            save; a pack with no store is held in memory and written, in the format
            ``HiQAPackSettings.new_store_format`` gives, by its first ``persist(folder)``).
        resolvers: How the embedding model and keyword extractor are made from the settings.

    Returns:
        The backend.

    Raises:
        ValueError: A ``vector_store`` with a store that brings its own.
        PackStoreError: The store cannot be opened (named in the error).
    """
    settings = settings if settings is not None else HiQAPackSettings()
    kind = store_kind(store, settings, own_vector_store=vector_store is not None) if create else store_kind(store, _AS_STORED)
    if kind == "embedded":
        if vector_store is not None:
            raise ValueError("an embedded store brings its own vector store (MemmapVectorStore); pass no vector_store")
        with os_errors(Path(store)):  # a path the system refuses, named, before any document is read
            if create and not is_embedded_store(store):  # a new store: writable, with room, before the work
                check_store_writable(Path(store))
            return EmbeddedBackend.open(
                store, settings, embed_model=embed_model, llm=llm, create=create, resolvers=resolvers
            )
    if kind == "database":
        if vector_store is not None:
            raise ValueError("a PostgreSQL store brings its own vector store (pgvector); pass no vector_store")
        # Imported here: the PostgreSQL store is needed only for a postgresql:// URL (0.1 s, measured).
        from llama_index_hiqa.storage.backends.postgres import PostgresBackend

        return PostgresBackend.open(
            str(store), settings, embed_model=embed_model, llm=llm, create=create, resolvers=resolvers
        )
    if create:  # in memory: written by the pack's first persist (into store, when given)
        return FolderBackend.create(
            settings, embed_model, vector_store, llm, resolvers, location=None if store is None else Path(store),
        )
    return FolderBackend.open(
        store, settings, embed_model=embed_model, llm=llm, vector_store=vector_store, resolvers=resolvers
    )


__all__ = [
    "Resolvers", "StoreBackend", "check_replaceable", "is_database", "location_exists", "open_backend",
    "store_exists", "store_kind", "store_writer",
]
