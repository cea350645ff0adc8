"""The embedded store: the collection on disk instead of in memory.

``HiQAPack.from_directory(folder, store=S, store_format="embedded")``, ``HiQAPack.empty(store=S,
store_format="embedded")`` and ``HiQAPack.load(S)`` of such a store hold an
[`EmbeddedBackend`][llama_index_hiqa.storage.backends.embedded.EmbeddedBackend] ([`embedded`][llama_index_hiqa.storage.embedded] describes the files).
Parsing and embedding are the pack's own; what differs is where the results go and what stays
in memory: each ingested batch and each removed document is one SQLite transaction, and
questions are answered by [`EmbeddedMultiRouteRetriever`][llama_index_hiqa.storage.backends.embedded_routes.EmbeddedMultiRouteRetriever],
which reads nodes, keyword postings and the collection's shape from the database, vectors from
the memory-mapped matrix, and BM25 from bm25s arrays mapped from disk (plus segments of the
nodes added since, ``storage/embedded_bm25.py``). The scores are those of the folder store's
[`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever] over the same nodes.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any, ContextManager, Dict, List, Mapping, Optional, Sequence, Tuple

from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, Document
from llama_index.core.storage.index_store import SimpleIndexStore

from llama_index_hiqa import schema
from llama_index_hiqa.errors import InvalidSettingError, PackStoreError
from llama_index_hiqa.figures import FIGURES_DIRNAME, save_figures
from llama_index_hiqa.pack.config import HiQAPackSettings, model_identity, same_model
from llama_index_hiqa.retrievers.bm25_route import BM25Route
from llama_index_hiqa.storage.backends.base import (
    Resolvers, RouteCache, Routes, SettingsTransformations, StoreBackend, copied_batches,
)
from llama_index_hiqa.storage.backends.embedded_bm25 import merge_when_due, open_bm25_route
from llama_index_hiqa.storage.backends.embedded_routes import EmbeddedMultiRouteRetriever
from llama_index_hiqa.storage.backends.heading_vectors import SQLiteHeadingVectors
from llama_index_hiqa.storage.bulk_insert import add_to_docstore
from llama_index_hiqa.storage.embedded import EmbeddedStore
from llama_index_hiqa.storage.vector_store_access import check_nodes_fit, prepare_nodes_for_store
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

logger = logging.getLogger(__name__)


class EmbeddedBackend:
    """The embedded store (see the module docstring), one SQLite transaction a write.

    Args:
        store: The opened [`EmbeddedStore`][llama_index_hiqa.storage.embedded.EmbeddedStore].
        index: The index over its docstore and memory-mapped vectors.
        config: The pack's settings.
        embed_model: The embedding model of the questions.
        resolvers: How the keyword extractor is made from the settings.
    """

    def __init__(
        self, store: EmbeddedStore, index: VectorStoreIndex, config: HiQAPackSettings, embed_model: BaseEmbedding,
        resolvers: Resolvers = Resolvers(),
    ) -> None:
        self._resolve = resolvers
        self.store = store
        self.index = index
        self.config = config
        self.embed_model = embed_model
        self.file_stats: Dict[str, List[int]] = store.file_stats()
        self.heading_vectors = SQLiteHeadingVectors(store.db)  # the focus's, computed at ingestion
        self.llm: Optional[LLM] = None  # no route of this store asks one
        self._routes = RouteCache()
        # The BM25 route last opened, kept across writes: the next one extends it by the nodes
        # added (time in proportion to them) instead of reading the base's node ids again.
        self._bm25: Optional[BM25Route] = None
        self._extractor: Optional[Tuple[HiQAPackSettings, CriticalKeywordExtractor]] = None
        self._figure_source: Optional[Path] = None  # a copied pack's store, whose figure files are copied

    @classmethod
    def open(
        cls, location: Any, settings: HiQAPackSettings, *, embed_model: Optional[BaseEmbedding] = None,
        llm: Optional[LLM] = None, create: bool = False, resolvers: Resolvers = Resolvers(),
    ) -> "EmbeddedBackend":
        """The embedded store in the folder ``location``.

        Args:
            location: The store folder.
            settings: A new store's settings; for an existing one, the fields set on it override
                the stored ones in this process (`HiQAPackSettings.applied_to`).
            embed_model: The embedding model (the packaged MiniLM when ``None``).
            llm: Unused (no route of this store asks an LLM).
            create: Create the store when the folder holds none.
            resolvers: How the embedding model and keyword extractor are made from the settings.

        Returns:
            The backend.

        Raises:
            PackStoreError: The folder holds no store (without ``create``), a damaged one, or
                vectors of another dimension than the embedding model's.
            InvalidSettingError: ``use_chunk_graph`` (kept by the folder store only).
        """
        store = EmbeddedStore.open(location, create=create)
        record = store.read_pack()
        if record is not None:
            try:
                HiQAPackSettings(**record["config"])
            except (ValueError, TypeError) as exc:
                raise PackStoreError(store.root, f"holds invalid settings ({exc})") from exc
        config = settings.applied_to(record["config"] if record is not None else {}, store_format="embedded")
        if config.use_chunk_graph:
            raise InvalidSettingError(
                "use_chunk_graph", "the chunk graph is kept by the folder store only; use store_format='folder'"
            )
        embed_model = resolvers.embed_model(embed_model, config.embed_backend)
        if record is not None and record.get("embed_model") and not same_model(record["embed_model"], embed_model):
            logger.warning(
                "HiQAPack.load: the store was embedded with %s, queries now use %s",
                record["embed_model"], model_identity(embed_model),
            )
        if record is not None:
            store.check(len(embed_model.get_query_embedding("dimension check")) if store.vectors.dim else None)
        docstore, vectors = store.docstore, store.vectors
        vectors.set_node_loader(lambda ids: docstore.get_nodes(ids, raise_error=False))
        # The index struct stays empty and in memory: the vector store returns its nodes, so no
        # list of every node id is kept or written.
        storage = StorageContext.from_defaults(vector_store=vectors, docstore=docstore, index_store=SimpleIndexStore())
        index = VectorStoreIndex(
            [], storage_context=storage, embed_model=embed_model, store_nodes_override=True,
            transformations=[SettingsTransformations()],  # no splitter (tiktoken) built at open
        )
        backend = cls(store, index, config, embed_model, resolvers)
        if record is None:
            backend._save_record()
        return backend

    commits_batches = True  # each batch is its own transaction

    @property
    def location(self) -> Path:
        """The store folder."""
        return self.store.root

    def _save_record(self) -> None:
        self.store.save_pack({"config": self.config.model_dump(), "embed_model": model_identity(self.embed_model)})

    @property
    def address(self) -> Path:
        """The store folder, as `HiQAPack.persist` reports it."""
        return self.store.root

    # -- reads -----------------------------------------------------------------------------
    def documents(self) -> Dict[str, str]:
        """``{schema.DOCUMENT_ID: ref_doc_id}`` from the documents table."""
        return self.store.documents()

    def node_count(self) -> int:
        """The number of stored nodes (one query)."""
        return self.store.node_count()

    def document_hash(self, ref_doc_id: str) -> Optional[str]:
        """The document's hash as the docstore records it.

        Args:
            ref_doc_id: The document's ref doc id.

        Returns:
            The hash, ``None`` when the store holds no such document.
        """
        return self.index.docstore.get_document_hash(ref_doc_id)

    # -- routes ----------------------------------------------------------------------------
    def routes(self) -> Routes:
        """The multi-route retriever over the database, the vectors and the saved BM25 arrays.

        Returns:
            ``(multi_route, None)``.
        """
        return self._routes.get(self._build_routes)

    def _build_routes(self) -> Routes:
        routes = self.config.route_config()
        # Not index.as_retriever(): it restricts every query to the ids of the index struct,
        # which this store leaves empty (the vector store lists its own nodes).
        vector = VectorIndexRetriever(
            self.index, similarity_top_k=routes.candidates_per_route, node_ids=None, vector_store_kwargs={"ids_only": True}
        )
        multi_route = EmbeddedMultiRouteRetriever(
            self.store, vector,
            self._bm25_route() if routes.use_bm25 and self.node_count() else None,
            keyword_extractor=self._keyword_extractor(), config=routes,
        )
        return multi_route, None

    def _keyword_extractor(self) -> CriticalKeywordExtractor:
        """The settings' keyword extractor, kept across writes while the settings hold: it
        remembers each title's keywords, which every rebuild of the routes reads again."""
        if self._extractor is None or self._extractor[0] != self.config:
            self._extractor = (self.config, self._resolve.keyword_extractor(self.config))
        return self._extractor[1]

    def _bm25_route(self) -> BM25Route:
        """The BM25 route over every live node: the saved base and segments, plus a segment
        of the nodes added since (``storage/embedded_bm25.py``)."""
        self._bm25 = open_bm25_route(self.store, self.config.route_config().bm25_language, held=self._bm25)
        return self._bm25

    # -- writes: one transaction each ------------------------------------------------------
    def write_batch(
        self, documents: Sequence[Document], replaced: Sequence[str], nodes: Sequence[BaseNode],
        hashes: Optional[Dict[str, str]] = None, unit: bool = False,
    ) -> int:
        """Write one batch in one SQLite transaction.

        Args:
            documents: The batch's documents.
            replaced: Ref doc ids of earlier versions removed in the same transaction.
            nodes: The batch's embedded nodes.
            hashes: Document hashes to record instead of the documents' own (a copy).
            unit: The vectors are unit rows already (a copy of a store's vectors).

        Returns:
            The number of nodes removed.
        """
        vectors = self.store.vectors
        prepare_nodes_for_store(vectors, nodes)
        check_nodes_fit(vectors, nodes)
        self._save_figures(nodes)  # content-addressed files: a rollback leaves at most an unused one
        self._routes.clear()
        with self.store.db.transaction():
            removed = sum(self.store.remove_document(ref) for ref in replaced)
            vectors.add(nodes, unit=unit)
            copies = []
            for node in nodes:
                copy = node.model_copy()
                copy.embedding = None  # the vector store holds it
                copies.append(copy)
            add_to_docstore(self.store.docstore, copies)
            for doc in documents:
                self.store.docstore.set_document_hash(doc.doc_id, (hashes or {}).get(doc.doc_id, doc.hash))
            self.store.add_keywords(nodes)
            self.heading_vectors.add_nodes(nodes, self.embed_model)
            self.store.put_documents(document_rows(documents, nodes, self.file_stats))
            self.store.bump_generation()
        return removed

    def _save_figures(self, nodes: Sequence[BaseNode]) -> None:
        if not any(n.metadata.get(schema.IMAGE_FILE) or n.metadata.get(schema.IMAGES) for n in nodes):
            return
        # copy_from: the source store's figure files are copied, not rendered again
        previous = [Path(self._figure_source) / FIGURES_DIRNAME] if self._figure_source else []
        report = save_figures(nodes, self.store.root / FIGURES_DIRNAME, previous_dirs=previous)
        for name, reason in report.missing:
            logger.warning("figure %s not saved: %s", name, reason)

    def remove_document(self, ref_doc_id: str) -> int:
        """Remove one document in one transaction.

        Args:
            ref_doc_id: The document's ref doc id.

        Returns:
            The number of nodes removed.
        """
        self._routes.clear()
        with self.store.db.transaction():
            removed = self.store.remove_document(ref_doc_id)
            self.store.bump_generation()
        self.file_stats.pop(ref_doc_id, None)
        return removed

    def bulk_writes(self) -> ContextManager[Any]:
        """Nothing to prepare: each batch is its own transaction."""
        return contextlib.nullcontext()

    def copy_from(self, source: StoreBackend, batch_documents: int = 8) -> None:
        """Copy a built pack's nodes and unit vectors as they are (nothing is parsed or embedded
        again), in the order the pack holds them, so the copy ranks as the pack does.

        Args:
            source: The backend of the pack copied (any store whose vector store gives its
                vectors back).
            batch_documents: Documents a transaction.
        """
        self._figure_source = source.location
        for documents, nodes, hashes in copied_batches(source, self.file_stats, batch_documents):
            self.write_batch(documents, [], nodes, hashes=hashes, unit=True)

    # -- save ------------------------------------------------------------------------------
    def save(self, payload: Mapping[str, Any], location: Any = None) -> "EmbeddedBackend":
        """Save the settings and the BM25 index for the next process (no retriever is built);
        the nodes, vectors and postings committed with each batch already.

        Args:
            payload: The pack's settings (``config``) and ``embed_model``; the ingestion state
                is in the database already.
            location: ``None`` or this store's folder.

        Returns:
            This backend.

        Raises:
            PackStoreError: ``location`` is another folder.
        """
        if location is not None and os.path.realpath(location) != os.path.realpath(self.store.root):
            raise PackStoreError(
                Path(location), f"this pack's store is the embedded store {self.store.root}; it is saved there"
            )
        self.store.save_pack({"config": payload["config"], "embed_model": payload["embed_model"]})
        if self.node_count() and self.config.route_config().use_bm25:
            # The routes' BM25 route when they are built (its segments are saved), else opening
            # it saves the segment of the nodes added since for the next process; segments grown
            # past the merge policy become one base here, not at a question (the next question
            # maps it from disk).
            current = self._routes.current
            route = current[0].bm25_route if current is not None else None
            if merge_when_due(self.store, route or self._bm25_route()) is not None:
                self._routes.clear()
                self._bm25 = None
        self.store.db.checkpoint()
        return self

    def close(self) -> None:
        """Close the database."""
        self.store.close()


def document_rows(
    documents: Sequence[Document], nodes: Sequence[BaseNode], file_stats: Mapping[str, List[int]]
) -> List[Tuple[Any, ...]]:
    """The embedded store's ``documents`` rows of a batch.

    Args:
        documents: The batch's documents.
        nodes: The batch's nodes.
        file_stats: ``{ref_doc_id: [size, mtime_ns]}`` of the files read.

    Returns:
        One ``(ref_doc_id, document_id, title, pages, node count, file stat)`` a document.
    """
    by_ref: Dict[str, List[BaseNode]] = {}
    for node in nodes:
        by_ref.setdefault(node.ref_doc_id or "", []).append(node)
    records = []
    for doc in documents:
        members = by_ref.get(doc.doc_id, [])
        pages = [r[1] + 1 for r in (schema.get_page_range(n) for n in members) if r is not None]
        first = members[0] if members else doc
        records.append((
            doc.doc_id,
            str(schema.get_document_id(first) or doc.metadata.get(schema.DOCUMENT_ID) or doc.doc_id),
            str(schema.get_document_title(first) or ""),
            max(pages) if pages else None,
            len(members),
            file_stats.get(doc.doc_id),
        ))
    return records


__all__ = ["EmbeddedBackend", "document_rows"]
