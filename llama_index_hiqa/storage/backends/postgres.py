"""The PostgreSQL store: the same pack, its indexes in one database instead of a folder.

``HiQAPack.from_directory(folder, store="postgresql://...")``, ``HiQAPack.load(url)`` and
``hiqa ingest/ask --store postgresql://...`` hold a [`PostgresBackend`][llama_index_hiqa.storage.backends.postgres.PostgresBackend]. Ingestion, parsing
and embedding are the pack's own; only where the results go differs: each ingested batch and
each removed document is one transaction of
[`PostgresStore`][llama_index_hiqa.storage.postgres.PostgresStore], and questions are answered by
[`PostgresMultiRouteRetriever`][llama_index_hiqa.storage.backends.pg_routes.PostgresMultiRouteRetriever] with no node held in
memory. Any number of processes may answer from the same database. With
``use_chunk_graph=True`` the IIER chunk graph is kept in the database too and walked from a copy
in each process ([`pg_graph`][llama_index_hiqa.storage.backends.pg_graph]), updated in each write's transaction.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

import numpy as np
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, Document
from llama_index.core.storage.index_store import SimpleIndexStore

from llama_index_hiqa import schema
from llama_index_hiqa.pack.config import (
    HiQAPackSettings,
    graph_retriever_settings,
    model_identity,
    same_model,
)
from llama_index_hiqa.indexes.keyword_index import normalize_keyword
from llama_index_hiqa.storage.backends.base import (
    Resolvers, RouteCache, Routes, StoreBackend, copied_vectors,
)
from llama_index_hiqa.storage.backends.heading_vectors import PostgresHeadingVectors
from llama_index_hiqa.storage.backends.pg_routes import PostgresMultiRouteRetriever
from llama_index_hiqa.storage.pg_connection import PostgresStoreSettings
from llama_index_hiqa.storage.postgres import DocumentRecord, PostgresStore
from llama_index_hiqa.storage.vector_store import _unit_rows

if TYPE_CHECKING:
    from llama_index_hiqa.storage.backends.pg_graph import StoredChunkGraph


class PostgresBackend:
    """The PostgreSQL store (see the module docstring), one transaction a write.

    Args:
        store: The connected [`PostgresStore`][llama_index_hiqa.storage.postgres.PostgresStore].
        index: The index over its pgvector table and docstore.
        config: The pack's settings.
        embed_model: The embedding model of the questions.
        resolvers: How the keyword extractor is made from the settings.
    """

    def __init__(
        self, store: PostgresStore, index: VectorStoreIndex, config: HiQAPackSettings, embed_model: BaseEmbedding,
        resolvers: Resolvers = Resolvers(),
    ) -> None:
        self._resolve = resolvers
        self.store = store
        self.index = index
        self.config = config
        self.embed_model = embed_model
        self.file_stats: Dict[str, List[int]] = store.file_stats()
        self.heading_vectors = PostgresHeadingVectors(store)  # the focus's, computed at ingestion
        self.stored_graph: Optional[StoredChunkGraph] = None
        if config.use_chunk_graph:
            # Imported here: the chunk graph costs 0.25 s over an import of the pack (measured)
            # and only a store with use_chunk_graph holds one.
            from llama_index_hiqa.storage.backends.pg_graph import StoredChunkGraph

            self.stored_graph = StoredChunkGraph(
                store, config.chunk_graph.graph.model_dump(), keyword_fn=resolvers.keyword_extractor(config).extract_query,
                embed_model=embed_model,
            )
        self.llm: Optional[LLM] = None  # the chunk graph's (the pack sets its own)
        self._routes = RouteCache()
        self._behind: Optional[WriteBehind] = None  # inside bulk_writes: one batch committing

    @classmethod
    def open(
        cls, location: Any, settings: HiQAPackSettings, *, embed_model: Optional[BaseEmbedding] = None,
        llm: Optional[LLM] = None, create: bool = False, store_settings: Optional[PostgresStoreSettings] = None,
        resolvers: Resolvers = Resolvers(),
    ) -> "PostgresBackend":
        """The pack of the database at the URL ``location``.

        Args:
            location: A ``postgresql://`` URL.
            settings: A new pack's settings; for an existing one, the fields set on it override
                the stored ones in this process (`HiQAPackSettings.applied_to`).
            embed_model: The embedding model (the packaged MiniLM when ``None``).
            llm: The chunk graph's LLM (the pack sets its own as `llm`).
            create: Create the pack when the database holds none.
            store_settings: Connection and HNSW settings.
            resolvers: How the embedding model and keyword extractor are made from the settings.

        Returns:
            The backend.

        Raises:
            PackStoreError: The database cannot be reached, holds no pack (without ``create``),
                holds invalid settings or was built with another embedding model.
        """
        store = PostgresStore(location, store_settings).connect()
        record = store.read_pack()
        if record is None and not create:
            raise store.error("holds no HiQA pack; build one with `hiqa ingest DIR --store URL`")
        if record is None:
            config = settings
            embed_model = resolvers.embed_model(embed_model, config.embed_backend)
            dim = len(embed_model.get_text_embedding("embedding dimension"))
            store.create_pack(config.model_dump(), model_identity(embed_model), dim, str(uuid.uuid4()))
            record = store.read_pack()
            if record is None:  # the record just created: named if the database lost it
                raise store.error("holds no HiQA pack record after creating one")
        else:
            store.upgrade(record)
            try:
                config = settings.applied_to(record["config"])
            except ValueError as exc:
                raise store.error(f"holds invalid settings ({exc})") from None
            embed_model = resolvers.embed_model(embed_model, config.embed_backend)
            identity = model_identity(embed_model)
            if not same_model(record["embed_model"], embed_model):
                raise store.error(
                    f"was built with the embedding model {record['embed_model']} ({record['embed_dim']} dimensions); "
                    f"this process embeds with {identity}: pass the store's model (embed_model=...) or use another database"
                )
        vector_store, docstore, index_store = store.vector_store(int(record["embed_dim"])), store.docstore(), store.index_store()
        struct = index_store.get_index_struct(record["index_id"])
        if struct is None:  # a new pack: its index struct is written once
            storage = StorageContext.from_defaults(vector_store=vector_store, docstore=docstore, index_store=index_store)
            index = VectorStoreIndex([], storage_context=storage, embed_model=embed_model, store_nodes_override=True)
            index.set_index_id(record["index_id"])
        else:
            # VectorStoreIndex writes its struct back on construction; an in-memory index store
            # takes that write, so opening a pack writes nothing (a read replica serves it).
            storage = StorageContext.from_defaults(vector_store=vector_store, docstore=docstore, index_store=SimpleIndexStore())
            index = VectorStoreIndex(
                index_struct=struct, storage_context=storage, embed_model=embed_model, store_nodes_override=True
            )
        return cls(store, index, config, embed_model, resolvers)

    commits_batches = True  # each batch is its own transaction (committed behind in bulk_writes)

    @property
    def location(self) -> None:
        """``None``: a database store has no folder (its URL is `address`)."""
        return None

    @property
    def address(self) -> str:
        """The database URL, its password masked."""
        return self.store.masked_url

    # -- reads -----------------------------------------------------------------------------
    def documents(self) -> Dict[str, str]:
        """``{schema.DOCUMENT_ID: ref_doc_id}`` of every committed document."""
        self.wait_for_writes()
        return self.store.documents()

    def node_count(self) -> int:
        """The number of committed nodes (the pack record's count)."""
        self.wait_for_writes()
        return self.store.node_count()

    def document_hash(self, ref_doc_id: str) -> Optional[str]:
        """The document's hash as the docstore records it.

        Args:
            ref_doc_id: The document's ref doc id.

        Returns:
            The hash, ``None`` when the store holds no such document.
        """
        if self._behind is not None and ref_doc_id in self._behind.refs:
            self._behind.wait()  # its batch is committing: read what it wrote
        return self.index.docstore.get_document_hash(ref_doc_id)

    # -- routes ----------------------------------------------------------------------------
    def routes(self) -> Routes:
        """The routes answered in SQL (BM25 over stored term statistics, keywords over the
        postings, vectors by HNSW) and the stored chunk graph.

        Returns:
            ``(multi_route, graph)``.
        """
        return self._routes.get(self._build_routes)

    def _build_routes(self) -> Routes:
        routes = self.config.route_config()
        candidates = routes.candidates_per_route
        # HNSW returns at most ef_search rows: never fewer than the route's candidates.
        ef_search = max(self.store.settings.hnsw_ef_search, candidates)
        multi_route = PostgresMultiRouteRetriever(
            self.store, self.index.as_retriever(similarity_top_k=candidates, vector_store_kwargs={"hnsw_ef_search": ef_search}),
            keyword_extractor=self._resolve.keyword_extractor(self.config), ef_search=ef_search, config=routes,
        )
        graph = None
        if self.stored_graph is not None and self.store.node_count():
            graph = self.stored_graph.retriever(
                **graph_retriever_settings(
                    self.index, self.config, self.embed_model, self.llm, self._resolve.keyword_extractor(self.config)
                )
            )
        return multi_route, graph

    # -- writes: one transaction each ------------------------------------------------------
    @contextlib.contextmanager
    def bulk_writes(self) -> Iterator[None]:
        """Many batches: each batch's transaction commits on a thread of its own while the
        next batch is prepared (`WriteBehind`); into an empty store, the HNSW index is
        built once after the last batch ([`PostgresStore.bulk_load`][llama_index_hiqa.storage.postgres.PostgresStore.bulk_load]) and the planner's
        statistics refreshed. A failed commit is raised by the next write or read, or on
        leaving."""
        with self.store.bulk_load() as deferred:
            with self._writing_behind():
                yield
        if deferred:
            self.store.analyze()

    @contextlib.contextmanager
    def _writing_behind(self) -> Iterator[None]:
        if self._behind is not None:  # nested: the outer context commits
            yield
            return
        self._behind = WriteBehind()
        try:
            yield
        finally:
            behind, self._behind = self._behind, None
            behind.close()

    def wait_for_writes(self) -> None:
        """Wait for the batch committing behind, if any (inside [`bulk_writes`][llama_index_hiqa.storage.backends.postgres.PostgresBackend.bulk_writes]).

        Raises:
            PackStoreError: its commit failed (nothing of it was written).
        """
        if self._behind is not None:
            self._behind.wait()

    def write_batch(
        self, documents: Sequence[Document], replaced: Sequence[str], nodes: Sequence[BaseNode],
        hashes: Optional[Dict[str, str]] = None, vectors_as_given: bool = False,
    ) -> int:
        """Write one batch in one transaction (the chunk graph's rows included).

        Args:
            documents: The batch's documents.
            replaced: Ref doc ids of earlier versions removed in the same transaction.
            nodes: The batch's embedded nodes.
            hashes: Document hashes to record instead of the documents' own (a copy).
            vectors_as_given: Store the vectors as they are (a copy of unit vectors).

        Returns:
            The number of nodes removed.
        """
        if not vectors_as_given and nodes:
            # The vectors as the folder store keeps them (MatrixVectorStore: float32 unit rows),
            # so the chunk graph built from them is the folder store's bit for bit (cosines
            # that tie in float32 are broken by row; a normalisation more or less changes a
            # last bit). Cosine search is unchanged.
            units = _unit_rows(np.asarray([n.get_embedding() for n in nodes], dtype=np.float32))
            for node, unit in zip(nodes, units):
                node.embedding = unit.tolist()
        by_ref: Dict[str, List[BaseNode]] = {}
        for node in nodes:
            by_ref.setdefault(node.ref_doc_id or "", []).append(node)
        records = [document_record(doc, by_ref.get(doc.doc_id, []), self.file_stats) for doc in documents]
        for record in records:
            record.doc_hash = (hashes or {}).get(record.ref_doc_id, record.doc_hash)
        extractor = self._resolve.keyword_extractor(self.config)
        titles = list(dict.fromkeys(r.title for r in records if r.title))
        title_keywords = {
            t: [k for k in dict.fromkeys(normalize_keyword(k) for k in kws) if k]
            for t, kws in zip(titles, extractor.title_keywords(titles) if titles else [])
        }
        keywords = {
            node.node_id: (
                [k for k in dict.fromkeys(normalize_keyword(k) for k in schema.get_critical_keywords(node)) if k],
                title_keywords.get(schema.get_document_title(node) or "", []),
            )
            for node in nodes
        }
        self._routes.clear()
        # Heading vectors are embedded and the batch's JSON, tokens and COPY data made here,
        # before the transaction (and, behind, while the previous batch commits).
        then = self.heading_vectors.writer(nodes, self.embed_model, self._graph_sync(nodes))
        prepared = self.store.prepare(self.index.vector_store, self.index.docstore, records, keywords)
        if self._behind is None or replaced:
            self.wait_for_writes()  # a replacement counts the nodes it removes when it commits
            return self._in_transaction(self.store.commit, prepared, replaced, then=then)
        # New documents remove nothing: the count is known before the commit.
        self._behind.submit(lambda: self._in_transaction(self.store.commit, prepared, (), then=then), [r.ref_doc_id for r in records])
        return 0

    def remove_document(self, ref_doc_id: str) -> int:
        """Remove one document from every route (and the chunk graph) in one transaction.

        Args:
            ref_doc_id: The document's ref doc id.

        Returns:
            The number of nodes removed.
        """
        self.wait_for_writes()
        self._routes.clear()
        removed = self._in_transaction(self.store.delete, self.index.docstore, [ref_doc_id], then=self._graph_sync([]))
        self.file_stats.pop(ref_doc_id, None)
        return removed

    def _graph_sync(self, nodes: Sequence[BaseNode]) -> Any:
        """What updates the chunk graph in a write's transaction (``None`` without a graph)."""
        stored = self.stored_graph
        return None if stored is None else (lambda conn: stored.sync(conn, nodes))

    def _in_transaction(self, write: Callable[..., int], *args: Any, **kwargs: Any) -> int:
        try:
            return write(*args, **kwargs)
        except BaseException:
            # The graph in memory may hold what was rolled back: read it again when next used.
            if self.stored_graph is not None:
                self.stored_graph.forget()
            raise

    def copy_from(self, source: StoreBackend, batch_documents: int = 8) -> None:
        """Copy a built pack's nodes and vectors as they are (nothing is parsed or embedded again).

        Args:
            source: The backend of the pack copied (e.g. ``HiQAPack.load(folder).backend``).
            batch_documents: Documents a transaction.
        """
        vectors_of = copied_vectors(source.index.vector_store)
        docstore = source.index.docstore
        infos = docstore.get_all_ref_doc_info() or {}
        refs = sorted(infos)
        with self.store.bulk_load(), self._writing_behind():
            for start in range(0, len(refs), batch_documents):
                batch = refs[start:start + batch_documents]
                documents, nodes = [], []
                for ref in batch:
                    doc_nodes = docstore.get_nodes(list(infos[ref].node_ids))
                    for node, vector in zip(doc_nodes, vectors_of([n.node_id for n in doc_nodes])):
                        node.embedding = [float(v) for v in vector]
                    nodes += doc_nodes
                    documents.append(Document(id_=ref, text="", metadata={schema.DOCUMENT_ID: infos[ref].metadata.get(schema.DOCUMENT_ID, ref)}))
                    if ref in source.file_stats:
                        self.file_stats[ref] = source.file_stats[ref]
                hashes = {ref: docstore.get_document_hash(ref) or "" for ref in batch}
                self.write_batch(documents, [], nodes, hashes=hashes, vectors_as_given=True)
        self.store.analyze()

    # -- save ------------------------------------------------------------------------------
    def save(self, payload: Mapping[str, Any], location: Any = None) -> "PostgresBackend":
        """Save the settings; the indexes need nothing, every write committed already.

        Args:
            payload: The pack's settings (``config``); the ingestion state is in the database.
            location: ``None`` or this database's URL (copying a database pack into a folder
                is not supported: build the folder store from the documents).

        Returns:
            This backend.

        Raises:
            PackStoreError: ``location`` is another store.
        """
        if location not in (None, self.store.url):
            raise self.store.error(f"is a PostgreSQL pack; it cannot be persisted to {location}")
        self.wait_for_writes()
        self.store.save_config(dict(payload["config"]))
        return self

    def close(self) -> None:
        """Close the connection pools (after the batch committing behind, if any)."""
        try:
            self.wait_for_writes()
        finally:
            self.store.dispose()


class WriteBehind:
    """At most one batch's transaction in flight, on a thread of its own, while the caller
    prepares the next: the client's work (JSON, tokens, COPY data, heading vectors) and the
    server's (inserting them) overlap instead of taking turns. The thread waits on the
    database with the GIL released, so the overlap is real on two cores. Each batch is still
    one transaction, committed in order; a process killed meanwhile loses only the batch in
    flight, which was never committed (its documents are ingested again next time).
    """

    SWITCH_INTERVAL_S = 0.0005

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hiqa-pg-commit")
        self._future: Optional[Future[Any]] = None
        self.refs: frozenset[str] = frozenset()  # the documents of the batch in flight
        # The committing thread takes the GIL back after each statement; with the preparing
        # thread busy, Python's default 5 ms switch interval made each of those waits up to
        # 5 ms (a batch's commit took 1.7x its time alone). Restored by close().
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, self.SWITCH_INTERVAL_S))

    def submit(self, commit: Callable[[], Any], refs: Iterable[str]) -> None:
        """Commit ``commit()`` behind, once the batch before it has committed.

        Args:
            commit: writes one batch in one transaction.
            refs: the batch's documents.

        Raises:
            PackStoreError: the batch before it failed (this one is not started).
        """
        self.wait()
        self.refs = frozenset(refs)
        self._future = self._pool.submit(commit)

    def wait(self) -> None:
        """Wait for the batch in flight.

        Raises:
            PackStoreError: it failed (nothing of it was written).
        """
        future, self._future = self._future, None
        self.refs = frozenset()
        if future is not None:
            future.result()

    def close(self) -> None:
        """Wait for the batch in flight and stop the thread.

        Raises:
            PackStoreError: the batch in flight failed.
        """
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)
            sys.setswitchinterval(self._switch_interval)


def document_record(doc: Document, nodes: List[BaseNode], file_stats: Mapping[str, List[int]]) -> DocumentRecord:
    """What ``hiqa_documents`` keeps of one document of a batch.

    Args:
        doc: The document.
        nodes: Its nodes.
        file_stats: ``{ref_doc_id: [size, mtime_ns]}`` of the files read.

    Returns:
        The record.
    """
    pages = 0
    for node in nodes:
        page_range = schema.get_page_range(node)
        if page_range is not None:
            pages = max(pages, page_range[1] + 1)
    first = nodes[0] if nodes else doc
    return DocumentRecord(
        ref_doc_id=doc.doc_id,
        document_id=str(schema.get_document_id(first) or doc.metadata.get(schema.DOCUMENT_ID) or doc.doc_id),
        title=str(schema.get_document_title(first) or ""),
        doc_hash=doc.hash, file_stat=file_stats.get(doc.doc_id) or None, pages=pages or len(nodes), nodes=nodes,
    )


__all__ = ["PostgresBackend", "document_record"]
