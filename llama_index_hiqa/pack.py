"""HiQAPack: the whole HiQA pipeline in one object, for a LlamaIndex user.

HiQA (``papers/hiqa-paper.md``, §Method, Figure 2) is a pipeline: Markdown Formatter →
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
configuration (JSON), so a second process answers without re-ingesting.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Sequence, Union

from llama_index.core import Settings, StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.base.response.schema import Response
from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field
from llama_index.core.chat_engine.types import (
    AgentChatResponse,
    BaseChatEngine,
    StreamingAgentChatResponse,
)
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.llms import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import CustomQueryEngine, RetrieverQueryEngine
from llama_index.core.schema import BaseNode, Document, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_hiqa import schema
from llama_index_hiqa.defaults import resolve_embed_model, resolve_llm, user_embed_model
from llama_index_hiqa.errors import EmptyCorpusError, PackStoreError, UnknownNodeError

logger = logging.getLogger(__name__)

CONFIG_FILENAME = "hiqa_pack.json"
MULTI_ROUTE_DIRNAME = "multi_route"
CHUNK_GRAPH_DIRNAME = "chunk_graph"
FORMAT_VERSION = 1

NO_LLM_NOTICE = (
    "No LLM is configured, so this answer is the retrieved evidence with its citations. "
    "Set Settings.llm (or pass llm=, or `hiqa ask --llm openai:gpt-4o-mini`) for a written answer."
)
EVIDENCE_SNIPPET_CHARS = 400


class HiQAPackConfig(BaseModel):
    """Settings of the default pipeline; saved with the pack and restored by ``load``."""

    # A misspelt setting is an error, not a silently ignored keyword.
    model_config = ConfigDict(extra="forbid")

    similarity_top_k: int = Field(default=5, ge=1, description="Evidence nodes per question.")
    use_llm_formatter: bool = Field(
        default=True,
        description="With an LLM set, parse with HiQA's MarkdownFormatterParser (Algorithm 1); "
        "without one (or when False) the LayoutMarkdownParser reads the layout.",
    )
    use_cascade: bool = Field(
        default=True, description="HiQA HCA: heading cascade in every node's embedding view."
    )
    keywords: Dict[str, Any] = Field(
        default_factory=dict,
        description="CriticalKeywordExtractor settings for ingestion and queries, e.g. "
        "{'expert_keywords': [...]} or {'use_ner': False} (rules only, no spaCy).",
    )
    fusion_mode: str = Field(
        default="hiqa", description="MultiRouteRetriever fusion: hiqa, rrf, relative_score, dist_based_score."
    )
    multi_route: Dict[str, Any] = Field(
        default_factory=dict,
        description="Further MultiRouteConfig settings (alpha, beta, candidates_per_route, ...).",
    )
    use_chunk_graph: bool = Field(
        default=False,
        description="Append IIER evidence chains (ChunkGraphRetriever) for multi-hop questions.",
    )
    chunk_graph: Dict[str, Any] = Field(
        default_factory=lambda: {"max_nodes": 5},
        description="ChainSearchSettings of the ChunkGraphRetriever (max_hops, max_nodes, ...).",
    )
    use_segment_integration: bool = Field(
        default=False,
        description="Merge retrieved chunks into contiguous segments (TextRAG RSE) before answering.",
    )
    segment_preset: Optional[str] = Field(
        default=None, description="SegmentIntegrationPostprocessor preset: short, medium or long."
    )
    max_segment_chars: Optional[int] = Field(
        default=None, description="Parser: split sections longer than this (None: the parser's default)."
    )
    max_segment_tokens: Union[int, Literal["auto"], None] = Field(
        default="auto",
        description="Parser: bound every node's cascade header + text by this many tokens of the "
        "embedding model's tokenizer ('auto': the model's own window, e.g. 256 for MiniLM; None: "
        "character limits only). Longer segments are split, small ones of a section merged.",
    )
    show_progress: bool = Field(default=False, description="Progress bars during ingestion.")


# --------------------------------------------------------------------------- citations
def citation(node: BaseNode) -> Dict[str, Any]:
    """Where a node comes from: document id and title, section path, pages (from 1)."""
    path = schema.get_heading_path(node)
    section = " > ".join(" ".join(p for p in (h.number, h.title) if p) for h in path)
    page_range = schema.get_page_range(node)
    pages = [page_range[0] + 1, page_range[1] + 1] if page_range else None
    return {
        "document_id": schema.get_document_id(node),
        "document_title": schema.get_document_title(node),
        "section": section or node.metadata.get(schema.SECTION_TITLE) or "",
        "pages": pages,
        "file_name": node.metadata.get(schema.FILE_NAME),
    }


def format_citation(node: BaseNode) -> str:
    """``"NX-2043 Datasheet · 4 Specifications > 4.2 Electrical characteristics · p.2"``."""
    c = citation(node)
    pages = c["pages"]
    page = "p.?" if not pages else (f"p.{pages[0]}" if pages[0] == pages[1] else f"pp.{pages[0]}-{pages[1]}")
    parts = [c["document_title"] or c["document_id"] or "?"]
    if c["section"]:
        parts.append(c["section"])
    parts.append(page)
    return " · ".join(parts)


def evidence_answer(nodes: Sequence[NodeWithScore], notice: str = NO_LLM_NOTICE) -> str:
    """The no-LLM answer: a notice, then each piece of evidence with its citation."""
    if not nodes:
        return notice + "\n\nNo evidence was retrieved for this question."
    lines = [notice, ""]
    for i, hit in enumerate(nodes, 1):
        text = " ".join(hit.node.get_content().split())
        if len(text) > EVIDENCE_SNIPPET_CHARS:
            text = text[:EVIDENCE_SNIPPET_CHARS] + " …"
        lines.append(f"[{i}] {format_citation(hit.node)}")
        lines.append(f"    {text}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- engines
class EvidenceQueryEngine(CustomQueryEngine):
    """Query engine used when no LLM is set: retrieve, post-process, answer with cited evidence."""

    retriever: BaseRetriever
    node_postprocessors: List[BaseNodePostprocessor] = Field(default_factory=list)

    def _nodes(self, query: str) -> List[NodeWithScore]:
        bundle = QueryBundle(query)
        nodes = self.retriever.retrieve(bundle)
        for post in self.node_postprocessors:
            nodes = post.postprocess_nodes(nodes, query_bundle=bundle)
        return nodes

    def custom_query(self, query_str: str) -> Response:
        nodes = self._nodes(query_str)
        return Response(response=evidence_answer(nodes), source_nodes=nodes, metadata={"llm": None})


class EvidenceChatEngine(BaseChatEngine):
    """Chat engine used when no LLM is set: every turn answers with the cited evidence for the
    latest message (there is no LLM to condense the history into a question)."""

    def __init__(self, query_engine: EvidenceQueryEngine) -> None:
        self._query_engine = query_engine
        self._history: List[ChatMessage] = []

    def _answer(self, message: str) -> Response:
        response = self._query_engine.custom_query(message)
        self._history += [
            ChatMessage(role=MessageRole.USER, content=message),
            ChatMessage(role=MessageRole.ASSISTANT, content=str(response)),
        ]
        return response

    def chat(self, message: str, chat_history: Optional[List[ChatMessage]] = None) -> AgentChatResponse:
        response = self._answer(message)
        return AgentChatResponse(response=str(response), source_nodes=response.source_nodes)

    def stream_chat(
        self, message: str, chat_history: Optional[List[ChatMessage]] = None
    ) -> StreamingAgentChatResponse:
        response = self._answer(message)
        return StreamingAgentChatResponse(response=str(response), source_nodes=response.source_nodes)

    async def achat(self, message: str, chat_history: Optional[List[ChatMessage]] = None) -> AgentChatResponse:
        return self.chat(message, chat_history)

    async def astream_chat(
        self, message: str, chat_history: Optional[List[ChatMessage]] = None
    ) -> StreamingAgentChatResponse:
        return self.stream_chat(message, chat_history)

    def reset(self) -> None:
        self._history = []

    @property
    def chat_history(self) -> List[ChatMessage]:
        return list(self._history)


class _MultiRouteThenGraph(BaseRetriever):
    """Multi-route top-k first, then the IIER chain nodes it did not already return.

    The multi-route ranking answers single-hop questions best; the graph's chains add the
    bridge evidence a multi-hop question needs. Chain nodes keep traversal order.
    """

    def __init__(self, multi_route: BaseRetriever, graph: BaseRetriever) -> None:
        self.multi_route, self.graph = multi_route, graph
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return self._merge(self.multi_route.retrieve(query_bundle), self.graph.retrieve(query_bundle))

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        import asyncio

        first, second = await asyncio.gather(
            self.multi_route.aretrieve(query_bundle), self.graph.aretrieve(query_bundle)
        )
        return self._merge(first, second)

    @staticmethod
    def _merge(first: List[NodeWithScore], second: List[NodeWithScore]) -> List[NodeWithScore]:
        seen = {n.node.node_id for n in first}
        return list(first) + [n for n in second if n.node.node_id not in seen]


# --------------------------------------------------------------------------- the pack
class HiQAPack:
    """HiQA's default pipeline over a collection of look-alike documents.

    Build with :meth:`from_directory`, :meth:`from_documents` or :meth:`load`; use
    :meth:`run`, :meth:`as_query_engine`, :meth:`as_retriever`, :meth:`as_chat_engine`;
    keep up to date with :meth:`add_documents` / :meth:`delete_document`; save with
    :meth:`persist`.
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
        self.index = index
        self.config = config or HiQAPackConfig()
        self.llm = resolve_llm(llm)
        self.embed_model = embed_model or index._embed_model
        self.multi_route = _multi_route or self._build_multi_route()
        self.graph = _graph
        if self.config.use_chunk_graph and self.graph is None:
            self.graph = self._build_graph()

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_directory(cls, path: Union[str, Path], recursive: bool = False, **kwargs: Any) -> "HiQAPack":
        """Read every .pdf/.md/.txt file of a folder (failures are logged and skipped) and build.

        Raises :class:`~llama_index_hiqa.errors.EmptyCorpusError` when nothing is readable.
        """
        from llama_index_hiqa.readers.pdf import PDFLayoutReader

        folder = Path(path)
        if not folder.is_dir():
            raise EmptyCorpusError(folder, [f"{folder}: no such folder"])
        show_progress = bool(kwargs.get("show_progress", False))
        reader = PDFLayoutReader(recursive=recursive, show_progress=show_progress)
        documents = reader.load_data(folder)
        if not documents:
            raise EmptyCorpusError(folder, reader.failures)
        pack = cls.from_documents(documents, **kwargs)
        pack.read_failures = reader.failures
        return pack

    @classmethod
    def from_documents(
        cls,
        documents: Sequence[Document],
        llm: Optional[LLM] = None,
        embed_model: Optional[BaseEmbedding] = None,
        vector_store: Optional[BasePydanticVectorStore] = None,
        config: Optional[HiQAPackConfig] = None,
        **settings: Any,
    ) -> "HiQAPack":
        """Parse, augment and index ``documents`` (any LlamaIndex Documents; the reader's give
        page and heading facts). ``settings`` are :class:`HiQAPackConfig` fields."""
        if not documents:
            raise EmptyCorpusError("from_documents", [])
        config = HiQAPackConfig(**{**(config or HiQAPackConfig()).model_dump(), **settings})
        llm = resolve_llm(llm)
        embed_model = _default_embed_model(embed_model)
        nodes = _ingest(documents, config, llm, embed_model)
        storage = StorageContext.from_defaults(vector_store=vector_store)
        index = VectorStoreIndex(
            nodes, storage_context=storage, embed_model=embed_model, show_progress=config.show_progress
        )
        return cls(index, config=config, llm=llm, embed_model=embed_model)

    def _build_multi_route(self) -> BaseRetriever:
        from llama_index_hiqa.retrievers.multi_route import MultiRouteRetriever

        settings = {"similarity_top_k": self.config.similarity_top_k, "mode": self.config.fusion_mode}
        settings.update(self.config.multi_route)
        return MultiRouteRetriever.from_index(
            self.index, nodes=self.nodes, keyword_extractor=_keyword_extractor(self.config), **settings
        )

    def _build_graph(self) -> Any:
        from llama_index_hiqa.retrievers.chunk_graph import ChunkGraphRetriever

        return ChunkGraphRetriever.from_index(
            self.index, embed_model=self.embed_model, llm=self.llm,
            keyword_fn=_keyword_extractor(self.config).extract_query,
            show_progress=self.config.show_progress, **self.config.chunk_graph,
        )

    # -- the familiar pack shape -------------------------------------------------------
    @property
    def nodes(self) -> List[BaseNode]:
        """The indexed nodes, in document order."""
        nodes = list(self.index.docstore.docs.values())
        return sorted(nodes, key=lambda n: (schema.get_document_id(n) or "", schema.get_position(n) or 0))

    @property
    def document_ids(self) -> List[str]:
        """``schema.DOCUMENT_ID`` of every indexed document."""
        return sorted({schema.get_document_id(n) or "" for n in self.index.docstore.docs.values()})

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
        """The multi-route retriever (followed by the chunk-graph chains when enabled)."""
        if kwargs:
            from llama_index_hiqa.retrievers.multi_route import MultiRouteRetriever

            settings = {"similarity_top_k": self.config.similarity_top_k, "mode": self.config.fusion_mode}
            settings.update(self.config.multi_route)
            settings.update(kwargs)
            settings.setdefault("keyword_extractor", _keyword_extractor(self.config))
            retriever: BaseRetriever = MultiRouteRetriever.from_index(self.index, nodes=self.nodes, **settings)
        else:
            retriever = self.multi_route
        if self.graph is not None:
            return _MultiRouteThenGraph(retriever, self.graph)
        return retriever

    def node_postprocessors(self) -> List[BaseNodePostprocessor]:
        if not self.config.use_segment_integration:
            return []
        from llama_index_hiqa.postprocessors.segment_integration import SegmentIntegrationPostprocessor

        return [
            SegmentIntegrationPostprocessor(
                preset=self.config.segment_preset, docstore=self.index.docstore, embed_model=self.embed_model
            )
        ]

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
            return EvidenceQueryEngine(retriever=self.as_retriever(), node_postprocessors=postprocessors)
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
        """Answer one question (``Response`` with ``source_nodes``; print it for the text)."""
        return self.as_query_engine(**kwargs).query(question)

    # -- incremental updates ---------------------------------------------------------------
    def add_documents(self, documents: Sequence[Document]) -> List[BaseNode]:
        """Parse, augment, embed and index ``documents``; the BM25, keyword and graph indexes
        are rebuilt from the docstore (no re-embedding of the existing nodes)."""
        if not documents:
            return []
        nodes = _ingest(documents, self.config, self.llm, self.embed_model)
        self.index.insert_nodes(nodes)
        self._refresh()
        return nodes

    def add_directory(self, path: Union[str, Path], recursive: bool = False) -> List[BaseNode]:
        from llama_index_hiqa.readers.pdf import PDFLayoutReader

        reader = PDFLayoutReader(recursive=recursive, show_progress=self.config.show_progress)
        documents = reader.load_data(Path(path))
        if not documents:
            raise EmptyCorpusError(path, reader.failures)
        return self.add_documents(documents)

    def delete_document(self, document_id: str) -> int:
        """Remove a document (its ``schema.DOCUMENT_ID``, e.g. the file stem, or its
        ``Document.doc_id``) from every index; returns the number of nodes removed."""
        ref_ids = {
            n.ref_doc_id or n.node_id
            for n in self.index.docstore.docs.values()
            if schema.get_document_id(n) == document_id or n.ref_doc_id == document_id
        }
        if not ref_ids:
            raise UnknownNodeError(f"no indexed document {document_id!r}; known: {self.document_ids[:10]}")
        before = len(self.index.docstore.docs)
        for ref_id in ref_ids:
            self.index.delete_ref_doc(ref_id, delete_from_docstore=True)
        removed = before - len(self.index.docstore.docs)
        self._refresh()
        return removed

    def _refresh(self) -> None:
        self.multi_route = self._build_multi_route()
        if self.config.use_chunk_graph:
            self.graph = self._build_graph() if self.index.docstore.docs else None

    # -- persistence -----------------------------------------------------------------------
    def persist(self, persist_dir: Union[str, Path]) -> Path:
        """Save docstore + vector store, BM25 + keyword indexes, chunk graph and configuration."""
        path = Path(persist_dir)
        path.mkdir(parents=True, exist_ok=True)
        self.index.storage_context.persist(persist_dir=str(path))
        self.multi_route.persist(path / MULTI_ROUTE_DIRNAME)
        if self.graph is not None:
            self.graph.graph.persist(path / CHUNK_GRAPH_DIRNAME)
        payload = {
            "format_version": FORMAT_VERSION,
            "config": self.config.model_dump(),
            "index_id": self.index.index_id,
            "embed_model": _model_identity(self.embed_model),
            "documents": self.document_ids,
        }
        (path / CONFIG_FILENAME).write_text(json.dumps(payload, indent=2), encoding="utf-8")
        return path

    @classmethod
    def load(
        cls,
        persist_dir: Union[str, Path],
        llm: Optional[LLM] = None,
        embed_model: Optional[BaseEmbedding] = None,
        vector_store: Optional[BasePydanticVectorStore] = None,
        **settings: Any,
    ) -> "HiQAPack":
        """Load what :meth:`persist` wrote. Pass ``vector_store`` again for a remote store and
        the same embedding model the pack was built with (the packaged MiniLM by default)."""
        path = Path(persist_dir)
        config_file = path / CONFIG_FILENAME
        if not config_file.is_file():
            raise PackStoreError(path, f"not a HiQAPack store (no {CONFIG_FILENAME}); build one with "
                                       f"`hiqa ingest DIR --store {path}` or HiQAPack.persist()")
        payload = json.loads(config_file.read_text(encoding="utf-8"))
        if payload.get("format_version") != FORMAT_VERSION:
            raise PackStoreError(path, f"store format {payload.get('format_version')} is not {FORMAT_VERSION}")
        config = HiQAPackConfig(**{**payload["config"], **settings})
        embed_model = _default_embed_model(embed_model)
        if payload.get("embed_model") and payload["embed_model"] != _model_identity(embed_model):
            logger.warning(
                "HiQAPack.load: the store was embedded with %s, queries now use %s",
                payload["embed_model"], _model_identity(embed_model),
            )
        try:
            storage = StorageContext.from_defaults(persist_dir=str(path), vector_store=vector_store)
            index = load_index_from_storage(storage, index_id=payload.get("index_id"), embed_model=embed_model)
        except (FileNotFoundError, ValueError) as exc:
            raise PackStoreError(path, f"the index could not be loaded: {exc}") from exc
        from llama_index_hiqa.retrievers.multi_route import MultiRouteRetriever

        route_settings = {"similarity_top_k": config.similarity_top_k, "mode": config.fusion_mode}
        route_settings.update(config.multi_route)
        multi_route = MultiRouteRetriever.from_persist_dir(
            path / MULTI_ROUTE_DIRNAME, index=index, nodes=list(index.docstore.docs.values()),
            keyword_extractor=_keyword_extractor(config), **route_settings,
        )
        graph = None
        if config.use_chunk_graph:
            graph_dir = path / CHUNK_GRAPH_DIRNAME
            if graph_dir.is_dir():
                from llama_index_hiqa.retrievers.chunk_graph import ChunkGraphRetriever, ChunkInteractionGraph

                graph = ChunkGraphRetriever(
                    ChunkInteractionGraph.load(graph_dir), docstore=index.docstore,
                    embed_model=embed_model, llm=llm,
                    keyword_fn=_keyword_extractor(config).extract_query, **config.chunk_graph,
                )
        return cls(index, config=config, llm=llm, embed_model=embed_model, _multi_route=multi_route, _graph=graph)


# --------------------------------------------------------------------------- helpers
def _default_embed_model(embed_model: Optional[BaseEmbedding]) -> BaseEmbedding:
    """The given model, else Settings.embed_model, else the packaged MiniLM behind the shared
    on-disk vector cache (re-ingesting the same text costs nothing)."""
    if embed_model is not None:
        return embed_model
    if user_embed_model() is not None:
        return resolve_embed_model()
    from llama_index_hiqa.embedding_cache import CachedEmbedding

    return CachedEmbedding.from_defaults()


def _model_identity(embed_model: BaseEmbedding) -> str:
    inner = getattr(embed_model, "model_id", None)
    return inner or f"{embed_model.class_name()}:{getattr(embed_model, 'model_name', '?')}"


def _parser(config: HiQAPackConfig, llm: Optional[LLM], embed_model: Optional[BaseEmbedding] = None) -> Any:
    from llama_index_hiqa.defaults import embedding_tokenizer
    from llama_index_hiqa.parsers.layout_markdown import LayoutMarkdownParser

    layout_kwargs: Dict[str, Any] = {} if config.max_segment_chars is None else {"max_segment_chars": config.max_segment_chars}
    if llm is not None and config.use_llm_formatter:
        from llama_index_hiqa.parsers.markdown_formatter import MarkdownFormatterParser

        # Falls back to the layout parser window by window when the LLM's output is unusable.
        return MarkdownFormatterParser(llm=llm, show_progress=config.show_progress, **layout_kwargs)
    window = embedding_tokenizer(embed_model) if config.max_segment_tokens is not None else None
    if window is not None:
        tokenizer, size = window
        size = size if config.max_segment_tokens == "auto" else min(size, int(config.max_segment_tokens))
        layout_kwargs.update(tokenizer=tokenizer, max_segment_tokens=size)
    return LayoutMarkdownParser(show_progress=config.show_progress, **layout_kwargs)


def _keyword_extractor(config: HiQAPackConfig) -> Any:
    """The same critical-keyword settings at ingestion and at query time (|C| must match)."""
    from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

    return CriticalKeywordExtractor(**{"show_progress": config.show_progress, **config.keywords})


def _ingest(
    documents: Sequence[Document], config: HiQAPackConfig, llm: Optional[LLM],
    embed_model: Optional[BaseEmbedding] = None,
) -> List[BaseNode]:
    """Documents -> parsed, cascaded, keyworded nodes through an IngestionPipeline (no embedding:
    the index embeds, so any vector store's own ingestion path applies)."""
    from llama_index_hiqa.transforms.cascading_metadata import CascadingMetadataTransform
    empty = [d for d in documents if not d.text.strip()]
    if len(empty) == len(documents):
        raise EmptyCorpusError("documents", [d.metadata.get(schema.FILE_NAME, d.doc_id) for d in empty])
    transformations: List[Any] = [_parser(config, llm, embed_model)]
    if config.use_cascade:
        transformations.append(CascadingMetadataTransform(show_progress=config.show_progress))
    transformations.append(_keyword_extractor(config))
    pipeline = IngestionPipeline(transformations=transformations)
    return pipeline.run(documents=[d for d in documents if d.text.strip()], show_progress=config.show_progress)


# Settings is re-exported so notebooks can configure the pack without a second import line.
__all__ = ["HiQAPack", "HiQAPackConfig", "EvidenceQueryEngine", "citation", "format_citation", "Settings"]
