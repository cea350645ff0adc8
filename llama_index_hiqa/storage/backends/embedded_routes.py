"""The multi-route retriever's parts on the embedded store: the same routes, read from disk.

[`EmbeddedMultiRouteRetriever`][llama_index_hiqa.storage.backends.embedded_routes.EmbeddedMultiRouteRetriever] builds a [`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever]
composed of `EmbeddedRouteParts`: node ids, titles, the collection's shape and the
keyword postings read from the SQLite database of an
[`EmbeddedStore`][llama_index_hiqa.storage.embedded.EmbeddedStore], vectors from its memory-mapped
matrix, BM25 from bm25s arrays mapped from disk. The scores are those of the folder store's
retriever over the same nodes (HiQA's Multi-Route Retriever, "HiQA: A Hierarchical Contextual
Augmentation RAG for Multi-Documents QA" (Chen et al.)).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import BaseNode

from llama_index_hiqa.errors import InvalidSettingError
from llama_index_hiqa.indexes.keyword_index import KeywordIndex, normalize_keyword
from llama_index_hiqa.retrievers import title_match
from llama_index_hiqa.retrievers.bm25_route import BM25Route
from llama_index_hiqa.retrievers.keyword_route import KeywordRoute
from llama_index_hiqa.retrievers.multi_route import MultiRouteRetriever
from llama_index_hiqa.retrievers.node_collection import NodeCollection
from llama_index_hiqa.retrievers.route_parts import RouteParts
from llama_index_hiqa.retrievers.routes import VectorRoute
from llama_index_hiqa.retrievers.settings import MultiRouteSettings, RouteFusionSettings
from llama_index_hiqa.retrievers.store_vectors import cosine_scale
from llama_index_hiqa.settings import updated
from llama_index_hiqa.storage.embedded import EmbeddedStore
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor


class _StoredNodes(Mapping[str, BaseNode]):
    """The retriever's nodes: ids in ingestion order (read once), nodes read by id on demand."""

    def __init__(self, store: EmbeddedStore) -> None:
        self._store = store
        self._ids: Optional[Dict[str, None]] = None

    def _known(self) -> Dict[str, None]:
        if self._ids is None:
            self._ids = self._store.node_ids()
        return self._ids

    def __getitem__(self, node_id: str) -> BaseNode:
        found: List[BaseNode] = self._store.docstore.get_nodes([node_id], raise_error=False)
        if not found:
            raise KeyError(node_id)
        return found[0]

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._known()

    def __iter__(self) -> Iterator[str]:
        return iter(self._known())

    def __len__(self) -> int:
        return len(self._known())


class _StoredKeywords(KeywordIndex):
    """The keyword postings of the database, as [`KeywordIndex`][llama_index_hiqa.indexes.keyword_index.KeywordIndex] answers them."""

    def __init__(self, store: EmbeddedStore) -> None:
        super().__init__()
        self._store = store

    @property
    def node_ids(self) -> List[str]:
        return self._store.keyword_node_ids()

    def match_counts(self, keywords: Iterable[str]) -> Dict[str, int]:
        wanted = list(dict.fromkeys(normalize_keyword(k) for k in keywords))
        return {node_id: len(held) for node_id, (_ref, held) in self._store.keyword_matches(wanted).items()}

    def holds(self, node_id: str, keyword: str) -> bool:
        return bool(self._store.db.scalar(
            "SELECT 1 FROM keyword_postings k JOIN vector_rows v ON v.row = k.row WHERE v.node_id = ? AND k.keyword = ?",
            (node_id, keyword),
        ))


class EmbeddedCollection(NodeCollection):
    """The collection of an [`EmbeddedStore`][llama_index_hiqa.storage.embedded.EmbeddedStore]: ids, shape and one document's nodes read
    from the database (no list of every node in memory)."""

    def __init__(self, store: EmbeddedStore) -> None:
        super().__init__(_StoredNodes(store), store.document_titles(), store.collection_shape())
        self._store = store

    def nodes_by_id(self, node_ids: Sequence[str]) -> Dict[str, BaseNode]:
        """The stored nodes of ``node_ids`` (unknown ids left out), in one read.

        Args:
            node_ids: the ids.

        Returns:
            ``{node id: node}``.
        """
        return {n.node_id: n for n in self._store.docstore.get_nodes(list(node_ids), raise_error=False)}

    def document_node_ids(self, document_id: str) -> List[str]:
        """The ids of every node of ``document_id``, from the database.

        Args:
            document_id: the document.

        Returns:
            Its node ids.
        """
        return self._store.document_node_ids(document_id)


class EmbeddedKeywordRoute(KeywordRoute):
    """The keyword route over the database's postings: ``|C|`` with the title weight from one
    query, the title keywords kept per document (``ref_doc_id``) rather than per node."""

    def __init__(self, store: EmbeddedStore, extractor: CriticalKeywordExtractor, config: RouteFusionSettings) -> None:
        super().__init__(extractor, _StoredKeywords(store), config)
        self._store = store
        self.title_keywords_by_ref: Dict[str, frozenset[str]] = {}
        if self.reads_titles():
            titles = store.titles()
            by_title = title_match.title_keyword_sets(extractor, list(dict.fromkeys(t for _, t in titles)))
            if config.document_keyword_weight != 1.0:
                self.title_keywords_by_ref = {ref: by_title[t] for ref, t in titles if by_title[t]}
            self.names = title_match.document_names(by_title)

    def counts(self, normalized: Sequence[str]) -> Dict[str, float]:
        """``|C|`` per node holding any of ``normalized`` (see [`KeywordRoute.counts`][llama_index_hiqa.retrievers.keyword_route.KeywordRoute.counts]).

        Args:
            normalized: the question's normalised keywords.

        Returns:
            ``{node id: |C|}``.
        """
        matches = self._store.keyword_matches(normalized)
        counts: Dict[str, float] = {node_id: len(held) for node_id, (_ref, held) in matches.items()}
        extra = self.config.document_keyword_weight - 1.0
        if extra and self.title_keywords_by_ref:
            wanted = self.title_wanted(normalized)
            in_title: Dict[frozenset[str], frozenset[str]] = {}
            for node_id, (ref, held) in matches.items():
                title = self.title_keywords_by_ref.get(ref)
                if title is None:
                    continue
                if title not in in_title:
                    in_title[title] = wanted & title
                counts[node_id] += extra * sum(1 for k in in_title[title] if k in held)
        return counts


@dataclass
class EmbeddedRouteParts(RouteParts):
    """The routes of an embedded store (see the module docstring).

    Args:
        store: the embedded store the parts read (after the [`RouteParts`][llama_index_hiqa.retrievers.route_parts.RouteParts] fields).
        vector_retriever: the vector retriever over the store's matrix.
    """

    store: EmbeddedStore = field(kw_only=True)
    vector_retriever: BaseRetriever = field(kw_only=True)

    @classmethod
    def open(
        cls, store: EmbeddedStore, vector_retriever: BaseRetriever, bm25_route: Optional[BM25Route],
        extractor: CriticalKeywordExtractor, config: RouteFusionSettings,
    ) -> "EmbeddedRouteParts":
        """The parts over ``store`` under ``config`` (the database's facts read now).

        Args:
            store: the embedded store.
            vector_retriever: the vector retriever over the store's matrix.
            bm25_route: the BM25 route of the store's current generation, or ``None``.
            extractor: the keyword extractor.
            config: the retriever's settings.

        Returns:
            The parts.
        """
        collection = EmbeddedCollection(store)
        # The vector store returns id-only stand-ins: result nodes are read from the docstore.
        scale = cosine_scale(getattr(vector_retriever, "_vector_store", None))
        vector = VectorRoute(vector_retriever, collection.nodes, scale, keep_nodes=False)
        keywords = EmbeddedKeywordRoute(store, extractor, config)
        bm25 = bm25_route if config.use_bm25 else None
        return cls(collection, vector, bm25, keywords, store=store, vector_retriever=vector_retriever)

    def with_config(self, old: RouteFusionSettings, new: RouteFusionSettings) -> "EmbeddedRouteParts":
        """The parts under other settings, the database's facts read again.

        Args:
            old: the settings these parts were made for.
            new: the new settings.

        Returns:
            The new parts.

        Raises:
            InvalidSettingError: ``use_bm25`` switched on for a retriever built without it.
        """
        if new.use_bm25 and self.bm25 is None:
            raise InvalidSettingError("use_bm25", "the BM25 route was off when this retriever was built; load the pack with it on")
        bm25 = self.bm25 if isinstance(self.bm25, BM25Route) else None
        return EmbeddedRouteParts.open(self.store, self.vector_retriever, bm25, self.keywords.extractor, new)


def EmbeddedMultiRouteRetriever(  # noqa: N802 - a constructor: named for the retriever it builds
    store: EmbeddedStore,
    vector_retriever: BaseRetriever,
    bm25_route: Optional[BM25Route],
    keyword_extractor: Optional[CriticalKeywordExtractor] = None,
    config: Optional[MultiRouteSettings] = None,
    **settings: Any,
) -> MultiRouteRetriever:
    """A [`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever] over an
    [`EmbeddedStore`][llama_index_hiqa.storage.embedded.EmbeddedStore]: the same routes and fusion,
    with the node-wide facts (ids, titles, shape, keyword postings) read from the database instead
    of from every node in memory (`EmbeddedRouteParts`).

    Args:
        store: the embedded store.
        vector_retriever: the vector retriever over the store's matrix.
        bm25_route: the BM25 route of the store's current generation, or ``None``.
        keyword_extractor: the keyword extractor (default: ``CriticalKeywordExtractor()``).
        config: the settings as an object (``settings`` override its fields).
        **settings: [`MultiRouteSettings`][llama_index_hiqa.retrievers.settings.MultiRouteSettings] fields.

    Returns:
        The retriever.
    """
    config = updated(config, settings, model_class=MultiRouteSettings)
    extractor = keyword_extractor or CriticalKeywordExtractor()
    parts = EmbeddedRouteParts.open(store, vector_retriever, bm25_route, extractor, config)
    return MultiRouteRetriever(keyword_extractor=extractor, config=config, route_parts=parts)
