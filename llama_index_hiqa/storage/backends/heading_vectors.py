"""Heading-path vectors computed at ingestion and kept with the store.

The document focus ([`DocumentFocusRetriever`][llama_index_hiqa.retrievers.document_focus.DocumentFocusRetriever]) scores every node of a
focused document by the question's similarity to the node's heading path alone (HiQA's
hierarchical metadata, "HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents
QA", §3.2). Embedded at question time, the first question about a document paid for embedding
all its heading paths (a 10-K has hundreds): that question took several times the others.
Here each batch's new heading paths are embedded when the batch is written and stored with
it, keyed by a hash of the heading text, so a question reads them instead:

* the folder store keeps them in memory and writes ``heading_vectors.npz`` into each snapshot
  ([`HeadingVectors`][llama_index_hiqa.storage.backends.heading_vectors.HeadingVectors]);
* the embedded store in its SQLite file ([`SQLiteHeadingVectors`][llama_index_hiqa.storage.backends.heading_vectors.SQLiteHeadingVectors]), in the batch's
  transaction;
* PostgreSQL in ``hiqa_heading_vectors`` ([`PostgresHeadingVectors`][llama_index_hiqa.storage.backends.heading_vectors.PostgresHeadingVectors]), in the batch's
  transaction.

The two database stores also keep what the focus reads of each node (its heading labels,
table kind, share of numbers, document and first page: ``document_focus.focus_facts``), one
narrow row a node, so the first question about a document reads those rows instead of parsing
every node's JSON; the folder store holds its nodes in memory and needs none.

A heading path shared by many documents ("Item 8 > Consolidated Balance Sheets") is one row.
A store built before has none: the focus embeds what it does not find, as before, and keeps
it in memory. Rows are never removed with a document (another document may share the heading;
an unused row is 1.5 KB and never read); vectors are those of the store's embedding model (a
store opened with another model gets none of them).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode
from sqlalchemy.engine import Connection

from llama_index_hiqa.models.local_cache import content_hash
from llama_index_hiqa.pack.config import same_model
from llama_index_hiqa.retrievers.document_focus import embed_headings, focus_facts, heading_text
from llama_index_hiqa.storage.pack_files import StoreFiles
from llama_index_hiqa.storage.pg_schema import without_nul
from llama_index_hiqa.storage.sqlite_kv import SQLiteDatabase

if TYPE_CHECKING:  # the PostgreSQL store module loads only for a postgresql:// store
    from llama_index_hiqa.storage.postgres import PostgresStore

logger = logging.getLogger(__name__)

FILENAME = "heading_vectors.npz"
PG_TABLE = "hiqa_heading_vectors"
PG_SCHEMA = f"CREATE TABLE IF NOT EXISTS {PG_TABLE} (hash text PRIMARY KEY, vector bytea NOT NULL)"
# What the focus reads of each node (document_focus.focus_facts), so a database store's first
# question about a document reads one narrow row a node instead of every node's JSON; removed
# with the node.
PG_FACTS_TABLE = "hiqa_focus_facts"
PG_FACTS_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {PG_FACTS_TABLE} (node_id text PRIMARY KEY "
    "REFERENCES hiqa_nodes (node_id) ON DELETE CASCADE, facts jsonb NOT NULL)"
)


def heading_hash(text: str) -> str:
    """The key of a heading text's vector (128 bits of its sha256).

    Args:
        text: The heading path as one line.

    Returns:
        32 hex digits.
    """
    return content_hash(text)[:32]


def batch_headings(nodes: Iterable[BaseNode]) -> Dict[str, str]:
    """``{hash: heading text}`` of the nodes' distinct non-empty heading paths, sorted by text.

    Args:
        nodes: Segment nodes with heading paths.

    Returns:
        The heading texts by [`heading_hash`][llama_index_hiqa.storage.backends.heading_vectors.heading_hash].
    """
    texts = sorted({t for t in (heading_text(n) for n in nodes) if t})
    return {heading_hash(t): t for t in texts}


def _to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def _from_blob(blob: Union[bytes, memoryview]) -> np.ndarray:
    return np.frombuffer(bytes(blob), dtype="<f4").astype(np.float32)


class _Source:
    """What the focus asks: ``lookup(texts) -> {text: unit vector}`` of those stored."""

    def _read(self, hashes: Sequence[str]) -> Dict[str, np.ndarray]:
        raise NotImplementedError

    def lookup(self, texts: Sequence[str]) -> Dict[str, np.ndarray]:
        """The stored unit vectors of ``texts`` (texts without one are left out).

        Args:
            texts: heading texts (``document_focus.heading_text`` of nodes).

        Returns:
            ``{text: float32 unit vector}`` of the texts the store holds.
        """
        if not texts:
            return {}
        by_hash = {heading_hash(t): t for t in texts}
        try:
            found = self._read(list(by_hash))
        except Exception as exc:  # a store that cannot answer: the focus embeds, as before
            logger.warning("stored heading vectors unreadable (%s); embedding them instead", exc)
            return {}
        return {by_hash[h]: v for h, v in found.items() if h in by_hash}

    def _missing(self, headings: Dict[str, str]) -> Dict[str, str]:
        known = self._read(list(headings)) if headings else {}
        return {h: t for h, t in headings.items() if h not in known}


class HeadingVectors(_Source):
    """The folder store's heading vectors: in memory, saved in each snapshot."""

    def __init__(self, vectors: Optional[Dict[str, np.ndarray]] = None) -> None:
        self._vectors: Dict[str, np.ndarray] = dict(vectors or {})

    def __len__(self) -> int:
        return len(self._vectors)

    def _read(self, hashes: Sequence[str]) -> Dict[str, np.ndarray]:
        return {h: self._vectors[h] for h in hashes if h in self._vectors}

    def add_nodes(self, nodes: Sequence[BaseNode], embed_model: BaseEmbedding) -> int:
        """Embed and keep the heading paths of ``nodes`` not held yet (the batch-write hook).

        Args:
            nodes: a batch's nodes.
            embed_model: the pack's embedding model (the one questions are embedded with).

        Returns:
            How many heading vectors were added.
        """
        missing = self._missing(batch_headings(nodes))
        if not missing or embed_model is None:
            return 0
        self._vectors.update(zip(missing, embed_headings(embed_model, list(missing.values()))))
        return len(missing)

    def save(self, folder: Path) -> None:
        """Write the vectors into a snapshot being written (nothing without vectors).

        Args:
            folder: the snapshot folder; the file is ``heading_vectors.npz`` in it.
        """
        if not self._vectors:
            return
        keys = sorted(self._vectors)
        with open(Path(folder) / FILENAME, "wb") as handle:
            np.savez(handle, hashes=np.asarray(keys), vectors=np.stack([self._vectors[k] for k in keys]))

    @classmethod
    def load(cls, folder: Path) -> "HeadingVectors":
        """The vectors a snapshot ``folder`` holds; none for a store written before them.

        Args:
            folder: the snapshot folder (its manifest has checked the file already).

        Returns:
            A [`HeadingVectors`][llama_index_hiqa.storage.backends.heading_vectors.HeadingVectors], empty when the snapshot has no heading vectors.
        """
        path = Path(folder) / FILENAME
        if not path.is_file():
            return cls()
        with np.load(path, allow_pickle=False) as data:
            return cls(dict(zip(data["hashes"].tolist(), np.asarray(data["vectors"], dtype=np.float32))))


    @classmethod
    def for_snapshot(cls, files: StoreFiles, embed_model: BaseEmbedding) -> "HeadingVectors":
        """The vectors of a loaded snapshot (``pack_files.StoreFiles``), none when the store
        was embedded with another model than ``embed_model`` (they would not compare with its
        questions).

        Args:
            files: The snapshot's files.
            embed_model: The model the questions are embedded with.

        Returns:
            The stored vectors, or none.
        """
        recorded = files.payload.get("embed_model")
        if recorded and not same_model(recorded, embed_model):
            return cls()
        return cls.load(files.folder)


class SQLiteHeadingVectors(_Source):
    """The embedded store's heading vectors: a table of its SQLite file."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self.db = db

    def _read(self, hashes: Sequence[str]) -> Dict[str, np.ndarray]:
        rows = self.db.rows_in("SELECT hash, vector FROM heading_vectors WHERE hash IN ({})", list(hashes))
        return {h: _from_blob(b) for h, b in rows}

    def node_facts(self, node_ids: Sequence[str]) -> Dict[str, List[Any]]:
        """What ``document_focus.focus_facts`` gave for each of ``node_ids`` at ingestion
        (nodes written before it was stored are left out).

        Args:
            node_ids: The nodes asked for.

        Returns:
            ``{node_id: facts}``.
        """
        rows = self.db.rows_in("SELECT node_id, facts FROM focus_facts WHERE node_id IN ({})", list(node_ids))
        return {node_id: json.loads(facts) for node_id, facts in rows}

    def add_nodes(self, nodes: Sequence[BaseNode], embed_model: BaseEmbedding) -> int:
        """Embed the heading paths of ``nodes`` not stored yet and write them (in the caller's
        transaction when one is open: the batch's, so a rolled-back batch leaves none).

        Args:
            nodes: a batch's nodes.
            embed_model: the pack's embedding model.

        Returns:
            How many heading vectors were written.
        """
        missing = self._missing(batch_headings(nodes))
        vectors = embed_headings(embed_model, list(missing.values())) if missing and embed_model is not None else []
        with self.db.transaction():
            self.db.executemany(
                "INSERT OR REPLACE INTO focus_facts (node_id, facts) VALUES (?, ?)",
                [(n.node_id, json.dumps(focus_facts(n))) for n in nodes],
            )
            self.db.executemany(
                "INSERT OR IGNORE INTO heading_vectors (hash, vector) VALUES (?, ?)",
                [(h, _to_blob(v)) for h, v in zip(missing, vectors)],
            )
        return len(vectors)


class PostgresHeadingVectors(_Source):
    """PostgreSQL's heading vectors: ``hiqa_heading_vectors``, written in each batch's
    transaction (a database written before this table existed gets it from its next writer)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._exists = False
        self._facts_exist = False

    def node_facts(self, node_ids: Sequence[str]) -> Dict[str, List[Any]]:
        """What ``document_focus.focus_facts`` gave for each of ``node_ids`` at ingestion, in
        one statement (nodes written before it was stored are left out).

        Args:
            node_ids: The nodes asked for.

        Returns:
            ``{node_id: facts}``.
        """
        if not self._facts_exist:
            self._facts_exist = self.store.scalar(f"SELECT to_regclass('{PG_FACTS_TABLE}') IS NOT NULL")
            if not self._facts_exist:
                return {}
        rows = self.store.rows(f"SELECT node_id, facts FROM {PG_FACTS_TABLE} WHERE node_id = ANY(:ids)", ids=list(node_ids))
        return {node_id: facts if isinstance(facts, list) else json.loads(facts) for node_id, facts in rows}

    def _read(self, hashes: Sequence[str]) -> Dict[str, np.ndarray]:
        if not self._exists:
            self._exists = self.store.scalar(f"SELECT to_regclass('{PG_TABLE}') IS NOT NULL")
            if not self._exists:
                return {}
        rows = self.store.rows(f"SELECT hash, vector FROM {PG_TABLE} WHERE hash = ANY(:h)", h=list(hashes))
        return {h: _from_blob(b) for h, b in rows}

    def rows_for(self, nodes: Sequence[BaseNode], embed_model: BaseEmbedding) -> List[Tuple[str, bytes]]:
        """The heading paths of ``nodes`` not stored yet, embedded (before the batch's
        transaction opens: embedding is the slow part).

        Args:
            nodes: a batch's nodes.
            embed_model: the pack's embedding model.

        Returns:
            ``(hash, little-endian float32 bytes)`` rows for ``hiqa_heading_vectors``.
        """
        missing = self._missing(batch_headings(nodes))
        if not missing or embed_model is None:
            return []
        return [(h, _to_blob(v)) for h, v in zip(missing, embed_headings(embed_model, list(missing.values())))]

    def writer(
        self, nodes: Sequence[BaseNode], embed_model: BaseEmbedding, then: Optional[Callable[[Connection], None]] = None
    ) -> Callable[[Connection], None]:
        """What writes the heading vectors of ``nodes`` in a write's transaction, then calls
        ``then`` (the batch-write hook: ``PostgresStore.write(..., then=writer(...))``).

        Args:
            nodes: the batch's nodes.
            embed_model: the pack's embedding model.
            then: what else runs in the transaction afterwards (the chunk graph), or ``None``.

        Returns:
            A function of the transaction's connection.
        """
        rows = self.rows_for(nodes, embed_model)
        facts = [(n.node_id, json.dumps(without_nul(focus_facts(n)))) for n in nodes]

        def write(conn: Connection) -> None:
            if rows:
                write_pg_rows(conn, rows)
            if facts:
                conn.exec_driver_sql(PG_FACTS_SCHEMA)
                conn.exec_driver_sql(
                    f"INSERT INTO {PG_FACTS_TABLE} (node_id, facts) SELECT * FROM unnest(%(i)s::text[], %(f)s::jsonb[]) "
                    "ON CONFLICT (node_id) DO UPDATE SET facts = EXCLUDED.facts",
                    {"i": [i for i, _ in facts], "f": [f for _, f in facts]},
                )
            if then is not None:
                then(conn)

        return write


def write_pg_rows(conn: Connection, rows: Sequence[Tuple[str, bytes]]) -> None:
    """Insert heading-vector rows on a transaction's connection (rows another writer stored
    meanwhile are kept: the same text gives the same vector).

    Args:
        conn: The transaction's connection.
        rows: ``(hash, float32 bytes)`` pairs.
    """
    conn.exec_driver_sql(PG_SCHEMA)
    conn.exec_driver_sql(
        f"INSERT INTO {PG_TABLE} (hash, vector) SELECT * FROM unnest(%(h)s::text[], %(v)s::bytea[]) "
        "ON CONFLICT (hash) DO NOTHING",
        {"h": [h for h, _ in rows], "v": [v for _, v in rows]},
    )


__all__ = [
    "HeadingVectors",
    "PostgresHeadingVectors",
    "SQLiteHeadingVectors",
    "batch_headings",
    "heading_hash",
]
