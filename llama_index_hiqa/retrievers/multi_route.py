"""MultiRouteRetriever: HiQA's Multi-Route Retriever as a drop-in LlamaIndex retriever.

HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for
Multi-Documents QA" (Chen et al.), §Multi-Route Retriever) retrieves by three routes that
"gradually weaken in retrieving semantic-level information and enhance in retrieving
character-level information" and re-ranks with formula (2)::

    score = α·score_v + (1 − α)·score_r + β·log(1 + |C|)

* **vector** — any LlamaIndex retriever (so any vector store, local or remote), or one built
  from a ``VectorStoreIndex``;
* **bm25** — ``llama-index-retrievers-bm25``'s ``BM25Retriever`` over the embedding view
  (``MetadataMode.EMBED``, so the heading cascade is searchable), or bm25s with a tokenizer
  of your own; its zero-score padding is dropped;
* **keywords** — critical keywords (CNED, [`CriticalKeywordExtractor`][llama_index_hiqa.transforms.critical_keywords.CriticalKeywordExtractor])
  of the query matched against each node's keyword set through an inverted index; ``|C|`` is
  the number of the query's keywords a node holds.

Fusion modes: ``"hiqa"`` (formula 2, see [`fusion`][llama_index_hiqa.retrievers.fusion] for the
normalisation and ``beta="auto"``), ``"rrf"`` (weighted reciprocal rank fusion, k = 60, seed
hybrid paper §III.B), ``"relative_score"`` and ``"dist_based_score"`` (as LlamaIndex defines
them). Each returned node carries ``metadata[schema.ROUTE_SCORES]`` =
``{"vector": .., "bm25": .., "keywords": |C|, "fused": ..}`` (raw route scores, ``None`` where
a route did not return the node), hidden from the embedding and LLM views.

With ``expert_vocabulary`` (HiQA's expert keywords as data, [`vocabularies`][llama_index_hiqa.vocabularies])
the question is expanded once, here, before any route is asked, so every store's routes get it:
the terms of the concepts it names are appended to the bundle's ``query_str`` (what BM25
searches) and to the question's critical keywords, while its embedding strings stay the
question alone (LlamaIndex's ``QueryBundle`` convention, as a HyDE transform keeps them apart).
Each returned node's ``ROUTE_SCORES["vocabulary"]`` says which concepts added which terms.
With ``vocabulary_scope="documents"`` (the default) the expansion scores nodes inside the
documents a question is about (``scores_within``: the document focus) and leaves the ranking
over the whole collection, which chooses the document, to the question's own words; with
``"collection"`` it applies there too.

A route that raises is logged in one WARNING line naming it and the cause (its traceback at
DEBUG) and skipped; the others still answer. What
failed travels with that query alone: ``ROUTE_SCORES["failed"]`` of each returned node lists
the failed routes, and a [`RouteFailedEvent`][llama_index_hiqa.events.RouteFailedEvent] per failure and a
[`MultiRouteRetrievalEndEvent`][llama_index_hiqa.events.MultiRouteRetrievalEndEvent] per query go through
LlamaIndex's instrumentation dispatcher, so concurrent queries on one shared retriever never
see each other's failures. Only when every route fails does retrieval raise
[`RetrievalRouteError`][llama_index_hiqa.errors.RetrievalRouteError].
"""

from __future__ import annotations

import asyncio
import copy
import logging
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import llama_index.core.instrumentation as instrument
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.indices.vector_store.base import VectorStoreIndex
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.storage.docstore.types import BaseDocumentStore

from llama_index_hiqa import schema
from llama_index_hiqa.errors import RetrievalRouteError, UnknownNodeError
from llama_index_hiqa.events import MultiRouteRetrievalEndEvent
from llama_index_hiqa.indexes.keyword_index import KeywordIndex, normalize_keyword
from llama_index_hiqa.questions import CleanQuestions, question_bundle
from llama_index_hiqa.retrievers import fusion, route_parts, table_places, title_match
from llama_index_hiqa.retrievers.bm25_route import BM25Route
from llama_index_hiqa.retrievers.node_collection import NodeCollection
from llama_index_hiqa.retrievers.route_parts import RouteParts
from llama_index_hiqa.retrievers.routes import QuestionKeywords, RouteScores, RouteSet
from llama_index_hiqa.retrievers.settings import BM25, KEYWORDS, VECTOR, MultiRouteSettings
from llama_index_hiqa.settings import updated
from llama_index_hiqa.storage.vector_store_access import index_nodes, one_node_source
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor
from llama_index_hiqa.vocabularies import ExpertVocabulary, VocabularyExpansion, load_vocabulary

__all__ = ["MultiRouteRetriever", "MultiRouteSettings", "Ranking"]

logger = logging.getLogger(__name__)
dispatcher = instrument.get_dispatcher(__name__)


# Where each result says what the expert vocabulary added to its question.
VOCABULARY = "vocabulary"


class Ranking(NamedTuple):
    """One question's fused results and the keywords the keyword route matched (``None`` when
    that route was off or failed): what the document focus builds on, so the question's
    keywords are extracted once; ``expansion`` is what the expert vocabulary added to the
    question (``None``: no vocabulary, or it named no concept); ``figure_demand`` is how much
    the question asks for figures ([`figure_demand`][llama_index_hiqa.retrievers.table_places.figure_demand],
    ``None``: not graded), read once for the table places and the focus's table bonus."""

    results: List[NodeWithScore]
    keywords: Optional[QuestionKeywords]
    expansion: Optional[VocabularyExpansion] = None
    figure_demand: Optional[float] = None


class MultiRouteRetriever(CleanQuestions, BaseRetriever):
    """Vector + BM25 + critical-keyword retrieval fused by HiQA's formula or rank fusion.

    Put it where your vector retriever was::

        retriever = MultiRouteRetriever.from_index(index, similarity_top_k=5)
        nodes = retriever.retrieve("OPT3004 ambient light sensor supply current")

    ``nodes`` (or ``docstore``) are the indexed nodes, needed by the BM25 and keyword routes;
    ``from_index`` takes them from the index's docstore. With a ``docstore`` the retriever keeps
    only the node ids and reads result nodes from the docstore. Nodes without
    ``schema.CRITICAL_KEYWORDS`` get them from ``keyword_extractor`` at construction.

    It composes a collection and three route objects (``route_parts``: built from the nodes,
    or a store's, as the embedded store and PostgreSQL give them) and ranks their scores with
    [`fuse_routes`][llama_index_hiqa.retrievers.fusion.fuse_routes]. Besides ``retrieve`` it
    answers what the document focus and the evaluation ask: one document's nodes and every
    route's scores of them, every node ranked (``full_ranking``), the routes' scores apart from
    their fusion (``route_scores``, ``fuse``).

    Args:
        vector_retriever: the vector route's retriever (any LlamaIndex retriever), or ``None``.
        nodes: the indexed nodes (default: every node of ``docstore``).
        docstore: the docstore holding the nodes (result nodes are then read from it by id).
        keyword_extractor: extracts the question's keywords and fills nodes without them.
        keyword_index: a prebuilt keyword index of the nodes.
        bm25_tokenizer: a custom BM25 tokenizer (text -> tokens).
        config: the settings ([`MultiRouteSettings`][llama_index_hiqa.retrievers.settings.MultiRouteSettings]).
        callback_manager: LlamaIndex's callback manager.
        verbose: LlamaIndex's verbose flag.
        bm25_route: a prebuilt BM25 route of the nodes.
        route_parts: the collection and routes, already built (a store's); the node arguments
            are then unused.
        **settings: [`MultiRouteSettings`][llama_index_hiqa.retrievers.settings.MultiRouteSettings] fields (validated).
    """

    def __init__(
        self,
        vector_retriever: Optional[BaseRetriever] = None,
        nodes: Optional[Sequence[BaseNode]] = None,
        docstore: Optional[BaseDocumentStore] = None,
        keyword_extractor: Optional[CriticalKeywordExtractor] = None,
        keyword_index: Optional[KeywordIndex] = None,
        bm25_tokenizer: Optional[Callable[[str], List[str]]] = None,
        config: Optional[MultiRouteSettings] = None,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        bm25_route: Optional[BM25Route] = None,
        route_parts: Optional[RouteParts] = None,
        **settings: Any,
    ) -> None:
        # Settings may come as a config object and/or keyword arguments (validated either way).
        self.config: MultiRouteSettings = updated(config, settings, model_class=MultiRouteSettings)
        self.keyword_extractor = keyword_extractor or CriticalKeywordExtractor()
        self._parts = route_parts or RouteParts.from_nodes(
            self.config, self.keyword_extractor, vector_retriever, nodes, docstore, keyword_index, bm25_route,
            bm25_tokenizer,
        )
        self._document_title_keywords: Optional[Dict[str, frozenset[str]]] = None
        self._beta_value = self._resolve_beta()
        self._vocabulary = self._load_vocabulary()
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_index(
        cls, index: VectorStoreIndex, nodes: Optional[Sequence[BaseNode]] = None, **kwargs: Any
    ) -> "MultiRouteRetriever":
        """Vector route from ``index.as_retriever``; BM25/keywords over every node of the index.

        Args:
            index: the vector index.
            nodes: the indexed nodes; default: ``docstore`` when given, else the index's docstore,
                else the nodes listed from a vector store that keeps the text (Chroma, Qdrant, ...).
            **kwargs: [`MultiRouteSettings`][llama_index_hiqa.retrievers.settings.MultiRouteSettings] settings and constructor arguments.

        Returns:
            The retriever.
        """
        config = kwargs.pop("config", None) or MultiRouteSettings()
        updates = {k: kwargs.pop(k) for k in list(kwargs) if k in MultiRouteSettings.model_fields}
        config = updated(config, updates)
        vector = index.as_retriever(similarity_top_k=config.candidates_per_route)
        docstore = kwargs.pop("docstore", None)
        if nodes is None:  # result nodes are then read by id from the docstore that holds them
            nodes, docstore = index_nodes(index, "MultiRouteRetriever", docstore=docstore)
        return cls(vector_retriever=vector, nodes=nodes, docstore=docstore, config=config, **kwargs)

    @classmethod
    def from_defaults(
        cls,
        index: Optional[VectorStoreIndex] = None,
        nodes: Optional[Sequence[BaseNode]] = None,
        docstore: Optional[BaseDocumentStore] = None,
        vector_retriever: Optional[BaseRetriever] = None,
        similarity_top_k: Optional[int] = None,
        **kwargs: Any,
    ) -> "MultiRouteRetriever":
        """LlamaIndex's ``from_defaults`` shape (as ``BM25Retriever.from_defaults``): exactly one
        of ``index``, ``nodes`` or ``docstore``.

        With ``index`` it is [`from_index`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever.from_index]; with ``nodes`` or ``docstore`` the BM25 and
        keyword routes run over them and the vector route is ``vector_retriever`` (off when
        ``None``).

        Args:
            index: a ``VectorStoreIndex`` (any vector store).
            nodes: the nodes to retrieve from.
            docstore: a docstore holding them (result nodes are read from it by id).
            vector_retriever: the vector route for ``nodes`` / ``docstore``.
            similarity_top_k: nodes returned per query (default [`MultiRouteSettings`][llama_index_hiqa.retrievers.settings.MultiRouteSettings]'s).
            **kwargs: other [`MultiRouteSettings`][llama_index_hiqa.retrievers.settings.MultiRouteSettings] settings and constructor arguments.

        Returns:
            The retriever.

        Raises:
            InvalidSettingError: not exactly one of ``index``, ``nodes``, ``docstore``.
        """
        one_node_source("MultiRouteRetriever.from_defaults", index, nodes, docstore)
        if similarity_top_k is not None:
            kwargs["similarity_top_k"] = similarity_top_k
        if index is not None:
            return cls.from_index(index, **kwargs)
        return cls(vector_retriever=vector_retriever, nodes=nodes, docstore=docstore, **kwargs)

    def with_settings(self, **settings: Any) -> "MultiRouteRetriever":
        """The same indexes under other settings (``similarity_top_k``, ``mode``, ``alpha``, ...):
        nothing is re-indexed unless a route that was off is switched on.

        Args:
            **settings: [`MultiRouteSettings`][llama_index_hiqa.retrievers.settings.MultiRouteSettings] fields.

        Returns:
            A new retriever sharing this one's indexes.
        """
        clone = copy.copy(self)
        clone.config = updated(self.config, settings)
        clone._parts = self._parts.with_config(self.config, clone.config)
        clone._beta_value = clone._resolve_beta()
        clone._vocabulary = clone._load_vocabulary()
        return clone

    # -- what the retriever holds ------------------------------------------------------------
    @property
    def collection(self) -> NodeCollection:
        """The retriever's nodes ([`NodeCollection`][llama_index_hiqa.retrievers.node_collection.NodeCollection])."""
        return self._parts.collection

    @property
    def keyword_index(self) -> KeywordIndex:
        """The keyword route's index (node id -> its critical keywords)."""
        return self._parts.keywords.index

    @property
    def bm25_route(self) -> Optional[BM25Route]:
        """The BM25 route (``None`` when it was not built or is a database's)."""
        return self._parts.bm25 if isinstance(self._parts.bm25, BM25Route) else None

    @property
    def bm25_node_ids(self) -> Optional[List[str]]:
        """The node ids the BM25 index scores (``None`` when the route is off)."""
        bm25 = self.bm25_route
        return None if bm25 is None else list(bm25.node_ids)

    @property
    def vector_retriever(self) -> Optional[BaseRetriever]:
        """The vector route's retriever (``None`` when the route is off)."""
        return None if self._parts.vector is None else self._parts.vector.retriever

    def route_set(self) -> RouteSet:
        """The routes this retriever asks under its settings (``RouteParts.route_set``)."""
        return self._parts.route_set(self.config)

    # -- one document's nodes (the document focus) ---------------------------------------------
    def nodes_by_id(self, node_ids: Sequence[str]) -> Dict[str, BaseNode]:
        """The indexed nodes of ``node_ids`` (unknown ids left out).

        Args:
            node_ids: the ids.

        Returns:
            ``{node id: node}``.
        """
        return self._parts.collection.nodes_by_id(node_ids)

    def document_node_ids(self, document_id: str) -> List[str]:
        """The ids of every indexed node of ``document_id`` (``schema.get_document_id``).

        Args:
            document_id: the document.

        Returns:
            Its node ids.
        """
        return self._parts.collection.document_node_ids(document_id)

    def scores_within(
        self, query: Union[str, QueryBundle], node_ids: Sequence[str], skip: Sequence[str] = (),
        keywords: Optional[QuestionKeywords] = None,
    ) -> Dict[str, Dict[str, float]]:
        """Each route's scores of exactly ``node_ids`` for ``query`` (not only of the routes'
        collection-wide candidates).

        Args:
            query: the question.
            node_ids: the nodes to score (e.g. one document's).
            skip: routes not to ask (they failed on this question already).
            keywords: the question's keywords when already extracted (``Ranking.keywords``).

        Returns:
            ``{"vector": {id: cosine}, "bm25": {id: score}, "keywords": {id: |C|}}``.
        """
        bundle, expansion = self.expand(query)
        keywords = self._expanded_keywords(question_bundle(query), expansion, keywords)
        return self.route_set().scores_within(bundle, node_ids, skip, keywords)

    # -- title matching (retrievers/title_match.py) -------------------------------------------
    def title_keywords_of(self, titles: Sequence[str]) -> Dict[str, frozenset[str]]:
        """Each title -> its normalised keywords, from one extraction over ``titles``.

        Args:
            titles: document titles (each once).

        Returns:
            ``{title: keywords}`` (``title_match.title_keyword_sets``).
        """
        return title_match.title_keyword_sets(self.keyword_extractor, titles)

    def document_names(self) -> Mapping[str, Tuple[Tuple[str, ...], ...]]:
        """The collection's document names a question may abbreviate (name keyword -> the
        words that spell it in the titles, ``title_match.document_names``)."""
        return self._parts.keywords.document_names()

    def document_titles(self) -> Dict[str, str]:
        """Document id -> its title, for every indexed document; ``{}`` for a retriever that
        does not hold its nodes."""
        return dict(self._parts.collection.document_titles)

    def document_title_keywords(self) -> Dict[str, frozenset[str]]:
        """Document id -> the normalised keywords of its title, for every indexed document
        (one extraction over the titles, at the first call); ``{}`` for a retriever that does
        not hold its nodes."""
        if self._document_title_keywords is None:
            titles = self._parts.collection.document_titles
            by_title = self.title_keywords_of(list(dict.fromkeys(titles.values()))) if titles else {}
            self._document_title_keywords = {doc: by_title[title] for doc, title in titles.items()}
        return self._document_title_keywords

    def question_keywords(self, query: Union[str, QueryBundle]) -> QuestionKeywords:
        """The question's keywords as the keyword route matches them (the document names it
        abbreviates included), extracted now.

        Args:
            query: the question.

        Returns:
            The keywords and their normalised forms, once each.
        """
        return self._parts.keywords.question_keywords(question_bundle(query))

    # -- the expert vocabulary (the question side) -------------------------------------------------
    def _load_vocabulary(self) -> Optional[ExpertVocabulary]:
        name = self.config.expert_vocabulary
        return None if name is None else load_vocabulary(name)

    @property
    def vocabulary(self) -> Optional[ExpertVocabulary]:
        """The expert vocabulary applied to questions (``expert_vocabulary``), or ``None``."""
        return self._vocabulary

    def expand(self, query: Union[str, QueryBundle]) -> Tuple[QueryBundle, Optional[VocabularyExpansion]]:
        """The question as the lexical routes search it: the terms of the concepts it names
        appended to ``query_str``, its embedding strings (and embedding) kept the question's.

        Args:
            query: the question.

        Returns:
            ``(bundle, expansion)``: the bundle unchanged and ``None`` when there is no
                vocabulary or the question names none of its concepts.
        """
        bundle = question_bundle(query)
        if self._vocabulary is None:
            return bundle, None
        expansion = self._vocabulary.expand(bundle.query_str or "")
        if not expansion:
            return bundle, None
        expanded = QueryBundle(
            expansion.text(), image_path=bundle.image_path, custom_embedding_strs=bundle.embedding_strs,
            embedding=bundle.embedding,
        )
        return expanded, expansion

    def _collection_wide(
        self, query: Union[str, QueryBundle]
    ) -> Tuple[QueryBundle, Optional[VocabularyExpansion], Optional[VocabularyExpansion]]:
        """``(bundle, applied, expansion)`` for a ranking over the whole collection: the
        expansion is applied there only with ``vocabulary_scope="collection"``; it is returned
        either way, for the document focus."""
        bundle, expansion = self.expand(query)
        if self.config.vocabulary_scope == "collection":
            return bundle, expansion, expansion
        return question_bundle(query), None, expansion

    def _expanded_keywords(
        self, query: QueryBundle, expansion: Optional[VocabularyExpansion], keywords: Optional[QuestionKeywords]
    ) -> Optional[QuestionKeywords]:
        """The question's own keywords (extracted from the question, not from its expansion,
        whose words would read as entities) plus the expansion's terms, once each."""
        if expansion is None or keywords is not None or not self.config.use_keywords or self._parts.keywords is None:
            return keywords
        own = self._parts.keywords.question_keywords(query)
        added = [(t, normalize_keyword(t)) for t in expansion.terms]
        added = [(t, n) for t, n in added if n and n not in own.normalized]
        return QuestionKeywords(own.keywords + [t for t, _ in added], own.normalized + [n for _, n in added])

    # -- β --------------------------------------------------------------------------------------
    def _resolve_beta(self) -> float:
        beta = self.config.beta
        if beta != "auto":
            return float(beta)
        n_docs, avg_pages = self.collection_shape()
        return fusion.auto_beta(n_docs, avg_pages, self.config.beta_min, self.config.beta_max)

    def collection_shape(self) -> Tuple[int, float]:
        """``(|D|, average pages per document)`` of the indexed nodes (``NodeCollection.shape``)."""
        return self._parts.collection.shape()

    @property
    def beta(self) -> float:
        """The β in use (``beta="auto"`` resolved for this collection)."""
        return self._beta_value

    # -- fusion and results ----------------------------------------------------------------------
    def fuse_scores(
        self, vector: Mapping[str, float], bm25: Mapping[str, float], counts: Mapping[str, float],
        top_k: Optional[int] = None, candidates: Optional[Sequence[str]] = None,
    ) -> List[Tuple[str, float]]:
        """The routes' scores ranked under this retriever's settings (``fusion.fuse_routes``).

        Args:
            vector: ``{node id: cosine}``.
            bm25: ``{node id: BM25 score}``.
            counts: ``{node id: |C|}``.
            top_k: how many to return (``None``: every candidate).
            candidates: the ids to rank (default: the routes' candidates).

        Returns:
            ``[(node id, fused score), ...]``, best first.
        """
        c = self.config
        route_weights = {str(route): weight for route, weight in c.route_weights.items()}
        return fusion.fuse_routes(
            vector, bm25, counts, mode=c.mode, alpha=c.alpha, beta=self._beta_value, route_weights=route_weights,
            rrf_k=c.rrf_k, candidates_per_route=c.candidates_per_route, top_k=top_k, candidates=candidates,
        )

    def spread_tables(
        self, question: str, fused: List[Tuple[str, float]], known_nodes: Optional[Mapping[str, BaseNode]] = None,
        demand: Optional[float] = None,
    ) -> List[Tuple[str, float]]:
        """``fused`` with at most one table part of a page in its first ``table_places`` places,
        unless the question asks for figures ([`table_places`][llama_index_hiqa.retrievers.table_places]).

        Only the first ``4 × table_places`` ids are read (their kind and page): a page with
        more parts than that among them keeps the rest where they were.

        Args:
            question: the question's text (as asked, not expanded).
            fused: ``(node id, score)`` pairs, best first.
            known_nodes: nodes already at hand (the others are read by `nodes_by_id`).
            demand: the question's ``figure_demand`` when already graded (``None``: graded here).

        Returns:
            The pairs, reordered.
        """
        places = self.config.table_places
        if not places or not fused or table_places.asks_for_figures(question, demand):
            return fused
        window = [node_id for node_id, _ in fused[: 4 * places]]
        known = known_nodes or {}
        missing = [node_id for node_id in window if node_id not in known]
        nodes = {**known, **self.nodes_by_id(missing)} if missing else known
        page_of: Dict[str, Any] = {}
        tables = set()
        for node_id in window:
            node = nodes.get(node_id)
            if node is None or schema.get_segment_kind(node) != schema.KIND_TABLE:
                continue
            pages = schema.get_page_range(node)
            tables.add(node_id)
            page_of[node_id] = None if pages is None else (schema.get_document_id(node), pages[0])
        return table_places.spread_table_parts(fused, page_of, tables, places)

    def results_for(
        self,
        ranked: Sequence[Tuple[str, float]],
        route_scores: Mapping[str, Mapping[str, Any]],
        known_nodes: Optional[Mapping[str, BaseNode]] = None,
    ) -> List[NodeWithScore]:
        """``(node_id, score)`` pairs as results: copies of the nodes with their
        ``route_scores`` (and the score as ``"fused"``) in ``metadata["route_scores"]``.

        Args:
            ranked: ``[(node id, score), ...]`` in result order.
            route_scores: node id -> its route scores.
            known_nodes: nodes already at hand (the others are read by `nodes_by_id`).

        Returns:
            The results (``route_parts.node_results``).
        """
        known_nodes = known_nodes or {}
        missing = [node_id for node_id, _ in ranked if node_id not in known_nodes]
        found = {**self.nodes_by_id(missing), **known_nodes} if missing else known_nodes
        return route_parts.node_results(ranked, route_scores, found)

    def _finish(
        self, query: str, scores: Dict[str, RouteScores], errors: Dict[str, BaseException],
        applied: Optional[VocabularyExpansion] = None, expansion: Optional[VocabularyExpansion] = None,
    ) -> Ranking:
        enabled = self.route_set().enabled()
        if enabled and all(route in errors for route in enabled):
            raise RetrievalRouteError(dict(errors))
        vector, bm25, counts = scores[VECTOR], scores[BM25], scores[KEYWORDS]
        demand = table_places.figure_demand(query)
        fused = self.spread_tables(
            query, self.fuse_scores(vector, bm25, counts, self.config.similarity_top_k), vector.nodes, demand
        )
        per_node = {
            node_id: {VECTOR: vector.get(node_id), BM25: bm25.get(node_id), KEYWORDS: float(counts.get(node_id, 0.0))}
            for node_id, _ in fused
        }
        results = self.results_for(fused, per_node, vector.nodes)
        for hit in results:
            if errors:
                hit.node.metadata[schema.ROUTE_SCORES]["failed"] = sorted(errors)
            if applied is not None:
                hit.node.metadata[schema.ROUTE_SCORES][VOCABULARY] = applied.explained()
        dispatcher.event(
            MultiRouteRetrievalEndEvent(
                query=query, candidates={VECTOR: len(vector), BM25: len(bm25), KEYWORDS: len(counts)},
                failed_routes=sorted(errors), returned=len(results), beta=self._beta_value,
            )
        )
        return Ranking(results, counts.keywords, expansion, demand)

    # -- retrieval ---------------------------------------------------------------------------
    def rank(self, query: QueryBundle, keywords: Optional[QuestionKeywords] = None) -> Ranking:
        """The routes side by side (``RouteSet.ask``), fused: what ``retrieve`` returns, with
        the question's keywords as the keyword route matched them.

        Args:
            query: the question (clean: ``retrieve`` passes it through ``question_bundle``).
            keywords: the question's keywords when already extracted.

        Returns:
            The [`Ranking`][llama_index_hiqa.retrievers.multi_route.Ranking].
        """
        text = query.query_str or ""
        if not text.strip():
            return Ranking([], None)  # nothing to rank by: documented fallback, no route is asked
        errors: Dict[str, BaseException] = {}  # this query's alone
        bundle, applied, expansion = self._collection_wide(query)
        keywords = self._expanded_keywords(query, applied, keywords)
        scores = self.route_set().ask(bundle, self.config.candidates_per_route, errors, keywords=keywords)
        return self._finish(text, scores, errors, applied, expansion)

    async def arank(self, query: QueryBundle, keywords: Optional[QuestionKeywords] = None) -> Ranking:
        """[`rank`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever.rank] with the routes
        asked concurrently (``RouteSet.aask``); the results' nodes are read off the event loop (a
        store may read them from its database).

        Args:
            query: the question.
            keywords: the question's keywords when already extracted.

        Returns:
            The [`Ranking`][llama_index_hiqa.retrievers.multi_route.Ranking].
        """
        text = query.query_str or ""
        if not text.strip():
            return Ranking([], None)
        errors: Dict[str, BaseException] = {}  # this query's alone
        bundle, applied, expansion = self._collection_wide(query)
        if applied is not None and keywords is None:  # the question's NER runs off the event loop
            keywords = await asyncio.to_thread(self._expanded_keywords, query, applied, keywords)
        scores = await self.route_set().aask(bundle, self.config.candidates_per_route, errors, keywords)
        return await asyncio.to_thread(self._finish, text, scores, errors, applied, expansion)

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return self.rank(query_bundle).results

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return (await self.arank(query_bundle)).results

    # -- the evaluation: every node ranked, the routes apart from their fusion -------------------
    def route_scores(self, query: Union[str, QueryBundle]) -> Dict[str, Dict[str, float]]:
        """Each route's candidates for ``query`` before fusion; [`fuse`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever.fuse] ranks them.

        Args:
            query: the question.

        Returns:
            ``{"vector": {id: cosine}, "bm25": {id: score}, "keywords": {id: |C|}}`` (``|C|``
                with this retriever's title weight).
        """
        bundle, applied, _ = self._collection_wide(query)
        keywords = self._expanded_keywords(question_bundle(query), applied, None)
        scores = self.route_set().ask(bundle, self.config.candidates_per_route, {}, concurrent=False, keywords=keywords)
        return {name: dict(scores[name]) for name in (VECTOR, BM25, KEYWORDS)}

    def fuse(self, scores: Mapping[str, Mapping[str, float]], top_k: Optional[int] = None) -> List[str]:
        """Node ids ranked by this retriever's fusion of [`route_scores`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever.route_scores] output
        (re-fused under other settings without asking the routes again).

        Args:
            scores: what [`route_scores`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever.route_scores] returned.
            top_k: how many (``None``: every candidate).

        Returns:
            Node ids, best first.
        """
        fused = self.fuse_scores(dict(scores[VECTOR]), dict(scores[BM25]), dict(scores[KEYWORDS]), top_k)
        return [node_id for node_id, _ in fused]

    def full_ranking(self, query: Union[str, QueryBundle], keywords: Optional[QuestionKeywords] = None) -> List[str]:
        """Every node id of the collection, best first, in two stages as retrieval itself works
        (the Log-Rank Index of HiQA, §Evaluation, needs the rank of every unit): first the fused
        candidates exactly as ``retrieve`` orders them (so ``full_ranking(q)[:top_k]`` is what
        ``retrieve`` returns), then every other node, fused over the whole collection (each
        route asked for all nodes; the vector route through its ``similarity_top_k``).

        Args:
            query: the question.
            keywords: the question's keywords when already extracted.

        Returns:
            Every indexed node id once.

        Raises:
            ValueError: the retriever holds no nodes.
            NotImplementedError: the routes are a database's that cannot rank every node
                (``RouteParts.ranks_every_node``; PostgreSQL).
        """
        if not self._parts.ranks_every_node:
            raise NotImplementedError(
                "full_ranking ranks every node of the collection; on the PostgreSQL store use retrieve() "
                "with a larger similarity_top_k"
            )
        question = question_bundle(query)
        nodes = self._parts.collection.nodes
        if not nodes:
            raise ValueError("full_ranking needs the retriever's nodes (pass nodes or a docstore)")
        if not (question.query_str or "").strip():
            return list(nodes)
        bundle, applied, _ = self._collection_wide(question)
        keywords = self._expanded_keywords(question, applied, keywords)
        q = bundle.query_str or ""
        errors: Dict[str, BaseException] = {}
        routes = self.route_set()
        scores = routes.ask(bundle, self.config.candidates_per_route, errors, concurrent=False, keywords=keywords)
        counts = scores[KEYWORDS]
        first = [node_id for node_id, _ in self.spread_tables(
            question.query_str or "", self.fuse_scores(scores[VECTOR], scores[BM25], counts), scores[VECTOR].nodes)]
        seen = set(first)
        rest = [node_id for node_id in nodes if node_id not in seen]
        if not rest:
            return first
        vector_route = routes.routes[VECTOR]
        all_vector: Mapping[str, float] = (
            RouteSet.guarded(VECTOR, lambda: vector_route.scores(bundle, len(nodes)), errors, q, RouteScores())
            if vector_route is not None else RouteScores()
        )
        all_bm25: Dict[str, float] = {}
        bm25 = self.bm25_route
        if bm25 is not None and self.config.use_bm25:
            found = RouteSet.guarded(BM25, lambda: bm25.all_scores(q), errors, q, None)
            if found is not None:
                all_bm25 = {i: float(s) for i, s in zip(bm25.node_ids, found) if s > 0}
        tail = self.fuse_scores(all_vector, all_bm25, counts, candidates=rest)
        return first + [node_id for node_id, _ in tail]

    def rank_of(self, query: Union[str, QueryBundle], node_ids: Sequence[str]) -> Dict[str, int]:
        """The 1-based rank of each of ``node_ids`` in [`full_ranking`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever.full_ranking].

        Args:
            query: the question.
            node_ids: indexed node ids.

        Returns:
            ``{node id: rank}``.

        Raises:
            UnknownNodeError: an id is not indexed.
        """
        nodes = self._parts.collection.nodes
        unknown = [i for i in node_ids if i not in nodes]
        if unknown:
            raise UnknownNodeError(f"unknown node id(s): {unknown[:5]}")
        position = {node_id: rank for rank, node_id in enumerate(self.full_ranking(query), start=1)}
        return {node_id: position[node_id] for node_id in node_ids}

    # -- persistence ---------------------------------------------------------------------------
    def persist(self, persist_dir: Union[str, Path]) -> None:
        """Write the BM25 and keyword indexes and the settings (keyed by docstore node ids).

        The vector store and docstore persist with your index as usual
        (``index.storage_context.persist``); the custom BM25 tokenizer, if any, is code and is
        passed again to [`from_persist_dir`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever.from_persist_dir].

        Args:
            persist_dir: the folder (created when missing).

        Raises:
            NotImplementedError: the routes are a database's, saved by every write
                (``RouteParts.persists_to_folder``; PostgreSQL).
        """
        if not self._parts.persists_to_folder:
            raise NotImplementedError("the PostgreSQL routes are saved by every write; there is nothing to persist")
        route_parts.persist_indexes(
            persist_dir, self.bm25_route, self.keyword_index, self.config, self.keyword_extractor,
            custom_tokenizer=self._parts.bm25_tokenizer is not None,
        )

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: Union[str, Path],
        vector_retriever: Optional[BaseRetriever] = None,
        nodes: Optional[Sequence[BaseNode]] = None,
        docstore: Optional[BaseDocumentStore] = None,
        index: Optional[VectorStoreIndex] = None,
        bm25_tokenizer: Optional[Callable[[str], List[str]]] = None,
        **kwargs: Any,
    ) -> "MultiRouteRetriever":
        """Load what [`persist`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever.persist] wrote; nodes come from ``nodes``, ``docstore`` or ``index``.

        Args:
            persist_dir: the folder [`persist`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever.persist] wrote.
            vector_retriever: the vector route's retriever (default: ``index.as_retriever``).
            nodes: the indexed nodes.
            docstore: the docstore holding them.
            index: the vector index (its retriever and docstore).
            bm25_tokenizer: the custom tokenizer the BM25 index was built with, if any.
            **kwargs: settings overriding the saved ones, and constructor arguments.

        Returns:
            The retriever.

        Raises:
            UnknownNodeError: the persisted indexes name node ids the given nodes do not hold.
            ValueError: the index was built with a custom tokenizer and none is given.
        """
        return cls(**route_parts.load_arguments(
            MultiRouteSettings, persist_dir, vector_retriever, nodes, docstore, index, bm25_tokenizer, kwargs
        ))

