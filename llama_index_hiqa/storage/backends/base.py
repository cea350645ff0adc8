"""The store interface: what [`HiQAPack`][llama_index_hiqa.pack.hiqa_pack.HiQAPack] asks of the place its nodes live.

A backend is one object per store (the folder store, the embedded store, PostgreSQL) that the
pack holds and talks to only through [`StoreBackend`][llama_index_hiqa.storage.backends.base.StoreBackend]; the pack never asks which one it
holds. Writing a batch, removing a document and saving are each one unit of the store (a kill at
any instant leaves the previous state readable); the routes are answered where the data is, with
the same scores on every backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import (
    Any, Callable, ContextManager, Dict, Iterator, List, Mapping, Optional, Protocol, Sequence, Tuple, Union,
    runtime_checkable,
)

from llama_index.core import Settings, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.ingestion import run_transformations
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, Document, TransformComponent
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_hiqa import schema
from llama_index_hiqa.pack.config import HiQAPackSettings, default_embed_model, keyword_extractor
from llama_index_hiqa.retrievers.multi_route import MultiRouteRetriever
from llama_index_hiqa.storage.backends.heading_vectors import HeadingVectors, PostgresHeadingVectors, SQLiteHeadingVectors
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

Routes = Tuple[MultiRouteRetriever, Optional[BaseRetriever]]  # (multi-route retriever, chunk-graph retriever or None)
# What each store keeps of the document focus's heading-path vectors (in memory, SQLite, PostgreSQL).
StoredHeadingVectors = Union[HeadingVectors, SQLiteHeadingVectors, PostgresHeadingVectors]


@dataclass(frozen=True)
class Resolvers:
    """How a backend turns settings into the models it needs: the embedding model
    (``embed_model(given, embed_backend)``) and the critical-keyword extractor
    (``keyword_extractor(config)``), the same at ingestion and at query time.

    The pack gives its backends its own (one place to configure or replace them for every
    store); the defaults are [`llama_index_hiqa.pack.config`][llama_index_hiqa.pack.config]'s.
    """

    embed_model: Callable[[Optional[BaseEmbedding], Optional[str]], BaseEmbedding] = default_embed_model
    keyword_extractor: Callable[[HiQAPackSettings], CriticalKeywordExtractor] = keyword_extractor


@runtime_checkable
class StoreBackend(Protocol):
    """One store the pack holds: its index, its settings and every read and write it makes.

    Attributes:
        index: A LlamaIndex ``VectorStoreIndex`` (docstore and vector store) over the stored nodes.
        config: The pack's settings (a ``HiQAPackSettings``) as stored, with this process's overrides.
        embed_model: The embedding model the questions are embedded with.
        file_stats: ``{ref_doc_id: [size, mtime_ns]}`` of the files the documents were read from.
        llm: The LLM of the routes that ask one (the chunk graph's question keywords); the
            pack sets its own.
        commits_batches: Whether each `write_batch` is committed to the store as it is
            made (a checkpoint then saves nothing more), or kept in memory until `save`.
    """

    index: VectorStoreIndex
    config: HiQAPackSettings
    embed_model: BaseEmbedding
    file_stats: Dict[str, List[int]]
    llm: Optional[LLM]
    commits_batches: bool

    @classmethod
    def open(
        cls, location: Any, settings: HiQAPackSettings, *, embed_model: Optional[BaseEmbedding] = None,
        llm: Optional[LLM] = None, create: bool = False, resolvers: Resolvers = Resolvers(),
    ) -> "StoreBackend":
        """Open the store at ``location`` (with ``create``, a new one when it holds none).

        Args:
            location: The store folder or database URL.
            settings: A new store's settings; for a stored one, the fields set on it override
                the stored ones in this process (`HiQAPackSettings.applied_to`).
            embed_model: The embedding model (the packaged MiniLM when ``None``).
            llm: The LLM of the routes that use one (the chunk graph's question keywords).
            create: Create the store when ``location`` holds none.
            resolvers: How the embedding model and keyword extractor are made from the settings.

        Returns:
            The backend, every stored file or table checked.

        Raises:
            PackStoreError: The store is missing, damaged or was built with another embedding
                model; the error names the file or table, nothing is half loaded.
        """

    @property
    def heading_vectors(self) -> StoredHeadingVectors:
        """The heading-path vectors (and, in a database, the per-node facts) the document focus
        reads, written with each batch so no question embeds them."""

    @property
    def location(self) -> Optional[Path]:
        """The store folder (``None`` in memory and for a database)."""

    @property
    def address(self) -> Union[Path, str, None]:
        """Where the store is, as ``persist`` reports it: the folder, the database URL with its
        password masked, or ``None`` (in memory, never saved)."""

    def documents(self) -> Dict[str, str]:
        """``{schema.DOCUMENT_ID: ref_doc_id}`` from the per-document records (no node is read)."""

    def node_count(self) -> int:
        """The number of stored nodes (no node is read)."""

    def document_hash(self, ref_doc_id: str) -> Optional[str]:
        """The stored hash of a document, what an upsert compares.

        Args:
            ref_doc_id: The document's ref doc id.

        Returns:
            The hash, ``None`` when the store holds no such document.
        """

    def write_batch(self, documents: Sequence[Document], replaced: Sequence[str], nodes: Sequence[BaseNode]) -> int:
        """Write one batch all or nothing: ``replaced`` documents' nodes go, ``nodes`` (with their
        vectors, keyword postings and BM25 statistics) and the ``documents``' hashes come in.

        Args:
            documents: The batch's documents (their hashes are recorded).
            replaced: Ref doc ids of earlier versions to remove in the same unit.
            nodes: The batch's nodes, embedded.

        Returns:
            The number of nodes removed.
        """

    def remove_document(self, ref_doc_id: str) -> int:
        """Remove one document from every route as one unit.

        Args:
            ref_doc_id: The document's ref doc id.

        Returns:
            The number of nodes removed.
        """

    def routes(self) -> Routes:
        """The retrievers over what is stored, under the backend's `config` and `llm`, built
        once and again only after a write.

        Returns:
            ``(multi_route, graph)``: the multi-route retriever and the chunk-graph retriever
                (``None`` unless ``use_chunk_graph``).
        """

    def bulk_writes(self) -> ContextManager[Any]:
        """A context around a run of [`write_batch`][llama_index_hiqa.storage.backends.base.StoreBackend.write_batch] calls (an ingestion)."""

    def copy_from(self, source: "StoreBackend", batch_documents: int = 8) -> None:
        """Copy another store's nodes and vectors as they are (nothing is parsed or embedded
        again), in the order it holds them, so the copy ranks as the source does.

        Args:
            source: The backend copied (any store whose vector store gives its vectors back).
            batch_documents: Documents a batch (a transaction in a database).
        """

    def save(self, payload: Mapping[str, Any], location: Any = None) -> "StoreBackend":
        """Save the pack's settings and ingestion state once, with the store (and whatever its
        batches did not commit: the folder store's nodes and indexes, the embedded store's BM25
        index), without building a retriever; [`open`][llama_index_hiqa.storage.backends.base.StoreBackend.open] reads them back.

        Args:
            payload: ``config`` (the settings), ``embed_model``, ``index_id``, ``documents``,
                ``node_count`` and ``file_stats``.
            location: Where to save (a folder store may be saved to a new folder; ``None``:
                where it was opened).

        Returns:
            The backend that holds the saved store from now on: this one, or, for a pack
                held in memory and saved in another format, the store written.
        """

    def close(self) -> None:
        """Release the store's files, locks and connections."""


class RouteCache:
    """A backend's routes, kept until a write changes what they are built on (a change of
    settings alone builds nothing again, as before the backends existed)."""

    def __init__(self) -> None:
        self._routes: Optional[Routes] = None

    def get(self, build: Callable[[], Routes]) -> Routes:
        """The cached routes, else ``build()``, cached.

        Args:
            build: Builds the routes.

        Returns:
            The routes.
        """
        if self._routes is None:
            self._routes = build()
        return self._routes

    def put(self, routes: Routes) -> None:
        """Keep ``routes`` (read back from the store) as the current ones.

        Args:
            routes: ``(multi_route, graph)``.
        """
        self._routes = routes

    @property
    def current(self) -> Optional[Routes]:
        """The cached routes, ``None`` after a write."""
        return self._routes

    def clear(self) -> None:
        """Forget the routes: the stored nodes changed."""
        self._routes = None


class SettingsTransformations(TransformComponent):
    """``Settings.transformations``, looked up when a document is inserted into the index
    (``index.insert``) rather than when the index is made.

    A ``VectorStoreIndex`` made without transformations builds LlamaIndex's default splitter on
    construction, which loads tiktoken's vocabulary: seconds on a busy machine, on every open of
    a store whose ingestion never uses it (the pack parses with its own pipeline). Given this one
    instead, the index behaves the same and an open costs milliseconds.
    """

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        """Run ``Settings.transformations`` over ``nodes``.

        Args:
            nodes: The nodes (documents) inserted.
            **kwargs: Passed on to each transformation.

        Returns:
            The transformed nodes.
        """
        return run_transformations(list(nodes), Settings.transformations, **kwargs)


def copied_batches(
    source: StoreBackend, file_stats: Dict[str, List[int]], batch_documents: int = 8,
) -> Iterator[Tuple[List[Document], List[BaseNode], Dict[str, str]]]:
    """A built store's nodes with their vectors, ``batch_documents`` documents at a time, in
    the order its docstore holds them (the order its routes break ties in), for a copy into
    another store that parses and embeds nothing again.

    Args:
        source: The backend copied (any store whose vector store gives its vectors back).
        file_stats: The target's ``{ref_doc_id: [size, mtime_ns]}``, given each batch's
            documents' file facts before the batch is yielded.
        batch_documents: Documents a batch.

    Yields:
        ``(documents, nodes, hashes)``: stand-in documents (id and ``schema.DOCUMENT_ID``),
            the nodes with their stored vectors as embeddings, and the documents' hashes.
    """
    vectors_of = copied_vectors(source.index.vector_store)
    docstore = source.index.docstore
    infos = docstore.get_all_ref_doc_info() or {}
    by_ref: Dict[str, List[BaseNode]] = {}
    for node in docstore.docs.values():
        by_ref.setdefault(node.ref_doc_id or "", []).append(node)
    refs = list(by_ref)
    for start in range(0, len(refs), batch_documents):
        batch = refs[start:start + batch_documents]
        nodes = [n for ref in batch for n in by_ref[ref]]
        for node, vector in zip(nodes, vectors_of([n.node_id for n in nodes])):
            node.embedding = [float(v) for v in vector]
        documents = [
            Document(id_=ref, text="", metadata={
                schema.DOCUMENT_ID: (infos[ref].metadata if ref in infos else {}).get(schema.DOCUMENT_ID, ref)
            })
            for ref in batch
        ]
        file_stats.update({ref: source.file_stats[ref] for ref in batch if ref in source.file_stats})
        yield documents, nodes, {ref: docstore.get_document_hash(ref) or "" for ref in batch}
        for node in nodes:
            node.embedding = None


def copied_vectors(source_vector_store: BasePydanticVectorStore) -> Callable[[List[str]], List[Any]]:
    """How a copy between stores reads vectors back from ``source_vector_store`` (raises
    ``ValueError`` when it cannot: the copy re-embeds nothing).

    Args:
        source_vector_store: The copied pack's vector store.

    Returns:
        A function from node ids to their vectors.
    """
    if hasattr(source_vector_store, "get_embeddings"):
        get_embeddings: Callable[[List[str]], List[Any]] = source_vector_store.get_embeddings
        return get_embeddings
    if hasattr(source_vector_store, "get"):  # SimpleVectorStore
        return lambda ids: [source_vector_store.get(i) for i in ids]
    raise ValueError(
        f"a copy between stores reads the vectors back from the copied vector store; {type(source_vector_store).__name__} cannot"
    )


__all__ = [
    "Resolvers", "RouteCache", "Routes", "SettingsTransformations", "StoredHeadingVectors", "StoreBackend", "copied_batches", "copied_vectors",
]
