"""HiQAPack: the whole HiQA pipeline in one object, for a LlamaIndex user.

HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for
Multi-Documents QA" (Chen et al.), §Method, Figure 2) is a pipeline: Markdown Formatter →
Hierarchical Contextual Augmentor → Multi-Route Retriever → answer. This module wires the
pack's components into that default path and hands back ordinary LlamaIndex objects::

    pack = HiQAPack.from_directory("manuals/")        # or HiQAPack.from_documents(docs)
    print(pack.run("What is the output voltage of the NX-2043?"))
    query_engine = pack.as_query_engine()              # / as_retriever() / as_chat_engine()

Ingestion: [`PDFLayoutReader`][llama_index_hiqa.readers.pdf.PDFLayoutReader] → parser
([`MarkdownFormatterParser`][llama_index_hiqa.parsers.markdown_formatter.MarkdownFormatterParser] when an LLM is set, else
[`LayoutMarkdownParser`][llama_index_hiqa.parsers.layout_markdown.LayoutMarkdownParser]) → [`CascadingMetadataTransform`][llama_index_hiqa.transforms.cascading_metadata.CascadingMetadataTransform]
→ [`CriticalKeywordExtractor`][llama_index_hiqa.transforms.critical_keywords.CriticalKeywordExtractor], run through LlamaIndex's
``IngestionPipeline`` → ``VectorStoreIndex`` (any vector store passed in; in memory by default).
Retrieval: [`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever] (vector + BM25 + critical keywords),
optionally followed by [`ChunkGraphRetriever`][llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever] evidence chains (IIER) and
[`SegmentIntegrationPostprocessor`][llama_index_hiqa.postprocessors.segment_integration.SegmentIntegrationPostprocessor] (TextRAG relevant segments).
Answering: LlamaIndex's response synthesis with the configured LLM; with no LLM the answer is
the retrieved evidence with citations (document, section path, pages) and a notice — never an
error.

LlamaIndex deprecated ``BaseLlamaPack``; the familiar ``get_modules()`` / ``run()`` shape is
kept without depending on it. Where the nodes live is the pack's store backend
([`llama_index_hiqa.storage.backends`][llama_index_hiqa.storage.backends]: a folder, an embedded database or PostgreSQL), which
the pack holds and asks for every read and write; ``persist(dir)`` / ``HiQAPack.load(dir)``
save and load it, so a second process answers without re-ingesting.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Literal, Optional, Sequence, Sized, Tuple, Union

from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.chat_engine.types import BaseChatEngine
from llama_index.core.llms import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, Document, NodeWithScore
from llama_index.core.vector_stores.types import BasePydanticVectorStore
from tqdm.auto import tqdm

from llama_index_hiqa import schema
from llama_index_hiqa.errors import DocumentReadError, EmptyCorpusError, PackStoreError, UnknownNodeError
from llama_index_hiqa.figures import FIGURES_DIRNAME, figures_for
from llama_index_hiqa.models.defaults import resolve_llm
from llama_index_hiqa.pack.answers import EvidenceChatEngine, EvidenceQueryEngine, PackChatEngine, PackQueryEngine
from llama_index_hiqa.pack.arguments import check_location, check_pack_arguments, checked_documents
from llama_index_hiqa.pack.config import (
    HiQAPackSettings,
    default_embed_model,
    keyword_extractor,
    model_identity,
    warn_inapplicable_settings,
)
from llama_index_hiqa.pack.ingestion import (
    Checkpointer, IngestionReport, batched, file_stat, in_shard, timed_iter, upsert_plan,
)
from llama_index_hiqa.pack.workers import batch_runner
from llama_index_hiqa.postprocessors.segment_integration import SegmentIntegrationPostprocessor
from llama_index_hiqa.progress import status
from llama_index_hiqa.questions import question_bundle, question_text
from llama_index_hiqa.readers._collection import plan_folder
from llama_index_hiqa.readers.pdf import SUPPORTED_SUFFIXES, PDFLayoutReader
from llama_index_hiqa.readers.source_files import read_source_files
from llama_index_hiqa.retrievers.chain_augmented import ChainAugmentedRetriever
from llama_index_hiqa.retrievers.document_focus import DocumentFocusRetriever
from llama_index_hiqa.retrievers.multi_route import MultiRouteRetriever
from llama_index_hiqa.settings import updated
from llama_index_hiqa.storage.backends import Resolvers, StoreBackend, open_backend, store_exists
from llama_index_hiqa.storage.backends.base import Routes, StoredHeadingVectors, copied_vectors
from llama_index_hiqa.storage.backends.folder import FolderBackend
from llama_index_hiqa.storage.embedded import EmbeddedStore
from llama_index_hiqa.storage.pg_connection import mask_url
from llama_index_hiqa.views.explanation import Explanation, explain_nodes
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

if TYPE_CHECKING:
    from llama_index_hiqa.pack.ray_ingestion import RayExecutor
    from llama_index_hiqa.storage.postgres import PostgresStore

logger = logging.getLogger(__name__)

# What every store backend of a pack makes its embedding model and keyword extractor with:
# this module's functions, looked up at each call, so replacing them here replaces them for
# every store (a test's cheap models, an application's own).
def _resolved_embed_model(given: Optional[BaseEmbedding], backend: Optional[str]) -> BaseEmbedding:
    return default_embed_model(given, backend)


def _resolved_keyword_extractor(config: HiQAPackSettings) -> CriticalKeywordExtractor:
    return keyword_extractor(config)


RESOLVERS = Resolvers(embed_model=_resolved_embed_model, keyword_extractor=_resolved_keyword_extractor)


# --------------------------------------------------------------------------- the pack
class HiQAPack:
    """HiQA's default pipeline over a collection of look-alike documents.

    Build with [`from_directory`][llama_index_hiqa.pack.hiqa_pack.HiQAPack.from_directory], [`from_documents`][llama_index_hiqa.pack.hiqa_pack.HiQAPack.from_documents] or [`load`][llama_index_hiqa.pack.hiqa_pack.HiQAPack.load]; use
    `run`, `as_query_engine`, [`as_retriever`][llama_index_hiqa.pack.hiqa_pack.HiQAPack.as_retriever], `as_chat_engine`;
    keep up to date with `ingest` / `add_documents` / `delete_document`
    (re-ingesting a document replaces it; an unchanged one costs nothing); save with
    [`persist`][llama_index_hiqa.pack.hiqa_pack.HiQAPack.persist], which never leaves a half-written store behind.

    Where the nodes live is `backend` (a
    [`StoreBackend`][llama_index_hiqa.storage.backends.base.StoreBackend]: the folder store, the
    embedded store or PostgreSQL). In the folder store what stays in memory at query time is
    the docstore, the vectors (4 bytes a dimension in [`MatrixVectorStore`][llama_index_hiqa.storage.vector_store.MatrixVectorStore]), the BM25
    matrix and the keyword postings; documents and their layout facts are dropped once their
    batch is indexed.

    Args:
        index: An index to wrap (any LlamaIndex vector store), held by a folder store backend.
        config: The settings (with ``index``).
        llm: The LLM (``Settings.llm`` when set; none means the no-LLM paths).
        embed_model: The embedding model (``index``'s when ``None``).
        backend: The store backend to hold instead of ``index`` (see [`load`][llama_index_hiqa.pack.hiqa_pack.HiQAPack.load], [`empty`][llama_index_hiqa.pack.hiqa_pack.HiQAPack.empty]).
    """

    def __init__(
        self,
        index: Optional[VectorStoreIndex] = None,
        config: Optional[HiQAPackSettings] = None,
        llm: Optional[LLM] = None,
        embed_model: Optional[BaseEmbedding] = None,
        backend: Optional[StoreBackend] = None,
    ) -> None:
        check_pack_arguments(llm=llm, embed_model=embed_model)
        if backend is None:
            if index is None:
                raise TypeError("HiQAPack needs an index or a store backend (or use HiQAPack.empty())")
            backend = FolderBackend(index, config or HiQAPackSettings(), embed_model, llm=llm, resolvers=RESOLVERS)
        self.backend = backend
        self.llm = resolve_llm(llm)  # the backend's routes ask it (the chunk graph's keywords)
        warn_inapplicable_settings(self.config, self.llm)
        self.embed_model = backend.embed_model
        self.read_failures: List[DocumentReadError] = []
        self._retriever: Optional[Tuple[Routes, BaseRetriever]] = None  # (the routes it is built on, it)
        self._postprocessors: Optional[List[BaseNodePostprocessor]] = None

    # -- what the backend holds ----------------------------------------------------------
    @property
    def llm(self) -> Optional[LLM]:
        """The LLM (``None``: the no-LLM paths); the store backend's routes ask the same one."""
        return self.backend.llm

    @llm.setter
    def llm(self, value: Optional[LLM]) -> None:
        """Replace the LLM, for answering and for the routes that ask one.

        Args:
            value: The LLM, or ``None``.
        """
        self.backend.llm = value
        self._invalidate()

    @property
    def index(self) -> VectorStoreIndex:
        """The LlamaIndex ``VectorStoreIndex`` (docstore and vector store) of the stored nodes."""
        return self.backend.index

    @property
    def config(self) -> HiQAPackSettings:
        """The settings, as the store keeps them (saved by [`persist`][llama_index_hiqa.pack.hiqa_pack.HiQAPack.persist])."""
        return self.backend.config

    @config.setter
    def config(self, value: HiQAPackSettings) -> None:
        """Replace the settings the backend keeps.

        Args:
            value: the new settings (saved by [`persist`][llama_index_hiqa.pack.hiqa_pack.HiQAPack.persist]).
        """
        self.backend.config = value

    @property
    def file_stats(self) -> Dict[str, List[int]]:
        """``{ref_doc_id: [size, mtime_ns]}`` of the files read: a folder re-ingestion leaves
        a file with the same facts unread (the document hash decides for the others)."""
        return self.backend.file_stats

    @property
    def store_path(self) -> Optional[Path]:
        """The store folder (``None`` in memory and for a database)."""
        return self.backend.location

    @property
    def heading_vectors(self) -> StoredHeadingVectors:
        """The heading-path vectors the document focus reads, computed at ingestion and kept by the store."""
        return self.backend.heading_vectors

    @property
    def store(self) -> Optional[Union[EmbeddedStore, PostgresStore]]:
        """The leaf store of a database backend (``PostgresStore``, ``EmbeddedStore``), else ``None``."""
        return getattr(self.backend, "store", None)

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_directory(cls, path: Union[str, Path], recursive: bool = False, **kwargs: Any) -> "HiQAPack":
        """Read every .pdf/.html/.docx/.md/.txt file of a folder and build, a batch of files at a time
        (failures are logged, skipped and listed in ``read_failures``).

        Raises [`EmptyCorpusError`][llama_index_hiqa.errors.EmptyCorpusError] when nothing is readable.

        Args:
            path: the folder to read.
            recursive: read its subfolders too.
            **kwargs: passed on to [`from_documents`][llama_index_hiqa.pack.hiqa_pack.HiQAPack.from_documents] (``llm``, ``embed_model``,
                ``vector_store``, ``config`` and [`HiQAPackSettings`][llama_index_hiqa.pack.config.HiQAPackSettings] fields).

        Returns:
            The built pack; ``read_failures`` lists the files that could not be read.

        Raises:
            EmptyCorpusError: when the folder does not exist or nothing in it is readable.
        """
        check_location("path", path)
        folder = Path(path)
        if not folder.is_dir():
            raise EmptyCorpusError(folder, [f"{folder}: no such folder"])
        progress = kwargs.pop("progress", None)
        pack = cls.empty(**kwargs)  # a store location is checked before the work
        pack.add_directory(folder, recursive=recursive, progress=progress)
        if pack.backend.address is not None:
            pack.persist()  # what the batches did not commit (the backend knows what that is)
        return pack

    @classmethod
    def from_documents(
        cls,
        documents: Iterable[Document],
        llm: Optional[LLM] = None,
        embed_model: Optional[BaseEmbedding] = None,
        vector_store: Optional[BasePydanticVectorStore] = None,
        config: Optional[HiQAPackSettings] = None,
        **settings: Any,
    ) -> "HiQAPack":
        """Parse, augment and index ``documents`` (any LlamaIndex Documents, a list or a
        generator; the reader's give page and heading facts). ``settings`` are
        [`HiQAPackSettings`][llama_index_hiqa.pack.config.HiQAPackSettings] fields.

        Args:
            documents: the documents to index, a list or a generator.
            llm: the LLM (``None``: ``Settings.llm`` if the user set one, else the no-LLM paths).
            embed_model: the embedding model (``None``: ``Settings.embed_model``, else the
                packaged MiniLM).
            vector_store: any LlamaIndex vector store (``None``: the folder store's, in memory).
            config: the settings (``None``: defaults, updated by ``settings``).
            **settings: [`HiQAPackSettings`][llama_index_hiqa.pack.config.HiQAPackSettings] fields.

        Returns:
            The built pack.

        Raises:
            EmptyCorpusError: when no node was indexed (no document had text).
        """
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
        config: Optional[HiQAPackSettings] = None,
        **settings: Any,
    ) -> "HiQAPack":
        """A pack with no documents yet (fill it with `ingest`); settings are validated here.

        Args:
            llm: The LLM (none: the no-LLM paths).
            embed_model: The embedding model (the packaged MiniLM when ``None``).
            vector_store: Any LlamaIndex vector store (the folder store's; in memory by default).
            config: The settings as an object; ``settings`` override its fields.
            **settings: [`HiQAPackSettings`][llama_index_hiqa.pack.config.HiQAPackSettings] fields, and ``store``: ``"postgresql://USER@HOST/DB"``
                (that database's pack, created when it holds none; every ingested batch commits
                there), or a folder: the store it holds, else a new embedded store that each
                batch commits to (a folder store, written by `persist`, with
                ``store_format="folder"``, the chunk graph or a ``vector_store``). Without a
                store the pack is held in memory until its first ``persist(folder)``.

        Returns:
            The pack.
        """
        store = settings.pop("store", None)
        check_pack_arguments(llm=llm, embed_model=embed_model, vector_store=vector_store, store=store)
        backend = open_backend(
            store, settings=updated(config, settings, model_class=HiQAPackSettings), llm=llm,
            embed_model=embed_model, vector_store=vector_store, create=True, resolvers=RESOLVERS,
        )
        return cls(llm=llm, backend=backend)

    @classmethod
    def load(
        cls,
        persist_dir: Union[str, Path],
        llm: Optional[LLM] = None,
        embed_model: Optional[BaseEmbedding] = None,
        vector_store: Optional[BasePydanticVectorStore] = None,
        **settings: Any,
    ) -> "HiQAPack":
        """Open a saved store: a folder store, an embedded store folder or a ``postgresql://`` URL.

        Args:
            persist_dir: The store.
            llm: The LLM.
            embed_model: The embedding model the store was built with (the packaged MiniLM by default).
            vector_store: The remote vector store a folder store was built on, given again.
            **settings: [`HiQAPackSettings`][llama_index_hiqa.pack.config.HiQAPackSettings] fields overriding the stored ones in this process.

        Returns:
            The pack.

        Raises:
            PackStoreError: A missing, truncated or inconsistent file or table (named), checked
                before anything is built on it.
        """
        check_location("persist_dir", persist_dir)
        check_pack_arguments(llm=llm, embed_model=embed_model, vector_store=vector_store)
        backend = open_backend(
            persist_dir, settings=HiQAPackSettings(**settings), llm=llm, embed_model=embed_model, vector_store=vector_store,
            resolvers=RESOLVERS,
        )
        return cls(llm=llm, backend=backend)

    # -- routes (built by the backend, again after a write) --------------------------------
    @property
    def multi_route(self) -> MultiRouteRetriever:
        """The [`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever] over the current nodes."""
        return self.backend.routes()[0]

    @property
    def graph(self) -> Optional[BaseRetriever]:
        """The [`ChunkGraphRetriever`][llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever] (``None`` unless enabled)."""
        return self.backend.routes()[1]

    def _keyword_extractor(self) -> CriticalKeywordExtractor:
        return RESOLVERS.keyword_extractor(self.config)

    def _invalidate(self) -> None:
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
        """Number of indexed nodes (from the store's per-document records: no node is read)."""
        return self.backend.node_count()

    @property
    def document_ids(self) -> List[str]:
        """``schema.DOCUMENT_ID`` of every indexed document."""
        return sorted(self._documents())

    def _documents(self) -> Dict[str, str]:
        """``{schema.DOCUMENT_ID: ref_doc_id}`` from the store's per-document records."""
        return self.backend.documents()

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
        ([`DocumentFocusRetriever`][llama_index_hiqa.retrievers.document_focus.DocumentFocusRetriever], ``document_focus={...}``), or, with the chunk graph on,
        sharing its top k with the chunk-graph chains ([`ChainAugmentedRetriever`][llama_index_hiqa.retrievers.chain_augmented.ChainAugmentedRetriever],
        ``chunk_graph={"head_share": ...}``).

        ``kwargs`` are MultiRouteSettings settings for this retriever only (e.g.
        ``similarity_top_k=10``, ``mode="rrf"``); it shares the pack's BM25 and keyword indexes.

        Args:
            **kwargs: MultiRouteSettings settings for this retriever only.

        Returns:
            The retriever (the same one on every call without ``kwargs``, until the index changes).
        """
        routes = self.backend.routes()
        if not kwargs and self._retriever is not None and self._retriever[0] is routes:
            return self._retriever[1]
        multi_route, graph = routes
        ranking = multi_route.with_settings(**kwargs) if kwargs else multi_route
        retriever: BaseRetriever = ranking
        if graph is not None:
            retriever = ChainAugmentedRetriever(ranking, graph, **self.config.chunk_graph.budget.model_dump())
        elif self.config.document_focus.enabled:
            retriever = DocumentFocusRetriever(
                ranking, embed_model=self.embed_model, heading_vectors=self.backend.heading_vectors,
                config=self.config.document_focus, llm=self.llm,
            )
        if not kwargs:
            self._retriever = (routes, retriever)
        return retriever

    # -- ingestion (every batch written by the backend as one unit) ----------------------
    def _reader(self, recursive: bool) -> PDFLayoutReader:
        return PDFLayoutReader(
            recursive=recursive, show_progress=self.config.show_progress,
            detect_unruled_tables=self.config.detect_unruled_tables,
        )

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

        Args:
            documents: LlamaIndex Documents, a list or a generator.
            batch_size: Documents a batch (``ingest_batch_size`` when ``None``).
            checkpoint: Called every ``checkpoint_seconds`` (e.g. ``lambda: pack.persist(store)``).
            checkpoint_seconds: The interval between checkpoints.
            progress: Called with the running report after every batch.
            report: The report to fill (a new one when ``None``).

        Returns:
            What was added, replaced or left unchanged, and the time per stage.
        """
        report = report if report is not None else IngestionReport()
        planned = self._planned_batches(checked_documents(documents), batch_size, report)
        runner = batch_runner(
            self.config.ingest_workers, self.config, self.llm, self.embed_model, report,
            keywords=self._keyword_extractor(),
        )
        total = report.documents_planned
        if total is None and isinstance(documents, Sized):  # a list of documents; a generator has no total
            total = len(documents)
        with runner:
            self._write_batches(runner(planned), report, total, progress, Checkpointer(checkpoint, checkpoint_seconds))
        return report

    def _write_batches(
        self, batches: Iterable[Tuple[List[Document], List[BaseNode]]], report: IngestionReport,
        total: Optional[int], progress: Optional[Callable[[IngestionReport], Any]], saver: Checkpointer,
    ) -> None:
        """Write each ``(new and changed documents, their nodes)`` as one unit, in order, with
        one progress bar over the run (documents indexed or found unchanged, and its ETA)."""
        bar = tqdm(total=total, desc="indexing", unit="doc", disable=not self.config.show_progress)
        with self.backend.bulk_writes(), bar:  # PostgreSQL: HNSW built once after a load
            for fresh, nodes in batches:
                if fresh:
                    # Decided at write time: with workers, a document read twice may still be
                    # in flight when its first version's batch was planned.
                    replaced = [doc.doc_id for doc in fresh if self.backend.document_hash(doc.doc_id) is not None]
                    with report.running("index", len(nodes)):
                        report.nodes_removed += self._write_batch(fresh, replaced, nodes)
                    report.documents_added += len(fresh) - len(replaced)
                    report.documents_replaced += len(replaced)
                    report.nodes_added += len(nodes)
                    report.node_ids += [n.node_id for n in nodes]
                    self._invalidate()
                del fresh, nodes  # the batch's documents and layout facts go here
                bar.update(report.documents_seen - bar.n)
                if progress is not None:
                    progress(report)
                saver.maybe_save()

    def _planned_batches(
        self, documents: Iterable[Document], batch_size: Optional[int], report: IngestionReport
    ) -> Iterator[List[Document]]:
        """The new and changed documents of each batch read (an empty list for a batch with
        none), the unchanged ones counted and left out."""
        for batch in batched(timed_iter(documents, report), batch_size or self.config.ingest_batch_size):
            # Another reader's documents (SimpleDirectoryReader's pages) are planned as the files
            # the segment parsers will read, under the files' stable ids: added again, they
            # are unchanged rather than a second copy under new random ids.
            batch = read_source_files(batch).documents
            new, changed, unchanged = upsert_plan(batch, self.backend.document_hash)
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
        versions), one unit of the store; returns the number of nodes removed."""
        return self.backend.write_batch(documents, replaced, nodes)

    def add_documents(self, documents: Iterable[Document]) -> List[BaseNode]:
        """Index ``documents`` (replacing earlier versions of the same ids); returns the new
        nodes. The BM25, keyword and graph indexes follow on the next question.

        Args:
            documents: LlamaIndex Documents.

        Returns:
            The new nodes.
        """
        report = self.ingest(documents)
        return list(self.index.docstore.get_nodes(report.node_ids)) if report.node_ids else []

    def add_directory(
        self, path: Union[str, Path], recursive: bool = False, shard: Optional[Tuple[int, int]] = None,
        executor: Optional["RayExecutor"] = None, **ingest_kwargs: Any,
    ) -> IngestionReport:
        """[`ingest`][llama_index_hiqa.pack.hiqa_pack.HiQAPack.ingest] every readable file of a folder. A file whose size and modification
        time are those it had when it was indexed is not even read; another with an unchanged
        document hash is read but costs no parsing or embedding. ``shard=(i, n)`` ingests only
        the i-th of n shards of the folder's files (split by a hash of each file's path, so
        several machines writing one database can share a folder).

        Args:
            path: The folder.
            recursive: Read its subfolders too.
            shard: ``(i, n)``: only the i-th of n shards of the files.
            executor: A [`RayExecutor`][llama_index_hiqa.pack.ray_ingestion.RayExecutor]: the
                files are read, parsed, augmented and embedded on a Ray cluster (at a path every
                worker sees) and written here, in reading order (``None``: in this machine's
                processes, ``ingest_workers``).
            **ingest_kwargs: [`ingest`][llama_index_hiqa.pack.hiqa_pack.HiQAPack.ingest]'s options.

        Returns:
            The ingestion report.

        Raises:
            EmptyCorpusError: Nothing in the folder is readable.
        """
        reader = self._reader(recursive)
        root = Path(path)
        resolved_root = root.resolve()  # once: every file's shard is its path below the folder
        report = ingest_kwargs.pop("report", None) or IngestionReport()
        if root.is_dir():  # else the reader raises its typed error for the path
            # The reader lists the folder again as it reads; a listing costs little next to reading.
            files = plan_folder(root, SUPPORTED_SUFFIXES, recursive, reader.follow_symlinks).files
            status(f"reading {len(files)} file(s) from {root}" + (f" (shard {shard[0]}/{shard[1]})" if shard else ""))
            if report.documents_planned is None and shard is None:
                report.documents_planned = len(files)

        def unchanged(document_id: str, file: Path) -> bool:
            if shard is not None and not in_shard(Path(os.path.relpath(Path(file).resolve(), resolved_root)).as_posix(), shard):
                return True  # another shard's file: not read, not counted
            same = (
                self.file_stats.get(document_id) == file_stat(file)
                and self.backend.document_hash(document_id) is not None
            )
            if same:  # counted as it is passed, so the progress lines and bar include it
                report.documents_unchanged += 1
            return same

        if executor is not None and root.is_dir():
            plan = plan_folder(root, SUPPORTED_SUFFIXES, recursive, reader.follow_symlinks)
            failures: List[DocumentReadError] = list(plan.skipped)
            to_read = [(f.path, f.document_id) for f in plan.files if not unchanged(f.document_id, f.path)]
            progress = ingest_kwargs.get("progress")
            saver = Checkpointer(ingest_kwargs.get("checkpoint"), ingest_kwargs.get("checkpoint_seconds"))
            batches = executor.written_batches(to_read, self, report, failures, ingest_kwargs.get("batch_size"))
            self._write_batches(batches, report, report.documents_planned, progress, saver)
        else:
            self.ingest(reader.lazy_load_data(root, skip=unchanged), report=report, **ingest_kwargs)
            failures = list(reader.failures)
        self.read_failures = failures
        # A shard may hold no file of a small folder; the folder is empty only if it has no shard.
        if not self.node_count and (shard is None or failures):
            raise EmptyCorpusError(path, failures)
        return report

    def delete_document(self, document_id: str) -> int:
        """Remove a document (its ``schema.DOCUMENT_ID``, e.g. the file stem, or its
        ``Document.doc_id``) from every index.

        Args:
            document_id: The document's id or ref doc id.

        Returns:
            The number of nodes removed.

        Raises:
            UnknownNodeError: No indexed document has that id.
        """
        documents = self._documents()
        ref_ids = list(dict.fromkeys(ref for doc_id, ref in documents.items() if document_id in (doc_id, ref)))
        if not ref_ids:
            raise UnknownNodeError(f"no indexed document {document_id!r}; known: {sorted(documents)[:10]}")
        removed = sum(self.backend.remove_document(ref_id) for ref_id in ref_ids)
        self._invalidate()
        return removed

    # -- answers -------------------------------------------------------------------------
    def node_postprocessors(self) -> List[BaseNodePostprocessor]:
        if self._postprocessors is not None:
            return list(self._postprocessors)
        postprocessors: List[BaseNodePostprocessor] = []
        if self.config.use_segment_integration:
            postprocessors.append(
                SegmentIntegrationPostprocessor(
                    preset=self.config.segment_preset, docstore=self.index.docstore, embed_model=self.embed_model
                )
            )
        self._postprocessors = postprocessors
        return list(postprocessors)

    def retrieve(self, question: str) -> List[NodeWithScore]:
        """Evidence for ``question`` after the configured post-processing.

        Args:
            question: The question.

        Returns:
            The nodes, best first.

        Raises:
            InvalidQuestionError: ``question`` is not a string or is too long
                (`question_text`).
        """
        bundle = question_bundle(question)
        nodes = self.as_retriever().retrieve(bundle)
        for post in self.node_postprocessors():
            nodes = post.postprocess_nodes(nodes, query_bundle=bundle)
        return nodes

    def explain(self, question: str) -> Explanation:
        """The evidence for ``question`` with why each node ranks where it does: in a notebook
        each node's page with its text highlighted, its heading path, a bar per route and the
        document focus's choice; ``str()`` for text, ``to_dict()`` for data.

        Args:
            question: The question.

        Returns:
            The [`Explanation`][llama_index_hiqa.views.explanation.Explanation] of `retrieve`'s nodes.

        Raises:
            InvalidQuestionError: as `retrieve`.
        """
        return explain_nodes(question_text(question), self.retrieve(question))

    def as_query_engine(self, llm: Optional[LLM] = None, **kwargs: Any) -> BaseQueryEngine:
        """LlamaIndex response synthesis with the LLM; without one, cited evidence + notice.

        Args:
            llm: The LLM (the pack's when ``None``).
            **kwargs: ``RetrieverQueryEngine.from_args`` options (``streaming``, ``node_postprocessors``, ...).

        Returns:
            The query engine.
        """
        check_pack_arguments(llm=llm)
        llm = llm or self.llm
        postprocessors = kwargs.pop("node_postprocessors", None) or self.node_postprocessors()
        if llm is None:
            return EvidenceQueryEngine(
                retriever=self.as_retriever(), node_postprocessors=postprocessors,
                streaming=bool(kwargs.get("streaming", False)),
            )
        return PackQueryEngine.from_args(
            self.as_retriever(), llm=llm, node_postprocessors=postprocessors, **kwargs
        )

    def as_chat_engine(self, llm: Optional[LLM] = None, **kwargs: Any) -> BaseChatEngine:
        """``CondensePlusContextChatEngine`` over the pack's retriever; evidence-only without an LLM.

        Every method (``chat``, ``achat``, ``stream_chat``, ``astream_chat``) ends and writes the
        turn to the engine's memory, with or without an LLM.

        Args:
            llm: The LLM (the pack's when ``None``).
            **kwargs: ``CondensePlusContextChatEngine.from_defaults`` options; without an LLM
                only ``memory`` and ``chat_history`` apply (the others shape LLM prompts).

        Returns:
            The chat engine.
        """
        check_pack_arguments(llm=llm)
        llm = llm or self.llm
        if llm is None:
            evidence = EvidenceQueryEngine(retriever=self.as_retriever(), node_postprocessors=self.node_postprocessors())
            return EvidenceChatEngine(evidence, memory=kwargs.get("memory"), chat_history=kwargs.get("chat_history"))
        return PackChatEngine.from_defaults(
            self.as_retriever(), llm=llm, node_postprocessors=self.node_postprocessors(), **kwargs
        )

    def run(self, question: str, **kwargs: Any) -> RESPONSE_TYPE:
        """Answer one question (``Response`` with ``source_nodes``; print it for the text;
        ``streaming=True``: a ``StreamingResponse`` whose ``response_gen`` yields the tokens).

        Args:
            question: The question.
            **kwargs: [`as_query_engine`][llama_index_hiqa.pack.hiqa_pack.HiQAPack.as_query_engine] options.

        Returns:
            The response.

        Raises:
            InvalidQuestionError: ``question`` is not a string or is too long.
        """
        return self.as_query_engine(**kwargs).query(question_text(question))

    def figures(self, response: Any) -> List[Dict[str, Any]]:
        """The figures that go with an answer (a response or its source nodes): figures it
        retrieved, then those on its cited pages and sections; each with document, page,
        section, caption, box and the image file saved in the store (see
        [`llama_index_hiqa.figures.figures_for`][llama_index_hiqa.figures.figures_for]).

        Args:
            response: A response, or its source nodes.

        Returns:
            One dict a figure.
        """
        sources = getattr(response, "source_nodes", response) or []
        images_dir = None if self.store_path is None else Path(self.store_path) / FIGURES_DIRNAME
        return figures_for(sources, self.index.docstore, images_dir)

    # -- persistence (the backend writes and reads the store) ------------------------------
    def persist(self, persist_dir: Union[str, Path, None] = None) -> Union[Path, str, None]:
        """Save the settings and ingestion state with the store, once.

        A pack held in memory is saved, the first time, as a new embedded store in
        ``persist_dir`` (``store_format="folder"``, the chunk graph or a vector store of its own:
        a folder store), which the pack then holds. A folder store is saved into a new snapshot
        of the folder, switched to atomically (a process killed at any instant leaves the
        previous store loadable); the embedded and PostgreSQL stores committed every batch
        already and save the settings (and the embedded store's BM25 index).

        Args:
            persist_dir: The store folder (``None``: the store the pack was loaded from or saved to).

        Returns:
            Where the store is (a folder, or the database URL with its password masked).
        """
        if persist_dir is not None:
            check_location("persist_dir", persist_dir)
        payload = {
            "config": self.config.model_dump(),
            "index_id": self.index.index_id,
            "embed_model": model_identity(self.embed_model),
            "node_count": self.node_count,
            "documents": self.document_ids,
            "file_stats": self.file_stats,
        }
        saved = self.backend.save(payload, persist_dir)
        if saved is not self.backend:  # a pack in memory, saved as a store of another kind
            saved.llm = self.backend.llm
            self.backend = saved
            self.embed_model = saved.embed_model
            self._invalidate()
        return saved.address

    def copy_to(
        self, location: Union[str, Path], store_format: Optional[Literal["folder", "embedded"]] = None
    ) -> "HiQAPack":
        """Copy this pack's store into a new store (``hiqa migrate``): a folder of another
        format, or a PostgreSQL database. Its nodes and vectors go as they are, in the order it
        holds them, so the copy ranks as this pack does; nothing is parsed or embedded again.

        Args:
            location: The new store's folder (missing or empty), or a ``postgresql://`` URL of a
                database holding no pack.
            store_format: A folder's format, ``"embedded"`` or ``"folder"`` (``None``: embedded,
                or folder when this pack's store is embedded).

        Returns:
            The pack of the new store, saved.

        Raises:
            PackStoreError: ``location`` holds a store already.
        """
        copied_vectors(self.index.vector_store)  # fails before the new store is created
        if store_exists(location):
            raise PackStoreError(mask_url(str(location)), "holds a store already: copy into a new one")
        target_format = store_format or ("folder" if self.config.store_format == "embedded" else "embedded")
        backend = open_backend(
            str(location), settings=updated(self.config, store_format=target_format), llm=self.llm, embed_model=self.embed_model, create=True,
            resolvers=RESOLVERS,
        )
        backend.copy_from(self.backend)
        copy = type(self)(llm=self.llm, backend=backend)
        copy.persist()
        return copy

    def close(self) -> None:
        """Release the store's files, locks and connections (the pack is unusable afterwards)."""
        self.backend.close()


__all__ = ["RESOLVERS", "HiQAPack"]
