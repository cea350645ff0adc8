"""The vector stores LlamaIndex apps use, each opened the way its integration documents, all
embedded (no server to install): one factory for the conformance suite and bench_stores.py.

``open_store(kind, folder, dim)`` opens (or re-opens, in another process) the store kept in
``folder``; ``close_store`` releases its files so that another process may open them (Qdrant's
local mode and DuckDB hold a lock while open).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Dict, Optional

# The pack's own default first, then LlamaIndex's, then the integrations (each an extra).
STORE_KINDS = ("matrix", "memmap", "simple", "chroma", "qdrant", "lancedb", "milvus", "duckdb", "faiss", "pgvector")

# kind -> module that must import for the kind to run.
_REQUIRES: Dict[str, str] = {
    "chroma": "llama_index.vector_stores.chroma",
    "qdrant": "llama_index.vector_stores.qdrant",
    "lancedb": "llama_index.vector_stores.lancedb",
    "milvus": "llama_index.vector_stores.milvus",
    "duckdb": "llama_index.vector_stores.duckdb",
    "faiss": "llama_index.vector_stores.faiss",
    "pgvector": "llama_index.vector_stores.postgres",
}

COLLECTION = "hiqa_conformance"

# Stores held in the process's memory: the pack saves them in its snapshot and loads them
# from there; the others are opened again where they are and passed as ``vector_store=``.
IN_MEMORY_KINDS = ("matrix", "simple", "faiss")


def available(kind: str) -> bool:
    module = _REQUIRES.get(kind)
    if module is None:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def open_store(kind: str, folder: Path, dim: int, pg_url: Optional[str] = None) -> Any:
    """The store ``kind`` kept in ``folder`` (created on first use)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "matrix":
        from llama_index_hiqa.storage.vector_store import MatrixVectorStore

        return MatrixVectorStore()
    if kind == "memmap":
        from llama_index_hiqa.storage.memmap_vectors import MemmapVectorStore

        return MemmapVectorStore.open(str(folder / "memmap"))
    if kind == "simple":
        from llama_index.core.vector_stores import SimpleVectorStore

        return SimpleVectorStore()
    if kind == "chroma":
        import chromadb
        from llama_index.vector_stores.chroma import ChromaVectorStore

        client = chromadb.PersistentClient(path=str(folder / "chroma"))
        return ChromaVectorStore(chroma_collection=client.get_or_create_collection(COLLECTION))
    if kind == "qdrant":
        import qdrant_client
        from llama_index.vector_stores.qdrant import QdrantVectorStore

        return QdrantVectorStore(client=qdrant_client.QdrantClient(path=str(folder / "qdrant")), collection_name=COLLECTION)
    if kind == "lancedb":
        from llama_index.vector_stores.lancedb import LanceDBVectorStore

        return LanceDBVectorStore(uri=str(folder / "lancedb"), table_name=COLLECTION)
    if kind == "milvus":
        from llama_index.vector_stores.milvus import MilvusVectorStore

        store = MilvusVectorStore(uri=str(folder / "milvus.db"), collection_name=COLLECTION, dim=dim)
        # Milvus Lite opens an existing collection released; searching needs it loaded.
        store.client.load_collection(COLLECTION)
        return store
    if kind == "duckdb":
        return _duckdb_store(folder)
    if kind == "faiss":
        import faiss
        from llama_index.vector_stores.faiss import FaissVectorStore

        # FAISS keeps no text: the docstore holds the nodes, as in LlamaIndex's FAISS guide.
        return FaissVectorStore(faiss_index=faiss.IndexFlatIP(dim))
    if kind == "pgvector":
        from llama_index.vector_stores.postgres import PGVectorStore

        from llama_index_hiqa.storage.pg_connection import _driver_url

        if pg_url is None:
            raise ValueError("pgvector needs the test server's URL")
        return PGVectorStore.from_params(
            connection_string=_driver_url(pg_url, "psycopg2"),
            async_connection_string=_driver_url(pg_url, "asyncpg"),
            table_name=COLLECTION, embed_dim=dim,
        )
    raise ValueError(f"unknown store kind {kind!r}; one of {STORE_KINDS}")


def close_store(kind: str, store: Any) -> None:
    """Release the files of ``store`` so another process can open them."""
    if kind == "qdrant":
        store.client.close()
    elif kind == "duckdb":
        # The store keeps one shared connection and a cursor per thread: closing the shared
        # one closes the database file for every cursor.
        store._shared_conn.close()
    elif kind == "milvus":
        # Milvus Lite serves the file from a thread of this process until released.
        from milvus_lite import server_manager_instance

        store.client.close()
        # The store does not keep the path it was opened with (its ``uri`` field keeps the
        # default), so every Milvus Lite file of this process is released: one at a time here.
        server_manager_instance.release_all()


def _duckdb_store(folder: Path) -> Any:
    from llama_index.vector_stores.duckdb import DuckDBVectorStore

    class OfflineDuckDBVectorStore(DuckDBVectorStore):
        """DuckDBVectorStore runs ``INSTALL json`` and ``INSTALL fts`` on every start, which
        download the extensions from DuckDB's own server; these machines reach only the
        package registries. json is built into the duckdb wheel and fts comes from the
        ``duckdb-extension-fts`` wheel (loaded from its file); the table is the integration's
        own (its ``_initialize_table`` without the two INSTALLs)."""

        @classmethod
        def _initialize_table(cls, conn: Any, table_name: str, embed_dim: Optional[int]) -> None:
            import duckdb_extension_fts

            extension = next(Path(duckdb_extension_fts.__file__).parent.rglob("fts.duckdb_extension"))
            conn.execute(f"LOAD '{extension}'")
            conn.begin().execute(
                f"CREATE TABLE IF NOT EXISTS {table_name} (node_id VARCHAR PRIMARY KEY, text TEXT, "
                f"embedding {cls._get_embedding_type(embed_dim)}, metadata_ JSON);"
            ).commit()

    return OfflineDuckDBVectorStore(database_name="hiqa.duckdb", persist_dir=str(folder / "duckdb"))
