"""The chunk graph of a PostgreSQL pack: walked in each process's memory, kept in the database.

IIER's Chunk-Interaction Graph ("Leveraging Inter-Chunk Interactions for Enhanced Retrieval in
Large Language Model-Based Question Answering" (IIER, Guo et al.), §3.1) is walked hop by hop,
each hop reading a chunk's neighbours and their vectors, so a process answering with it holds
a copy in memory, as with the folder store. The database makes that copy durable and shared:

* ``hiqa_graph_edges`` — one row per edge and kind (``u``, ``v``, structural / semantic /
  keyword, weight); ``hiqa_graph_nodes`` — one row per chunk (its row in the graph, document,
  position, edge keywords, title keywords, semantic top-k); ``hiqa_graph`` — the graph's
  settings, its resolved keyword threshold and a generation. The vectors are read from the
  vector table; nothing is recomputed when a process loads the graph.
* A writer updates the graph in the transaction of its batch ([`StoredChunkGraph.sync`][llama_index_hiqa.storage.backends.pg_graph.StoredChunkGraph.sync],
  run by [`PostgresStore.write`][llama_index_hiqa.storage.postgres.PostgresStore.write] / ``delete`` after the routes' rows): added chunks by
  [`ChunkInteractionGraph.add_nodes`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph.add_nodes], removed ones by
  [`ChunkInteractionGraph.without_nodes`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph.without_nodes] (a rebuild over the rest, as the folder store
  rebuilds), and only the rows that changed are rewritten (all of them after a removal, whose
  rows are renumbered). The batch and its graph commit together or not at all.
* Other processes notice a new generation within `GRAPH_TTL_S` and reload.
"""

from __future__ import annotations

import io
import json
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.utils import json_to_doc
from sqlalchemy import Column, Integer, MetaData, Table, Text, insert, text
from sqlalchemy.dialects.postgresql import ARRAY, REAL
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from llama_index_hiqa import schema
from llama_index_hiqa.retrievers.chain_output import Chain
from llama_index_hiqa.retrievers.chunk_graph import ChunkGraphRetriever
from llama_index_hiqa.retrievers.chunk_interaction_graph import ChunkInteractionGraph, KeywordFn
from llama_index_hiqa.retrievers.graph_edges import EDGE_KINDS, KEYWORD, SEMANTIC, STRUCTURAL, unit_rows
from llama_index_hiqa.storage.pg_bulk import copy_from
from llama_index_hiqa.storage.pg_schema import (
    DOCSTORE_TABLE,
    GRAPH_SCHEMA,
    STORE_FORMAT,
    VECTOR_TABLE,
    copy_field,
    without_nul,
)
from llama_index_hiqa.storage.postgres import PostgresStore

GRAPH_TTL_S = 5.0
KINDS = EDGE_KINDS  # the kinds of the hiqa_graph_edges rows, in the edge records' order

# A hiqa_graph_nodes row: graph row, document id, position, keywords, title keywords, the
# semantic top-k rows and their cosines.
NodeRow = Tuple[
    int, Optional[str], Optional[int], Tuple[str, ...], Tuple[str, ...], Tuple[int, ...], Tuple[float, ...]
]
EdgeKey = Tuple[str, str]
EdgeWeights = Tuple[float, float, float]  # structural, semantic, keyword


def graph_nodes_table() -> Table:
    """``hiqa_graph_nodes`` for SQLAlchemy Core inserts (array columns)."""
    return Table(
        "hiqa_graph_nodes", MetaData(),
        Column("node_id", Text, primary_key=True), Column("graph_row", Integer), Column("document_id", Text),
        Column("position", Integer), Column("keywords", ARRAY(Text)), Column("title_keywords", ARRAY(Text)),
        Column("knn_rows", ARRAY(Integer)), Column("knn_sims", ARRAY(REAL)),
    )


GRAPH_NODES_TABLE = graph_nodes_table()


class StoredChunkGraph:
    """One process's copy of a PostgreSQL pack's chunk graph, in step with its tables.

    ``settings`` are the [`ChunkInteractionGraph`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph] settings of a new graph (a stored
    graph keeps those it was built with); ``keyword_fn`` and ``embed_model`` serve chunks
    without keywords or vectors, as in the folder store's build.
    """

    def __init__(
        self, store: PostgresStore, settings: Mapping[str, Any], keyword_fn: Optional[KeywordFn] = None,
        embed_model: Optional[BaseEmbedding] = None,
    ) -> None:
        self.store = store
        self.settings = dict(settings)
        self.keyword_fn = keyword_fn
        self.embed_model = embed_model
        self.graph: Optional[ChunkInteractionGraph] = None
        self.generation: Optional[int] = None  # of the rows self.graph was read from
        self._as_stored = False  # whether self.graph is exactly what the rows hold
        self._checked_at = float("-inf")

    # -- reading ----------------------------------------------------------------------
    def current(self) -> ChunkInteractionGraph:
        """The graph as last committed (re-checked at most every `GRAPH_TTL_S`)."""
        if self.graph is None or time.monotonic() - self._checked_at > GRAPH_TTL_S:
            try:
                with self.store.engine.connect() as conn:
                    generation = _generation(conn)
                    # (The node count catches a writer that did not keep the graph.)
                    count = conn.exec_driver_sql("SELECT node_count FROM hiqa_pack WHERE id = 1").scalar()
                    if self.graph is None or generation != self.generation or count != len(self.graph):
                        graph = _read(conn, self.settings)
                        # Chunks another writer added or removed without keeping the graph
                        # (use_chunk_graph=False): followed here, in memory only.
                        stored = len(graph)
                        reconciled = _reconcile(conn, graph, [], self.keyword_fn, self.embed_model)[0]
                        self._as_stored = reconciled is graph and len(reconciled) == stored
                        self.graph, self.generation = reconciled, generation
            except SQLAlchemyError as exc:
                raise self.store.describe_failure(exc) from None
            self._checked_at = time.monotonic()
        return self.graph

    def forget(self) -> None:
        """Drop the copy (a write failed after changing it): the next use reads the tables."""
        self.graph, self.generation, self._as_stored = None, None, False

    # -- writing (inside the writer's transaction) -------------------------------------
    def sync(self, conn: Connection, nodes: Sequence[BaseNode]) -> None:
        """Bring the graph in line with ``hiqa_nodes`` after a batch (``nodes`` its new
        chunks, with their vectors) and write the rows that changed, on ``conn``.

        Args:
            conn: the writer's connection, in its transaction.
            nodes: the batch's new chunks, with their vectors.
        """
        _create_tables(conn)
        generation = _generation(conn)
        graph = self.graph
        if graph is None or generation != self.generation or not self._as_stored:  # not the rows' graph
            graph = _read(conn, self.settings)
        before = (_node_rows(graph), _edge_rows(graph))
        graph, renumbered = _reconcile(conn, graph, nodes, self.keyword_fn, self.embed_model)
        if renumbered:  # rows moved: every row is rewritten
            conn.exec_driver_sql("DELETE FROM hiqa_graph_nodes")
            conn.exec_driver_sql("DELETE FROM hiqa_graph_edges")
            before = ({}, {})
        _write_nodes(conn, before[0], _node_rows(graph))
        _write_edges(conn, before[1], _edge_rows(graph))
        self.generation = conn.execute(
            text(
                "INSERT INTO hiqa_graph (id, generation, node_count, keyword_threshold, settings) "
                "VALUES (1, 1, :n, :t, CAST(:s AS jsonb)) ON CONFLICT (id) DO UPDATE SET "
                "generation = hiqa_graph.generation + 1, node_count = :n, keyword_threshold = :t, settings = CAST(:s AS jsonb) "
                "RETURNING generation"
            ),
            {"n": len(graph), "t": graph.resolved_keyword_threshold, "s": json.dumps(graph.model_dump())},
        ).scalar()
        self.graph, self._as_stored = graph, True
        self._checked_at = time.monotonic()

    # -- the retriever --------------------------------------------------------------
    def retriever(self, **kwargs: Any) -> "StoredGraphRetriever":
        """A chain retriever over this graph, as last committed.

        Args:
            **kwargs: [`ChunkGraphRetriever`][llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever] settings.

        Returns:
            The [`StoredGraphRetriever`][llama_index_hiqa.storage.backends.pg_graph.StoredGraphRetriever].
        """
        return StoredGraphRetriever(self, **kwargs)


class StoredGraphRetriever(ChunkGraphRetriever):
    """[`ChunkGraphRetriever`][llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever] over a [`StoredChunkGraph`][llama_index_hiqa.storage.backends.pg_graph.StoredChunkGraph]: each search walks the
    graph as last committed by any process."""

    def __init__(self, stored: StoredChunkGraph, **kwargs: Any) -> None:
        super().__init__(stored.current(), **kwargs)
        self._stored = stored
        self._generation = stored.generation

    def search(self, q_vec: np.ndarray, q_keywords: Set[str]) -> List[Chain]:
        """Evidence chains over the graph as last committed, as lists of (graph row, score), seed first.

        Args:
            q_vec: the question's unit vector.
            q_keywords: the question's keywords.

        Returns:
            The chains (``[]`` over an empty graph).
        """
        graph = self._stored.current()
        if graph is not self.graph or self._stored.generation != self._generation:
            self.use_graph(graph)
            self._generation = self._stored.generation
        if not len(graph):
            return []
        return super().search(q_vec, q_keywords)


# --- rows ---------------------------------------------------------------------------------
def _generation(conn: Connection) -> int:
    """The committed graph's generation; 0 when there is none (or no graph table yet)."""
    if conn.exec_driver_sql("SELECT to_regclass('hiqa_graph')").scalar() is None:
        return 0
    return int(conn.exec_driver_sql("SELECT generation FROM hiqa_graph WHERE id = 1").scalar() or 0)


def _create_tables(conn: Connection) -> None:
    """The graph's tables in a database created before they existed (store format 1)."""
    if conn.exec_driver_sql("SELECT to_regclass('hiqa_graph')").scalar() is None:
        for statement in GRAPH_SCHEMA:
            conn.exec_driver_sql(statement)
        conn.exec_driver_sql(f"UPDATE hiqa_pack SET format = greatest(format, {STORE_FORMAT}) WHERE id = 1")


def _read(conn: Connection, settings: Mapping[str, Any]) -> ChunkInteractionGraph:
    """The committed graph, as saved (an empty one when none is)."""
    meta = None
    if _generation(conn):
        meta = conn.exec_driver_sql("SELECT keyword_threshold, settings FROM hiqa_graph WHERE id = 1").first()
    if meta is None:
        return ChunkInteractionGraph(**settings)
    rows = conn.exec_driver_sql(
        "SELECT node_id, document_id, position, keywords, title_keywords, knn_rows, knn_sims "
        "FROM hiqa_graph_nodes ORDER BY graph_row"
    ).all()
    ids = [r[0] for r in rows]
    vectors = _vectors(conn, ids, deleted=True)  # _reconcile takes the deleted chunks out
    pairs: Dict[EdgeKey, Dict[str, float]] = {}
    for u, v, kind, weight in conn.exec_driver_sql("SELECT u, v, kind, weight FROM hiqa_graph_edges"):
        pairs.setdefault((u, v), dict.fromkeys(KINDS, 0))[kind] = weight if kind == SEMANTIC else int(weight)
    k = max((len(r[5]) for r in rows), default=0)
    knn_ids = np.array([r[5] for r in rows], dtype=np.int64).reshape(len(rows), k)
    knn_sims = np.array([r[6] for r in rows], dtype=np.float32).reshape(len(rows), k)
    settings_saved = meta[1] if isinstance(meta[1], dict) else json.loads(meta[1])
    return ChunkInteractionGraph.from_records(
        settings_saved, meta[0],
        ({"id": r[0], schema.DOCUMENT_ID: r[1], schema.POSITION: r[2], "keywords": r[3], "title_keywords": r[4]} for r in rows),
        ((u, v, w[STRUCTURAL], w[SEMANTIC], w[KEYWORD]) for (u, v), w in pairs.items()),
        vectors, knn_ids, knn_sims,
    )


def _vectors(conn: Connection, node_ids: Sequence[str], graph_rows: bool = True, deleted: bool = False) -> np.ndarray:
    """The stored vectors of ``node_ids`` in that order, as the graph holds them (``graph_rows``)
    or as it is given them (pgvector's binary form: dimension, a reserved int16, then
    big-endian float4s). With ``deleted``, a chunk whose vector is gone (deleted in this
    transaction, about to leave the graph) gets zeros."""
    found = {
        node_id: np.frombuffer(bytes(raw), dtype=">f4", offset=4)
        for node_id, raw in conn.execute(
            text(f"SELECT node_id, vector_send(embedding) FROM data_{VECTOR_TABLE} WHERE node_id = ANY(:ids)"),
            {"ids": list(node_ids)},
        )
    }
    missing = [i for i in node_ids if i not in found]
    if missing and not deleted:
        raise KeyError(f"no stored vector for chunk graph nodes {missing[:5]}")
    if not found:
        return np.zeros((len(node_ids), 0), np.float32)
    zeros = np.zeros_like(next(iter(found.values())))
    found.update((i, zeros) for i in missing)
    given = np.stack([found[i] for i in node_ids]).astype(np.float32)
    return unit_rows(given) if graph_rows else given


def _read_ids(conn: Connection) -> List[str]:
    """Every chunk of the pack (``hiqa_nodes``), in document order."""
    return [r[0] for r in conn.exec_driver_sql("SELECT node_id FROM hiqa_nodes ORDER BY ref_doc_id, position, node_id")]


def _reconcile(
    conn: Connection, graph: ChunkInteractionGraph, nodes: Sequence[BaseNode], keyword_fn: Optional[KeywordFn],
    embed_model: Optional[BaseEmbedding],
) -> Tuple[ChunkInteractionGraph, bool]:
    """``graph`` over exactly the chunks of ``hiqa_nodes``: the removed ones taken out, ``nodes``
    (the batch) and any other missing ones (read with their vectors) added; and whether rows
    were renumbered."""
    current = _read_ids(conn)
    present = set(current)
    removed = [i for i in graph.node_ids if i not in present]
    if removed:
        graph = graph.without_nodes(removed)
    batch = [n for n in nodes if n.node_id in present and n.node_id not in graph]
    known = set(graph.node_ids) | {n.node_id for n in batch}
    missing = [i for i in current if i not in known]
    if missing:
        stored: Dict[str, Any] = {  # node id -> its docstore JSON (a dict, or text)
            key: value for key, value in conn.execute(
                text(f"SELECT key, value FROM data_{DOCSTORE_TABLE} WHERE namespace = 'docstore/data' AND key = ANY(:ids)"),
                {"ids": missing},
            ).all()
        }
        vectors = _vectors(conn, missing, graph_rows=False)
        for node_id, vector in zip(missing, vectors):
            value = stored[node_id]
            node = json_to_doc(value if isinstance(value, dict) else json.loads(value))
            node.embedding = vector.tolist()
            batch.append(node)
    if batch:
        graph.add_nodes(batch, embed_model=embed_model, keyword_fn=keyword_fn)
    return graph, bool(removed)


def _node_rows(graph: ChunkInteractionGraph) -> Dict[str, NodeRow]:
    knn_ids, knn_sims = graph.knn
    ids_l, sims_l = knn_ids.tolist(), knn_sims.tolist()
    return {
        r["id"]: (i, r[schema.DOCUMENT_ID], r[schema.POSITION], tuple(r["keywords"]), tuple(r["title_keywords"]),
                  tuple(ids_l[i]) if i < len(ids_l) else (), tuple(sims_l[i]) if i < len(sims_l) else ())
        for i, r in enumerate(graph.node_records())
    }


def _edge_rows(graph: ChunkInteractionGraph) -> Dict[EdgeKey, EdgeWeights]:
    return {(min(u, v), max(u, v)): (st, se, kw) for u, v, st, se, kw in graph.edge_records()}


def _write_nodes(conn: Connection, before: Mapping[str, NodeRow], after: Mapping[str, NodeRow]) -> None:
    stale = [i for i, row in before.items() if after.get(i) != row]
    if stale:
        conn.execute(text("DELETE FROM hiqa_graph_nodes WHERE node_id = ANY(:ids)"), {"ids": stale})
    fresh = [
        {"node_id": i, "graph_row": row, "document_id": without_nul(doc), "position": pos,
         "keywords": without_nul(list(kw)), "title_keywords": without_nul(list(titles)),
         "knn_rows": list(knn), "knn_sims": list(sims)}
        for i, (row, doc, pos, kw, titles, knn, sims) in after.items() if before.get(i) != after[i]
    ]
    for start in range(0, len(fresh), 1000):
        conn.execute(insert(GRAPH_NODES_TABLE), fresh[start:start + 1000])


def _write_edges(conn: Connection, before: Mapping[EdgeKey, EdgeWeights], after: Mapping[EdgeKey, EdgeWeights]) -> None:
    stale = [pair for pair, weights in before.items() if after.get(pair) != weights]
    if stale:
        conn.execute(
            text("DELETE FROM hiqa_graph_edges e USING unnest(CAST(:u AS text[]), CAST(:v AS text[])) AS d(u, v) "
                 "WHERE e.u = d.u AND e.v = d.v"),
            {"u": [u for u, _ in stale], "v": [v for _, v in stale]},
        )
    buffer = io.StringIO()
    for (u, v), weights in after.items():
        if before.get((u, v)) == weights:
            continue
        for kind, weight in zip(KINDS, weights):
            if weight:
                buffer.write(f"{copy_field(u)}\t{copy_field(v)}\t{kind}\t{float(weight)!r}\n")
    if buffer.tell():
        buffer.seek(0)
        copy_from(conn, "COPY hiqa_graph_edges (u, v, kind, weight) FROM STDIN", buffer)
