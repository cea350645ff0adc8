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
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from llama_index.core import Settings, VectorStoreIndex
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
from llama_index_hiqa.pack.answers import (  # noqa: F401
    EVIDENCE_SNIPPET_CHARS,
    NO_LLM_NOTICE,
    EvidenceChatEngine,
    EvidenceQueryEngine,
    PackAnswering,
    citation,
    evidence_answer,
    format_citation,
)
from llama_index_hiqa.models.defaults import resolve_llm
from llama_index_hiqa.pack.config import (  # noqa: F401  (HiQAPackSettings re-exported: it was defined here)
    HiQAPackSettings,
    default_embed_model,
    keyword_extractor,
    model_identity,
    warn_inapplicable_settings,
)
from llama_index_hiqa.errors import EmptyCorpusError, UnknownNodeError
from llama_index_hiqa.pack.arguments import check_location, check_pack_arguments
from llama_index_hiqa.pack.ingest import PackIngestion
from llama_index_hiqa.retrievers.chain_augmented import ChainAugmentedRetriever
from llama_index_hiqa.retrievers.document_focus import DocumentFocusRetriever
from llama_index_hiqa.storage.backends import Resolvers, StoreBackend, open_backend
from llama_index_hiqa.storage.backends.folder import FolderBackend

logger = logging.getLogger(__name__)

# What every store backend of a pack makes its embedding model and keyword extractor with:
# this module's functions, looked up at each call, so replacing them here replaces them for
# every store (a test's cheap models, an application's own).
RESOLVERS = Resolvers(
    embed_model=lambda given=None, backend=None: default_embed_model(given, backend),
    keyword_extractor=lambda config: keyword_extractor(config),
)


# --------------------------------------------------------------------------- the pack
class HiQAPack(PackIngestion, PackAnswering):
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
        self.read_failures: List[Any] = []
        self._retriever: Optional[Tuple[Any, BaseRetriever]] = None  # (the routes it is built on, it)
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
    def heading_vectors(self) -> Any:
        """The heading-path vectors the document focus reads, computed at ingestion and kept by the store."""
        return self.backend.heading_vectors

    @heading_vectors.setter
    def heading_vectors(self, value: Any) -> None:
        """Replace the heading-path vectors and drop the retriever built on the old ones.

        Args:
            value: the heading-path vectors, as the backend keeps them.
        """
        self.backend.heading_vectors = value
        self._invalidate()

    @property
    def store(self) -> Any:
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
            store, config=config, settings=settings, llm=llm, embed_model=embed_model, vector_store=vector_store,
            create=True, resolvers=RESOLVERS,
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
            persist_dir, settings=settings, llm=llm, embed_model=embed_model, vector_store=vector_store,
            resolvers=RESOLVERS,
        )
        return cls(llm=llm, backend=backend)

    # -- routes (built by the backend, again after a write) --------------------------------
    @property
    def multi_route(self) -> BaseRetriever:
        """The [`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever] over the current nodes."""
        return self.backend.routes()[0]

    @property
    def graph(self) -> Any:
        """The [`ChunkGraphRetriever`][llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever] (``None`` unless enabled)."""
        return self.backend.routes()[1]

    def _keyword_extractor(self) -> Any:
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
        retriever: BaseRetriever = multi_route
        if kwargs:
            retriever = multi_route.with_settings(**kwargs)  # type: ignore[attr-defined]
        if graph is not None:
            retriever = ChainAugmentedRetriever(retriever, graph, **self.config.chunk_graph.budget.model_dump())
        elif self.config.document_focus.enabled:
            retriever = DocumentFocusRetriever(
                retriever, embed_model=self.embed_model, heading_vectors=self.backend.heading_vectors,
                config=self.config.document_focus,
            )
        if not kwargs:
            self._retriever = (routes, retriever)
        return retriever

    # -- persistence (the backend writes and reads the store) ------------------------------
    def persist(self, persist_dir: Union[str, Path, None] = None) -> Any:
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

    def copy_to(self, location: Union[str, Path], store_format: Optional[str] = None) -> "HiQAPack":
        """Copy this pack's store into a new store folder of another format (``hiqa migrate``):
        its nodes and vectors as they are, in the order it holds them, so the copy ranks as
        this pack does; nothing is parsed or embedded again.

        Args:
            location: The new store's folder (missing or empty).
            store_format: ``"embedded"`` or ``"folder"`` (``None``: embedded, or folder when this
                pack's store is embedded).

        Returns:
            The pack of the new store, saved.

        Raises:
            PackStoreError: ``location`` holds a store already.
        """
        from llama_index_hiqa.errors import PackStoreError
        from llama_index_hiqa.storage.backends import store_exists

        if store_exists(location):
            raise PackStoreError(Path(location), "holds a store already: copy into a new folder")
        target_format = store_format or ("folder" if self.config.store_format == "embedded" else "embedded")
        backend = open_backend(
            str(location), config=self.config, settings={"store_format": target_format}, llm=self.llm,
            embed_model=self.embed_model, create=True, resolvers=RESOLVERS,
        )
        backend.copy_from(self.backend)  # type: ignore[attr-defined]
        copy = type(self)(llm=self.llm, backend=backend)
        copy.persist()
        return copy

    def close(self) -> None:
        """Release the store's files, locks and connections (the pack is unusable afterwards)."""
        self.backend.close()


# Settings is re-exported so notebooks can configure the pack without a second import line.
__all__ = ["HiQAPack", "HiQAPackSettings", "EvidenceQueryEngine", "citation", "format_citation", "Settings"]
