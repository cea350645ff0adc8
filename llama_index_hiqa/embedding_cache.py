"""An embedding model wrapper that stores every vector on disk by content hash.

Embedding is the slow part of ingestion on a CPU (about 20 chunks of 256 tokens per second
on 2 cores). Variants of a pipeline that embed the same text (a benchmark's baselines, a
re-ingestion after a crash, two retrievers over one corpus) pay for it once.

>>> from llama_index_hiqa import CachedEmbedding
>>> embed_model = CachedEmbedding.from_defaults()   # packaged MiniLM + ~/.cache store
>>> # Settings.embed_model = embed_model  -- then use LlamaIndex as usual

The store is SQLite (safe for several processes), keyed by
``sha256(model id, "query"/"text", text)``; vectors are float32 blobs.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr

from llama_index_hiqa.defaults import resolve_embed_model

CACHE_DIR_ENV = "HIQA_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$HIQA_CACHE_DIR``, else ``~/.cache/llama_index_hiqa``."""
    root = os.environ.get(CACHE_DIR_ENV)
    return Path(root) if root else Path.home() / ".cache" / "llama_index_hiqa"


def content_hash(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()


class CachedEmbedding(BaseEmbedding):
    """Wraps any LlamaIndex embedding model; computes only vectors it has not stored."""

    cache_path: str = Field(description="SQLite file holding the vectors.")
    model_id: str = Field(description="Identity of the wrapped model, part of every key.")

    _inner: BaseEmbedding = PrivateAttr()
    _conn: sqlite3.Connection = PrivateAttr()
    _lock: threading.Lock = PrivateAttr()

    def __init__(
        self,
        inner: BaseEmbedding,
        cache_path: Optional[str] = None,
        model_id: Optional[str] = None,
        **kwargs,
    ) -> None:
        model_id = model_id or f"{inner.class_name()}:{inner.model_name}"
        path = Path(cache_path) if cache_path else default_cache_dir() / "embeddings.sqlite"
        path.parent.mkdir(parents=True, exist_ok=True)
        kwargs.setdefault("embed_batch_size", inner.embed_batch_size)
        kwargs.setdefault("model_name", inner.model_name)
        super().__init__(cache_path=str(path), model_id=model_id, **kwargs)
        self._inner = inner
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(path), timeout=60, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector BLOB NOT NULL)"
        )
        self._conn.commit()

    @classmethod
    def from_defaults(
        cls,
        embed_model: Optional[BaseEmbedding] = None,
        cache_path: Optional[str] = None,
        backend: Optional[str] = None,
    ) -> "CachedEmbedding":
        """Cache ``embed_model`` (default: ``Settings.embed_model``, else the packaged MiniLM
        on ``backend``: ``"torch"``, ``"onnx"``, ``"onnx-int8"``, None for the default).
        Every backend has its own model identity, so their vectors never mix."""
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
        with self._lock:
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
        with self._lock:
            self._conn.executemany(
                "INSERT OR REPLACE INTO vectors (key, vector) VALUES (?, ?)",
                [(k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items.items()],
            )
            self._conn.commit()

    def _cached(self, kind: str, texts: List[str], compute) -> List[Embedding]:
        keys = [content_hash(self.model_id, kind, t) for t in texts]
        found = self._lookup(keys)
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
            return self._conn.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]

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
