"""The embedded store: one SQLite file and one memory-mapped matrix in a folder.

A folder store ([`folder`][llama_index_hiqa.storage.backends.folder]) loads the whole collection into
memory and writes it whole on every save. The embedded store keeps it on disk and reads what a
question needs::

    S/
      hiqa.sqlite        the docstore (LlamaIndex's KVDocumentStore over SQLiteKVStore: node
                         text, metadata, relationships, document hashes), the row of each
                         node's vector, the critical-keyword postings, one row a document
                         (id, title, pages: the collection's shape) and the pack's settings
      vectors.f32        the unit vectors, one float32 row a node (MemmapVectorStore)
      bm25-<n>/          the BM25 base (bm25s arrays and term frequencies, memory-mapped when
                         read) built after write <n>, and beside it segment-<r>/ folders: the
                         term frequencies of the nodes added since, up to store row <r>
                         (retrievers/bm25_segments.py scores them as one index)
      images/            figure files, named by content hash

Every ingested batch is one SQLite transaction (write-ahead log): its vectors are written and
flushed to ``vectors.f32`` first, then its nodes, vector rows, postings and document records
commit together. A process killed at any instant leaves the store as the last committed batch
left it; nothing half-written is ever read. Readers in other processes see each commit.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from llama_index.core.schema import BaseNode

from llama_index_hiqa import schema
from llama_index_hiqa.errors import PackStoreError
from llama_index_hiqa.storage.memmap_vectors import MemmapVectorStore
from llama_index_hiqa.storage.snapshots import fsync_tree
from llama_index_hiqa.storage.sqlite_kv import SQLiteDatabase, SQLiteDocumentStore, SQLiteKVStore, file_size
from llama_index_hiqa.indexes.keyword_index import normalize_keyword

logger = logging.getLogger(__name__)

DATABASE_FILENAME = "hiqa.sqlite"
BM25_PREFIX = "bm25-"
SEGMENT_PREFIX = "segment-"
FORMAT = "hiqa-embedded-1"
REBUILD_HINT = "rebuild it with `hiqa ingest DIR --store STORE --rebuild`"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS documents (ref_doc_id TEXT PRIMARY KEY, document_id TEXT NOT NULL, "
    "title TEXT NOT NULL, pages INTEGER, nodes INTEGER NOT NULL, file_stat TEXT)",
    "CREATE INDEX IF NOT EXISTS documents_document_id ON documents (document_id)",
    # One row a (keyword, node); the node by its vector row, an integer, not its 36-byte id.
    "CREATE TABLE IF NOT EXISTS keyword_postings (keyword TEXT NOT NULL, row INTEGER NOT NULL, "
    "PRIMARY KEY (keyword, row)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS keyword_postings_row ON keyword_postings (row)",
    # The document focus's heading-path vectors, by a hash of the heading text (heading_vectors.py);
    # a rowid table, as kv (sqlite_kv.py): a 1.5 KB vector in a WITHOUT ROWID row overflows.
    "CREATE TABLE IF NOT EXISTS heading_vectors (hash TEXT PRIMARY KEY, vector BLOB NOT NULL)",
    # What the focus reads of each node (document_focus.focus_facts, JSON), removed with it.
    "CREATE TABLE IF NOT EXISTS focus_facts (node_id TEXT PRIMARY KEY, facts TEXT NOT NULL) WITHOUT ROWID",
)


def is_embedded_store(path: Any) -> bool:
    """Whether ``path`` is a folder holding an embedded store.

    Args:
        path: the folder (any path-like).

    Returns:
        True when it holds the store's database file.
    """
    try:
        return (Path(path) / DATABASE_FILENAME).is_file()
    except TypeError:
        return False


class EmbeddedStore:
    """The files of one embedded store, opened (see the module's docstring for the layout)."""

    def __init__(self, root: Path, db: SQLiteDatabase) -> None:
        self.root = root
        self.db = db
        self.kvstore = SQLiteKVStore(db)
        self.docstore = SQLiteDocumentStore(self.kvstore)
        self.vectors = MemmapVectorStore(str(root), database=db)
        self._last_matches: Optional[Tuple[Any, Dict[str, Tuple[str, Tuple[str, ...]]]]] = None
        db.create_tables(_SCHEMA)

    @classmethod
    def open(cls, root: Union[str, Path], create: bool = False) -> "EmbeddedStore":
        """The store in ``root``; with ``create`` a new one when the folder holds none (an
        empty or missing folder only: never a folder of other files).

        Args:
            root: the store's folder.
            create: create a store when the folder is empty or missing.

        Returns:
            The open store.

        Raises:
            PackStoreError: when the folder holds no store (and ``create`` is off, or it holds other
                files), or its database cannot be read or is of another format.
        """
        root = Path(root)
        path = root / DATABASE_FILENAME
        if not path.is_file():
            if not create:
                raise PackStoreError(root, f"holds no embedded store ({DATABASE_FILENAME}); build one with `hiqa ingest`")
            # an empty folder, or one holding only what a writer puts there first (its lock)
            if root.exists() and (not root.is_dir() or any(c.name not in (".lock", "images") for c in root.iterdir())):
                raise PackStoreError(root, "is not empty and holds no embedded store: choose a new folder")
            root.mkdir(parents=True, exist_ok=True)
        try:
            store = cls(root, SQLiteDatabase(path))
            kind = store.db.get_meta("format")
        except Exception as exc:  # sqlite3.DatabaseError: not a database, damaged header
            raise PackStoreError(path, f"cannot be read as the store's database ({exc}); {REBUILD_HINT}") from exc
        if kind is None:
            store.db.set_meta("format", FORMAT)
        elif kind != FORMAT:
            raise PackStoreError(path, f"holds store format {kind!r}, not {FORMAT!r}; {REBUILD_HINT}")
        return store

    def check(self, query_dim: Optional[int] = None) -> None:
        """What opening can check cheaply, as a [`PackStoreError`][llama_index_hiqa.errors.PackStoreError] naming the file: the
        vector file holds every committed row, and ``query_dim`` (the query model's) is the
        stored vectors' dimension.

        Args:
            query_dim: the query model's dimension (``None``: not checked).

        Raises:
            PackStoreError: when the vector file misses committed rows or the dimensions differ.
        """
        vectors = self.vectors
        rows, dim = int(self.db.get_meta("vector_rows") or 0), vectors.dim
        if not rows:
            return
        size = vectors.matrix_path.stat().st_size if vectors.matrix_path.exists() else 0
        if size < rows * dim * 4:
            raise PackStoreError(
                vectors.matrix_path, f"is {size} bytes, the store committed {rows} vectors of {dim} dimensions "
                f"({rows * dim * 4} bytes; truncated?); {REBUILD_HINT}"
            )
        if query_dim is not None and query_dim != dim:
            raise PackStoreError(
                vectors.matrix_path,
                f"holds vectors of dimension {dim} but the embedding model given embeds in {query_dim}: "
                f"load with the model the store was built with, or {REBUILD_HINT}",
            )

    def close(self) -> None:
        self.db.close()

    # -- the pack's record -------------------------------------------------------------
    def read_pack(self) -> Optional[Dict[str, Any]]:
        """``{"config", "embed_model"}`` saved by [`save_pack`][llama_index_hiqa.storage.embedded.EmbeddedStore.save_pack], or ``None``."""
        raw = self.db.get_meta("pack")
        if raw is None:
            return None
        try:
            record = json.loads(raw)
            record["config"]  # noqa: B018 - a record without settings is damaged
        except (ValueError, KeyError, TypeError) as exc:
            raise PackStoreError(self.root / DATABASE_FILENAME, f"holds a damaged pack record ({exc}); {REBUILD_HINT}") from exc
        return record

    def save_pack(self, record: Mapping[str, Any]) -> None:
        """Save the pack record (its settings and model), replacing the stored one.

        Args:
            record: the pack record, JSON-able.
        """
        self.db.set_meta("pack", json.dumps(dict(record)))

    @property
    def generation(self) -> int:
        """The number of writes committed so far (the BM25 index names the one it was built at)."""
        return int(self.db.get_meta("generation") or 0)

    def bump_generation(self) -> None:
        self.db.set_meta("generation", str(self.generation + 1))

    # -- documents ----------------------------------------------------------------------
    def put_documents(self, records: Iterable[Tuple[str, str, str, Optional[int], int, Optional[List[int]]]]) -> None:
        """``(ref_doc_id, document_id, title, pages, nodes, file_stat)`` rows, replacing.

        Args:
            records: the rows.
        """
        rows = [(r, d, t, p, n, json.dumps(s) if s else None) for r, d, t, p, n, s in records]
        self.db.executemany(
            "INSERT OR REPLACE INTO documents (ref_doc_id, document_id, title, pages, nodes, file_stat) "
            "VALUES (?, ?, ?, ?, ?, ?)", rows,
        )

    def remove_document(self, ref_doc_id: str) -> int:
        """Every trace of ``ref_doc_id`` (in the caller's transaction); returns its node count.

        Args:
            ref_doc_id: the document's ref_doc_id.

        Returns:
            The number of its nodes removed.
        """
        info = self.docstore.get_ref_doc_info(ref_doc_id)
        node_ids = list(info.node_ids) if info else []
        with self.db.transaction():
            self.db.execute(
                "DELETE FROM keyword_postings WHERE row IN (SELECT row FROM vector_rows WHERE ref_doc_id = ?)", (ref_doc_id,)
            )
            self.db.execute(
                "DELETE FROM focus_facts WHERE node_id IN (SELECT node_id FROM vector_rows WHERE ref_doc_id = ?)", (ref_doc_id,)
            )
            self.vectors.delete(ref_doc_id)
            self.docstore.delete_ref_doc(ref_doc_id, raise_error=False)
            self.db.execute("DELETE FROM documents WHERE ref_doc_id = ?", (ref_doc_id,))
        return len(node_ids)

    def documents(self) -> Dict[str, str]:
        """``{schema.DOCUMENT_ID: ref_doc_id}``."""
        return {d: r for r, d in self.db.rows("SELECT ref_doc_id, document_id FROM documents ORDER BY rowid")}

    def file_stats(self) -> Dict[str, List[int]]:
        rows = self.db.rows("SELECT ref_doc_id, file_stat FROM documents WHERE file_stat IS NOT NULL")
        return {ref: [int(v) for v in json.loads(stat)] for ref, stat in rows}

    def document_titles(self) -> Dict[str, str]:
        """``schema.DOCUMENT_ID`` -> title of every document with a title (one row a document)."""
        return dict(self.db.rows("SELECT document_id, title FROM documents WHERE title != '' ORDER BY rowid"))

    def titles(self) -> List[Tuple[str, str]]:
        """``(ref_doc_id, title)`` of every document with a title, in ingestion order."""
        return self.db.rows("SELECT ref_doc_id, title FROM documents WHERE title != '' ORDER BY rowid")

    def collection_shape(self) -> Tuple[int, float]:
        """``(|D|, average pages per document)``, as ``MultiRouteRetriever.collection_shape``
        computes it from the nodes (a document without pages counts one page a node)."""
        rows = self.db.rows(
            "SELECT document_id, MAX(pages), SUM(nodes) FROM documents GROUP BY document_id"
        )
        if not rows:
            return 0, 1.0
        per_doc = [pages if pages is not None else nodes for _doc, pages, nodes in rows]
        return len(rows), sum(per_doc) / len(per_doc)

    def node_ids(self) -> Dict[str, None]:
        """Every node id in ingestion order (the order the folder store's docstore keeps), as
        the keys of a dict (held by the vector store across this process's writes)."""
        return self.vectors.node_id_order()

    def node_count(self) -> int:
        return self.vectors.count

    def document_node_ids(self, document_id: str) -> List[str]:
        """The node ids of a document, in ingestion order.

        Args:
            document_id: the document id.

        Returns:
            Its node ids.
        """
        return [r[0] for r in self.db.rows(
            "SELECT v.node_id FROM vector_rows v JOIN documents d ON d.ref_doc_id = v.ref_doc_id "
            "WHERE d.document_id = ? ORDER BY v.row", (document_id,),
        )]

    def iter_nodes(self, chunk: int = 2000) -> Iterator[List[BaseNode]]:
        """Every node in ingestion order, ``chunk`` at a time.

        Args:
            chunk: how many nodes per list.

        Yields:
            Lists of nodes, in ingestion order.
        """
        ids = list(self.node_ids())
        for start in range(0, len(ids), chunk):
            yield self.docstore.get_nodes(ids[start:start + chunk])

    # -- keywords -----------------------------------------------------------------------
    def add_keywords(self, nodes: Sequence[BaseNode]) -> None:
        """The normalised critical keywords of ``nodes`` (whose vectors are stored).

        Args:
            nodes: the nodes.
        """
        rows = dict(self.db.rows_in("SELECT node_id, row FROM vector_rows WHERE node_id IN ({})", [n.node_id for n in nodes]))
        postings = []
        for node in nodes:
            row = rows.get(node.node_id)
            if row is None:
                continue
            keywords = dict.fromkeys(k for k in (normalize_keyword(k) for k in schema.get_critical_keywords(node)) if k)
            postings += [(k, row) for k in keywords]
        with self.db.transaction():
            values = list(rows.values())
            for start in range(0, len(values), 900):  # a node indexed again loses its old keywords
                chunk = values[start:start + 900]
                self.db.execute(f"DELETE FROM keyword_postings WHERE row IN ({','.join('?' * len(chunk))})", chunk)
            self.db.conn.executemany("INSERT OR IGNORE INTO keyword_postings (keyword, row) VALUES (?, ?)", postings)

    def keyword_matches(self, keywords: Sequence[str]) -> Dict[str, Tuple[str, Tuple[str, ...]]]:
        """``{node id: (ref_doc_id, the keywords of ``keywords`` it holds)}`` (read-only: the
        last answer is kept, since a question asks it twice, for the collection and again for
        the document the focus ranks; a committed write makes it stale).

        Args:
            keywords: the question's keywords, normalised.

        Returns:
            Node id -> (ref_doc_id, its matched keywords).
        """
        wanted = list(dict.fromkeys(keywords))
        key = (tuple(wanted), self.generation)
        last = self._last_matches
        if last is not None and last[0] == key:
            return last[1]
        # One row a node (its keywords joined), not one a posting: a company or year named by
        # thousands of nodes is counted in SQL, not in Python. Tuples of strings, not sets: the
        # answer is kept until the next question, and kept sets of thousands of nodes made the
        # garbage collector's full passes (about 0.25 s in a process holding the models) come
        # every few questions.
        found: Dict[str, Tuple[str, Tuple[str, ...]]] = {
            node_id: (ref, tuple(held.split("\x1f")))
            for node_id, ref, held in self.db.rows_in(
                "SELECT v.node_id, v.ref_doc_id, group_concat(k.keyword, char(31)) FROM keyword_postings k "
                "JOIN vector_rows v ON v.row = k.row WHERE k.keyword IN ({}) GROUP BY k.row", wanted,
            )
        }
        self._last_matches = (key, found)
        return found

    def keyword_node_ids(self) -> List[str]:
        return [r[0] for r in self.db.rows(
            "SELECT DISTINCT v.node_id FROM keyword_postings k JOIN vector_rows v ON v.row = k.row"
        )]

    # -- BM25 ---------------------------------------------------------------------------
    def bm25_folder(self) -> Optional[Path]:
        """The BM25 index built at the current generation, or ``None`` (stale or never built)."""
        folder = self.root / f"{BM25_PREFIX}{self.generation}"
        return folder if (folder / "node_ids.json").is_file() else None

    def bm25_base_folder(self) -> Optional[Path]:
        """The newest complete BM25 index folder, current or not (``None``: never built)."""
        found = [
            (int(child.name[len(BM25_PREFIX):]), child) for child in self.root.glob(f"{BM25_PREFIX}*")
            if child.name[len(BM25_PREFIX):].isdigit() and (child / "node_ids.json").is_file()
        ]
        return max(found)[1] if found else None

    def save_bm25_segment(self, segment: Any, base: Path, rows_end: int) -> Path:
        """The postings of the nodes added since ``base`` was built (up to row ``rows_end``),
        beside it: staged, then renamed. The base and older segments stay as they are.

        Args:
            segment: the segment's postings (``Postings.save``).
            base: the base index folder.
            rows_end: one past the last store row the segment holds.

        Returns:
            The segment's folder.
        """
        target = base / f"{SEGMENT_PREFIX}{rows_end}"
        staging = base / f".staging-{SEGMENT_PREFIX}{rows_end}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        segment.save(staging)
        fsync_tree(staging)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)
        return target

    def bm25_segment_folders(self, base: Path) -> List[Path]:
        """The segments saved beside ``base``, oldest first.

        Args:
            base: the base index folder.

        Returns:
            The segment folders.
        """
        found = [
            (int(child.name[len(SEGMENT_PREFIX):]), child) for child in base.glob(f"{SEGMENT_PREFIX}*")
            if child.name[len(SEGMENT_PREFIX):].isdigit() and (child / "node_ids.json").is_file()
        ]
        return [folder for _, folder in sorted(found)]

    def rows_since(self, rows_end: int) -> List[Tuple[int, str]]:
        """``(row, node id)`` of every node at row ``rows_end`` or later, in row order.

        Args:
            rows_end: the first row wanted.

        Returns:
            The rows and ids.
        """
        return self.db.rows("SELECT row, node_id FROM vector_rows WHERE row >= ? ORDER BY row", (rows_end,))

    def freed_rows(self, rows_end: int) -> List[int]:
        """The rows below ``rows_end`` whose node was removed (rows are never reused).

        Args:
            rows_end: one past the last row wanted.

        Returns:
            The freed rows.
        """
        return [r[0] for r in self.db.rows("SELECT row FROM vector_free WHERE row < ?", (rows_end,))]

    def save_bm25(self, route: Any, generation: int) -> None:
        """``route`` (built at ``generation``) beside the database: staged, then renamed; the
        indexes of older generations are removed.

        Args:
            route: the BM25 route.
            generation: the write generation it was built at.
        """
        target = self.root / f"{BM25_PREFIX}{generation}"
        staging = self.root / f".staging-{BM25_PREFIX}{generation}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        route.persist(staging)

        fsync_tree(staging)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)
        for child in self.root.iterdir():
            if child.name.startswith(BM25_PREFIX) and child != target:
                shutil.rmtree(child, ignore_errors=True)

    # -- size -----------------------------------------------------------------------------
    def size_bytes(self) -> Dict[str, int]:
        """Bytes on disk by part: the database, the vectors, the BM25 index."""
        bm25 = sum(p.stat().st_size for p in self.root.glob(f"{BM25_PREFIX}*/**/*") if p.is_file())
        matrix = self.vectors.matrix_path
        return {
            "database": file_size(self.root / DATABASE_FILENAME),
            "vectors": matrix.stat().st_size if matrix.exists() else 0,
            "bm25": bm25,
        }


__all__ = ["DATABASE_FILENAME", "EmbeddedStore", "is_embedded_store"]
