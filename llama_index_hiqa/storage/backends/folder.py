"""The folder store: the collection in memory, saved as crash-safe snapshots of a folder.

[`FolderBackend`][llama_index_hiqa.storage.backends.folder.FolderBackend] is the store of a pack built in memory (any LlamaIndex vector store, the
pack's [`MatrixVectorStore`][llama_index_hiqa.storage.vector_store.MatrixVectorStore] by default) and of ``HiQAPack.load(folder)``.
A snapshot holds the docstore and vector store (``pack_files.write_index``), the BM25 and keyword
indexes (``MultiRouteRetriever.persist``), the chunk graph when there is one and the pack's
settings and ingestion state (``hiqa_pack.json``, the one place the settings are read back
from); figure files live beside the snapshots, shared by all of them. Writing goes through
``snapshots.write_snapshot``, so a process killed at any instant leaves the previous snapshot
the one that loads; reading checks every file before anything is built on it
(``pack_files.StoreFiles``) and names the one that is missing, truncated or inconsistent in a
[`PackStoreError`][llama_index_hiqa.errors.PackStoreError].
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Dict, List, Mapping, Optional, Sequence, Tuple

from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, Document
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_hiqa import schema
from llama_index_hiqa.errors import PackStoreError, VectorStoreFeatureError
from llama_index_hiqa.figures import FIGURES_DIRNAME, save_figures
from llama_index_hiqa.indexes.keyword_index import KeywordIndex
from llama_index_hiqa.pack.config import (
    HiQAPackSettings,
    graph_retriever_settings,
    model_identity,
    same_model,
)
from llama_index_hiqa.retrievers.bm25_route import BM25Route
from llama_index_hiqa.retrievers.multi_route import MultiRouteRetriever
from llama_index_hiqa.retrievers.route_parts import BM25_DIRNAME, persist_indexes
from llama_index_hiqa.settings import updated
from llama_index_hiqa.storage import pack_files
from llama_index_hiqa.storage.backends.base import (
    Resolvers, RouteCache, Routes, StoreBackend, copied_batches,
)
from llama_index_hiqa.storage.backends.embedded import EmbeddedBackend
from llama_index_hiqa.storage.backends.heading_vectors import HeadingVectors
from llama_index_hiqa.storage.bulk_insert import insert_nodes
from llama_index_hiqa.storage.embedded import is_embedded_store
from llama_index_hiqa.storage.os_boundary import check_store_writable, os_errors
from llama_index_hiqa.storage.snapshots import (
    _pointer_target,
    check_store_folder,
    is_snapshot_name,
    is_snapshot_store,
    snapshot_for_reading,
    snapshot_name,
    write_snapshot,
    writer_lock,
)
from llama_index_hiqa.storage.vector_store import MatrixVectorStore
from llama_index_hiqa.storage.vector_store_access import check_nodes_fit, delete_ref_doc, prepare_nodes_for_store
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

if TYPE_CHECKING:
    from llama_index_hiqa.retrievers.chunk_graph import ChunkGraphRetriever

logger = logging.getLogger(__name__)


class FolderBackend:
    """The folder store (see the module docstring): every node in a LlamaIndex index in memory.

    Args:
        index: The index (docstore and vector store) over the nodes.
        config: The pack's settings.
        embed_model: The embedding model of the questions (the index's when ``None``).
        location: The store folder it was loaded from or saved to (``None``: never saved).
        snapshot: The snapshot of ``location`` loaded (a save over another one is a conflict).
        file_stats: ``{ref_doc_id: [size, mtime_ns]}`` of the files read.
        llm: The chunk graph's LLM.
        resolvers: How the keyword extractor is made from the settings.
        heading_vectors: The heading-path vectors the document focus reads (computed at ingestion).
    """

    def __init__(
        self,
        index: VectorStoreIndex,
        config: HiQAPackSettings,
        embed_model: Optional[BaseEmbedding] = None,
        location: Optional[Path] = None,
        snapshot: Optional[str] = None,
        file_stats: Optional[Dict[str, List[int]]] = None,
        llm: Optional[LLM] = None,
        resolvers: Resolvers = Resolvers(),
        heading_vectors: Optional[HeadingVectors] = None,
    ) -> None:
        self.index = index
        self.heading_vectors = heading_vectors if heading_vectors is not None else HeadingVectors()
        self.config = config
        self.embed_model = embed_model or index._embed_model
        self.file_stats: Dict[str, List[int]] = dict(file_stats or {})
        self._location = location
        self._snapshot = snapshot
        self._routes = RouteCache()
        self.llm = llm  # the chunk graph's LLM (the pack sets its own)
        self._resolve = resolvers
        # Kept up to date by each write, so a batch does not rebuild it from every node.
        self._keyword_index: Optional[KeywordIndex] = None
        self._figure_source: Optional[Path] = None  # a copied store, whose figure files are copied

    # -- open ------------------------------------------------------------------------------
    @classmethod
    def create(
        cls, config: HiQAPackSettings, embed_model: Optional[BaseEmbedding] = None,
        vector_store: Optional[BasePydanticVectorStore] = None, llm: Optional[LLM] = None,
        resolvers: Resolvers = Resolvers(), location: Optional[Path] = None,
    ) -> "FolderBackend":
        """A new, empty store in memory (saved by [`save`][llama_index_hiqa.storage.backends.folder.FolderBackend.save]).

        Args:
            config: The pack's settings.
            embed_model: The embedding model (the packaged MiniLM when ``None``).
            vector_store: Any LlamaIndex vector store (a [`MatrixVectorStore`][llama_index_hiqa.storage.vector_store.MatrixVectorStore] when ``None``).
            llm: The chunk graph's LLM.
            resolvers: How the embedding model and keyword extractor are made from the settings.
            location: The folder store it is saved into (checked writable now, before any work);
                ``None``: the folder its first `save` is given.

        Returns:
            The backend.
        """
        if location is not None:
            check_writable(location)
        embed_model = resolvers.embed_model(embed_model, config.embed_backend)
        storage = StorageContext.from_defaults(vector_store=vector_store or MatrixVectorStore())
        # The BM25 and keyword routes and segment integration read the nodes from the
        # docstore, also when the vector store keeps its own copy of the text.
        index = VectorStoreIndex([], storage_context=storage, embed_model=embed_model, store_nodes_override=True)
        backend = cls(index, config, embed_model, llm=llm, resolvers=resolvers)
        backend._location = location
        return backend

    @classmethod
    def open(
        cls, location: Any, settings: HiQAPackSettings, *, embed_model: Optional[BaseEmbedding] = None,
        llm: Optional[LLM] = None, create: bool = False, vector_store: Optional[BasePydanticVectorStore] = None,
        resolvers: Resolvers = Resolvers(),
    ) -> "FolderBackend":
        """The store saved in the folder ``location``, every file checked first.

        Args:
            location: The store folder.
            settings: The fields set on it override the stored ones for this process.
            embed_model: The model the store was built with (the packaged MiniLM when ``None``).
            llm: The chunk graph's LLM.
            create: Unused: a folder store is created by its first [`save`][llama_index_hiqa.storage.backends.folder.FolderBackend.save].
            vector_store: The remote vector store the pack was built on, given again.
            resolvers: How the embedding model and keyword extractor are made from the settings.

        Returns:
            The backend, its routes read from the snapshot.

        Raises:
            PackStoreError: A file is missing, truncated or inconsistent (the error names it).
        """
        files, config = open_folder(Path(location), settings)
        embed_model = resolvers.embed_model(embed_model, config.embed_backend)
        keywords = resolvers.keyword_extractor(config)
        if files.payload.get("embed_model") and not same_model(files.payload["embed_model"], embed_model):
            logger.warning(
                "HiQAPack.load: the store was embedded with %s, queries now use %s",
                files.payload["embed_model"], model_identity(embed_model),
            )
        index = files.load_index(embed_model, vector_store)
        multi_route = _load_multi_route(files, index, config, keywords)
        graph = _load_graph(files, index, config, embed_model, llm, keywords)
        folder_name = Path(files.folder).name
        backend = cls(
            index, config, embed_model, location=Path(location),
            snapshot=folder_name if is_snapshot_name(folder_name) else None,
            file_stats={
                str(doc_id): [int(v) for v in stat]
                for doc_id, stat in (files.payload.get("file_stats") or {}).items()
                if isinstance(stat, list) and len(stat) == 2
            },
            llm=llm, resolvers=resolvers, heading_vectors=HeadingVectors.for_snapshot(files, embed_model),
        )
        backend._keyword_index = multi_route.keyword_index
        backend._routes.put((multi_route, graph))
        return backend

    commits_batches = False  # a batch goes into memory: only a save writes the store

    @property
    def location(self) -> Optional[Path]:
        """The store folder (``None`` until the pack is first saved)."""
        return self._location

    @property
    def address(self) -> Optional[Path]:
        """The store folder, as `HiQAPack.persist` reports it (``None`` until saved)."""
        return self._location

    # -- reads -----------------------------------------------------------------------------
    def documents(self) -> Dict[str, str]:
        """``{schema.DOCUMENT_ID: ref_doc_id}`` from the docstore's per-document records."""
        infos = self.index.docstore.get_all_ref_doc_info() or {}
        return {str(info.metadata.get(schema.DOCUMENT_ID) or ref_id): ref_id for ref_id, info in infos.items()}

    def node_count(self) -> int:
        """The number of nodes, from the docstore's per-document records (no node is parsed)."""
        return len(pack_files.docstore_node_ids(self.index.docstore))

    def document_hash(self, ref_doc_id: str) -> Optional[str]:
        """The docstore's hash of the document.

        Args:
            ref_doc_id: The document's ref doc id.

        Returns:
            The hash, ``None`` when the store holds no such document.
        """
        return self.index.docstore.get_document_hash(ref_doc_id)

    # -- writes ----------------------------------------------------------------------------
    def write_batch(
        self, documents: Sequence[Document], replaced: Sequence[str], nodes: Sequence[BaseNode],
        hashes: Optional[Dict[str, str]] = None, unit: bool = False,
    ) -> int:
        """Index one batch's ``nodes`` in place of the documents ``replaced``.

        Args:
            documents: The batch's documents (their hashes are recorded).
            replaced: Ref doc ids of earlier versions to remove first.
            nodes: The batch's embedded nodes.
            hashes: Document hashes to record instead of the documents' own (a copy).
            unit: The vectors are a store's unit rows (a copy into the pack's own vector store).

        Returns:
            The number of nodes removed.
        """
        prepare_nodes_for_store(self.index.vector_store, nodes)
        check_nodes_fit(self.index.vector_store, nodes)  # before the old versions are removed
        removed = sum(self.remove_document(ref_doc_id) for ref_doc_id in replaced)
        insert_nodes(self.index, nodes, unit=unit)  # linear in the batch (LlamaIndex's is quadratic per document)
        self.heading_vectors.add_nodes(nodes, self.embed_model)
        for doc in documents:
            self.index.docstore.set_document_hash(doc.doc_id, (hashes or {}).get(doc.doc_id, doc.hash))
        if self._keyword_index is not None:
            for node in nodes:
                self._keyword_index.add(node.node_id, schema.get_critical_keywords(node))
        self._routes.clear()
        return removed

    def remove_document(self, ref_doc_id: str) -> int:
        """Remove one document's nodes from the index and the keyword postings.

        Args:
            ref_doc_id: The document's ref doc id.

        Returns:
            The number of nodes removed.

        Raises:
            VectorStoreFeatureError: The vector store cannot delete (nothing was removed).
        """
        info = self.index.docstore.get_ref_doc_info(ref_doc_id)
        node_ids = list(info.node_ids) if info else []
        try:
            delete_ref_doc(self.index, ref_doc_id)
        except NotImplementedError as exc:
            # The vector store refused before anything was deleted (the index deletes from
            # the vector store first): nothing is lost, and the user learns what to change.
            store = type(self.index.vector_store).__name__
            raise VectorStoreFeatureError(
                store=store,
                feature=f"replacing or deleting document {ref_doc_id!r} needs its vectors deleted, and {store} "
                f"cannot delete ({exc})",
                fix="rebuild the pack from the folder, or use a vector store that deletes (the pack's default, "
                "Chroma, Qdrant, LanceDB, Milvus, DuckDB, pgvector)",
            ) from exc
        self.file_stats.pop(ref_doc_id, None)
        if self._keyword_index is not None:
            for node_id in node_ids:
                self._keyword_index.remove(node_id)
        self._routes.clear()
        return len(node_ids)

    def bulk_writes(self) -> ContextManager[Any]:
        """Nothing to prepare: each batch goes into memory."""
        return contextlib.nullcontext()

    def copy_from(self, source: StoreBackend, batch_documents: int = 8) -> None:
        """Copy a built store's nodes and vectors as they are (nothing is parsed or embedded
        again), in the order it holds them, so the copy ranks as it does.

        Args:
            source: The backend of the pack copied (any store whose vector store gives its
                vectors back).
            batch_documents: Documents a batch.
        """
        self._figure_source = source.location
        # Unit rows kept bit for bit by the pack's own vector store (any other normalises).
        unit = isinstance(self.index.vector_store, MatrixVectorStore)
        for documents, nodes, hashes in copied_batches(source, self.file_stats, batch_documents):
            self.write_batch(documents, [], nodes, hashes=hashes, unit=unit)

    # -- routes ----------------------------------------------------------------------------
    def routes(self) -> Routes:
        """The multi-route retriever (BM25 in memory) and the chunk graph over the nodes.

        Returns:
            ``(multi_route, graph)``, the routes read back by [`open`][llama_index_hiqa.storage.backends.folder.FolderBackend.open] until a write.
        """
        return self._routes.get(self._build_routes)

    def _keyword_index_now(self, nodes: Sequence[BaseNode]) -> KeywordIndex:
        if self._keyword_index is None:
            self._keyword_index = KeywordIndex.from_nodes(nodes)
        return self._keyword_index

    def _build_routes(self) -> Routes:
        nodes = list(self.index.docstore.docs.values())
        multi_route = MultiRouteRetriever.from_index(
            self.index, nodes=nodes, docstore=self.index.docstore,
            keyword_extractor=self._resolve.keyword_extractor(self.config),
            keyword_index=self._keyword_index_now(nodes), config=self.config.route_config(),
        )
        graph = self._build_graph() if self.config.use_chunk_graph and nodes else None
        return multi_route, graph

    def _write_routes(self, folder: Path) -> Optional[BaseRetriever]:
        """Write the BM25 and keyword indexes (the retriever's when it is built, else the
        indexes alone: a save builds no retriever) and return the chunk graph to save."""
        current = self._routes.current
        if current is not None:
            current[0].persist(folder)
            return current[1]
        config = self.config.route_config()
        nodes = list(self.index.docstore.docs.values())
        bm25 = BM25Route.build(nodes, None, config.bm25_language) if config.use_bm25 and nodes else None
        persist_indexes(folder, bm25, self._keyword_index_now(nodes), config, self._resolve.keyword_extractor(self.config))
        return self._build_graph() if self.config.use_chunk_graph and nodes else None

    def _build_graph(self) -> BaseRetriever:
        # Imported here: the chunk graph costs 0.25 s over an import of the pack (measured) and
        # only a pack with use_chunk_graph builds one.
        from llama_index_hiqa.retrievers.chunk_graph import ChunkGraphRetriever

        settings = self.config.chunk_graph
        return ChunkGraphRetriever.from_index(
            self.index, embed_model=self.embed_model, llm=self.llm,
            keyword_fn=self._resolve.keyword_extractor(self.config).extract_query,
            graph_settings=settings.graph.model_dump(), show_progress=self.config.show_progress,
            **settings.search.model_dump(),
        )

    # -- save ------------------------------------------------------------------------------
    def save(self, payload: Mapping[str, Any], location: Any = None) -> StoreBackend:
        """Save everything into a new snapshot of the store folder and switch to it atomically;
        a pack never saved, whose settings ask for the embedded store
        (``HiQAPackSettings.new_store_format``), is copied into a new embedded store instead.

        Args:
            payload: The pack's settings and ingestion state (written once, in ``hiqa_pack.json``).
            location: The store folder (``None``: the one it was loaded from or saved to).

        Returns:
            The backend holding the saved store: this one, or the embedded store written.

        Raises:
            StoreConflictError: Another writer saved over the snapshot this pack loaded.
            PathAccessError: The folder cannot be written (the previous snapshot stays current).
            PackStoreError: The embedded store is asked for in a folder holding a store already.
        """
        root = Path(location) if location is not None else self._location
        if root is None:
            raise ValueError("this pack was never saved: pass the folder to save it to")
        own_vectors = not isinstance(self.index.vector_store, MatrixVectorStore)
        if self._location is None and self.config.new_store_format(own_vectors) == "embedded":
            return self._save_embedded(payload, root)
        # Saving over the store this pack was loaded from: it must still be the snapshot loaded.
        same = self._location is not None and os.path.realpath(self._location) == os.path.realpath(root)
        self._snapshot = write_pack(
            root, index=self.index, write_routes=self._write_routes, payload=payload,
            previous_store=self._figure_source if self._figure_source is not None else self._location, expected_snapshot=self._snapshot if same else None,
            heading_vectors=self.heading_vectors,
        )
        self._location = root
        return self

    def _save_embedded(self, payload: Mapping[str, Any], root: Path) -> StoreBackend:
        """The nodes and vectors copied as they are into a new embedded store at ``root``."""
        if is_embedded_store(root) or holds_folder_store(root):
            raise PackStoreError(
                root, "holds a store already: load it (HiQAPack.load) and add documents to it, or save to a new folder"
            )
        target = EmbeddedBackend.open(
            root, updated(self.config, store_format="embedded"), embed_model=self.embed_model,
            llm=self.llm, create=True, resolvers=self._resolve,
        )
        target.copy_from(self)
        return target.save(payload)

    def close(self) -> None:
        """Nothing to release: the folder is read whole at [`open`][llama_index_hiqa.storage.backends.folder.FolderBackend.open] and written whole by [`save`][llama_index_hiqa.storage.backends.folder.FolderBackend.save]."""


# --------------------------------------------------------------------------- the files
def write_pack(
    root: Path,
    *,
    index: VectorStoreIndex,
    write_routes: Callable[[Path], Any],
    payload: Mapping[str, Any],
    previous_store: Optional[Path] = None,
    expected_snapshot: Optional[str] = None,
    heading_vectors: Optional[HeadingVectors] = None,
) -> str:
    """A new snapshot of ``root`` holding ``index``, the route indexes and the chunk graph
    (``write_routes``) and ``payload`` (the pack's configuration and facts, with the vector store's
    kind added), switched to atomically; returns its name. Figures already saved in
    ``previous_store`` (a pack loaded from another folder) are copied from there.

    ``expected_snapshot``: the snapshot the pack was loaded from; another one current now is a
    [`StoreConflictError`][llama_index_hiqa.errors.StoreConflictError]. An ``OSError`` (read-only folder,
    full disk) leaves the previous snapshot current and is raised as a
    [`PathAccessError`][llama_index_hiqa.errors.PathAccessError] naming the path.

    Args:
        root: The store folder.
        index: The index saved (docstore and vector store).
        write_routes: Writes the BM25 and keyword indexes into the folder it is given and
            returns the chunk-graph retriever to save (``None``: none).
        payload: The pack's settings and ingestion state.
        previous_store: The store folder the pack was loaded from (its figures are copied).
        expected_snapshot: The snapshot the pack was loaded from.
        heading_vectors: The document focus's heading-path vectors (saved when not ``None``).

    Returns:
        The new snapshot's name.
    """
    with os_errors(root), write_snapshot(
        root, legacy_marker=pack_files.CONFIG_FILENAME, shared_dirs=(FIGURES_DIRNAME,),
        expected_current=expected_snapshot,
    ) as folder:
        vector_kind = pack_files.write_index(index, folder)
        # The route indexes in the retriever's own format; the settings the pack reads back are
        # those of hiqa_pack.json alone (open_folder), whatever multi_route.json repeats.
        graph = write_routes(folder / pack_files.MULTI_ROUTE_DIRNAME)
        if heading_vectors is not None:
            heading_vectors.save(folder)
        if graph is not None:
            graph.graph.persist(folder / pack_files.CHUNK_GRAPH_DIRNAME)
        _save_figures(index, root, previous_store)
        pack_files.write_config(folder, {**payload, "vector_store": vector_kind})
        name = snapshot_name(folder)
    return name


def holds_folder_store(store: Any) -> bool:
    """Whether the folder ``store`` holds a folder store (snapshots, or a store written before them).

    Args:
        store: A ``store`` argument.

    Returns:
        ``True`` when it holds one.
    """
    try:
        root = Path(store)
    except TypeError:
        return False
    return is_snapshot_store(root) or (root / pack_files.CONFIG_FILENAME).is_file()


def store_writer(root: Path, on_wait: Optional[Any] = None) -> Any:
    """The writer lock of the folder store ``root`` (see ``snapshots.writer_lock``), to hold
    from loading the store to saving it so that no other writer's update is lost.

    Args:
        root: The store folder.
        on_wait: Told once when another writer holds the lock.

    Returns:
        The lock, a context manager.
    """
    return writer_lock(root, on_wait=on_wait, legacy_marker=pack_files.CONFIG_FILENAME, shared_dirs=(FIGURES_DIRNAME,))


def check_writable(root: Path) -> None:
    """Before any work: ``root`` is a store folder (or missing, or empty), can be written and
    has room for a new snapshot — a [`PackStoreError`][llama_index_hiqa.errors.PackStoreError] or
    [`PathAccessError`][llama_index_hiqa.errors.PathAccessError] naming it otherwise.

    Args:
        root: The store folder.
    """
    check_store_folder(root, pack_files.CONFIG_FILENAME, (FIGURES_DIRNAME,))  # never a folder of the user's
    current = _pointer_target(root) if root.is_dir() else None
    check_store_writable(root, root / current if current else None)


def _save_figures(index: VectorStoreIndex, root: Path, previous_store: Optional[Path]) -> None:
    """Figure files go to ``root/images/`` beside the snapshots, named by content hash
    and each written atomically, so every snapshot shares them and a crash leaves at
    most an unreferenced file."""
    previous = [] if previous_store in (None, root) else [Path(previous_store) / FIGURES_DIRNAME]
    report = save_figures(index.docstore.docs.values(), root / FIGURES_DIRNAME, previous_dirs=previous)
    for name, reason in report.missing:
        logger.warning("figure %s not saved: %s", name, reason)


def open_folder(
    persist_dir: Path, settings: Optional[HiQAPackSettings] = None
) -> Tuple[pack_files.StoreFiles, HiQAPackSettings]:
    """The checked files of the snapshot ``persist_dir`` points to and its configuration,
    ``settings`` overriding the stored one for this process.

    Args:
        persist_dir: The store folder.
        settings: The fields set on it override the stored ones (`HiQAPackSettings.applied_to`).

    Returns:
        ``(files, config)``: the checked ``pack_files.StoreFiles`` and the settings.
    """
    files = pack_files.StoreFiles.open(snapshot_for_reading(persist_dir, legacy_marker=pack_files.CONFIG_FILENAME))
    try:
        # Stores written before embed_backend existed were embedded with PyTorch.
        stored = {"embed_backend": "torch", **files.payload["config"]}
        HiQAPackSettings(**stored)
    except (ValueError, TypeError) as exc:
        raise PackStoreError(files.config_file, f"holds invalid settings ({exc})") from exc
    # The caller's settings are checked on their own: a bad argument is the caller's error
    # (a ValidationError naming the setting), not the store's.
    # A folder store is saved as one again (``store_format`` was not recorded before the
    # embedded store became the default).
    return files, (settings or HiQAPackSettings()).applied_to(stored, store_format="folder")


def _load_multi_route(
    files: pack_files.StoreFiles, index: VectorStoreIndex, config: HiQAPackSettings, keywords: CriticalKeywordExtractor
) -> MultiRouteRetriever:
    """The persisted BM25 and keyword indexes, checked against the docstore: a route that
    would fail or miss nodes on every question is an error now, naming its file."""
    nodes = list(index.docstore.docs.values())
    # Every route setting from the pack's settings (hiqa_pack.json), as a new pack gets them:
    # none is taken from the copy in multi_route.json, which older stores hold too.
    # Every field given overrides multi_route.json's copy (from_persist_dir's contract).
    settings = config.route_config().model_dump()
    retriever = files.read(
        pack_files.MULTI_ROUTE_DIRNAME,
        lambda p: MultiRouteRetriever.from_persist_dir(
            p, index=index, nodes=nodes, keyword_extractor=keywords, **settings
        ),
        "the BM25 and keyword indexes",
    )
    bm25_ids = retriever.bm25_node_ids
    if bm25_ids is not None:
        files.check_node_ids(
            f"{pack_files.MULTI_ROUTE_DIRNAME}/{BM25_DIRNAME}", bm25_ids, [n.node_id for n in nodes],
            "the BM25 index", complete=True,
        )
    return retriever


def _load_graph(
    files: pack_files.StoreFiles, index: VectorStoreIndex, config: HiQAPackSettings, embed_model: BaseEmbedding,
    llm: Optional[LLM], keywords: CriticalKeywordExtractor,
) -> Optional[ChunkGraphRetriever]:
    if not config.use_chunk_graph:
        return None
    # Imported here: the chunk graph costs 0.25 s over an import of the pack (measured) and
    # only a store with use_chunk_graph holds one.
    from llama_index_hiqa.retrievers.chunk_graph import ChunkGraphRetriever
    from llama_index_hiqa.retrievers.chunk_interaction_graph import ChunkInteractionGraph

    graph = files.read(pack_files.CHUNK_GRAPH_DIRNAME, ChunkInteractionGraph.load, "the chunk graph")
    files.check_node_ids(
        pack_files.CHUNK_GRAPH_DIRNAME, graph.node_ids, pack_files.docstore_node_ids(index.docstore),
        "the chunk graph", complete=True,
    )
    return ChunkGraphRetriever(graph, **graph_retriever_settings(index, config, embed_model, llm, keywords))


__all__ = ["FolderBackend", "check_writable", "holds_folder_store", "open_folder", "store_writer", "write_pack"]
