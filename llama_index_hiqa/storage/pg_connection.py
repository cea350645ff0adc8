"""The connection to a PostgreSQL store: pools, session settings, timeouts and failures a user can act on.

`PostgresConnection` holds SQLAlchemy pools per process: one for writes and LlamaIndex's
stores and one for the routes' synchronous reads (psycopg2, the driver LlamaIndex's Postgres
stores are written for; autocommit, one round trip a statement), and one for asynchronous
retrieval (asyncpg), with connect and statement timeouts; every failure a user can cause (a
malformed URL, an unreachable server, wrong credentials, a missing database or pgvector
extension) is raised as [`PackStoreError`][llama_index_hiqa.errors.PackStoreError] naming the URL with its
password masked. [`PostgresStore`][llama_index_hiqa.storage.postgres.PostgresStore] is built on it.
"""

from __future__ import annotations

import asyncio
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Tuple

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import create_async_engine

from llama_index_hiqa.errors import PackStoreError
from llama_index_hiqa.storage.pg_schema import DOCSTORE_TABLE, INDEX_STORE_TABLE, SCHEMA_LOCK, VECTOR_TABLE

URL_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://", "postgresql+asyncpg://")


def is_postgres_url(store: Any) -> bool:
    """Whether ``store`` names a PostgreSQL database rather than a folder.

    Args:
        store: A ``store`` argument.

    Returns:
        ``True`` for a ``postgresql://`` URL.
    """
    return isinstance(store, str) and store.lower().startswith(URL_SCHEMES)


def mask_url(url: Any) -> str:
    """The URL with its password replaced by ``***`` (for every message and log line).

    Args:
        url: A database URL.

    Returns:
        The masked URL.
    """
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
    concurrent_routes: bool = Field(
        default=True,
        description="Ask a question's three routes (vector, BM25, keywords) in a statement each, "
        "at once on pooled connections (the server answers them in processes of their own: a "
        "question waits for the slowest route, not the sum); False: in one statement on one "
        "connection (the same rows; a third of the connections when many questions run at once).",
    )
    index_build_memory_mb: int = Field(
        default=3072, ge=64,
        description="maintenance_work_mem of the session that builds the HNSW index after a bulk "
        "load: pgvector builds fast while the graph fits in it (about 2.2 KB a 384-dimension "
        "vector), much slower past it.",
    )


def _driver_url(url: str, driver: str) -> str:
    return re.sub(r"^(postgresql|postgres)(\+\w+)?://", f"postgresql+{driver}://", url, flags=re.I)


def _url_without_options(url: str, driver: str) -> Any:
    """The URL for ``driver`` without ``options`` (passed as session settings instead:
    asyncpg takes no ``options`` argument)."""
    return make_url(_driver_url(url, driver)).difference_update_query(["options"])


class PostgresConnection:
    """The pools and session settings of one database URL, and its failures as one line each.

    Args:
        url: A ``postgresql://`` URL (its password is never shown: see [`mask_url`][llama_index_hiqa.storage.pg_connection.mask_url]).
        settings: Pools, timeouts and HNSW settings.

    Raises:
        PackStoreError: ``url`` is not a valid PostgreSQL URL.
    """

    def __init__(self, url: str, settings: Optional[PostgresStoreSettings] = None) -> None:
        if not is_postgres_url(url):
            raise PackStoreError(mask_url(url), f"is not a PostgreSQL URL (expected {URL_SCHEMES[0]}USER@HOST/DATABASE)")
        self.url = url
        self.masked_url = mask_url(url)
        self.settings = settings or PostgresStoreSettings()
        self._engine: Any = None
        self._read_engine: Any = None
        self._async_engine: Any = None
        self._statement_threads: Optional[ThreadPoolExecutor] = None
        self._statement_threads_lock = threading.Lock()
        self._password = self._url_password(url)

    # -- connections ---------------------------------------------------------------------
    def _url_password(self, url: str) -> Optional[str]:
        try:
            return make_url(_driver_url(url, "psycopg2")).password
        except (ArgumentError, ValueError) as exc:
            raise PackStoreError(self.masked_url, f"is not a valid PostgreSQL URL ({exc})") from None

    def error(self, reason: str) -> PackStoreError:
        """A PackStoreError about this database, on one line (``reason`` holds no password:
        driver messages pass through [`_scrub`][llama_index_hiqa.storage.pg_connection.PostgresConnection._scrub] first).

        Args:
            reason: What is wrong.

        Returns:
            The error, naming the masked URL.
        """
        return PackStoreError(self.masked_url, " ".join(str(reason).split()))

    def _scrub(self, message: str) -> str:
        """A driver's message with any URL's password and this URL's password masked."""
        text = mask_url(message)
        if self._password:
            text = text.replace(str(self._password), "***")
        return text

    @property
    def engine(self) -> Any:
        """The pool of writes and LlamaIndex's stores (psycopg2, a ping before each checkout)."""
        if self._engine is None:
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

    @property
    def statement_threads(self) -> ThreadPoolExecutor:
        """The threads that send a question's statements at once, shared by every question
        of this process (started on first use, stopped by `dispose`); as many as the read
        pool's connections, so questions asked from several threads do not wait on each
        other's statements before a connection is free."""
        with self._statement_threads_lock:
            if self._statement_threads is None:
                s = self.settings
                self._statement_threads = ThreadPoolExecutor(
                    max_workers=s.pool_size + s.max_overflow, thread_name_prefix="hiqa-pg-statement"
                )
            return self._statement_threads

    def _read(self, run: Callable[[Any], Any]) -> Any:
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
        """A driver exception as one line a user can act on.

        Args:
            exc: The driver's exception.

        Returns:
            The error, naming the masked URL.
        """
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

    def connect(self) -> "PostgresConnection":
        """Open the pool and check the server: reachable, credentials, pgvector.

        Returns:
            This connection.

        Raises:
            PackStoreError: The server cannot be reached or refuses, or pgvector is missing and
                cannot be created.
        """
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
        """Close the pools and stop the statement threads (a later statement opens them again)."""
        with self._statement_threads_lock:
            threads, self._statement_threads = self._statement_threads, None
        if threads is not None:
            threads.shutdown(wait=True)
        for engine in (self._engine, self._read_engine):
            if engine is not None:
                engine.dispose()
        self._engine = self._read_engine = None
        # The asyncpg pool belongs to its event loop; dropping the reference closes it with it.
        self._async_engine = None

    def scalar(self, sql: str, **params: Any) -> Any:
        """The first column of the first row of one read statement.

        Args:
            sql: The statement, with ``:name`` parameters.
            **params: The parameters.

        Returns:
            The value (``None`` without a row).
        """
        return self._read(lambda conn: conn.execute(text(sql), params).scalar())

    def rows(self, sql: str, _settings: Optional[Dict[str, str]] = None, **params: Any) -> List[Tuple[Any, ...]]:
        """The rows of one statement.

        Args:
            sql: The statement, with ``:name`` parameters.
            _settings: Session settings for this statement alone (in a transaction of its own).
            **params: The parameters.

        Returns:
            The rows, as tuples.
        """
        if not _settings:
            return self._read(lambda conn: [tuple(r) for r in conn.execute(text(sql), params)])
        with self.engine.connect() as conn:
            for name, value in _settings.items():
                conn.execute(text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})
            return [tuple(r) for r in conn.execute(text(sql), params)]

    async def arows(self, sql: str, _settings: Optional[Dict[str, str]] = None, **params: Any) -> List[Tuple[Any, ...]]:
        """`rows` on the asyncpg pool of the running event loop.

        Args:
            sql: The statement, with ``:name`` parameters.
            _settings: Session settings for this statement alone.
            **params: The parameters.

        Returns:
            The rows, as tuples.
        """
        async with self.async_engine.connect() as conn:
            for name, value in (_settings or {}).items():
                await conn.execute(text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})
            result = await conn.execute(text(sql), params)
            return [tuple(r) for r in result]


class _LazyAsyncEngine:
    """Stands in for the asyncpg engine until LlamaIndex's stores first use it, so a
    process that never retrieves asynchronously never opens an asyncpg pool."""

    def __init__(self, store: PostgresConnection) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store.async_engine, name)


# --------------------------------------------------------------------------- LlamaIndex's stores over the pools
# setup=True only when the pack is created: a query process writes nothing, so it also
# runs against a read-only replica.
def _hnsw(connection: PostgresConnection) -> Dict[str, Any]:
    s = connection.settings
    return {
        "hnsw_m": s.hnsw_m, "hnsw_ef_construction": s.hnsw_ef_construction,
        "hnsw_ef_search": s.hnsw_ef_search, "hnsw_dist_method": "vector_cosine_ops",
    }


def vector_store(connection: PostgresConnection, embed_dim: int, setup: bool = False) -> Any:
    """LlamaIndex's ``PGVectorStore`` (HNSW, cosine) over the write pool.

    Args:
        connection: The database's connection.
        embed_dim: The vectors' dimension.
        setup: Create its table (only when the pack is created).

    Returns:
        The vector store.
    """
    # LlamaIndex's PostgreSQL integrations: the [postgres] extra.
    from llama_index.vector_stores.postgres import PGVectorStore

    store = PGVectorStore(
        # The engines below are what connects; the strings are only kept (and shown in the
        # stores' repr), so they carry no password.
        connection_string=mask_url(_driver_url(connection.url, "psycopg2")),
        async_connection_string=mask_url(_driver_url(connection.url, "asyncpg")),
        table_name=VECTOR_TABLE, embed_dim=embed_dim, hnsw_kwargs=_hnsw(connection), use_jsonb=True,
        engine=connection.engine, async_engine=_LazyAsyncEngine(connection), initialization_fail_on_error=True,
        perform_setup=setup,
    )
    return store


def kvstore(connection: PostgresConnection, table: str, setup: bool = False) -> Any:
    """LlamaIndex's ``PostgresKVStore`` of ``table`` over the write pool.

    Args:
        connection: The database's connection.
        table: The table name (LlamaIndex prefixes ``data_``).
        setup: Create the table.

    Returns:
        The key-value store.
    """
    # LlamaIndex's PostgreSQL integrations: the [postgres] extra.
    from llama_index.storage.kvstore.postgres import PostgresKVStore

    return PostgresKVStore(
        table_name=table, connection_string=mask_url(_driver_url(connection.url, "psycopg2")),
        async_connection_string=mask_url(_driver_url(connection.url, "asyncpg")),
        engine=connection.engine, async_engine=_LazyAsyncEngine(connection), use_jsonb=True, perform_setup=setup,
    )


def docstore(connection: PostgresConnection) -> Any:
    """LlamaIndex's ``PostgresDocumentStore`` over the write pool.

    Args:
        connection: The database's connection.

    Returns:
        The docstore.
    """
    # LlamaIndex's PostgreSQL integrations: the [postgres] extra.
    from llama_index.storage.docstore.postgres import PostgresDocumentStore

    return PostgresDocumentStore(kvstore(connection, DOCSTORE_TABLE))


def index_store(connection: PostgresConnection) -> Any:
    """LlamaIndex's ``PostgresIndexStore`` over the write pool.

    Args:
        connection: The database's connection.

    Returns:
        The index store.
    """
    # LlamaIndex's PostgreSQL integrations: the [postgres] extra.
    from llama_index.storage.index_store.postgres import PostgresIndexStore

    return PostgresIndexStore(kvstore(connection, INDEX_STORE_TABLE))


__all__ = [
    "URL_SCHEMES", "PostgresConnection", "PostgresStoreSettings", "docstore", "index_store", "is_postgres_url",
    "kvstore", "mask_url", "vector_store",
]
