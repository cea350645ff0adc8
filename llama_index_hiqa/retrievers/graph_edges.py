"""The edges of IIER's Chunk-Interaction Graph, computed from a graph's rows.

"Leveraging Inter-Chunk Interactions for Enhanced Retrieval in Large Language Model-Based
Question Answering" (IIER, Guo et al.) §3.1: structural edges (consecutive chunks of one
document, weight 1), semantic edges (each chunk to its top-k most similar chunks, weight =
cosine) and keyword edges (chunks sharing at least T keywords, weight = how many; T chosen per
collection by [`resolve_keyword_threshold`][llama_index_hiqa.retrievers.graph_edges.resolve_keyword_threshold]).
Pure functions over rows (documents, positions, keywords, unit vectors): which rows each
kind of edge links, by blocked matrix products for the top-k and a sparse keyword
co-occurrence product (no all-pairs Python loop).
[`ChunkInteractionGraph`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph]
owns its rows and edges and applies what these return ([`set_weight`][llama_index_hiqa.retrievers.graph_edges.set_weight] /
[`clear_weight`][llama_index_hiqa.retrievers.graph_edges.clear_weight]).
"""

from __future__ import annotations

import contextlib
import gc
from collections import defaultdict
from typing import (
    AbstractSet, DefaultDict, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, Union,
)

import networkx as nx
import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, MetadataMode
from scipy import sparse
from tqdm import tqdm

from llama_index_hiqa.errors import GraphBuildError
from llama_index_hiqa.models.defaults import resolve_embed_model

# Edge attribute names (one edge per node pair; a weight of 0 means "no such interaction").
STRUCTURAL = "structural"
SEMANTIC = "semantic"
KEYWORD = "keyword"
EDGE_KINDS = (STRUCTURAL, SEMANTIC, KEYWORD)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused for a build: the build allocates millions of small
    dicts (networkx edges), which the collector would rescan again and again without ever
    finding garbage."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def resolve_keyword_threshold(
    setting: Union[int, str], shared_counts: np.ndarray, n_chunks: int, max_degree: float
) -> int:
    """IIER's keyword threshold T for one collection.

    ``shared_counts`` holds, for every pair of chunks sharing a keyword, how many they share.
    A number is used as given; ``"auto"`` returns the smallest T >= 1 at which the keyword
    edges average at most ``max_degree`` per chunk. Short passages with a few named entities
    each (Wikipedia paragraphs) share one keyword rarely enough for T = 1; long chunks full of
    keywords (filings) need a larger T before keyword edges stop linking everything.

    Args:
        setting: ``keyword_threshold`` (a number, or ``"auto"``).
        shared_counts: how many keywords each linked pair of chunks shares.
        n_chunks: the number of chunks.
        max_degree: the most keyword edges per chunk on average (for ``"auto"``).

    Returns:
        T.
    """
    if setting != "auto":
        return int(setting)
    counts = np.asarray(shared_counts)
    if counts.size == 0 or n_chunks == 0:
        return 1
    for t in range(1, int(counts.max()) + 1):
        if 2.0 * np.count_nonzero(counts >= t) / n_chunks <= max_degree:
            return t
    return int(counts.max()) + 1


def embed_rows(nodes: List[BaseNode], embed_model: Optional[BaseEmbedding], show_progress: bool) -> np.ndarray:
    """Unit embedding rows of ``nodes``: ``node.embedding`` when set, else ``embed_model`` over
    the embedding view.

    Args:
        nodes: the chunks.
        embed_model: the embedding model (default: the pack's).
        show_progress: show the embedding progress bar.

    Returns:
        A float32 matrix, one unit row per node.

    Raises:
        GraphBuildError: the embeddings are not vectors of one dimension.
    """
    missing = [i for i, n in enumerate(nodes) if n.embedding is None]
    if missing:
        model = resolve_embed_model(embed_model)
        texts = [nodes[i].get_content(MetadataMode.EMBED) for i in missing]
        computed = model.get_text_embedding_batch(texts, show_progress=show_progress)
        filled = {i: v for i, v in zip(missing, computed)}
    else:
        filled = {}
    rows = [filled[i] if i in filled else n.embedding for i, n in enumerate(nodes)]
    try:
        matrix = np.asarray(rows, dtype=np.float32)
    except ValueError as exc:
        raise GraphBuildError(f"node embeddings have different dimensions: {exc}") from exc
    if matrix.ndim != 2:
        raise GraphBuildError("node embeddings must be vectors of one dimension")
    return unit_rows(matrix)


def document_chains(
    docs: Sequence[Optional[str]], positions: Sequence[Optional[int]], new: Iterable[int]
) -> Dict[str, List[int]]:
    """The rows of every document touched by ``new``, each document's in position order:
    what the structural edges chain (rows without a document or a position are in none).

    Args:
        docs: every row's document id.
        positions: every row's position in its document.
        new: the rows added.

    Returns:
        Document id -> its rows, in position order (documents in the order of their first row).
    """
    touched = {docs[i] for i in new if docs[i] is not None and positions[i] is not None}
    members: Dict[str, List[Tuple[int, int]]] = defaultdict(list)
    if not touched:
        return {}
    for i, (doc, pos) in enumerate(zip(docs, positions)):
        if doc is not None and doc in touched and pos is not None:
            members[doc].append((pos, i))
    # (position, row) pairs sort as a stable sort by position does: equal positions in row order.
    return {doc: [i for _, i in sorted(pairs)] for doc, pairs in members.items()}


def semantic_top_k(
    vectors: np.ndarray, knn_ids: np.ndarray, knn_sims: np.ndarray, start: int, k: int, block_size: int,
    show_progress: bool = False,
) -> Tuple[np.ndarray, np.ndarray]:
    """Every row's top-k cosine neighbours after rows ``start:`` were added: the new rows'
    lists, and the new rows entering the old rows' lists (``knn_ids`` / ``knn_sims``, the lists
    before, are not changed).

    Blocked matrix products (``block_size`` rows at a time) keep memory at
    ``block_size × n`` floats; the top k of a row are picked without a full sort.

    Args:
        vectors: the unit vectors, one row per chunk (old rows first).
        knn_ids: the old rows' neighbour rows (-1 where fewer exist).
        knn_sims: their cosines (-inf where fewer exist).
        start: the first new row.
        k: neighbours per row.
        block_size: the most rows per block of the product.
        show_progress: show a progress bar over the blocks.

    Returns:
        ``(ids, sims)``: ``(n, k)`` arrays, best first.
    """
    n = len(vectors)
    k_eff = min(k, n - 1)
    new_ids = np.full((n, k), -1, dtype=np.int64)
    new_sims = np.full((n, k), -np.inf, dtype=np.float32)
    if start:
        new_ids[:start, : knn_ids.shape[1]] = knn_ids
        new_sims[:start, : knn_sims.shape[1]] = knn_sims
    if k_eff <= 0:
        return new_ids, new_sims
    new_vecs = vectors[start:]
    n_new = n - start
    # Best new candidates for every old row (new rows can push old neighbours out).
    cand_old_ids = np.full((start, k_eff), -1, dtype=np.int64)
    cand_old_sims = np.full((start, k_eff), -np.inf, dtype=np.float32)
    # Rows per block: at most block_size, and at most ~4M similarities per block, so the
    # peak memory of the build stays flat as the corpus grows.
    rows_per_block = max(1, min(block_size, 4_000_000 // max(n, 1)))
    blocks: Iterable[int] = range(0, n, rows_per_block)
    if show_progress:
        blocks = tqdm(blocks, desc="semantic top-k", unit="block")
    for b0 in blocks:
        b1 = min(b0 + rows_per_block, n)
        sims = vectors[b0:b1] @ new_vecs.T  # (block, n_new)
        rows = np.arange(b0, b1)
        is_new = rows >= start
        sims[np.flatnonzero(is_new), rows[is_new] - start] = -np.inf  # no self-edges
        if b0 < start:  # old rows: their best new candidates
            hi = min(b1, start)
            part = sims[: hi - b0]
            kk = min(k_eff, n_new)
            top, top_s = _top_k_rows(part, kk, vectors, b0, start)
            cand_old_ids[b0:hi, :kk] = top + start
            cand_old_sims[b0:hi, :kk] = top_s
        if b1 > start:  # new rows: top-k over old and new columns
            lo = max(b0, start)
            part = sims[lo - b0 :]
            full = np.hstack([vectors[lo:b1] @ vectors[:start].T, part]) if start else part
            new_ids[lo:b1, :k_eff], new_sims[lo:b1, :k_eff] = _top_k_rows(full, k_eff, vectors, lo, 0)
    if start:
        merged_ids = np.concatenate([new_ids[:start], cand_old_ids], axis=1)
        merged_sims = np.concatenate([new_sims[:start], cand_old_sims], axis=1)
        order = np.argsort(-merged_sims, axis=1, kind="stable")[:, :k]
        new_ids[:start] = np.take_along_axis(merged_ids, order, axis=1)
        new_sims[:start] = np.take_along_axis(merged_sims, order, axis=1)
    return new_ids, new_sims


def knn_lists(
    ids: np.ndarray, sims: np.ndarray, rows: Iterable[int], min_similarity: float
) -> Dict[int, Dict[int, float]]:
    """The semantic edges each of ``rows`` asks for: its top-k rows at or above ``min_similarity``.

    Args:
        ids: every row's top-k rows (-1 where fewer exist).
        sims: their cosines.
        rows: the rows wanted.
        min_similarity: the smallest cosine that links.

    Returns:
        Row -> {neighbour row: cosine}.
    """
    keep = (ids >= 0) & np.isfinite(sims) & (sims >= min_similarity)
    ids_l, sims_l, keep_l = ids.tolist(), sims.tolist(), keep.tolist()
    return {
        r: {j: s for j, s, k in zip(ids_l[r], sims_l[r], keep_l[r]) if k} for r in rows
    }


def keyword_postings(keywords: Sequence[AbstractSet[str]]) -> DefaultDict[str, Set[int]]:
    """The rows of every keyword.

    Args:
        keywords: every row's edge keywords.

    Returns:
        Keyword -> the rows holding it.
    """
    postings: DefaultDict[str, Set[int]] = defaultdict(set)
    for i, words in enumerate(keywords):
        for w in words:
            postings[w].add(i)
    return postings


def shared_keyword_counts(
    keywords: Sequence[AbstractSet[str]],
    titles: Sequence[AbstractSet[str]],
    postings: Mapping[str, Set[int]],
    limit: float,
    title_mentions: bool,
) -> Optional[sparse.coo_matrix]:
    """How many keywords every pair of rows shares: a sparse chunk×keyword matrix product (no
    pair loop in Python), keywords held by more than ``limit`` rows left out as too common.

    Args:
        keywords: every row's edge keywords.
        titles: every row's document-title keywords.
        postings: keyword -> its rows ([`keyword_postings`][llama_index_hiqa.retrievers.graph_edges.keyword_postings]).
        limit: the most rows a keyword may be found in and still link them.
        title_mentions: a row naming another document's title shares that keyword with the
            other document's rows.

    Returns:
        The counts of the pairs ``i < j`` sharing a keyword (``None`` when no keyword links).
    """
    n = len(keywords)
    # A title keyword links only where some chunk of another document names it: its
    # document's chunks count among its postings for the "too common" limit.
    mentioned: Dict[str, int] = defaultdict(int)
    if title_mentions:
        for row_titles in titles:
            for w in row_titles:
                if w in postings:
                    mentioned[w] += 1
    vocab = {
        w: c for c, w in enumerate(w for w, p in postings.items() if len(p) + mentioned.get(w, 0) <= limit)
    }
    rows, cols = [], []
    for i, words in enumerate(keywords):
        for w in words:
            if w in vocab:
                rows.append(i)
                cols.append(vocab[w])
    if not rows:
        return None
    m = sparse.csr_matrix((np.ones(len(rows), np.int32), (rows, cols)), shape=(n, len(vocab)))
    product = m @ m.T
    if mentioned:
        # Chunk keywords never hold their own document's title words (the graph takes them
        # out), so m @ t.T is zero inside a document: only cross-document mentions are counted.
        t_rows, t_cols = [], []
        for i, row_titles in enumerate(titles):
            for w in row_titles:
                if w in vocab and w in mentioned:
                    t_rows.append(i)
                    t_cols.append(vocab[w])
        t = sparse.csr_matrix((np.ones(len(t_rows), np.int32), (t_rows, t_cols)), shape=(n, len(vocab)))
        cross = m @ t.T
        product = product + cross + cross.T
    return sparse.triu(product, k=1).tocoo()


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """``matrix`` (float32) with every row scaled to unit length, in place.

    Args:
        matrix: the rows.

    Returns:
        ``matrix``.
    """
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12
    return matrix


# A float32 product's entry can differ from the same pair's in another product by a few units
# in the last place (BLAS sums in a shape-dependent order): at most ~d x 6e-8 for unit vectors.
_CANDIDATE_MARGIN = 1e-4


def _top_k_rows(
    mat: np.ndarray, k: int, vectors: np.ndarray, row0: int, col0: int
) -> Tuple[np.ndarray, np.ndarray]:
    """Column indices and cosines of the k most similar columns of every row, best first.

    ``mat`` is the float32 product of ``vectors[row0:...]`` and ``vectors[col0:...]``; it
    only picks the candidates: the entries within [`_CANDIDATE_MARGIN`][llama_index_hiqa.retrievers.graph_edges._CANDIDATE_MARGIN] of each row's
    k-th largest. The candidates are then ranked on their cosine recomputed pair by pair in
    float64 (rounded to float32), which is the same whichever block computed the pair, so an
    incremental build ranks near-ties as a rebuild does; equal cosines go to the lower column.
    ``np.partition`` finds each row's k-th largest value (faster than ``argpartition`` and
    without its int64 matrix).
    """
    n_rows, n_cols = mat.shape
    kth = np.partition(mat, n_cols - k, axis=1)[:, n_cols - k]
    rows, cols = np.nonzero(mat >= (kth - _CANDIDATE_MARGIN)[:, None])
    exact = np.einsum(
        "ij,ij->i", vectors[row0 + rows].astype(np.float64), vectors[col0 + cols].astype(np.float64)
    ).astype(np.float32)
    exact[~np.isfinite(mat[rows, cols])] = -np.inf  # masked pairs (a row with itself) stay out
    order = np.lexsort((cols, -exact, rows))
    rows, cols, vals = rows[order], cols[order], exact[order]
    rank = np.arange(len(rows)) - np.searchsorted(rows, np.arange(n_rows))[rows]
    keep = (rank < k) & np.isfinite(vals)
    ids = np.full((n_rows, k), -1, dtype=np.int64)
    out = np.full((n_rows, k), -np.inf, dtype=np.float32)
    ids[rows[keep], rank[keep]] = cols[keep]
    out[rows[keep], rank[keep]] = vals[keep]
    return ids, out


def set_weight(G: nx.Graph, u: str, v: str, kind: str, weight: float) -> None:
    """Set one kind's weight of the edge ``u``-``v`` (the edge added, its other kinds 0, when
    missing and ``weight`` is not 0).

    Args:
        G: the graph.
        u: one node id.
        v: the other node id.
        kind: ``STRUCTURAL``, ``SEMANTIC`` or ``KEYWORD``.
        weight: the weight.
    """
    data = G.get_edge_data(u, v)
    if data is not None:
        data[kind] = weight
    elif weight:
        attrs: Dict[str, float] = {k: 0 for k in EDGE_KINDS}
        attrs[kind] = weight
        G.add_edge(u, v, **attrs)


def clear_weight(G: nx.Graph, u: str, v: str, kind: str) -> None:
    """Set one kind's weight of the edge ``u``-``v`` to 0, removing the edge when no kind is left.

    Args:
        G: the graph.
        u: one node id.
        v: the other node id.
        kind: ``STRUCTURAL``, ``SEMANTIC`` or ``KEYWORD``.
    """
    data = G.get_edge_data(u, v)
    if data is not None:
        data[kind] = 0
        if not any(data[k] for k in EDGE_KINDS):
            G.remove_edge(u, v)
