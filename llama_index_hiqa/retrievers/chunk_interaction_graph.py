"""IIER's Chunk-Interaction Graph: chunks of all documents linked by three kinds of edge.

"Leveraging Inter-Chunk Interactions for Enhanced Retrieval in Large Language Model-Based
Question Answering" (IIER, Guo et al.) §3.1: the nodes are the chunks of all documents; an
edge carries three weights: structural (consecutive chunks of one document, weight 1),
semantic (each chunk to its top-k most similar chunks, weight = cosine; k = 5 in §4.3) and
keyword (chunks sharing more than two keywords, weight = size of the intersection; document
titles are not keywords).

:class:`ChunkInteractionGraph` builds it with a blocked matrix top-k and a sparse keyword
co-occurrence product (no all-pairs Python loop), extends it incrementally
(:meth:`~ChunkInteractionGraph.add_nodes`), drops chunks (:meth:`~ChunkInteractionGraph.without_nodes`)
and saves it as rows (``node_records`` / ``edge_records`` / ``from_records``: a folder's files
with ``persist`` / ``load``, or the PostgreSQL store's tables). Text stays
in the docstore; the graph keeps ids, document/position, keywords and the embedding matrix,
and answers by node id or by row (the row of a node in :attr:`node_ids` / :attr:`vectors`),
which is what the evidence-chain search of :mod:`llama_index_hiqa.retrievers.chunk_graph`
walks on.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
from collections import defaultdict
from pathlib import Path
from typing import (
    Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Union,
)

import networkx as nx
import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import ConfigDict, PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode

from llama_index_hiqa import schema
from llama_index_hiqa.defaults import resolve_embed_model
from llama_index_hiqa.errors import GraphBuildError, UnknownNodeError
from llama_index_hiqa.retrievers.settings import InteractionGraphSettings
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor, normalize_keyword

logger = logging.getLogger(__name__)

KeywordFn = Callable[[str], List[str]]

GRAPH_FILE = "chunk_graph.json"
VECTORS_FILE = "chunk_graph_vectors.npz"

# Edge attribute names (one edge per node pair; a weight of 0 means "no such interaction").
STRUCTURAL = "structural"
SEMANTIC = "semantic"
KEYWORD = "keyword"
_EDGE_KINDS = (STRUCTURAL, SEMANTIC, KEYWORD)


# --- keywords ------------------------------------------------------------------------


def _normalised_set(keywords: Iterable[str]) -> Set[str]:
    """Keywords in the pack's one matching form (``normalize_keyword``), empties dropped."""
    return {k for k in (normalize_keyword(w) for w in keywords) if k}


def default_keyword_fn() -> KeywordFn:
    """Question keywords from the pack's ``CriticalKeywordExtractor`` (NER + rules)."""
    return CriticalKeywordExtractor().extract_query


_title_rules: Optional[CriticalKeywordExtractor] = None


@functools.lru_cache(maxsize=65536)
def title_keywords(title: str) -> FrozenSet[str]:
    """What a document title contributes as keywords: the whole title and its identifier/year
    tokens (the extractor's rules, no NER), e.g. ``"3M_2018_10K"`` -> {3m201810k, 3m, 2018, 10k}.
    ``CriticalKeywordExtractor(include_document_keywords=True)`` copies these onto every chunk;
    IIER keeps them out of the keyword edges."""
    global _title_rules
    if _title_rules is None:
        _title_rules = CriticalKeywordExtractor(use_ner=False)
    words = _normalised_set([title])
    if title:
        words |= set(_title_rules.extract(title.replace("_", " ")))
    return frozenset(words)


# --- the graph -----------------------------------------------------------------------


def resolve_keyword_threshold(
    setting: Union[int, str], shared_counts: np.ndarray, n_chunks: int, max_degree: float
) -> int:
    """IIER's keyword threshold T for one collection.

    ``shared_counts`` holds, for every pair of chunks sharing a keyword, how many they share.
    A number is used as given; ``"auto"`` returns the smallest T >= 1 at which the keyword
    edges average at most ``max_degree`` per chunk. Short passages with a few named entities
    each (Wikipedia paragraphs) share one keyword rarely enough for T = 1; long chunks full of
    keywords (filings) need a larger T before keyword edges stop linking everything.
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


class ChunkInteractionGraph(InteractionGraphSettings):
    """Chunks as nodes (by docstore id); structural, semantic and keyword edges (IIER §3.1).

    >>> graph = ChunkInteractionGraph.from_nodes(nodes)        # nodes carry embeddings or
    >>> graph.persist("./storage")                             # the embed model computes them
    >>> graph = ChunkInteractionGraph.load("./storage")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    _graph: nx.Graph = PrivateAttr(default_factory=nx.Graph)
    _ids: List[str] = PrivateAttr(default_factory=list)
    _index: Dict[str, int] = PrivateAttr(default_factory=dict)
    _vectors: np.ndarray = PrivateAttr(default_factory=lambda: np.zeros((0, 0), np.float32))
    _knn_ids: np.ndarray = PrivateAttr(default_factory=lambda: np.zeros((0, 0), np.int64))
    _knn_sims: np.ndarray = PrivateAttr(default_factory=lambda: np.zeros((0, 0), np.float32))
    _keywords: List[Set[str]] = PrivateAttr(default_factory=list)  # edge keywords, no title
    _titles: List[Set[str]] = PrivateAttr(default_factory=list)  # title keywords
    _docs: List[Optional[str]] = PrivateAttr(default_factory=list)
    _positions: List[Optional[int]] = PrivateAttr(default_factory=list)
    _keyword_index: Dict[str, Set[int]] = PrivateAttr(default_factory=lambda: defaultdict(set))
    _threshold: Optional[int] = PrivateAttr(default=None)

    # --- construction -------------------------------------------------------------------
    @classmethod
    def from_nodes(
        cls,
        nodes: Sequence[BaseNode],
        embed_model: Optional[BaseEmbedding] = None,
        keyword_fn: Optional[KeywordFn] = None,
        show_progress: bool = False,
        **settings: Any,
    ) -> "ChunkInteractionGraph":
        """Build the graph over ``nodes`` (see :meth:`add_nodes`)."""
        graph = cls(**settings)
        graph.add_nodes(nodes, embed_model=embed_model, keyword_fn=keyword_fn, show_progress=show_progress)
        return graph

    def add_nodes(
        self,
        nodes: Sequence[BaseNode],
        embed_model: Optional[BaseEmbedding] = None,
        keyword_fn: Optional[KeywordFn] = None,
        show_progress: bool = False,
    ) -> None:
        """Add chunks and their edges; equivalent to rebuilding over old + new chunks.

        Embeddings: ``node.embedding`` when set, else ``embed_model`` (default: the pack's
        embedding default) over the embedding view. Keywords: ``schema.CRITICAL_KEYWORDS``,
        else ``keyword_fn(text)`` when given, else none.
        """
        nodes = list(nodes)
        if not nodes:
            if not self._ids:
                raise GraphBuildError("cannot build a chunk graph from no nodes")
            return
        seen: Set[str] = set()
        for node in nodes:
            if node.node_id in self._index or node.node_id in seen:
                raise GraphBuildError(f"node id {node.node_id!r} is already in the chunk graph")
            seen.add(node.node_id)
        vectors = self._embed(nodes, embed_model, show_progress)
        # The build allocates millions of small dicts (networkx edges); the cyclic GC would
        # rescan them all again and again without ever finding garbage.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._add_embedded(nodes, vectors, keyword_fn, show_progress)
        finally:
            if gc_was_enabled:
                gc.enable()

    def _add_embedded(
        self, nodes: List[BaseNode], vectors: np.ndarray, keyword_fn: Optional[KeywordFn], show_progress: bool
    ) -> None:
        if self._vectors.size and vectors.shape[1] != self._vectors.shape[1]:
            raise GraphBuildError(
                f"embedding dimension {vectors.shape[1]} does not match the graph's {self._vectors.shape[1]}"
            )
        start = len(self._ids)
        for node in nodes:
            title_words = title_keywords(schema.get_document_title(node))
            raw = schema.get_critical_keywords(node)
            if not raw and keyword_fn is not None:
                raw = keyword_fn(node.get_content(MetadataMode.NONE))
            # IIER: titles describe the whole document, not the chunk, and would link every
            # chunk of a document to every other; they are not keywords.
            self._append_row(
                node.node_id, schema.get_document_id(node), schema.get_position(node), title_words,
                _normalised_set(raw) - title_words,
            )
        self._vectors = vectors if not self._vectors.size else np.vstack([self._vectors, vectors])
        self._update_structural(range(start, len(self._ids)))
        self._update_semantic(start, show_progress)
        self._rebuild_keyword_edges()

    def without_nodes(self, node_ids: Iterable[str]) -> "ChunkInteractionGraph":
        """A graph over the other chunks, rows in the same order, with every edge recomputed as
        a rebuild over them would make it (which neighbours, chains and keyword threshold
        remain depends on all of them; the cost is a rebuild's, without re-embedding)."""
        drop = set(node_ids)
        keep = [i for i, node_id in enumerate(self._ids) if node_id not in drop]
        graph = type(self)(**self.model_dump())
        for i in keep:
            graph._append_row(self._ids[i], self._docs[i], self._positions[i], self._titles[i], self._keywords[i])
        if not keep:
            return graph
        graph._vectors = self._vectors[keep]
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            graph._update_structural(range(len(keep)))
            graph._update_semantic(0, show_progress=False)
            graph._rebuild_keyword_edges()
        finally:
            if gc_was_enabled:
                gc.enable()
        return graph

    def _append_row(
        self, node_id: str, doc: Optional[str], position: Optional[int], titles: Set[str], keywords: Set[str]
    ) -> None:
        self._index[node_id] = len(self._ids)
        self._ids.append(node_id)
        self._docs.append(doc)
        self._positions.append(position)
        self._titles.append(titles)
        self._keywords.append(keywords)
        self._graph.add_node(node_id)

    def _embed(self, nodes: List[BaseNode], embed_model: Optional[BaseEmbedding], show_progress: bool) -> np.ndarray:
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

    # --- edges --------------------------------------------------------------------------
    # (Hot loops bind the private attributes to locals: pydantic resolves ``self._x`` through a
    # slow ``__getattr__``, which dominated the build time at 50k chunks.)

    def _update_structural(self, new: Iterable[int]) -> None:
        """Chain the chunks of every document touched by ``new`` in position order."""
        G, all_docs, positions, all_ids, index = self._graph, self._docs, self._positions, self._ids, self._index
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

    def _update_semantic(self, start: int, show_progress: bool) -> None:
        """Top-k cosine neighbours for the new rows, and the new rows entering old top-k lists.

        Blocked matrix products (``block_size`` rows at a time) keep memory at
        ``block_size × n`` floats; ``argpartition`` picks the top k without a full sort.
        """
        n, k = len(self._ids), self.semantic_top_k
        k_eff = min(k, n - 1)
        old_ids, old_sims = self._knn_ids, self._knn_sims
        new_ids = np.full((n, k), -1, dtype=np.int64)
        new_sims = np.full((n, k), -np.inf, dtype=np.float32)
        if start:
            new_ids[:start, : old_ids.shape[1]] = old_ids
            new_sims[:start, : old_sims.shape[1]] = old_sims
        if k_eff <= 0:
            self._knn_ids, self._knn_sims = new_ids, new_sims
            return
        vectors = self._vectors
        new_vecs = vectors[start:]
        n_new = n - start
        # Best new candidates for every old row (new rows can push old neighbours out).
        cand_old_ids = np.full((start, k_eff), -1, dtype=np.int64)
        cand_old_sims = np.full((start, k_eff), -np.inf, dtype=np.float32)
        # Rows per block: at most block_size, and at most ~4M similarities per block, so the
        # peak memory of the build stays flat as the corpus grows.
        rows_per_block = max(1, min(self.block_size, 4_000_000 // max(n, 1)))
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
        self._knn_ids, self._knn_sims = new_ids, new_sims
        self._apply_semantic(old_ids, start)

    def _knn_lists(self, ids: np.ndarray, sims: np.ndarray, rows: Iterable[int]) -> Dict[int, Dict[int, float]]:
        keep = (ids >= 0) & np.isfinite(sims) & (sims >= self.min_similarity)
        ids_l, sims_l, keep_l = ids.tolist(), sims.tolist(), keep.tolist()
        return {
            r: {j: s for j, s, k in zip(ids_l[r], sims_l[r], keep_l[r]) if k} for r in rows
        }

    def _apply_semantic(self, old_ids: np.ndarray, start: int) -> None:
        """Edges = union over i of (i, j in top-k(i)); touch only rows whose list changed."""
        G, ids = self._graph, self._ids
        n = len(ids)
        now = self._knn_lists(self._knn_ids, self._knn_sims, range(n))
        old = [{j for j in row if j >= 0} for row in old_ids[:start].tolist()]
        changed = [r for r in range(start) if set(now[r]) != old[r]]
        for r in changed:  # neighbours pushed out of r's list lose the edge unless r is in theirs
            for j in old[r] - set(now[r]):
                if r not in now[j]:
                    _clear_weight(G, ids[r], ids[j], SEMANTIC)
        for r in list(changed) + list(range(start, n)):
            for j, s in now[r].items():
                _set_weight(G, ids[r], ids[j], SEMANTIC, round(s, 6))

    def _rebuild_keyword_edges(self) -> None:
        """Keyword edges from a sparse chunk×keyword matrix product (no pair loop in Python).

        Rebuilt on every ``add_nodes`` because which keywords are too common depends on the
        corpus size; the sparse product costs seconds even at 50k chunks.
        """
        from scipy import sparse

        G, ids, all_keywords = self._graph, self._ids, self._keywords
        n = len(ids)
        self._keyword_index = keyword_index = defaultdict(set)
        for i, words in enumerate(all_keywords):
            for w in words:
                keyword_index[w].add(i)
        limit = max(self.max_keyword_fraction * n, self.min_common_count)
        # A title keyword links only where some chunk of another document names it: its
        # document's chunks count among its postings for the "too common" limit.
        mentioned: Dict[str, int] = defaultdict(int)
        if self.title_mentions:
            for titles in self._titles:
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
            for i, titles in enumerate(self._titles):
                for w in titles:
                    if w in vocab and w in mentioned:
                        t_rows.append(i)
                        t_cols.append(vocab[w])
            t = sparse.csr_matrix((np.ones(len(t_rows), np.int32), (t_rows, t_cols)), shape=(n, len(vocab)))
            cross = m @ t.T
            product = product + cross + cross.T
        shared = sparse.triu(product, k=1).tocoo()
        self._threshold = resolve_keyword_threshold(self.keyword_threshold, shared.data, n, self.max_keyword_degree)
        keep = shared.data >= self._threshold
        for i, j, c in zip(shared.row[keep].tolist(), shared.col[keep].tolist(), shared.data[keep].tolist()):
            _set_weight(G, ids[i], ids[j], KEYWORD, int(c))

    # --- reading ------------------------------------------------------------------------
    @property
    def resolved_keyword_threshold(self) -> Optional[int]:
        """The T in use (``keyword_threshold`` itself, or what 'auto' chose); ``None`` before
        any keyword edge was built."""
        return self._threshold

    @property
    def graph(self) -> nx.Graph:
        """The networkx graph (nodes = chunk ids; edge attrs structural/semantic/keyword)."""
        return self._graph

    @property
    def node_ids(self) -> List[str]:
        return list(self._ids)

    @property
    def vectors(self) -> np.ndarray:
        """L2-normalised embeddings, one row per node in ``node_ids`` order."""
        return self._vectors

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._index

    def index_of(self, node_id: str) -> int:
        try:
            return self._index[node_id]
        except KeyError:
            raise UnknownNodeError(f"node id {node_id!r} is not in the chunk graph") from None

    def keywords(self, node_id: str) -> Set[str]:
        """The node's edge keywords (normalised; the document title removed)."""
        return set(self._keywords[self.index_of(node_id)])

    def title_keywords(self, node_id: str) -> Set[str]:
        """Keywords of the node's document title (kept out of the edges, used for seeds)."""
        return set(self._titles[self.index_of(node_id)])

    def document_id(self, node_id: str) -> Optional[str]:
        return self._docs[self.index_of(node_id)]

    def nodes_with_keyword(self, keyword: str) -> Set[str]:
        return {self._ids[i] for i in self._keyword_index.get(normalize_keyword(keyword), ())}

    def edge(self, u: str, v: str) -> Dict[str, float]:
        """The three weights between two chunks (all 0 when not linked)."""
        data = self._graph.get_edge_data(u, v) or {}
        return {k: data.get(k, 0) for k in _EDGE_KINDS}

    def edge_counts(self) -> Dict[str, int]:
        counts = {k: 0 for k in _EDGE_KINDS}
        for _, _, data in self._graph.edges(data=True):
            for k in _EDGE_KINDS:
                counts[k] += bool(data.get(k))
        counts["edges"] = self._graph.number_of_edges()
        return counts

    # --- by row (the evidence-chain search works on rows: ints, not id strings) ---------
    @property
    def row_keywords(self) -> Sequence[Set[str]]:
        """Edge keywords of every row, in ``node_ids`` order (read-only: the graph's own)."""
        return self._keywords

    @property
    def row_title_keywords(self) -> Sequence[Set[str]]:
        """Document-title keywords of every row, in ``node_ids`` order (read-only)."""
        return self._titles

    def node_id_at(self, row: int) -> str:
        """The node id of a row."""
        return self._ids[row]

    def neighbours(self, row: int) -> Dict[int, Mapping[str, float]]:
        """The rows linked to ``row`` and their edge weights (structural, semantic, keyword)."""
        index = self._index
        return {index[v]: data for v, data in self._graph[self._ids[row]].items()}

    def shortest_path_rows(self, source: int, target: int) -> Optional[List[int]]:
        """Rows of a shortest path from ``source`` to ``target`` (both included); ``None``
        when they are not connected."""
        try:
            path = nx.shortest_path(self._graph, self._ids[source], self._ids[target])
        except nx.NetworkXNoPath:
            return None
        return [self._index[v] for v in path]

    # --- persistence --------------------------------------------------------------------
    # One row format for every store: a folder (persist/load) and a database table.
    def node_records(self) -> List[Dict[str, Any]]:
        """One record per row, in row order: id, document id, position, title keywords and
        edge keywords (sorted)."""
        return [
            {
                "id": node_id,
                schema.DOCUMENT_ID: self._docs[i],
                schema.POSITION: self._positions[i],
                "title_keywords": sorted(self._titles[i]),
                "keywords": sorted(self._keywords[i]),
            }
            for i, node_id in enumerate(self._ids)
        ]

    def edge_records(self) -> List[Tuple[str, str, float, float, float]]:
        """``(u, v, structural, semantic, keyword)`` per linked pair."""
        return [(u, v, d.get(STRUCTURAL, 0), d.get(SEMANTIC, 0), d.get(KEYWORD, 0)) for u, v, d in self._graph.edges(data=True)]

    @property
    def knn(self) -> Tuple[np.ndarray, np.ndarray]:
        """Every row's semantic top-k (rows, cosines; -1 / -inf where fewer exist): what
        :meth:`add_nodes` updates incrementally."""
        return self._knn_ids, self._knn_sims

    @classmethod
    def from_records(
        cls,
        settings: Mapping[str, Any],
        keyword_threshold: Optional[int],
        nodes: Iterable[Mapping[str, Any]],
        edges: Iterable[Sequence[Any]],
        vectors: np.ndarray,
        knn_ids: np.ndarray,
        knn_sims: np.ndarray,
    ) -> "ChunkInteractionGraph":
        """The graph saved as :meth:`node_records`, :meth:`edge_records`, :attr:`vectors`
        (unit rows) and :attr:`knn`, nothing recomputed."""
        # A graph saved before title_mentions existed was built without them: keep its edges' rule.
        graph = cls(**{"title_mentions": False, **settings})
        graph._threshold = keyword_threshold
        for row in nodes:
            graph._append_row(
                row["id"], row[schema.DOCUMENT_ID], row[schema.POSITION], set(row["title_keywords"]), set(row["keywords"])
            )
            for w in row["keywords"]:
                graph._keyword_index[w].add(len(graph._ids) - 1)
        G = graph._graph
        for u, v, st, se, kw in edges:
            G.add_edge(u, v, **{STRUCTURAL: st, SEMANTIC: se, KEYWORD: kw})
        graph._vectors = np.asarray(vectors, dtype=np.float32)
        graph._knn_ids, graph._knn_sims = np.asarray(knn_ids, dtype=np.int64), np.asarray(knn_sims, dtype=np.float32)
        return graph

    def persist(self, persist_dir: Union[str, Path]) -> None:
        """Write ``chunk_graph.json`` (settings, nodes, edges keyed by node id) and the vectors."""
        folder = Path(persist_dir)
        folder.mkdir(parents=True, exist_ok=True)
        payload = {
            "format": "llama_index_hiqa.chunk_graph/1",
            "settings": self.model_dump(),
            "resolved_keyword_threshold": self._threshold,
            "nodes": self.node_records(),
            "edges": [list(edge) for edge in self.edge_records()],
        }
        (folder / GRAPH_FILE).write_text(json.dumps(payload), encoding="utf-8")
        np.savez_compressed(
            folder / VECTORS_FILE, vectors=self._vectors, knn_ids=self._knn_ids, knn_sims=self._knn_sims
        )

    @classmethod
    def load(cls, persist_dir: Union[str, Path]) -> "ChunkInteractionGraph":
        folder = Path(persist_dir)
        try:
            payload = json.loads((folder / GRAPH_FILE).read_text(encoding="utf-8"))
            arrays = np.load(folder / VECTORS_FILE)
        except (OSError, ValueError) as exc:
            raise GraphBuildError(f"no readable chunk graph in {folder}: {exc}") from exc
        return cls.from_records(
            payload["settings"], payload.get("resolved_keyword_threshold"), payload["nodes"], payload["edges"],
            arrays["vectors"], arrays["knn_ids"], arrays["knn_sims"],
        )


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """``matrix`` (float32) with every row scaled to unit length, in place."""
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
    only picks the candidates: the entries within :data:`_CANDIDATE_MARGIN` of each row's
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
        attrs = {k: 0 for k in _EDGE_KINDS}
        attrs[kind] = weight
        G.add_edge(u, v, **attrs)


def _clear_weight(G: nx.Graph, u: str, v: str, kind: str) -> None:
    data = G.get_edge_data(u, v)
    if data is not None:
        data[kind] = 0
        if not any(data[k] for k in _EDGE_KINDS):
            G.remove_edge(u, v)
