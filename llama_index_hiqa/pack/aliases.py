"""``PostgresHiQAPack`` and ``EmbeddedHiQAPack``: the names earlier releases gave a pack on those stores.

A pack on any store is a [`HiQAPack`][llama_index_hiqa.pack.hiqa_pack.HiQAPack] holding that store's backend
([`llama_index_hiqa.storage.backends`][llama_index_hiqa.storage.backends]); these names stay for code written against them:
``PostgresHiQAPack.open(url)`` / ``EmbeddedHiQAPack.open(folder)`` open the store,
``from_pack`` copies a built pack into one, and ``isinstance(pack, PostgresHiQAPack)`` tells
whether a pack's store is PostgreSQL. Neither is a class of its own any more.
"""

from __future__ import annotations

from typing import Any, Optional

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM

from llama_index_hiqa.pack.hiqa_pack import RESOLVERS, HiQAPack
from llama_index_hiqa.storage.backends.base import copied_vectors


class _StoreKind(type):
    """``isinstance(pack, Alias)``: a [`HiQAPack`][llama_index_hiqa.pack.hiqa_pack.HiQAPack] whose backend is the alias's backend."""

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, HiQAPack) and isinstance(instance.backend, cls.backend_type())

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{cls.__name__} is not a class any more: use {cls.__name__}.open(...) or HiQAPack.load(...)")


class PostgresHiQAPack(metaclass=_StoreKind):
    """A [`HiQAPack`][llama_index_hiqa.pack.hiqa_pack.HiQAPack] whose store is a PostgreSQL database
    ([`PostgresBackend`][llama_index_hiqa.storage.backends.postgres.PostgresBackend])."""

    @staticmethod
    def backend_type() -> type:
        """The backend class a pack of this kind holds."""
        from llama_index_hiqa.storage.backends.postgres import PostgresBackend

        return PostgresBackend

    @staticmethod
    def open(
        url: str, llm: Optional[LLM] = None, embed_model: Optional[BaseEmbedding] = None, create: bool = False,
        store_settings: Any = None, **settings: Any,
    ) -> HiQAPack:
        """The pack of the database at ``url``.

        Args:
            url: A ``postgresql://`` URL.
            llm: The LLM.
            embed_model: The embedding model the database was built with.
            create: Create the pack when the database holds none.
            store_settings: [`PostgresStoreSettings`][llama_index_hiqa.storage.postgres.PostgresStoreSettings] (pools, timeouts, HNSW).
            **settings: [`HiQAPackSettings`][llama_index_hiqa.pack.config.HiQAPackSettings] fields of a new pack, or
                query-time overrides of an existing one.

        Returns:
            The pack.
        """
        from llama_index_hiqa.storage.backends.postgres import PostgresBackend

        backend = PostgresBackend.open(
            url, settings, embed_model=embed_model, llm=llm, create=create, store_settings=store_settings,
            resolvers=RESOLVERS,
        )
        return HiQAPack(llm=llm, backend=backend)

    @staticmethod
    def from_pack(pack: HiQAPack, url: str, batch_documents: int = 8, **kwargs: Any) -> HiQAPack:
        """Copy a built pack (e.g. ``HiQAPack.load(folder)``) into the database at ``url``, its
        nodes and vectors as they are (nothing is parsed or embedded again).

        Args:
            pack: The pack copied.
            url: The database.
            batch_documents: Documents a transaction.
            **kwargs: Settings of the new pack (the copied pack's by default).

        Returns:
            The pack on the database.
        """
        copied_vectors(pack.index.vector_store)  # fails before the database is touched
        target = PostgresHiQAPack.open(
            url, llm=pack.llm, embed_model=pack.embed_model, create=True, **pack.config.model_dump(), **kwargs
        )
        target.backend.copy_from(pack.backend, batch_documents)  # type: ignore[attr-defined]
        target._invalidate()
        return target


class EmbeddedHiQAPack(metaclass=_StoreKind):
    """A [`HiQAPack`][llama_index_hiqa.pack.hiqa_pack.HiQAPack] whose store is an embedded SQLite + memory-mapped
    folder ([`EmbeddedBackend`][llama_index_hiqa.storage.backends.embedded.EmbeddedBackend])."""

    @staticmethod
    def backend_type() -> type:
        """The backend class a pack of this kind holds."""
        from llama_index_hiqa.storage.backends.embedded import EmbeddedBackend

        return EmbeddedBackend

    @staticmethod
    def open(
        root: Any, llm: Optional[LLM] = None, embed_model: Optional[BaseEmbedding] = None, create: bool = False,
        **settings: Any,
    ) -> HiQAPack:
        """The pack of the embedded store ``root``.

        Args:
            root: The store folder.
            llm: The LLM.
            embed_model: The embedding model the store was built with.
            create: Create the store when the folder holds none.
            **settings: [`HiQAPackSettings`][llama_index_hiqa.pack.config.HiQAPackSettings] fields of a new pack, or
                overrides for this process of an existing one.

        Returns:
            The pack.
        """
        from llama_index_hiqa.storage.backends.embedded import EmbeddedBackend

        return HiQAPack(llm=llm, backend=EmbeddedBackend.open(
            root, settings, embed_model=embed_model, llm=llm, create=create, resolvers=RESOLVERS
        ))

    @staticmethod
    def from_pack(pack: HiQAPack, root: Any, batch_documents: int = 8, **settings: Any) -> HiQAPack:
        """Copy a built pack (a folder store of any release, ``HiQAPack.load(folder)``) into a
        new embedded store at ``root``: its nodes and unit vectors as they are, in the order the
        pack holds them, so the copy ranks as the pack does.

        Args:
            pack: The pack copied.
            root: The new store's folder.
            batch_documents: Documents a transaction.
            **settings: Settings of the new pack (the copied pack's by default).

        Returns:
            The pack on the embedded store.
        """
        copied_vectors(pack.index.vector_store)  # fails before the folder is created
        target = EmbeddedHiQAPack.open(
            root, llm=pack.llm, embed_model=pack.embed_model, create=True, **{**pack.config.model_dump(), **settings}
        )
        target.backend.copy_from(pack.backend, batch_documents)  # type: ignore[attr-defined]
        target._invalidate()
        target.persist()
        return target


__all__ = ["EmbeddedHiQAPack", "PostgresHiQAPack"]
