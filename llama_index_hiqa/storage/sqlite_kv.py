"""A LlamaIndex key-value store in one SQLite file, and the docstore LlamaIndex builds on it.

LlamaIndex's ``SimpleDocumentStore`` keeps every node in memory as a dict of its JSON and
writes them all to one file on every save; its ``KVDocumentStore`` keeps the same records in any
`BaseKVStore`. [`SQLiteKVStore`][llama_index_hiqa.storage.sqlite_kv.SQLiteKVStore] is such a
store over the standard library's ``sqlite3``: one table ``(collection, key) -> value``, values
as JSON compressed with zlib against a dictionary of the JSON LlamaIndex writes for every node
(its field names, templates and relationship keys, which are most of a small node's bytes),
kept in the file itself so a store always reads back with the dictionary it was written with.
[`SQLiteDocumentStore`][llama_index_hiqa.storage.sqlite_kv.SQLiteDocumentStore] is LlamaIndex's ``KVDocumentStore`` over it: ``add_documents``,
``get_node``, ``get_ref_doc_info``, ``delete_ref_doc`` and the document hashes behave as
LlamaIndex defines them, and only the records a caller asks for are read.

Writes run in the caller's transaction when one is open ([`SQLiteDatabase.transaction`][llama_index_hiqa.storage.sqlite_kv.SQLiteDatabase.transaction]),
so a batch of nodes, their vectors and their keyword postings commit together or not at all
(SQLite's write-ahead log: a process killed at any instant leaves the last committed state).
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import threading
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from llama_index.core.schema import TextNode
from llama_index.core.storage.docstore.keyval_docstore import KVDocumentStore
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc
from llama_index.core.storage.kvstore.types import DEFAULT_BATCH_SIZE, DEFAULT_COLLECTION, BaseKVStore

from llama_index_hiqa import schema

# Parameters a statement may bind at once (SQLite's default limit is 32,766; older builds 999).
SQL_BATCH = 900
_ZDICT_KEY = "zlib_dictionary"
# A stored value: one JSON object (what LlamaIndex's key-value stores hold).
JSONDict = Dict[str, Any]


class SQLiteDatabase:
    """One SQLite file shared by the parts of a store, with nested transactions.

    The connection is shared by threads (the multi-route retriever runs its routes in a
    thread pool) behind one lock; [`transaction`][llama_index_hiqa.storage.sqlite_kv.SQLiteDatabase.transaction] opens ``BEGIN IMMEDIATE`` at the
    outermost level, so the writer's lock is taken before anything is read for the write.
    """

    def __init__(self, path: Union[str, Path], readonly: bool = False) -> None:
        self.path = Path(path)
        self.lock = threading.RLock()
        self._depth = 0
        self._on_rollback: List[Callable[[], None]] = []
        uri = f"file:{self.path}?mode=ro" if readonly else f"file:{self.path}"
        self.conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None, timeout=60.0)
        if not readonly:
            # WAL: readers never block the writer, and a killed writer leaves the last commit.
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA cache_size=-16000")  # 16 MB of page cache, whatever the store's size
        self.create_tables(["CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID"])

    def has_table(self, name: str) -> bool:
        """Whether the file holds the table ``name``.

        Args:
            name: the table's name.

        Returns:
            ``True`` when it exists.
        """
        return bool(self.scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))

    def create_tables(self, statements: Sequence[str]) -> None:
        """Run ``CREATE ... IF NOT EXISTS`` statements, only when a table they create is missing.

        Opening an existing store takes no write lock (a reader never waits for a writer).

        Args:
            statements: the SQL statements, run in one transaction.
        """
        names = [m.group(1) for m in (re.search(r"CREATE TABLE IF NOT EXISTS (\w+)", s) for s in statements) if m]
        if names and all(self.has_table(n) for n in names):
            return
        with self.transaction():
            for statement in statements:
                self.conn.execute(statement)

    # -- transactions -----------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator["SQLiteDatabase"]:
        """Everything written inside commits together, or nothing (an exception rolls back
        and calls what [`on_rollback`][llama_index_hiqa.storage.sqlite_kv.SQLiteDatabase.on_rollback] registered, so caches drop what was undone)."""
        with self.lock:
            outer = self._depth == 0
            if outer:
                self.conn.execute("BEGIN IMMEDIATE")
                self._on_rollback = []
            self._depth += 1
            try:
                yield self
            except BaseException:
                self._depth -= 1
                if outer:
                    self.conn.execute("ROLLBACK")
                    for undo in self._on_rollback:
                        undo()
                    self._on_rollback = []
                raise
            self._depth -= 1
            if outer:
                self.conn.execute("COMMIT")
                self._on_rollback = []

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

    def on_rollback(self, undo: Callable[[], None]) -> None:
        """Call ``undo`` if the open transaction rolls back.

        Args:
            undo: what restores the in-memory state (outside a transaction it is not kept).
        """
        if self._depth:
            self._on_rollback.append(undo)

    # -- statements -------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Run one statement under the connection's lock.

        Args:
            sql: the statement, ``?`` placeholders for ``params``.
            params: its parameters.

        Returns:
            The cursor.
        """
        with self.lock:
            return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> None:
        """Run one statement for every row, in a transaction.

        Args:
            sql: the statement, ``?`` placeholders for a row.
            rows: the rows' parameters (any iterable).
        """
        with self.transaction():
            self.conn.executemany(sql, rows)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> List[Tuple[Any, ...]]:
        """Every row a query returns.

        Args:
            sql: the query, ``?`` placeholders for ``params``.
            params: its parameters.

        Returns:
            The rows as tuples.
        """
        with self.lock:
            return self.conn.execute(sql, params).fetchall()

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first column of a query's first row.

        Args:
            sql: the query, ``?`` placeholders for ``params``.
            params: its parameters.

        Returns:
            The value, or ``None`` when there is no row.
        """
        with self.lock:
            row = self.conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def rows_in(self, sql: str, values: Sequence[Any], params: Sequence[Any] = ()) -> List[Tuple[Any, ...]]:
        """``sql`` with ``{}`` replaced by placeholders for ``values``, run in batches.

        Args:
            sql: the query, ``{}`` where the ``IN (...)`` placeholders go.
            values: the values of the ``IN`` list (any number: batches of [`SQL_BATCH`][llama_index_hiqa.storage.sqlite_kv.SQL_BATCH]).
            params: parameters before the ``IN`` list.

        Returns:
            The rows of every batch.
        """
        out: List[Tuple[Any, ...]] = []
        values = list(values)
        for start in range(0, len(values), SQL_BATCH):
            chunk = values[start:start + SQL_BATCH]
            out += self.rows(sql.format(",".join("?" * len(chunk))), [*params, *chunk])
        return out

    def get_meta(self, key: str) -> Optional[str]:
        """A value of the store's ``meta`` table.

        Args:
            key: its key.

        Returns:
            The value, or ``None`` when unset.
        """
        value: Optional[str] = self.scalar("SELECT value FROM meta WHERE key = ?", (key,))
        return value

    def set_meta(self, key: str, value: str) -> None:
        """Set a value of the store's ``meta`` table.

        Args:
            key: its key.
            value: the value (replaces any earlier one).
        """
        with self.transaction():
            self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the database file and truncate it (a store at rest is
        one file; readers still holding an older snapshot make this a partial copy, harmlessly)."""
        with self.lock:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self.lock:
            self.conn.close()


def _default_zdict() -> bytes:
    """The JSON LlamaIndex writes for a node with the pack's metadata keys: the bytes every
    node record repeats, so zlib need not spell them out in each one."""
    metadata = {
        value: "" for name, value in sorted(vars(schema).items())
        if name.isupper() and not name.startswith("FORMAT") and isinstance(value, str) and value.isidentifier()
    }
    node = TextNode(text="", metadata=metadata, excluded_embed_metadata_keys=list(metadata),
                    excluded_llm_metadata_keys=list(metadata))
    record = json.dumps({"doc_hash": "", "ref_doc_id": ""}) + json.dumps(doc_to_json(node))
    return record.encode("utf-8")


class SQLiteKVStore(BaseKVStore):
    """LlamaIndex's key-value store interface over a table of a `SQLiteDatabase`."""

    def __init__(
        self, database: SQLiteDatabase, table: str = "kv", compression_level: int = 6, cache_size: int = 4096
    ) -> None:
        if not table.isidentifier():
            raise ValueError(f"SQLiteKVStore: table {table!r} is not an SQL identifier")
        self.db = database
        self.table = table
        self.level = compression_level
        # A rowid table, not WITHOUT ROWID: a WITHOUT ROWID row keeps at most about 1 KB in its
        # page (4 KB pages) and puts the rest on an overflow page of its own, so a node's
        # 1.2 KB of compressed JSON took 4.7 KB on disk (stores written so keep their tables).
        database.create_tables([
            f"CREATE TABLE IF NOT EXISTS {table} (collection TEXT NOT NULL, key TEXT NOT NULL, "
            f"value BLOB NOT NULL, PRIMARY KEY (collection, key))"
        ])
        stored = database.get_meta(_ZDICT_KEY)
        if stored is None:
            stored = _default_zdict().decode("utf-8")
            database.set_meta(_ZDICT_KEY, stored)
        self._zdict = stored.encode("utf-8")
        # The records read last, decoded: a question reads the same nodes several times (its
        # candidates, then its best document's nodes). Dropped on any write (own or, by
        # ``PRAGMA data_version``, another process's) and on a rollback.
        self._cache: "OrderedDict[Tuple[str, str], JSONDict]" = OrderedDict()
        self._cache_size = cache_size
        self._data_version: Optional[int] = None

    @classmethod
    def from_path(cls, path: Union[str, Path]) -> "SQLiteKVStore":
        """A store in the SQLite file ``path`` (created when missing).

        Args:
            path: the SQLite file.

        Returns:
            The store.
        """
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return cls(SQLiteDatabase(path))

    # -- encoding -------------------------------------------------------------------------
    def _encode(self, value: JSONDict) -> bytes:
        packer = zlib.compressobj(self.level, zdict=self._zdict)
        return packer.compress(json.dumps(value, separators=(",", ":")).encode("utf-8")) + packer.flush()

    def _decode(self, blob: bytes) -> JSONDict:
        unpacker = zlib.decompressobj(zdict=self._zdict)
        value: JSONDict = json.loads(unpacker.decompress(blob) + unpacker.flush())
        return value

    def _cached(self, collection: str, keys: Sequence[str]) -> Dict[str, JSONDict]:
        with self.db.lock:
            version = self.db.scalar("PRAGMA data_version")
            if version != self._data_version:
                self._cache.clear()
                self._data_version = version
            found = {}
            for key in keys:
                value = self._cache.get((collection, key))
                if value is not None:
                    self._cache.move_to_end((collection, key))
                    found[key] = dict(value)  # a shallow copy, as SimpleKVStore returns
            return found

    def _remember(self, collection: str, values: Dict[str, JSONDict]) -> None:
        with self.db.lock:
            for key, value in values.items():
                self._cache[(collection, key)] = value
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def forget(self) -> None:
        """Drop the decoded records (after a write, or a rollback of one)."""
        with self.db.lock:
            self._cache.clear()

    # -- BaseKVStore ----------------------------------------------------------------------
    def put(self, key: str, val: JSONDict, collection: str = DEFAULT_COLLECTION) -> None:
        """Store ``val`` under ``key``.

        Args:
            key: the key.
            val: the record.
            collection: the collection (LlamaIndex's namespace), by default its default one.
        """
        self.put_all([(key, val)], collection=collection)

    async def aput(self, key: str, val: JSONDict, collection: str = DEFAULT_COLLECTION) -> None:
        """Async [`put`][llama_index_hiqa.storage.sqlite_kv.SQLiteKVStore.put].

        Args:
            key: the key.
            val: the record.
            collection: the collection (LlamaIndex's namespace), by default its default one.
        """
        self.put(key, val, collection)

    def put_all(
        self, kv_pairs: List[Tuple[str, JSONDict]], collection: str = DEFAULT_COLLECTION, batch_size: int = DEFAULT_BATCH_SIZE
    ) -> None:
        """Store every pair, in one transaction.

        Args:
            kv_pairs: ``(key, record)`` pairs.
            collection: the collection (LlamaIndex's namespace), by default its default one.
            batch_size: ignored: one transaction writes them all (``BaseKVStore``'s signature).
        """
        rows = [(collection, key, self._encode(value)) for key, value in kv_pairs]
        self.forget()
        self.db.on_rollback(self.forget)
        self.db.executemany(f"INSERT OR REPLACE INTO {self.table} (collection, key, value) VALUES (?, ?, ?)", rows)

    async def aput_all(
        self, kv_pairs: List[Tuple[str, JSONDict]], collection: str = DEFAULT_COLLECTION, batch_size: int = DEFAULT_BATCH_SIZE
    ) -> None:
        """Async [`put_all`][llama_index_hiqa.storage.sqlite_kv.SQLiteKVStore.put_all].

        Args:
            kv_pairs: ``(key, record)`` pairs.
            collection: the collection (LlamaIndex's namespace), by default its default one.
            batch_size: ignored (``BaseKVStore``'s signature).
        """
        self.put_all(kv_pairs, collection, batch_size)

    def get(self, key: str, collection: str = DEFAULT_COLLECTION) -> Optional[JSONDict]:
        """The record under ``key``.

        Args:
            key: the key.
            collection: the collection (LlamaIndex's namespace), by default its default one.

        Returns:
            The record, or ``None`` when absent.
        """
        return self.get_many([key], collection).get(key)

    async def aget(self, key: str, collection: str = DEFAULT_COLLECTION) -> Optional[JSONDict]:
        """Async [`get`][llama_index_hiqa.storage.sqlite_kv.SQLiteKVStore.get].

        Args:
            key: the key.
            collection: the collection (LlamaIndex's namespace), by default its default one.

        Returns:
            The record, or ``None`` when absent.
        """
        return self.get(key, collection)

    def get_many(self, keys: Sequence[str], collection: str = DEFAULT_COLLECTION) -> Dict[str, JSONDict]:
        """The values of ``keys`` that exist, in one query per few hundred keys.

        Args:
            keys: the keys.
            collection: the collection (LlamaIndex's namespace), by default its default one.

        Returns:
            Key -> record for the keys found.
        """
        found = self._cached(collection, keys)
        missing = [key for key in keys if key not in found]
        if missing:
            rows = self.db.rows_in(
                f"SELECT key, value FROM {self.table} WHERE collection = ? AND key IN ({{}})", missing, (collection,)
            )
            decoded = {key: self._decode(blob) for key, blob in rows}
            self._remember(collection, decoded)
            found.update({key: dict(value) for key, value in decoded.items()})
        return found

    def get_all(self, collection: str = DEFAULT_COLLECTION) -> Dict[str, JSONDict]:
        """Every record of ``collection`` (all in memory: see [`iter_values`][llama_index_hiqa.storage.sqlite_kv.SQLiteKVStore.iter_values]).

        Args:
            collection: the collection (LlamaIndex's namespace), by default its default one.

        Returns:
            Key -> record.
        """
        rows = self.db.rows(f"SELECT key, value FROM {self.table} WHERE collection = ?", (collection,))
        return {key: self._decode(blob) for key, blob in rows}

    def iter_values(self, collection: str = DEFAULT_COLLECTION, chunk: int = 2000) -> Iterator[Tuple[str, JSONDict]]:
        """Every ``(key, value)`` of ``collection`` in key order, ``chunk`` rows in memory at a time.

        Args:
            collection: the collection (LlamaIndex's namespace), by default its default one.
            chunk: rows read per query.

        Yields:
            ``(key, record)`` pairs.
        """
        last = ""
        while True:
            rows = self.db.rows(
                f"SELECT key, value FROM {self.table} WHERE collection = ? AND key > ? ORDER BY key LIMIT ?",
                (collection, last, chunk),
            )
            if not rows:
                return
            for key, blob in rows:
                yield key, self._decode(blob)
            last = rows[-1][0]

    async def aget_all(self, collection: str = DEFAULT_COLLECTION) -> Dict[str, JSONDict]:
        """Async [`get_all`][llama_index_hiqa.storage.sqlite_kv.SQLiteKVStore.get_all].

        Args:
            collection: the collection (LlamaIndex's namespace), by default its default one.

        Returns:
            Key -> record.
        """
        return self.get_all(collection)

    def delete(self, key: str, collection: str = DEFAULT_COLLECTION) -> bool:
        """Delete the record under ``key``.

        Args:
            key: the key.
            collection: the collection (LlamaIndex's namespace), by default its default one.

        Returns:
            ``True`` when a record was deleted.
        """
        self.forget()
        self.db.on_rollback(self.forget)
        with self.db.transaction():
            cursor = self.db.execute(f"DELETE FROM {self.table} WHERE collection = ? AND key = ?", (collection, key))
        return cursor.rowcount > 0

    async def adelete(self, key: str, collection: str = DEFAULT_COLLECTION) -> bool:
        """Async [`delete`][llama_index_hiqa.storage.sqlite_kv.SQLiteKVStore.delete].

        Args:
            key: the key.
            collection: the collection (LlamaIndex's namespace), by default its default one.

        Returns:
            ``True`` when a record was deleted.
        """
        return self.delete(key, collection)


class SQLiteDocumentStore(KVDocumentStore):
    """LlamaIndex's ``KVDocumentStore`` over [`SQLiteKVStore`][llama_index_hiqa.storage.sqlite_kv.SQLiteKVStore]: a docstore that reads only
    the nodes asked for. ``docs`` still reads every node (LlamaIndex's contract); prefer
    [`iter_nodes`][llama_index_hiqa.storage.sqlite_kv.SQLiteDocumentStore.iter_nodes] over a large store."""

    def __init__(self, kvstore: SQLiteKVStore, namespace: Optional[str] = None, batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        super().__init__(kvstore, namespace=namespace, batch_size=batch_size)

    @classmethod
    def from_path(cls, path: Union[str, Path], namespace: Optional[str] = None) -> "SQLiteDocumentStore":
        """A docstore in the SQLite file ``path`` (created when missing).

        Args:
            path: the SQLite file.
            namespace: LlamaIndex's docstore namespace; ``None`` for its default.

        Returns:
            The docstore.
        """
        return cls(SQLiteKVStore.from_path(path), namespace=namespace)

    @property
    def kvstore(self) -> SQLiteKVStore:
        return self._kvstore  # type: ignore[return-value]

    def get_nodes(self, node_ids: List[str], raise_error: bool = True) -> List[Any]:
        """The nodes of ``node_ids`` in that order, read in one query per few hundred ids.

        Args:
            node_ids: the ids.
            raise_error: whether a missing id raises; ``False`` leaves it out.

        Returns:
            The nodes, in the order of ``node_ids``.

        Raises:
            ValueError: an id is missing and ``raise_error`` is set (LlamaIndex's behaviour).
        """
        found = self.kvstore.get_many(node_ids, collection=self._node_collection)
        out = []
        for node_id in node_ids:
            record = found.get(node_id)
            if record is None:
                if raise_error:
                    raise ValueError(f"doc_id {node_id} not found.")
                continue
            out.append(json_to_doc(record))
        return out

    def iter_nodes(self, chunk: int = 2000) -> Iterator[Any]:
        """Every node, ``chunk`` at a time in memory (in node id order).

        Args:
            chunk: nodes read per query.

        Yields:
            The nodes.
        """
        for _key, record in self.kvstore.iter_values(self._node_collection, chunk):
            yield json_to_doc(record)


def file_size(path: Union[str, Path]) -> int:
    """Bytes of an SQLite file with its write-ahead log.

    Args:
        path: the SQLite file.

    Returns:
        The size in bytes (0 when neither file exists).
    """
    path = Path(path)
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


__all__ = ["SQLiteDatabase", "SQLiteDocumentStore", "SQLiteKVStore", "file_size"]
