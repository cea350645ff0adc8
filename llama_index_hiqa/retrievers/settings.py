"""The settings of the retrievers, in one light module (pydantic only): the typed parts of
[`HiQAPackSettings`][llama_index_hiqa.pack.config.HiQAPackSettings] and the configs the retrievers validate.

The retrievers re-export their own config (``from llama_index_hiqa.retrievers.multi_route
import MultiRouteSettings`` still works); the pack's configuration imports them from here without
loading the retrievers' dependencies (bm25s, networkx).
"""

from __future__ import annotations

from typing import Annotated, Any, Dict, Final, Literal, Optional, Type, Union

from llama_index.core.bridge.pydantic import BaseModel, Field, field_validator, model_validator

from llama_index_hiqa.models.llm_calls import max_retries_field, retry_backoff_field, timeout_field
from llama_index_hiqa.retrievers.fusion import RRF_K
from llama_index_hiqa.settings import SettingsModel
from llama_index_hiqa.vocabularies import vocabulary_setting

# How many nodes a question gets, everywhere a default is needed: the pack's
# similarity_top_k, a MultiRouteRetriever built on its own, the evidence-chain budget.
DEFAULT_SIMILARITY_TOP_K = 5

# Final: a type checker reads each as its literal (a key of RouteName).
VECTOR: Final = "vector"
BM25: Final = "bm25"
KEYWORDS: Final = "keywords"
ROUTES = (VECTOR, BM25, KEYWORDS)
FusionMode = Literal["hiqa", "rrf", "relative_score", "dist_based_score"]

# At k = 5: the first retriever's best node first (a single-hop question keeps its rank-1
# answer), the chains the other 4 places. Measured on the even-numbered MuSiQue and HotpotQA
# questions of the multi-hop product-path benchmark (benchmarks/bench_multihop_product.py):
# with title-mention edges 1 head node is the best or within one question of the best on
# both sets, and a per-question share read from the first ranking's score gap (0.0 or 0.2)
# gains nothing over it, so the smallest head that keeps rank 1 is kept.
DEFAULT_HEAD_SHARE = 0.2

# Upper bounds of the settings (each stated in its field's description): far above any useful
# value, low enough that no setting within them makes a question or a build exhaust memory.
MAX_TOP_K = 1000  # nodes per question: an answer's evidence, not the collection
MAX_CANDIDATES = 100_000  # candidates a route contributes before fusion
MAX_WEIGHT = 100.0  # a weight or a bonus on the 0..1 scale of the normalised scores
MAX_COUNT = 1_000_000_000  # a count threshold (nodes, chunks); above it means "always"
MAX_SEMANTIC_TOP_K = 100  # neighbours per chunk the graph keeps (n x k similarities in memory)
RouteName = Literal["vector", "bm25", "keywords"]
DEFAULT_BM25_LANGUAGE = "en"


# The names bm25s's ``tokenize(stopwords=...)`` accepts (bm25s 0.3, ``tokenization._infer_stopwords``),
# written out so that checking a setting imports nothing (bm25s and scipy take about 1.2 s);
# tests/test_settings_tree.py compares them with bm25s's own.
BM25_STOPWORD_LANGUAGES = (
    "en", "english", "en_plus", "english_plus", "de", "german", "nl", "dutch", "fr", "french",
    "es", "spanish", "pt", "portuguese", "it", "italian", "ru", "russian", "sv", "swedish",
    "no", "norwegian", "zh", "chinese", "tr", "turkish", "ko", "korean", "da", "danish",
)


def bm25_stopword_language(value: str) -> str:
    """``value`` when bm25s (the library that tokenizes the BM25 route) knows its stop words.

    Args:
        value: a language name or code (``"en"``, ``"german"``, ``"fr"``, ...).

    Returns:
        ``value``.

    Raises:
        ValueError: bm25s has no stop words for it; the message lists the names it has.
    """
    if value not in BM25_STOPWORD_LANGUAGES:
        raise ValueError(f"bm25s has no stop words for {value!r}; choose one of {', '.join(BM25_STOPWORD_LANGUAGES)}")
    return value


# -- the multi-route retriever -------------------------------------------------------------
def _equal_route_weights() -> Dict[RouteName, float]:
    return {VECTOR: 1.0, BM25: 1.0, KEYWORDS: 1.0}


class RouteFusionSettings(SettingsModel):
    """How [`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever] asks its routes and fuses them.

    Every setting of [`MultiRouteSettings`][llama_index_hiqa.retrievers.settings.MultiRouteSettings] but the answer size and the fusion mode: the
    pack's ``multi_route`` part (``HiQAPackSettings.similarity_top_k`` and ``fusion_mode`` are the
    other two).
    """

    candidates_per_route: int = Field(
        default=100,
        ge=1,
        le=MAX_CANDIDATES,
        description="Candidates each route contributes before fusion (well above top_k, so a "
        f"node ranked low by one route can be lifted by the others); 1 to {MAX_CANDIDATES:,}.",
    )
    alpha: float = Field(
        default=0.7,
        ge=0.0,
        le=1.0,
        description="HiQA α: weight of the vector score against BM25. The paper raises α for "
        "well-structured collections (heading cascade in the embedding), lowers it otherwise.",
    )
    beta: Union[Annotated[float, Field(ge=0.0, le=MAX_WEIGHT)], Literal["auto"]] = Field(
        default="auto",
        description="HiQA β: weight of the keyword bonus log(1+|C|), 0 to 100. 'auto' ties it to "
        "|documents| / average pages (fusion.auto_beta): more, shorter documents -> larger β.",
    )
    document_keyword_weight: float = Field(
        default=2.0,
        ge=0.0,
        le=MAX_WEIGHT,
        description="How much a matched keyword counts in |C| when it is in the node's document "
        "title (1.0: the paper's plain count; 0 to 100). The title says what the whole document is "
        "(3M 2018 10-K); the same year in the text is often a comparative figure of a later filing.",
    )
    match_name_abbreviations: bool = Field(
        default=True,
        description="Count a document's name keyword for a question that abbreviates the name "
        "('AMEX' for American Express, 'JnJ' for Johnson & Johnson) or writes its words apart "
        "('Best Buy's'); names are the multi-word keywords of the document titles.",
    )
    latest_year_in_titles: bool = Field(
        default=True,
        description="When a question names several years, match only the latest against "
        "document titles: a report of a year carries the previous years as comparatives, so "
        "'FY2022 and FY2021' is the FY2022 report. Every year still counts in the text.",
    )
    beta_min: float = Field(default=0.5, ge=0.0, le=MAX_WEIGHT, description="β for beta='auto' as |D|/pages -> 0 (0 to 100).")
    beta_max: float = Field(default=2.0, ge=0.0, le=MAX_WEIGHT, description="β for beta='auto' as |D|/pages -> ∞ (0 to 100).")
    route_weights: Dict[RouteName, Annotated[float, Field(ge=0.0, le=MAX_WEIGHT)]] = Field(
        default_factory=_equal_route_weights,
        description="Per-route weights (vector, bm25, keywords; 0 to 100) of the 'rrf', 'relative_score' "
        "and 'dist_based_score' modes.",
    )
    rrf_k: float = Field(default=RRF_K, gt=0, le=1_000_000, description="k of reciprocal rank fusion (0 < k <= 1,000,000).")
    use_bm25: bool = Field(default=True, description="Ask the BM25 route.")
    use_keywords: bool = Field(default=True, description="Ask the critical-keyword route.")
    bm25_language: str = Field(
        default=DEFAULT_BM25_LANGUAGE,
        description="Stop-word language of the default BM25 tokenizer: a language bm25s has stop words "
        f"for ({', '.join(BM25_STOPWORD_LANGUAGES)}).",
    )

    expert_vocabulary: Optional[str] = Field(
        default=None,
        description="Expert vocabulary applied to each question (HiQA's expert keywords, as data): "
        "'finance' or 'datasheets' (shipped), the path of a YAML/JSON file of the same shape, or None "
        "(off). The concepts a question names add the terms their evidence uses to the BM25 and "
        "keyword routes and to the document focus's heading words; the embedding sees the question "
        "alone. Each result's route_scores['vocabulary'] shows what was added.",
    )

    table_places: int = Field(
        default=5,
        ge=0,
        le=MAX_TOP_K,
        description="In this many first places of the fused ranking, at most one table part of a page "
        "unless the question asks for figures (table_places.asks_for_figures); the page's other parts "
        f"follow right after them. 0: no limit (0 to {MAX_TOP_K}).",
    )

    vocabulary_scope: Literal["documents", "collection"] = Field(
        default="documents",
        description="Where expert_vocabulary applies: 'documents' scores the nodes inside the documents a "
        "question is about (the document focus) and leaves the ranking over the whole collection, which "
        "chooses the document, to the question's own words (a concept's terms, statement lines, are shared "
        "by every look-alike document); 'collection' applies it to that ranking too.",
    )

    @field_validator("bm25_language")
    @classmethod
    def _known_bm25_language(cls, value: str) -> str:
        return bm25_stopword_language(value)

    @field_validator("expert_vocabulary")
    @classmethod
    def _loadable_vocabulary(cls, value: Optional[str]) -> Optional[str]:
        return vocabulary_setting(value)


class MultiRouteSettings(RouteFusionSettings):
    """Settings of [`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever] (persisted with it): its
    [`RouteFusionSettings`][llama_index_hiqa.retrievers.settings.RouteFusionSettings] plus the answer size and the fusion mode."""

    similarity_top_k: int = Field(
        default=DEFAULT_SIMILARITY_TOP_K, ge=1, le=MAX_TOP_K, description=f"Nodes returned per query (1 to {MAX_TOP_K})."
    )
    mode: FusionMode = Field(
        default="hiqa",
        description="'hiqa' (formula 2), 'rrf' (weighted reciprocal rank, k=60), "
        "'relative_score' or 'dist_based_score' (LlamaIndex's definitions).",
    )


# -- the document focus --------------------------------------------------------------------
class QuestionRewriteSettings(SettingsModel):
    """Settings of the LLM question rewrite inside the focused documents
    ([`QuestionRewriter`][llama_index_hiqa.retrievers.question_rewrite.QuestionRewriter]).
    Off by default and always off without an LLM; its effect on ranking is not measured (no
    LLM was at hand where the pack's figures were measured)."""

    enabled: bool = Field(
        default=False,
        description="Ask the LLM (when one is set) for the words the evidence of the question's concepts "
        "uses ('quick ratio' -> cash, marketable securities, accounts receivable, total current "
        "liabilities) and add them to the lexical routes and heading words inside the focused "
        "documents; each result's route_scores['vocabulary'] lists them under 'rewrite'.",
    )
    max_terms: int = Field(default=12, ge=1, le=100, description="At most this many terms are kept (1 to 100).")
    max_retries: int = max_retries_field("the rewrite call")
    retry_backoff_seconds: float = retry_backoff_field()
    timeout_seconds: Optional[float] = timeout_field(10.0)


class DocumentFocusSettings(SettingsModel):
    """Settings of [`DocumentFocusRetriever`][llama_index_hiqa.retrievers.document_focus.DocumentFocusRetriever].

    The weights are on the scale of the min-max normalised vector/BM25 mix (0..1). They were
    chosen on FinanceBench's development questions (benchmarks/RESULTS.md says so).
    """

    focus_documents: Optional[int] = Field(
        default=None,
        ge=0,
        le=MAX_TOP_K,
        description="At most this many documents (up to 1000) are ranked again node by node and share the "
        "first places. None: as many as the question needs (the documents it names, or those "
        "its words do not tell apart; focus_share.py); 1: the best document alone; 0: off, "
        "the multi-route ranking as it is.",
    )
    heading_weight: float = Field(
        default=0.2,
        ge=0.0,
        le=MAX_WEIGHT,
        description="Weight (0 to 100) of the question's cosine similarity to the node's heading path "
        "(titles only, no document title), min-max normalised inside the document.",
    )
    heading_words_weight: float = Field(
        default=0.2,
        ge=0.0,
        le=MAX_WEIGHT,
        description="Weight (0 to 100) of the share of a heading's words that the question names (0..1, "
        "stemmed, stop words left out, the best of the node's heading levels).",
    )
    table_weight: float = Field(
        default=0.2,
        ge=0.0,
        le=MAX_WEIGHT,
        description="Bonus (0 to 100) of a table-like node: a table segment, or text whose share of "
        "number tokens is at least table_number_share.",
    )
    table_weight_by_question: bool = Field(
        default=True,
        description="Scale the table bonus by how much the question asks for figures "
        "(table_places.figure_demand: 1 for 'how much' or 'what was the X in FY2018', 0.5 for a "
        "question that names a financial measure, 0 for one that does not, halved for 'why' and "
        "'what drove'); False: the whole bonus for every question.",
    )
    table_number_share: float = Field(
        default=0.3,
        gt=0.0,
        le=1.0,
        description="Share of a node's tokens that must be numbers (1,234 / (56) / 7.5%) for it "
        "to count as a table.",
    )
    pages_first: bool = Field(
        default=True,
        description="List the best node of each page before a second node of any page.",
    )
    prefer_implied_period: bool = Field(
        default=True,
        description="Among the best document's look-alikes (the documents whose titles hold the same "
        "names), prefer the one whose period and form the question implies: the date or latest year "
        "it names, the latest filing for a question in the present tense, an earnings release or "
        "10-Q only when it names a release's words (document_period.py).",
    )
    question_rewrite: QuestionRewriteSettings = Field(
        default_factory=QuestionRewriteSettings,
        description="The optional LLM question rewrite inside the focused documents "
        "(QuestionRewriteSettings: enabled, max_terms, max_retries, retry_backoff_seconds, timeout_seconds).",
    )
    max_document_nodes: int = Field(
        default=20_000,
        ge=1,
        le=MAX_COUNT,
        description="Documents with more nodes are not ranked again (cost limit): the "
        "multi-route ranking is returned as it is (1 to 10^9).",
    )

    @property
    def enabled(self) -> bool:
        """Whether the focus re-ranks anything (``focus_documents`` is not 0)."""
        return self.focus_documents != 0


# -- pure functions ----------------------------------------------------------------------


# -- the chunk graph -----------------------------------------------------------------------
class InteractionGraphSettings(SettingsModel):
    """How [`ChunkInteractionGraph`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph] links chunks (IIER §3.1); the
    graph's own fields."""

    semantic_top_k: int = Field(
        default=5, ge=0, le=MAX_SEMANTIC_TOP_K,
        description="Semantic edges from each chunk to its k most similar chunks (paper: 5; 0 to "
        f"{MAX_SEMANTIC_TOP_K}: the graph keeps k neighbours of every chunk in memory).",
    )
    min_similarity: float = Field(
        default=0.0, ge=-1.0, le=1.0, description="Semantic edges below this cosine are not added."
    )
    keyword_threshold: Union[Annotated[int, Field(ge=1, le=MAX_TOP_K)], Literal["auto"]] = Field(
        default="auto",
        description="Keyword edge when two chunks share at least this many keywords (paper: more "
        "than two, T = 3; 1 to 1000). 'auto': the smallest T whose keyword edges average at most "
        "max_keyword_degree per chunk, read from the collection's own shared-keyword counts.",
    )
    max_keyword_degree: float = Field(
        default=20.0,
        gt=0,
        le=MAX_CANDIDATES,
        description="For keyword_threshold='auto': most keyword edges per chunk on average (4x the "
        "paper's 5 semantic neighbours; at most 100,000), so keyword edges link bridge entities without "
        "flooding the walk.",
    )
    max_keyword_fraction: float = Field(
        default=0.01, gt=0.0, le=1.0,
        description="Keywords found in more than this fraction of the chunks are too common to link chunks.",
    )
    min_common_count: int = Field(
        default=20, ge=0, le=MAX_COUNT,
        description="...but a keyword is only ever 'too common' above this many chunks (small corpora; "
        "0 to 10^9).",
    )
    title_mentions: bool = Field(
        default=True,
        description="A chunk whose keywords name another document's title also shares that keyword "
        "with the other document's chunks (a hyperlink, in Wikipedia terms). Titles never link chunks "
        "of one document, as IIER argues; False: the paper's keyword edges only.",
    )
    block_size: int = Field(
        default=1024, ge=1, le=MAX_CANDIDATES,
        description="Most rows per block of the top-k similarity product (1 to 100,000; also capped "
        "at ~4M similarities per block, which bounds the build's memory).",
    )


class ChainSearchSettings(SettingsModel):
    """Settings of the evidence-chain search (IIER §3.2, §4.3) of
    [`ChunkGraphRetriever`][llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever]."""

    max_hops: int = Field(default=5, ge=1, le=MAX_TOP_K, description="Hops per chain after the seed (paper: path length 5; 1 to 1000).")
    max_nodes: int = Field(
        default=DEFAULT_SIMILARITY_TOP_K, ge=1, le=MAX_TOP_K,
        description="Budget: total nodes returned over all chains (by default the top k of a question; 1 to 1000).",
    )
    max_seeds: int = Field(default=5, ge=1, le=MAX_TOP_K, description="At most this many seeds (chains) per question (1 to 1000).")
    vector_seeds: int = Field(
        default=1, ge=0, le=MAX_TOP_K,
        description="Top vector hits added as seeds after the keyword seeds (paper: only when no "
        "keyword matches; 1 keeps the best dense hit even when keywords mislead; 0 to 1000).",
    )
    title_keywords_for_seeds: bool = Field(
        default=True,
        description="Seed matching also matches question keywords against chunk document titles "
        "(titles are excluded from keyword edges only, as the paper argues for graph density).",
    )
    max_candidates_per_keyword: int = Field(
        default=100, ge=1, le=MAX_CANDIDATES,
        description="Seed candidates per question keyword (1 to 100,000): a keyword in more chunks "
        "contributes only its chunks most similar to the question.",
    )
    merge_chains: bool = Field(default=False, description="Return each chain as one merged node.")
    fill_budget: bool = Field(
        default=True,
        description="When the chains end before max_nodes, fill the rest with the best vector hits "
        "not yet returned (each a one-node chain), so the budget is used as with vector top-k.",
    )


class ChainBudget(SettingsModel):
    """How the first retriever's ranking and the chain nodes share the top-k budget."""

    head_share: float = Field(
        default=DEFAULT_HEAD_SHARE,
        ge=0.0,
        le=1.0,
        description="Share of the top-k budget kept for the first retriever's best nodes "
        "(rounded up: 0.2 of 5 keeps 1, 0.4 keeps 2); chain nodes fill the rest of the k. 1.0: the first "
        "ranking's k nodes, then the chain nodes (appended only); 0.0: chain nodes first.",
    )
    top_k: Optional[int] = Field(
        default=None,
        ge=1,
        le=MAX_TOP_K,
        description="The budget k (1 to 1000); None: as many nodes as the first retriever returned.",
    )


_PARTS: Dict[str, Type[SettingsModel]] = {"graph": InteractionGraphSettings, "search": ChainSearchSettings, "budget": ChainBudget}


class ChunkGraphSettings(SettingsModel):
    """The pack's chunk-graph settings, one part per component that receives them.

    A flat mapping is accepted too (``{"max_hops": 3, "keyword_threshold": 2}``, the form saved
    by earlier releases): each key goes to the part that declares it; a key no part declares
    stays at the top and fails, named ``chunk_graph.<key>``.
    """

    graph: InteractionGraphSettings = Field(
        default_factory=InteractionGraphSettings,
        description="How the ChunkInteractionGraph links chunks (keyword_threshold, semantic_top_k, ...).",
    )
    search: ChainSearchSettings = Field(
        default_factory=ChainSearchSettings,
        description="The ChunkGraphRetriever's chain search (max_hops, max_nodes, max_seeds, ...).",
    )
    budget: ChainBudget = Field(
        default_factory=ChainBudget,
        description="How the multi-route nodes and the chain nodes share the top k (head_share).",
    )

    @model_validator(mode="before")
    @classmethod
    def _route_flat_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict) or set(data) <= set(_PARTS):
            return data
        routed: Dict[str, Any] = {}
        parts: Dict[str, Dict[str, Any]] = {}
        for key, value in data.items():
            if key in _PARTS:
                given = value.model_dump() if isinstance(value, BaseModel) else value
                parts.setdefault(key, {}).update(given if isinstance(given, dict) else {})
                if not isinstance(given, dict):
                    routed[key] = value  # let the part's own validation name the bad value
                continue
            owner = next((name for name, model in _PARTS.items() if key in model.model_fields), None)
            if owner is None:
                routed[key] = value  # extra="forbid" names it
            else:
                parts.setdefault(owner, {})[key] = value
        for name, values in parts.items():
            routed.setdefault(name, values)
        return routed
