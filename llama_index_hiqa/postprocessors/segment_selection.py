"""The pure part of TextRAG's relevant segment extraction (dsRAG's RSE): chunk values and the
choice of the best contiguous segments, as functions of arrays, with no LlamaIndex objects.

TextRAG Part 3 turns each chunk's relevance into a value — ``exp(-rank / decay_rate) ·
relevance − irrelevant_chunk_penalty``, scaled by the chunk's length over a reference length —
and Part 4 picks the best runs of consecutive chunks: each at most ``max_length`` chunks,
together at most ``overall_max_length``, each worth at least ``minimum_value``, never
overlapping, best first. [`select_segments`][llama_index_hiqa.postprocessors.segment_selection.select_segments] does this with prefix sums and a lazy
max-heap instead of the reference's exhaustive search; a hypothesis test checks it against
that search. [`SegmentIntegrationPostprocessor`][llama_index_hiqa.postprocessors.segment_integration.SegmentIntegrationPostprocessor] wraps it.
"""

from __future__ import annotations

import heapq
from typing import List, Optional, Sequence, Tuple

import numpy as np
from numpy.typing import ArrayLike



def beta_transform(relevance: Sequence[float], a: float, b: float) -> np.ndarray:
    """The Beta(a, b) CDF of relevances in [0, 1] (clipped first): spreads them over [0, 1].

    Args:
        relevance: the relevances.
        a: the Beta distribution's a.
        b: the Beta distribution's b.

    Returns:
        The transformed relevances (as they are, clipped, when a = b = 1).
    """
    # scipy.special (~0.5 s to import) loads when segments are first selected.
    from scipy.special import betainc  # the regularised incomplete beta = the Beta CDF

    values = np.clip(np.asarray(relevance, dtype=float), 0.0, 1.0)
    if a == 1.0 and b == 1.0:
        return values
    return betainc(a, b, values)


def chunk_values(
    ranks: ArrayLike,
    relevance: ArrayLike,
    irrelevant_chunk_penalty: float,
    decay_rate: float,
    lengths: Optional[Sequence[int]] = None,
    reference_length: int = 700,
) -> np.ndarray:
    """``exp(-rank / decay_rate) * relevance - penalty``, optionally length-adjusted.

    Args:
        ranks: each chunk's rank.
        relevance: each chunk's relevance, in [0, 1].
        irrelevant_chunk_penalty: subtracted from every value.
        decay_rate: the rank decay.
        lengths: each chunk's length (``None``: no length adjustment).
        reference_length: the length below which a chunk weighs 1 ([`length_factors`][llama_index_hiqa.postprocessors.segment_selection.length_factors]).

    Returns:
        One value per chunk.
    """
    ranks_arr = np.asarray(ranks, dtype=float)
    values = np.exp(-ranks_arr / decay_rate) * np.asarray(relevance, dtype=float)
    values = values - irrelevant_chunk_penalty
    if lengths is not None:
        values = values * length_factors(lengths, reference_length)
    return values


def length_factors(lengths: Sequence[int], reference_length: int = 700) -> np.ndarray:
    """``max(length, reference) / reference``: long chunks weigh more, short ones no less.

    Args:
        lengths: each chunk's length.
        reference_length: the reference length.

    Returns:
        One factor per chunk, >= 1.
    """
    lengths_arr = np.asarray(lengths, dtype=float)
    return np.maximum(lengths_arr, reference_length) / float(reference_length)


def select_segments(
    values: Sequence[float],
    run_ids: Sequence[int],
    max_length: int,
    overall_max_length: int,
    minimum_value: float,
) -> List[Tuple[int, int, float]]:
    """Best-first segments ``(start, end_exclusive, value)`` over a meta-document.

    ``values`` are chunk values laid end to end; ``run_ids`` says which contiguous run each
    chunk belongs to (a run = consecutive available chunks of one document): no segment
    crosses runs. Each round takes the best remaining segment (ties: earliest start, then
    shortest) that starts and ends on a non-negative chunk, has at most ``max_length``
    chunks, fits the remaining ``overall_max_length`` and overlaps no chosen segment; it
    stops when the best is worth less than ``minimum_value``.

    Prefix sums make a segment's value O(1) and a start's best end O(max_length). Every
    start enters a max-heap with its best value; as segments are chosen, constraints only
    tighten, so a heap entry is an upper bound of that start's true best: the popped start
    is recomputed, and accepted only if its value still holds (else pushed back lower).

    Args:
        values: the chunk values.
        run_ids: each chunk's run.
        max_length: the most chunks in a segment.
        overall_max_length: the most chunks over all segments.
        minimum_value: the least value of a chosen segment.

    Returns:
        The chosen segments, best first.
    """
    v = np.asarray(values, dtype=float)
    n = len(v)
    if n == 0 or max_length < 1 or overall_max_length < 1:
        return []
    runs = np.asarray(run_ids)
    prefix = np.concatenate([[0.0], np.cumsum(v)]).tolist()
    starts = np.flatnonzero(v >= 0)  # only non-negative chunks may start (or end) a segment
    # End (exclusive) of the run each candidate start belongs to.
    run_ends = np.append(np.flatnonzero(runs[1:] != runs[:-1]) + 1, n)
    run_end = dict(zip(starts.tolist(), run_ends[np.searchsorted(run_ends, starts, side="right")].tolist()))
    nonneg = (v >= 0).tolist()
    used = bytearray(n)
    remaining = overall_max_length

    def best_from(start: int) -> Optional[Tuple[float, int]]:
        if used[start]:
            return None
        limit = min(start + max_length, start + remaining, run_end[start])
        best: Optional[Tuple[float, int]] = None
        base = prefix[start]
        for stop in range(start + 1, limit + 1):
            if used[stop - 1]:
                break  # a chosen segment blocks everything beyond
            if nonneg[stop - 1]:
                value = prefix[stop] - base
                if best is None or value > best[0]:
                    best = (value, stop)
        return best

    heap: List[Tuple[float, int, int]] = []
    for start in starts.tolist():
        found = best_from(start)
        if found is not None:
            heap.append((-found[0], start, found[1]))
    heapq.heapify(heap)

    chosen: List[Tuple[int, int, float]] = []
    while heap and remaining > 0:
        neg_value, start, stop = heapq.heappop(heap)
        current = best_from(start)
        if current is None:
            continue
        if current[0] != -neg_value or current[1] != stop:
            heapq.heappush(heap, (-current[0], start, current[1]))
            continue
        if current[0] < minimum_value:
            break  # the best remaining segment is not worth it; neither is any other
        chosen.append((start, stop, current[0]))
        used[start:stop] = b"\x01" * (stop - start)
        remaining -= stop - start
    return chosen
