"""The multi-route retriever served by PostgreSQL: every route one query, nothing in memory.

:class:`PostgresMultiRouteRetriever` is HiQA's Multi-Route Retriever ("HiQA: A Hierarchical
Contextual Augmentation RAG for Multi-Documents QA" (Chen et al.), §Multi-Route Retriever)
with the routes answered by the database of :class:`~llama_index_hiqa.storage.postgres.PostgresStore`:

* vector — pgvector's HNSW index of LlamaIndex's ``PGVectorStore`` table (cosine);
* BM25 — Okapi BM25 over the stored term statistics (``pg_schema.ROUTES_SQL``);
* critical keywords — ``|C|`` per node from the GIN-indexed ``text[]`` column.

A question's three routes are one SQL statement (``ROUTES_SQL``, one round trip), and so are
the scores of every node of a document for the document focus (``WITHIN_SQL``). Fusion, score
normalisation and the per-node route scores are :class:`~llama_index_hiqa.MultiRouteRetriever`'s
own; a failing statement fails every route at once (one database answers them all). What
another process commits is seen by the next query; ``beta="auto"`` follows the collection (its
shape is re-read every few seconds). ``_aretrieve`` sends the same statement on the asyncpg pool.
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

from llama_index_hiqa.retrievers import title_match
from llama_index_hiqa.retrievers.multi_route import BM25, KEYWORDS, VECTOR, MultiRouteConfig, MultiRouteRetriever
from llama_index_hiqa.settings import updated
from llama_index_hiqa.storage.pg_schema import (
    DOCUMENT_NODES_SQL,
    KEYWORD_SQL,
    ROUTES_SQL,
    SHAPE_SQL,
    TITLES_SQL,
    WITHIN_SQL,
    BM25Tokenizer,
)
from llama_index_hiqa.storage.postgres import PostgresStore
from llama_index_hiqa.retrievers.store_vectors import identity
from llama_index_hiqa.indexes.keyword_index import KeywordIndex
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

SHAPE_TTL_S = 5.0


class _StoredNodes(Mapping):
    """The retriever's node mapping, answered by the database (nothing is held)."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    def __getitem__(self, node_id: str) -> BaseNode:
        found = self._store.nodes([node_id])
        if node_id not in found:
            raise KeyError(node_id)
        return found[node_id]

    def __contains__(self, node_id: object) -> bool:
        return bool(self._store.scalar("SELECT 1 FROM hiqa_nodes WHERE node_id = :i", i=str(node_id)))

    def __iter__(self) -> Iterator[str]:
        return iter([r[0] for r in self._store.rows("SELECT node_id FROM hiqa_nodes ORDER BY ref_doc_id, position")])

    def __len__(self) -> int:
        return self._store.node_count()


class _StoredBM25:
    """The BM25 route over the stored term statistics (alone: ``route_scores``)."""

    def __init__(self, store: PostgresStore, language: str) -> None:
        self.store = store
        self.tokenizer = BM25Tokenizer(language)

    @property
    def node_ids(self) -> List[str]:
        return list(_StoredNodes(self.store))

    def top(self, query: str, n: int) -> Dict[str, float]:
        terms = self.tokenizer.query(query)
        if not terms:
            return {}
        rows = self.store.rows(ROUTES_SQL, **_params(None, terms, [], [], 0.0, n))
        return {node_id: float(score) for route, node_id, score in rows if route == "b"}


def _vector_literal(embedding: Optional[Sequence[float]]) -> Optional[str]:
    return None if embedding is None else "[" + ",".join(repr(float(x)) for x in embedding) + "]"


def _params(embedding: Optional[Sequence[float]], terms: Sequence[str], keywords: Sequence[str],
            title_keywords: Sequence[str], extra: float, n: int, **more: Any) -> Dict[str, Any]:
    """The parameters of ROUTES_SQL / WITHIN_SQL (a route without input returns no rows)."""
    return {"qvec": _vector_literal(embedding), "use_vector": embedding is not None, "terms": list(terms),
            "kw": list(keywords), "tw": list(title_keywords), "extra": float(extra), "n": int(n), **more}


def _by_route(rows: Sequence[Tuple[str, str, float]]) -> Dict[str, Dict[str, float]]:
    out: Dict[str, Dict[str, float]] = {VECTOR: {}, BM25: {}, KEYWORDS: {}}
    names = {"v": VECTOR, "b": BM25, "k": KEYWORDS}
    for route, node_id, score in rows:
        out[names[route]][node_id] = float(score)
    return out


class PostgresMultiRouteRetriever(MultiRouteRetriever):
    """:class:`~llama_index_hiqa.MultiRouteRetriever` whose BM25 and keyword routes are SQL
    queries on a :class:`PostgresStore` and whose vector route is a ``PGVectorStore``
    retriever. Build it with the same settings as the in-memory retriever."""

    def __init__(
        self,
        store: PostgresStore,
        vector_retriever: BaseRetriever,
        keyword_extractor: Optional[CriticalKeywordExtractor] = None,
        config: Optional[MultiRouteConfig] = None,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        ef_search: Optional[int] = None,
        **settings: Any,
    ) -> None:
        # MultiRouteRetriever.__init__ builds in-memory indexes from the nodes; none are built here.
        self.config = updated(config, settings, model_class=MultiRouteConfig)
        self._store = store
        self._ef_search = max(ef_search or 0, store.settings.hnsw_ef_search)
        self._nodes = _StoredNodes(store)
        self._vector_retriever = vector_retriever
        self._cosine = identity  # pgvector's cosine ops give 1 − cosine distance: a cosine
        self.keyword_extractor = keyword_extractor or CriticalKeywordExtractor()
        self._bm25_tokenizer = None
        self._keyword_index = KeywordIndex()  # unused: the keyword route is a query
        self._title_keywords = {}
        self._names_of_titles_read: Tuple[Tuple[str, ...], Dict[str, Tuple[Tuple[str, ...], ...]]] = ((), {})
        self._bm25 = _StoredBM25(store, self.config.bm25_language) if self.config.use_bm25 else None  # type: ignore[assignment]
        self._shape: Tuple[int, float] = (0, 1.0)
        self._shape_read_at = float("-inf")
        self._beta_value = self._resolve_beta()
        BaseRetriever.__init__(self, callback_manager=callback_manager, verbose=verbose)

    def collection_shape(self) -> Tuple[int, float]:
        if time.monotonic() - self._shape_read_at > SHAPE_TTL_S:
            (count, pages), = self._store.rows(SHAPE_SQL)
            self._shape = (int(count), float(pages or 1.0))
            if self._reads_titles():
                self._read_titles()
            self._shape_read_at = time.monotonic()
        return self._shape

    def with_settings(self, **settings: Any) -> "PostgresMultiRouteRetriever":
        clone = copy.copy(self)
        clone.config = updated(self.config, settings)
        clone._bm25 = _StoredBM25(self._store, clone.config.bm25_language) if clone.config.use_bm25 else None  # type: ignore[assignment]
        clone._beta_value = clone._resolve_beta()
        return clone

    # -- routes: one statement a question ------------------------------------------------
    def _title_extra(self) -> float:
        if self.keyword_extractor.include_document_keywords:
            return self.config.document_keyword_weight - 1.0
        return 0.0

    def document_names(self) -> Mapping[str, Tuple[Tuple[str, ...], ...]]:
        # The stored titles, read with the collection's shape; names re-extracted only when
        # the titles changed (another process may have added a document).
        if not self._reads_titles():
            return {}
        self.collection_shape()
        return self._names_of_titles_read[1]

    def _read_titles(self) -> None:
        titles = tuple(title for title, in self._store.rows(TITLES_SQL))
        if titles != self._names_of_titles_read[0]:
            self._names_of_titles_read = (titles, title_match.document_names(self._title_keywords_of(list(titles))))

    def _keyword_counts(self, query: QueryBundle) -> Tuple[List[str], Dict[str, float]]:
        if not self.config.use_keywords:
            return [], {}
        keywords, wanted = self._query_keywords(query)
        if not wanted:
            return keywords, {}
        rows = self._store.rows(KEYWORD_SQL, kw=wanted, tw=list(self._title_wanted(wanted)), extra=self._title_extra())
        return keywords, {node_id: float(score) for node_id, score in rows}

    def _embedding(self, query: QueryBundle) -> Optional[List[float]]:
        if self._vector_retriever is None:
            return None
        if query.embedding is not None:
            return list(query.embedding)
        # As VectorIndexRetriever embeds a question that comes without its embedding.
        return self._vector_retriever._embed_model.get_agg_embedding_from_queries(query.embedding_strs)

    def _inputs(self, query: QueryBundle, n: int, **more: Any) -> Dict[str, Any]:
        """What the statements need of a question: its embedding, BM25 tokens and keywords."""
        terms = self._bm25.tokenizer.query(query.query_str or "") if self._bm25 is not None and self.config.use_bm25 else []
        wanted: List[str] = []
        if self.config.use_keywords:
            _, wanted = self._query_keywords(query)
        title = list(self._title_wanted(wanted)) if wanted else []
        return _params(self._embedding(query), terms, wanted, title, self._title_extra(), n, **more)

    def _statement_settings(self) -> Dict[str, str]:
        # The session's hnsw.ef_search is the store's; a retriever asking for more candidates
        # than that raises it for its statement (HNSW returns at most ef_search rows).
        if self._ef_search > self._store.settings.hnsw_ef_search:
            return {"hnsw.ef_search": str(self._ef_search)}
        return {}

    def _route_failed_all(self, query: str, exc: BaseException) -> List[NodeWithScore]:
        errors: Dict[str, BaseException] = {}
        for name in (VECTOR, BM25, KEYWORDS):
            self._route_failed(name, exc, errors, query)
        return self._finish(query, {}, {}, {}, {}, errors)

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        query = query_bundle.query_str or ""
        if not query.strip():
            return []
        try:
            params = self._inputs(query_bundle, self.config.candidates_per_route)
            scores = _by_route(self._store.rows(ROUTES_SQL, _settings=self._statement_settings(), **params))
        except Exception as exc:  # noqa: BLE001 - reported as every route's failure, as MultiRouteRetriever does
            return self._route_failed_all(query, exc)
        return self._finish(query, scores[VECTOR], {}, scores[BM25], scores[KEYWORDS], {})

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        query = query_bundle.query_str or ""
        if not query.strip():
            return []
        try:
            # Embedding and keyword extraction are CPU work: off the event loop.
            params = await asyncio.to_thread(self._inputs, query_bundle, self.config.candidates_per_route)
            rows = await self._store.arows(ROUTES_SQL, _settings=self._statement_settings(), **params)
            scores = _by_route(rows)
        except Exception as exc:  # noqa: BLE001
            return await asyncio.to_thread(self._route_failed_all, query, exc)
        return await asyncio.to_thread(self._finish, query, scores[VECTOR], {}, scores[BM25], scores[KEYWORDS], {})

    def _results(self, fused, vector, bm25, counts, vector_nodes) -> List[NodeWithScore]:
        # The results' nodes are read in one query, not one per node.
        missing = [node_id for node_id, _ in fused if node_id not in vector_nodes]
        found = {**self._store.nodes(missing), **vector_nodes} if missing else vector_nodes
        return super()._results(fused, vector, bm25, counts, found)

    # -- one document's nodes (DocumentFocusRetriever): one statement for every score --------
    def nodes_by_id(self, node_ids: Sequence[str]) -> Dict[str, BaseNode]:
        return self._store.nodes(list(node_ids))

    def document_node_ids(self, document_id: str) -> List[str]:
        return [node_id for node_id, in self._store.rows(DOCUMENT_NODES_SQL, document_id=document_id)]

    def scores_within(self, query: Any, node_ids: Sequence[str]) -> Dict[str, Dict[str, float]]:
        bundle = QueryBundle(query) if isinstance(query, str) else query
        if not node_ids:
            return {VECTOR: {}, BM25: {}, KEYWORDS: {}}
        params = self._inputs(bundle, 0, ids=list(node_ids))
        return _by_route(self._store.rows(WITHIN_SQL, **params))

    def full_ranking(self, query: Any) -> List[str]:
        raise NotImplementedError(
            "full_ranking ranks every node of the collection; on the PostgreSQL store use retrieve() "
            "with a larger similarity_top_k"
        )

    def persist(self, persist_dir: Any) -> None:
        raise NotImplementedError("the PostgreSQL routes are saved by every write; there is nothing to persist")
