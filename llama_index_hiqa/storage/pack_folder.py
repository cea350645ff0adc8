"""The pack in a folder: write a snapshot of every part, read one back checked.

``HiQAPack.persist`` and ``HiQAPack.load`` call these for a folder store (a database store is
:mod:`llama_index_hiqa.storage.pg_pack`). A snapshot holds the docstore and vector store
(``pack_files.write_index``), the BM25 and keyword indexes (``MultiRouteRetriever.persist``),
the chunk graph when there is one and the configuration; figure files live beside the
snapshots, shared by all of them. Writing goes through ``snapshots.write_snapshot``, so a
process killed at any instant leaves the previous snapshot the one that loads; reading checks
every file before anything is built on it (``pack_files.StoreFiles``) and names the one that
is missing, truncated or inconsistent in a :class:`~llama_index_hiqa.errors.PackStoreError`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_hiqa.errors import PackStoreError
from llama_index_hiqa.pack_config import HiQAPackConfig, graph_retriever_settings, model_identity, route_settings, same_model
from llama_index_hiqa.storage import pack_files

logger = logging.getLogger(__name__)


class StoredPack(NamedTuple):
    """What :func:`read_pack` found: the parts a ``HiQAPack`` is built from."""

    index: VectorStoreIndex
    config: HiQAPackConfig
    embed_model: BaseEmbedding
    multi_route: BaseRetriever
    graph: Any  # a ChunkGraphRetriever, or None without the chunk graph
    file_stats: Dict[str, List[int]]


def write_pack(
    root: Path,
    *,
    index: VectorStoreIndex,
    multi_route: Any,
    graph: Any,
    payload: Mapping[str, Any],
    previous_store: Optional[Path] = None,
    expected_snapshot: Optional[str] = None,
    heading_vectors: Any = None,
) -> str:
    """A new snapshot of ``root`` holding ``index``, the routes, the graph (when not
    ``None``) and ``payload`` (the pack's configuration and facts, with the vector store's
    kind added), switched to atomically; returns its name. Figures already saved in
    ``previous_store`` (a pack loaded from another folder) are copied from there.

    ``expected_snapshot``: the snapshot the pack was loaded from; another one current now is a
    :class:`~llama_index_hiqa.errors.StoreConflictError`. An ``OSError`` (read-only folder,
    full disk) leaves the previous snapshot current and is raised as a
    :class:`~llama_index_hiqa.errors.PathAccessError` naming the path."""
    from llama_index_hiqa.figures import FIGURES_DIRNAME
    from llama_index_hiqa.storage.os_boundary import os_errors
    from llama_index_hiqa.storage.snapshots import snapshot_name, write_snapshot

    with os_errors(root), write_snapshot(
        root, legacy_marker=pack_files.CONFIG_FILENAME, shared_dirs=(FIGURES_DIRNAME,),
        expected_current=expected_snapshot,
    ) as folder:
        vector_kind = pack_files.write_index(index, folder)
        multi_route.persist(folder / pack_files.MULTI_ROUTE_DIRNAME)
        if heading_vectors is not None:
            heading_vectors.save(folder)
        if graph is not None:
            graph.graph.persist(folder / pack_files.CHUNK_GRAPH_DIRNAME)
        _save_figures(index, root, previous_store)
        pack_files.write_config(folder, {**payload, "vector_store": vector_kind})
        name = snapshot_name(folder)
    return name


def store_writer(root: Path, on_wait: Optional[Any] = None) -> Any:
    """The writer lock of the folder store ``root`` (see ``snapshots.writer_lock``), to hold
    from loading the store to saving it so that no other writer's update is lost."""
    from llama_index_hiqa.figures import FIGURES_DIRNAME
    from llama_index_hiqa.storage.snapshots import writer_lock

    return writer_lock(root, on_wait=on_wait, legacy_marker=pack_files.CONFIG_FILENAME, shared_dirs=(FIGURES_DIRNAME,))


def check_writable(root: Path) -> None:
    """Before any work: ``root`` is a store folder (or missing, or empty), can be written and
    has room for a new snapshot — a :class:`~llama_index_hiqa.errors.PackStoreError` or
    :class:`~llama_index_hiqa.errors.PathAccessError` naming it otherwise."""
    from llama_index_hiqa.figures import FIGURES_DIRNAME
    from llama_index_hiqa.storage.os_boundary import check_store_writable
    from llama_index_hiqa.storage.snapshots import _pointer_target, check_store_folder

    check_store_folder(root, pack_files.CONFIG_FILENAME, (FIGURES_DIRNAME,))  # never a folder of the user's
    current = _pointer_target(root) if root.is_dir() else None
    check_store_writable(root, root / current if current else None)


def loaded_snapshot(files: Any) -> Optional[str]:
    """The name of the snapshot ``files`` (from :func:`open_folder`) were read from, ``None``
    for a store written before snapshots existed."""
    from llama_index_hiqa.storage.snapshots import is_snapshot_name

    name = Path(files.folder).name
    return name if is_snapshot_name(name) else None


def _save_figures(index: VectorStoreIndex, root: Path, previous_store: Optional[Path]) -> None:
    """Figure files go to ``root/images/`` beside the snapshots, named by content hash
    and each written atomically, so every snapshot shares them and a crash leaves at
    most an unreferenced file."""
    from llama_index_hiqa.figures import FIGURES_DIRNAME, save_figures

    previous = [] if previous_store in (None, root) else [Path(previous_store) / FIGURES_DIRNAME]
    report = save_figures(index.docstore.docs.values(), root / FIGURES_DIRNAME, previous_dirs=previous)
    for name, reason in report.missing:
        logger.warning("figure %s not saved: %s", name, reason)


def open_folder(persist_dir: Path, settings: Optional[Mapping[str, Any]] = None) -> Tuple[Any, HiQAPackConfig]:
    """The checked files of the snapshot ``persist_dir`` points to and its configuration,
    ``settings`` overriding the stored one for this process."""
    from llama_index_hiqa.storage.snapshots import snapshot_for_reading

    files = pack_files.StoreFiles.open(snapshot_for_reading(persist_dir, legacy_marker=pack_files.CONFIG_FILENAME))
    try:
        # Stores written before embed_backend existed were embedded with PyTorch.
        stored = {"embed_backend": "torch", **files.payload["config"]}
        HiQAPackConfig(**stored)
    except (ValueError, TypeError) as exc:
        raise PackStoreError(files.config_file, f"holds invalid settings ({exc})") from exc
    # The caller's settings are checked on their own: a bad argument is the caller's error
    # (a ValidationError naming the setting), not the store's.
    return files, HiQAPackConfig(**{**stored, **(settings or {})})


def read_pack(
    files: Any,
    config: HiQAPackConfig,
    *,
    embed_model: BaseEmbedding,
    keywords: Any,
    llm: Optional[LLM] = None,
    vector_store: Optional[BasePydanticVectorStore] = None,
) -> StoredPack:
    """The parts of the pack in ``files`` (from :func:`open_folder`), queried with
    ``embed_model`` and the ``keywords`` extractor the pack resolved for ``config``."""
    if files.payload.get("embed_model") and not same_model(files.payload["embed_model"], embed_model):
        logger.warning(
            "HiQAPack.load: the store was embedded with %s, queries now use %s",
            files.payload["embed_model"], model_identity(embed_model),
        )
    index = files.load_index(embed_model, vector_store)
    return StoredPack(
        index=index,
        config=config,
        embed_model=embed_model,
        multi_route=_load_multi_route(files, index, config, keywords),
        graph=_load_graph(files, index, config, embed_model, llm, keywords),
        file_stats={
            str(doc_id): [int(v) for v in stat]
            for doc_id, stat in (files.payload.get("file_stats") or {}).items()
            if isinstance(stat, list) and len(stat) == 2
        },
    )


def _load_multi_route(files: Any, index: VectorStoreIndex, config: HiQAPackConfig, keywords: Any) -> BaseRetriever:
    """The persisted BM25 and keyword indexes, checked against the docstore: a route that
    would fail or miss nodes on every question is an error now, naming its file."""
    from llama_index_hiqa.retrievers.multi_route import BM25_DIRNAME, MultiRouteRetriever

    nodes = list(index.docstore.docs.values())
    retriever = files.read(
        pack_files.MULTI_ROUTE_DIRNAME,
        lambda p: MultiRouteRetriever.from_persist_dir(
            p, index=index, nodes=nodes, keyword_extractor=keywords, **route_settings(config)
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
    files: Any, index: VectorStoreIndex, config: HiQAPackConfig, embed_model: BaseEmbedding, llm: Optional[LLM],
    keywords: Any,
) -> Any:
    if not config.use_chunk_graph:
        return None
    from llama_index_hiqa.retrievers.chunk_graph import ChunkGraphRetriever, ChunkInteractionGraph

    graph = files.read(pack_files.CHUNK_GRAPH_DIRNAME, ChunkInteractionGraph.load, "the chunk graph")
    files.check_node_ids(
        pack_files.CHUNK_GRAPH_DIRNAME, graph.node_ids, pack_files.docstore_node_ids(index.docstore),
        "the chunk graph", complete=True,
    )
    return ChunkGraphRetriever(graph, **graph_retriever_settings(index, config, embed_model, llm, keywords))
