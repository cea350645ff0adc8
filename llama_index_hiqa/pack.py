"""HiQAPack: the whole HiQA pipeline in one object, for a LlamaIndex user.

HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for
Multi-Documents QA" (Chen et al.), §Method, Figure 2) is a pipeline: Markdown Formatter →
Hierarchical Contextual Augmentor → Multi-Route Retriever → answer. This module wires the
pack's components into that default path and hands back ordinary LlamaIndex objects::

    pack = HiQAPack.from_directory("manuals/")        # or HiQAPack.from_documents(docs)
    print(pack.run("What is the output voltage of the NX-2043?"))
    query_engine = pack.as_query_engine()              # / as_retriever() / as_chat_engine()

Ingestion: :class:`~llama_index_hiqa.PDFLayoutReader` → parser
(:class:`~llama_index_hiqa.MarkdownFormatterParser` when an LLM is set, else
:class:`~llama_index_hiqa.LayoutMarkdownParser`) → :class:`~llama_index_hiqa.CascadingMetadataTransform`
→ :class:`~llama_index_hiqa.CriticalKeywordExtractor`, run through LlamaIndex's
``IngestionPipeline`` → ``VectorStoreIndex`` (any vector store passed in; in memory by default).
Retrieval: :class:`~llama_index_hiqa.MultiRouteRetriever` (vector + BM25 + critical keywords),
optionally followed by :class:`~llama_index_hiqa.ChunkGraphRetriever` evidence chains (IIER) and
:class:`~llama_index_hiqa.SegmentIntegrationPostprocessor` (TextRAG relevant segments).
Answering: LlamaIndex's response synthesis with the configured LLM; with no LLM the answer is
the retrieved evidence with citations (document, section path, pages) and a notice — never an
error.

LlamaIndex deprecated ``BaseLlamaPack``; the familiar ``get_modules()`` / ``run()`` shape is
kept without depending on it. ``persist(dir)`` / ``HiQAPack.load(dir)`` save and load the
docstore and vector store (``StorageContext``), the BM25 and keyword indexes
(``MultiRouteRetriever.persist``), the chunk graph (``ChunkInteractionGraph.persist``) and the
configuration (JSON) — `storage/pack_folder.py` for a folder, `storage/pg_pack.py` for a
database — so a second process answers without re-ingesting.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from llama_index.core import Settings, StorageContext, VectorStoreIndex
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.response.schema import Response
from llama_index.core.chat_engine.types import BaseChatEngine
from llama_index.core.llms import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import BaseNode, Document, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_hiqa import schema
# The no-LLM engines and citations live in answers.py; re-exported here, where they were first.
from llama_index_hiqa.answers import (  # noqa: F401
    EVIDENCE_SNIPPET_CHARS,
    NO_LLM_NOTICE,
    EvidenceChatEngine,
    EvidenceQueryEngine,
    citation,
    evidence_answer,
    format_citation,
)
from llama_index_hiqa.defaults import resolve_llm
from llama_index_hiqa.pack_config import (  # noqa: F401  (HiQAPackConfig re-exported: it was defined here)
    HiQAPackConfig,
    default_embed_model,
    keyword_extractor,
    model_identity,
    route_settings,
    warn_inapplicable_settings,
)
from llama_index_hiqa.errors import EmptyCorpusError, UnknownNodeError, VectorStoreFeatureError
from llama_index_hiqa.ingestion import (
    Checkpointer, IngestionReport, batched, file_stat, in_shard, timed_iter, upsert_plan,
)
from llama_index_hiqa.ingestion_workers import batch_runner
from llama_index_hiqa.pack_arguments import check_pack_arguments, checked_documents
from llama_index_hiqa.vector_store_access import check_nodes_fit, delete_ref_doc, prepare_nodes_for_store
from llama_index_hiqa.retrievers.chain_augmented import ChainAugmentedRetriever
from llama_index_hiqa.retrievers.document_focus import DocumentFocusRetriever
from llama_index_hiqa.settings import updated
from llama_index_hiqa.storage.heading_vectors import HeadingVectors
from llama_index_hiqa.storage.vector_store import MatrixVectorStore

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- the pack
class HiQAPack:
    """HiQA's default pipeline over a collection of look-alike documents.

    Build with :meth:`from_directory`, :meth:`from_documents` or :meth:`load`; use
    :meth:`run`, :meth:`as_query_engine`, :meth:`as_retriever`, :meth:`as_chat_engine`;
    keep up to date with :meth:`ingest` / :meth:`add_documents` / :meth:`delete_document`
    (re-ingesting a document replaces it; an unchanged one costs nothing); save with
    :meth:`persist`, which never leaves a half-written store behind.

    What stays in memory at query time: the docstore (every node's text and metadata, as
    LlamaIndex keeps it), the vectors (4 bytes a dimension in :class:`MatrixVectorStore`), the
    BM25 matrix and the keyword postings; documents and their layout facts are dropped once
    their batch is indexed.
    """

    def __init__(
        self,
        index: VectorStoreIndex,
        config: Optional[HiQAPackConfig] = None,
        llm: Optional[LLM] = None,
        embed_model: Optional[BaseEmbedding] = None,
        _multi_route: Optional[BaseRetriever] = None,
        _graph: Any = None,
    ) -> None:
        check_pack_arguments(llm=llm, embed_model=embed_model)
        self.index = index
        self.config = config or HiQAPackConfig()
        self.llm = resolve_llm(llm)
        warn_inapplicable_settings(self.config, self.llm)
        self.embed_model = embed_model or index._embed_model
        self.read_failures: List[Any] = []
        self._multi_route = _multi_route
        self._graph = _graph
        # Built on first use after a change, not once per added batch: BM25 has no
        # incremental update, so an ingestion of many batches rebuilds it once.
        self._routes_stale = _multi_route is None or (self.config.use_chunk_graph and _graph is None)
        self._keyword_index: Any = getattr(_multi_route, "keyword_index", None)
        self._retriever: Optional[BaseRetriever] = None
        self._postprocessors: Optional[List[BaseNodePostprocessor]] = None
        # document id -> (size, mtime_ns) of the file it was read from: a folder re-ingestion
        # leaves a file with the same facts unread (the document hash decides for the others).
        self.file_stats: Dict[str, List[int]] = {}
        self.store_path: Optional[Path] = None  # the folder it was loaded from / persisted to
        self._snapshot: Optional[str] = None  # the snapshot of store_path it holds (conflict check)
        self.heading_vectors: Any = HeadingVectors()  # the focus's, computed at ingestion

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_directory(cls, path: Union[str, Path], recursive: bool = False, **kwargs: Any) -> "HiQAPack":
        """Read every .pdf/.html/.docx/.md/.txt file of a folder and build, a batch of files at a time
        (failures are logged, skipped and listed in ``read_failures``).

        Raises :class:`~llama_index_hiqa.errors.EmptyCorpusError` when nothing is readable.
        """
        folder = Path(path)
        if not folder.is_dir():
            raise EmptyCorpusError(folder, [f"{folder}: no such folder"])
        progress, store = kwargs.pop("progress", None), kwargs.get("store")
        kind = _store_kind(store, kwargs)
        if kind == "folder":  # fail before the work
            from llama_index_hiqa.storage.pack_folder import check_writable

            check_writable(Path(store))
        pack = cls.empty(**kwargs)
        pack.add_directory(folder, recursive=recursive, progress=progress)
        if kind == "folder":
            pack.persist(store)
        elif kind == "embedded":
            pack.persist()  # the batches are committed; this saves the BM25 index for the next process
        return pack

    @classmethod
    def from_documents(
        cls,
        documents: Iterable[Document],
        llm: Optional[LLM] = None,
        embed_model: Optional[BaseEmbedding] = None,
        vector_store: Optional[BasePydanticVectorStore] = None,
        config: Optional[HiQAPackConfig] = None,
        **settings: Any,
    ) -> "HiQAPack":
        """Parse, augment and index ``documents`` (any LlamaIndex Documents, a list or a
        generator; the reader's give page and heading facts). ``settings`` are
        :class:`HiQAPackConfig` fields."""
        pack = cls.empty(llm=llm, embed_model=embed_model, vector_store=vector_store, config=config, **settings)
        report = pack.ingest(documents)
        if not pack.node_count:
            raise EmptyCorpusError("documents", report.empty_documents)
        return pack

    @classmethod
    def empty(
        cls,
        llm: Optional[LLM] = None,
        embed_model: Optional[BaseEmbedding] = None,
        vector_store: Optional[BasePydanticVectorStore] = None,
        config: Optional[HiQAPackConfig] = None,
        **settings: Any,
    ) -> "HiQAPack":
        """A pack with no documents yet (fill it with :meth:`ingest`); settings are validated here.

        ``store="postgresql://USER@HOST/DB"``: the pack of that database (created when it
        holds none; every ingested batch commits there). A folder ``store`` is written by
        :meth:`from_directory` once it has read the folder."""
        kind = _store_kind(settings.get("store"), {**(config.model_dump() if config else {}), **settings})
        store = settings.pop("store", None)
        check_pack_arguments(llm=llm, embed_model=embed_model, vector_store=vector_store, store=store)
        if kind is None and settings.get("store_format", getattr(config, "store_format", None)) == "embedded":
            from llama_index_hiqa.errors import InvalidSettingError

            raise InvalidSettingError("store_format", "an embedded store lives in a folder: pass store=FOLDER with it")
        if kind == "embedded":  # every ingested batch commits to the store
            if vector_store is not None:
                raise ValueError("an embedded store brings its own vector store (MemmapVectorStore); pass no vector_store")
            from llama_index_hiqa.storage.embedded_pack import EmbeddedHiQAPack

            return EmbeddedHiQAPack.open(store, llm=llm, embed_model=embed_model, create=True, **{
                **(config.model_dump() if config is not None else {}), **settings})
        if _is_database(store):
            if vector_store is not None:
                raise ValueError("a PostgreSQL store brings its own vector store (pgvector); pass no vector_store")
            from llama_index_hiqa.storage.pg_pack import PostgresHiQAPack

            return PostgresHiQAPack.open(store, llm=llm, embed_model=embed_model, create=True, **{
                **(config.model_dump() if config is not None else {}), **settings})
        config = updated(config, settings, model_class=HiQAPackConfig)
        embed_model = default_embed_model(embed_model, config.embed_backend)
        storage = StorageContext.from_defaults(vector_store=vector_store or MatrixVectorStore())
        # The BM25 and keyword routes and segment integration read the nodes from the
        # docstore, also when the vector store keeps its own copy of the text.
        index = VectorStoreIndex(
            [], storage_context=storage, embed_model=embed_model, store_nodes_override=True
        )
        return cls(index, config=config, llm=llm, embed_model=embed_model)

    def _reader(self, recursive: bool) -> Any:
        from llama_index_hiqa.readers.pdf import PDFLayoutReader

        return PDFLayoutReader(
            recursive=recursive, show_progress=self.config.show_progress,
            detect_unruled_tables=self.config.detect_unruled_tables,
        )

    # -- routes (built lazily after changes) ---------------------------------------------
    @property
    def multi_route(self) -> BaseRetriever:
        """The :class:`~llama_index_hiqa.MultiRouteRetriever` over the current nodes."""
        self._ensure_routes()
        return self._multi_route  # type: ignore[return-value]

    @property
    def graph(self) -> Any:
        """The :class:`~llama_index_hiqa.ChunkGraphRetriever` (``None`` unless enabled)."""
        self._ensure_routes()
        return self._graph

    def _ensure_routes(self) -> None:
        if not self._routes_stale:
            return
        from llama_index_hiqa.retrievers.multi_route import MultiRouteRetriever
        from llama_index_hiqa.indexes.keyword_index import KeywordIndex

        nodes = list(self.index.docstore.docs.values())
        if self._keyword_index is None:
            self._keyword_index = KeywordIndex.from_nodes(nodes)
        self._multi_route = MultiRouteRetriever.from_index(
            self.index, nodes=nodes, docstore=self.index.docstore, keyword_extractor=keyword_extractor(self.config),
            keyword_index=self._keyword_index, **route_settings(self.config),
        )
        self._graph = self._build_graph() if self.config.use_chunk_graph and nodes else None
        self._routes_stale = False
        self._retriever = None
        self._postprocessors = None

    def _build_graph(self) -> Any:
        from llama_index_hiqa.retrievers.chunk_graph import ChunkGraphRetriever

        settings = self.config.chunk_graph
        return ChunkGraphRetriever.from_index(
            self.index, embed_model=self.embed_model, llm=self.llm,
            keyword_fn=keyword_extractor(self.config).extract_query, graph_settings=settings.graph.model_dump(),
            show_progress=self.config.show_progress, **settings.search.model_dump(),
        )

    def _invalidate(self) -> None:
        self._routes_stale = True
        self._retriever = None
        self._postprocessors = None

    # -- the familiar pack shape -------------------------------------------------------
    @property
    def nodes(self) -> List[BaseNode]:
        """The indexed nodes, in document order."""
        nodes = list(self.index.docstore.docs.values())
        return sorted(nodes, key=lambda n: (schema.get_document_id(n) or "", schema.get_position(n) or 0))

    @property
    def node_count(self) -> int:
        """Number of indexed nodes (from the docstore's per-document records: no node is parsed)."""
        from llama_index_hiqa.storage.pack_files import docstore_node_ids

        return len(docstore_node_ids(self.index.docstore))

    @property
    def document_ids(self) -> List[str]:
        """``schema.DOCUMENT_ID`` of every indexed document."""
        return sorted(self._documents())

    def _documents(self) -> Dict[str, str]:
        """``{schema.DOCUMENT_ID: ref_doc_id}`` from the docstore's per-document records (no
        scan over the nodes)."""
        infos = self.index.docstore.get_all_ref_doc_info() or {}
        return {str(info.metadata.get(schema.DOCUMENT_ID) or ref_id): ref_id for ref_id, info in infos.items()}

    def get_modules(self) -> Dict[str, Any]:
        modules = {
            "index": self.index,
            "vector_store": self.index.vector_store,
            "docstore": self.index.docstore,
            "multi_route_retriever": self.multi_route,
            "chunk_graph_retriever": self.graph,
            "retriever": self.as_retriever(),
            "node_postprocessors": self.node_postprocessors(),
            "query_engine": self.as_query_engine(),
            "llm": self.llm,
            "embed_model": self.embed_model,
            "config": self.config,
        }
        return modules

    def as_retriever(self, **kwargs: Any) -> BaseRetriever:
        """The multi-route retriever with its best document ranked again and listed first
        (:class:`DocumentFocusRetriever`, ``document_focus={...}``), or, with the chunk graph on,
        sharing its top k with the chunk-graph chains (:class:`ChainAugmentedRetriever`,
        ``chunk_graph={"head_share": ...}``).

        ``kwargs`` are MultiRouteConfig settings for this retriever only (e.g.
        ``similarity_top_k=10``, ``mode="rrf"``); it shares the pack's BM25 and keyword indexes.
        """
        if not kwargs and self._retriever is not None and not self._routes_stale:
            return self._retriever
        retriever: BaseRetriever = self.multi_route
        if kwargs:
            retriever = self.multi_route.with_settings(**kwargs)  # type: ignore[attr-defined]
        if self.graph is not None:
            retriever = ChainAugmentedRetriever(retriever, self.graph, **self.config.chunk_graph.budget.model_dump())
        elif self.config.document_focus.enabled:
            retriever = DocumentFocusRetriever(
                retriever, embed_model=self.embed_model, heading_vectors=self.heading_vectors,
                config=self.config.document_focus,
            )
        if not kwargs:
            self._retriever = retriever
        return retriever

    def node_postprocessors(self) -> List[BaseNodePostprocessor]:
        if self._postprocessors is not None:
            return list(self._postprocessors)
        postprocessors: List[BaseNodePostprocessor] = []
        if self.config.use_segment_integration:
            from llama_index_hiqa.postprocessors.segment_integration import SegmentIntegrationPostprocessor

            postprocessors.append(
                SegmentIntegrationPostprocessor(
                    preset=self.config.segment_preset, docstore=self.index.docstore, embed_model=self.embed_model
                )
            )
        self._postprocessors = postprocessors
        return list(postprocessors)

    def retrieve(self, question: str) -> List[NodeWithScore]:
        """Evidence for ``question`` after the configured post-processing."""
        bundle = QueryBundle(question)
        nodes = self.as_retriever().retrieve(bundle)
        for post in self.node_postprocessors():
            nodes = post.postprocess_nodes(nodes, query_bundle=bundle)
        return nodes

    def as_query_engine(self, llm: Optional[LLM] = None, **kwargs: Any) -> BaseQueryEngine:
        """LlamaIndex response synthesis with the LLM; without one, cited evidence + notice."""
        llm = llm or self.llm
        postprocessors = kwargs.pop("node_postprocessors", None) or self.node_postprocessors()
        if llm is None:
            return EvidenceQueryEngine(
                retriever=self.as_retriever(), node_postprocessors=postprocessors,
                streaming=bool(kwargs.get("streaming", False)),
            )
        return RetrieverQueryEngine.from_args(
            self.as_retriever(), llm=llm, node_postprocessors=postprocessors, **kwargs
        )

    def as_chat_engine(self, llm: Optional[LLM] = None, **kwargs: Any) -> BaseChatEngine:
        """``CondensePlusContextChatEngine`` over the pack's retriever; evidence-only without an LLM."""
        llm = llm or self.llm
        if llm is None:
            return EvidenceChatEngine(self.as_query_engine())  # type: ignore[arg-type]
        from llama_index.core.chat_engine import CondensePlusContextChatEngine

        return CondensePlusContextChatEngine.from_defaults(
            self.as_retriever(), llm=llm, node_postprocessors=self.node_postprocessors(), **kwargs
        )

    def run(self, question: str, **kwargs: Any) -> Response:
        """Answer one question (``Response`` with ``source_nodes``; print it for the text;
        ``streaming=True``: a ``StreamingResponse`` whose ``response_gen`` yields the tokens)."""
        from llama_index_hiqa.readers._text_decode import valid_unicode

        return self.as_query_engine(**kwargs).query(valid_unicode(question))

    def figures(self, response: Any) -> List[Dict[str, Any]]:
        """The figures that go with an answer (a response or its source nodes): figures it
        retrieved, then those on its cited pages and sections; each with document, page,
        section, caption, box and the image file saved in the store (see
        :func:`llama_index_hiqa.figures.figures_for`)."""
        from llama_index_hiqa.figures import FIGURES_DIRNAME, figures_for

        sources = getattr(response, "source_nodes", response) or []
        images_dir = None if self.store_path is None else Path(self.store_path) / FIGURES_DIRNAME
        return figures_for(sources, self.index.docstore, images_dir)

    # -- ingestion and updates -------------------------------------------------------------
    def ingest(
        self,
        documents: Iterable[Document],
        batch_size: Optional[int] = None,
        checkpoint: Optional[Callable[[], Any]] = None,
        checkpoint_seconds: Optional[float] = None,
        progress: Optional[Callable[[IngestionReport], Any]] = None,
        report: Optional[IngestionReport] = None,
    ) -> IngestionReport:
        """Index ``documents`` a batch at a time (read → parse → cascade → keywords → embed →
        index); returns what was added, replaced or left unchanged and the time per stage.

        A document whose id (``Document.doc_id``; the reader's is stable per file) is already
        indexed with the same hash is skipped; with another hash its old nodes are replaced.
        ``checkpoint`` (e.g. ``lambda: pack.persist(store)``) is called every
        ``checkpoint_seconds`` so an interrupted run resumes where it was; ``progress`` gets
        the running report after every batch; ``report`` (filled and returned) lets a caller
        watch the running stage (``report.running_line()``) inside a long batch.
        """
        report = report if report is not None else IngestionReport()
        saver = Checkpointer(checkpoint, checkpoint_seconds)
        docstore = self.index.docstore
        planned = self._planned_batches(checked_documents(documents), batch_size, report)
        runner = batch_runner(
            self.config.ingest_workers, self.config, self.llm, self.embed_model, report,
            keywords=keyword_extractor(self.config),
        )
        with runner:
            for fresh, nodes in runner(planned):
                if fresh:
                    # Decided at write time: with workers, a document read twice may still be
                    # in flight when its first version's batch was planned.
                    replaced = [doc.doc_id for doc in fresh if docstore.get_document_hash(doc.doc_id) is not None]
                    with report.running("index", len(nodes)):
                        report.nodes_removed += self._write_batch(fresh, replaced, nodes)
                    report.documents_added += len(fresh) - len(replaced)
                    report.documents_replaced += len(replaced)
                    report.nodes_added += len(nodes)
                    report.node_ids += [n.node_id for n in nodes]
                    self._invalidate()
                del fresh, nodes  # the batch's documents and layout facts go here
                if progress is not None:
                    progress(report)
                saver.maybe_save()
        return report

    def _planned_batches(
        self, documents: Iterable[Document], batch_size: Optional[int], report: IngestionReport
    ) -> Iterator[List[Document]]:
        """The new and changed documents of each batch read (an empty list for a batch with
        none), the unchanged ones counted and left out."""
        docstore = self.index.docstore
        for batch in batched(timed_iter(documents, report), batch_size or self.config.ingest_batch_size):
            new, changed, unchanged = upsert_plan(batch, docstore.get_document_hash)
            report.documents_unchanged += unchanged
            report.empty_documents += [
                str(d.metadata.get(schema.FILE_NAME) or d.doc_id) for d in batch if not d.text.strip()
            ]
            for doc in batch:
                stat = file_stat(doc.metadata.get(schema.FILE_PATH))
                if stat is not None:
                    self.file_stats[doc.doc_id] = stat
            yield new + changed

    def _write_batch(self, documents: Sequence[Document], replaced: Sequence[str], nodes: Sequence[BaseNode]) -> int:
        """Index one batch's ``nodes`` in place of the documents ``replaced`` (ids of earlier
        versions); returns the number of nodes removed. A database store overrides this with
        one transaction."""
        from llama_index_hiqa.storage.bulk_insert import insert_nodes

        prepare_nodes_for_store(self.index.vector_store, nodes)
        check_nodes_fit(self.index.vector_store, nodes)  # before the old versions are removed
        removed = sum(self._remove_ref_doc(ref_doc_id) for ref_doc_id in replaced)
        insert_nodes(self.index, nodes)  # linear in the batch (LlamaIndex's is quadratic per document)
        self.heading_vectors.add_nodes(nodes, self.embed_model)
        for doc in documents:
            self.index.docstore.set_document_hash(doc.doc_id, doc.hash)
        if self._keyword_index is not None:
            for node in nodes:
                self._keyword_index.add(node.node_id, schema.get_critical_keywords(node))
        return removed

    def add_documents(self, documents: Iterable[Document]) -> List[BaseNode]:
        """Index ``documents`` (replacing earlier versions of the same ids); returns the new
        nodes. The BM25, keyword and graph indexes follow on the next question."""
        report = self.ingest(documents)
        return list(self.index.docstore.get_nodes(report.node_ids)) if report.node_ids else []

    def add_directory(
        self, path: Union[str, Path], recursive: bool = False, shard: Optional[Tuple[int, int]] = None,
        **ingest_kwargs: Any,
    ) -> IngestionReport:
        """:meth:`ingest` every readable file of a folder. A file whose size and modification
        time are those it had when it was indexed is not even read; another with an unchanged
        document hash is read but costs no parsing or embedding. ``shard=(i, n)`` ingests only
        the i-th of n shards of the folder's files (split by a hash of each file's path, so
        several machines writing one database can share a folder)."""
        reader = self._reader(recursive)
        docstore = self.index.docstore
        unread: List[str] = []
        root = Path(path)

        def unchanged(document_id: str, file: Path) -> bool:
            if shard is not None and not in_shard(Path(os.path.relpath(Path(file).resolve(), root.resolve())).as_posix(), shard):
                return True  # another shard's file: not read, not counted
            same = (
                self.file_stats.get(document_id) == file_stat(file)
                and docstore.get_document_hash(document_id) is not None
            )
            if same:
                unread.append(document_id)
            return same

        report = self.ingest(reader.lazy_load_data(root, skip=unchanged), **ingest_kwargs)
        report.documents_unchanged += len(unread)
        self.read_failures = list(reader.failures)
        # A shard may hold no file of a small folder; the folder is empty only if it has no shard.
        if not self.node_count and (shard is None or reader.failures):
            raise EmptyCorpusError(path, reader.failures)
        return report

    def delete_document(self, document_id: str) -> int:
        """Remove a document (its ``schema.DOCUMENT_ID``, e.g. the file stem, or its
        ``Document.doc_id``) from every index; returns the number of nodes removed."""
        documents = self._documents()
        ref_ids = {ref for doc_id, ref in documents.items() if document_id in (doc_id, ref)}
        if not ref_ids:
            raise UnknownNodeError(f"no indexed document {document_id!r}; known: {sorted(documents)[:10]}")
        removed = sum(self._remove_ref_doc(ref_id) for ref_id in ref_ids)
        self._invalidate()
        return removed

    def _remove_ref_doc(self, ref_doc_id: str) -> int:
        info = self.index.docstore.get_ref_doc_info(ref_doc_id)
        node_ids = list(info.node_ids) if info else []
        try:
            delete_ref_doc(self.index, ref_doc_id)
        except NotImplementedError as exc:
            # The vector store refused before anything was deleted (the index deletes from
            # the vector store first): nothing is lost, and the user learns what to change.
            store = type(self.index.vector_store).__name__
            raise VectorStoreFeatureError(
                store=store,
                feature=f"replacing or deleting document {ref_doc_id!r} needs its vectors deleted, and {store} "
                f"cannot delete ({exc})",
                fix="rebuild the pack from the folder, or use a vector store that deletes (the pack's default, "
                "Chroma, Qdrant, LanceDB, Milvus, DuckDB, pgvector)",
            ) from exc
        self.file_stats.pop(ref_doc_id, None)
        if self._keyword_index is not None:
            for node_id in node_ids:
                self._keyword_index.remove(node_id)
        return len(node_ids)

    # -- persistence (storage/pack_folder.py writes and reads the folder) -------------------
    def persist(self, persist_dir: Union[str, Path]) -> Path:
        """Save everything into a new snapshot of the store folder and switch to it
        atomically: a process killed at any instant leaves the previous store loadable."""
        from llama_index_hiqa.storage.pack_folder import write_pack

        self._ensure_routes()
        root = Path(persist_dir)
        # Saving over the store this pack was loaded from: it must still be the snapshot loaded.
        same = self.store_path is not None and os.path.realpath(self.store_path) == os.path.realpath(root)
        self._snapshot = write_pack(
            root, index=self.index, multi_route=self._multi_route, graph=self._graph,
            previous_store=self.store_path, expected_snapshot=self._snapshot if same else None,
            heading_vectors=self.heading_vectors,
            payload={
                "config": self.config.model_dump(),
                "index_id": self.index.index_id,
                "embed_model": model_identity(self.embed_model),
                "node_count": self.node_count,
                "documents": self.document_ids,
                "file_stats": self.file_stats,
            },
        )
        self.store_path = root
        return root

    @classmethod
    def load(
        cls,
        persist_dir: Union[str, Path],
        llm: Optional[LLM] = None,
        embed_model: Optional[BaseEmbedding] = None,
        vector_store: Optional[BasePydanticVectorStore] = None,
        **settings: Any,
    ) -> "HiQAPack":
        """Load what :meth:`persist` wrote, checking every file first (a missing, truncated
        or inconsistent one is a :class:`PackStoreError` naming it). Pass ``vector_store``
        again for a remote store and the embedding model the pack was built with (the
        packaged MiniLM by default)."""
        check_pack_arguments(llm=llm, embed_model=embed_model, vector_store=vector_store, store=persist_dir)
        if _is_database(persist_dir):  # "postgresql://...": the pack of that database
            from llama_index_hiqa.storage.pg_pack import PostgresHiQAPack

            if vector_store is not None:
                raise ValueError("a PostgreSQL store brings its own vector store (pgvector); pass no vector_store")
            return PostgresHiQAPack.open(str(persist_dir), llm=llm, embed_model=embed_model, **settings)
        from llama_index_hiqa.storage.embedded import is_embedded_store

        if is_embedded_store(persist_dir):
            from llama_index_hiqa.storage.embedded_pack import EmbeddedHiQAPack

            if vector_store is not None:
                raise ValueError("an embedded store brings its own vector store (MemmapVectorStore); pass no vector_store")
            return EmbeddedHiQAPack.open(persist_dir, llm=llm, embed_model=embed_model, **settings)
        from llama_index_hiqa.storage.pack_folder import loaded_snapshot, open_folder, read_pack

        files, config = open_folder(Path(persist_dir), settings)
        stored = read_pack(
            files, config, embed_model=default_embed_model(embed_model, config.embed_backend),
            keywords=keyword_extractor(config), llm=llm, vector_store=vector_store,
        )
        pack = cls(
            stored.index, config=stored.config, llm=llm, embed_model=stored.embed_model,
            _multi_route=stored.multi_route, _graph=stored.graph,
        )
        pack.store_path = Path(persist_dir)
        pack._snapshot = loaded_snapshot(files)
        pack.file_stats = stored.file_stats
        pack.heading_vectors = HeadingVectors.for_snapshot(files, stored.embed_model)
        return pack


# --------------------------------------------------------------------------- helpers
def _is_database(store: Any) -> bool:
    from llama_index_hiqa.storage.postgres import is_postgres_url

    return is_postgres_url(store)


def _store_kind(store: Any, settings: Dict[str, Any]) -> Optional[str]:
    """``"database"``, ``"embedded"`` (asked for, or the folder holds one already), ``"folder"``
    or ``None`` (no store)."""
    if store is None:
        return None
    if _is_database(store):
        return "database"
    from llama_index_hiqa.storage.embedded import is_embedded_store

    if settings.get("store_format") == "embedded" or is_embedded_store(store):
        return "embedded"
    return "folder"


# Settings is re-exported so notebooks can configure the pack without a second import line.
__all__ = ["HiQAPack", "HiQAPackConfig", "EvidenceQueryEngine", "citation", "format_citation", "Settings"]
