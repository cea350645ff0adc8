"""HiQAPackSettings: the settings of the pack's default pipeline, and the components they build.

One place turns a configuration into the parser, keyword extractor, route settings and
embedding model, so ingestion, loading and querying build them the same way (the keyword
extractor in particular must be the same at ingestion and query time: the keyword route's
score |C| compares the two).
"""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Annotated, Any, Dict, List, Literal, Mapping, Optional, Union

from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, model_validator
from llama_index.core.llms import LLM

from llama_index_hiqa.models.defaults import (
    DEFAULT_EMBED_BACKEND,
    embedding_tokenizer,
    portable_model_name,
    resolve_embed_model,
    user_embed_model,
)
from llama_index_hiqa.models.embedding_backends import EmbedBackend
from llama_index_hiqa.models.embedding_cache import CachedEmbedding
from llama_index_hiqa.retrievers.settings import (
    DEFAULT_SIMILARITY_TOP_K,
    MAX_TOP_K,
    ChunkGraphSettings,
    DocumentFocusSettings,
    FusionMode,
    MultiRouteSettings,
    RouteFusionSettings,
)
from llama_index_hiqa.settings import SettingsModel
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor
from llama_index_hiqa.transforms.keyword_settings import MAX_NER_NODES, KeywordSettings

if TYPE_CHECKING:
    from llama_index_hiqa.parsers.layout_markdown import LayoutMarkdownParser
    from llama_index_hiqa.parsers.markdown_formatter import MarkdownFormatterParser

logger = logging.getLogger(__name__)

# Below these a "segment" holds a few words: nodes multiply, and the cascade header alone can
# fill the budget. The parsers accept at least 1; the pack's settings keep to useful sizes.
MIN_SEGMENT_CHARS = 200
MIN_SEGMENT_TOKENS = 32
# Above these a "segment" is a whole long document (the embedding reads only its window) and a
# batch holds more parsed documents than memory should.
MAX_SEGMENT_CHARS = 1_000_000
MAX_SEGMENT_TOKENS = 100_000
MAX_INGEST_BATCH = 10_000


class PackKeywordSettings(KeywordSettings):
    """The pack's ``keywords`` part: [`KeywordSettings`][llama_index_hiqa.transforms.keyword_settings.KeywordSettings] whose
    ``ner_max_nodes`` follows the chunk graph unless set."""

    ner_max_nodes: Union[Annotated[int, Field(ge=0, le=MAX_NER_NODES)], Literal["auto"], None] = Field(
        default="auto",
        description="NER over the nodes' text at ingestion only when a call holds at most this many "
        "nodes (None: always). 'auto': 0 (NER reads document titles and questions, the rules read "
        "every node) unless use_chunk_graph is on, then None (IIER's keyword edges need the "
        "entities of the text). At most 10^9.",
    )


class PackRouteSettings(RouteFusionSettings):
    """The pack's ``multi_route`` part: [`RouteFusionSettings`][llama_index_hiqa.retrievers.settings.RouteFusionSettings]
    with the finance expert vocabulary on. Measured on FinanceBench's 86 development questions
    (benchmarks/RESULTS.md, "FinanceBench product path"): a gold page first 0.465 -> 0.512, in
    the top 5 0.663 -> 0.686, in the top 20 0.814 -> 0.872, MRR 0.565 -> 0.602, the right filing
    first unchanged (0.919); the demo datasheets unchanged. It acts only on questions that name
    one of its concepts, and only inside the documents the question is about."""

    expert_vocabulary: Optional[str] = Field(
        default="finance",
        description="Expert vocabulary applied to each question: 'finance' (the pack's default), "
        "'datasheets', the path of a YAML/JSON file of the same shape, or None (off). See "
        "RouteFusionSettings.expert_vocabulary.",
    )


# Settings saved before the pack's parts were typed (stores of this codebase still hold them) may
# set these MultiRouteSettings fields inside ``multi_route``; they are the pack's top-level settings.
_ROUTE_KEYS_AT_TOP = {"similarity_top_k": "similarity_top_k", "mode": "fusion_mode"}


class HiQAPackSettings(SettingsModel):
    """Settings of the default pipeline; saved with the pack and restored by ``load``.

    A tree of typed settings: the pipeline's switches at the top, one part per component
    (``keywords``, ``multi_route``, ``document_focus``, ``chunk_graph``), each knob in one place.
    Nested parts may be given as mappings (``multi_route={"alpha": 0.5}``); an unknown key or a
    bad value fails here as an `InvalidSettingError` named by
    its path (``multi_route.alpha``) and saying the valid range; every number has a lower and an
    upper bound, stated in its description. A part given replaces the
    stored part as a whole (``HiQAPack.load(dir, multi_route={...})``).
    """

    similarity_top_k: int = Field(
        default=DEFAULT_SIMILARITY_TOP_K, ge=1, le=MAX_TOP_K, description=f"Evidence nodes per question (1 to {MAX_TOP_K})."
    )
    use_llm_formatter: bool = Field(
        default=True,
        description="With an LLM set, parse with HiQA's MarkdownFormatterParser (Algorithm 1); "
        "without one (or when False) the LayoutMarkdownParser reads the layout.",
    )
    use_cascade: bool = Field(
        default=True, description="HiQA HCA: heading cascade in every node's embedding view."
    )
    describe_figures: bool = Field(
        default=False,
        description="Send each figure's image to the pack's LLM (it must accept images) and embed "
        "its description with the figure's cascade (HiQA appendix A.5); one call per distinct image.",
    )
    detect_unruled_tables: bool = Field(
        default=False,
        description="PDFLayoutReader's fast engine also renders tables without rules (aligned value "
        "columns under their header row) as table units; off until measured on the product path.",
    )
    table_view: Optional[Literal["rows", "labels"]] = Field(
        default=None,
        description="The tables' embedding view (CascadingMetadataTransform.table_view; long tables are cut "
        "by rows to fit it): 'rows' (title, header lines and rows with their figures) or 'labels' (HiQA: "
        "title, column and row labels). None: 'rows' with detect_unruled_tables (statements, whose labels "
        "every year's filing shares), else 'labels'.",
    )
    keywords: PackKeywordSettings = Field(
        default_factory=PackKeywordSettings,
        description="CriticalKeywordExtractor settings for ingestion and queries, e.g. "
        "{'expert_keywords': [...]} or {'use_ner': False} (rules only, no spaCy).",
    )
    fusion_mode: FusionMode = Field(
        default="hiqa", description="MultiRouteRetriever fusion: hiqa, rrf, relative_score, dist_based_score."
    )
    multi_route: PackRouteSettings = Field(
        default_factory=PackRouteSettings,
        description="The MultiRouteRetriever's other settings (alpha, beta, candidates_per_route, ...); "
        "its top k and fusion mode are similarity_top_k and fusion_mode above.",
    )
    use_chunk_graph: bool = Field(
        default=False,
        description="IIER evidence chains (ChunkGraphRetriever) share the top k with the multi-route "
        "ranking, for multi-hop questions; NER then also reads node text at ingestion.",
    )
    chunk_graph: ChunkGraphSettings = Field(
        default_factory=ChunkGraphSettings,
        description="Chunk-graph settings: graph (ChunkInteractionGraph: keyword_threshold, default "
        "'auto': T from the collection's shared-keyword counts), search (ChainSearchSettings of the "
        "ChunkGraphRetriever: max_hops, max_nodes, ...) and budget (ChainBudget's head_share: the "
        "multi-route nodes kept first in the top k before the chain nodes); a flat mapping is "
        "sorted into the three.",
    )
    document_focus: DocumentFocusSettings = Field(
        default_factory=DocumentFocusSettings,
        description="DocumentFocusRetriever settings: the documents the question is about (the "
        "multi-route ranking's best one, plus those the question names or does not tell apart) are "
        "ranked again node by node (vector, BM25, heading-path similarity, a table bonus; one node "
        "per page first) and share the first places. {'focus_documents': 1} focuses the best "
        "document alone, {'focus_documents': 0} turns it off. Not used with the chunk graph (its "
        "chains cross documents).",
    )
    use_segment_integration: bool = Field(
        default=False,
        description="Merge retrieved chunks into contiguous segments (TextRAG RSE) before answering.",
    )
    segment_preset: Optional[Literal["balanced", "precision", "find_all"]] = Field(
        default=None,
        description="SegmentIntegrationPostprocessor preset (dsRAG's): balanced (the default when "
        "None), precision (shorter segments) or find_all (longer ones).",
    )
    max_segment_chars: Optional[int] = Field(
        default=None, ge=MIN_SEGMENT_CHARS, le=MAX_SEGMENT_CHARS,
        description="Parser: split sections longer than this many characters (at least "
        f"{MIN_SEGMENT_CHARS}: shorter parts would cut sentences; at most {MAX_SEGMENT_CHARS:,}; "
        "None: the parser's default, 4000).",
    )
    max_segment_tokens: Union[Annotated[int, Field(ge=MIN_SEGMENT_TOKENS, le=MAX_SEGMENT_TOKENS)], Literal["auto"], None] = Field(
        default="auto",
        description="Parser: bound every node's cascade header + text by this many tokens of the "
        "embedding model's tokenizer ('auto': the model's own window, e.g. 256 for MiniLM; None: "
        f"character limits only; at least {MIN_SEGMENT_TOKENS}, room for the cascade header and a "
        f"sentence, at most {MAX_SEGMENT_TOKENS:,}). Longer segments are split, small ones of a section merged.",
    )
    show_progress: bool = Field(default=False, description="Progress bars during ingestion.")
    ingest_batch_size: int = Field(
        default=8, ge=1, le=MAX_INGEST_BATCH,
        description="Documents parsed, augmented and embedded together; peak memory grows with it "
        f"(1 to {MAX_INGEST_BATCH:,}).",
    )
    ingest_workers: int = Field(
        default=1, ge=1, le=256,
        description="Processes that parse, augment and embed batches at once (1: this process; at most 256). "
        "The main process still reads the files and is the store's only writer; results are "
        "written in reading order. Scripts using more than 1 need an `if __name__ == \"__main__\":` guard.",
    )
    embed_backend: EmbedBackend = Field(
        default=DEFAULT_EMBED_BACKEND,
        description="How the packaged MiniLM runs when no embed_model / Settings.embed_model is "
        "given: torch, onnx (same vectors, faster) or onnx-int8 (fastest, vectors drift slightly).",
    )

    store_format: Optional[Literal["folder", "embedded"]] = Field(
        default=None,
        description="What a new store folder holds: 'embedded' (an SQLite database and a "
        "memory-mapped vector matrix: each batch commits as it is indexed, a loaded store reads "
        "only what a question needs) or 'folder' (snapshots of the whole collection, loaded into "
        "memory). None: embedded, unless use_chunk_graph is on or a vector_store is given (both "
        "kept by the folder store only).",
    )

    @property
    def tables_embedded_by(self) -> Literal["rows", "labels"]:
        """The tables' embedding view: ``table_view``, or by ``detect_unruled_tables`` when unset."""
        if self.table_view is not None:
            return self.table_view
        return "rows" if self.detect_unruled_tables else "labels"

    def new_store_format(self, own_vector_store: bool = False) -> Literal["folder", "embedded"]:
        """The format a new store folder is written in: ``store_format`` when set, else the
        embedded store, unless the chunk graph is on or the pack was given a vector store of its
        own (both kept by the folder store only).

        Args:
            own_vector_store: The pack holds a LlamaIndex vector store the caller gave it.

        Returns:
            ``"embedded"`` or ``"folder"``.
        """
        if self.store_format is not None:
            return self.store_format
        return "folder" if self.use_chunk_graph or own_vector_store else "embedded"

    @model_validator(mode="before")
    @classmethod
    def _route_keys_at_top(cls, data: Any) -> Any:
        """``multi_route={"similarity_top_k": 8}`` (or ``"mode"``), found in the settings stores
        saved before the parts were typed (where it overrode the top-level setting): those
        stores still load as they ranked, with a warning naming both settings when they differ."""
        if not isinstance(data, dict) or not isinstance(data.get("multi_route"), dict):
            return data
        routes = dict(data["multi_route"])
        data = dict(data)
        for inner, outer in _ROUTE_KEYS_AT_TOP.items():
            if inner not in routes:
                continue
            value = routes.pop(inner)
            if outer in data and data[outer] != value:
                message = (
                    f"multi_route.{inner}={value!r} overrides {outer}={data[outer]!r} (as in earlier "
                    f"releases); set {outer} alone, at the top level"
                )
                warnings.warn(message, UserWarning, stacklevel=2)
                logger.warning(message)
            data[outer] = value
        data["multi_route"] = routes
        return data

    def applied_to(self, stored: Mapping[str, Any], **fixed: Any) -> "HiQAPackSettings":
        """The settings a store saved, with the fields set on this object (pydantic's
        ``model_fields_set``: those given at construction) replacing theirs: what
        ``HiQAPack.load(store, **settings)`` runs with. A part set here replaces the stored part
        as a whole.

        Args:
            stored: The settings as a store saved them (validated here with the others).
            **fixed: Settings the store decides whatever was given (its ``store_format``).

        Returns:
            The settings of this process.
        """
        return type(self)(**{**stored, **self.model_dump(include=self.model_fields_set), **fixed})

    def route_config(self) -> MultiRouteSettings:
        """The [`MultiRouteSettings`][llama_index_hiqa.retrievers.multi_route.MultiRouteSettings] of the pack's multi-route retriever.

        Returns:
            ``multi_route`` with ``similarity_top_k`` and ``fusion_mode`` (as ``mode``).
        """
        return MultiRouteSettings(
            similarity_top_k=self.similarity_top_k, mode=self.fusion_mode, **self.multi_route.model_dump()
        )


def inapplicable_settings(config: HiQAPackSettings, llm: Optional[LLM]) -> List[str]:
    """The settings ``config`` holds that the pack will not use with ``llm``, each explained.

    Whether a parser setting applies depends on the LLM, which the configuration does not
    know; the pack calls [`warn_inapplicable_settings`][llama_index_hiqa.pack.config.warn_inapplicable_settings] when it is built.

    Args:
        config: The pack's settings.
        llm: The pack's LLM (after ``Settings.llm``), or ``None``.

    Returns:
        One sentence per setting that has no effect, naming it; empty when all apply.
    """
    found: List[str] = []
    if llm is not None and config.use_llm_formatter and config.max_segment_tokens != "auto":
        found.append(
            f"max_segment_tokens={config.max_segment_tokens!r} has no effect: with an LLM set and "
            "use_llm_formatter=True the MarkdownFormatterParser parses (it bounds segments by "
            "max_segment_chars); pass use_llm_formatter=False to bound them by tokens"
        )
    if config.use_chunk_graph and config.document_focus != DocumentFocusSettings():
        found.append(
            "document_focus has no effect with use_chunk_graph=True: the chain nodes share the top "
            "k instead (their chains cross documents)"
        )
    if not config.use_chunk_graph and config.chunk_graph != ChunkGraphSettings():
        found.append("chunk_graph has no effect without use_chunk_graph=True")
    if llm is None and config.document_focus.question_rewrite.enabled:
        found.append("document_focus.question_rewrite has no effect without an LLM: questions are searched unrewritten")
    if not config.use_segment_integration and config.segment_preset is not None:
        found.append("segment_preset has no effect without use_segment_integration=True")
    return found


def warn_inapplicable_settings(config: HiQAPackSettings, llm: Optional[LLM]) -> None:
    """A ``UserWarning`` (and a log line) for each of [`inapplicable_settings`][llama_index_hiqa.pack.config.inapplicable_settings].

    Args:
        config: The pack's settings.
        llm: The pack's LLM, or ``None``.
    """
    for message in inapplicable_settings(config, llm):
        warnings.warn(message, UserWarning, stacklevel=3)
        logger.warning(message)


def default_embed_model(embed_model: Optional[BaseEmbedding], backend: Optional[str] = None) -> BaseEmbedding:
    """The given model, else Settings.embed_model, else the packaged MiniLM on ``backend``
    behind the shared on-disk vector cache (re-ingesting the same text costs nothing).

    Args:
        embed_model: the model the user gave, or ``None``.
        backend: the packaged model's backend (``None``: the default one).

    Returns:
        The embedding model to use.
    """
    if embed_model is not None:
        return embed_model
    if user_embed_model() is not None:
        return resolve_embed_model()
    return CachedEmbedding.from_defaults(backend=backend)


def model_identity(embed_model: BaseEmbedding) -> str:
    """The name a store records for the model that embedded it, the same on every machine
    (the packaged model's install path is cut: [`portable_model_name`][llama_index_hiqa.models.defaults.portable_model_name]).

    Args:
        embed_model: the embedding model.

    Returns:
        The model's portable name.
    """
    inner = getattr(embed_model, "model_id", None)
    return portable_model_name(inner or f"{embed_model.class_name()}:{getattr(embed_model, 'model_name', '?')}")


def same_model(recorded: Optional[str], embed_model: BaseEmbedding) -> bool:
    """Whether a store's recorded model name (written by any release, on any machine) names
    ``embed_model``.

    Args:
        recorded: the model name the store recorded (``None``: none recorded).
        embed_model: the embedding model in use.

    Returns:
        True when the two name the same model.
    """
    return portable_model_name(recorded or "") == model_identity(embed_model)


def build_parser(
    config: HiQAPackSettings, llm: Optional[LLM], embed_model: Optional[BaseEmbedding] = None
) -> Union[MarkdownFormatterParser, LayoutMarkdownParser]:
    """The node parser of a pack: the LLM formatter when an LLM is given and enabled, else the
    layout parser (its segments sized to the embedding model's window when
    ``max_segment_tokens`` is set).

    Args:
        config: the pack configuration.
        llm: the LLM (``None``: the layout parser).
        embed_model: the embedding model whose tokenizer sizes the segments.

    Returns:
        The parser.
    """
    # Imported here: the parsers cost 0.25 s over an import of the pack (measured), and only
    # ingestion parses (a process that loads a store and answers never does).
    from llama_index_hiqa.parsers.layout_markdown import LayoutMarkdownParser
    from llama_index_hiqa.parsers.markdown_formatter import MarkdownFormatterParser

    layout_kwargs: Dict[str, Any] = {} if config.max_segment_chars is None else {"max_segment_chars": config.max_segment_chars}
    if llm is not None and config.use_llm_formatter:
        # Falls back to the layout parser window by window when the LLM's output is unusable.
        return MarkdownFormatterParser(llm=llm, show_progress=config.show_progress, **layout_kwargs)
    window = embedding_tokenizer(embed_model) if config.max_segment_tokens is not None else None
    if window is not None:
        tokenizer, size = window
        size = size if config.max_segment_tokens == "auto" else min(size, int(config.max_segment_tokens))
        layout_kwargs.update(tokenizer=tokenizer, max_segment_tokens=size, table_view=config.tables_embedded_by)
    return LayoutMarkdownParser(show_progress=config.show_progress, **layout_kwargs)


def keyword_extractor(config: HiQAPackSettings) -> CriticalKeywordExtractor:
    """The same critical-keyword settings at ingestion and at query time (|C| must match).

    Args:
        config: the pack configuration.

    Returns:
        The ``CriticalKeywordExtractor``.
    """
    # NER over every node's text cost more than embedding it (about a CPU-minute per 1,000
    # filing-sized chunks) and was not what the product-path figures measured at collection
    # scale; the pack's default runs NER over document titles and questions only, whatever the
    # batch size. keywords={"ner_max_nodes": None} turns it back on for node text.
    #
    # With the chunk graph on, NER reads the nodes' text too: IIER's keyword edges link chunks
    # by the named entities they share (the bridge entity of a multi-hop question); with the
    # rules alone (years, identifiers) the chains found no more of MuSiQue's evidence than
    # vector top-k (benchmarks/RESULTS.md, "Multi-hop on the product path").
    settings = config.keywords.model_dump()
    if settings["ner_max_nodes"] == "auto":
        settings["ner_max_nodes"] = None if config.use_chunk_graph else 0
    return CriticalKeywordExtractor(show_progress=config.show_progress, **settings)


def graph_retriever_settings(
    index: VectorStoreIndex, config: HiQAPackSettings, embed_model: BaseEmbedding, llm: Optional[LLM],
    keywords: CriticalKeywordExtractor,
) -> Dict[str, Any]:
    """What a loaded pack's ChunkGraphRetriever is given besides its graph (any store);
    ``keywords`` is the pack's ``CriticalKeywordExtractor``.

    Args:
        index: the pack's index (its docstore is read).
        config: the pack configuration.
        embed_model: the embedding model.
        llm: the LLM, or ``None``.
        keywords: the pack's ``CriticalKeywordExtractor``.

    Returns:
        The ChunkGraphRetriever keyword arguments.
    """
    return {
        "docstore": index.docstore, "embed_model": embed_model, "llm": llm,
        "keyword_fn": keywords.extract_query, **config.chunk_graph.search.model_dump(),
    }
