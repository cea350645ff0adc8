"""The PostgreSQL store's rows, written in bulk: COPY inside the caller's transaction.

A batch of nodes goes into every table of [`postgres`][llama_index_hiqa.storage.postgres] with one
``COPY`` per table (the vectors in COPY's binary format, so no float is printed as text), the
BM25 postings as narrow rows keyed by integer term id and node row, and each term's document
frequency kept in ``hiqa_terms``. Everything runs on the connection of the caller's
transaction, so a batch commits whole or not at all.

The HNSW index is the one structure a bulk load is better off without: pgvector builds it
from a full table far faster than it inserts into it row by row. [`bulk_load`][llama_index_hiqa.storage.pg_bulk.bulk_load] drops it
when a load starts on an empty vector table and builds it once at the end; a process killed
in between leaves committed batches without the index (queries then scan exactly), and the
next writer rebuilds it ([`ensure_vector_index`][llama_index_hiqa.storage.pg_bulk.ensure_vector_index]).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import struct
from collections import Counter
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.storage.docstore.types import RefDocInfo
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc
from llama_index.core.vector_stores.utils import node_to_metadata_dict
from sqlalchemy.exc import SQLAlchemyError

from llama_index_hiqa import schema
from llama_index_hiqa.storage.pg_schema import (
    BULK_LOCK,
    KEYWORDS_SCHEMA,
    POSTINGS_SCHEMA,
    VECTOR_TABLE,
    WRITE_LOCK,
    copy_field,
    without_nul,
)

logger = logging.getLogger(__name__)

VECTOR_INDEX = f"data_{VECTOR_TABLE}_embedding_idx"  # PGVectorStore's name for its HNSW index
TF_MAX = 32767  # hiqa_postings.tf is a smallint; no chunk repeats a term that often

_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)


# --- COPY encoders ---------------------------------------------------------------------------
def _binary_field(data: bytes) -> bytes:
    return struct.pack("!i", len(data)) + data


def vector_copy_rows(rows: Sequence[Tuple[str, str, Dict[str, Any], np.ndarray]]) -> io.BytesIO:
    """``(node_id, text, metadata, vector)`` rows in COPY's binary format for PGVectorStore's
    ``(node_id, text, metadata_, embedding)``: varchar as UTF-8, jsonb as version 1 + its text,
    pgvector's ``vector_recv`` layout (int16 dimension, int16 unused, big-endian float4s).

    Args:
        rows: ``(node_id, text, metadata, vector)`` rows.

    Returns:
        The COPY data, at position 0.
    """
    out = io.BytesIO()
    out.write(_COPY_SIGNATURE)
    for node_id, text, metadata, vector in rows:
        v = np.asarray(vector, dtype=">f4")
        out.write(struct.pack("!h", 4))
        out.write(_binary_field(node_id.encode("utf-8")))
        out.write(_binary_field(text.encode("utf-8")))
        out.write(_binary_field(b"\x01" + (metadata if isinstance(metadata, JSONText) else json_text(metadata)).encode("utf-8")))
        out.write(_binary_field(struct.pack("!hh", v.shape[0], 0) + v.tobytes()))
    out.write(struct.pack("!h", -1))
    out.seek(0)
    return out


def _text_array(values: Sequence[str]) -> str:
    return "{" + ",".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "}"


_COPY_CHUNK = 1 << 22  # bytes read from the buffer at a time (psycopg2's default is 8 KB)


def copy_from(conn: Any, sql: str, data: Any) -> None:
    """Run ``COPY ... FROM STDIN`` with ``data`` on the connection of the caller's transaction.

    Args:
        conn: the writer's connection (in its transaction).
        sql: the ``COPY`` statement.
        data: a file-like buffer, read from its current position.
    """
    # Large reads: each read takes the GIL, which a batch committing behind the next batch's
    # preparation (WriteBehind) waits for.
    with conn.connection.cursor() as cursor:  # the DBAPI connection of this transaction
        cursor.copy_expert(sql, data, size=_COPY_CHUNK)


# --- writes ----------------------------------------------------------------------------------
class JSONText(str):
    """A value already serialised as JSON (written as it is)."""


def json_text(value: Any) -> JSONText:
    """``value`` as JSON without NUL characters (checked on the text: the common case costs
    one ``json.dumps``).

    Args:
        value: a JSON-able value.

    Returns:
        Its JSON text.
    """
    text = json.dumps(value)
    if "\\u0000" in text:
        text = json.dumps(without_nul(value))
    return JSONText(text)


def stored_json(node: BaseNode) -> Tuple[JSONText, str]:
    """The docstore's JSON of ``node`` (without its vector, as VectorStoreIndex stores it) and
    the text BM25 indexes: the embedding view of the node as read back from that JSON (what
    the in-memory route indexes), rendered from the node itself when its metadata survives the
    JSON round trip unchanged (parsing the node back costs more than the rest of a write).

    Args:
        node: the node.

    Returns:
        ``(docstore JSON, BM25 text)``.
    """
    data = doc_to_json(node.model_copy(update={"embedding": None}))
    text = json_text(data)
    loaded = json.loads(text)
    if loaded.get("metadata") == node.metadata:
        return text, node.get_content(metadata_mode=MetadataMode.EMBED)
    return text, json_to_doc(loaded).get_content(metadata_mode=MetadataMode.EMBED)


def vector_copy_data(vector_store: Any, nodes: Sequence[BaseNode]) -> io.BytesIO:
    """The COPY data of ``nodes``' rows in ``PGVectorStore``'s table, as its ``add`` would
    write them (the text without its metadata, ``node_to_metadata_dict``, the vector).

    Args:
        vector_store: the pack's ``PGVectorStore`` (its ``flat_metadata``).
        nodes: the nodes, embedded.

    Returns:
        [`vector_copy_rows`][llama_index_hiqa.storage.pg_bulk.vector_copy_rows] of them.
    """
    return vector_copy_rows([
        (n.node_id, without_nul(n.get_content(metadata_mode=MetadataMode.NONE)),
         json_text(node_to_metadata_dict(n, remove_text=True, flat_metadata=vector_store.flat_metadata)),
         n.get_embedding())
        for n in nodes
    ])


def docstore_rows(
    docstore: Any, ref_doc_ids_and_hashes: Sequence[Tuple[str, str]], nodes: Sequence[BaseNode], stored: Sequence[JSONText],
) -> List[Tuple[str, str, Any]]:
    """The docstore's (key, namespace, value) rows of a batch, as ``KVDocumentStore.add_documents``
    writes them: each document's hash (documents without nodes too: their re-ingestion is then
    a no-op), each node, {doc_hash, ref_doc_id} per node, and one RefDocInfo per document.

    Args:
        docstore: the pack's docstore (its collection names).
        ref_doc_ids_and_hashes: ``(ref_doc_id, doc_hash)`` of the batch's documents.
        nodes: the batch's nodes.
        stored: each node's docstore JSON ([`stored_json`][llama_index_hiqa.storage.pg_bulk.stored_json]).

    Returns:
        The rows, in the order consecutive puts would write them.
    """
    rows: List[Tuple[str, str, Any]] = [(ref, docstore._metadata_collection, {"doc_hash": h}) for ref, h in ref_doc_ids_and_hashes]
    per_document: Dict[str, Tuple[Dict[str, Any], List[str]]] = {}
    for node, value in zip(nodes, stored):
        meta: Dict[str, Any] = {"doc_hash": node.hash}
        if node.ref_doc_id:
            meta["ref_doc_id"] = node.ref_doc_id
            per_document.setdefault(node.ref_doc_id, (node.metadata or {}, []))[1].append(node.node_id)
        rows.append((node.node_id, docstore._node_collection, value))
        rows.append((node.node_id, docstore._metadata_collection, meta))
    for ref, (metadata, ids) in per_document.items():
        rows.append((ref, docstore._ref_doc_collection, RefDocInfo(node_ids=ids, metadata=metadata).to_dict()))
    return rows


def kv_copy_data(rows: Sequence[Tuple[str, str, Any]]) -> io.StringIO:
    """Docstore rows as COPY text for [`upsert_kv`][llama_index_hiqa.storage.pg_bulk.upsert_kv].

    Args:
        rows: ``(key, namespace, value)`` rows (a value a [`JSONText`][llama_index_hiqa.storage.pg_bulk.JSONText] or JSON-able).

    Returns:
        The COPY data.
    """
    buffer = io.StringIO()
    for key, namespace, value in rows:
        value = value if isinstance(value, JSONText) else json_text(value)
        buffer.write(f"{copy_field(key)}\t{copy_field(namespace)}\t{copy_field(value)}\n")
    return buffer


def node_fields(node: BaseNode, keywords: Tuple[List[str], List[str]]) -> str:
    """The first five hiqa_nodes COPY fields of ``node`` (id, document, position, keywords,
    title keywords): what does not wait for the row number and term ids the database assigns.

    Args:
        node: the node.
        keywords: its (critical keywords, title keywords), normalised.

    Returns:
        The fields, tab-separated.
    """
    kws, title_kws = keywords
    position = schema.get_position(node)
    return "\t".join((
        copy_field(node.node_id), copy_field(node.ref_doc_id), "\\N" if position is None else str(int(position)),
        copy_field(_text_array(without_nul(list(kws)))), copy_field(_text_array(without_nul(list(title_kws)))),
    ))


def keyword_copy_data(node_ids: Sequence[str], keywords: Sequence[Tuple[List[str], List[str]]]) -> io.StringIO:
    """The keyword postings of a batch as COPY text for ``hiqa_keywords``: one row per node and
    critical keyword, and whether it is a keyword of the node's document title too.

    Args:
        node_ids: the nodes' ids.
        keywords: each node's (critical keywords, title keywords), normalised.

    Returns:
        The COPY data.
    """
    buffer = io.StringIO()
    for node_id, (kws, title_kws) in zip(node_ids, keywords):
        node = copy_field(without_nul(node_id))
        title = set(without_nul(list(title_kws)))
        buffer.write("".join(
            f"{copy_field(k)}\t{node}\t{'t' if k in title else 'f'}\n" for k in dict.fromkeys(without_nul(list(kws)))
        ))
    return buffer


def insert_nodes(
    conn: Any, vector_data: io.BytesIO, fields: Sequence[str], counts: Sequence[Counter[str]], lengths: Sequence[int],
    keyword_data: io.StringIO,
) -> None:
    """A batch's rows in the vector table, hiqa_nodes, the postings, hiqa_terms and hiqa_keywords.

    Args:
        conn: the writer's connection (in its transaction).
        vector_data: the vector table's rows ([`vector_copy_data`][llama_index_hiqa.storage.pg_bulk.vector_copy_data]).
        fields: each node's [`node_fields`][llama_index_hiqa.storage.pg_bulk.node_fields].
        counts: each node's BM25 term counts.
        lengths: each node's BM25 length (tokens).
        keyword_data: the keyword postings ([`keyword_copy_data`][llama_index_hiqa.storage.pg_bulk.keyword_copy_data]).
    """
    vector_data.seek(0)  # from the start, however often the prepared batch was read before
    copy_from(conn, f"COPY data_{VECTOR_TABLE} (node_id, text, metadata_, embedding) FROM STDIN WITH (FORMAT binary)", vector_data)
    term_ids = _term_ids(conn, counts)
    last = conn.exec_driver_sql(
        "SELECT setval('hiqa_node_rows', nextval('hiqa_node_rows') + %(n)s - 1)", {"n": len(fields)}
    ).scalar()
    first = int(last) - len(fields) + 1
    node_buffer, postings = io.StringIO(), io.StringIO()
    posted_ids: List[int] = []
    posted_tf: List[int] = []
    posted_length: List[int] = []
    for offset, (head, counter, length) in enumerate(zip(fields, counts, lengths)):
        row = first + offset
        ids = [term_ids[t] for t in counter]
        tfs = [min(tf, TF_MAX) for tf in counter.values()]
        node_buffer.write(f"{head}\t{length}\t{row}\t{{{','.join(map(str, ids))}}}\n")
        postings.write("".join(f"{term_id}\t{row}\t{length}\t{tf}\n" for term_id, tf in zip(ids, tfs)))
        posted_ids += ids
        posted_tf += tfs
        posted_length += [length] * len(ids)
    node_buffer.seek(0)
    postings.seek(0)
    keyword_data.seek(0)
    copy_from(conn, "COPY hiqa_nodes (node_id, ref_doc_id, position, keywords, title_keywords, length, node_row, term_ids) "
                "FROM STDIN", node_buffer)
    copy_from(conn, "COPY hiqa_postings (term_id, node_row, length, tf) FROM STDIN", postings)
    copy_from(conn, "COPY hiqa_keywords (keyword, node_id, in_title) FROM STDIN", keyword_data)
    if posted_ids:
        ids, df, max_tf, min_length = term_statistics(posted_ids, posted_tf, posted_length)
        conn.exec_driver_sql(
            "UPDATE hiqa_terms t SET df = t.df + d.n, max_tf = greatest(t.max_tf, d.tf), "
            "min_length = least(t.min_length, d.length) "
            "FROM unnest(%(ids)s::int[], %(ns)s::int[], %(tf)s::int[], %(len)s::int[]) d(id, n, tf, length) "
            "WHERE t.term_id = d.id",
            {"ids": ids, "ns": df, "tf": max_tf, "len": min_length},
        )


def term_statistics(
    term_ids: Sequence[int], tfs: Sequence[int], lengths: Sequence[int]
) -> Tuple[List[int], List[int], List[int], List[int]]:
    """Per term of a batch's postings: its id, how many postings (nodes), its largest tf and
    its smallest node length.

    Args:
        term_ids: each posting's term id.
        tfs: each posting's term frequency.
        lengths: each posting's node length.

    Returns:
        ``(term ids, document frequencies, largest tf, smallest length)``, one entry per term.
    """
    ids = np.asarray(term_ids, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    df = np.diff(np.r_[starts, len(ids)])
    max_tf = np.maximum.reduceat(np.asarray(tfs, dtype=np.int64)[order], starts)
    min_length = np.minimum.reduceat(np.asarray(lengths, dtype=np.int64)[order], starts)
    return ids[starts].tolist(), df.tolist(), max_tf.tolist(), min_length.tolist()


def _term_ids(conn: Any, counts: Sequence[Counter[str]]) -> Dict[str, int]:
    """Each term's id, new terms added to the vocabulary (writers hold the write lock, so
    no other transaction adds the same term meanwhile)."""
    terms = sorted({t for c in counts for t in c})
    if not terms:
        return {}
    rows = conn.exec_driver_sql(
        "WITH ins AS (INSERT INTO hiqa_terms (term_id, term, df) "
        "  SELECT nextval('hiqa_term_ids'), t, 0 FROM unnest(%(t)s::text[]) t "
        "  WHERE NOT EXISTS (SELECT 1 FROM hiqa_terms h WHERE h.term = t) RETURNING term, term_id) "
        "SELECT term, term_id FROM ins UNION ALL SELECT term, term_id FROM hiqa_terms WHERE term = ANY(%(t)s::text[])",
        {"t": terms},
    )
    return {term: int(term_id) for term, term_id in rows}


def upsert_kv(conn: Any, table: str, data: io.StringIO) -> None:
    """The docstore's rows ([`kv_copy_data`][llama_index_hiqa.storage.pg_bulk.kv_copy_data]), replacing a row with the same key and
    namespace (as ``PostgresKVStore.put_all`` does): COPY into a staging table, then one
    INSERT ... ON CONFLICT.

    Args:
        conn: the writer's connection (in its transaction).
        table: the docstore table.
        data: the rows' COPY data.
    """
    if data.seek(0, io.SEEK_END) == 0:  # no rows (without copying the buffer's text)
        return
    conn.exec_driver_sql(
        "CREATE TEMP TABLE IF NOT EXISTS hiqa_kv_stage (key varchar, namespace varchar, value jsonb) ON COMMIT DELETE ROWS"
    )
    data.seek(0)
    copy_from(conn, "COPY hiqa_kv_stage (key, namespace, value) FROM STDIN", data)
    # The last row of a key wins, as consecutive puts would leave it.
    conn.exec_driver_sql(
        f"INSERT INTO {table} (key, namespace, value) "
        "SELECT DISTINCT ON (key, namespace) key, namespace, value FROM "
        "(SELECT *, row_number() OVER () AS i FROM hiqa_kv_stage) s ORDER BY key, namespace, i DESC "
        "ON CONFLICT (key, namespace) DO UPDATE SET value = EXCLUDED.value"
    )
    conn.exec_driver_sql("TRUNCATE hiqa_kv_stage")


def delete_postings(conn: Any, ref_doc_ids: Sequence[str]) -> None:
    """Remove the documents' BM25 postings (found by the term ids each node keeps) and their
    counts from the document frequencies, and their keyword postings; before their hiqa_nodes
    rows go (a term's largest tf and smallest length stay: bounds still).

    Args:
        conn: the writer's connection (in its transaction).
        ref_doc_ids: the documents.
    """
    conn.exec_driver_sql(
        "UPDATE hiqa_terms t SET df = t.df - d.n FROM ("
        "  SELECT term_id, count(*) AS n FROM hiqa_nodes, unnest(term_ids) AS term_id "
        "  WHERE ref_doc_id = ANY(%(r)s) GROUP BY term_id) d WHERE t.term_id = d.term_id",
        {"r": list(ref_doc_ids)},
    )
    conn.exec_driver_sql(
        "DELETE FROM hiqa_postings p USING ("
        "  SELECT node_row, unnest(term_ids) AS term_id FROM hiqa_nodes WHERE ref_doc_id = ANY(%(r)s)) d "
        "WHERE p.term_id = d.term_id AND p.node_row = d.node_row",
        {"r": list(ref_doc_ids)},
    )
    conn.exec_driver_sql(
        "DELETE FROM hiqa_keywords k USING ("
        "  SELECT node_id, unnest(keywords) AS keyword FROM hiqa_nodes WHERE ref_doc_id = ANY(%(r)s)) d "
        "WHERE k.keyword = d.keyword AND k.node_id = d.node_id",
        {"r": list(ref_doc_ids)},
    )


# --- the HNSW index around a bulk load ---------------------------------------------------------
def vector_index_sql(store: Any) -> str:
    """The statement creating the HNSW index with the store's settings.

    Args:
        store: the ``PostgresStore`` (its ``hnsw_m`` and ``hnsw_ef_construction``).

    Returns:
        The SQL.
    """
    s = store.settings
    return (f"CREATE INDEX IF NOT EXISTS {VECTOR_INDEX} ON data_{VECTOR_TABLE} USING hnsw (embedding vector_cosine_ops) "
            f"WITH (m = {s.hnsw_m}, ef_construction = {s.hnsw_ef_construction})")


def build_vector_index(store: Any, conn: Any) -> None:
    """Build the HNSW index on ``conn`` (the graph in memory: pgvector's fast build).

    Args:
        store: the ``PostgresStore`` (its index settings and build memory).
        conn: the connection, in a transaction.
    """
    conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
    conn.exec_driver_sql(f"SET LOCAL maintenance_work_mem = '{store.settings.index_build_memory_mb}MB'")
    conn.exec_driver_sql(vector_index_sql(store))


def has_vector_index(conn: Any) -> bool:
    """Whether the HNSW index exists.

    Args:
        conn: the connection.

    Returns:
        True when it exists.
    """
    return conn.exec_driver_sql(f"SELECT to_regclass('{VECTOR_INDEX}')").scalar() is not None


def ensure_vector_index(store: Any, conn: Any) -> None:
    """In a writer's transaction: rebuild the HNSW index when a bulk load that deferred it
    died before building it (no session holds the bulk-load lock).

    Args:
        store: the ``PostgresStore``.
        conn: the writer's connection, in its transaction.
    """
    if has_vector_index(conn):
        return
    if conn.exec_driver_sql(f"SELECT pg_try_advisory_xact_lock({BULK_LOCK})").scalar():
        logger.info("%s: building the HNSW index a bulk load left unbuilt", store.masked_url)
        build_vector_index(store, conn)


@contextlib.contextmanager
def bulk_load(store: Any) -> Iterator[bool]:
    """Defer the HNSW index over the writes made inside (when the vector table is empty) and
    build it at the end; yields whether it was deferred. Each write stays its own
    transaction. Another writer meanwhile extends the table without the index (exact scans).

    Args:
        store: the ``PostgresStore``.

    Yields:
        Whether the index was deferred.

    Raises:
        PackStoreError: when the database cannot be reached.
    """
    try:
        holder = store.engine.connect()
    except SQLAlchemyError as exc:
        raise store.describe_failure(exc) from None
    deferred = False
    try:
        holder = holder.execution_options(isolation_level="AUTOCOMMIT")
        if holder.exec_driver_sql(f"SELECT pg_try_advisory_lock({BULK_LOCK})").scalar():
            with store.engine.begin() as conn:
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")
                empty = conn.exec_driver_sql(f"SELECT NOT EXISTS (SELECT 1 FROM data_{VECTOR_TABLE})").scalar()
                if empty:
                    conn.exec_driver_sql(f"DROP INDEX IF EXISTS {VECTOR_INDEX}")
                    deferred = True
            if not deferred:  # nothing to hold back: the writes (re)build a missing index themselves
                holder.exec_driver_sql(f"SELECT pg_advisory_unlock({BULK_LOCK})")
        yield deferred
    finally:
        try:
            if deferred:
                with store.engine.begin() as conn:
                    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")
                    build_vector_index(store, conn)
        finally:
            if deferred:
                holder.exec_driver_sql(f"SELECT pg_advisory_unlock({BULK_LOCK})")
            holder.close()


# --- store format 2 -> 3 -----------------------------------------------------------------------
def migrate_postings(conn: Any) -> bool:
    """Rewrite a format-2 database's postings (term and node id as text) as format 3's
    (vocabulary, integer rows), in the caller's transaction; whether anything was done.

    Args:
        conn: the connection, in the caller's transaction.

    Returns:
        True when postings were rewritten.
    """
    old = conn.exec_driver_sql(
        "SELECT 1 FROM information_schema.columns WHERE table_name = 'hiqa_postings' AND column_name = 'term' "
        "AND table_schema = current_schema()"
    ).first()
    if old is None:
        return False
    conn.exec_driver_sql("ALTER TABLE hiqa_postings RENAME TO hiqa_postings_v2")
    conn.exec_driver_sql("ALTER INDEX IF EXISTS hiqa_postings_term RENAME TO hiqa_postings_v2_term")
    conn.exec_driver_sql("ALTER TABLE hiqa_nodes ADD COLUMN IF NOT EXISTS node_row int UNIQUE, "
                         "ADD COLUMN IF NOT EXISTS term_ids int[]")
    conn.exec_driver_sql("CREATE SEQUENCE IF NOT EXISTS hiqa_node_rows AS int")
    for statement in POSTINGS_SCHEMA:
        conn.exec_driver_sql(statement)
    conn.exec_driver_sql(
        "UPDATE hiqa_nodes n SET node_row = r.row FROM (SELECT node_id, nextval('hiqa_node_rows') AS row FROM "
        "(SELECT node_id FROM hiqa_nodes ORDER BY ref_doc_id, position, node_id) o) r WHERE n.node_id = r.node_id"
    )
    conn.exec_driver_sql(
        "INSERT INTO hiqa_terms (term_id, term, df) SELECT nextval('hiqa_term_ids'), term, df FROM "
        "(SELECT term, count(*) AS df FROM hiqa_postings_v2 GROUP BY term ORDER BY term) t"
    )
    conn.exec_driver_sql(
        f"INSERT INTO hiqa_postings (term_id, node_row, length, tf) SELECT t.term_id, n.node_row, p.length, "
        f"least(p.tf, {TF_MAX}) FROM hiqa_postings_v2 p JOIN hiqa_terms t USING (term) JOIN hiqa_nodes n USING (node_id)"
    )
    conn.exec_driver_sql(
        "UPDATE hiqa_nodes n SET term_ids = p.ids FROM (SELECT node_row, array_agg(term_id ORDER BY term_id) AS ids "
        "FROM hiqa_postings GROUP BY node_row) p WHERE n.node_row = p.node_row"
    )
    conn.exec_driver_sql("UPDATE hiqa_nodes SET term_ids = '{}' WHERE term_ids IS NULL")
    conn.exec_driver_sql("DROP TABLE hiqa_postings_v2")
    return True


# --- store format 3 -> 4 -----------------------------------------------------------------------
def migrate_keywords(conn: Any) -> bool:
    """Give a format-2 or format-3 database format 4's keyword postings (from each node's
    keywords) and each term's largest tf and smallest node length (from its postings), and
    drop the keyword column's GIN index they replace, in the caller's transaction (after
    [`migrate_postings`][llama_index_hiqa.storage.pg_bulk.migrate_postings]); whether anything was done.

    Args:
        conn: the connection, in the caller's transaction.

    Returns:
        True when the database was migrated.
    """
    if conn.exec_driver_sql("SELECT to_regclass('hiqa_keywords')").scalar() is not None:
        return False
    if conn.exec_driver_sql("SELECT to_regclass('hiqa_terms')").scalar() is None:
        return False  # a database without the routes' tables: SCHEMA creates them as they are
    conn.exec_driver_sql("ALTER TABLE hiqa_terms ADD COLUMN IF NOT EXISTS max_tf int NOT NULL DEFAULT 0, "
                         "ADD COLUMN IF NOT EXISTS min_length int NOT NULL DEFAULT 2147483647")
    conn.exec_driver_sql(
        "UPDATE hiqa_terms t SET max_tf = s.tf, min_length = s.length FROM ("
        "  SELECT term_id, max(tf) AS tf, min(length) AS length FROM hiqa_postings GROUP BY term_id) s "
        "WHERE t.term_id = s.term_id"
    )
    for statement in KEYWORDS_SCHEMA:
        conn.exec_driver_sql(statement)
    conn.exec_driver_sql(
        "INSERT INTO hiqa_keywords (keyword, node_id, in_title) SELECT DISTINCT k, node_id, k = ANY(title_keywords) "
        "FROM hiqa_nodes, unnest(keywords) AS k"
    )
    conn.exec_driver_sql("DROP INDEX IF EXISTS hiqa_nodes_keywords")
    return True
