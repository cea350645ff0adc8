"""The Chunk-Interaction Graph as rows: one record format for every store.

A [`ChunkInteractionGraph`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph] is saved
as node records (id, document, position, title and edge keywords), edge records (the three
weights of IIER's §3.1 per linked pair: "Leveraging Inter-Chunk Interactions for Enhanced
Retrieval in Large Language Model-Based Question Answering", Guo et al.), its unit vectors and
every row's semantic top-k: a folder's two files ([`persist`][llama_index_hiqa.retrievers.graph_records.persist] / [`load`][llama_index_hiqa.retrievers.graph_records.load]) or the
PostgreSQL store's tables. Loading recomputes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from llama_index_hiqa import schema
from llama_index_hiqa.errors import GraphBuildError
from llama_index_hiqa.retrievers.graph_edges import KEYWORD, SEMANTIC, STRUCTURAL

GRAPH_FILE = "chunk_graph.json"
VECTORS_FILE = "chunk_graph_vectors.npz"


def node_records(graph: Any) -> List[Dict[str, Any]]:
    """One record per row, in row order: id, document id, position, title keywords and
    edge keywords (sorted).

    Args:
        graph: the chunk graph.

    Returns:
        The records.
    """
    return [
        {
            "id": node_id,
            schema.DOCUMENT_ID: graph._docs[i],
            schema.POSITION: graph._positions[i],
            "title_keywords": sorted(graph._titles[i]),
            "keywords": sorted(graph._keywords[i]),
        }
        for i, node_id in enumerate(graph._ids)
    ]


def edge_records(graph: Any) -> List[Tuple[str, str, float, float, float]]:
    """``(u, v, structural, semantic, keyword)`` per linked pair.

    Args:
        graph: the chunk graph.

    Returns:
        The records.
    """
    return [(u, v, d.get(STRUCTURAL, 0), d.get(SEMANTIC, 0), d.get(KEYWORD, 0)) for u, v, d in graph._graph.edges(data=True)]


def from_records(
    cls: Any,
    settings: Mapping[str, Any],
    keyword_threshold: Optional[int],
    nodes: Iterable[Mapping[str, Any]],
    edges: Iterable[Sequence[Any]],
    vectors: np.ndarray,
    knn_ids: np.ndarray,
    knn_sims: np.ndarray,
) -> Any:
    """The graph saved as node records, edge records, unit vectors and every row's top-k,
    nothing recomputed.

    The graph class is ``cls``.

    Args:
        settings: the graph's settings.
        keyword_threshold: the T in use.
        nodes: the node records.
        edges: the edge records.
        vectors: the unit vectors.
        knn_ids: every row's semantic top-k rows.
        knn_sims: their cosines.

    Returns:
        The graph.
    """
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


def persist(graph: Any, persist_dir: Union[str, Path]) -> None:
    """Write ``chunk_graph.json`` (settings, nodes, edges keyed by node id) and the vectors.

    Args:
        graph: the chunk graph.
        persist_dir: the folder (created when missing).
    """
    folder = Path(persist_dir)
    folder.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": "llama_index_hiqa.chunk_graph/1",
        "settings": graph.model_dump(),
        "resolved_keyword_threshold": graph._threshold,
        "nodes": node_records(graph),
        "edges": [list(edge) for edge in edge_records(graph)],
    }
    (folder / GRAPH_FILE).write_text(json.dumps(payload), encoding="utf-8")
    np.savez_compressed(
        folder / VECTORS_FILE, vectors=graph._vectors, knn_ids=graph._knn_ids, knn_sims=graph._knn_sims
    )


def load(cls: Any, persist_dir: Union[str, Path]) -> Any:
    """The graph [`persist`][llama_index_hiqa.retrievers.graph_records.persist] wrote.

    The graph class is ``cls``.

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
