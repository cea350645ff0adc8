"""The multi-route retriever of the embedded store (its backend is
:mod:`llama_index_hiqa.storage.backends.embedded`).

Questions on an embedded store are answered by :class:`EmbeddedMultiRouteRetriever`, which reads
nodes, keyword postings and the collection's shape from the database, vectors from the
memory-mapped matrix, and BM25 from bm25s arrays mapped from disk. The scores are those of the
folder store's :class:`~llama_index_hiqa.MultiRouteRetriever` over the same nodes.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import BaseNode, QueryBundle

from llama_index_hiqa.errors import InvalidSettingError
from llama_index_hiqa.retrievers import title_match
from llama_index_hiqa.retrievers.bm25_route import BM25Route
from llama_index_hiqa.retrievers.multi_route import MultiRouteConfig, MultiRouteRetriever
from llama_index_hiqa.retrievers.store_vectors import cosine_scale
from llama_index_hiqa.storage.embedded import EmbeddedStore
from llama_index_hiqa.indexes.keyword_index import KeywordIndex
from llama_index_hiqa.settings import updated
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

logger = logging.getLogger(__name__)


class _StoredNodes(Mapping):
    """The retriever's nodes: ids in ingestion order (read once), nodes read by id on demand."""

    def __init__(self, store: EmbeddedStore) -> None:
        self._store = store
        self._ids: Optional[Dict[str, None]] = None

    def _known(self) -> Dict[str, None]:
        if self._ids is None:
            self._ids = dict.fromkeys(self._store.node_ids())
        return self._ids

    def __getitem__(self, node_id: str) -> BaseNode:
        found = self._store.docstore.get_nodes([node_id], raise_error=False)
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
    """The keyword postings of the database, as :class:`KeywordIndex` answers them."""

    def __init__(self, store: EmbeddedStore) -> None:
        super().__init__()
        self._store = store

    @property
    def node_ids(self) -> List[str]:
        return self._store.keyword_node_ids()

    def match_counts(self, keywords: Any) -> Dict[str, int]:
        from llama_index_hiqa.indexes.keyword_index import normalize_keyword

        wanted = list(dict.fromkeys(normalize_keyword(k) for k in keywords))
        return {node_id: len(held) for node_id, (_ref, held) in self._store.keyword_matches(wanted).items()}

    def holds(self, node_id: str, keyword: str) -> bool:
        return bool(self._store.db.scalar(
            "SELECT 1 FROM keyword_postings k JOIN vector_rows v ON v.row = k.row WHERE v.node_id = ? AND k.keyword = ?",
            (node_id, keyword),
        ))


class EmbeddedMultiRouteRetriever(MultiRouteRetriever):
    """:class:`~llama_index_hiqa.MultiRouteRetriever` over an :class:`EmbeddedStore`: the same
    routes and fusion, with the node-wide facts (ids, titles, shape, keyword postings) read from
    the database instead of from every node in memory."""

    def __init__(
        self,
        store: EmbeddedStore,
        vector_retriever: BaseRetriever,
        bm25_route: Optional[BM25Route],
        keyword_extractor: Optional[CriticalKeywordExtractor] = None,
        **settings: Any,
    ) -> None:
        # MultiRouteRetriever.__init__ derives these facts from a list of every node; here
        # each comes from the database (the same values, see EmbeddedStore).
        self.config = MultiRouteConfig(**settings)
        self._store = store
        self._nodes = _StoredNodes(store)
        self._vector_retriever = vector_retriever
        self._cosine = cosine_scale(getattr(vector_retriever, "_vector_store", None))
        self._restriction = None
        self.keyword_extractor = keyword_extractor or CriticalKeywordExtractor()
        self._bm25_tokenizer = None
        self._keyword_index = _StoredKeywords(store)
        self._title_keywords_by_ref: Dict[str, frozenset] = {}
        self._title_keywords, self._document_names = {}, {}
        if self._reads_titles():
            titles = store.titles()
            by_title = self._title_keywords_of(list(dict.fromkeys(t for _, t in titles)))
            if self.config.document_keyword_weight != 1.0:
                self._title_keywords_by_ref = {ref: by_title[t] for ref, t in titles if by_title[t]}
            self._document_names = title_match.document_names(by_title)
        self._bm25 = bm25_route if self.config.use_bm25 else None
        self._shape = store.collection_shape()
        self._beta_value = self._resolve_beta()
        self._document_nodes = None
        BaseRetriever.__init__(self)

    def with_settings(self, **settings: Any) -> "MultiRouteRetriever":
        new = updated(self.config, settings)
        if new.use_bm25 and self._bm25 is None:
            raise InvalidSettingError("use_bm25", "the BM25 route was off when this retriever was built; load the pack with it on")
        clone = EmbeddedMultiRouteRetriever(
            self._store, self._vector_retriever, self._bm25, self.keyword_extractor, **new.model_dump()
        )
        return clone

    def _keyword_counts(self, query: QueryBundle) -> Tuple[List[str], Dict[str, float]]:
        """MultiRouteRetriever's ``|C|`` with the title weight, from one query of the postings."""
        if not self.config.use_keywords:
            return [], {}
        keywords, normalized = self._query_keywords(query)
        matches = self._store.keyword_matches(normalized)
        counts: Dict[str, float] = {node_id: len(held) for node_id, (_ref, held) in matches.items()}
        extra = self.config.document_keyword_weight - 1.0
        if extra and self._title_keywords_by_ref:
            wanted = self._title_wanted(normalized)
            in_title: Dict[frozenset, frozenset] = {}
            for node_id, (ref, held) in matches.items():
                title = self._title_keywords_by_ref.get(ref)
                if title is None:
                    continue
                if title not in in_title:
                    in_title[title] = wanted & title
                counts[node_id] += extra * sum(1 for k in in_title[title] if k in held)
        return keywords, counts

    def _collect(self, results: Sequence[Any]) -> Tuple[Dict[str, float], Dict[str, BaseNode]]:
        """The vector route's cosines by id; its nodes are id-only stand-ins (``ids_only``),
        so the few returned nodes are read from the docstore by :meth:`results_for`."""
        scores, _ = super()._collect(results)
        return scores, {}

    def document_node_ids(self, document_id: str) -> List[str]:
        return self._store.document_node_ids(document_id)

    def nodes_by_id(self, node_ids: Sequence[str]) -> Dict[str, BaseNode]:
        return {n.node_id: n for n in self._store.docstore.get_nodes(list(node_ids), raise_error=False)}
