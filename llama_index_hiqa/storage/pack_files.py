"""The files of a persisted [`HiQAPack`][llama_index_hiqa.pack.hiqa_pack.HiQAPack], written and checked.

One snapshot folder (see [`llama_index_hiqa.storage.snapshots`][llama_index_hiqa.storage.snapshots]) holds::

    hiqa_pack.json      settings, model identity, documents, and a manifest of every other
                        file with its size and SHA-256 (written last)
    docstore.json       LlamaIndex SimpleDocumentStore: the nodes and the document hashes
    index_store.json    LlamaIndex SimpleIndexStore
    vectors.npz         MatrixVectorStore (or default__vector_store.json for a SimpleVectorStore;
                        nothing for a remote vector store, which persists itself)
    multi_route/        BM25 and critical-keyword indexes (MultiRouteRetriever.persist)
    chunk_graph/        the IIER chunk graph, when enabled

Every read is checked before it is trusted: a file that is missing, truncated or changed since
it was written (manifest), that does not parse, or whose contents disagree with the docstore
(BM25 or keyword ids, vector ids, an embedding dimension that the query model does not give)
raises [`PackStoreError`][llama_index_hiqa.errors.PackStoreError] naming the file and what to do.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, TypeVar

from llama_index.core import StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.index_store import SimpleIndexStore
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_hiqa.errors import HiQAError, PackStoreError
from llama_index_hiqa.storage.vector_store import VECTORS_FILENAME, MatrixVectorStore

CONFIG_FILENAME = "hiqa_pack.json"
DOCSTORE_FILENAME = "docstore.json"
INDEX_STORE_FILENAME = "index_store.json"
SIMPLE_VECTORS_FILENAME = "default__vector_store.json"
FAISS_VECTORS_FILENAME = "faiss_vectors.bin"
MULTI_ROUTE_DIRNAME = "multi_route"
CHUNK_GRAPH_DIRNAME = "chunk_graph"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)  # 1: the files directly in the store folder, no manifest
REBUILD_HINT = "rebuild it with `hiqa ingest DIR --store STORE --rebuild`"

T = TypeVar("T")


# --------------------------------------------------------------------------- writing
def write_index(index: VectorStoreIndex, folder: Path) -> str:
    """Docstore, index store and (local) vector store of ``index``; returns the vector store's
    kind as recorded in the manifest.

    Args:
        index: the index.
        folder: the store's folder.

    Returns:
        ``"matrix"``, ``"simple"``, ``"faiss"`` or ``"external:<class name>"``.
    """
    storage = index.storage_context
    storage.docstore.persist(persist_path=str(folder / DOCSTORE_FILENAME))
    storage.index_store.persist(persist_path=str(folder / INDEX_STORE_FILENAME))
    vector_store = storage.vector_store
    if isinstance(vector_store, MatrixVectorStore):
        vector_store.persist(str(folder / VECTORS_FILENAME))
        return "matrix"
    if isinstance(vector_store, SimpleVectorStore):
        vector_store.persist(persist_path=str(folder / SIMPLE_VECTORS_FILENAME))
        return "simple"
    if type(vector_store).__name__ == "FaissVectorStore":
        # An in-memory FAISS index is a local file like the others: saved in the snapshot.
        vector_store.persist(persist_path=str(folder / FAISS_VECTORS_FILENAME))
        return "faiss"
    return f"external:{vector_store.class_name()}"


def file_manifest(folder: Path) -> Dict[str, Dict[str, Any]]:
    """``{relative path: {"bytes": n, "sha256": hex}}`` of every file under ``folder``.

    Args:
        folder: the store's folder.

    Returns:
        The manifest.
    """
    manifest: Dict[str, Dict[str, Any]] = {}
    for dirpath, _dirs, files in os.walk(folder):
        for name in sorted(files):
            path = Path(dirpath) / name
            manifest[path.relative_to(folder).as_posix()] = {
                "bytes": path.stat().st_size,
                "sha256": _sha256(path),
            }
    return manifest


def write_config(folder: Path, payload: Dict[str, Any]) -> None:
    """``hiqa_pack.json`` with the manifest of everything already in ``folder`` (so last).

    Args:
        folder: the store's folder.
        payload: the pack record (settings, index id, model, format version).
    """
    payload = {"format_version": FORMAT_VERSION, **payload, "files": file_manifest(folder)}
    with open(folder / CONFIG_FILENAME, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())


# --------------------------------------------------------------------------- reading
@dataclass
class StoreFiles:
    """A snapshot folder being read: its settings payload, and every file checked against
    the manifest before it is used."""

    folder: Path
    payload: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, folder: Path) -> "StoreFiles":
        """The store files of ``folder``, their manifest checked.

        Args:
            folder: the store's folder.

        Returns:
            The store files.

        Raises:
            PackStoreError: when ``hiqa_pack.json`` is missing, damaged, of a format this release
                does not read or lacks an entry, or a file differs from the manifest.
        """
        config_file = folder / CONFIG_FILENAME
        if not config_file.is_file():
            raise PackStoreError(config_file, f"is missing; {REBUILD_HINT}")
        try:
            payload = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PackStoreError(config_file, f"is damaged or truncated ({exc}); {REBUILD_HINT}") from exc
        if not isinstance(payload, dict) or payload.get("format_version") not in READABLE_VERSIONS:
            version = payload.get("format_version") if isinstance(payload, dict) else None
            raise PackStoreError(
                config_file, f"store format {version!r} is not one of {READABLE_VERSIONS}; {REBUILD_HINT}"
            )
        for key in ("config", "index_id"):
            if key not in payload:
                raise PackStoreError(config_file, f"has no {key!r} entry; {REBUILD_HINT}")
        files = cls(folder, payload)
        files.check_manifest()
        return files

    @property
    def config_file(self) -> Path:
        return self.folder / CONFIG_FILENAME

    def check_manifest(self) -> None:
        """Every file the manifest names exists with its size and hash (format 2)."""
        for relative, facts in (self.payload.get("files") or {}).items():
            path = self.folder / relative
            if not path.is_file():
                raise PackStoreError(path, f"is missing from the store; {REBUILD_HINT}")
            size = path.stat().st_size
            if size != facts.get("bytes"):
                raise PackStoreError(
                    path, f"is {size} bytes, the store wrote {facts.get('bytes')} (truncated?); {REBUILD_HINT}"
                )
            if facts.get("sha256") and _sha256(path) != facts["sha256"]:
                raise PackStoreError(path, f"changed since the store was written (checksum); {REBUILD_HINT}")

    def read(self, relative: str, loader: Callable[[Path], T], what: str) -> T:
        """``loader(path)``, with any failure turned into a PackStoreError naming the file.

        Args:
            relative: the file's path below the folder.
            loader: reads the file.
            what: what the file holds, for the message.

        Returns:
            What ``loader`` returned.

        Raises:
            PackStoreError: when the file is missing or cannot be read.
        """
        path = self.folder / relative
        if not path.exists():
            raise PackStoreError(path, f"{what} is missing; {REBUILD_HINT}")
        try:
            return loader(path)
        except PackStoreError:
            raise
        except (HiQAError, OSError, ValueError, KeyError, TypeError, AttributeError, EOFError) as exc:
            # json.JSONDecodeError and pydantic's ValidationError are ValueErrors
            raise PackStoreError(path, f"{what} cannot be read ({exc.__class__.__name__}: {exc}); {REBUILD_HINT}") from exc

    def load_index(
        self, embed_model: BaseEmbedding, vector_store: Optional[BasePydanticVectorStore] = None
    ) -> VectorStoreIndex:
        """The stored ``VectorStoreIndex``, its vectors checked against ``embed_model``.

        Args:
            embed_model: the embedding model it was built with.
            vector_store: the remote vector store it was built on (``None``: the local one).

        Returns:
            The index.

        Raises:
            PackStoreError: when a file cannot be read, a remote store is not given, the index
                store holds no usable index, or the vectors do not match the model.
        """
        docstore = self.read(DOCSTORE_FILENAME, lambda p: SimpleDocumentStore.from_persist_path(str(p)), "the docstore")
        index_store = self.read(
            INDEX_STORE_FILENAME, lambda p: SimpleIndexStore.from_persist_path(str(p)), "the index store"
        )
        kind = self.payload.get("vector_store", "simple")
        if vector_store is None:
            if kind == "matrix":
                vector_store = self.read(VECTORS_FILENAME, lambda p: MatrixVectorStore.from_persist_path(str(p)), "the vectors")
            elif kind == "faiss":
                vector_store = self.read(FAISS_VECTORS_FILENAME, _load_faiss, "the FAISS index")
            elif kind == "simple":
                vector_store = self.read(
                    SIMPLE_VECTORS_FILENAME, lambda p: SimpleVectorStore.from_persist_path(str(p)), "the vectors"
                )
            else:
                raise PackStoreError(
                    self.config_file, f"was built on a remote vector store ({kind}): pass vector_store= to load it"
                )
        storage = StorageContext.from_defaults(docstore=docstore, index_store=index_store, vector_store=vector_store)
        try:
            # store_nodes_override as at build: over a store that keeps the text (Chroma,
            # Qdrant, ...) the docstore must go on receiving the nodes the routes read.
            index = load_index_from_storage(
                storage, index_id=self.payload.get("index_id"), embed_model=embed_model, store_nodes_override=True
            )
        except (ValueError, KeyError) as exc:
            raise PackStoreError(self.folder / INDEX_STORE_FILENAME, f"holds no usable index ({exc}); {REBUILD_HINT}") from exc
        self._check_vectors(index, embed_model)
        return index

    def _check_vectors(self, index: VectorStoreIndex, embed_model: BaseEmbedding) -> None:
        vector_store = index.vector_store
        if not isinstance(vector_store, MatrixVectorStore):
            return
        path = self.folder / VECTORS_FILENAME
        node_ids = docstore_node_ids(index.docstore)
        if set(vector_store.node_ids) != node_ids:
            missing = len(node_ids - set(vector_store.node_ids))
            extra = len(set(vector_store.node_ids) - node_ids)
            raise PackStoreError(
                path, f"does not match the docstore ({missing} node(s) without a vector, {extra} vector(s) "
                      f"without a node); {REBUILD_HINT}"
            )
        if vector_store.count and embed_model is not None:
            query_dim = len(embed_model.get_query_embedding("dimension check"))
            if query_dim != vector_store.dim:
                raise PackStoreError(
                    path,
                    f"holds vectors of dimension {vector_store.dim} but the embedding model "
                    f"{self.payload.get('embed_model', '?')!r} it was built with is not the one given "
                    f"(dimension {query_dim}): load with that model, or {REBUILD_HINT}",
                )

    def check_node_ids(self, relative: str, ids: Iterable[str], node_ids: Iterable[str], what: str, complete: bool) -> None:
        """The ids an index file names are the docstore's (all of them when ``complete``).

        Args:
            relative: the index file's path below the folder.
            ids: the node ids it names.
            node_ids: the docstore's node ids.
            what: what the file holds, for the message.
            complete: the file must name every node.

        Raises:
            PackStoreError: when the file names an unknown node or, with ``complete``, misses one.
        """
        ids, node_ids = set(ids), set(node_ids)
        unknown = ids - node_ids
        missing = (node_ids - ids) if complete else set()
        if unknown or missing:
            raise PackStoreError(
                self.folder / relative,
                f"{what} does not match the docstore ({len(unknown)} unknown node id(s), "
                f"{len(missing)} node(s) not indexed); {REBUILD_HINT}",
            )


def docstore_node_ids(docstore: Any) -> Set[str]:
    """Every node id the docstore holds, from its per-document records (no node is parsed).

    Args:
        docstore: the docstore.

    Returns:
        The node ids.
    """
    infos = docstore.get_all_ref_doc_info() or {}
    return {node_id for info in infos.values() for node_id in info.node_ids}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


__all__: List[str] = [
    "CONFIG_FILENAME",
    "FORMAT_VERSION",
    "StoreFiles",
    "file_manifest",
    "write_config",
    "write_index",
]


def _load_faiss(path: Path) -> BasePydanticVectorStore:
    try:
        # FAISS: the [faiss] extra.
        from llama_index.vector_stores.faiss import FaissVectorStore
    except ImportError as exc:
        raise PackStoreError(path, "was built on FAISS: pip install 'llama-index-hiqa[faiss]' to load it") from exc
    return FaissVectorStore.from_persist_path(str(path))
