"""A LlamaIndex vector store that keeps the vectors as one float32 matrix.

LlamaIndex's ``SimpleVectorStore`` keeps every vector as a Python list of floats (about 24
bytes a dimension instead of 4), a copy of every node's metadata beside it, and converts all
of them to NumPy on every query. At a million 384-dimensional nodes that is about 10 GB of
lists and a second per query. [`MatrixVectorStore`][llama_index_hiqa.storage.vector_store.MatrixVectorStore] keeps unit vectors in one contiguous
``float32`` matrix (1.5 KB a node at 384 dimensions), answers a query with one matrix-vector
product, and persists to one ``.npz`` file. It is what [`HiQAPack`][llama_index_hiqa.pack.hiqa_pack.HiQAPack]
uses when no vector store is given; any other LlamaIndex vector store can be passed instead.

Exact cosine search, like ``SimpleVectorStore``: for collections past a few million nodes
use an approximate index (pgvector's HNSW, FAISS, Qdrant, ...) through its LlamaIndex store.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set

import numpy as np
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

VECTORS_FILENAME = "vectors.npz"


class MatrixVectorStore(BasePydanticVectorStore):
    """Exact cosine top-k over a float32 matrix; nodes live in the docstore (``stores_text=False``)."""

    stores_text: bool = False
    is_embedding_query: bool = True

    _matrix: np.ndarray = PrivateAttr()
    _ids: List[str] = PrivateAttr(default_factory=list)
    _ref_doc_ids: List[str] = PrivateAttr(default_factory=list)
    _row: Dict[str, int] = PrivateAttr(default_factory=dict)
    # Rows added since the last read, stacked on the next read: adding batch after batch
    # would otherwise copy the whole matrix once per batch.
    _pending: List[np.ndarray] = PrivateAttr(default_factory=list)

    def __init__(self, dim: Optional[int] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._matrix = np.zeros((0, dim or 0), dtype=np.float32)

    @classmethod
    def class_name(cls) -> str:
        return "MatrixVectorStore"

    @property
    def client(self) -> None:
        return None

    # -- facts ----------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        """Vector dimension (0 while empty and built without ``dim``)."""
        return int(self._pending[0].shape[1] if self._pending else self._matrix.shape[1])

    @property
    def count(self) -> int:
        """Number of vectors. (No ``__len__``: LlamaIndex tests stores for truth, and an
        empty store must not read as "no store".)"""
        return len(self._ids)

    @property
    def node_ids(self) -> List[str]:
        return list(self._ids)

    # -- writes ---------------------------------------------------------------------------
    def add(self, nodes: Sequence[BaseNode], unit: bool = False, **add_kwargs: Any) -> List[str]:
        """Store the nodes' embeddings as unit vectors; a node id stored already is overwritten.

        Args:
            nodes: the nodes, each with an embedding of the store's dimension.
            unit: ``True`` when they are unit vectors of a store already (a copy), kept bit for
                bit (normalising them again may change the last bit of a score).
            **add_kwargs: ignored (LlamaIndex's signature).

        Returns:
            The node ids, in order.

        Raises:
            ValueError: the embeddings differ in length, or from the store's dimension (another
                embedding model?).
        """
        if not nodes:
            return []
        vectors = embedding_rows(nodes, "MatrixVectorStore")
        if len(self._ids):
            check_dimension(vectors, self.dim, "MatrixVectorStore")
        if not unit:
            vectors = _unit_rows(vectors)
        new_rows: List[np.ndarray] = []
        for node, vector in zip(nodes, vectors):
            row = self._row.get(node.node_id)
            if row is not None:  # re-added id: overwrite in place
                self._consolidate()
                self._matrix[row] = vector
                self._ref_doc_ids[row] = node.ref_doc_id or ""
                continue
            self._row[node.node_id] = len(self._ids)
            new_rows.append(vector)
            self._ids.append(node.node_id)
            self._ref_doc_ids.append(node.ref_doc_id or "")
        if new_rows:
            self._pending.append(np.vstack(new_rows))
        return [n.node_id for n in nodes]

    def _consolidate(self) -> np.ndarray:
        if self._pending:
            blocks = ([self._matrix] if self._matrix.shape[0] else []) + self._pending
            self._matrix = np.vstack(blocks)
            self._pending = []
        return self._matrix

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete the vectors of every node of a document.

        Args:
            ref_doc_id: the document's id.
            **delete_kwargs: ignored (LlamaIndex's signature).
        """
        self._drop({i for i, ref in enumerate(self._ref_doc_ids) if ref == ref_doc_id})

    def delete_nodes(
        self, node_ids: Optional[List[str]] = None, filters: Any = None, **delete_kwargs: Any
    ) -> None:
        """Delete the vectors of ``node_ids`` (unknown ids are skipped).

        Args:
            node_ids: the node ids; ``None`` deletes nothing.
            filters: not supported (the store keeps no metadata).
            **delete_kwargs: ignored (LlamaIndex's signature).

        Raises:
            ValueError: ``filters`` is given.
        """
        if filters is not None:
            raise ValueError("MatrixVectorStore keeps no metadata: delete by node_ids or ref_doc_id")
        self._drop({self._row[i] for i in node_ids or [] if i in self._row})

    def clear(self) -> None:
        self._drop(set(range(len(self._ids))))

    def _drop(self, rows: Set[int]) -> None:
        if not rows:
            return
        self._consolidate()
        keep = np.array([i for i in range(len(self._ids)) if i not in rows], dtype=np.int64)
        self._matrix = self._matrix[keep] if len(keep) else self._matrix[:0]
        self._ids = [self._ids[i] for i in keep]
        self._ref_doc_ids = [self._ref_doc_ids[i] for i in keep]
        self._row = {node_id: i for i, node_id in enumerate(self._ids)}

    # -- reads ----------------------------------------------------------------------------
    def get(self, text_id: str) -> List[float]:
        """The (unit) vector of one node, as ``SimpleVectorStore.get`` gives it.

        Args:
            text_id: the node id.

        Returns:
            The vector as a list of floats.

        Raises:
            KeyError: the id is unknown.
        """
        return self._consolidate()[self._row[text_id]].tolist()

    def get_embeddings(self, node_ids: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``node_ids``.

        Args:
            node_ids: the node ids.

        Returns:
            A ``(len(node_ids), dimension)`` float32 array, rows in the order of ``node_ids``.

        Raises:
            KeyError: an id is unknown.
        """
        return self._consolidate()[[self._row[i] for i in node_ids]]

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Exact cosine top-k over the matrix.

        Args:
            query: LlamaIndex's query: ``query_embedding``, ``similarity_top_k`` and, to restrict
                the candidates, ``node_ids`` or ``doc_ids``.
            **kwargs: ignored (LlamaIndex's signature).

        Returns:
            The ids and cosine similarities, best first; no nodes (the docstore holds
                them).

        Raises:
            ValueError: metadata filters, a mode other than the default, or a query embedding of
                another dimension.
        """
        if query.filters is not None:
            raise ValueError(
                "MatrixVectorStore keeps no metadata and cannot filter; restrict by node_ids or "
                "doc_ids, or pass a vector store with metadata filters to HiQAPack"
            )
        if query.mode != VectorStoreQueryMode.DEFAULT:
            raise ValueError(f"MatrixVectorStore answers the default mode only, not {query.mode}")
        if query.query_embedding is None or not self._ids:
            return VectorStoreQueryResult(ids=[], similarities=[])
        q = _unit_rows(np.asarray([query.query_embedding], dtype=np.float32))[0]
        if q.shape[0] != self.dim:
            raise ValueError(
                f"query embedding of dimension {q.shape[0]} against a store of dimension {self.dim}"
            )
        matrix = self._consolidate()
        rows = self._candidate_rows(query)
        scores = matrix @ q if rows is None else matrix[rows] @ q
        best = top_k_rows(scores, query.similarity_top_k)
        if not len(best):
            return VectorStoreQueryResult(ids=[], similarities=[])
        chosen = best if rows is None else rows[best]
        return VectorStoreQueryResult(
            ids=[self._ids[i] for i in chosen], similarities=[float(scores[i]) for i in best]
        )

    def _candidate_rows(self, query: VectorStoreQuery) -> Optional[np.ndarray]:
        """Rows a query is restricted to (``None``: all). ``VectorIndexRetriever`` passes every
        id of its index with each query when the store keeps no text, so this must stay cheap:
        one boolean mask, no per-id Python sets."""
        if query.node_ids is None and query.doc_ids is None:
            return None
        count = len(self._ids)
        mask = np.ones(count, dtype=bool)
        if query.node_ids is not None:
            picked = np.zeros(count, dtype=bool)
            rows = [r for r in map(self._row.get, query.node_ids) if r is not None]
            picked[rows] = True
            mask &= picked
        if query.doc_ids is not None:
            documents = set(query.doc_ids)
            mask &= np.fromiter((ref in documents for ref in self._ref_doc_ids), dtype=bool, count=count)
        return None if mask.all() else np.flatnonzero(mask)

    # -- persistence ----------------------------------------------------------------------
    def persist(self, persist_path: str, fs: Any = None) -> None:
        """Write one ``.npz`` file: the matrix, the node ids and their document ids.

        The file is flushed to disk before returning.

        Args:
            persist_path: the file to write (its folder is created when missing).
            fs: ignored (LlamaIndex's signature).
        """
        buffer = io.BytesIO()
        np.savez(
            buffer,
            vectors=self._consolidate(),
            ids=np.array(self._ids, dtype=str),
            ref_doc_ids=np.array(self._ref_doc_ids, dtype=str),
        )
        path = Path(persist_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(buffer.getbuffer())
            handle.flush()
            os.fsync(handle.fileno())

    @classmethod
    def from_persist_path(cls, persist_path: str, fs: Any = None) -> "MatrixVectorStore":
        """Load what [`persist`][llama_index_hiqa.storage.vector_store.MatrixVectorStore.persist] wrote.

        Args:
            persist_path: the ``.npz`` file.
            fs: ignored (LlamaIndex's signature).

        Returns:
            The store.

        Raises:
            ValueError: the file is damaged (names it): unreadable, inconsistent lengths or
                duplicate node ids.
        """
        path = Path(persist_path)
        try:
            with np.load(path, allow_pickle=False) as data:
                matrix = np.asarray(data["vectors"], dtype=np.float32)
                ids = [str(i) for i in data["ids"]]
                refs = [str(r) for r in data["ref_doc_ids"]]
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{path}: not a readable vector file ({exc.__class__.__name__}: {exc})") from exc
        if matrix.ndim != 2 or matrix.shape[0] != len(ids) or len(ids) != len(refs):
            raise ValueError(
                f"{path}: {matrix.shape} vectors for {len(ids)} ids and {len(refs)} document ids"
            )
        if len(set(ids)) != len(ids):
            raise ValueError(f"{path}: duplicate node ids")
        store = cls(dim=matrix.shape[1])
        store._matrix, store._ids, store._ref_doc_ids = matrix, ids, refs
        store._row = {node_id: i for i, node_id in enumerate(ids)}
        return store


def embedding_rows(nodes: Sequence[BaseNode], store: str) -> np.ndarray:
    """The nodes' embeddings as one float32 matrix, a row a node.

    Args:
        nodes: the nodes, each with an embedding.
        store: the store's class name, for the error.

    Returns:
        The matrix.

    Raises:
        ValueError: the embeddings differ in length.
    """
    vectors = np.asarray([n.get_embedding() for n in nodes], dtype=np.float32)
    if vectors.ndim != 2:
        raise ValueError(f"{store}.add: every node needs an embedding of the same length")
    return vectors


def check_dimension(vectors: np.ndarray, dim: int, store: str) -> None:
    """Refuse embeddings of another dimension than the store's.

    Args:
        vectors: the new rows.
        dim: the store's dimension.
        store: the store's class name, for the error.

    Raises:
        ValueError: the dimensions differ (another embedding model?).
    """
    if vectors.shape[1] != dim:
        raise ValueError(
            f"{store}.add: embeddings of dimension {vectors.shape[1]} do not match "
            f"the store's {dim} (another embedding model?)"
        )


def top_k_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """The indices of the ``k`` best ``scores``, best first (ties in index order).

    Args:
        scores: one score a row.
        k: how many (fewer when there are fewer rows; none when ``k`` is 0).

    Returns:
        The indices.
    """
    k = min(k, scores.shape[0])
    if k <= 0:
        return np.arange(0)
    best = np.argpartition(-scores, k - 1)[:k] if k < scores.shape[0] else np.arange(scores.shape[0])
    return best[np.argsort(-scores[best], kind="stable")]


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)
