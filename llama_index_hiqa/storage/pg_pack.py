"""HiQAPack on PostgreSQL: the same pack, its indexes in one database instead of a folder.

``HiQAPack.from_directory(folder, store="postgresql://...")``, ``HiQAPack.load(url)`` and
``hiqa ingest/ask --store postgresql://...`` return a :class:`PostgresHiQAPack`. Ingestion,
parsing and embedding are the pack's own; only where the results go differs: each ingested
batch (``add_documents``, ``ingest``, ``add_directory``) and each ``delete_document`` is one
transaction of :class:`~llama_index_hiqa.storage.postgres.PostgresStore`, and questions are
answered by :class:`~llama_index_hiqa.storage.pg_routes.PostgresMultiRouteRetriever` with no
node held in memory. Any number of processes may answer from the same database. With
``use_chunk_graph=True`` the IIER chunk graph is kept in the database too and walked from a
copy in each process (:mod:`~llama_index_hiqa.storage.pg_graph`), updated in each write's
transaction.
"""

from __future__ import annotations

import uuid
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.storage.index_store import SimpleIndexStore
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, Document

from llama_index_hiqa import pack as _pack
from llama_index_hiqa import schema
from llama_index_hiqa.errors import UnknownNodeError
from llama_index_hiqa.pack import HiQAPack
from llama_index_hiqa.pack_config import HiQAPackConfig, graph_retriever_settings, model_identity, route_settings, same_model
from llama_index_hiqa.storage.heading_vectors import PostgresHeadingVectors
from llama_index_hiqa.storage.postgres import DocumentRecord, PostgresStore, PostgresStoreSettings
from llama_index_hiqa.transforms.critical_keywords import normalize_keyword


class PostgresHiQAPack(HiQAPack):
    """A :class:`~llama_index_hiqa.HiQAPack` whose store is a PostgreSQL database."""

    store: PostgresStore
    stored_graph: Any  # StoredChunkGraph when use_chunk_graph, else None

    @classmethod
    def open(
        cls,
        url: str,
        llm: Optional[LLM] = None,
        embed_model: Optional[BaseEmbedding] = None,
        create: bool = False,
        store_settings: Optional[PostgresStoreSettings] = None,
        **settings: Any,
    ) -> "PostgresHiQAPack":
        """The pack of the database at ``url``; with ``create`` a new one when it holds none
        (``settings`` are :class:`HiQAPackConfig` fields: those of a new pack, or query-time
        overrides of an existing one)."""
        # The embedding model and keyword extractor are built by pack.py's functions, as for a
        # folder store (one place to configure or replace them).
        store = PostgresStore(url, store_settings).connect()
        record = store.read_pack()
        if record is None and not create:
            raise store.error("holds no HiQA pack; build one with `hiqa ingest DIR --store URL`")
        if record is None:
            config = HiQAPackConfig(**settings)
            embed_model = _pack.default_embed_model(embed_model, config.embed_backend)
            dim = len(embed_model.get_text_embedding("embedding dimension"))
            store.create_pack(config.model_dump(), model_identity(embed_model), dim, str(uuid.uuid4()))
            record = store.read_pack()
        else:
            store.upgrade(record)
            try:
                config = HiQAPackConfig(**{**record["config"], **settings})
            except ValueError as exc:
                raise store.error(f"holds invalid settings ({exc})") from None
            embed_model = _pack.default_embed_model(embed_model, config.embed_backend)
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
        pack = cls(index, config=config, llm=llm, embed_model=embed_model)
        pack.store = store
        pack.file_stats = store.file_stats()
        pack.heading_vectors = PostgresHeadingVectors(store)
        pack.stored_graph = None
        if config.use_chunk_graph:
            from llama_index_hiqa.storage.pg_graph import StoredChunkGraph

            pack.stored_graph = StoredChunkGraph(
                store, config.chunk_graph.graph.model_dump(), keyword_fn=_pack.keyword_extractor(config).extract_query,
                embed_model=embed_model,
            )
        return pack

    @classmethod
    def from_pack(cls, pack: HiQAPack, url: str, batch_documents: int = 8, **kwargs: Any) -> "PostgresHiQAPack":
        """Copy a built pack (e.g. a folder store, ``HiQAPack.load(folder)``) into the database
        at ``url``, its nodes and vectors as they are (nothing is parsed or embedded again),
        ``batch_documents`` documents per transaction."""
        source_vectors = pack.index.vector_store
        if not hasattr(source_vectors, "get_embeddings") and not hasattr(source_vectors, "get"):
            raise ValueError(f"from_pack reads the vectors back from the pack's vector store; {type(source_vectors).__name__} cannot")
        target = cls.open(url, llm=pack.llm, embed_model=pack.embed_model, create=True, **pack.config.model_dump(), **kwargs)
        docstore = pack.index.docstore
        infos = docstore.get_all_ref_doc_info() or {}
        refs = sorted(infos)
        with target.store.bulk_load():
            for start in range(0, len(refs), batch_documents):
                batch = refs[start:start + batch_documents]
                documents, nodes = [], []
                for ref in batch:
                    doc_nodes = docstore.get_nodes(list(infos[ref].node_ids))
                    ids = [n.node_id for n in doc_nodes]
                    vectors = (
                        source_vectors.get_embeddings(ids) if hasattr(source_vectors, "get_embeddings")
                        else [source_vectors.get(i) for i in ids]  # SimpleVectorStore
                    )
                    for node, vector in zip(doc_nodes, vectors):
                        node.embedding = [float(v) for v in vector]
                    nodes += doc_nodes
                    documents.append(Document(id_=ref, text="", metadata={schema.DOCUMENT_ID: infos[ref].metadata.get(schema.DOCUMENT_ID, ref)}))
                    if ref in pack.file_stats:
                        target.file_stats[ref] = pack.file_stats[ref]
                hashes = {ref: docstore.get_document_hash(ref) or "" for ref in batch}
                target._write_batch(documents, [], nodes, hashes=hashes, vectors_as_given=True)
        target.store.analyze()
        target._invalidate()
        return target

    # -- what the folder pack keeps in memory, read from the database ----------------------
    @property
    def node_count(self) -> int:
        return self.store.node_count()

    def _documents(self) -> Dict[str, str]:
        return self.store.documents()

    def _ensure_routes(self) -> None:
        if not self._routes_stale:
            return
        from llama_index_hiqa.retrievers.multi_route import MultiRouteConfig
        from llama_index_hiqa.storage.pg_routes import PostgresMultiRouteRetriever

        routes = route_settings(self.config)
        candidates = int(routes.get("candidates_per_route", MultiRouteConfig().candidates_per_route))
        # HNSW returns at most ef_search rows: never fewer than the route's candidates.
        ef_search = max(self.store.settings.hnsw_ef_search, candidates)
        self._multi_route = PostgresMultiRouteRetriever(
            self.store, self.index.as_retriever(similarity_top_k=candidates, vector_store_kwargs={"hnsw_ef_search": ef_search}),
            keyword_extractor=_pack.keyword_extractor(self.config), ef_search=ef_search, **routes,
        )
        self._graph = None
        if self.stored_graph is not None and self.store.node_count():
            self._graph = self.stored_graph.retriever(
                **graph_retriever_settings(
                    self.index, self.config, self.embed_model, self.llm, _pack.keyword_extractor(self.config)
                )
            )
        self._routes_stale = False
        self._retriever = None
        self._postprocessors = None

    # -- writes: one transaction each ------------------------------------------------------
    def ingest(self, documents: Any, *args: Any, **kwargs: Any) -> Any:
        """:meth:`HiQAPack.ingest`, each batch one transaction; into an empty store, the HNSW
        index is built once after the last batch (:meth:`PostgresStore.bulk_load`)."""
        with self.store.bulk_load() as deferred:
            report = super().ingest(documents, *args, **kwargs)
        if deferred:
            self.store.analyze()
        return report

    def _write_batch(
        self, documents: Sequence[Document], replaced: Sequence[str], nodes: Sequence[BaseNode],
        hashes: Optional[Dict[str, str]] = None, vectors_as_given: bool = False,
    ) -> int:
        if not vectors_as_given and nodes:
            # The vectors as the folder store keeps them (MatrixVectorStore: float32 unit rows),
            # so the chunk graph built from them is the folder store's bit for bit (cosines
            # that tie in float32 are broken by row; a normalisation more or less changes a
            # last bit). Cosine search is unchanged.
            from llama_index_hiqa.storage.vector_store import _unit_rows

            units = _unit_rows(np.asarray([n.get_embedding() for n in nodes], dtype=np.float32))
            for node, unit in zip(nodes, units):
                node.embedding = unit.tolist()
        by_ref: Dict[str, List[BaseNode]] = {}
        for node in nodes:
            by_ref.setdefault(node.ref_doc_id or "", []).append(node)
        records = [self._record(doc, by_ref.get(doc.doc_id, [])) for doc in documents]
        for record in records:
            record.doc_hash = (hashes or {}).get(record.ref_doc_id, record.doc_hash)
        extractor = _pack.keyword_extractor(self.config)
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
        return self._in_transaction(
            self.store.write, self.index.vector_store, self.index.docstore, records, replaced, keywords,
            then=self.heading_vectors.writer(nodes, self.embed_model, self._graph_sync(nodes)),
        )

    def _graph_sync(self, nodes: Sequence[BaseNode]) -> Any:
        """What updates the chunk graph in a write's transaction (``None`` without a graph)."""
        stored = self.stored_graph
        return None if stored is None else (lambda conn: stored.sync(conn, nodes))

    def _in_transaction(self, write: Any, *args: Any, **kwargs: Any) -> int:
        try:
            return write(*args, **kwargs)
        except BaseException:
            # The graph in memory may hold what was rolled back: read it again when next used.
            if self.stored_graph is not None:
                self.stored_graph.forget()
            raise

    def _record(self, doc: Document, nodes: List[BaseNode]) -> DocumentRecord:
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
            doc_hash=doc.hash, file_stat=self.file_stats.get(doc.doc_id) or None, pages=pages or len(nodes), nodes=nodes,
        )

    def delete_document(self, document_id: str) -> int:
        documents = self._documents()
        refs = [ref for doc_id, ref in documents.items() if document_id in (doc_id, ref)]
        if not refs:
            raise UnknownNodeError(f"no indexed document {document_id!r}; known: {sorted(documents)[:10]}")
        removed = self._in_transaction(self.store.delete, self.index.docstore, refs, then=self._graph_sync([]))
        for ref in refs:
            self.file_stats.pop(ref, None)
        self._invalidate()
        return removed

    def persist(self, persist_dir: Any = None) -> Any:
        """Save the settings; the indexes need nothing, every
        write committed already. (Copying a database pack into a folder is not supported;
        build the folder store from the documents.)"""
        if persist_dir not in (None, self.store.url):
            raise self.store.error(f"is a PostgreSQL pack; it cannot be persisted to {persist_dir}")
        self.store.save_config(self.config.model_dump())
        return self.store.masked_url

    def close(self) -> None:
        """Close the connection pools."""
        self.store.dispose()
