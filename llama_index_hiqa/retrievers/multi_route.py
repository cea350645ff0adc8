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
* **keywords** — critical keywords (CNED, :class:`~llama_index_hiqa.CriticalKeywordExtractor`)
  of the query matched against each node's keyword set through an inverted index; ``|C|`` is
  the number of the query's keywords a node holds.

Fusion modes: ``"hiqa"`` (formula 2, see :mod:`~llama_index_hiqa.retrievers.fusion` for the
normalisation and ``beta="auto"``), ``"rrf"`` (weighted reciprocal rank fusion, k = 60, seed
hybrid paper §III.B), ``"relative_score"`` and ``"dist_based_score"`` (as LlamaIndex defines
them). Each returned node carries ``metadata[schema.ROUTE_SCORES]`` =
``{"vector": .., "bm25": .., "keywords": |C|, "fused": ..}`` (raw route scores, ``None`` where
a route did not return the node), hidden from the embedding and LLM views.

A route that raises is logged (with its traceback) and skipped; the others still answer. What
failed travels with that query alone: ``ROUTE_SCORES["failed"]`` of each returned node lists
the failed routes, and a :class:`~llama_index_hiqa.events.RouteFailedEvent` per failure and a
:class:`~llama_index_hiqa.events.MultiRouteRetrievalEndEvent` per query go through
LlamaIndex's instrumentation dispatcher, so concurrent queries on one shared retriever never
see each other's failures. Only when every route fails does retrieval raise
:class:`~llama_index_hiqa.errors.RetrievalRouteError`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import llama_index.core.instrumentation as instrument
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.indices.vector_store.base import VectorStoreIndex
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.storage.docstore.types import BaseDocumentStore

from llama_index_hiqa import schema
from llama_index_hiqa.vector_store_access import index_nodes
from llama_index_hiqa.retrievers.store_vectors import collect, cosine_scale, scores_of_nodes, with_top_k
from llama_index_hiqa.events import MultiRouteRetrievalEndEvent, RouteFailedEvent
from llama_index_hiqa.errors import RetrievalRouteError, UnknownNodeError
from llama_index_hiqa.retrievers import fusion, title_match
from llama_index_hiqa.retrievers.bm25_route import BM25Route as _BM25Route
from llama_index_hiqa.retrievers.settings import (  # noqa: F401 (re-exported: they were defined here)
    BM25, KEYWORDS, ROUTES, VECTOR, FusionMode, MultiRouteConfig,
)
from llama_index_hiqa.settings import updated
from llama_index_hiqa.indexes.keyword_index import KeywordIndex, normalize_keyword
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

logger = logging.getLogger(__name__)
dispatcher = instrument.get_dispatcher(__name__)

CONFIG_FILENAME = "multi_route.json"
BM25_DIRNAME = "bm25"


def _collection_shape(nodes: Sequence[BaseNode]) -> Tuple[int, float]:
    pages: Dict[str, int] = {}
    counts: Dict[str, int] = {}
    for node in nodes:
        doc = schema.get_document_id(node) or node.node_id
        counts[doc] = counts.get(doc, 0) + 1
        page_range = schema.get_page_range(node)
        if page_range is not None:
            pages[doc] = max(pages.get(doc, 0), page_range[1] + 1)
    if not counts:
        return 0, 1.0
    per_doc = [pages.get(doc, counts[doc]) for doc in counts]
    return len(counts), sum(per_doc) / len(per_doc)


class _DocstoreNodes(Mapping):
    """The retriever's nodes, read from the docstore by id when a result needs one: the ids
    stay in memory, the nodes stay where LlamaIndex keeps them (no second copy of the
    collection in the retriever)."""

    def __init__(self, docstore: BaseDocumentStore, node_ids: Sequence[str]) -> None:
        self._docstore = docstore
        self._ids = dict.fromkeys(node_ids)

    def __getitem__(self, node_id: str) -> BaseNode:
        if node_id not in self._ids:
            raise KeyError(node_id)
        return self._docstore.get_node(node_id)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._ids

    def __iter__(self):
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


class MultiRouteRetriever(BaseRetriever):
    """Vector + BM25 + critical-keyword retrieval fused by HiQA's formula or rank fusion.

    Put it where your vector retriever was::

        retriever = MultiRouteRetriever.from_index(index, similarity_top_k=5)
        nodes = retriever.retrieve("OPT3004 ambient light sensor supply current")

    ``nodes`` (or ``docstore``) are the indexed nodes, needed by the BM25 and keyword routes;
    ``from_index`` takes them from the index's docstore. With a ``docstore`` the retriever
    keeps only the node ids after construction and reads result nodes from the docstore. Nodes without
    ``schema.CRITICAL_KEYWORDS`` get them from ``keyword_extractor`` at construction.
    """

    def __init__(
        self,
        vector_retriever: Optional[BaseRetriever] = None,
        nodes: Optional[Sequence[BaseNode]] = None,
        docstore: Optional[BaseDocumentStore] = None,
        keyword_extractor: Optional[CriticalKeywordExtractor] = None,
        keyword_index: Optional[KeywordIndex] = None,
        bm25_tokenizer: Optional[Callable[[str], List[str]]] = None,
        config: Optional[MultiRouteConfig] = None,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        _bm25_route: Optional[_BM25Route] = None,
        **settings: Any,
    ) -> None:
        # Settings may come as a config object and/or keyword arguments (validated either way).
        self.config = updated(config, settings, model_class=MultiRouteConfig)
        if nodes is None and docstore is not None:
            nodes = list(docstore.docs.values())
        nodes_list = list(nodes or [])
        self._nodes: Mapping[str, BaseNode] = (
            _DocstoreNodes(docstore, [n.node_id for n in nodes_list])
            if docstore is not None
            else {n.node_id: n for n in nodes_list}
        )
        if vector_retriever is None and not self._nodes:
            raise ValueError("MultiRouteRetriever needs a vector retriever, or nodes, or both")
        self._vector_retriever = vector_retriever
        # Every store's similarity read as a cosine, as the fusion expects (store_vectors.py).
        self._cosine = cosine_scale(getattr(vector_retriever, "_vector_store", None))
        # How the store restricts a query to given nodes, learned at the first scores_within.
        self._restriction: Optional[str] = None
        self.keyword_extractor = keyword_extractor or CriticalKeywordExtractor()
        self._bm25_tokenizer = bm25_tokenizer

        if not nodes_list and (self.config.use_bm25 or self.config.use_keywords):
            logger.warning(
                "MultiRouteRetriever got no nodes: the BM25 and keyword routes are off "
                "(pass nodes=, docstore= or use from_index)"
            )
        if self.config.use_keywords:
            if keyword_index is None:
                missing = [n for n in nodes_list if schema.CRITICAL_KEYWORDS not in n.metadata]
                if missing:
                    self.keyword_extractor(missing)
                keyword_index = KeywordIndex.from_nodes(nodes_list)
            self._check_known(keyword_index.node_ids, "keyword index")
        self._keyword_index = keyword_index or KeywordIndex()
        self._title_keywords, self._document_names = self._title_facts(nodes_list)
        # Document id -> title of every document, for the document focus; keywords at first use.
        self._document_titles: Dict[str, str] = {}
        for node in nodes_list:
            document_id = schema.get_document_id(node)
            if document_id and document_id not in self._document_titles:
                self._document_titles[document_id] = schema.get_document_title(node)
        self._document_title_keywords: Optional[Dict[str, frozenset]] = None
        self._bm25: Optional[_BM25Route] = _bm25_route
        if self._bm25 is None and self.config.use_bm25 and nodes_list:
            self._bm25 = _BM25Route.build(nodes_list, bm25_tokenizer, self.config.bm25_language)
        if self._bm25 is not None:
            self._check_known(self._bm25.node_ids, "BM25 index")
        self._shape = _collection_shape(nodes_list)
        self._beta_value = self._resolve_beta()
        self._document_nodes: Optional[Dict[str, List[str]]] = None  # built at first use
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_index(
        cls, index: VectorStoreIndex, nodes: Optional[Sequence[BaseNode]] = None, **kwargs: Any
    ) -> "MultiRouteRetriever":
        """Vector route from ``index.as_retriever``; BM25/keywords over every node of the index:
        ``nodes`` or ``docstore`` when given, else the index's docstore, else the nodes listed
        from a vector store that keeps the text (Chroma, Qdrant, LanceDB, Milvus, DuckDB,
        pgvector, ...; :mod:`llama_index_hiqa.vector_store_access`). A store that cannot list them
        raises :class:`~llama_index_hiqa.errors.VectorStoreFeatureError` here.
        """
        config = kwargs.pop("config", None) or MultiRouteConfig()
        updates = {k: kwargs.pop(k) for k in list(kwargs) if k in MultiRouteConfig.model_fields}
        config = updated(config, updates)
        vector = index.as_retriever(similarity_top_k=config.candidates_per_route)
        docstore = kwargs.pop("docstore", None)
        if nodes is None:  # result nodes are then read by id from the docstore that holds them
            nodes, docstore = index_nodes(index, "MultiRouteRetriever", docstore=docstore)
        return cls(vector_retriever=vector, nodes=nodes, docstore=docstore, config=config, **kwargs)

    def _check_known(self, node_ids: Sequence[str], what: str) -> None:
        if not self._nodes:
            return
        unknown = [i for i in node_ids if i not in self._nodes]
        if unknown:
            raise UnknownNodeError(
                f"{len(unknown)} node id(s) of the {what} are not among the retriever's nodes "
                f"(first: {unknown[:3]}); rebuild the index or pass the matching docstore"
            )

    def _reads_titles(self) -> bool:
        """Whether title keywords are on the nodes and the keyword route asks for them."""
        return self.config.use_keywords and self.keyword_extractor.include_document_keywords

    def _title_keywords_of(self, titles: Sequence[str]) -> Dict[str, frozenset]:
        """Title -> its normalised keywords (one extraction per title)."""
        keywords = self.keyword_extractor.title_keywords(titles)
        return {t: frozenset(normalize_keyword(k) for k in kws) for t, kws in zip(titles, keywords)}

    def _title_facts(
        self, nodes: Sequence[BaseNode]
    ) -> Tuple[Dict[str, frozenset], Dict[str, Tuple[Tuple[str, ...], ...]]]:
        """From one extraction over the document titles of ``nodes``: node id -> its title's
        keywords, for ``document_keyword_weight`` (empty when the weight is 1), and the
        collection's names (``title_match.document_names``). Both empty when the extractor
        does not copy title keywords onto nodes."""
        if not self._reads_titles():
            return {}, {}
        titles = {n.node_id: schema.get_document_title(n) for n in nodes}
        titles = {node_id: title for node_id, title in titles.items() if title}
        by_title = self._title_keywords_of(list(dict.fromkeys(titles.values())))
        per_node = (
            {}
            if self.config.document_keyword_weight == 1.0
            else {node_id: by_title[t] for node_id, t in titles.items() if by_title[t]}
        )
        return per_node, title_match.document_names(by_title)

    def document_names(self) -> Mapping[str, Tuple[Tuple[str, ...], ...]]:
        """The collection's document names a question may abbreviate (name keyword -> the
        words that spell it in the titles, ``title_match.document_names``)."""
        return self._document_names

    def document_title_keywords(self) -> Dict[str, frozenset]:
        """Document id -> the normalised keywords of its title, for every indexed document
        (one extraction over the titles, at the first call); ``{}`` for a retriever that does
        not hold its nodes."""
        if getattr(self, "_document_title_keywords", None) is None:
            titles = getattr(self, "_document_titles", {})
            by_title = self._title_keywords_of(list(dict.fromkeys(titles.values()))) if titles else {}
            self._document_title_keywords = {doc: by_title[title] for doc, title in titles.items()}
        return self._document_title_keywords

    def question_keywords(self, query: Union[str, QueryBundle]) -> List[str]:
        """The question's normalised keywords as the keyword route matches them (the
        document names it abbreviates included)."""
        bundle = QueryBundle(query) if isinstance(query, str) else query
        return self._query_keywords(bundle)[1]

    def _resolve_beta(self) -> float:
        beta = self.config.beta
        if beta != "auto":
            return float(beta)
        n_docs, avg_pages = self.collection_shape()
        return fusion.auto_beta(n_docs, avg_pages, self.config.beta_min, self.config.beta_max)

    def collection_shape(self) -> Tuple[int, float]:
        """``(|D|, average pages per document)`` of the indexed nodes.

        Pages come from ``schema.PAGE_END``; a document without page facts counts one page
        per node (a node is then the closest unit of length we know).
        """
        return self._shape

    @property
    def beta(self) -> float:
        """The β in use (``beta="auto"`` resolved for this collection)."""
        return self._beta_value

    @property
    def keyword_index(self) -> KeywordIndex:
        return self._keyword_index

    @property
    def bm25_node_ids(self) -> Optional[List[str]]:
        """The node ids the BM25 index scores (``None`` when the route is off)."""
        return None if self._bm25 is None else list(self._bm25.node_ids)

    def with_settings(self, **settings: Any) -> "MultiRouteRetriever":
        """The same indexes under other settings (``similarity_top_k``, ``mode``, ``alpha``,
        ...): nothing is re-indexed unless a route that was off is switched on."""
        clone = copy.copy(self)
        clone.config = updated(self.config, settings)
        old, new = self.config, clone.config
        needs_nodes = (new.use_bm25 and self._bm25 is None) or (new.use_keywords and not old.use_keywords)
        needs_titles = (new.use_keywords, new.document_keyword_weight == 1.0) != (
            old.use_keywords, old.document_keyword_weight == 1.0
        )
        if needs_nodes or needs_titles:  # only when a route or the title weight is switched on
            nodes = list(self._nodes.values())
            if new.use_bm25 and self._bm25 is None and nodes:
                clone._bm25 = _BM25Route.build(nodes, self._bm25_tokenizer, new.bm25_language)
            if new.use_keywords and not old.use_keywords:
                clone._keyword_index = KeywordIndex.from_nodes(nodes)
            clone._title_keywords, clone._document_names = clone._title_facts(nodes)
        clone._beta_value = clone._resolve_beta()
        return clone

    # -- routes ----------------------------------------------------------------------------
    def _vector_scores(self, query: QueryBundle, n: int) -> Tuple[Dict[str, float], Dict[str, BaseNode]]:
        if self._vector_retriever is None:
            return {}, {}
        results = with_top_k(self._vector_retriever, n).retrieve(query)
        return self._collect(results)

    async def _avector_scores(self, query: QueryBundle, n: int) -> Tuple[Dict[str, float], Dict[str, BaseNode]]:
        if self._vector_retriever is None:
            return {}, {}
        results = await with_top_k(self._vector_retriever, n).aretrieve(query)
        return self._collect(results)

    def _collect(self, results: Sequence[NodeWithScore]) -> Tuple[Dict[str, float], Dict[str, BaseNode]]:
        """``({node id: cosine}, {node id: node})``; duplicates merged by id."""
        scores = collect(results, self._cosine)
        seen: Dict[str, BaseNode] = {}
        for result in results:
            seen.setdefault(result.node.node_id, result.node)
        return scores, seen

    def _bm25_scores(self, query: QueryBundle, n: int) -> Dict[str, float]:
        if self._bm25 is None or not self.config.use_bm25:
            return {}
        return self._bm25.top(query.query_str, n)

    def _query_keywords(self, query: QueryBundle) -> Tuple[List[str], List[str]]:
        """The question's keywords (with the document names it abbreviates) and their
        normalised forms, once each."""
        keywords = self.keyword_extractor.extract_query(query.query_str)
        if self.config.match_name_abbreviations:
            named = title_match.names_in_question(query.query_str or "", self.document_names())
            keywords = list(dict.fromkeys([*keywords, *named]))
        return keywords, [k for k in dict.fromkeys(normalize_keyword(k) for k in keywords) if k]

    def _title_wanted(self, wanted: Sequence[str]) -> frozenset:
        """The normalised keywords matched against document titles."""
        if self.config.latest_year_in_titles:
            return title_match.latest_year_only(wanted)
        return frozenset(wanted)

    def _keyword_counts(self, query: QueryBundle) -> Tuple[List[str], Dict[str, float]]:
        """The query's keywords and ``|C|`` per matching node, a keyword of the node's
        document title counted ``document_keyword_weight`` times."""
        if not self.config.use_keywords:
            return [], {}
        keywords, normalized = self._query_keywords(query)
        counts: Dict[str, float] = dict(self._keyword_index.match_counts(normalized))
        extra = self.config.document_keyword_weight - 1.0
        if extra and self._title_keywords:
            wanted = self._title_wanted(normalized)
            in_title: Dict[frozenset, frozenset] = {}  # one intersection per document title
            index = self._keyword_index
            for node_id in counts:
                title = self._title_keywords.get(node_id)
                if title is None:
                    continue
                if title not in in_title:
                    in_title[title] = wanted & title
                held = sum(1 for k in in_title[title] if index.holds(node_id, k))
                counts[node_id] += extra * held
        return keywords, counts

    def _run_route(
        self, name: str, func: Callable[[], Any], empty: Any, errors: Dict[str, BaseException], query: str
    ) -> Any:
        try:
            return func()
        except Exception as exc:  # noqa: BLE001 - a failing route must not sink the others
            self._route_failed(name, exc, errors, query)
            return empty

    @staticmethod
    def _route_failed(name: str, exc: BaseException, errors: Dict[str, BaseException], query: str) -> None:
        logger.exception("MultiRouteRetriever: the %s route failed; fusing the others", name)
        errors[name] = exc
        dispatcher.event(RouteFailedEvent(query=query, route=name, error=f"{type(exc).__name__}: {exc}"))

    # -- fusion ----------------------------------------------------------------------------
    def _fuse(
        self,
        vector: Dict[str, float],
        bm25: Dict[str, float],
        counts: Dict[str, float],
        top_k: Optional[int],
        candidates: Optional[Sequence[str]] = None,
    ) -> List[Tuple[str, float]]:
        config = self.config
        if candidates is None:
            # The keyword route contributes its best-matching nodes as candidates too (ties in
            # |C| broken by node id, so the pool is deterministic).
            keyword_top = sorted(counts.items(), key=lambda it: (-it[1], it[0]))[: config.candidates_per_route]
            candidates = list(dict.fromkeys([*vector, *bm25, *(i for i, _ in keyword_top)]))
            keyword_scores = {i: float(c) for i, c in keyword_top}
        else:
            keyword_scores = {i: float(counts[i]) for i in candidates if counts.get(i)}
        if config.mode == "hiqa":
            fused = fusion.hiqa_fusion(vector, bm25, counts, config.alpha, self._beta_value, candidates)
        elif config.mode == "rrf":
            rankings = {
                VECTOR: fusion.rank_ids(vector),
                BM25: fusion.rank_ids(bm25),
                KEYWORDS: fusion.rank_ids(keyword_scores),
            }
            ranks = {KEYWORDS: fusion.ranks_from_scores(keyword_scores)}
            fused = fusion.reciprocal_rank_fusion(rankings, config.route_weights, config.rrf_k, ranks)
        else:
            route_scores = {VECTOR: vector, BM25: bm25, KEYWORDS: keyword_scores}
            fuse = (
                fusion.relative_score_fusion
                if config.mode == "relative_score"
                else fusion.dist_based_score_fusion
            )
            fused = fuse(route_scores, config.route_weights)
        # Rank fusion scores every node a route returned; only the candidates are ranked here.
        fused = {node_id: fused.get(node_id, 0.0) for node_id in candidates}
        ordered = fusion.rank_ids(fused, top_k)
        return [(node_id, fused[node_id]) for node_id in ordered]

    def _results(
        self,
        fused: List[Tuple[str, float]],
        vector: Dict[str, float],
        bm25: Dict[str, float],
        counts: Dict[str, float],
        vector_nodes: Dict[str, BaseNode],
    ) -> List[NodeWithScore]:
        return self.results_for(
            fused,
            {
                node_id: {VECTOR: vector.get(node_id), BM25: bm25.get(node_id), KEYWORDS: float(counts.get(node_id, 0.0))}
                for node_id, _ in fused
            },
            vector_nodes,
        )

    def results_for(
        self,
        ranked: Sequence[Tuple[str, float]],
        route_scores: Mapping[str, Mapping[str, Any]],
        known_nodes: Optional[Mapping[str, BaseNode]] = None,
    ) -> List[NodeWithScore]:
        """``(node_id, score)`` pairs as results: copies of the nodes with their
        ``route_scores`` (and the score as ``"fused"``) in ``metadata["route_scores"]``."""
        known_nodes = known_nodes or {}
        missing = [node_id for node_id, _ in ranked if node_id not in known_nodes]
        found = {**self.nodes_by_id(missing), **known_nodes} if missing else known_nodes
        out = []
        for node_id, score in ranked:
            node = found.get(node_id)
            if node is None:  # an id no route can turn into a node: report, don't invent text
                logger.warning("MultiRouteRetriever: node %s is unknown; skipped", node_id)
                continue
            # A copy, so per-query provenance never leaks into the shared node objects.
            node = node.model_copy()
            node.metadata = dict(node.metadata)
            node.excluded_embed_metadata_keys = list(node.excluded_embed_metadata_keys)
            node.excluded_llm_metadata_keys = list(node.excluded_llm_metadata_keys)
            node.metadata[schema.ROUTE_SCORES] = {**route_scores.get(node_id, {}), "fused": score}
            schema.hide_from_views(node, (schema.ROUTE_SCORES,))
            out.append(NodeWithScore(node=node, score=score))
        return out

    # -- one document's nodes (DocumentFocusRetriever) ---------------------------------------
    def nodes_by_id(self, node_ids: Sequence[str]) -> Dict[str, BaseNode]:
        """The indexed nodes of ``node_ids`` (unknown ids left out)."""
        out = {}
        for node_id in node_ids:
            node = self._nodes.get(node_id)
            if node is not None:
                out[node_id] = node
        return out

    def document_node_ids(self, document_id: str) -> List[str]:
        """The ids of every indexed node of ``document_id`` (``schema.get_document_id``)."""
        if self._document_nodes is None:
            by_document: Dict[str, List[str]] = {}
            for node_id in self._nodes:
                node = self._nodes[node_id]
                by_document.setdefault(schema.get_document_id(node) or "", []).append(node_id)
            self._document_nodes = by_document
        return list(self._document_nodes.get(document_id, []))

    def scores_within(self, query: Union[str, QueryBundle], node_ids: Sequence[str]) -> Dict[str, Dict[str, float]]:
        """Each route's scores of exactly ``node_ids`` for ``query`` (not only of the routes'
        collection-wide candidates): ``{"vector": {id: cosine}, "bm25": {id: score},
        "keywords": {id: |C|}}``."""
        bundle = QueryBundle(query) if isinstance(query, str) else query
        wanted = set(node_ids)
        vector: Dict[str, float] = {}
        if self._vector_retriever is not None and node_ids:
            vector, self._restriction = scores_of_nodes(
                self._vector_retriever, bundle, node_ids, self._nodes, self._cosine,
                collection_size=len(self._nodes), restriction=self._restriction,
            )
        bm25: Dict[str, float] = {}
        if self._bm25 is not None and self.config.use_bm25 and node_ids:
            bm25 = self._bm25.scores_of(bundle.query_str or "", node_ids)
        return {VECTOR: vector, BM25: bm25, KEYWORDS: self._keyword_counts_of(bundle, wanted)}

    def _keyword_counts_of(self, query: QueryBundle, node_ids: Any) -> Dict[str, float]:
        _, counts = self._keyword_counts(query)
        return {node_id: count for node_id, count in counts.items() if node_id in node_ids}

    def _finish(self, query: str, vector, vector_nodes, bm25, counts, errors: Dict[str, BaseException]) -> List[NodeWithScore]:
        enabled = [VECTOR] if self._vector_retriever is not None else []
        enabled += [BM25] if self._bm25 is not None and self.config.use_bm25 else []
        enabled += [KEYWORDS] if self.config.use_keywords else []
        if enabled and all(route in errors for route in enabled):
            raise RetrievalRouteError(dict(errors))
        fused = self._fuse(vector, bm25, counts, self.config.similarity_top_k)
        results = self._results(fused, vector, bm25, counts, vector_nodes)
        if errors:
            for hit in results:
                hit.node.metadata[schema.ROUTE_SCORES]["failed"] = sorted(errors)
        dispatcher.event(
            MultiRouteRetrievalEndEvent(
                query=query, candidates={VECTOR: len(vector), BM25: len(bm25), KEYWORDS: len(counts)},
                failed_routes=sorted(errors), returned=len(results), beta=self._beta_value,
            )
        )
        return results

    # -- BaseRetriever ---------------------------------------------------------------------
    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        """Routes in threads (no event loop needed, so it also works inside notebooks)."""
        query = query_bundle.query_str or ""
        if not query.strip():
            return []  # nothing to rank by: documented fallback, no route is asked
        n = self.config.candidates_per_route
        errors: Dict[str, BaseException] = {}  # this query's alone
        with ThreadPoolExecutor(max_workers=3) as pool:
            vec_f = pool.submit(self._run_route, VECTOR, lambda: self._vector_scores(query_bundle, n), ({}, {}), errors, query)
            bm_f = pool.submit(self._run_route, BM25, lambda: self._bm25_scores(query_bundle, n), {}, errors, query)
            kw_f = pool.submit(self._run_route, KEYWORDS, lambda: self._keyword_counts(query_bundle), ([], {}), errors, query)
            (vector, vector_nodes), bm25, (_, counts) = vec_f.result(), bm_f.result(), kw_f.result()
        return self._finish(query, vector, vector_nodes, bm25, counts, errors)

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        """The three routes concurrently: the vector route's own async path, BM25 and the
        keyword extraction in worker threads."""
        query = query_bundle.query_str or ""
        if not query.strip():
            return []
        n = self.config.candidates_per_route
        errors: Dict[str, BaseException] = {}  # this query's alone

        async def guarded(name: str, coro: Any, empty: Any) -> Any:
            try:
                return await coro
            except Exception as exc:  # noqa: BLE001 - a failing route must not sink the others
                self._route_failed(name, exc, errors, query)
                return empty

        (vector, vector_nodes), bm25, (_, counts) = await asyncio.gather(
            guarded(VECTOR, self._avector_scores(query_bundle, n), ({}, {})),
            guarded(BM25, self._abm25_scores(query_bundle, n), {}),
            guarded(KEYWORDS, self._akeyword_counts(query_bundle), ([], {})),
        )
        return self._finish(query, vector, vector_nodes, bm25, counts, errors)

    # -- route scores and fusion, separately (re-fusing) ---------------------------------
    def route_scores(self, query: Union[str, QueryBundle]) -> Dict[str, Dict[str, float]]:
        """Each route's candidates for ``query`` before fusion: ``{"vector": {id: cosine},
        "bm25": {id: score}, "keywords": {id: |C|}}`` (``|C|`` with this retriever's title
        weight). :meth:`fuse` ranks them under any settings without asking the routes again."""
        bundle = QueryBundle(query) if isinstance(query, str) else query
        n = self.config.candidates_per_route
        errors: Dict[str, BaseException] = {}
        q = bundle.query_str or ""
        vector, _ = self._run_route(VECTOR, lambda: self._vector_scores(bundle, n), ({}, {}), errors, q)
        bm25 = self._run_route(BM25, lambda: self._bm25_scores(bundle, n), {}, errors, q)
        _, counts = self._run_route(KEYWORDS, lambda: self._keyword_counts(bundle), ([], {}), errors, q)
        return {VECTOR: vector, BM25: bm25, KEYWORDS: counts}

    def fuse(self, scores: Mapping[str, Mapping[str, float]], top_k: Optional[int] = None) -> List[str]:
        """Node ids ranked by this retriever's fusion of :meth:`route_scores` output."""
        fused = self._fuse(dict(scores[VECTOR]), dict(scores[BM25]), dict(scores[KEYWORDS]), top_k)
        return [node_id for node_id, _ in fused]

    # In-memory routes run in worker threads; a store with an async driver overrides these.
    async def _abm25_scores(self, query: QueryBundle, n: int) -> Dict[str, float]:
        return await asyncio.to_thread(self._bm25_scores, query, n)

    async def _akeyword_counts(self, query: QueryBundle) -> Tuple[List[str], Dict[str, float]]:
        return await asyncio.to_thread(self._keyword_counts, query)

    # -- full ranking (Log-Rank Index) -----------------------------------------------------
    def full_ranking(self, query: Union[str, QueryBundle]) -> List[str]:
        """Every indexed node id, best first: the rank of every node, for the Log-Rank Index.

        Two stages, as retrieval itself works: first the fused candidates exactly as
        :meth:`retrieve` orders them (so ``full_ranking(q)[:top_k]`` is what ``retrieve``
        returns), then every other node, fused over the whole collection (each route asked for
        all nodes; the vector route through its ``similarity_top_k``).
        """
        bundle = QueryBundle(query) if isinstance(query, str) else query
        if not self._nodes:
            raise ValueError("full_ranking needs the retriever's nodes (pass nodes or a docstore)")
        if not (bundle.query_str or "").strip():
            return list(self._nodes)
        n = self.config.candidates_per_route
        errors: Dict[str, BaseException] = {}
        q = bundle.query_str
        vector, _ = self._run_route(VECTOR, lambda: self._vector_scores(bundle, n), ({}, {}), errors, q)
        bm25 = self._run_route(BM25, lambda: self._bm25_scores(bundle, n), {}, errors, q)
        _, counts = self._run_route(KEYWORDS, lambda: self._keyword_counts(bundle), ([], {}), errors, q)
        first = [node_id for node_id, _ in self._fuse(vector, bm25, counts, None)]
        seen = set(first)
        rest = [node_id for node_id in self._nodes if node_id not in seen]
        if not rest:
            return first
        all_vector, _ = self._run_route(
            VECTOR, lambda: self._vector_scores(bundle, len(self._nodes)), ({}, {}), errors, q
        )
        all_bm25: Dict[str, float] = {}
        if self._bm25 is not None and self.config.use_bm25:
            scores = self._run_route(BM25, lambda: self._bm25.all_scores(q), None, errors, q)
            if scores is not None:
                all_bm25 = {i: float(s) for i, s in zip(self._bm25.node_ids, scores) if s > 0}
        tail = self._fuse(all_vector, all_bm25, counts, None, candidates=rest)
        return first + [node_id for node_id, _ in tail]

    def rank_of(self, query: Union[str, QueryBundle], node_ids: Sequence[str]) -> Dict[str, int]:
        """The 1-based rank of each of ``node_ids`` in :meth:`full_ranking`."""
        unknown = [i for i in node_ids if i not in self._nodes]
        if unknown:
            raise UnknownNodeError(f"unknown node id(s): {unknown[:5]}")
        position = {node_id: rank for rank, node_id in enumerate(self.full_ranking(query), start=1)}
        return {node_id: position[node_id] for node_id in node_ids}

    # -- persistence -----------------------------------------------------------------------
    def persist(self, persist_dir: Union[str, Path]) -> None:
        """Write the BM25 and keyword indexes and the settings (keyed by docstore node ids).

        The vector store and docstore persist with your index as usual
        (``index.storage_context.persist``); the custom BM25 tokenizer, if any, is code and is
        passed again to :meth:`from_persist_dir`.
        """
        path = Path(persist_dir)
        path.mkdir(parents=True, exist_ok=True)
        if self._bm25 is not None:
            self._bm25.persist(path / BM25_DIRNAME)
        self._keyword_index.persist(path)
        payload = {
            "config": self.config.model_dump(),
            "keyword_extractor": self.keyword_extractor.model_dump(exclude={"llm"}),
            "custom_tokenizer": self._bm25_tokenizer is not None,
        }
        (path / CONFIG_FILENAME).write_text(json.dumps(payload, indent=2), encoding="utf-8")

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
        """Load what :meth:`persist` wrote; nodes come from ``nodes``, ``docstore`` or ``index``.

        Raises :class:`~llama_index_hiqa.errors.UnknownNodeError` when the persisted indexes
        name node ids the given nodes do not hold (a stale or mismatched persist dir).
        """
        path = Path(persist_dir)
        payload = json.loads((path / CONFIG_FILENAME).read_text(encoding="utf-8"))
        if payload.get("custom_tokenizer") and bm25_tokenizer is None:
            raise ValueError("this retriever was built with a custom BM25 tokenizer: pass bm25_tokenizer")
        updates = {k: kwargs.pop(k) for k in list(kwargs) if k in MultiRouteConfig.model_fields}
        config = MultiRouteConfig(**{**payload["config"], **updates})
        if index is not None:
            vector_retriever = vector_retriever or index.as_retriever(similarity_top_k=config.candidates_per_route)
            docstore = docstore or index.docstore
        if nodes is None and docstore is not None:
            nodes = list(docstore.docs.values())
        extractor = kwargs.pop("keyword_extractor", None) or CriticalKeywordExtractor(**payload["keyword_extractor"])
        bm25_path = path / BM25_DIRNAME
        bm25_route = _BM25Route.load(bm25_path, bm25_tokenizer) if bm25_path.is_dir() else None
        keyword_index = KeywordIndex.from_persist_dir(path) if (path / KeywordIndex.FILENAME).exists() else None
        return cls(
            vector_retriever=vector_retriever,
            nodes=nodes,
            keyword_extractor=extractor,
            keyword_index=keyword_index,
            bm25_tokenizer=bm25_tokenizer,
            config=config,
            _bm25_route=bm25_route,
            **kwargs,
        )
