"""An embedding model wrapper that stores every vector on disk by content hash.

Embedding is the slow part of ingestion on a CPU (about 20 chunks of 256 tokens per second
on 2 cores). Variants of a pipeline that embed the same text (a benchmark's baselines, a
re-ingestion after a crash, two retrievers over one corpus) pay for it once.

>>> from llama_index_hiqa import CachedEmbedding
>>> embed_model = CachedEmbedding.from_defaults()   # packaged MiniLM + ~/.cache store
>>> # Settings.embed_model = embed_model  -- then use LlamaIndex as usual

The store is SQLite (safe for several processes), keyed by
``sha256(model id, "query"/"text", text)``; vectors are float32 blobs. The cache is
disposable and never stops the pack: a damaged file is moved aside and started anew, a
read-only one is only read, one that cannot be opened is bypassed (each with a warning).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr

from llama_index_hiqa.component_dict import PartsRoundTrip
from llama_index_hiqa.models.defaults import portable_model_name, resolve_embed_model
from llama_index_hiqa.models.local_cache import CACHE_DIR_ENV, content_hash, default_cache_dir

__all__ = ["CachedEmbedding", "CACHE_DIR_ENV", "content_hash", "default_cache_dir", "open_cache"]
logger = logging.getLogger(__name__)


def open_cache(path: Path) -> Tuple[Optional[sqlite3.Connection], bool]:
    """The connection to the cache file ``path`` and whether it can be written.

    A cache is disposable, so it degrades instead of failing: a damaged file (not SQLite,
    truncated) is moved aside with a warning and a new one started; a cache that cannot be
    written (read-only folder or file) is used read-only, or bypassed when it cannot even be
    read.

    Args:
        path: the cache's SQLite file.

    Returns:
        ``(connection, writable)``; ``(None, False)`` when the cache is bypassed.
    """
    try:
        return _open_writable(path), True
    except sqlite3.DatabaseError as exc:
        if not isinstance(exc, sqlite3.OperationalError):  # the file is damaged, not refused
            aside = _move_aside(path)
            if aside is not None:
                logger.warning("embedding cache %s was damaged (%s); moved to %s, a new one is started", path, exc, aside)
                with contextlib.suppress(sqlite3.Error, OSError):
                    return _open_writable(path), True
        refused: BaseException = exc
    except OSError as exc:  # the cache folder cannot be created
        refused = exc
    # A WAL database opened read-only still needs its -shm file; on a read-only disk nobody
    # can change the file, so it is opened as immutable (no locking, no -shm).
    for mode in ("mode=ro", "mode=ro&immutable=1"):
        with contextlib.suppress(sqlite3.Error):
            if path.is_file():
                conn = sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True, timeout=60, check_same_thread=False)
                try:
                    conn.execute("SELECT key FROM vectors LIMIT 1").fetchall()
                except sqlite3.Error:
                    conn.close()
                    raise
                logger.warning("embedding cache %s is not writable (%s); it is read, new vectors are not saved", path, refused)
                return conn, False
    logger.warning("embedding cache %s cannot be used (%s); vectors are computed without it", path, refused)
    return None, False


def _open_writable(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=60, check_same_thread=False)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector BLOB NOT NULL)")
        conn.commit()
        conn.execute("SELECT key FROM vectors LIMIT 1").fetchall()
    except BaseException:
        conn.close()
        raise
    return conn


def _move_aside(path: Path) -> Optional[Path]:
    """Rename the damaged cache (and its WAL files) to ``*.damaged-<n>``; None when it cannot be."""
    for n in range(1, 1000):
        aside = path.with_name(f"{path.name}.damaged-{n}")
        if not aside.exists():
            break
    try:
        os.replace(path, aside)
    except OSError:
        return None
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(OSError):
            os.replace(path.with_name(path.name + suffix), aside.with_name(aside.name + suffix))
    return aside


class CachedEmbedding(PartsRoundTrip, BaseEmbedding):
    """Wraps any LlamaIndex embedding model; computes only vectors it has not stored."""

    part_names: ClassVar[Tuple[str, ...]] = ("inner",)  # not serialised: component_dict

    def held_parts(self) -> Dict[str, Any]:
        """The wrapped model (``from_dict(data, inner=...)`` takes it back).

        Returns:
            ``{"inner": the wrapped model}``.
        """
        return {"inner": self._inner}

    cache_path: str = Field(description="SQLite file holding the vectors.")
    model_id: str = Field(description="Identity of the wrapped model, part of every key.")

    _inner: BaseEmbedding = PrivateAttr()
    _conn: Optional[sqlite3.Connection] = PrivateAttr(default=None)  # None: the cache is bypassed
    _writable: bool = PrivateAttr(default=False)
    _lock: threading.Lock = PrivateAttr()
    _earlier_id: Optional[str] = PrivateAttr(default=None)

    def __init__(
        self,
        inner: BaseEmbedding,
        cache_path: Optional[str] = None,
        model_id: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        named = f"{inner.class_name()}:{inner.model_name}"
        model_id = model_id or portable_model_name(named)
        path = Path(cache_path) if cache_path else default_cache_dir() / "embeddings.sqlite"
        kwargs.setdefault("embed_batch_size", inner.embed_batch_size)
        kwargs.setdefault("model_name", inner.model_name)
        super().__init__(cache_path=str(path), model_id=model_id, **kwargs)
        self._inner = inner
        # Caches written before model names were made portable keyed the packaged model by its
        # install path: a miss is looked up under that key too, and found vectors re-filed.
        self._earlier_id = named if named != model_id and model_id == portable_model_name(named) else None
        self._lock = threading.Lock()
        self._conn, self._writable = open_cache(path)

    def __getstate__(self) -> Dict[str, Any]:
        # Pickled as the wrapped model and the cache's settings (an ingestion worker receives
        # it this way): the SQLite connection is opened again where it is unpickled (SQLite is
        # safe for several processes).
        return {"inner": self._inner, "fields": self.model_dump(include={"cache_path", "model_id", "embed_batch_size", "model_name"})}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["inner"], **state["fields"])  # type: ignore[misc]

    @classmethod
    def from_defaults(
        cls,
        embed_model: Optional[BaseEmbedding] = None,
        cache_path: Optional[str] = None,
        backend: Optional[str] = None,
    ) -> "CachedEmbedding":
        """Cache ``embed_model``, or the default model, by content hash.

        Every backend has its own model identity, so their vectors never mix.

        Args:
            embed_model: the model to cache; ``None``: ``Settings.embed_model``, else the packaged
                MiniLM.
            cache_path: the cache file; ``None``: the shared cache under
                ``~/.cache/llama_index_hiqa``.
            backend: backend of the packaged MiniLM (``"torch"``, ``"onnx"``, ``"onnx-int8"``);
                ``None`` for the default.

        Returns:
            The caching embedding model.

        Raises:
            UnknownEmbedBackendError: ``backend`` is unknown.
            OfflineModelError: the packaged model cannot be loaded.
        """
        return cls(resolve_embed_model(embed_model, backend=backend), cache_path=cache_path)

    @classmethod
    def class_name(cls) -> str:
        return "CachedEmbedding"

    @property
    def inner(self) -> BaseEmbedding:
        return self._inner

    # --- storage ------------------------------------------------------------------------
    def _lookup(self, keys: Sequence[str]) -> Dict[str, List[float]]:
        found: Dict[str, List[float]] = {}
        with self._lock, self._degrading():
            if self._conn is None:
                return found
            for start in range(0, len(keys), 500):
                chunk = list(keys[start : start + 500])
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT key, vector FROM vectors WHERE key IN ({marks})", chunk
                )
                for key, blob in rows:
                    found[key] = np.frombuffer(blob, dtype=np.float32).tolist()
        return found

    def _store(self, items: Dict[str, List[float]]) -> None:
        with self._lock, self._degrading():
            if self._conn is None or not self._writable:
                return
            self._conn.executemany(
                "INSERT OR REPLACE INTO vectors (key, vector) VALUES (?, ?)",
                [(k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items.items()],
            )
            self._conn.commit()

    def _cached(self, kind: str, texts: List[str], compute: Callable[[List[str]], List[Embedding]]) -> List[Embedding]:
        keys = [content_hash(self.model_id, kind, t) for t in texts]
        found = self._lookup(keys)
        missing = [i for i, k in enumerate(keys) if k not in found]
        if missing and self._earlier_id is not None:
            earlier = {content_hash(self._earlier_id, kind, texts[i]): keys[i] for i in missing}
            refiled = {earlier[old]: vector for old, vector in self._lookup(list(earlier)).items()}
            if refiled:
                self._store(refiled)
                found.update(refiled)
                missing = [i for i, k in enumerate(keys) if k not in found]
        if missing:
            # Duplicate texts inside one batch are computed once.
            unique = list(dict.fromkeys(texts[i] for i in missing))
            vectors = compute(unique)
            new = {content_hash(self.model_id, kind, t): v for t, v in zip(unique, vectors)}
            self._store(new)
            found.update(new)
        return [found[k] for k in keys]

    def cached_count(self) -> int:
        with self._lock:
            return 0 if self._conn is None else self._conn.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]

    @contextlib.contextmanager
    def _degrading(self) -> Iterator[None]:
        """A cache that fails while in use (damaged pages deep in the file, the disk filling
        up, the folder turning read-only) is bypassed with a warning: vectors are computed
        instead of read, never an error (the caller holds ``_lock``)."""
        try:
            yield
        except sqlite3.Error as exc:
            logger.warning(
                "embedding cache %s failed (%s); it is bypassed for this process (delete the file "
                "to rebuild it)", self.cache_path, exc,
            )
            with contextlib.suppress(sqlite3.Error):
                if self._conn is not None:
                    self._conn.close()
            self._conn, self._writable = None, False

    # --- BaseEmbedding ----------------------------------------------------------------
    def _get_query_embedding(self, query: str) -> Embedding:
        return self._cached("query", [query], lambda qs: [self._inner.get_query_embedding(q) for q in qs])[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: List[str]) -> List[Embedding]:
        return self._cached("text", texts, self._inner.get_text_embedding_batch)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embedding(text)
