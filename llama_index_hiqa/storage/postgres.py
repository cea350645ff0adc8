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
``hiqa_nodes``              one row per node: critical keywords (``text[]``, GIN),
                            its document title's keywords, its BM25 length, an integer row
                            number and its BM25 term ids
``hiqa_terms``              BM25's vocabulary: term, integer id, document frequency
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
is written with one ``COPY`` per table (:mod:`~llama_index_hiqa.storage.pg_bulk`); a load into
an empty vector table builds the HNSW index once at its end (``PostgresStore.bulk_load``).

**BM25** is Okapi BM25 over stored term statistics, computed by one SQL query with bm25s's
defaults (Lucene IDF, k1 = 1.5, b = 0.75) over the same tokens (``BM25Retriever``'s
tokenizer, stop words and Snowball stemmer), so it ranks as the in-memory route does.

Connection handling: SQLAlchemy pools per process, one for writes and LlamaIndex's stores and
one for the routes' synchronous reads (psycopg2, the driver LlamaIndex's Postgres stores are
written for; autocommit, one round trip a statement), and one for asynchronous retrieval
(asyncpg), connect and statement timeouts, and
every failure a user can cause (a malformed URL, an unreachable server, wrong credentials, a
missing database or pgvector extension, a store built with another embedding model) raised
as :class:`~llama_index_hiqa.errors.PackStoreError` naming the URL with its password masked.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field
from llama_index.core.schema import BaseNode, MetadataMode

from llama_index_hiqa.errors import PackStoreError
from llama_index_hiqa.storage.pg_bulk import (
    bulk_load,
    delete_postings,
    ensure_vector_index,
    insert_nodes,
    migrate_postings,
    stored_json,
    upsert_kv,
)
from llama_index_hiqa.storage.pg_schema import (
    DOCSTORE_TABLE,
    INDEX_STORE_TABLE,
    SCHEMA,
    STORE_FORMAT,
    SCHEMA_LOCK,
    VECTOR_TABLE,
    WRITE_LOCK,
    BM25Tokenizer,
    without_nul,
)

logger = logging.getLogger(__name__)

URL_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://", "postgresql+asyncpg://")
def is_postgres_url(store: Any) -> bool:
    """Whether ``store`` names a PostgreSQL database rather than a folder."""
    return isinstance(store, str) and store.lower().startswith(URL_SCHEMES)


def mask_url(url: Any) -> str:
    """The URL with its password replaced by ``***`` (for every message and log line)."""
    return re.sub(r"(://[^:/@?#]*:)[^@/?#]*@", r"\1***@", str(url))


class PostgresStoreSettings(BaseModel):
    """Connection and index settings of the PostgreSQL store."""

    model_config = ConfigDict(extra="forbid")

    pool_size: int = Field(default=5, ge=1, description="Connections kept open per process and pool.")
    max_overflow: int = Field(default=10, ge=0, description="Extra connections under load.")
    connect_timeout_s: float = Field(default=10.0, gt=0, description="Give up connecting after this long.")
    statement_timeout_s: float = Field(
        default=60.0, gt=0, description="Cancel a query after this long (ingestion batches get 20x)."
    )
    hnsw_m: int = Field(default=16, ge=2, description="pgvector HNSW: links per node.")
    hnsw_ef_construction: int = Field(default=64, ge=4, description="pgvector HNSW: build-time candidate list.")
    hnsw_ef_search: int = Field(
        default=400, ge=1,
        description="pgvector HNSW: query-time candidate list (raised to the route's candidates "
        "when lower, or HNSW would return fewer). 400: the folder store's FinanceBench ranking "
        "exactly (200 changed one top 5 in 86 questions).",
    )
    index_build_memory_mb: int = Field(
        default=3072, ge=64,
        description="maintenance_work_mem of the session that builds the HNSW index after a bulk "
        "load: pgvector builds fast while the graph fits in it (about 2.2 KB a 384-dimension "
        "vector), much slower past it.",
    )


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


def _driver_url(url: str, driver: str) -> str:
    return re.sub(r"^(postgresql|postgres)(\+\w+)?://", f"postgresql+{driver}://", url, flags=re.I)


def _url_without_options(url: str, driver: str) -> Any:
    """The URL for ``driver`` without ``options`` (passed as session settings instead:
    asyncpg takes no ``options`` argument)."""
    from sqlalchemy.engine import make_url

    return make_url(_driver_url(url, driver)).difference_update_query(["options"])


class PostgresStore:
    """One pack's database: engines, schema, transactional writes and the routes' queries."""

    def __init__(self, url: str, settings: Optional[PostgresStoreSettings] = None) -> None:
        if not is_postgres_url(url):
            raise PackStoreError(mask_url(url), f"is not a PostgreSQL URL (expected {URL_SCHEMES[0]}USER@HOST/DATABASE)")
        self.url = url
        self.masked_url = mask_url(url)
        self.settings = settings or PostgresStoreSettings()
        self._engine: Any = None
        self._read_engine: Any = None
        self._async_engine: Any = None
        self._password = self._url_password(url)

    # -- connections ---------------------------------------------------------------------
    def _url_password(self, url: str) -> Optional[str]:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            return make_url(_driver_url(url, "psycopg2")).password
        except (ArgumentError, ValueError) as exc:
            raise PackStoreError(self.masked_url, f"is not a valid PostgreSQL URL ({exc})") from None

    def error(self, reason: str) -> PackStoreError:
        """A PackStoreError about this database, on one line (``reason`` holds no password:
        driver messages pass through :meth:`_scrub` first)."""
        return PackStoreError(self.masked_url, " ".join(str(reason).split()))

    def _scrub(self, message: str) -> str:
        """A driver's message with any URL's password and this URL's password masked."""
        text = mask_url(message)
        if self._password:
            text = text.replace(str(self._password), "***")
        return text

    @property
    def engine(self) -> Any:
        if self._engine is None:
            from sqlalchemy import create_engine

            s = self.settings
            self._engine = create_engine(
                _url_without_options(self.url, "psycopg2"), pool_size=s.pool_size, max_overflow=s.max_overflow,
                pool_pre_ping=True, pool_timeout=s.connect_timeout_s,
                connect_args={
                    "connect_timeout": max(1, int(round(s.connect_timeout_s))),
                    "options": " ".join(f"-c {k}={v}" for k, v in self._server_settings().items()),
                },
            )
        return self._engine

    @property
    def read_engine(self) -> Any:
        """The pool of the routes' reads: each statement its own transaction (autocommit) and no
        ping before it, so a statement is one round trip (a ping and a rollback would make it
        three); a connection the server dropped is replaced and the statement sent again."""
        if self._read_engine is None:
            from sqlalchemy import create_engine

            s = self.settings
            self._read_engine = create_engine(
                _url_without_options(self.url, "psycopg2"), pool_size=s.pool_size, max_overflow=s.max_overflow,
                pool_timeout=s.connect_timeout_s, isolation_level="AUTOCOMMIT",
                connect_args={
                    "connect_timeout": max(1, int(round(s.connect_timeout_s))),
                    "options": " ".join(f"-c {k}={v}" for k, v in self._server_settings().items()),
                },
            )
        return self._read_engine

    def _read(self, run: Callable[[Any], Any]) -> Any:
        from sqlalchemy.exc import DBAPIError

        for attempt in (0, 1):
            try:
                with self.read_engine.connect() as conn:
                    return run(conn)
            except DBAPIError as exc:
                if attempt or not exc.connection_invalidated:
                    raise
        return None  # not reached

    @property
    def async_engine(self) -> Any:
        """The asyncpg pool of the running event loop (asyncpg connections belong to one loop,
        so a process that runs several loops, e.g. ``asyncio.run`` per call, gets one each)."""
        import asyncio

        from sqlalchemy.ext.asyncio import create_async_engine

        try:
            loop: Any = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if self._async_engine is None or self._async_engine[0] is not loop:
            s = self.settings
            engine = create_async_engine(
                _url_without_options(self.url, "asyncpg"), pool_size=s.pool_size, max_overflow=s.max_overflow,
                pool_pre_ping=True, pool_timeout=s.connect_timeout_s,
                connect_args={
                    "timeout": s.connect_timeout_s, "command_timeout": s.statement_timeout_s,
                    "server_settings": self._server_settings(),
                },
            )
            self._async_engine = (loop, engine)
        return self._async_engine[1]

    def _server_settings(self) -> Dict[str, str]:
        """Session settings: the URL's own ``options=-c key=value ...`` (e.g. a search_path),
        then the statement timeout and application name, for both drivers."""
        from sqlalchemy.engine import make_url

        given = make_url(_driver_url(self.url, "psycopg2")).query.get("options") or ""
        if isinstance(given, tuple):
            given = " ".join(given)
        settings = dict(re.findall(r"-c\s*([\w.]+)=(\S+)", given))
        settings.setdefault("statement_timeout", str(int(self.settings.statement_timeout_s * 1000)))
        # The routes' statements run without a SET before them (one round trip each).
        settings.setdefault("hnsw.ef_search", str(self.settings.hnsw_ef_search))
        settings.setdefault("application_name", "llama-index-hiqa")
        return settings

    def describe_failure(self, exc: BaseException) -> PackStoreError:
        """A driver exception as one line a user can act on."""
        message = self._scrub(str(getattr(exc, "orig", None) or exc))
        lower = message.lower()
        if "password authentication failed" in lower or "no password supplied" in lower:
            reason = "wrong user name or password (password authentication failed)"
        elif "does not exist" in lower and "database" in lower:
            reason = f"no such database ({message.splitlines()[0]})"
        elif "timeout" in lower or "timed out" in lower:
            reason = f"the server did not answer within {self.settings.connect_timeout_s:g} s ({message.splitlines()[0]})"
        elif "connection refused" in lower or "could not translate host name" in lower or "no such file" in lower \
                or "name or service not known" in lower or "connection failed" in lower:
            reason = f"cannot reach the server ({message.splitlines()[0]})"
        else:
            reason = f"database error: {message.splitlines()[0] if message else type(exc).__name__}"
        return self.error(reason)

    def connect(self) -> "PostgresStore":
        """Open the pool and check the server: reachable, credentials, pgvector."""
        from sqlalchemy import text
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
                installed = conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'vector'")).first()
        except SQLAlchemyError as exc:
            raise self.describe_failure(exc) from None
        if installed is None:
            self._create_vector_extension()
        return self

    def _create_vector_extension(self) -> None:
        from sqlalchemy import text
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self.engine.begin() as conn:
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": SCHEMA_LOCK})  # writers started at once
                available = conn.execute(text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")).first()
                if available is None:
                    raise self.error(
                        "the pgvector extension is not installed on this server (install pgvector, "
                        "e.g. the postgresql-16-pgvector package, or use a managed Postgres that ships it)"
                    )
                conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
        except SQLAlchemyError as exc:
            first = self._scrub(str(getattr(exc, "orig", exc))).splitlines()[0]
            raise self.error(
                f"the pgvector extension is missing in this database and this user may not create it ({first}); "
                "ask an administrator to run CREATE EXTENSION vector"
            ) from None

    def dispose(self) -> None:
        for engine in (self._engine, self._read_engine):
            if engine is not None:
                engine.dispose()
        self._engine = self._read_engine = None
        # The asyncpg pool belongs to its event loop; dropping the reference closes it with it.
        self._async_engine = None

    # -- LlamaIndex's stores over the same pool ----------------------------------------
    def _hnsw(self) -> Dict[str, Any]:
        s = self.settings
        return {
            "hnsw_m": s.hnsw_m, "hnsw_ef_construction": s.hnsw_ef_construction,
            "hnsw_ef_search": s.hnsw_ef_search, "hnsw_dist_method": "vector_cosine_ops",
        }

    # setup=True only when the pack is created: a query process writes nothing, so it also
    # runs against a read-only replica.
    def vector_store(self, embed_dim: int, setup: bool = False) -> Any:
        from llama_index.vector_stores.postgres import PGVectorStore

        store = PGVectorStore(
            # The engines below are what connects; the strings are only kept (and shown in the
            # stores' repr), so they carry no password.
            connection_string=mask_url(_driver_url(self.url, "psycopg2")),
            async_connection_string=mask_url(_driver_url(self.url, "asyncpg")),
            table_name=VECTOR_TABLE, embed_dim=embed_dim, hnsw_kwargs=self._hnsw(), use_jsonb=True,
            engine=self.engine, async_engine=_LazyAsyncEngine(self), initialization_fail_on_error=True,
            perform_setup=setup,
        )
        return store

    def _kvstore(self, table: str, setup: bool = False) -> Any:
        from llama_index.storage.kvstore.postgres import PostgresKVStore

        return PostgresKVStore(
            table_name=table, connection_string=mask_url(_driver_url(self.url, "psycopg2")),
            async_connection_string=mask_url(_driver_url(self.url, "asyncpg")),
            engine=self.engine, async_engine=_LazyAsyncEngine(self), use_jsonb=True, perform_setup=setup,
        )

    def docstore(self) -> Any:
        from llama_index.storage.docstore.postgres import PostgresDocumentStore

        return PostgresDocumentStore(self._kvstore(DOCSTORE_TABLE))

    def index_store(self) -> Any:
        from llama_index.storage.index_store.postgres import PostgresIndexStore

        return PostgresIndexStore(self._kvstore(INDEX_STORE_TABLE))

    # -- the pack record -----------------------------------------------------------------
    def read_pack(self) -> Optional[Dict[str, Any]]:
        """The pack's record, or ``None`` when the database holds no pack yet."""
        from sqlalchemy import text
        from sqlalchemy.exc import SQLAlchemyError

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
        wins)."""
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
        from sqlalchemy import text

        vector_store = self.vector_store(embed_dim, setup=True)
        vector_store._initialize()  # its table and HNSW index, by its own code
        for table in (DOCSTORE_TABLE, INDEX_STORE_TABLE):
            self._kvstore(table, setup=True)._initialize()
        with self.engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": WRITE_LOCK})
            migrate_postings(conn)  # a format-2 database's postings, before SCHEMA reads them
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
        """Bring a database written by an earlier release to :data:`STORE_FORMAT` (format 2's
        text postings become format 3's integer rows), in one transaction."""
        from sqlalchemy.exc import SQLAlchemyError

        if int(record.get("format") or 0) >= STORE_FORMAT:
            return
        try:
            with self.engine.begin() as conn:
                conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")
                migrate_postings(conn)
                conn.exec_driver_sql(f"UPDATE hiqa_pack SET format = greatest(format, {STORE_FORMAT}) WHERE id = 1")
        except SQLAlchemyError as exc:
            raise self.error(
                f"holds a pack of store format {record.get('format')}, which this release reads after a one-time "
                f"upgrade that needs write access ({self._scrub(str(getattr(exc, 'orig', exc))).splitlines()[0]})"
            ) from None
        record["format"] = STORE_FORMAT

    def save_config(self, config: Dict[str, Any]) -> None:
        from sqlalchemy import text
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self.engine.begin() as conn:
                conn.execute(text("UPDATE hiqa_pack SET config = CAST(:c AS jsonb) WHERE id = 1"), {"c": json.dumps(config)})
        except SQLAlchemyError as exc:
            raise self.describe_failure(exc) from None

    # -- reads ---------------------------------------------------------------------------
    def scalar(self, sql: str, **params: Any) -> Any:
        from sqlalchemy import text

        return self._read(lambda conn: conn.execute(text(sql), params).scalar())

    def rows(self, sql: str, _settings: Optional[Dict[str, str]] = None, **params: Any) -> List[Tuple[Any, ...]]:
        """The rows of one statement (``_settings``: session settings for it alone, in a
        transaction of its own)."""
        from sqlalchemy import text

        if not _settings:
            return self._read(lambda conn: [tuple(r) for r in conn.execute(text(sql), params)])
        with self.engine.connect() as conn:
            for name, value in _settings.items():
                conn.execute(text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})
            return [tuple(r) for r in conn.execute(text(sql), params)]

    async def arows(self, sql: str, _settings: Optional[Dict[str, str]] = None, **params: Any) -> List[Tuple[Any, ...]]:
        from sqlalchemy import text

        async with self.async_engine.connect() as conn:
            for name, value in (_settings or {}).items():
                await conn.execute(text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})
            result = await conn.execute(text(sql), params)
            return [tuple(r) for r in result]

    def analyze(self) -> None:
        """Refresh the planner's statistics (autovacuum does it in time; call after a bulk load)."""
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            for table in ("hiqa_nodes", "hiqa_documents", "hiqa_terms", f"data_{VECTOR_TABLE}", f"data_{DOCSTORE_TABLE}"):
                conn.exec_driver_sql(f"ANALYZE {table}")
            # The visibility map lets BM25 read the postings from their index alone.
            conn.exec_driver_sql("VACUUM ANALYZE hiqa_postings")

    def document_hash(self, ref_doc_id: str) -> Optional[str]:
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
        """Nodes by id from the docstore table, in one query."""
        from llama_index.core.storage.docstore.utils import json_to_doc

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
        the same transaction (the chunk graph) once the routes' rows are in."""
        from sqlalchemy.exc import SQLAlchemyError

        tokenizer = tokenizer or BM25Tokenizer()
        nodes = [n for d in documents for n in d.nodes]
        stored = [stored_json(n) for n in nodes]
        tokens = tokenizer.documents([text for _, text in stored])
        try:
            with self.engine.begin() as conn:
                conn.exec_driver_sql(f"SET LOCAL statement_timeout = {int(self.settings.statement_timeout_s * 20000)}")
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")
                removed = self._delete(conn, docstore, [*remove_ref_doc_ids, *(d.ref_doc_id for d in documents)])
                self._insert(conn, vector_store, docstore, documents, nodes, [j for j, _ in stored], tokens, keywords or {})
                ensure_vector_index(self, conn)
                if then is not None:
                    then(conn)
        except SQLAlchemyError as exc:
            raise self.describe_failure(exc) from None
        return removed

    def delete(self, docstore: Any, ref_doc_ids: Sequence[str], then: Optional[Callable[[Any], None]] = None) -> int:
        """Remove documents from every route in one transaction (``then`` as in :meth:`write`)."""
        from sqlalchemy.exc import SQLAlchemyError

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
        from sqlalchemy import text

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

    def _insert(self, conn, vector_store, docstore, documents, nodes, stored, tokens, keywords) -> None:
        from sqlalchemy import text

        if not documents:
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
                for d in documents
            ],
        )
        # Hashes of documents without nodes still make their re-ingestion a no-op.
        kv_rows: List[Tuple[str, str, Any]] = [(d.ref_doc_id, docstore._metadata_collection, {"doc_hash": d.doc_hash}) for d in documents]
        if nodes:
            insert_nodes(conn, vector_store, docstore, nodes, stored, tokens, keywords, kv_rows)
            conn.execute(
                text("UPDATE hiqa_pack SET node_count = node_count + :n, total_length = total_length + :l WHERE id = 1"),
                {"n": len(nodes), "l": sum(len(t) for t in tokens)},
            )
        upsert_kv(conn, f"data_{DOCSTORE_TABLE}", kv_rows)


class _LazyAsyncEngine:
    """Stands in for the asyncpg engine until LlamaIndex's stores first use it, so a
    process that never retrieves asynchronously never opens an asyncpg pool."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store.async_engine, name)
