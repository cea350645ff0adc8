"""Every node of the collection ranked for a question: the evaluation's view of the retriever.

The Log-Rank Index ("Log-Rank Index", HiQA: A Hierarchical Contextual Augmentation RAG for
Multi-Documents QA (Chen et al.), §Evaluation) needs the rank of every unit, where retrieval
returns a top k. [`full_ranking`][llama_index_hiqa.retrievers.full_ranking.full_ranking] ranks in two stages, as retrieval itself works: first
the fused candidates exactly as ``retrieve`` orders them (so its first ``top_k`` are what
``retrieve`` returns), then every other node, fused over the whole collection.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from llama_index.core.schema import QueryBundle

from llama_index_hiqa.errors import UnknownNodeError
from llama_index_hiqa.questions import question_bundle
from llama_index_hiqa.retrievers.routes import BM25, KEYWORDS, VECTOR, RouteScores, RouteSet


def full_ranking(retriever: Any, query: Union[str, QueryBundle]) -> List[str]:
    """Every node id of ``retriever``'s collection, best first.

    Args:
        retriever: a [`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever] holding its nodes.
        query: the question.

    Returns:
        Every indexed node id once: the fused candidates as ``retrieve`` orders them, then
            the rest fused over the whole collection (each route asked for all nodes; the
            vector route through its ``similarity_top_k``).

    Raises:
        ValueError: the retriever holds no nodes.
    """
    bundle = question_bundle(query)
    nodes = retriever.collection.nodes
    if not nodes:
        raise ValueError("full_ranking needs the retriever's nodes (pass nodes or a docstore)")
    if not (bundle.query_str or "").strip():
        return list(nodes)
    errors: Dict[str, BaseException] = {}
    q = bundle.query_str
    scores = retriever.route_set().ask(bundle, retriever.config.candidates_per_route, errors, concurrent=False)
    counts = scores[KEYWORDS]
    first = [node_id for node_id, _ in retriever.fuse_scores(scores[VECTOR], scores[BM25], counts)]
    seen = set(first)
    rest = [node_id for node_id in nodes if node_id not in seen]
    if not rest:
        return first
    vector_route = retriever.route_set().routes[VECTOR]
    all_vector = (
        RouteSet.guarded(VECTOR, lambda: vector_route.scores(bundle, len(nodes)), errors, q)
        if vector_route is not None else RouteScores()
    )
    all_bm25: Dict[str, float] = {}
    bm25 = retriever.bm25_route
    if bm25 is not None and retriever.config.use_bm25:
        found = RouteSet.guarded(BM25, lambda: bm25.all_scores(q), errors, q, empty=False)
        if found is not False:
            all_bm25 = {i: float(s) for i, s in zip(bm25.node_ids, found) if s > 0}
    tail = retriever.fuse_scores(all_vector, all_bm25, counts, candidates=rest)
    return first + [node_id for node_id, _ in tail]


def rank_of(retriever: Any, query: Union[str, QueryBundle], node_ids: Sequence[str]) -> Dict[str, int]:
    """The 1-based rank of each of ``node_ids`` in [`full_ranking`][llama_index_hiqa.retrievers.full_ranking.full_ranking].

    Args:
        retriever: the multi-route retriever.
        query: the question.
        node_ids: indexed node ids.

    Returns:
        ``{node id: rank}``.

    Raises:
        UnknownNodeError: an id is not indexed.
    """
    nodes = retriever.collection.nodes
    unknown = [i for i in node_ids if i not in nodes]
    if unknown:
        raise UnknownNodeError(f"unknown node id(s): {unknown[:5]}")
    position = {node_id: rank for rank, node_id in enumerate(retriever.full_ranking(query), start=1)}
    return {node_id: position[node_id] for node_id in node_ids}


class FullRanking:
    """The evaluation's methods of [`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever]: every node
    ranked, and the routes' scores apart from their fusion (re-fused under other settings
    without asking the routes again). Needs ``route_set()``, ``fuse_scores``, ``collection``,
    ``bm25_route`` and ``config`` of the class it is mixed into."""

    def route_scores(self, query: Union[str, QueryBundle]) -> Dict[str, Dict[str, float]]:
        """Each route's candidates for ``query`` before fusion; [`fuse`][llama_index_hiqa.retrievers.full_ranking.FullRanking.fuse] ranks them.

        Args:
            query: the question.

        Returns:
            ``{"vector": {id: cosine}, "bm25": {id: score}, "keywords": {id: |C|}}`` (``|C|``
                with this retriever's title weight).
        """
        bundle = question_bundle(query)
        scores = self.route_set().ask(bundle, self.config.candidates_per_route, {}, concurrent=False)  # type: ignore[attr-defined]
        return {name: dict(scores[name]) for name in (VECTOR, BM25, KEYWORDS)}

    def fuse(self, scores: Mapping[str, Mapping[str, float]], top_k: Optional[int] = None) -> List[str]:
        """Node ids ranked by this retriever's fusion of [`route_scores`][llama_index_hiqa.retrievers.full_ranking.FullRanking.route_scores] output.

        Args:
            scores: what [`route_scores`][llama_index_hiqa.retrievers.full_ranking.FullRanking.route_scores] returned.
            top_k: how many (``None``: every candidate).

        Returns:
            Node ids, best first.
        """
        fused = self.fuse_scores(dict(scores[VECTOR]), dict(scores[BM25]), dict(scores[KEYWORDS]), top_k)  # type: ignore[attr-defined]
        return [node_id for node_id, _ in fused]

    def full_ranking(self, query: Union[str, QueryBundle]) -> List[str]:
        """Every indexed node id, best first; ``full_ranking(q)[:top_k]`` is what ``retrieve``
        returns (see [`full_ranking`][llama_index_hiqa.retrievers.full_ranking.FullRanking.full_ranking]).

        Args:
            query: the question.

        Returns:
            Every node id once.
        """
        return full_ranking(self, query)

    def rank_of(self, query: Union[str, QueryBundle], node_ids: Sequence[str]) -> Dict[str, int]:
        """The 1-based rank of each of ``node_ids`` in [`full_ranking`][llama_index_hiqa.retrievers.full_ranking.FullRanking.full_ranking] (see [`rank_of`][llama_index_hiqa.retrievers.full_ranking.FullRanking.rank_of]).

        Args:
            query: the question.
            node_ids: indexed node ids.

        Returns:
            ``{node id: rank}``.
        """
        return rank_of(self, query, node_ids)
