"""IIER's Chunk-Interaction Graph: chunks of all documents linked by three kinds of edge.

"Leveraging Inter-Chunk Interactions for Enhanced Retrieval in Large Language Model-Based
Question Answering" (IIER, Guo et al.) §3.1: the nodes are the chunks of all documents; an
edge carries three weights: structural (consecutive chunks of one document, weight 1),
semantic (each chunk to its top-k most similar chunks, weight = cosine; k = 5 in §4.3) and
keyword (chunks sharing more than two keywords, weight = size of the intersection; document
titles are not keywords).

[`ChunkInteractionGraph`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph] builds it with a blocked matrix top-k and a sparse keyword
co-occurrence product (no all-pairs Python loop), extends it incrementally
([`add_nodes`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph.add_nodes]), drops chunks ([`without_nodes`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph.without_nodes])
and saves it as rows (``node_records`` / ``edge_records`` / ``from_records``: a folder's files
with ``persist`` / ``load``, or the PostgreSQL store's tables). Text stays
in the docstore; the graph keeps ids, document/position, keywords and the embedding matrix,
and answers by node id or by row (the row of a node in `node_ids` / `vectors`),
which is what the evidence-chain search of [`llama_index_hiqa.retrievers.chunk_graph`][llama_index_hiqa.retrievers.chunk_graph]
walks on.
"""

from __future__ import annotations

import functools
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
from llama_index_hiqa.errors import GraphBuildError, UnknownNodeError
from llama_index_hiqa.retrievers.settings import InteractionGraphSettings
from llama_index_hiqa.retrievers import graph_edges, graph_records
from llama_index_hiqa.retrievers.graph_records import GRAPH_FILE, VECTORS_FILE  # noqa: F401 (re-exported)
from llama_index_hiqa.retrievers.graph_edges import (  # noqa: F401 (re-exported)
    EDGE_KINDS,
    KEYWORD,
    SEMANTIC,
    STRUCTURAL,
    resolve_keyword_threshold,
    unit_rows,
)
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor, normalize_keyword

logger = logging.getLogger(__name__)

KeywordFn = Callable[[str], List[str]]


_EDGE_KINDS = EDGE_KINDS


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
    IIER keeps them out of the keyword edges.

    Args:
        title: the document title.

    Returns:
        The title's keywords, normalised.
    """
    global _title_rules
    if _title_rules is None:
        _title_rules = CriticalKeywordExtractor(use_ner=False)
    words = _normalised_set([title])
    if title:
        words |= set(_title_rules.extract(title.replace("_", " ")))
    return frozenset(words)


# --- the graph -----------------------------------------------------------------------


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
        """Build the graph over ``nodes`` (see [`add_nodes`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph.add_nodes]).

        Args:
            nodes: the chunks.
            embed_model: the embedding model for chunks without ``node.embedding``.
            keyword_fn: text -> keywords, for chunks without ``schema.CRITICAL_KEYWORDS``.
            show_progress: show a progress bar.
            **settings: the graph's settings (its constructor's fields).

        Returns:
            The graph.

        Raises:
            GraphBuildError: when ``nodes`` is empty, names a node id twice or mixes vector
                dimensions.
        """
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

        Args:
            nodes: the new chunks.
            embed_model: the embedding model for chunks without ``node.embedding``.
            keyword_fn: text -> keywords, for chunks without ``schema.CRITICAL_KEYWORDS``.
            show_progress: show a progress bar.

        Raises:
            GraphBuildError: when the graph would hold no nodes, a node id is already in it (or
                twice in ``nodes``), or the vectors' dimension differs from the graph's.
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
        vectors = graph_edges.embed_rows(nodes, embed_model, show_progress)
        with graph_edges.gc_paused():
            self._add_embedded(nodes, vectors, keyword_fn, show_progress)

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
        graph_edges.update_structural(self, range(start, len(self._ids)))
        graph_edges.update_semantic(self, start, show_progress)
        graph_edges.rebuild_keyword_edges(self)

    def without_nodes(self, node_ids: Iterable[str]) -> "ChunkInteractionGraph":
        """A graph over the other chunks, rows in the same order, with every edge recomputed as
        a rebuild over them would make it (which neighbours, chains and keyword threshold
        remain depends on all of them; the cost is a rebuild's, without re-embedding).

        Args:
            node_ids: the chunks to leave out (ids not in the graph are ignored).

        Returns:
            The new graph (this one is left as it is).
        """
        drop = set(node_ids)
        keep = [i for i, node_id in enumerate(self._ids) if node_id not in drop]
        graph = type(self)(**self.model_dump())
        for i in keep:
            graph._append_row(self._ids[i], self._docs[i], self._positions[i], self._titles[i], self._keywords[i])
        if not keep:
            return graph
        graph._vectors = self._vectors[keep]
        with graph_edges.gc_paused():
            graph_edges.update_structural(graph, range(len(keep)))
            graph_edges.update_semantic(graph, 0, show_progress=False)
            graph_edges.rebuild_keyword_edges(graph)
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
        """The row of a node.

        Args:
            node_id: the node id.

        Returns:
            Its row.

        Raises:
            UnknownNodeError: when the node is not in the graph.
        """
        try:
            return self._index[node_id]
        except KeyError:
            raise UnknownNodeError(f"node id {node_id!r} is not in the chunk graph") from None

    def keywords(self, node_id: str) -> Set[str]:
        """The node's edge keywords (normalised; the document title removed).

        Args:
            node_id: the node id.

        Returns:
            A copy of its keywords.

        Raises:
            UnknownNodeError: when the node is not in the graph.
        """
        return set(self._keywords[self.index_of(node_id)])

    def title_keywords(self, node_id: str) -> Set[str]:
        """Keywords of the node's document title (kept out of the edges, used for seeds).

        Args:
            node_id: the node id.

        Returns:
            A copy of its title keywords.

        Raises:
            UnknownNodeError: when the node is not in the graph.
        """
        return set(self._titles[self.index_of(node_id)])

    def document_id(self, node_id: str) -> Optional[str]:
        """The node's document id.

        Args:
            node_id: the node id.

        Returns:
            Its document id, ``None`` when it has none.

        Raises:
            UnknownNodeError: when the node is not in the graph.
        """
        return self._docs[self.index_of(node_id)]

    def nodes_with_keyword(self, keyword: str) -> Set[str]:
        """The nodes whose edge keywords include ``keyword``.

        Args:
            keyword: the keyword (normalised here).

        Returns:
            Their node ids.
        """
        return {self._ids[i] for i in self._keyword_index.get(normalize_keyword(keyword), ())}

    def edge(self, u: str, v: str) -> Dict[str, float]:
        """The three weights between two chunks (all 0 when not linked).

        Args:
            u: one node id.
            v: the other node id.

        Returns:
            ``{"structural": ..., "semantic": ..., "keyword": ...}``.
        """
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
        """The node id of a row.

        Args:
            row: the row.

        Returns:
            Its node id.
        """
        return self._ids[row]

    def neighbours(self, row: int) -> Dict[int, Mapping[str, float]]:
        """The rows linked to ``row`` and their edge weights (structural, semantic, keyword).

        Args:
            row: the row.

        Returns:
            Linked row -> its edge weights.
        """
        index = self._index
        return {index[v]: data for v, data in self._graph[self._ids[row]].items()}

    def shortest_path_rows(self, source: int, target: int) -> Optional[List[int]]:
        """Rows of a shortest path from ``source`` to ``target`` (both included); ``None``
        when they are not connected.

        Args:
            source: the first row.
            target: the last row.

        Returns:
            The path's rows, or ``None``.
        """
        try:
            path = nx.shortest_path(self._graph, self._ids[source], self._ids[target])
        except nx.NetworkXNoPath:
            return None
        return [self._index[v] for v in path]

    # --- persistence (retrievers/graph_records.py) ----------------------------------------
    # One row format for every store: a folder (persist/load) and a database table.
    def node_records(self) -> List[Dict[str, Any]]:
        """One record per row, in row order: id, document id, position, title keywords and
        edge keywords (sorted)."""
        return graph_records.node_records(self)

    def edge_records(self) -> List[Tuple[str, str, float, float, float]]:
        """``(u, v, structural, semantic, keyword)`` per linked pair."""
        return graph_records.edge_records(self)

    @property
    def knn(self) -> Tuple[np.ndarray, np.ndarray]:
        """Every row's semantic top-k (rows, cosines; -1 / -inf where fewer exist): what
        [`add_nodes`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph.add_nodes] updates incrementally."""
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
        """The graph saved as [`node_records`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph.node_records], [`edge_records`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph.edge_records], [`vectors`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph.vectors]
        (unit rows) and [`knn`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph.knn], nothing recomputed (``graph_records.from_records``).

        Args:
            settings: the graph's settings.
            keyword_threshold: the keyword-edge threshold the build computed (``None``: none).
            nodes: the node records.
            edges: the edge records.
            vectors: the unit vectors, one row per node.
            knn_ids: each row's nearest rows.
            knn_sims: their similarities.

        Returns:
            The graph.
        """
        return graph_records.from_records(cls, settings, keyword_threshold, nodes, edges, vectors, knn_ids, knn_sims)

    def persist(self, persist_dir: Union[str, Path]) -> None:
        """Write ``chunk_graph.json`` (settings, nodes, edges keyed by node id) and the vectors.

        Args:
            persist_dir: the folder (created when missing).
        """
        graph_records.persist(self, persist_dir)

    @classmethod
    def load(cls, persist_dir: Union[str, Path]) -> "ChunkInteractionGraph":
        """The graph [`persist`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph.persist] wrote.

        Args:
            persist_dir: the folder.

        Returns:
            The graph.

        Raises:
            GraphBuildError: no readable graph in the folder.
        """
        return graph_records.load(cls, persist_dir)
