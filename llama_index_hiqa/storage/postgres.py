"""PostgreSQL as the pack's store: every route in one database, every write one transaction.

One database (or one schema of it, chosen with ``?options=-csearch_path%3Dmy_schema``) holds
one pack:

==========================  ==============================================================
``data_hiqa_vectors``       LlamaIndex ``PGVectorStore`` (pgvector, HNSW, cosine)
``data_hiqa_docstore``      LlamaIndex ``PostgresDocumentStore`` (nodes, per-document
                            records, document hashes)
``data_hiqa_index_store``   LlamaIndex ``PostgresIndexStore`` (the index struct)
``hiqa_pack``               settings, embedding model and dimension, collection statistics
                            (node count, total BM25 length)
``hiqa_documents``          one row per document: id, title, hash, file size and mtime,
                            pages, node count
``hiqa_nodes``              one row per node: critical keywords (``text[]``), its document
                            title's keywords, its BM25 length, an integer row number and its
                            BM25 term ids
``hiqa_keywords``           the keyword route's inverted index: (keyword, node id, whether
                            the node's title holds it too), all in its primary key
``hiqa_terms``              BM25's vocabulary: term, integer id, document frequency, largest
                            tf and smallest node length (the top-k's bounds)
``hiqa_postings``           BM25's inverted index: (term id, node row, node length, term
                            frequency), its primary key covering the rest (index-only scans)
``hiqa_graph*``             the IIER chunk graph when ``use_chunk_graph=True``: settings,
                            one row per chunk, one per edge and kind (see ``pg_graph``)
==========================  ==============================================================

**Transactions.** LlamaIndex's stores open a session of their own per call, so they cannot
share a transaction with ours. We therefore write their rows ourselves, in their own tables
and their own row format (``PGVectorStore``'s table and ``node_to_metadata_dict``, the
docstore's key/namespace/value pairs of ``KVDocumentStore.add_documents``), in
the same transaction as the pack's tables; reads go through LlamaIndex's classes as usual.
An ingested batch, ``add_documents`` or ``delete_document`` is one transaction, the chunk
graph's rows included (writers are serialised by an advisory lock): a process killed at any
instant leaves the previous state, and other processes see the change when it commits. A batch
is written with one ``COPY`` per table ([`pg_bulk`][llama_index_hiqa.storage.pg_bulk]); a load into
an empty vector table builds the HNSW index once at its end (``PostgresStore.bulk_load``).

**BM25** is Okapi BM25 over stored term statistics, computed by one SQL query with bm25s's
defaults (Lucene IDF, k1 = 1.5, b = 0.75) over the same tokens (``BM25Retriever``'s
tokenizer, stop words and Snowball stemmer), so it ranks as the in-memory route does.

Connection handling (pools, timeouts, failures named with the password masked) is
`PostgresConnection`, which the store holds.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.utils import json_to_doc
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from llama_index_hiqa.storage import pg_connection
from llama_index_hiqa.storage.pg_bulk import (
    bulk_load,
    delete_postings,
    docstore_rows,
    ensure_vector_index,
    insert_nodes,
    keyword_copy_data,
    kv_copy_data,
    migrate_keywords,
    migrate_postings,
    node_fields,
    stored_json,
    upsert_kv,
    vector_copy_data,
)
from llama_index_hiqa.storage.pg_connection import PostgresConnection, PostgresStoreSettings
from llama_index_hiqa.storage.pg_schema import (
    DOCSTORE_TABLE,
    INDEX_STORE_TABLE,
    SCHEMA,
    SCHEMA_LOCK,
    STORE_FORMAT,
    VECTOR_TABLE,
    WRITE_LOCK,
    BM25Tokenizer,
    without_nul,
)

logger = logging.getLogger(__name__)


@dataclass
class DocumentRecord:
    """What ``hiqa_documents`` keeps of one document."""

    ref_doc_id: str
    document_id: str
    title: str = ""
    doc_hash: str = ""
    file_stat: Optional[List[int]] = None
    pages: int = 0
    nodes: List[BaseNode] = field(default_factory=list)


@dataclass
class PreparedWrite:
    """A batch as [`PostgresStore.prepare`][llama_index_hiqa.storage.postgres.PostgresStore.prepare] leaves it for [`PostgresStore.commit`][llama_index_hiqa.storage.postgres.PostgresStore.commit]:
    everything that does not wait for the database (which assigns row numbers and term ids)."""

    docstore: Any
    documents: List[DocumentRecord]  # with their nodes
    vector_data: Optional[io.BytesIO]  # the vector table's COPY data (``None`` without nodes)
    node_fields: List[str]  # each node's hiqa_nodes fields before its row number
    counts: List[Counter[str]]  # each node's BM25 term counts
    lengths: List[int]  # each node's BM25 length
    kv_data: io.StringIO  # the docstore rows' COPY data
    keyword_data: io.StringIO  # the keyword postings' COPY data


class PostgresStore:
    """One pack's database: schema, transactional writes and the routes' queries, over a
    `PostgresConnection`.

    Args:
        url: A ``postgresql://`` URL.
        settings: Pools, timeouts and HNSW settings.
    """

    def __init__(self, url: str, settings: Optional[PostgresStoreSettings] = None) -> None:
        self.connection = PostgresConnection(url, settings)
        self.url, self.masked_url, self.settings = url, self.connection.masked_url, self.connection.settings

    # -- the connection's, for the store's users (routes, chunk graph, bulk loads) -----------
    engine = property(lambda self: self.connection.engine, doc="The pool of writes (PostgresConnection.engine).")
    read_engine = property(lambda self: self.connection.read_engine, doc="The pool of the routes' reads.")
    async_engine = property(lambda self: self.connection.async_engine, doc="The asyncpg pool of this event loop.")
    statement_threads = property(
        lambda self: self.connection.statement_threads, doc="The threads sending statements at once (PostgresConnection)."
    )

    def connect(self) -> "PostgresStore":
        """`PostgresConnection.connect`; returns this store."""
        self.connection.connect()
        return self

    def error(self, reason: str) -> Any:
        """A PackStoreError about this database (`PostgresConnection.error`).

        Args:
            reason: what is wrong.

        Returns:
            The error, naming the masked URL.
        """
        return self.connection.error(reason)

    def describe_failure(self, exc: BaseException) -> Any:
        """A driver exception as one line a user can act on.

        Args:
            exc: the driver's exception.

        Returns:
            The ``PackStoreError``, naming the masked URL.
        """
        return self.connection.describe_failure(exc)

    def scalar(self, sql: str, **params: Any) -> Any:
        """`PostgresConnection.scalar`.

        Args:
            sql: the statement, with ``:name`` parameters.
            **params: the parameters.

        Returns:
            The value (``None`` without a row).
        """
        return self.connection.scalar(sql, **params)

    def rows(self, sql: str, _settings: Optional[Dict[str, str]] = None, **params: Any) -> List[Tuple[Any, ...]]:
        """`PostgresConnection.rows`.

        Args:
            sql: the statement, with ``:name`` parameters.
            _settings: session settings for this statement alone.
            **params: the parameters.

        Returns:
            The rows, as tuples.
        """
        return self.connection.rows(sql, _settings, **params)

    async def arows(self, sql: str, _settings: Optional[Dict[str, str]] = None, **params: Any) -> List[Tuple[Any, ...]]:
        """`PostgresConnection.arows`.

        Args:
            sql: the statement, with ``:name`` parameters.
            _settings: session settings for this statement alone.
            **params: the parameters.

        Returns:
            The rows, as tuples.
        """
        return await self.connection.arows(sql, _settings, **params)

    def dispose(self) -> None:
        """Close the pools."""
        self.connection.dispose()

    def vector_store(self, embed_dim: int, setup: bool = False) -> Any:
        """LlamaIndex's ``PGVectorStore`` over this database (``pg_connection.vector_store``).

        Args:
            embed_dim: the embedding dimension.
            setup: create its table (only when the pack is created).

        Returns:
            The ``PGVectorStore``.
        """
        return pg_connection.vector_store(self.connection, embed_dim, setup)

    def docstore(self) -> Any:
        """LlamaIndex's ``PostgresDocumentStore`` over this database."""
        return pg_connection.docstore(self.connection)

    def index_store(self) -> Any:
        """LlamaIndex's ``PostgresIndexStore`` over this database."""
        return pg_connection.index_store(self.connection)

    # -- the pack record -----------------------------------------------------------------
    def read_pack(self) -> Optional[Dict[str, Any]]:
        """The pack's record, or ``None`` when the database holds no pack yet."""
        try:
            with self.engine.connect() as conn:
                exists = conn.execute(text("SELECT to_regclass('hiqa_pack')")).scalar()
                if exists is None:
                    return None
                row = conn.execute(
                    text("SELECT format, config, embed_model, embed_dim, index_id, node_count FROM hiqa_pack WHERE id = 1")
                ).mappings().first()
        except SQLAlchemyError as exc:
            raise self.describe_failure(exc) from None
        return None if row is None else dict(row)

    def create_pack(self, config: Dict[str, Any], embed_model: str, embed_dim: int, index_id: str) -> None:
        """Create the schema, LlamaIndex's tables and the pack record (once; processes creating
        the same pack at once take turns under an advisory lock, and the first one's record
        wins).

        Args:
            config: the pack's settings.
            embed_model: the embedding model's portable name.
            embed_dim: its dimension.
            index_id: the LlamaIndex index id.
        """
        with self.schema_lock():
            self._create_pack(config, embed_model, embed_dim, index_id)

    @contextlib.contextmanager
    def schema_lock(self) -> Iterator[None]:
        """Hold the schema lock (a session advisory lock) while creating tables: PostgreSQL's
        CREATE TABLE IF NOT EXISTS fails, rather than waits, when another session creates the
        same table at the same moment."""
        holder = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            holder.exec_driver_sql(f"SELECT pg_advisory_lock({SCHEMA_LOCK})")
            yield
        finally:
            try:
                holder.exec_driver_sql(f"SELECT pg_advisory_unlock({SCHEMA_LOCK})")
            finally:
                holder.close()

    def _create_pack(self, config: Dict[str, Any], embed_model: str, embed_dim: int, index_id: str) -> None:
        vector_store = self.vector_store(embed_dim, setup=True)
        vector_store._initialize()  # its table and HNSW index, by its own code
        for table in (DOCSTORE_TABLE, INDEX_STORE_TABLE):
            pg_connection.kvstore(self.connection, table, setup=True)._initialize()
        with self.engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": WRITE_LOCK})
            migrate_postings(conn)  # an older database's tables, before SCHEMA reads them
            migrate_keywords(conn)
            for statement in SCHEMA:
                conn.execute(text(statement))
            conn.execute(
                text(
                    "INSERT INTO hiqa_pack (id, format, config, embed_model, embed_dim, index_id) "
                    "VALUES (1, :format, CAST(:config AS jsonb), :model, :dim, :index_id) ON CONFLICT (id) DO NOTHING"
                ),
                {"format": STORE_FORMAT, "config": json.dumps(config), "model": embed_model, "dim": embed_dim,
                 "index_id": index_id},
            )

    def upgrade(self, record: Dict[str, Any]) -> None:
        """Bring a database written by an earlier release to `STORE_FORMAT` (format 2's
        text postings become format 3's integer rows; format 4 adds the keyword postings and
        the terms' bounds), in one transaction.

        Args:
            record: the pack record read from the database (its ``format`` is updated).

        Raises:
            PackStoreError: when the upgrade fails (it needs write access).
        """
        if int(record.get("format") or 0) >= STORE_FORMAT:
            return
        try:
            with self.engine.begin() as conn:
                conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")
                migrate_postings(conn)
                migrate_keywords(conn)
                conn.exec_driver_sql(f"UPDATE hiqa_pack SET format = greatest(format, {STORE_FORMAT}) WHERE id = 1")
        except SQLAlchemyError as exc:
            raise self.error(
                f"holds a pack of store format {record.get('format')}, which this release reads after a one-time "
                f"upgrade that needs write access: open it once with a user that may write, or copy it into a new "
                f"database with `hiqa migrate OLD NEW` ({self.connection._scrub(str(getattr(exc, 'orig', exc))).splitlines()[0]})"
            ) from None
        record["format"] = STORE_FORMAT

    def save_config(self, config: Dict[str, Any]) -> None:
        """Replace the pack's saved settings.

        Args:
            config: the settings.

        Raises:
            PackStoreError: when the database refuses the write.
        """
        try:
            with self.engine.begin() as conn:
                conn.execute(text("UPDATE hiqa_pack SET config = CAST(:c AS jsonb) WHERE id = 1"), {"c": json.dumps(config)})
        except SQLAlchemyError as exc:
            raise self.describe_failure(exc) from None


    def analyze(self) -> None:
        """Refresh the planner's statistics (autovacuum does it in time; call after a bulk load)."""
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            for table in ("hiqa_nodes", "hiqa_documents", "hiqa_terms", f"data_{VECTOR_TABLE}", f"data_{DOCSTORE_TABLE}"):
                conn.exec_driver_sql(f"ANALYZE {table}")
            # The visibility map lets BM25 and the keyword route read their postings from their
            # indexes alone.
            conn.exec_driver_sql("VACUUM ANALYZE hiqa_postings")
            conn.exec_driver_sql("VACUUM ANALYZE hiqa_keywords")

    def document_hash(self, ref_doc_id: str) -> Optional[str]:
        """The stored hash of a document.

        Args:
            ref_doc_id: the document's ref_doc_id.

        Returns:
            Its hash, ``None`` when the document is not stored.
        """
        return self.scalar("SELECT doc_hash FROM hiqa_documents WHERE ref_doc_id = :r", r=ref_doc_id)

    def documents(self) -> Dict[str, str]:
        """``{document id: ref_doc_id}`` of every committed document."""
        return {doc_id: ref for ref, doc_id in self.rows("SELECT ref_doc_id, document_id FROM hiqa_documents")}

    def file_stats(self) -> Dict[str, List[int]]:
        return {
            ref: [int(size), int(mtime)]
            for ref, size, mtime in self.rows(
                "SELECT ref_doc_id, file_size, file_mtime_ns FROM hiqa_documents WHERE file_size IS NOT NULL"
            )
        }

    def node_count(self) -> int:
        return int(self.scalar("SELECT node_count FROM hiqa_pack WHERE id = 1") or 0)

    def nodes(self, node_ids: Sequence[str]) -> Dict[str, BaseNode]:
        """Nodes by id from the docstore table, in one query.

        Args:
            node_ids: the node ids.

        Returns:
            Node id -> node, for the ids stored.
        """
        rows = self.rows(
            f"SELECT key, value FROM data_{DOCSTORE_TABLE} WHERE namespace = 'docstore/data' AND key = ANY(:ids)",
            ids=list(node_ids),
        )
        return {key: json_to_doc(value if isinstance(value, dict) else json.loads(value)) for key, value in rows}

    # -- writes --------------------------------------------------------------------------
    def bulk_load(self) -> Any:
        """A context for many writes into an empty store: the HNSW index is dropped while they
        run and built once at the end (pgvector builds it from a full table far faster than it
        grows it row by row); each write stays one transaction. With a non-empty vector table
        it changes nothing (the index is extended by each insert). A process killed inside
        leaves its committed writes without the index until the next writer builds it."""
        return bulk_load(self)

    def write(
        self,
        vector_store: Any,
        docstore: Any,
        documents: Sequence[DocumentRecord],
        remove_ref_doc_ids: Iterable[str] = (),
        keywords: Optional[Dict[str, Tuple[List[str], List[str]]]] = None,
        tokenizer: Optional[BM25Tokenizer] = None,
        then: Optional[Callable[[Any], None]] = None,
    ) -> int:
        """Replace ``documents`` (and remove ``remove_ref_doc_ids``) in every route, in one
        transaction; returns the number of nodes removed. ``keywords`` maps node id to its
        (critical keywords, title keywords), normalised; ``then(connection)`` writes more in
        the same transaction (the chunk graph) once the routes' rows are in. The same as
        [`commit`][llama_index_hiqa.storage.postgres.PostgresStore.commit] of [`prepare`][llama_index_hiqa.storage.postgres.PostgresStore.prepare].

        Args:
            vector_store: the pack's ``PGVectorStore``.
            docstore: the pack's docstore.
            documents: the documents to write, with their nodes.
            remove_ref_doc_ids: documents to remove.
            keywords: node id -> (critical keywords, title keywords).
            tokenizer: the BM25 tokenizer (``None``: the default).
            then: called with the connection before the commit.

        Returns:
            The number of nodes removed.

        Raises:
            PackStoreError: when the database refuses the write (nothing is written).
        """
        return self.commit(self.prepare(vector_store, docstore, documents, keywords, tokenizer), remove_ref_doc_ids, then)

    def prepare(
        self,
        vector_store: Any,
        docstore: Any,
        documents: Sequence[DocumentRecord],
        keywords: Optional[Dict[str, Tuple[List[str], List[str]]]] = None,
        tokenizer: Optional[BM25Tokenizer] = None,
    ) -> "PreparedWrite":
        """What a write computes before its transaction (the nodes' JSON, BM25 term counts, and the
        COPY data of the vectors, the docstore rows and the nodes' fixed fields); reads and writes
        nothing, so it can run while another batch commits.

        Args:
            vector_store: the pack's ``PGVectorStore``.
            docstore: the pack's docstore.
            documents: the documents to write, with their nodes.
            keywords: node id -> (critical keywords, title keywords).
            tokenizer: the BM25 tokenizer (``None``: the default).

        Returns:
            The prepared write, for [`commit`][llama_index_hiqa.storage.postgres.PostgresStore.commit].
        """
        nodes = [n for d in documents for n in d.nodes]
        stored = [stored_json(n) for n in nodes]
        tokens = (tokenizer or BM25Tokenizer()).documents([text for _, text in stored])
        keywords = keywords or {}
        kv_rows = docstore_rows(docstore, [(d.ref_doc_id, d.doc_hash) for d in documents], nodes, [j for j, _ in stored])
        return PreparedWrite(
            docstore=docstore, documents=list(documents),
            vector_data=vector_copy_data(vector_store, nodes) if nodes else None,
            node_fields=[node_fields(n, keywords.get(n.node_id, ([], []))) for n in nodes],
            counts=[Counter(t) for t in tokens], lengths=[len(t) for t in tokens], kv_data=kv_copy_data(kv_rows),
            keyword_data=keyword_copy_data([n.node_id for n in nodes], [keywords.get(n.node_id, ([], [])) for n in nodes]),
        )

    def commit(self, prepared: "PreparedWrite", remove_ref_doc_ids: Iterable[str] = (), then: Optional[Callable[[Any], None]] = None) -> int:
        """Write a batch that [`prepare`][llama_index_hiqa.storage.postgres.PostgresStore.prepare] made, in one transaction (see [`write`][llama_index_hiqa.storage.postgres.PostgresStore.write]).

        Args:
            prepared: what [`prepare`][llama_index_hiqa.storage.postgres.PostgresStore.prepare] returned.
            remove_ref_doc_ids: documents to remove.
            then: called with the connection before the commit.

        Returns:
            The number of nodes removed.

        Raises:
            PackStoreError: when the database refuses the write (nothing is written).
        """
        p = prepared
        try:
            with self.engine.begin() as conn:
                conn.exec_driver_sql(f"SET LOCAL statement_timeout = {int(self.settings.statement_timeout_s * 20000)}")
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")
                removed = self._delete(conn, p.docstore, [*remove_ref_doc_ids, *(d.ref_doc_id for d in p.documents)])
                self._insert(conn, p)
                ensure_vector_index(self, conn)
                if then is not None:
                    then(conn)
        except SQLAlchemyError as exc:
            raise self.describe_failure(exc) from None
        return removed

    def delete(self, docstore: Any, ref_doc_ids: Sequence[str], then: Optional[Callable[[Any], None]] = None) -> int:
        """Remove documents from every route in one transaction (``then`` as in [`write`][llama_index_hiqa.storage.postgres.PostgresStore.write]).

        Args:
            docstore: the pack's docstore.
            ref_doc_ids: the documents to remove.
            then: called with the connection before the commit.

        Returns:
            The number of nodes removed.

        Raises:
            PackStoreError: when the database refuses the write (nothing is removed).
        """
        try:
            with self.engine.begin() as conn:
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")
                removed = self._delete(conn, docstore, ref_doc_ids)
                if then is not None:
                    then(conn)
                return removed
        except SQLAlchemyError as exc:
            raise self.describe_failure(exc) from None

    def _delete(self, conn: Any, docstore: Any, ref_doc_ids: Sequence[str]) -> int:
        refs = list(dict.fromkeys(ref_doc_ids))
        if not refs:
            return 0
        known = [r[0] for r in conn.execute(text("SELECT ref_doc_id FROM hiqa_documents WHERE ref_doc_id = ANY(:r)"), {"r": refs})]
        if not known:  # new documents: nothing to remove
            return 0
        refs = known
        node_ids = [r[0] for r in conn.execute(text("SELECT node_id FROM hiqa_nodes WHERE ref_doc_id = ANY(:r)"), {"r": refs})]
        length = conn.execute(
            text("SELECT coalesce(sum(length), 0) FROM hiqa_nodes WHERE ref_doc_id = ANY(:r)"), {"r": refs}
        ).scalar()
        conn.execute(text(f"DELETE FROM data_{VECTOR_TABLE} WHERE node_id = ANY(:ids)"), {"ids": node_ids})
        conn.execute(
            text(f"DELETE FROM data_{DOCSTORE_TABLE} WHERE (namespace = ANY(:node_ns) AND key = ANY(:ids)) "
                 "OR (namespace = ANY(:doc_ns) AND key = ANY(:refs))"),
            {"node_ns": [docstore._node_collection, docstore._metadata_collection], "ids": node_ids,
             "doc_ns": [docstore._ref_doc_collection, docstore._metadata_collection], "refs": refs},
        )
        delete_postings(conn, refs)
        conn.execute(text("DELETE FROM hiqa_documents WHERE ref_doc_id = ANY(:r)"), {"r": refs})  # cascades to nodes
        conn.execute(
            text("UPDATE hiqa_pack SET node_count = node_count - :n, total_length = total_length - :l WHERE id = 1"),
            {"n": len(node_ids), "l": int(length)},
        )
        return len(node_ids)

    def _insert(self, conn: Any, p: "PreparedWrite") -> None:
        if not p.documents:
            return
        conn.execute(
            text(
                "INSERT INTO hiqa_documents (ref_doc_id, document_id, title, doc_hash, file_size, file_mtime_ns, pages, node_count) "
                "VALUES (:ref, :doc, :title, :hash, :size, :mtime, :pages, :count)"
            ),
            [
                {"ref": d.ref_doc_id, "doc": without_nul(d.document_id), "title": without_nul(d.title or ""), "hash": d.doc_hash,
                 "size": d.file_stat[0] if d.file_stat else None, "mtime": d.file_stat[1] if d.file_stat else None,
                 "pages": d.pages, "count": len(d.nodes)}
                for d in p.documents
            ],
        )
        if p.node_fields:
            insert_nodes(conn, p.vector_data, p.node_fields, p.counts, p.lengths, p.keyword_data)
            conn.execute(
                text("UPDATE hiqa_pack SET node_count = node_count + :n, total_length = total_length + :l WHERE id = 1"),
                {"n": len(p.node_fields), "l": sum(p.lengths)},
            )
        upsert_kv(conn, f"data_{DOCSTORE_TABLE}", p.kv_data)
