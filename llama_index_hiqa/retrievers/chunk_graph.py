"""IIER: a chunk-interaction graph and an evidence-chain retriever over it.

IIER paper ("Leveraging Inter-Chunk Interactions for Enhanced Retrieval
in Large Language Model-Based Question Answering" (IIER, Guo et al.)) §3.1 builds a Chunk-Interaction
Graph (CIG) whose nodes are the chunks of all documents and whose edges carry three weights:
structural (consecutive chunks of one document, weight 1), semantic (each chunk to its top-k
most similar chunks, weight = cosine; k = 5 in §4.3) and keyword (chunks sharing more than two
keywords, weight = size of the intersection; document titles are not keywords). §3.2 retrieves
by selecting seed chunks that greedily cover the question's keywords (prompt A.1) and walking
from each seed up to L = 5 hops, each hop moving to the neighbour a scorer rates best; the
chains are returned in traversal order so the LLM reads the reasoning path.

* :class:`ChunkInteractionGraph` — the graph (networkx), built with blocked matrix top-k and a
  sparse keyword co-occurrence product (no all-pairs Python loop), incrementally extendable
  with :meth:`~ChunkInteractionGraph.add_nodes`, saved with ``persist`` / ``load``. Text stays
  in the docstore; the graph keeps ids, document/position, keywords and the embedding matrix.
* :class:`ChunkGraphRetriever` — a LlamaIndex ``BaseRetriever`` (drops into any query engine)
  with a training-free scorer by default and a trainable one (:meth:`ChunkGraphRetriever.fit`).

Keywords are read from ``schema.CRITICAL_KEYWORDS`` in node metadata (written by the
``CriticalKeywordExtractor`` transform); for nodes without them, and for the question when no
LLM is given, a keyword function extracts them.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Literal, Tuple, Union

import networkx as nx
import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from llama_index.core.llms import LLM
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import (
    BaseNode,
    MetadataMode,
    NodeWithScore,
    QueryBundle,
    TextNode,
)
from llama_index.core.storage.docstore import BaseDocumentStore

from llama_index_hiqa import schema
from llama_index_hiqa.defaults import resolve_embed_model, resolve_llm
from llama_index_hiqa.errors import GraphBuildError, LLMOutputError, UnknownNodeError
from llama_index_hiqa.transforms.critical_keywords import (
    QUERY_KEYWORD_PROMPT,
    CriticalKeywordExtractor,
    normalize_keyword,
    parse_keyword_list,
)
from llama_index_hiqa.retrievers.chain_scorers import (
    N_FEATURES,
    ChainScorer,
    DefaultChainScorer,
    TrainedChainScorer,
)

logger = logging.getLogger(__name__)

KeywordFn = Callable[[str], List[str]]

# IIER appendix A.1 lives with the keyword extractor (one copy of the prompt in the pack).
QUESTION_KEYWORDS_PROMPT = QUERY_KEYWORD_PROMPT

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


class ChunkInteractionGraph(BaseModel):
    """Chunks as nodes (by docstore id); structural, semantic and keyword edges (IIER §3.1).

    >>> graph = ChunkInteractionGraph.from_nodes(nodes)        # nodes carry embeddings or
    >>> graph.persist("./storage")                             # the embed model computes them
    >>> graph = ChunkInteractionGraph.load("./storage")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    semantic_top_k: int = Field(
        default=5, description="Semantic edges from each chunk to its k most similar chunks (paper: 5)."
    )
    min_similarity: float = Field(
        default=0.0, description="Semantic edges below this cosine are not added."
    )
    keyword_threshold: Union[int, Literal["auto"]] = Field(
        default="auto",
        description="Keyword edge when two chunks share at least this many keywords (paper: more "
        "than two, T = 3). 'auto': the smallest T whose keyword edges average at most "
        "max_keyword_degree per chunk, read from the collection's own shared-keyword counts.",
    )
    max_keyword_degree: float = Field(
        default=20.0,
        gt=0,
        description="For keyword_threshold='auto': most keyword edges per chunk on average (4x the "
        "paper's 5 semantic neighbours), so keyword edges link bridge entities without "
        "flooding the walk.",
    )
    max_keyword_fraction: float = Field(
        default=0.01,
        description="Keywords found in more than this fraction of the chunks are too common to link chunks.",
    )
    min_common_count: int = Field(
        default=20,
        description="...but a keyword is only ever 'too common' above this many chunks (small corpora).",
    )
    block_size: int = Field(
        default=1024,
        description="Most rows per block of the top-k similarity product (also capped at ~4M "
        "similarities per block, which bounds the build's memory).",
    )

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
        for offset, node in enumerate(nodes):
            idx = start + offset
            self._ids.append(node.node_id)
            self._index[node.node_id] = idx
            title_words = title_keywords(schema.get_document_title(node))
            self._titles.append(title_words)
            self._docs.append(schema.get_document_id(node))
            self._positions.append(schema.get_position(node))
            raw = schema.get_critical_keywords(node)
            if not raw and keyword_fn is not None:
                raw = keyword_fn(node.get_content(MetadataMode.NONE))
            # IIER: titles describe the whole document, not the chunk, and would link every
            # chunk of a document to every other; they are not keywords.
            self._keywords.append(_normalised_set(raw) - title_words)
            self._graph.add_node(node.node_id)
        self._vectors = vectors if not self._vectors.size else np.vstack([self._vectors, vectors])
        self._update_structural(range(start, len(self._ids)))
        self._update_semantic(start, show_progress)
        self._rebuild_keyword_edges()

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
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12
        return matrix

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
        new_vecs = self._vectors[start:]
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
            sims = self._vectors[b0:b1] @ new_vecs.T  # (block, n_new)
            rows = np.arange(b0, b1)
            is_new = rows >= start
            sims[np.flatnonzero(is_new), rows[is_new] - start] = -np.inf  # no self-edges
            if b0 < start:  # old rows: their best new candidates
                hi = min(b1, start)
                part = sims[: hi - b0]
                kk = min(k_eff, n_new)
                top, top_s = _top_k_rows(part, kk)
                cand_old_ids[b0:hi, :kk] = top + start
                cand_old_sims[b0:hi, :kk] = top_s
            if b1 > start:  # new rows: top-k over old and new columns
                lo = max(b0, start)
                part = sims[lo - b0 :]
                full = np.hstack([self._vectors[lo:b1] @ self._vectors[:start].T, part]) if start else part
                new_ids[lo:b1, :k_eff], new_sims[lo:b1, :k_eff] = _top_k_rows(full, k_eff)
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
        vocab = {w: c for c, w in enumerate(w for w, p in keyword_index.items() if len(p) <= limit)}
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
        shared = sparse.triu(m @ m.T, k=1).tocoo()
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

    # --- persistence --------------------------------------------------------------------
    def persist(self, persist_dir: Union[str, Path]) -> None:
        """Write ``chunk_graph.json`` (settings, nodes, edges keyed by node id) and the vectors."""
        folder = Path(persist_dir)
        folder.mkdir(parents=True, exist_ok=True)
        payload = {
            "format": "llama_index_hiqa.chunk_graph/1",
            "settings": self.model_dump(),
            "resolved_keyword_threshold": self._threshold,
            "nodes": [
                {
                    "id": node_id,
                    schema.DOCUMENT_ID: self._docs[i],
                    schema.POSITION: self._positions[i],
                    "title_keywords": sorted(self._titles[i]),
                    "keywords": sorted(self._keywords[i]),
                }
                for i, node_id in enumerate(self._ids)
            ],
            "edges": [
                [u, v, d.get(STRUCTURAL, 0), d.get(SEMANTIC, 0), d.get(KEYWORD, 0)]
                for u, v, d in self._graph.edges(data=True)
            ],
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
        graph = cls(**payload["settings"])
        graph._threshold = payload.get("resolved_keyword_threshold")
        for i, row in enumerate(payload["nodes"]):
            graph._ids.append(row["id"])
            graph._index[row["id"]] = i
            graph._docs.append(row[schema.DOCUMENT_ID])
            graph._positions.append(row[schema.POSITION])
            graph._titles.append(set(row["title_keywords"]))
            graph._keywords.append(set(row["keywords"]))
            for w in row["keywords"]:
                graph._keyword_index[w].add(i)
            graph._graph.add_node(row["id"])
        for u, v, st, se, kw in payload["edges"]:
            graph._graph.add_edge(u, v, **{STRUCTURAL: st, SEMANTIC: se, KEYWORD: kw})
        graph._vectors = arrays["vectors"].astype(np.float32)
        graph._knn_ids, graph._knn_sims = arrays["knn_ids"], arrays["knn_sims"]
        return graph


# --- the retriever -------------------------------------------------------------------


class ChainSearchSettings(BaseModel):
    """Settings of the evidence-chain search (IIER §3.2, §4.3)."""

    max_hops: int = Field(default=5, description="Hops per chain after the seed (paper: path length 5).")
    max_nodes: int = Field(default=10, description="Budget: total nodes returned over all chains.")
    max_seeds: int = Field(default=5, description="At most this many seeds (chains) per question.")
    vector_seeds: int = Field(
        default=1,
        description="Top vector hits added as seeds after the keyword seeds (paper: only when no "
        "keyword matches; 1 keeps the best dense hit even when keywords mislead).",
    )
    title_keywords_for_seeds: bool = Field(
        default=True,
        description="Seed matching also matches question keywords against chunk document titles "
        "(titles are excluded from keyword edges only, as the paper argues for graph density).",
    )
    max_candidates_per_keyword: int = Field(
        default=100,
        description="Seed candidates per question keyword: a keyword in more chunks contributes "
        "only its chunks most similar to the question.",
    )
    merge_chains: bool = Field(default=False, description="Return each chain as one merged node.")
    fill_budget: bool = Field(
        default=True,
        description="When the chains end before max_nodes, fill the rest with the best vector hits "
        "not yet returned (each a one-node chain), so the budget is used as with vector top-k.",
    )


class ChunkGraphRetriever(BaseRetriever):
    """IIER evidence-chain retriever over a :class:`ChunkInteractionGraph`.

    >>> retriever = ChunkGraphRetriever.from_nodes(nodes, max_nodes=10)
    >>> query_engine = RetrieverQueryEngine.from_args(retriever)

    Output: the chains' nodes in traversal order (``schema.CHAIN_ID`` / ``schema.CHAIN_HOP`` in
    metadata), deduplicated across chains; the budget is filled hop by hop across chains
    (every seed first, then every chain's first hop, ...) so one long chain cannot crowd out
    the other seeds, then the nodes are listed chain by chain.
    """

    def __init__(
        self,
        graph: ChunkInteractionGraph,
        docstore: Optional[BaseDocumentStore] = None,
        nodes: Optional[Sequence[BaseNode]] = None,
        embed_model: Optional[BaseEmbedding] = None,
        llm: Optional[LLM] = None,
        keyword_fn: Optional[KeywordFn] = None,
        scorer: Optional[ChainScorer] = None,
        callback_manager: Any = None,
        verbose: bool = False,
        **settings: Any,
    ) -> None:
        if docstore is None and nodes is None:
            raise ValueError("ChunkGraphRetriever needs the docstore (or the nodes) holding the text")
        self.graph = graph
        self.docstore = docstore
        # Nodes given directly are looked up in a dict: building a SimpleDocumentStore
        # serialises every node (about a minute at 50k chunks) for nothing.
        self._nodes: Dict[str, BaseNode] = {n.node_id: n for n in nodes} if docstore is None else {}
        self.settings = ChainSearchSettings(**settings)
        self.scorer: ChainScorer = scorer or DefaultChainScorer()
        self._embed_model = embed_model
        self._llm = resolve_llm(llm)
        self._keyword_fn = keyword_fn
        self._seed_keywords: Optional[List[Set[str]]] = None
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_nodes(
        cls,
        nodes: Sequence[BaseNode],
        embed_model: Optional[BaseEmbedding] = None,
        keyword_fn: Optional[KeywordFn] = None,
        graph_settings: Optional[Dict[str, Any]] = None,
        show_progress: bool = False,
        **kwargs: Any,
    ) -> "ChunkGraphRetriever":
        """Build the graph over ``nodes`` and a retriever reading their text from them.

        Nodes without ``schema.CRITICAL_KEYWORDS`` get them first: from ``keyword_fn`` when
        given, else from a default ``CriticalKeywordExtractor`` run over them (as an ingestion
        pipeline would, writing the hidden metadata key).
        """
        if keyword_fn is None:
            missing = [n for n in nodes if schema.CRITICAL_KEYWORDS not in n.metadata]
            if missing:
                CriticalKeywordExtractor(show_progress=show_progress)(missing)
        graph = ChunkInteractionGraph.from_nodes(
            nodes, embed_model=embed_model, keyword_fn=keyword_fn, show_progress=show_progress,
            **(graph_settings or {}),
        )
        return cls(graph, nodes=nodes, embed_model=embed_model, keyword_fn=keyword_fn, **kwargs)

    @classmethod
    def from_index(cls, index: Any, show_progress: bool = False, **kwargs: Any) -> "ChunkGraphRetriever":
        """Build over the nodes of a ``VectorStoreIndex``: text from its docstore, vectors from
        its vector store where the store can return them (``SimpleVectorStore``), else the
        index's embed model recomputes them."""
        nodes = [n.model_copy() for n in index.docstore.docs.values()]
        if not nodes:
            raise GraphBuildError("the index's docstore holds no nodes (store_nodes_override?)")
        for node in nodes:
            if node.embedding is None:
                try:
                    node.embedding = index.vector_store.get(node.node_id)
                except Exception:  # noqa: BLE001 - stores without get(): embed below instead
                    pass
        kwargs.setdefault("embed_model", getattr(index, "_embed_model", None))
        retriever = cls.from_nodes(nodes, show_progress=show_progress, **kwargs)
        retriever.docstore, retriever._nodes = index.docstore, {}
        return retriever

    # --- question analysis ----------------------------------------------------------------
    @property
    def embed_model(self) -> BaseEmbedding:
        if self._embed_model is None:
            self._embed_model = resolve_embed_model()
        return self._embed_model

    @property
    def keyword_fn(self) -> KeywordFn:
        if self._keyword_fn is None:
            self._keyword_fn = default_keyword_fn()
        return self._keyword_fn

    def _keywords_from_llm_answer(self, question: str, answer: Optional[str]) -> Set[str]:
        if answer is not None:
            try:
                return _normalised_set(parse_keyword_list(answer, strict=True))
            except LLMOutputError as exc:
                logger.warning("IIER keyword prompt: %s; using the keyword extractor", exc)
        return _normalised_set(self.keyword_fn(question))

    def question_keywords(self, question: str) -> Set[str]:
        """Prompt A.1 when an LLM is set (falling back to the extractor on a bad answer or an
        LLM error), else the keyword extractor."""
        answer = None
        if self._llm is not None:
            try:
                answer = self._llm.complete(QUESTION_KEYWORDS_PROMPT.format(text=question)).text
            except Exception as exc:  # noqa: BLE001 - any LLM failure falls back, never loses the query
                logger.warning("IIER keyword prompt failed (%s); using the keyword extractor", exc)
        return self._keywords_from_llm_answer(question, answer)

    async def aquestion_keywords(self, question: str) -> Set[str]:
        answer = None
        if self._llm is not None:
            try:
                answer = (await self._llm.acomplete(QUESTION_KEYWORDS_PROMPT.format(text=question))).text
            except Exception as exc:  # noqa: BLE001
                logger.warning("IIER keyword prompt failed (%s); using the keyword extractor", exc)
        if answer is None:
            return _normalised_set(await asyncio.to_thread(self.keyword_fn, question))
        return self._keywords_from_llm_answer(question, answer)

    def _query_vector(self, query_bundle: QueryBundle) -> np.ndarray:
        vec = query_bundle.embedding
        if vec is None:
            vec = self.embed_model.get_query_embedding(query_bundle.query_str)
        return _unit(vec)

    async def _aquery_vector(self, query_bundle: QueryBundle) -> np.ndarray:
        vec = query_bundle.embedding
        if vec is None:
            vec = await self.embed_model.aget_query_embedding(query_bundle.query_str)
        return _unit(vec)

    # --- seeds ----------------------------------------------------------------------------
    def _node_seed_keywords(self) -> List[Set[str]]:
        g = self.graph
        if self._seed_keywords is None or len(self._seed_keywords) != len(g):
            titles = g._titles if self.settings.title_keywords_for_seeds else [set()] * len(g)
            self._seed_keywords = [kw | t for kw, t in zip(g._keywords, titles)]
        return self._seed_keywords

    def _seed_index(self) -> Dict[str, Set[int]]:
        """Inverted index of the seed keywords (edge keywords, plus titles when enabled)."""
        if getattr(self, "_seed_index_cache", None) is None or self._seed_index_cache[0] != len(self.graph):
            index: Dict[str, Set[int]] = defaultdict(set)
            for i, words in enumerate(self._node_seed_keywords()):
                for w in words:
                    index[w].add(i)
            self._seed_index_cache = (len(self.graph), index)
        return self._seed_index_cache[1]

    def select_seeds(self, q_vec: np.ndarray, q_keywords: Set[str]) -> List[int]:
        """Greedy keyword cover (ties by similarity to the question), then vector seeds.

        IIER §3.2: repeatedly take the chunk covering the most still-uncovered question
        keywords, the most similar to the question among equals, until every keyword is
        covered or no chunk matches one; when none matches, the top vector hits seed.
        """
        g, s = self.graph, self.settings
        seed_kw = self._node_seed_keywords()
        index = self._seed_index()
        sims = g.vectors @ q_vec
        candidates: Set[int] = set()
        cap = s.max_candidates_per_keyword
        for w in q_keywords:
            postings = index.get(w, set())
            if len(postings) > cap:
                # A keyword found in thousands of chunks: only its chunks most similar to the
                # question compete (bounds the greedy cover's cost; the rest would lose the
                # similarity tie-break anyway).
                arr = np.fromiter(postings, np.int64, len(postings))
                postings = set(arr[_top_indices(sims[arr], cap)].tolist())
            candidates |= postings
        uncovered, seeds = set(q_keywords), []
        cand = np.array(sorted(candidates), dtype=np.int64)
        while uncovered and len(cand) and len(seeds) < s.max_seeds:
            gains = np.fromiter((len(seed_kw[i] & uncovered) for i in cand.tolist()), np.int64, len(cand))
            best = gains.max()
            if best == 0:
                break
            ties = cand[gains == best]
            pick = int(ties[np.argmax(sims[ties])])  # equal coverage: the most similar chunk
            seeds.append(pick)
            uncovered -= seed_kw[pick]
            cand = cand[cand != pick]
        n_vector = s.vector_seeds if seeds else max(s.vector_seeds, 1)
        for i in _top_indices(sims, n_vector + len(seeds)):
            if n_vector <= 0:
                break
            if int(i) not in seeds:
                seeds.append(int(i))
                n_vector -= 1
        return seeds

    # --- chain walk -----------------------------------------------------------------------
    def _features(
        self,
        q_vec: np.ndarray,
        q_keywords: Set[str],
        path: List[int],
        candidates: List[int],
        hop: int,
    ) -> np.ndarray:
        g = self.graph
        vecs, ids = g.vectors, g._ids
        cand = vecs[candidates]
        path_vec = _unit(vecs[path].mean(axis=0))
        cur = path[-1]
        cur_id = ids[cur]
        seed_kw = self._node_seed_keywords()
        covered: Set[str] = set().union(*(seed_kw[i] for i in path)) & q_keywords
        uncovered = q_keywords - covered
        nq = max(len(q_keywords), 1)
        out = np.zeros((len(candidates), N_FEATURES), dtype=np.float32)
        out[:, 0] = cand @ q_vec
        out[:, 1] = cand @ path_vec
        out[:, 2] = cand @ vecs[cur]
        adj = g._graph[cur_id]
        for r, c in enumerate(candidates):
            data = adj[ids[c]]
            out[r, 3] = data.get(STRUCTURAL, 0)
            out[r, 4] = data.get(SEMANTIC, 0)
            out[r, 5] = np.log1p(data.get(KEYWORD, 0))
            kw = seed_kw[c]
            out[r, 6] = len(kw & uncovered) / nq
            out[r, 7] = len(kw & q_keywords) / nq
        out[:, 8] = hop / max(self.settings.max_hops, 1)
        return out

    def _walk(self, seed: int, q_vec: np.ndarray, q_keywords: Set[str], taken: Set[int]) -> List[Tuple[int, float]]:
        g = self.graph
        G, ids, index = g._graph, g._ids, g._index
        chain = [(seed, float(g.vectors[seed] @ q_vec))]
        path = [seed]
        for hop in range(1, self.settings.max_hops + 1):
            candidates = [
                i for i in (index[v] for v in G[ids[path[-1]]]) if i not in taken and i not in path
            ]
            if not candidates:
                break
            scores = self.scorer.score(self._features(q_vec, q_keywords, path, candidates, hop))
            best = int(np.argmax(scores))
            if scores[best] <= self.scorer.threshold:
                break
            path.append(candidates[best])
            chain.append((candidates[best], float(scores[best])))
        return chain

    def search(self, q_vec: np.ndarray, q_keywords: Set[str]) -> List[List[Tuple[int, float]]]:
        """Evidence chains as lists of (graph row, score), seed first."""
        chains: List[List[Tuple[int, float]]] = []
        taken: Set[int] = set()
        for seed in self.select_seeds(q_vec, q_keywords):
            if seed in taken:  # an earlier chain already walked through this seed
                continue
            chain = self._walk(seed, q_vec, q_keywords, taken | {seed})
            taken |= {i for i, _ in chain}
            chains.append(chain)
        if self.settings.fill_budget and len(taken) < self.settings.max_nodes:
            sims = self.graph.vectors @ q_vec
            for i in _top_indices(sims, self.settings.max_nodes + len(taken)):
                if len(taken) >= self.settings.max_nodes:
                    break
                if int(i) not in taken:
                    taken.add(int(i))
                    chains.append([(int(i), float(sims[i]))])
        return chains

    # --- output ---------------------------------------------------------------------------
    def _budgeted(self, chains: List[List[Tuple[int, float]]]) -> List[List[Tuple[int, int, float]]]:
        budget = self.settings.max_nodes
        chosen: Set[Tuple[int, int]] = set()
        seen: Set[int] = set()
        longest = max((len(c) for c in chains), default=0)
        for hop in range(longest):
            for c, chain in enumerate(chains):
                if len(seen) >= budget:
                    break
                if hop < len(chain) and chain[hop][0] not in seen:
                    seen.add(chain[hop][0])
                    chosen.add((c, hop))
        return [
            [(idx, hop, score) for hop, (idx, score) in enumerate(chain) if (c, hop) in chosen]
            for c, chain in enumerate(chains)
        ]

    def _get_node(self, node_id: str) -> BaseNode:
        node = self._nodes.get(node_id) if self.docstore is None else self.docstore.get_node(node_id, raise_error=False)
        if node is None:
            raise UnknownNodeError(f"chunk graph node {node_id!r} is not in the docstore")
        return node

    def _to_output(self, chains: List[List[Tuple[int, float]]]) -> List[NodeWithScore]:
        results: List[NodeWithScore] = []
        for c, chain in enumerate(self._budgeted(chains)):
            if not chain:
                continue
            members = []
            for idx, hop, score in chain:
                source = self._get_node(self.graph._ids[idx])
                # A shallow copy with its own metadata and exclusion lists: the docstore's node
                # is left untouched, and the embedding is not copied.
                node = source.model_copy(
                    update={
                        "metadata": dict(source.metadata),
                        "excluded_embed_metadata_keys": list(source.excluded_embed_metadata_keys),
                        "excluded_llm_metadata_keys": list(source.excluded_llm_metadata_keys),
                    }
                )
                node.metadata[schema.CHAIN_ID] = c
                node.metadata[schema.CHAIN_HOP] = hop
                schema.hide_from_views(node, (schema.CHAIN_ID, schema.CHAIN_HOP))
                members.append(NodeWithScore(node=node, score=score))
            if self.settings.merge_chains:
                results.append(_merge_chain(c, members))
            else:
                results.extend(members)
        return results

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        q_vec = self._query_vector(query_bundle)
        q_keywords = self.question_keywords(query_bundle.query_str)
        return self._to_output(self.search(q_vec, q_keywords))

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        q_vec, q_keywords = await asyncio.gather(
            self._aquery_vector(query_bundle), self.aquestion_keywords(query_bundle.query_str)
        )
        return self._to_output(self.search(q_vec, q_keywords))

    # --- training -------------------------------------------------------------------------
    def training_examples(
        self,
        questions: Sequence[str],
        gold_evidence: Sequence[Sequence[str]],
        max_negatives: int = 30,
        seed: int = 0,
    ) -> Tuple[np.ndarray, np.ndarray]:
        """Feature rows and labels from IIER's shortest-path supervision (§3.2).

        For each question, from each gold chunk (the paper) and from each seed the retriever
        would pick (our addition: the walk starts from seeds, not from gold), the shortest
        graph path to every other gold chunk is walked step by step; at each step the next
        node on the path and any gold chunk are positives, the other neighbours negatives
        (at most ``max_negatives`` sampled). At a reached gold chunk that ends the path every
        non-gold neighbour is a negative, which teaches the scorer when to stop.
        """
        if len(questions) != len(gold_evidence):
            raise ValueError("questions and gold_evidence must have the same length")
        g, rng = self.graph, np.random.default_rng(seed)
        G, ids, index = g._graph, g._ids, g._index
        feats: List[np.ndarray] = []
        labels: List[np.ndarray] = []
        for question, gold in zip(questions, gold_evidence):
            golds = [index[x] for x in gold if x in index]
            if not golds:
                continue
            q_vec = self._query_vector(QueryBundle(question))
            q_kw = self.question_keywords(question)
            starts = list(dict.fromkeys(golds + self.select_seeds(q_vec, q_kw)))
            gold_set = set(golds)
            for s in starts:
                for t in golds:
                    if t == s:
                        continue
                    try:
                        path_ids = nx.shortest_path(G, ids[s], ids[t])
                    except nx.NetworkXNoPath:
                        continue
                    path = [index[p] for p in path_ids]
                    if len(path) - 1 > self.settings.max_hops:
                        continue
                    for step in range(len(path)):
                        prefix = path[: step + 1]
                        cands = [index[v] for v in G[ids[prefix[-1]]] if index[v] not in prefix]
                        if not cands:
                            continue
                        nxt = path[step + 1] if step + 1 < len(path) else None
                        y = np.array([1.0 if (c == nxt or c in gold_set) else 0.0 for c in cands])
                        neg = np.flatnonzero(y == 0)
                        if len(neg) > max_negatives:
                            keep = np.concatenate([np.flatnonzero(y > 0), rng.choice(neg, max_negatives, replace=False)])
                            cands = [cands[i] for i in keep]
                            y = y[keep]
                        feats.append(self._features(q_vec, q_kw, prefix, cands, step + 1))
                        labels.append(y)
        if not feats:
            raise ValueError("no training examples: gold chunks are missing from the graph or unconnected")
        return np.vstack(feats), np.concatenate(labels)

    def fit(
        self,
        questions: Sequence[str],
        gold_evidence: Sequence[Sequence[str]],
        scorer: Optional[TrainedChainScorer] = None,
    ) -> TrainedChainScorer:
        """Fit a :class:`TrainedChainScorer` on questions and their gold chunk ids; use it."""
        x, y = self.training_examples(questions, gold_evidence)
        fitted = (scorer or TrainedChainScorer()).fit(x, y)
        self.scorer = fitted
        return fitted


def _top_indices(scores: np.ndarray, m: int) -> np.ndarray:
    """Indices of the m largest scores, best first (argpartition: O(n), not a full sort)."""
    if m <= 0:
        return np.zeros(0, dtype=np.int64)
    if m >= len(scores):
        return np.argsort(-scores, kind="stable")
    top = np.argpartition(-scores, m - 1)[:m]
    return top[np.argsort(-scores[top], kind="stable")]


def _top_k_rows(mat: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """Column indices and values of the k largest entries of every row, best first.

    ``np.partition`` finds each row's k-th largest value (faster than ``argpartition`` and
    without its int64 matrix); the entries at or above it are then ranked per row.
    """
    n_rows, n_cols = mat.shape
    kth = np.partition(mat, n_cols - k, axis=1)[:, n_cols - k]
    rows, cols = np.nonzero(mat >= kth[:, None])
    vals = mat[rows, cols]
    order = np.lexsort((-vals, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    rank = np.arange(len(rows)) - np.searchsorted(rows, np.arange(n_rows))[rows]
    keep = rank < k  # ties at the k-th value: keep the first k
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


def _unit(vec: Any) -> np.ndarray:
    arr = np.asarray(vec, dtype=np.float32).ravel()
    return arr / (np.linalg.norm(arr) + 1e-12)


def _merge_chain(chain_id: int, members: List[NodeWithScore]) -> NodeWithScore:
    """One node holding a chain's texts in traversal order (a new node: sources untouched)."""
    first = members[0].node
    text = "\n\n".join(m.node.get_content(MetadataMode.NONE) for m in members)
    node = TextNode(
        text=text,
        metadata={
            schema.CHAIN_ID: chain_id,
            schema.SEGMENT_NODE_IDS: [m.node.node_id for m in members],
            schema.DOCUMENT_ID: schema.get_document_id(first),
        },
    )
    schema.hide_from_views(node, (schema.CHAIN_ID, schema.SEGMENT_NODE_IDS, schema.DOCUMENT_ID))
    return NodeWithScore(node=node, score=max(m.score or 0.0 for m in members))
