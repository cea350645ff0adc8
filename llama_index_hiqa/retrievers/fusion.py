"""Score fusion for multi-route retrieval: pure functions over ``{node_id: score}`` maps.

* `hiqa_fusion` — HiQA formula (2) ("HiQA: A Hierarchical Contextual Augmentation RAG for
Multi-Documents QA" (Chen et al.), §Multi-Route Retriever):
  ``score = α·v + (1−α)·r + β·log(1+|C|)``, with the vector score ``v`` and the BM25 score ``r``
  min-max normalised per query over the candidates their route returned (the best candidate
  of a route gets 1, its worst 0; a node the route did not return gets 0; a route whose
  candidates all score the same gives them 1). The paper does not say how ``v`` and ``r`` are
  brought to one scale; raw BM25 scores are unbounded, so without normalisation ``α`` would
  mean nothing.
* [`auto_beta`][llama_index_hiqa.retrievers.fusion.auto_beta] — β tied to ``|D| / average pages`` as the paper describes (see there).
* [`reciprocal_rank_fusion`][llama_index_hiqa.retrievers.fusion.reciprocal_rank_fusion] — weighted RRF, ``Σ_route w_route / (k + rank)`` with rank
  from 1 and ``k = 60`` (Cormack et al. 2009; seed hybrid paper §III.B). Unlike LlamaIndex's
  ``QueryFusionRetriever`` in ``reciprocal_rerank`` mode, which ignores ``retriever_weights``
  (run-llama/llama_index#21444), the weights here apply.
* [`relative_score_fusion`][llama_index_hiqa.retrievers.fusion.relative_score_fusion] and [`dist_based_score_fusion`][llama_index_hiqa.retrievers.fusion.dist_based_score_fusion] — exactly as LlamaIndex's
  ``QueryFusionRetriever`` defines them: per route min-max (or mean ± 3·std) scaling, times the
  route weight, summed over routes.

Every function returns ``{node_id: fused_score}``; [`rank_ids`][llama_index_hiqa.retrievers.fusion.rank_ids] orders it (ties broken by
node id, so results are deterministic).
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

Scores = Mapping[str, float]

RRF_K = 60.0


def min_max_normalize(scores: Scores) -> Dict[str, float]:
    """Scale to [0, 1]: the best becomes 1, the worst 0; all equal -> 1 (0 if all are <= 0).

    Args:
        scores: id -> score.

    Returns:
        id -> scaled score.
    """
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    if high == low:
        value = 1.0 if high > 0 else 0.0
        return {node_id: value for node_id in scores}
    span = high - low
    return {node_id: (score - low) / span for node_id, score in scores.items()}


def hiqa_fusion(
    vector: Scores,
    bm25: Scores,
    keyword_counts: Mapping[str, float],
    alpha: float,
    beta: float,
    candidates: Optional[Iterable[str]] = None,
) -> Dict[str, float]:
    """HiQA formula (2) over ``candidates`` (default: every node any route returned).

    ``α·v + (1−α)·b + β·log(1 + |C|)``, with v and b min-max normalised.

    Args:
        vector: id -> vector similarity.
        bm25: id -> BM25 score.
        keyword_counts: id -> number of matched critical keywords ``|C|``.
        alpha: the vector share α, in [0, 1].
        beta: the keyword weight β, >= 0.
        candidates: the ids to score.

    Returns:
        id -> fused score.

    Raises:
        ValueError: when ``alpha`` is outside [0, 1] or ``beta`` is negative.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    v, r = min_max_normalize(vector), min_max_normalize(bm25)
    ids = list(candidates) if candidates is not None else list(
        dict.fromkeys([*vector, *bm25, *keyword_counts])
    )
    return {
        node_id: alpha * v.get(node_id, 0.0)
        + (1.0 - alpha) * r.get(node_id, 0.0)
        + beta * math.log1p(max(0, keyword_counts.get(node_id, 0)))
        for node_id in ids
    }


def auto_beta(
    n_documents: int, average_pages: float, beta_min: float = 0.5, beta_max: float = 2.0
) -> float:
    """β from the ratio ``x = |D| / average pages`` (HiQA: "increasing β when this ratio is large").

    The paper gives the direction, not the formula. We use the saturating map
    ``β = β_min + (β_max − β_min) · x / (1 + x)``: a few long documents (x → 0) give
    ``β_min``, as many documents as pages per document (x = 1) the midpoint, many short
    look-alike documents (x → ∞) approach ``β_max``. The scale: the vector/BM25 mix spans
    [0, 1] and one matched keyword adds ``β·log 2``, so with ``β_min = 0.5`` one keyword is
    worth a third of the whole similarity range even for few long documents. The defaults
    (0.5, 2.0) were chosen after a β sweep on FinanceBench (benchmarks/RESULTS.md), where
    larger β helped; with them 46 filings of 132 pages -> 0.89, 24 four-page datasheets -> 1.79.

    Args:
        n_documents: ``|D|``, the number of documents.
        average_pages: their average page count.
        beta_min: β as x -> 0.
        beta_max: β as x -> ∞.

    Returns:
        β.
    """
    if n_documents <= 0:
        return beta_min
    ratio = n_documents / max(float(average_pages), 1.0)
    return beta_min + (beta_max - beta_min) * ratio / (1.0 + ratio)


def ranks_from_scores(scores: Scores) -> Dict[str, int]:
    """Rank 1 for the best score; ties share the best rank of their group (1, 2, 2, 4).

    Args:
        scores: id -> score.

    Returns:
        id -> rank.
    """
    ordered = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    ranks: Dict[str, int] = {}
    previous, previous_rank = None, 0
    for position, (node_id, score) in enumerate(ordered, start=1):
        if score != previous:
            previous, previous_rank = score, position
        ranks[node_id] = previous_rank
    return ranks


def reciprocal_rank_fusion(
    rankings: Mapping[str, Sequence[str]],
    weights: Optional[Mapping[str, float]] = None,
    k: float = RRF_K,
    ranks: Optional[Mapping[str, Mapping[str, int]]] = None,
) -> Dict[str, float]:
    """Weighted RRF: ``Σ_route w_route / (k + rank_route(node))`` (rank from 1).

    ``rankings`` maps a route name to its node ids, best first; ``ranks`` may give explicit
    ranks per route instead (for ties, e.g. the keyword route's equal ``|C|``). A route missing
    from ``weights`` has weight 1.

    Args:
        rankings: route name -> node ids, best first.
        weights: route name -> weight.
        k: the RRF constant.
        ranks: route name -> (id -> rank), used instead of that route's ranking.

    Returns:
        id -> fused score.
    """
    weights = weights or {}
    fused: Dict[str, float] = {}
    for route, ordered in rankings.items():
        weight = float(weights.get(route, 1.0))
        route_ranks = (ranks or {}).get(route)
        for position, node_id in enumerate(ordered, start=1):
            rank = route_ranks[node_id] if route_ranks is not None else position
            fused[node_id] = fused.get(node_id, 0.0) + weight / (k + rank)
    return fused


def _scaled_sum(
    route_scores: Mapping[str, Scores], weights: Optional[Mapping[str, float]], dist_based: bool
) -> Dict[str, float]:
    weights = weights or {}
    fused: Dict[str, float] = {}
    for route, scores in route_scores.items():
        if not scores:
            continue
        values = list(scores.values())
        if dist_based:
            mean = sum(values) / len(values)
            std = (sum((x - mean) ** 2 for x in values) / len(values)) ** 0.5
            low, high = mean - 3 * std, mean + 3 * std
        else:
            low, high = min(values), max(values)
        weight = float(weights.get(route, 1.0))
        for node_id, score in scores.items():
            if high == low:
                scaled = 1.0 if high > 0 else 0.0
            else:
                scaled = (score - low) / (high - low)
            fused[node_id] = fused.get(node_id, 0.0) + scaled * weight
    return fused


def relative_score_fusion(
    route_scores: Mapping[str, Scores], weights: Optional[Mapping[str, float]] = None
) -> Dict[str, float]:
    """LlamaIndex's ``relative_score``: per-route min-max, times the route weight, summed.

    Args:
        route_scores: route name -> (id -> score).
        weights: route name -> weight (missing: 1).

    Returns:
        id -> fused score.
    """
    return _scaled_sum(route_scores, weights, dist_based=False)


def dist_based_score_fusion(
    route_scores: Mapping[str, Scores], weights: Optional[Mapping[str, float]] = None
) -> Dict[str, float]:
    """LlamaIndex's ``dist_based_score``: per-route scaling with min/max = mean ∓ 3·std.

    Args:
        route_scores: route name -> (id -> score).
        weights: route name -> weight (missing: 1).

    Returns:
        id -> fused score.
    """
    return _scaled_sum(route_scores, weights, dist_based=True)


def rank_ids(fused: Scores, top_k: Optional[int] = None) -> List[str]:
    """Node ids by fused score, best first (ties by id); the first ``top_k`` if given.

    Args:
        fused: id -> fused score.
        top_k: how many to keep (``None``: all).

    Returns:
        The ids.
    """
    ordered = [node_id for node_id, _ in sorted(fused.items(), key=lambda it: (-it[1], it[0]))]
    return ordered if top_k is None else ordered[:top_k]


def fuse_routes(
    vector: Scores,
    bm25: Scores,
    counts: Mapping[str, float],
    *,
    mode: str,
    alpha: float,
    beta: float,
    route_weights: Mapping[str, float],
    rrf_k: float,
    candidates_per_route: int,
    top_k: Optional[int] = None,
    candidates: Optional[Sequence[str]] = None,
) -> List[Tuple[str, float]]:
    """The multi-route retriever's ranking of its three routes' scores.

    Args:
        vector: ``{node id: cosine}`` of the vector route.
        bm25: ``{node id: BM25 score}``.
        counts: ``{node id: |C|}`` of the keyword route.
        mode: ``"hiqa"`` (`hiqa_fusion`), ``"rrf"``, ``"relative_score"`` or
            ``"dist_based_score"``.
        alpha: HiQA α.
        beta: HiQA β (resolved, not ``"auto"``).
        route_weights: per-route weights of the rank and score fusions.
        rrf_k: k of reciprocal rank fusion.
        candidates_per_route: how many of the keyword route's best nodes are candidates.
        top_k: how many to return (``None``: every candidate).
        candidates: the node ids to rank; default: every node the vector and BM25 routes
            returned and the keyword route's best ``candidates_per_route`` (ties in ``|C|``
            broken by node id, so the pool is deterministic).

    Returns:
        ``[(node id, fused score), ...]``, best first.
    """
    if candidates is None:
        keyword_top = sorted(counts.items(), key=lambda it: (-it[1], it[0]))[:candidates_per_route]
        candidates = list(dict.fromkeys([*vector, *bm25, *(i for i, _ in keyword_top)]))
        keyword_scores = {i: float(c) for i, c in keyword_top}
    else:
        keyword_scores = {i: float(counts[i]) for i in candidates if counts.get(i)}
    if mode == "hiqa":
        fused = hiqa_fusion(vector, bm25, counts, alpha, beta, candidates)
    elif mode == "rrf":
        rankings = {"vector": rank_ids(vector), "bm25": rank_ids(bm25), "keywords": rank_ids(keyword_scores)}
        ranks = {"keywords": ranks_from_scores(keyword_scores)}
        fused = reciprocal_rank_fusion(rankings, route_weights, rrf_k, ranks)
    else:
        route_scores = {"vector": vector, "bm25": bm25, "keywords": keyword_scores}
        fuse = relative_score_fusion if mode == "relative_score" else dist_based_score_fusion
        fused = fuse(route_scores, route_weights)
    # Rank fusion scores every node a route returned; only the candidates are ranked here.
    fused = {node_id: fused.get(node_id, 0.0) for node_id in candidates}
    ordered = rank_ids(fused, top_k)
    return [(node_id, fused[node_id]) for node_id in ordered]
