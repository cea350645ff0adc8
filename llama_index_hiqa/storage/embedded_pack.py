"""HiQAPack on the embedded store: the same pack, its collection on disk instead of in memory.

``HiQAPack.from_directory(folder, store=S, store_format="embedded")``, ``HiQAPack.empty(store=S,
store_format="embedded")`` and ``HiQAPack.load(S)`` of such a store return an
:class:`EmbeddedHiQAPack` (:mod:`~llama_index_hiqa.storage.embedded` describes the files).
Parsing, embedding and the routes are the pack's own; what differs is where the results go and
what stays in memory: each ingested batch and each ``delete_document`` is one SQLite
transaction, and questions are answered by :class:`~llama_index_hiqa.storage.embedded_routes.EmbeddedMultiRouteRetriever`, which reads
nodes, keyword postings and the collection's shape from the database, vectors from the
memory-mapped matrix, and BM25 from bm25s arrays mapped from disk. The scores are those of the
folder store's :class:`~llama_index_hiqa.MultiRouteRetriever` over the same nodes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, Document
from llama_index.core.storage.index_store import SimpleIndexStore

from llama_index_hiqa import pack as _pack
from llama_index_hiqa import schema
from llama_index_hiqa.errors import InvalidSettingError, PackStoreError, UnknownNodeError
from llama_index_hiqa.pack import HiQAPack
from llama_index_hiqa.pack_config import HiQAPackConfig, model_identity, route_settings, same_model
from llama_index_hiqa.retrievers.bm25_route import BM25Route
from llama_index_hiqa.retrievers.multi_route import MultiRouteConfig
from llama_index_hiqa.storage.embedded import EmbeddedStore
from llama_index_hiqa.storage.embedded_routes import EmbeddedMultiRouteRetriever

logger = logging.getLogger(__name__)


class EmbeddedHiQAPack(HiQAPack):
    """A :class:`~llama_index_hiqa.HiQAPack` whose store is an embedded SQLite + memory-mapped
    folder (:class:`~llama_index_hiqa.storage.embedded.EmbeddedStore`)."""

    store: EmbeddedStore

    @classmethod
    def open(
        cls,
        root: Any,
        llm: Optional[LLM] = None,
        embed_model: Optional[BaseEmbedding] = None,
        create: bool = False,
        **settings: Any,
    ) -> "EmbeddedHiQAPack":
        """The pack of the embedded store ``root``; with ``create`` a new one when the folder
        holds none (``settings``: :class:`HiQAPackConfig` fields of a new pack, or overrides
        for this process of an existing one)."""
        store = EmbeddedStore.open(root, create=create)
        record = store.read_pack()
        if record is None:
            config = HiQAPackConfig(**{**settings, "store_format": "embedded"})
        else:
            try:
                HiQAPackConfig(**record["config"])
            except (ValueError, TypeError) as exc:
                raise PackStoreError(store.root, f"holds invalid settings ({exc})") from exc
            config = HiQAPackConfig(**{**record["config"], **settings, "store_format": "embedded"})
        if config.use_chunk_graph:
            raise InvalidSettingError(
                "use_chunk_graph", "the chunk graph is kept by the folder store only; use store_format='folder'"
            )
        embed_model = _pack.default_embed_model(embed_model, config.embed_backend)
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
        index = VectorStoreIndex([], storage_context=storage, embed_model=embed_model, store_nodes_override=True)
        pack = cls(index, config=config, llm=llm, embed_model=embed_model)
        pack.store = store
        pack.store_path = store.root
        pack.file_stats = store.file_stats()
        if record is None:
            pack._save_record()
        return pack

    def _save_record(self) -> None:
        self.store.save_pack({
            "config": self.config.model_dump(), "embed_model": model_identity(self.embed_model),
        })

    # -- what the folder pack keeps in memory, read from the database ----------------------
    @property
    def node_count(self) -> int:
        return self.store.node_count()

    def _documents(self) -> Dict[str, str]:
        return self.store.documents()

    def _ensure_routes(self) -> None:
        if not self._routes_stale:
            return
        routes = route_settings(self.config)
        candidates = int(routes.get("candidates_per_route", MultiRouteConfig().candidates_per_route))
        use_bm25 = bool(routes.get("use_bm25", True))
        from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever

        # Not index.as_retriever(): it restricts every query to the ids of the index struct,
        # which this pack leaves empty (the vector store lists its own nodes).
        vector = VectorIndexRetriever(
            self.index, similarity_top_k=candidates, node_ids=None, vector_store_kwargs={"ids_only": True}
        )
        self._multi_route = EmbeddedMultiRouteRetriever(
            self.store, vector,
            self._bm25_route() if use_bm25 and self.node_count else None,
            keyword_extractor=_pack.keyword_extractor(self.config), **routes,
        )
        self._graph = None
        self._routes_stale = False
        self._retriever = None
        self._postprocessors = None

    def _bm25_route(self) -> BM25Route:
        """The BM25 index of the current generation: read (memory-mapped) when saved, else
        built a chunk of nodes at a time and saved for the next process."""
        language = route_settings(self.config).get("bm25_language", "en")
        folder = self.store.bm25_folder()
        if folder is not None:
            return BM25Route.load(folder, mmap=True)
        generation = self.store.generation
        route = BM25Route.build_from_chunks(self.store.iter_nodes(), language)
        try:
            self.store.save_bm25(route, generation)
        except OSError as exc:  # a read-only store still answers; the next writer saves it
            logger.warning("the BM25 index of %s was not saved (%s); it is rebuilt at the next load", self.store.root, exc)
        return route

    # -- writes: one transaction each ------------------------------------------------------
    @classmethod
    def from_pack(cls, pack: HiQAPack, root: Any, batch_documents: int = 8, **settings: Any) -> "EmbeddedHiQAPack":
        """Copy a built pack (a folder store of any release, ``HiQAPack.load(folder)``) into a
        new embedded store at ``root``: its nodes and unit vectors as they are (nothing is
        parsed or embedded again), in the order the pack holds them, so the copy ranks as the
        pack does; ``batch_documents`` documents a transaction."""
        source = pack.index.vector_store
        if not hasattr(source, "get_embeddings") and not hasattr(source, "get"):
            raise ValueError(f"from_pack reads the vectors back from the pack's vector store; {type(source).__name__} cannot")
        config = {**pack.config.model_dump(), **settings}
        target = cls.open(root, llm=pack.llm, embed_model=pack.embed_model, create=True, **config)
        target._figure_source = pack.store_path
        docstore = pack.index.docstore
        infos = docstore.get_all_ref_doc_info() or {}
        by_ref: Dict[str, List[BaseNode]] = {}
        for node in docstore.docs.values():  # insertion order: the order the pack's routes break ties in
            by_ref.setdefault(node.ref_doc_id or "", []).append(node)
        refs = list(by_ref)
        for start in range(0, len(refs), batch_documents):
            batch = refs[start:start + batch_documents]
            nodes = [n for ref in batch for n in by_ref[ref]]
            ids = [n.node_id for n in nodes]
            vectors = source.get_embeddings(ids) if hasattr(source, "get_embeddings") else [source.get(i) for i in ids]
            for node, vector in zip(nodes, vectors):
                node.embedding = [float(v) for v in vector]
            documents = [
                Document(id_=ref, text="", metadata={schema.DOCUMENT_ID: (infos[ref].metadata if ref in infos else {}).get(schema.DOCUMENT_ID, ref)})
                for ref in batch
            ]
            for ref in batch:
                if ref in pack.file_stats:
                    target.file_stats[ref] = pack.file_stats[ref]
            target._write_batch(
                documents, [], nodes, hashes={ref: docstore.get_document_hash(ref) or "" for ref in batch}, unit=True
            )
            for node in nodes:
                node.embedding = None
        target.persist()
        return target

    def _write_batch(
        self, documents: Sequence[Document], replaced: Sequence[str], nodes: Sequence[BaseNode],
        hashes: Optional[Dict[str, str]] = None, unit: bool = False,
    ) -> int:
        from llama_index_hiqa.storage.bulk_insert import add_to_docstore
        from llama_index_hiqa.vector_store_access import check_nodes_fit, prepare_nodes_for_store

        vectors = self.store.vectors
        prepare_nodes_for_store(vectors, nodes)
        check_nodes_fit(vectors, nodes)
        self._save_figures(nodes)  # content-addressed files: a rollback leaves at most an unused one
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
            self.store.put_documents(self._records(documents, nodes))
            self.store.bump_generation()
        return removed

    def _records(self, documents: Sequence[Document], nodes: Sequence[BaseNode]) -> List[Tuple[Any, ...]]:
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
                self.file_stats.get(doc.doc_id),
            ))
        return records

    def _save_figures(self, nodes: Sequence[BaseNode]) -> None:
        if not any(n.metadata.get(schema.IMAGE_FILE) or n.metadata.get(schema.IMAGES) for n in nodes):
            return
        from llama_index_hiqa.figures import FIGURES_DIRNAME, save_figures

        # from_pack: the source store's figure files are copied, not rendered again
        previous = [Path(self._figure_source) / FIGURES_DIRNAME] if getattr(self, "_figure_source", None) else []
        report = save_figures(nodes, self.store.root / FIGURES_DIRNAME, previous_dirs=previous)
        for name, reason in report.missing:
            logger.warning("figure %s not saved: %s", name, reason)

    def _remove_ref_doc(self, ref_doc_id: str) -> int:
        removed = self.store.remove_document(ref_doc_id)
        self.file_stats.pop(ref_doc_id, None)
        return removed

    def delete_document(self, document_id: str) -> int:
        documents = self._documents()
        refs = [ref for doc_id, ref in documents.items() if document_id in (doc_id, ref)]
        if not refs:
            raise UnknownNodeError(f"no indexed document {document_id!r}; known: {sorted(documents)[:10]}")
        with self.store.db.transaction():
            removed = sum(self._remove_ref_doc(ref) for ref in refs)
            self.store.bump_generation()
        self._invalidate()
        return removed

    def persist(self, persist_dir: Any = None) -> Path:
        """Save the settings and the BM25 index for the next
        process; the nodes, vectors and postings committed with each batch already."""
        if persist_dir is not None and os.path.realpath(persist_dir) != os.path.realpath(self.store.root):
            raise PackStoreError(
                Path(persist_dir), f"this pack's store is the embedded store {self.store.root}; it is saved there"
            )
        self._save_record()
        if self.node_count:
            self._ensure_routes()
        self.store.db.checkpoint()
        return self.store.root

    def close(self) -> None:
        """Close the database."""
        self.store.close()
