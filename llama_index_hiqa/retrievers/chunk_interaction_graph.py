"""IIER's Chunk-Interaction Graph: chunks of all documents linked by three kinds of edge.

"Leveraging Inter-Chunk Interactions for Enhanced Retrieval in Large Language Model-Based
Question Answering" (IIER, Guo et al.) §3.1: the nodes are the chunks of all documents; an
edge carries three weights: structural (consecutive chunks of one document, weight 1),
semantic (each chunk to its top-k most similar chunks, weight = cosine; k = 5 in §4.3) and
keyword (chunks sharing more than two keywords, weight = size of the intersection; document
titles are not keywords).

[`ChunkInteractionGraph`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph] builds it with a blocked matrix top-k and a sparse keyword
co-occurrence product (no all-pairs Python loop; the pure functions of
``retrievers/graph_edges.py`` say which rows each kind of edge links, the graph alone changes
its rows and edges), extends it incrementally
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
import json
import logging
from pathlib import Path
from typing import (
    AbstractSet, Any, Callable, DefaultDict, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set,
    Tuple, Union,
)

import networkx as nx
import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import ConfigDict, PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode

from llama_index_hiqa import schema
from llama_index_hiqa.errors import GraphBuildError, UnknownNodeError
from llama_index_hiqa.indexes.keyword_index import normalize_keyword
from llama_index_hiqa.retrievers.graph_edges import (
    EDGE_KINDS,
    KEYWORD,
    SEMANTIC,
    STRUCTURAL,
    clear_weight,
    document_chains,
    embed_rows,
    gc_paused,
    keyword_postings,
    knn_lists,
    resolve_keyword_threshold,
    semantic_top_k,
    set_weight,
    shared_keyword_counts,
)
from llama_index_hiqa.retrievers.settings import InteractionGraphSettings
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

logger = logging.getLogger(__name__)

KeywordFn = Callable[[str], List[str]]

# The folder format of persist / load.
GRAPH_FILE = "chunk_graph.json"
VECTORS_FILE = "chunk_graph_vectors.npz"


# --- keywords ------------------------------------------------------------------------


def normalised_keywords(keywords: Iterable[str]) -> Set[str]:
    """Keywords in the pack's one matching form (``normalize_keyword``), empties dropped.

    Args:
        keywords: the keywords as written.

    Returns:
        Their normalised forms.
    """
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
    words = normalised_keywords([title])
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
    _titles: List[AbstractSet[str]] = PrivateAttr(default_factory=list)  # title keywords
    _docs: List[Optional[str]] = PrivateAttr(default_factory=list)
    _positions: List[Optional[int]] = PrivateAttr(default_factory=list)
    _keyword_index: DefaultDict[str, Set[int]] = PrivateAttr(default_factory=lambda: keyword_postings([]))
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
        vectors = embed_rows(nodes, embed_model, show_progress)
        with gc_paused():
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
                normalised_keywords(raw) - title_words,
            )
        self._vectors = vectors if not self._vectors.size else np.vstack([self._vectors, vectors])
        self._link_rows(start, show_progress)

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
        with gc_paused():
            graph._link_rows(0, show_progress=False)
        return graph

    def _append_row(
        self, node_id: str, doc: Optional[str], position: Optional[int], titles: AbstractSet[str], keywords: Set[str]
    ) -> None:
        self._index[node_id] = len(self._ids)
        self._ids.append(node_id)
        self._docs.append(doc)
        self._positions.append(position)
        self._titles.append(titles)
        self._keywords.append(keywords)
        self._graph.add_node(node_id)

    # --- edges (what links which rows: graph_edges; applied here) ------------------------
    # (Hot loops bind the private attributes to locals: pydantic resolves ``self._x`` through
    # a slow ``__getattr__``, which dominated the build time at 50k chunks.)
    def _link_rows(self, start: int, show_progress: bool) -> None:
        """The edges after rows ``start:`` were added, as a rebuild over all rows makes them."""
        self._update_structural(range(start, len(self._ids)))
        self._update_semantic(start, show_progress)
        self._rebuild_keyword_edges()

    def _update_structural(self, new: Iterable[int]) -> None:
        """Chain the chunks of every document touched by ``new`` in position order."""
        G, all_docs, all_ids, index = self._graph, self._docs, self._ids, self._index
        for doc, rows in document_chains(all_docs, self._positions, new).items():
            ids = [all_ids[i] for i in rows]
            # A chunk inserted between two old ones breaks their adjacency: clear, then relink.
            for u in ids:
                for v in list(G[u]):
                    if all_docs[index[v]] == doc:
                        clear_weight(G, u, v, STRUCTURAL)
            for u, v in zip(ids, ids[1:]):
                set_weight(G, u, v, STRUCTURAL, 1)

    def _update_semantic(self, start: int, show_progress: bool) -> None:
        """Top-k cosine neighbours for the new rows, and the new rows entering old top-k lists;
        edges = union over i of (i, j in top-k(i)), touching only rows whose list changed."""
        old_ids = self._knn_ids
        knn_ids, knn_sims = semantic_top_k(
            self._vectors, old_ids, self._knn_sims, start, self.semantic_top_k, self.block_size, show_progress
        )
        self._knn_ids, self._knn_sims = knn_ids, knn_sims
        G, ids = self._graph, self._ids
        n = len(ids)
        now = knn_lists(knn_ids, knn_sims, range(n), self.min_similarity)
        old = [{j for j in row if j >= 0} for row in old_ids[:start].tolist()]
        changed = [r for r in range(start) if set(now[r]) != old[r]]
        for r in changed:  # neighbours pushed out of r's list lose the edge unless r is in theirs
            for j in old[r] - set(now[r]):
                if r not in now[j]:
                    clear_weight(G, ids[r], ids[j], SEMANTIC)
        for r in list(changed) + list(range(start, n)):
            for j, s in now[r].items():
                set_weight(G, ids[r], ids[j], SEMANTIC, round(s, 6))

    def _rebuild_keyword_edges(self) -> None:
        """Keyword edges rebuilt over all rows: which keywords are too common depends on the
        corpus size (the sparse product costs seconds even at 50k chunks)."""
        G, ids, keywords = self._graph, self._ids, self._keywords
        n = len(ids)
        self._keyword_index = postings = keyword_postings(keywords)
        limit = max(self.max_keyword_fraction * n, self.min_common_count)
        shared = shared_keyword_counts(keywords, self._titles, postings, limit, self.title_mentions)
        for u, v, data in list(G.edges(data=True)):
            if data.get(KEYWORD):
                clear_weight(G, u, v, KEYWORD)
        if shared is None:
            return
        self._threshold = threshold = resolve_keyword_threshold(
            self.keyword_threshold, shared.data, n, self.max_keyword_degree
        )
        keep = shared.data >= threshold
        for i, j, c in zip(shared.row[keep].tolist(), shared.col[keep].tolist(), shared.data[keep].tolist()):
            set_weight(G, ids[i], ids[j], KEYWORD, int(c))

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
        return {k: data.get(k, 0) for k in EDGE_KINDS}

    def edge_counts(self) -> Dict[str, int]:
        counts = {k: 0 for k in EDGE_KINDS}
        for _, _, data in self._graph.edges(data=True):
            for k in EDGE_KINDS:
                counts[k] += bool(data.get(k))
        counts["edges"] = self._graph.number_of_edges()
        return counts

    # --- by row (the evidence-chain search works on rows: ints, not id strings) ---------
    @property
    def row_keywords(self) -> Sequence[Set[str]]:
        """Edge keywords of every row, in ``node_ids`` order (read-only: the graph's own)."""
        return self._keywords

    @property
    def row_title_keywords(self) -> Sequence[AbstractSet[str]]:
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

    # --- persistence ---------------------------------------------------------------------
    # One row format for every store: a folder (persist/load) and a database's tables.
    def node_records(self) -> List[Dict[str, Any]]:
        """One record per row, in row order: id, document id, position, title keywords and
        edge keywords (sorted).

        Returns:
            The records.
        """
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
        """``(u, v, structural, semantic, keyword)`` per linked pair.

        Returns:
            The records.
        """
        return [
            (u, v, d.get(STRUCTURAL, 0), d.get(SEMANTIC, 0), d.get(KEYWORD, 0))
            for u, v, d in self._graph.edges(data=True)
        ]

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
        (unit rows) and [`knn`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph.knn], nothing recomputed.

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
        # A graph saved before title_mentions existed was built without them: keep its edges' rule.
        graph = cls(**{"title_mentions": False, **settings})
        graph._threshold = keyword_threshold
        keyword_index = graph._keyword_index
        for row in nodes:
            graph._append_row(
                row["id"], row[schema.DOCUMENT_ID], row[schema.POSITION], set(row["title_keywords"]), set(row["keywords"])
            )
            for w in row["keywords"]:
                keyword_index[w].add(len(graph._ids) - 1)
        G = graph._graph
        for u, v, st, se, kw in edges:
            G.add_edge(u, v, **{STRUCTURAL: st, SEMANTIC: se, KEYWORD: kw})
        graph._vectors = np.asarray(vectors, dtype=np.float32)
        graph._knn_ids, graph._knn_sims = np.asarray(knn_ids, dtype=np.int64), np.asarray(knn_sims, dtype=np.float32)
        return graph

    def persist(self, persist_dir: Union[str, Path]) -> None:
        """Write ``chunk_graph.json`` (settings, nodes, edges keyed by node id) and the vectors.

        Args:
            persist_dir: the folder (created when missing).
        """
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
        np.savez_compressed(folder / VECTORS_FILE, vectors=self._vectors, knn_ids=self._knn_ids, knn_sims=self._knn_sims)

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
