"""The edges of IIER's Chunk-Interaction Graph, computed over a graph's rows.

"Leveraging Inter-Chunk Interactions for Enhanced Retrieval in Large Language Model-Based
Question Answering" (IIER, Guo et al.) §3.1: structural edges (consecutive chunks of one
document, weight 1), semantic edges (each chunk to its top-k most similar chunks, weight =
cosine) and keyword edges (chunks sharing at least T keywords, weight = how many; T chosen per
collection by [`resolve_keyword_threshold`][llama_index_hiqa.retrievers.graph_edges.resolve_keyword_threshold]). Each function updates the edges of a
[`ChunkInteractionGraph`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph] (its rows:
ids, documents, positions, keywords, unit vectors) after rows were added: blocked matrix
products for the top-k, a sparse keyword co-occurrence product (no all-pairs Python loop).
"""

from __future__ import annotations

import contextlib
import gc
from collections import defaultdict
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import networkx as nx
import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, MetadataMode

from llama_index_hiqa.models.defaults import resolve_embed_model
from llama_index_hiqa.errors import GraphBuildError

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


# (Hot loops bind the private attributes to locals: pydantic resolves ``graph._x`` through a
# slow ``__getattr__``, which dominated the build time at 50k chunks.)


def update_structural(graph: Any, new: Iterable[int]) -> None:
    """Chain the chunks of every document touched by ``new`` in position order.

    Args:
        graph: the chunk graph.
        new: the rows added.
    """
    G, all_docs, positions, all_ids, index = graph._graph, graph._docs, graph._positions, graph._ids, graph._index
    docs = {all_docs[i] for i in new if all_docs[i] is not None and positions[i] is not None}
    if not docs:
        return
    members: Dict[str, List[int]] = defaultdict(list)
    for i, (doc, pos) in enumerate(zip(all_docs, positions)):
        if doc in docs and pos is not None:
            members[doc].append(i)
    for doc, idxs in members.items():
        idxs.sort(key=lambda i: positions[i])
        ids = [all_ids[i] for i in idxs]
        # A chunk inserted between two old ones breaks their adjacency: clear, then relink.
        for u in ids:
            for v in list(G[u]):
                if all_docs[index[v]] == doc:
                    _clear_weight(G, u, v, STRUCTURAL)
        for u, v in zip(ids, ids[1:]):
            _set_weight(G, u, v, STRUCTURAL, 1)


def update_semantic(graph: Any, start: int, show_progress: bool) -> None:
    """Top-k cosine neighbours for the new rows, and the new rows entering old top-k lists.

    Blocked matrix products (``block_size`` rows at a time) keep memory at
    ``block_size × n`` floats; ``argpartition`` picks the top k without a full sort.

    Args:
        graph: the chunk graph.
        start: the first new row.
        show_progress: show a progress bar over the blocks.
    """
    n, k = len(graph._ids), graph.semantic_top_k
    k_eff = min(k, n - 1)
    old_ids, old_sims = graph._knn_ids, graph._knn_sims
    new_ids = np.full((n, k), -1, dtype=np.int64)
    new_sims = np.full((n, k), -np.inf, dtype=np.float32)
    if start:
        new_ids[:start, : old_ids.shape[1]] = old_ids
        new_sims[:start, : old_sims.shape[1]] = old_sims
    if k_eff <= 0:
        graph._knn_ids, graph._knn_sims = new_ids, new_sims
        return
    vectors = graph._vectors
    new_vecs = vectors[start:]
    n_new = n - start
    # Best new candidates for every old row (new rows can push old neighbours out).
    cand_old_ids = np.full((start, k_eff), -1, dtype=np.int64)
    cand_old_sims = np.full((start, k_eff), -np.inf, dtype=np.float32)
    # Rows per block: at most block_size, and at most ~4M similarities per block, so the
    # peak memory of the build stays flat as the corpus grows.
    rows_per_block = max(1, min(graph.block_size, 4_000_000 // max(n, 1)))
    blocks = range(0, n, rows_per_block)
    if show_progress:
        from tqdm import tqdm

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
    graph._knn_ids, graph._knn_sims = new_ids, new_sims
    _apply_semantic(graph, old_ids, start)


def _knn_lists(graph: Any, ids: np.ndarray, sims: np.ndarray, rows: Iterable[int]) -> Dict[int, Dict[int, float]]:
    keep = (ids >= 0) & np.isfinite(sims) & (sims >= graph.min_similarity)
    ids_l, sims_l, keep_l = ids.tolist(), sims.tolist(), keep.tolist()
    return {
        r: {j: s for j, s, k in zip(ids_l[r], sims_l[r], keep_l[r]) if k} for r in rows
    }


def _apply_semantic(graph: Any, old_ids: np.ndarray, start: int) -> None:
    """Edges = union over i of (i, j in top-k(i)); touch only rows whose list changed."""
    G, ids = graph._graph, graph._ids
    n = len(ids)
    now = _knn_lists(graph, graph._knn_ids, graph._knn_sims, range(n))
    old = [{j for j in row if j >= 0} for row in old_ids[:start].tolist()]
    changed = [r for r in range(start) if set(now[r]) != old[r]]
    for r in changed:  # neighbours pushed out of r's list lose the edge unless r is in theirs
        for j in old[r] - set(now[r]):
            if r not in now[j]:
                _clear_weight(G, ids[r], ids[j], SEMANTIC)
    for r in list(changed) + list(range(start, n)):
        for j, s in now[r].items():
            _set_weight(G, ids[r], ids[j], SEMANTIC, round(s, 6))


def rebuild_keyword_edges(graph: Any) -> None:
    """Keyword edges from a sparse chunk×keyword matrix product (no pair loop in Python).

    Rebuilt on every ``add_nodes`` because which keywords are too common depends on the
    corpus size; the sparse product costs seconds even at 50k chunks.

    Args:
        graph: the chunk graph.
    """
    from scipy import sparse

    G, ids, all_keywords = graph._graph, graph._ids, graph._keywords
    n = len(ids)
    graph._keyword_index = keyword_index = defaultdict(set)
    for i, words in enumerate(all_keywords):
        for w in words:
            keyword_index[w].add(i)
    limit = max(graph.max_keyword_fraction * n, graph.min_common_count)
    # A title keyword links only where some chunk of another document names it: its
    # document's chunks count among its postings for the "too common" limit.
    mentioned: Dict[str, int] = defaultdict(int)
    if graph.title_mentions:
        for titles in graph._titles:
            for w in titles:
                if w in keyword_index:
                    mentioned[w] += 1
    vocab = {
        w: c for c, w in enumerate(w for w, p in keyword_index.items() if len(p) + mentioned.get(w, 0) <= limit)
    }
    rows, cols = [], []
    for i, words in enumerate(all_keywords):
        for w in words:
            if w in vocab:
                rows.append(i)
                cols.append(vocab[w])
    for u, v, data in list(G.edges(data=True)):
        if data.get(KEYWORD):
            _clear_weight(G, u, v, KEYWORD)
    if not rows:
        return
    m = sparse.csr_matrix((np.ones(len(rows), np.int32), (rows, cols)), shape=(n, len(vocab)))
    product = m @ m.T
    if mentioned:
        # Chunk keywords never hold their own document's title words (see _add_embedded), so
        # m @ t.T is zero inside a document: only cross-document mentions are counted.
        t_rows, t_cols = [], []
        for i, titles in enumerate(graph._titles):
            for w in titles:
                if w in vocab and w in mentioned:
                    t_rows.append(i)
                    t_cols.append(vocab[w])
        t = sparse.csr_matrix((np.ones(len(t_rows), np.int32), (t_rows, t_cols)), shape=(n, len(vocab)))
        cross = m @ t.T
        product = product + cross + cross.T
    shared = sparse.triu(product, k=1).tocoo()
    graph._threshold = resolve_keyword_threshold(graph.keyword_threshold, shared.data, n, graph.max_keyword_degree)
    keep = shared.data >= graph._threshold
    for i, j, c in zip(shared.row[keep].tolist(), shared.col[keep].tolist(), shared.data[keep].tolist()):
        _set_weight(G, ids[i], ids[j], KEYWORD, int(c))


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


def _set_weight(G: nx.Graph, u: str, v: str, kind: str, weight: float) -> None:
    data = G.get_edge_data(u, v)
    if data is not None:
        data[kind] = weight
    elif weight:
        attrs = {k: 0 for k in EDGE_KINDS}
        attrs[kind] = weight
        G.add_edge(u, v, **attrs)


def _clear_weight(G: nx.Graph, u: str, v: str, kind: str) -> None:
    data = G.get_edge_data(u, v)
    if data is not None:
        data[kind] = 0
        if not any(data[k] for k in EDGE_KINDS):
            G.remove_edge(u, v)
