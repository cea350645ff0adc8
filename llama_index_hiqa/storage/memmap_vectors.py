"""A LlamaIndex vector store whose float32 matrix stays on disk, memory-mapped.

[`MatrixVectorStore`][llama_index_hiqa.storage.vector_store.MatrixVectorStore] keeps the matrix in memory and writes it whole on
every save. [`MemmapVectorStore`][llama_index_hiqa.storage.memmap_vectors.MemmapVectorStore] appends each batch's unit vectors to one raw float32 file
(``vectors.f32``, one row a node) and maps it read-only for queries, so opening a store costs
no reading and the operating system keeps in memory only the pages queries touch (as page
cache it can drop). Which row holds which node lives in an SQLite table beside it
(`SQLiteDatabase`), written in the caller's
transaction: the rows of a batch are written and flushed to the file first, then the table
commits, so a process killed at any instant leaves the rows of the last commit (bytes past
them are overwritten by the next writer). Deleted rows are masked, not moved.

Exact cosine top-k, the same computation as ``MatrixVectorStore`` (one matrix-vector product
over unit rows), so both give the same scores and the same order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

import numpy as np
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from llama_index_hiqa.storage.sqlite_kv import SQLiteDatabase
from llama_index_hiqa.storage.vector_store import _unit_rows, check_dimension, embedding_rows, top_k_rows

MATRIX_FILENAME = "vectors.f32"
DATABASE_FILENAME = "vectors.sqlite"
_ROWS, _DIM, _VERSION = "vector_rows", "vector_dim", "vector_version"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS vector_rows (row INTEGER PRIMARY KEY, node_id TEXT NOT NULL UNIQUE, "
    "ref_doc_id TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS vector_rows_ref ON vector_rows (ref_doc_id)",
    "CREATE TABLE IF NOT EXISTS vector_free (row INTEGER PRIMARY KEY)",
)


class _Matrix(NamedTuple):
    """The mapped rows (``None`` while empty) and the mask of deleted ones (``None``: none)."""

    rows: Optional[np.ndarray]
    dead: Optional[np.ndarray]


@dataclass(frozen=True)
class _Seen:
    """What this process has read of the store, all of one version (the store's write counter).

    Each part is read at its first use at that version (``None`` until then). The store holds
    one and replaces it whole, under its database's lock: when the version on disk is another
    (a write of another process), this one is dropped for an empty one of the new version; a
    rollback drops it; a write of this process makes the next version's from it (the ids moved
    on in place, so a write costs what it adds, not a copy of every id; the rows mapped again).
    So the ids and the rows a query reads can never be of two versions.
    """

    version: int
    matrix: Optional[_Matrix] = None
    # Every live node id in row order (dict keys: ordered, O(1) membership).
    ids: Optional[Dict[str, None]] = None


class MemmapVectorStore(BasePydanticVectorStore):
    """Exact cosine top-k over a memory-mapped float32 matrix; nodes live in the docstore
    (``stores_text=False``). ``MemmapVectorStore.open(folder)`` for a store of its own, or
    ``MemmapVectorStore(folder, database=db)`` to share a database (and its transactions)."""

    stores_text: bool = False
    is_embedding_query: bool = True
    folder: str

    _db: SQLiteDatabase = PrivateAttr()
    _node_loader: Optional[Callable[[List[str]], List[BaseNode]]] = PrivateAttr(default=None)
    # What this process has read, and of which version. This process's writes carry the ids
    # on, so a retriever rebuilt after adding one document to a million-node store reads no id
    # again (seconds of reading otherwise); another process's write (the version moved on) or a
    # rollback makes everything be read again. Read and replaced only under ``_db.lock``: the
    # lock a writer of this process holds from its first read to its commit, so a reading is
    # never of half a write, and there is no second lock to take in another order.
    _seen: Optional[_Seen] = PrivateAttr(default=None)

    def __init__(self, folder: str, database: Optional[SQLiteDatabase] = None, **kwargs: Any) -> None:
        super().__init__(folder=str(folder), **kwargs)
        Path(folder).mkdir(parents=True, exist_ok=True)
        self._db = database or SQLiteDatabase(Path(folder) / DATABASE_FILENAME)
        self._db.create_tables(_SCHEMA)

    @classmethod
    def open(cls, folder: str) -> "MemmapVectorStore":
        """The store in ``folder`` (created when missing).

        Args:
            folder: the store's folder.

        Returns:
            The store.
        """
        return cls(folder)

    @classmethod
    def class_name(cls) -> str:
        return "MemmapVectorStore"

    @property
    def client(self) -> None:
        return None

    @property
    def matrix_path(self) -> Path:
        return Path(self.folder) / MATRIX_FILENAME

    def set_node_loader(self, loader: Optional[Callable[[List[str]], List[BaseNode]]]) -> None:
        """Return the result nodes with each query, read by ``loader(ids)``.

        The loader is the docstore's ``get_nodes``: a retriever then needs no index struct listing
        every node id.

        Args:
            loader: a function from node ids to their nodes; ``None`` returns ids only.
        """
        self._node_loader = loader

    # -- facts ----------------------------------------------------------------------------
    def _meta_int(self, key: str) -> int:
        value = self._db.get_meta(key)
        return int(value) if value else 0

    @property
    def dim(self) -> int:
        """Vector dimension (0 while empty)."""
        return self._meta_int(_DIM)

    @property
    def count(self) -> int:
        """Number of (live) vectors."""
        return int(self._db.scalar("SELECT COUNT(*) FROM vector_rows"))

    @property
    def node_ids(self) -> List[str]:
        """Every live node id, in row order (the order the nodes were added)."""
        return list(self.node_id_order())

    def node_id_order(self) -> Dict[str, None]:
        """Every live node id in row order, as the keys of a dict (a copy: later writes do
        not change it), read from the table only when another process wrote since.

        Returns:
            ``{node id: None}`` in row order.
        """
        with self._db.lock:
            seen = self._seen_now()
            if seen.ids is None:
                ids = dict.fromkeys(r[0] for r in self._db.rows("SELECT node_id FROM vector_rows ORDER BY row"))
                seen = self._seen = replace(seen, ids=ids)
            assert seen.ids is not None
            return dict(seen.ids)

    def _seen_now(self) -> _Seen:
        """What is held, when it is of the version on disk; else an empty reading of that
        version. The caller holds ``_db.lock``."""
        version = self._meta_int(_VERSION)
        seen = self._seen
        return seen if seen is not None and seen.version == version else _Seen(version)

    def _advance(self, version_before: int, added: Sequence[str] = (), removed: Sequence[str] = ()) -> None:
        """Move what is held on past this process's write (in its transaction, after the
        version was bumped): the ids, when held at the version the write started from, with the
        write applied; the rows are mapped again at the next query. Held at another version,
        everything is dropped (read again at the next use)."""
        seen, self._seen = self._seen, None
        if seen is None or seen.version != version_before or seen.ids is None:
            return
        ids = seen.ids  # handed on: the reading it belonged to is gone
        for node_id in removed:
            ids.pop(node_id, None)
        for node_id in added:
            ids[node_id] = None
        self._seen = _Seen(self._meta_int(_VERSION), ids=ids)

    # -- writes ---------------------------------------------------------------------------
    def add(self, nodes: Sequence[BaseNode], unit: bool = False, **add_kwargs: Any) -> List[str]:
        """Store the nodes' embeddings as unit vectors, in one transaction.

        A node id stored already is overwritten in place.

        Args:
            nodes: the nodes, each with an embedding of the store's dimension.
            unit: ``True`` when they are unit vectors of a store already, kept bit for bit
                instead of normalised again.
            **add_kwargs: ignored (LlamaIndex's signature).

        Returns:
            The node ids, in order.

        Raises:
            ValueError: the embeddings differ in length, or from the store's dimension (another
                embedding model?).
        """
        if not nodes:
            return []
        vectors = embedding_rows(nodes, "MemmapVectorStore")
        if not unit:
            vectors = _unit_rows(vectors)
        with self._db.transaction():
            self._db.on_rollback(self._forget)
            stored_dim = self.dim  # 0 while empty: the first batch sets it
            if stored_dim:
                check_dimension(vectors, stored_dim, "MemmapVectorStore")
            dim = vectors.shape[1]
            ids = [n.node_id for n in nodes]
            existing = dict(self._db.rows_in("SELECT node_id, row FROM vector_rows WHERE node_id IN ({})", ids))
            rows_end = self._meta_int(_ROWS)
            placed: Dict[str, int] = {}
            fresh: List[Tuple[int, str, str]] = []
            for node in nodes:
                row = existing.get(node.node_id, placed.get(node.node_id))
                if row is None:
                    row = rows_end + len(fresh)
                    fresh.append((row, node.node_id, node.ref_doc_id or ""))
                placed[node.node_id] = row
            self._write_rows(placed, ids, vectors, dim)
            self._db.conn.executemany("INSERT INTO vector_rows (row, node_id, ref_doc_id) VALUES (?, ?, ?)", fresh)
            updates = [(n.ref_doc_id or "", placed[n.node_id]) for n in nodes if n.node_id in existing]
            self._db.conn.executemany("UPDATE vector_rows SET ref_doc_id = ? WHERE row = ?", updates)
            self._db.set_meta(_DIM, str(dim))
            self._db.set_meta(_ROWS, str(rows_end + len(fresh)))
            version = self._meta_int(_VERSION)
            self._bump()
            self._advance(version, added=[node_id for _row, node_id, _ref in fresh])
        return ids

    def _write_rows(self, placed: Dict[str, int], ids: List[str], vectors: np.ndarray, dim: int) -> None:
        """Each node's unit vector at its row (the last vector of an id given twice wins),
        flushed to disk before the caller's transaction commits."""
        row_bytes = dim * 4
        fd = os.open(self.matrix_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            by_row = {placed[node_id]: i for i, node_id in enumerate(ids)}
            rows = sorted(by_row)
            start = 0
            while start < len(rows):  # one write per run of consecutive rows
                end = start
                while end + 1 < len(rows) and rows[end + 1] == rows[end] + 1:
                    end += 1
                block = vectors[[by_row[r] for r in rows[start:end + 1]]]
                os.pwrite(fd, np.ascontiguousarray(block, dtype="<f4").tobytes(), rows[start] * row_bytes)
                start = end + 1
            os.fsync(fd)
        finally:
            os.close(fd)

    def _bump(self) -> None:
        self._db.set_meta(_VERSION, str(self._meta_int(_VERSION) + 1))

    def _forget(self) -> None:
        """Drop what is held (a rollback: called under ``_db.lock`` by the transaction)."""
        self._seen = None

    def _free(self, found: Sequence[Tuple[Any, ...]]) -> None:
        """Mask the rows of ``found`` (``(row, node id)`` pairs) and forget their ids."""
        if not found:
            return
        rows = [row for row, _node_id in found]
        with self._db.transaction():
            self._db.on_rollback(self._forget)
            for start in range(0, len(rows), 900):
                chunk = rows[start:start + 900]
                marks = ",".join("?" * len(chunk))
                self._db.execute(f"DELETE FROM vector_rows WHERE row IN ({marks})", chunk)
            self._db.conn.executemany("INSERT OR IGNORE INTO vector_free (row) VALUES (?)", [(r,) for r in rows])
            version = self._meta_int(_VERSION)
            self._bump()
            self._advance(version, removed=[node_id for _row, node_id in found])

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete the vectors of every node of a document.

        Args:
            ref_doc_id: the document's id.
            **delete_kwargs: ignored (LlamaIndex's signature).
        """
        self._free(self._db.rows("SELECT row, node_id FROM vector_rows WHERE ref_doc_id = ?", (ref_doc_id,)))

    def delete_nodes(self, node_ids: Optional[List[str]] = None, filters: Any = None, **delete_kwargs: Any) -> None:
        """Delete the vectors of ``node_ids`` (unknown ids are skipped).

        Args:
            node_ids: the node ids; ``None`` deletes nothing.
            filters: not supported (the store keeps no metadata).
            **delete_kwargs: ignored (LlamaIndex's signature).

        Raises:
            ValueError: ``filters`` is given.
        """
        if filters is not None:
            raise ValueError("MemmapVectorStore keeps no metadata: delete by node_ids or ref_doc_id")
        self._free(self._db.rows_in("SELECT row, node_id FROM vector_rows WHERE node_id IN ({})", node_ids or []))

    def clear(self) -> None:
        self._free(self._db.rows("SELECT row, node_id FROM vector_rows"))

    def persist(self, persist_path: str = "", fs: Any = None) -> None:
        """Nothing to write: every add is on disk when its transaction commits.

        Args:
            persist_path: ignored (LlamaIndex's signature).
            fs: ignored (LlamaIndex's signature).
        """

    # -- reads ----------------------------------------------------------------------------
    def _matrix(self) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
        """The mapped rows of the last commit and the mask of deleted ones (re-read only
        after a write)."""
        with self._db.lock:
            seen = self._seen_now()
            if seen.matrix is None:
                rows, dim = self._meta_int(_ROWS), self.dim
                # A plain ndarray view of the mapping: products on the np.memmap subclass itself
                # take a slow path (hundreds of times slower here).
                mapped = (
                    np.asarray(np.memmap(self.matrix_path, dtype="<f4", mode="r", shape=(rows, dim)))
                    if rows and dim else None
                )
                dead = np.zeros(rows, dtype=bool)
                freed = [r[0] for r in self._db.rows("SELECT row FROM vector_free WHERE row < ?", (rows,))]
                dead[freed] = True
                seen = self._seen = replace(seen, matrix=_Matrix(mapped, dead if freed else None))
            assert seen.matrix is not None
            return seen.matrix.rows, seen.matrix.dead

    def _rows_of(self, node_ids: Sequence[str]) -> Dict[str, int]:
        return dict(self._db.rows_in("SELECT node_id, row FROM vector_rows WHERE node_id IN ({})", list(node_ids)))

    def get(self, text_id: str) -> List[float]:
        """The (unit) vector of one node, as ``SimpleVectorStore.get`` gives it.

        Args:
            text_id: the node id.

        Returns:
            The vector as a list of floats.

        Raises:
            KeyError: the id is unknown.
        """
        return self.get_embeddings([text_id])[0].tolist()

    def get_embeddings(self, node_ids: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``node_ids``.

        Args:
            node_ids: the node ids.

        Returns:
            A ``(len(node_ids), dimension)`` float32 array, rows in the order of ``node_ids``.

        Raises:
            KeyError: an id is unknown (names the first).
        """
        rows = self._rows_of(node_ids)
        matrix, _ = self._matrix()
        missing = [i for i in node_ids if i not in rows]
        if missing:
            raise KeyError(missing[0])
        if matrix is None:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.asarray(matrix[[rows[i] for i in node_ids]])

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Exact cosine top-k.

        Args:
            query: LlamaIndex's query: ``query_embedding``, ``similarity_top_k`` and, to restrict
                the candidates, ``node_ids`` or ``doc_ids``.
            **kwargs: ``ids_only=True`` (a ``vector_store_kwargs`` of the retriever) makes the
                result nodes empty stand-ins carrying the ids, not read from the docstore.

        Returns:
            The ids and cosine similarities, best first, with the nodes
                when a loader is set.

        Raises:
            ValueError: metadata filters, a mode other than the default, or a query embedding of
                another dimension.
        """
        if query.filters is not None:
            raise ValueError(
                "MemmapVectorStore keeps no metadata and cannot filter; restrict by node_ids or doc_ids"
            )
        if query.mode != VectorStoreQueryMode.DEFAULT:
            raise ValueError(f"MemmapVectorStore answers the default mode only, not {query.mode}")
        matrix, dead = self._matrix()
        if query.query_embedding is None or matrix is None:
            return VectorStoreQueryResult(ids=[], similarities=[], nodes=[] if self._node_loader else None)
        q = _unit_rows(np.asarray([query.query_embedding], dtype=np.float32))[0]
        if q.shape[0] != matrix.shape[1]:
            raise ValueError(f"query embedding of dimension {q.shape[0]} against a store of dimension {matrix.shape[1]}")
        rows = self._candidate_rows(query)
        if rows is not None and dead is None and len(rows) == matrix.shape[0]:
            rows = None  # every row: the product over the whole matrix, as MatrixVectorStore computes it
        if rows is None:
            scores = np.asarray(matrix @ q)
            if dead is not None:  # only live rows compete, as in a matrix without the deleted ones
                rows = np.flatnonzero(~dead)
                scores = scores[rows]
        else:
            scores = np.asarray(matrix[rows] @ q)
        best = top_k_rows(scores, query.similarity_top_k)
        if not len(best):
            return VectorStoreQueryResult(ids=[], similarities=[], nodes=[] if self._node_loader else None)
        chosen = best if rows is None else rows[best]
        names = dict(self._db.rows_in("SELECT row, node_id FROM vector_rows WHERE row IN ({})", [int(r) for r in chosen]))
        # Another process may delete a chosen row between the mapping above and this read: the
        # row is gone, so it is not an answer (never a KeyError in the middle of a question).
        kept = [(names[int(r)], float(scores[i])) for r, i in zip(chosen, best) if int(r) in names]
        ids = [node_id for node_id, _ in kept]
        if kwargs.get("ids_only"):
            # The caller wants scores by id (a retriever route that reads its few result nodes
            # later): id-only stand-ins, so LlamaIndex's retriever needs no node from anywhere.
            nodes: Optional[List[BaseNode]] = [TextNode(id_=i, text="") for i in ids]
        else:
            nodes = self._node_loader(ids) if self._node_loader is not None else None
        return VectorStoreQueryResult(ids=ids, similarities=[score for _, score in kept], nodes=nodes)

    def _candidate_rows(self, query: VectorStoreQuery) -> Optional[np.ndarray]:
        """Rows a query is restricted to, ascending (``None``: all live rows)."""
        if query.node_ids is None and query.doc_ids is None:
            return None
        rows: Optional[Set[int]] = None
        if query.node_ids is not None:
            rows = set(self._rows_of(query.node_ids).values())
        if query.doc_ids is not None:
            by_doc = {r[0] for r in self._db.rows_in("SELECT row FROM vector_rows WHERE ref_doc_id IN ({})", list(query.doc_ids))}
            rows = by_doc if rows is None else rows & by_doc
        return np.array(sorted(rows or ()), dtype=np.int64)


__all__ = ["MemmapVectorStore", "MATRIX_FILENAME"]
