"""The multi-route retriever served by PostgreSQL: every route one query, nothing in memory.

[`PostgresMultiRouteRetriever`][llama_index_hiqa.storage.backends.pg_routes.PostgresMultiRouteRetriever] builds HiQA's Multi-Route Retriever ("HiQA: A Hierarchical
Contextual Augmentation RAG for Multi-Documents QA" (Chen et al.), §Multi-Route Retriever)
with the routes answered by the database of [`PostgresStore`][llama_index_hiqa.storage.postgres.PostgresStore]:

* vector — pgvector's HNSW index of LlamaIndex's ``PGVectorStore`` table (cosine);
* BM25 — Okapi BM25 over the stored term statistics (``pg_schema.BM25_ROUTE_SQL``);
* critical keywords — ``|C|`` per node from the keyword postings' primary key (index-only).

Each route is an object of the [`Route`][llama_index_hiqa.retrievers.routes.Route] interface
that can answer alone ([`PostgresBM25Route`][llama_index_hiqa.storage.backends.pg_routes.PostgresBM25Route], [`PostgresKeywordRoute`][llama_index_hiqa.storage.backends.pg_routes.PostgresKeywordRoute], the vector
route over ``PGVectorStore``); [`PostgresRouteSet`][llama_index_hiqa.storage.backends.pg_routes.PostgresRouteSet] asks a question's three routes in a
SQL statement each, sent at once on pooled connections (``VECTOR_ROUTE_SQL``,
``BM25_ROUTE_SQL``, ``KEYWORD_ROUTE_SQL``: the server runs them in processes of their own, so a
question waits for the slowest route, not the sum),
or in one (``ROUTES_SQL``, the same rows) when asked not to be concurrent, and the scores of
every node of a document for the document focus in another (``WITHIN_SQL``). [`PostgresMultiRouteRetriever`][llama_index_hiqa.storage.backends.pg_routes.PostgresMultiRouteRetriever] builds the
ordinary [`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever] composed of these parts
(`PostgresRouteParts`): fusion, score normalisation and the per-node route scores are
its own; the parts neither rank every node nor persist to a folder (every write is saved by
the database), so ``full_ranking`` and ``persist`` raise ``NotImplementedError`` there; a failing statement fails the routes it answers. What
another process commits is seen by the next query; the collection's shape and titles are
re-read every few seconds. ``aretrieve`` sends the same statements at once on the asyncpg pool.
"""

from __future__ import annotations

import asyncio
import copy
import time
from concurrent.futures import wait
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, QueryBundle

from llama_index_hiqa.indexes.keyword_index import KeywordIndex
from llama_index_hiqa.retrievers import title_match
from llama_index_hiqa.retrievers.keyword_route import KeywordRoute
from llama_index_hiqa.retrievers.multi_route import MultiRouteRetriever
from llama_index_hiqa.retrievers.node_collection import NodeCollection
from llama_index_hiqa.retrievers.route_parts import RouteParts
from llama_index_hiqa.retrievers.routes import QuestionKeywords, RouteScores, RouteSet, VectorRoute, route_failed
from llama_index_hiqa.retrievers.settings import BM25, KEYWORDS, ROUTES, VECTOR, MultiRouteSettings, RouteFusionSettings
from llama_index_hiqa.retrievers.store_vectors import identity
from llama_index_hiqa.settings import updated
from llama_index_hiqa.storage.pg_schema import (
    BM25_ROUTE_SQL,
    DOCUMENT_NODES_SQL,
    KEYWORD_FEW_POSTINGS,
    KEYWORD_ROUTE_SQL,
    KEYWORD_SQL,
    PROBE_POSTINGS,
    RARE_POSTINGS,
    ROUTES_SQL,
    SHAPE_SQL,
    TITLES_SQL,
    VECTOR_ROUTE_SQL,
    WITHIN_SQL,
    BM25Tokenizer,
)
from llama_index_hiqa.storage.postgres import PostgresStore
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

SHAPE_TTL_S = 5.0


class _StoredNodes(Mapping[str, BaseNode]):
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


def _vector_literal(embedding: Optional[Sequence[float]]) -> Optional[str]:
    return None if embedding is None else "[" + ",".join(repr(float(x)) for x in embedding) + "]"


def _params(embedding: Optional[Sequence[float]], terms: Sequence[str], keywords: Sequence[str],
            title_keywords: Sequence[str], extra: float, n: int, **more: Any) -> Dict[str, Any]:
    """The parameters of ROUTES_SQL / WITHIN_SQL (a route without input returns no rows)."""
    return {"qvec": _vector_literal(embedding), "use_vector": embedding is not None, "terms": list(terms),
            "kw": list(keywords), "tw": list(title_keywords), "extra": float(extra), "n": int(n),
            "rare_postings": RARE_POSTINGS, "probe_postings": PROBE_POSTINGS, "few_postings": KEYWORD_FEW_POSTINGS,
            **more}


def _by_route(rows: Sequence[Tuple[str, str, float]]) -> Dict[str, RouteScores]:
    out: Dict[str, RouteScores] = {VECTOR: RouteScores(), BM25: RouteScores(), KEYWORDS: RouteScores()}
    names = {"v": VECTOR, "b": BM25, "k": KEYWORDS}
    for route, node_id, score in rows:
        out[names[route]][node_id] = float(score)
    return out


class PostgresCollection(NodeCollection):
    """The collection of a [`PostgresStore`][llama_index_hiqa.storage.postgres.PostgresStore]: ids, one document's nodes, the shape and the
    titles read from the database (the shape and titles at most every ``SHAPE_TTL_S``)."""

    def __init__(self, store: PostgresStore) -> None:
        super().__init__(_StoredNodes(store))
        self._store = store
        self._shape_read_at = float("-inf")
        self._titles: Tuple[str, ...] = ()
        self._titles_read_at = float("-inf")

    def shape(self) -> Tuple[int, float]:
        """``(|D|, average pages per document)`` of the stored collection."""
        if time.monotonic() - self._shape_read_at > SHAPE_TTL_S:
            (count, pages), = self._store.rows(SHAPE_SQL)
            self._shape = (int(count), float(pages or 1.0))
            self._shape_read_at = time.monotonic()
        return self._shape

    def titles(self) -> Tuple[str, ...]:
        """The stored document titles (another process may have added a document)."""
        if time.monotonic() - self._titles_read_at > SHAPE_TTL_S:
            self._titles = tuple(title for title, in self._store.rows(TITLES_SQL))
            self._titles_read_at = time.monotonic()
        return self._titles

    def nodes_by_id(self, node_ids: Sequence[str]) -> Dict[str, BaseNode]:
        """The stored nodes of ``node_ids``, in one query.

        Args:
            node_ids: the node ids.

        Returns:
            Node id -> node, for the ids stored.
        """
        return self._store.nodes(list(node_ids))

    def document_node_ids(self, document_id: str) -> List[str]:
        """The ids of every node of ``document_id``, in one query.

        Args:
            document_id: the document id.

        Returns:
            Its node ids.
        """
        return [node_id for node_id, in self._store.rows(DOCUMENT_NODES_SQL, document_id=document_id)]


class PostgresBM25Route:
    """The BM25 route: Okapi BM25 over the stored term statistics.

    Args:
        store: the PostgreSQL store.
        language: the stop-word language of the tokenizer.
    """

    name = BM25

    def __init__(self, store: PostgresStore, language: str) -> None:
        self.store = store
        self.tokenizer = BM25Tokenizer(language)

    @property
    def node_ids(self) -> List[str]:
        """Every stored node id."""
        return list(_StoredNodes(self.store))

    def terms(self, query: QueryBundle) -> List[str]:
        """The question's BM25 terms.

        Args:
            query: the question.

        Returns:
            Its terms (tokenised and stemmed as the nodes were).
        """
        return self.tokenizer.query(query.query_str or "")

    def top(self, query: str, n: int) -> Dict[str, float]:
        """The best ``n`` nodes for the question text ``query``: ``{node id: BM25 score}``.

        Args:
            query: the question text.
            n: how many nodes.

        Returns:
            Node id -> BM25 score.
        """
        return self.scores(QueryBundle(query), n)

    def scores(self, query: QueryBundle, n: int) -> Dict[str, float]:
        """The route's best ``n`` for ``query``, in one statement.

        Args:
            query: the question.
            n: how many nodes at most.

        Returns:
            ``{node id: BM25 score}``.
        """
        terms = self.terms(query)
        if not terms:
            return {}
        return _by_route(self.store.rows(BM25_ROUTE_SQL, **_params(None, terms, [], [], 0.0, n)))[BM25]

    async def ascores(self, query: QueryBundle, n: int) -> Dict[str, float]:
        """[`scores`][llama_index_hiqa.storage.backends.pg_routes.PostgresBM25Route.scores] on the asyncpg pool.

        Args:
            query: the question.
            n: how many nodes.

        Returns:
            Node id -> BM25 score (``{}`` when the question has no terms).
        """
        terms = self.terms(query)
        if not terms:
            return {}
        return _by_route(await self.store.arows(BM25_ROUTE_SQL, **_params(None, terms, [], [], 0.0, n)))[BM25]

    def scores_within(self, query: QueryBundle, node_ids: Sequence[str]) -> Dict[str, float]:
        """The BM25 scores of ``node_ids``, in one statement.

        Args:
            query: the question.
            node_ids: the nodes to score.

        Returns:
            Node id -> BM25 score (``{}`` when no node is given).
        """
        if not node_ids:
            return {}
        params = _params(None, self.terms(query), [], [], 0.0, 0, ids=list(node_ids))
        return _by_route(self.store.rows(WITHIN_SQL, **params))[BM25]


class PostgresKeywordRoute(KeywordRoute):
    """The keyword route: ``|C|`` per node from the keyword postings (``hiqa_keywords``), the title weight
    in the same statement; the document names from the stored titles.

    Args:
        store: the PostgreSQL store.
        collection: the store's collection (its titles).
        extractor: the keyword extractor.
        config: the retriever's settings.
    """

    def __init__(
        self, store: PostgresStore, collection: PostgresCollection, extractor: CriticalKeywordExtractor,
        config: RouteFusionSettings,
    ) -> None:
        super().__init__(extractor, KeywordIndex(), config)  # the index is unused: the route is a query
        self._store = store
        self._collection = collection
        self._names_of_titles_read: Tuple[Tuple[str, ...], Dict[str, Tuple[Tuple[str, ...], ...]]] = ((), {})

    def with_config(
        self, config: RouteFusionSettings, nodes: Sequence[BaseNode] = (), index: Optional[KeywordIndex] = None
    ) -> "PostgresKeywordRoute":
        """This route under other settings (the titles are the database's: nothing to read).

        Args:
            config: the new settings.
            nodes: unused (the signature of ``KeywordRoute.with_config``).
            index: unused.

        Returns:
            The new route (this one is unchanged).
        """
        clone = copy.copy(self)
        clone.config = config
        return clone

    def document_names(self) -> Mapping[str, Tuple[Tuple[str, ...], ...]]:
        """The names of the stored titles, extracted again only when the titles changed."""
        if not self.reads_titles():
            return {}
        titles = self._collection.titles()
        if titles != self._names_of_titles_read[0]:
            names = title_match.document_names(title_match.title_keyword_sets(self.extractor, list(titles)))
            self._names_of_titles_read = (titles, names)
        return self._names_of_titles_read[1]

    def title_extra(self) -> float:
        """How much more a keyword of the node's title counts (``document_keyword_weight − 1``)."""
        if self.extractor.include_document_keywords:
            return self.config.document_keyword_weight - 1.0
        return 0.0

    def counts(self, normalized: Sequence[str]) -> Dict[str, float]:
        """``|C|`` per node holding any of ``normalized``, with the title weight, in one query.

        Args:
            normalized: the question's normalised keywords.

        Returns:
            ``{node id: |C|}``.
        """
        if not normalized:
            return {}
        rows = self._store.rows(
            KEYWORD_SQL, kw=list(normalized), tw=list(self.title_wanted(normalized)), extra=self.title_extra()
        )
        return {node_id: float(score) for node_id, score in rows}


class PostgresRouteSet(RouteSet):
    """The three routes of a question in a statement each, sent at once (``VECTOR_ROUTE_SQL``,
    ``BM25_ROUTE_SQL``, ``KEYWORD_ROUTE_SQL``) or in one (``ROUTES_SQL``), the scores of given nodes in another
    (``WITHIN_SQL``); a failing statement fails the routes it answers.

    Args:
        parts: the retriever's `PostgresRouteParts`.
        bm25: the BM25 route when on.
        keywords: the keyword route when on.
    """

    def __init__(
        self, parts: "PostgresRouteParts", bm25: Optional[PostgresBM25Route], keywords: Optional[PostgresKeywordRoute]
    ) -> None:
        super().__init__(parts.vector, bm25, keywords)
        self.parts = parts
        self.bm25_route = bm25
        self.keyword_route = keywords

    def _embedding(self, query: QueryBundle) -> Optional[List[float]]:
        vector = self.parts.vector
        if vector is None:
            return None
        if query.embedding is not None:
            return list(query.embedding)
        # As VectorIndexRetriever embeds a question that comes without its embedding.
        embedding: List[float] = vector.retriever._embed_model.get_agg_embedding_from_queries(query.embedding_strs)  # type: ignore[attr-defined]
        return embedding

    def _text_inputs(
        self, query: QueryBundle, n: int, keywords: Optional[QuestionKeywords], **more: Any
    ) -> Tuple[Dict[str, Any], Optional[QuestionKeywords]]:
        """The statements' parameters but the vector's (see `inputs`)."""
        bm25, keyword_route = self.bm25_route, self.keyword_route
        terms = bm25.terms(query) if bm25 is not None else []
        if keyword_route is None:
            keywords = None
        elif keywords is None:
            keywords = keyword_route.question_keywords(query)
        wanted = keywords.normalized if keywords is not None else []
        title = list(keyword_route.title_wanted(wanted)) if keyword_route is not None and wanted else []
        extra = self.parts.keyword_route().title_extra()
        return _params(None, terms, wanted, title, extra, n, **more), keywords

    @staticmethod
    def _with_vector(params: Dict[str, Any], embedding: Optional[Sequence[float]]) -> Dict[str, Any]:
        return {**params, "qvec": _vector_literal(embedding), "use_vector": embedding is not None}

    def inputs(
        self, query: QueryBundle, n: int, keywords: Optional[QuestionKeywords] = None, **more: Any
    ) -> Tuple[Dict[str, Any], Optional[QuestionKeywords]]:
        """What the statements need of a question: its embedding, BM25 terms and keywords.

        Args:
            query: the question.
            n: candidates per route.
            keywords: the question's keywords when already extracted (``None``: extracted
                here when the keyword route is on).
            **more: further statement parameters (``ids`` of ``WITHIN_SQL``).

        Returns:
            The statement's parameters, and the question's keywords (``None`` when the keyword
                route is off).
        """
        params, keywords = self._text_inputs(query, n, keywords, **more)
        return self._with_vector(params, self._embedding(query)), keywords

    @staticmethod
    def _answered(rows: Sequence[Tuple[str, str, float]], keywords: Optional[QuestionKeywords]) -> Dict[str, RouteScores]:
        scores = _by_route(rows)
        scores[KEYWORDS].keywords = keywords
        return scores

    def _statement_settings(self) -> Dict[str, str]:
        # The session's hnsw.ef_search is the store's; a retriever asking for more candidates
        # than that raises it for its statement (HNSW returns at most ef_search rows).
        if self.parts.ef_search > self.parts.store.settings.hnsw_ef_search:
            return {"hnsw.ef_search": str(self.parts.ef_search)}
        return {}

    @staticmethod
    def _failed(exc: BaseException, errors: Dict[str, BaseException], query: str) -> Dict[str, RouteScores]:
        for name in ROUTES:  # one statement answers every route: it failed them all
            route_failed(name, exc, errors, query)
        return {name: RouteScores() for name in ROUTES}

    @staticmethod
    def _text_statements(params: Mapping[str, Any]) -> Dict[str, str]:
        """The statements a question's inputs call for, but the vector's: route -> statement."""
        statements = {}
        if params["terms"]:
            statements[BM25] = BM25_ROUTE_SQL
        if params["kw"]:
            statements[KEYWORDS] = KEYWORD_ROUTE_SQL
        return statements

    def _joined(
        self, answers: Mapping[str, Any], keywords: Optional[QuestionKeywords], errors: Dict[str, BaseException],
        query: str,
    ) -> Dict[str, RouteScores]:
        """Each route's statement's rows (or the exception it raised) as the routes' scores: a
        failed statement fails its route; |C| of the other routes' candidates is kept only when
        the keyword route's own statement answered."""
        rows: List[Tuple[str, str, float]] = []
        for name, answer in answers.items():
            if isinstance(answer, BaseException):
                route_failed(name, answer, errors, query)
            else:
                rows += answer
        if isinstance(answers.get(KEYWORDS), BaseException):
            rows = [row for row in rows if row[0] != "k"]
        return self._answered(rows, keywords)

    def ask(
        self, query: QueryBundle, n: int, errors: Dict[str, BaseException], concurrent: bool = True,
        keywords: Optional[QuestionKeywords] = None,
    ) -> Dict[str, RouteScores]:
        """Every route's best ``n`` for ``query`` (see ``RouteSet.ask``): a statement a route
        sent at once on pooled connections (``VECTOR_ROUTE_SQL``, ``BM25_ROUTE_SQL``,
        ``KEYWORD_ROUTE_SQL``; the question is embedded while its keywords are extracted), or
        one statement (``ROUTES_SQL``) when not ``concurrent``; the same rows either way.

        Args:
            query: the question.
            n: candidates per route.
            errors: filled with the failures of this question alone (route name -> error).
            concurrent: the routes' statements at once (unless the store's
                ``concurrent_routes`` is off); ``False``: one statement (one connection, one
                server process: cheaper where the caller asks many questions in a row, as the
                evaluation does).
            keywords: the question's keywords when already extracted.

        Returns:
            Route name -> its scores (empty for a route whose statement failed).
        """
        text = query.query_str or ""
        store = self.parts.store
        if not (concurrent and store.settings.concurrent_routes):
            try:
                params, keywords = self.inputs(query, n, keywords)
                rows = store.rows(ROUTES_SQL, _settings=self._statement_settings(), **params)
                return self._answered(rows, keywords)
            except Exception as exc:  # noqa: BLE001 - reported as every route's failure
                return self._failed(exc, errors, text)
        # The store's threads, shared by every question (a pool a question cost its threads'
        # start and end each time); this thread sends the vector statement itself.
        pool = store.statement_threads
        embedded = pool.submit(self._embedding, query)
        try:
            params, keywords = self._text_inputs(query, n, keywords)
        except Exception as exc:  # noqa: BLE001 - the question's inputs: every route fails
            wait([embedded])
            return self._failed(exc, errors, text)
        sent = {name: pool.submit(store.rows, sql, **params) for name, sql in self._text_statements(params).items()}
        answers: Dict[str, Any] = {}
        try:
            embedding = embedded.result()
            if embedding is not None:
                answers[VECTOR] = store.rows(
                    VECTOR_ROUTE_SQL, _settings=self._statement_settings(), **self._with_vector(params, embedding)
                )
        except Exception as exc:  # noqa: BLE001 - reported as the vector route's failure
            answers[VECTOR] = exc
        for name, future in sent.items():
            try:
                answers[name] = future.result()
            except Exception as exc:  # noqa: BLE001 - reported as this route's failure
                answers[name] = exc
        return self._joined(answers, keywords, errors, text)

    async def aask(
        self, query: QueryBundle, n: int, errors: Dict[str, BaseException], keywords: Optional[QuestionKeywords] = None
    ) -> Dict[str, RouteScores]:
        """[`ask`][llama_index_hiqa.storage.backends.pg_routes.PostgresRouteSet.ask] on the asyncpg pool, the routes' statements at once unless
        the store's ``concurrent_routes`` is off (the embedding and keywords off the event loop).

        Args:
            query: the question.
            n: candidates per route.
            errors: filled with the failures of this question alone (route name -> error).
            keywords: the question's keywords when already extracted.

        Returns:
            Route name -> its scores (empty for a route whose statement failed).
        """
        text = query.query_str or ""
        store = self.parts.store
        if not store.settings.concurrent_routes:
            try:
                params, keywords = await asyncio.to_thread(self.inputs, query, n, keywords)
                rows = await store.arows(ROUTES_SQL, _settings=self._statement_settings(), **params)
                return self._answered(rows, keywords)
            except Exception as exc:  # noqa: BLE001 - reported as every route's failure
                return self._failed(exc, errors, text)
        embedded = asyncio.ensure_future(asyncio.to_thread(self._embedding, query))
        try:
            params, keywords = await asyncio.to_thread(self._text_inputs, query, n, keywords)
        except Exception as exc:  # noqa: BLE001 - the question's inputs: every route fails
            await asyncio.gather(embedded, return_exceptions=True)
            return self._failed(exc, errors, text)
        sent = {name: asyncio.ensure_future(store.arows(sql, **params)) for name, sql in self._text_statements(params).items()}
        answers: Dict[str, Any] = {}
        try:
            embedding = await embedded
            if embedding is not None:
                answers[VECTOR] = await store.arows(
                    VECTOR_ROUTE_SQL, _settings=self._statement_settings(), **self._with_vector(params, embedding)
                )
        except Exception as exc:  # noqa: BLE001 - reported as the vector route's failure
            answers[VECTOR] = exc
        answers.update(zip(sent, await asyncio.gather(*sent.values(), return_exceptions=True)))
        return self._joined(answers, keywords, errors, text)

    def scores_within(
        self, query: QueryBundle, node_ids: Sequence[str], skip: Sequence[str] = (),
        keywords: Optional[QuestionKeywords] = None,
    ) -> Dict[str, Dict[str, float]]:
        """Every route's scores of ``node_ids`` in one statement (see ``RouteSet.scores_within``).

        Args:
            query: the question.
            node_ids: the nodes to score.
            skip: routes not to ask (one statement answers every route: accepted, not used).
            keywords: the question's keywords when already extracted.

        Returns:
            Route name -> (node id -> score).
        """
        if not node_ids:
            return {VECTOR: {}, BM25: {}, KEYWORDS: {}}
        params, _ = self.inputs(query, 0, keywords, ids=list(node_ids))
        return dict(_by_route(self.parts.store.rows(WITHIN_SQL, **params)))


@dataclass
class PostgresRouteParts(RouteParts):
    """The collection and routes of a [`PostgresStore`][llama_index_hiqa.storage.postgres.PostgresStore] (nothing held in memory).

    Args:
        store: the PostgreSQL store (after the [`RouteParts`][llama_index_hiqa.retrievers.route_parts.RouteParts] fields).
        ef_search: the HNSW ``ef_search`` of the retriever's statements.
    """

    store: PostgresStore = field(kw_only=True)
    ef_search: int = field(kw_only=True)
    # Every route is a query: ranking every node is not one, and every write is saved already.
    ranks_every_node: ClassVar[bool] = False
    persists_to_folder: ClassVar[bool] = False

    @classmethod
    def open(
        cls, store: PostgresStore, vector_retriever: Optional[BaseRetriever], extractor: CriticalKeywordExtractor,
        config: RouteFusionSettings, ef_search: int,
    ) -> "PostgresRouteParts":
        """The parts over ``store``.

        Args:
            store: the PostgreSQL store.
            vector_retriever: the ``PGVectorStore`` retriever.
            extractor: the keyword extractor.
            config: the retriever's settings.
            ef_search: the HNSW ``ef_search`` of the retriever's statements.

        Returns:
            The parts.
        """
        collection = PostgresCollection(store)
        # pgvector's cosine ops give 1 − cosine distance: a cosine already.
        vector = VectorRoute(vector_retriever, collection.nodes, identity) if vector_retriever is not None else None
        bm25 = PostgresBM25Route(store, config.bm25_language) if config.use_bm25 else None
        keywords = PostgresKeywordRoute(store, collection, extractor, config)
        return cls(collection, vector, bm25, keywords, store=store, ef_search=ef_search)

    def keyword_route(self) -> PostgresKeywordRoute:
        """The keyword route, as the PostgreSQL one it is (its title weight goes into the statement).

        Returns:
            The route.

        Raises:
            TypeError: the parts hold another kind of keyword route.
        """
        route = self.keywords
        if not isinstance(route, PostgresKeywordRoute):  # open() and with_config() make one
            raise TypeError(f"PostgresRouteParts holds a {type(route).__name__} keyword route")
        return route

    def route_set(self, config: RouteFusionSettings) -> PostgresRouteSet:
        """The routes asked under ``config``, in one statement.

        Args:
            config: the retriever's settings.

        Returns:
            The route set.
        """
        bm25 = self.bm25 if config.use_bm25 and isinstance(self.bm25, PostgresBM25Route) else None
        return PostgresRouteSet(self, bm25, self.keyword_route() if config.use_keywords else None)

    def with_config(self, old: RouteFusionSettings, new: RouteFusionSettings) -> "PostgresRouteParts":
        """The parts under other settings (the BM25 tokenizer of the new language).

        Args:
            old: the settings in use (unused: the parts hold nothing that depends on them).
            new: the new settings.

        Returns:
            The new parts (these are unchanged).
        """
        clone = copy.copy(self)
        clone.bm25 = PostgresBM25Route(self.store, new.bm25_language) if new.use_bm25 else None
        clone.keywords = self.keyword_route().with_config(new)
        return clone


def PostgresMultiRouteRetriever(  # noqa: N802 - a constructor: named for the retriever it builds
    store: PostgresStore,
    vector_retriever: BaseRetriever,
    keyword_extractor: Optional[CriticalKeywordExtractor] = None,
    config: Optional[MultiRouteSettings] = None,
    callback_manager: Optional[CallbackManager] = None,
    verbose: bool = False,
    ef_search: Optional[int] = None,
    **settings: Any,
) -> MultiRouteRetriever:
    """A [`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever] whose routes are SQL queries on a
    [`PostgresStore`][llama_index_hiqa.storage.postgres.PostgresStore] (`PostgresRouteParts`) and whose vector route is a
    ``PGVectorStore`` retriever. Build it with the same settings as the in-memory retriever;
    ``full_ranking`` and ``persist`` raise ``NotImplementedError`` on it (every route is a query,
    every write is saved by the database).

    Args:
        store: the PostgreSQL store.
        vector_retriever: the ``PGVectorStore`` retriever.
        keyword_extractor: the keyword extractor (default: ``CriticalKeywordExtractor()``).
        config: [`MultiRouteSettings`][llama_index_hiqa.retrievers.settings.MultiRouteSettings].
        callback_manager: LlamaIndex's callback manager.
        verbose: LlamaIndex's verbose flag.
        ef_search: the HNSW ``ef_search`` of the statements (at least the store's).
        **settings: [`MultiRouteSettings`][llama_index_hiqa.retrievers.settings.MultiRouteSettings] fields.

    Returns:
        The retriever.
    """
    config = updated(config, settings, model_class=MultiRouteSettings)
    extractor = keyword_extractor or CriticalKeywordExtractor()
    ef = max(ef_search or 0, store.settings.hnsw_ef_search)
    parts = PostgresRouteParts.open(store, vector_retriever, extractor, config, ef)
    return MultiRouteRetriever(
        keyword_extractor=extractor, config=config, callback_manager=callback_manager, verbose=verbose, route_parts=parts
    )
