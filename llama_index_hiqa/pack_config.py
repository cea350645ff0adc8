"""HiQAPackConfig: the settings of the pack's default pipeline, and the components they build.

One place turns a configuration into the parser, keyword extractor, route settings and
embedding model, so ingestion, loading and querying build them the same way (the keyword
extractor in particular must be the same at ingestion and query time: the keyword route's
score |C| compares the two).
"""

from __future__ import annotations

from typing import Annotated, Any, Dict, Literal, Optional, Union

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field, field_validator
from llama_index.core.llms import LLM

from llama_index_hiqa.defaults import DEFAULT_EMBED_BACKEND, portable_model_name, resolve_embed_model, user_embed_model
from llama_index_hiqa.embedding_backends import EmbedBackend

# Below these a "segment" holds a few words: nodes multiply, and the cascade header alone can
# fill the budget. The parsers accept at least 1; the pack's settings keep to useful sizes.
MIN_SEGMENT_CHARS = 200
MIN_SEGMENT_TOKENS = 32


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
    keywords: Dict[str, Any] = Field(
        default_factory=dict,
        description="CriticalKeywordExtractor settings for ingestion and queries, e.g. "
        "{'expert_keywords': [...]} or {'use_ner': False} (rules only, no spaCy).",
    )
    fusion_mode: Literal["hiqa", "rrf", "relative_score", "dist_based_score"] = Field(
        default="hiqa", description="MultiRouteRetriever fusion: hiqa, rrf, relative_score, dist_based_score."
    )
    multi_route: Dict[str, Any] = Field(
        default_factory=dict,
        description="Further MultiRouteConfig settings (alpha, beta, candidates_per_route, ...).",
    )
    use_chunk_graph: bool = Field(
        default=False,
        description="IIER evidence chains (ChunkGraphRetriever) share the top k with the multi-route "
        "ranking, for multi-hop questions; NER then also reads node text at ingestion.",
    )
    chunk_graph: Dict[str, Any] = Field(
        default_factory=lambda: {"max_nodes": 5},
        description="Chunk-graph settings: ChunkInteractionGraph fields (keyword_threshold, default "
        "'auto': T from the collection's shared-keyword counts), ChainSearchSettings of the "
        "ChunkGraphRetriever (max_hops, max_nodes, ...) and ChainBudget's head_share (the "
        "multi-route nodes kept first in the top k before the chain nodes).",
    )
    document_focus: Dict[str, Any] = Field(
        default_factory=dict,
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
        default=None, ge=MIN_SEGMENT_CHARS,
        description="Parser: split sections longer than this many characters (at least "
        f"{MIN_SEGMENT_CHARS}: shorter parts would cut sentences; None: the parser's default, 4000).",
    )
    max_segment_tokens: Union[Annotated[int, Field(ge=MIN_SEGMENT_TOKENS)], Literal["auto"], None] = Field(
        default="auto",
        description="Parser: bound every node's cascade header + text by this many tokens of the "
        "embedding model's tokenizer ('auto': the model's own window, e.g. 256 for MiniLM; None: "
        f"character limits only; at least {MIN_SEGMENT_TOKENS}, room for the cascade header and a "
        "sentence). Longer segments are split, small ones of a section merged.",
    )
    show_progress: bool = Field(default=False, description="Progress bars during ingestion.")
    ingest_batch_size: int = Field(
        default=8, ge=1,
        description="Documents parsed, augmented and embedded together; peak memory grows with it.",
    )
    ingest_workers: int = Field(
        default=1, ge=1, le=256,
        description="Processes that parse, augment and embed batches at once (1: this process). "
        "The main process still reads the files and is the store's only writer; results are "
        "written in reading order. Scripts using more than 1 need an `if __name__ == \"__main__\":` guard.",
    )
    embed_backend: EmbedBackend = Field(
        default=DEFAULT_EMBED_BACKEND,
        description="How the packaged MiniLM runs when no embed_model / Settings.embed_model is "
        "given: torch, onnx (same vectors, faster) or onnx-int8 (fastest, vectors drift slightly).",
    )

    store_format: Literal["folder", "embedded"] = Field(
        default="folder",
        description="What a store folder holds: 'folder' (snapshots of the whole collection, "
        "loaded into memory) or 'embedded' (an SQLite database and a memory-mapped vector matrix: "
        "each batch commits as it is indexed, a loaded store reads only what a question needs).",
    )

    # The nested settings stay plain dicts (saved as JSON with the store) but are checked
    # against the models that will receive them, here, not at the first question.
    @field_validator("keywords")
    @classmethod
    def _check_keywords(cls, value: Dict[str, Any]) -> Dict[str, Any]:
        from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

        _known_keys("keywords", value, CriticalKeywordExtractor.model_fields)
        _check_values("keywords", value, CriticalKeywordExtractor)  # types and ranges, cheap to build
        return value

    @field_validator("multi_route")
    @classmethod
    def _check_multi_route(cls, value: Dict[str, Any]) -> Dict[str, Any]:
        from llama_index_hiqa.retrievers.multi_route import MultiRouteConfig

        MultiRouteConfig(**value)  # extra="forbid": an unknown key names itself
        return value

    @field_validator("document_focus")
    @classmethod
    def _check_document_focus(cls, value: Dict[str, Any]) -> Dict[str, Any]:
        from llama_index_hiqa.retrievers.document_focus import DocumentFocusConfig

        DocumentFocusConfig(**value)  # extra="forbid": an unknown key names itself
        return value

    @field_validator("chunk_graph")
    @classmethod
    def _check_chunk_graph(cls, value: Dict[str, Any]) -> Dict[str, Any]:
        from llama_index_hiqa.retrievers.chain_augmented import ChainBudget
        from llama_index_hiqa.retrievers.chunk_graph import ChainSearchSettings, ChunkInteractionGraph

        _known_keys(
            "chunk_graph", value,
            {**ChunkInteractionGraph.model_fields, **ChainSearchSettings.model_fields, **ChainBudget.model_fields},
        )
        for model in (ChunkInteractionGraph, ChainSearchSettings, ChainBudget):
            _check_values("chunk_graph", {k: v for k, v in value.items() if k in model.model_fields}, model)
        for key in ("max_hops", "max_nodes", "max_seeds"):
            if key in value and (not isinstance(value[key], int) or value[key] < 1):
                raise ValueError(f"chunk_graph[{key!r}] must be a whole number of at least 1, not {value[key]!r}")
        return value


def chunk_graph_settings(config: HiQAPackConfig) -> Dict[str, Dict[str, Any]]:
    """``config.chunk_graph`` split by who receives each key: ``graph`` (ChunkInteractionGraph),
    ``search`` (ChainSearchSettings of the ChunkGraphRetriever) and ``budget`` (ChainBudget of
    the ChainAugmentedRetriever) — one place, so a graph setting never lands where it is ignored."""
    from llama_index_hiqa.retrievers.chain_augmented import ChainBudget
    from llama_index_hiqa.retrievers.chunk_graph import ChunkInteractionGraph

    split: Dict[str, Dict[str, Any]] = {"graph": {}, "search": {}, "budget": {}}
    for key, value in config.chunk_graph.items():
        part = "graph" if key in ChunkInteractionGraph.model_fields else "budget" if key in ChainBudget.model_fields else "search"
        split[part][key] = value
    return split


def _check_values(setting: str, value: Dict[str, Any], model: Any) -> None:
    """Build ``model`` from ``value`` (the component the nested setting will configure) and
    name the key of the first value it rejects: ``keywords['expert_keywords']: ...``."""
    from pydantic import ValidationError

    try:
        model(**value)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = first["loc"][0] if first.get("loc") else "?"
        shown = repr(value.get(key, first.get("input")))[:60]
        raise ValueError(f"{setting}[{key!r}]: {first['msg']} (got {shown})") from None


def _known_keys(setting: str, value: Dict[str, Any], known: Any) -> None:
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ValueError(f"{setting}: unknown setting(s) {unknown}; known: {sorted(known)}")


def route_settings(config: HiQAPackConfig) -> Dict[str, Any]:
    """The MultiRouteRetriever settings of a pack configuration (one place)."""
    return {"similarity_top_k": config.similarity_top_k, "mode": config.fusion_mode, **config.multi_route}


def default_embed_model(embed_model: Optional[BaseEmbedding], backend: Optional[str] = None) -> BaseEmbedding:
    """The given model, else Settings.embed_model, else the packaged MiniLM on ``backend``
    behind the shared on-disk vector cache (re-ingesting the same text costs nothing)."""
    if embed_model is not None:
        return embed_model
    if user_embed_model() is not None:
        return resolve_embed_model()
    from llama_index_hiqa.embedding_cache import CachedEmbedding

    return CachedEmbedding.from_defaults(backend=backend)


def model_identity(embed_model: BaseEmbedding) -> str:
    """The name a store records for the model that embedded it, the same on every machine
    (the packaged model's install path is cut: :func:`~llama_index_hiqa.defaults.portable_model_name`)."""
    inner = getattr(embed_model, "model_id", None)
    return portable_model_name(inner or f"{embed_model.class_name()}:{getattr(embed_model, 'model_name', '?')}")


def same_model(recorded: Optional[str], embed_model: BaseEmbedding) -> bool:
    """Whether a store's recorded model name (written by any release, on any machine) names
    ``embed_model``."""
    return portable_model_name(recorded or "") == model_identity(embed_model)


def build_parser(config: HiQAPackConfig, llm: Optional[LLM], embed_model: Optional[BaseEmbedding] = None) -> Any:
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


def keyword_extractor(config: HiQAPackConfig) -> Any:
    """The same critical-keyword settings at ingestion and at query time (|C| must match)."""
    from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

    # NER over every node's text cost more than embedding it (about a CPU-minute per 1,000
    # filing-sized chunks) and was not what the product-path figures measured at collection
    # scale; the pack's default runs NER over document titles and questions only, whatever the
    # batch size. keywords={"ner_max_nodes": None} turns it back on for node text.
    #
    # With the chunk graph on, NER reads the nodes' text too: IIER's keyword edges link chunks
    # by the named entities they share (the bridge entity of a multi-hop question); with the
    # rules alone (years, identifiers) the chains found no more of MuSiQue's evidence than
    # vector top-k (benchmarks/RESULTS.md, "Multi-hop on the product path").
    defaults = {"show_progress": config.show_progress, "ner_max_nodes": None if config.use_chunk_graph else 0}
    return CriticalKeywordExtractor(**{**defaults, **config.keywords})


def graph_retriever_settings(
    index: Any, config: HiQAPackConfig, embed_model: BaseEmbedding, llm: Optional[LLM], keywords: Any
) -> Dict[str, Any]:
    """What a loaded pack's ChunkGraphRetriever is given besides its graph (any store);
    ``keywords`` is the pack's ``CriticalKeywordExtractor``."""
    return {
        "docstore": index.docstore, "embed_model": embed_model, "llm": llm,
        "keyword_fn": keywords.extract_query, **chunk_graph_settings(config)["search"],
    }
