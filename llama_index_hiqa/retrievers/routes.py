"""The multi-route retriever's routes: one small interface, asked together by a route set.

HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA" (Chen et al.),
§Multi-Route Retriever) retrieves by three routes (vector, BM25, critical keywords) and fuses
their scores. Each route is an object with the [`Route`][llama_index_hiqa.retrievers.routes.Route] interface: the best ``n`` nodes
for a question as ``{node id: score}``, an async twin, and the scores of given nodes (the
document focus). A [`RouteSet`][llama_index_hiqa.retrievers.routes.RouteSet] asks every route of a question at once and records which
failed; a store that answers every route in one round trip (PostgreSQL) gives its own set.

Implementations: [`VectorRoute`][llama_index_hiqa.retrievers.routes.VectorRoute] (any LlamaIndex retriever, scores read as cosines),
`BM25Route` (bm25s), and
[`KeywordRoute`][llama_index_hiqa.retrievers.keyword_route.KeywordRoute] (critical keywords); the
embedded store's are in `embedded_routes`, PostgreSQL's in
`pg_routes`.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Callable, Dict, List, Mapping, NamedTuple, Optional, Protocol, Sequence, TypeVar, runtime_checkable

import llama_index.core.instrumentation as instrument
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

from llama_index_hiqa.events import RouteFailedEvent
from llama_index_hiqa.retrievers.settings import BM25, KEYWORDS, ROUTES, VECTOR
from llama_index_hiqa.retrievers.store_vectors import Scale, collect, identity, scores_of_nodes, with_top_k

logger = logging.getLogger(__name__)
dispatcher = instrument.get_dispatcher(__name__)

T = TypeVar("T")


class QuestionKeywords(NamedTuple):
    """A question's critical keywords, with the document names it abbreviates, and their
    normalised forms, once each: extracted once a question by the keyword route and passed to
    every later step that matches them (the document focus, the full ranking)."""

    keywords: List[str]
    normalized: List[str]


class RouteScores(Dict[str, float]):
    """``{node id: score}`` of one route for one question, with what the route learned on the
    way: ``nodes`` (nodes it returned, so results need not read them again) and ``keywords``
    (the keyword route's: the question's keywords, `QuestionKeywords`)."""

    def __init__(
        self,
        scores: Optional[Mapping[str, float]] = None,
        nodes: Optional[Dict[str, BaseNode]] = None,
        keywords: Optional[QuestionKeywords] = None,
    ) -> None:
        super().__init__(scores or {})
        self.nodes: Dict[str, BaseNode] = nodes or {}
        self.keywords: Optional[QuestionKeywords] = keywords

    @classmethod
    def of(cls, scores: Mapping[str, float]) -> "RouteScores":
        """``scores`` as route scores (itself when it is one already).

        Args:
            scores: a route's ``{node id: score}``.

        Returns:
            The route scores.
        """
        return scores if isinstance(scores, RouteScores) else cls(scores)


@runtime_checkable
class Route(Protocol):
    """What a retrieval route answers (a folder, embedded or PostgreSQL implementation)."""

    name: str

    def scores(self, query: QueryBundle, n: int) -> Dict[str, float]:
        """The route's best ``n`` nodes for ``query``.

        Args:
            query: the question.
            n: how many nodes at most.

        Returns:
            ``{node id: score}``.
        """
        ...

    async def ascores(self, query: QueryBundle, n: int) -> Dict[str, float]:
        """[`scores`][llama_index_hiqa.retrievers.routes.Route.scores] without blocking the event loop.

        Args:
            query: the question.
            n: how many nodes at most.

        Returns:
            ``{node id: score}``.
        """
        ...

    def scores_within(self, query: QueryBundle, node_ids: Sequence[str]) -> Dict[str, float]:
        """The route's scores of exactly ``node_ids`` (collection-wide statistics).

        Args:
            query: the question.
            node_ids: the nodes to score.

        Returns:
            ``{node id: score}``.
        """
        ...


@runtime_checkable
class KeywordScoring(Protocol):
    """The keyword route's interface: a [`Route`][llama_index_hiqa.retrievers.routes.Route] whose
    question keywords, extracted once, can be passed back to it."""

    name: str

    def question_keywords(self, query: QueryBundle) -> QuestionKeywords:
        """The question's keywords, extracted.

        Args:
            query: the question.

        Returns:
            Its keywords and their normalised forms.
        """
        ...

    def scores(self, query: QueryBundle, n: int = 0, keywords: Optional[QuestionKeywords] = None) -> RouteScores:
        """``|C|`` of the nodes holding the question's keywords (``keywords``: already extracted).

        Args:
            query: the question.
            n: how many nodes at most (the keyword route counts every match).
            keywords: the question's keywords, or ``None`` to extract them.

        Returns:
            ``{node id: |C|}`` with the keywords in ``.keywords``.
        """
        ...

    async def ascores(self, query: QueryBundle, n: int = 0, keywords: Optional[QuestionKeywords] = None) -> RouteScores:
        """[`scores`][llama_index_hiqa.retrievers.routes.KeywordScoring.scores] without blocking the event loop.

        Args:
            query: the question.
            n: how many nodes at most.
            keywords: the question's keywords, or ``None`` to extract them.

        Returns:
            ``{node id: |C|}``.
        """
        ...

    def scores_within(
        self, query: QueryBundle, node_ids: Sequence[str], keywords: Optional[QuestionKeywords] = None
    ) -> Dict[str, float]:
        """``|C|`` of exactly ``node_ids`` (the document focus's).

        Args:
            query: the question.
            node_ids: which nodes.
            keywords: already extracted, or ``None``.

        Returns:
            ``{node id: |C|}``.
        """
        ...


class VectorRoute:
    """The vector route: any LlamaIndex retriever, its scores read as cosines.

    Args:
        retriever: the vector retriever (``index.as_retriever``, any vector store).
        nodes: id -> node of the collection (for the restriction by documents, see
            `scores_of_nodes`).
        scale: how to read the store's scores as cosines (``store_vectors.cosine_scale``).
        keep_nodes: keep the returned nodes with the scores (``False`` for a store that returns
            id-only stand-ins).
    """

    name = VECTOR

    def __init__(
        self, retriever: BaseRetriever, nodes: Mapping[str, BaseNode], scale: Scale = identity, keep_nodes: bool = True
    ) -> None:
        self.retriever = retriever
        self.nodes = nodes
        self.scale = scale
        self.keep_nodes = keep_nodes
        # How the store restricts a query to given nodes, learned at the first scores_within.
        self.restriction: Optional[str] = None

    def _collect(self, results: Sequence[NodeWithScore]) -> RouteScores:
        scores = collect(results, self.scale)
        seen: Dict[str, BaseNode] = {}
        if self.keep_nodes:
            for result in results:
                seen.setdefault(result.node.node_id, result.node)
        return RouteScores(scores, nodes=seen)

    def scores(self, query: QueryBundle, n: int) -> RouteScores:
        """The ``n`` nearest nodes: ``{node id: cosine}`` (duplicates merged by id), with the
        returned nodes in ``.nodes``.

        Args:
            query: the question.
            n: how many nodes to ask the store for.

        Returns:
            The cosines by node id.
        """
        return self._collect(with_top_k(self.retriever, n).retrieve(query))

    async def ascores(self, query: QueryBundle, n: int) -> RouteScores:
        """[`scores`][llama_index_hiqa.retrievers.routes.VectorRoute.scores] through the retriever's own async path.

        Args:
            query: the question.
            n: how many nodes to ask the store for.

        Returns:
            The cosines by node id.
        """
        return self._collect(await with_top_k(self.retriever, n).aretrieve(query))

    def scores_within(self, query: QueryBundle, node_ids: Sequence[str]) -> Dict[str, float]:
        """The cosine of ``query`` with each of ``node_ids`` the store returns.

        Args:
            query: the question.
            node_ids: the nodes to score.

        Returns:
            ``{node id: cosine}``.
        """
        if not node_ids:
            return {}
        scores, self.restriction = scores_of_nodes(
            self.retriever, query, node_ids, self.nodes, self.scale,
            collection_size=len(self.nodes), restriction=self.restriction,
        )
        return scores


class RouteSet:
    """The routes of a retriever, asked together; a route that raises is logged in one line, reported
    ([`RouteFailedEvent`][llama_index_hiqa.events.RouteFailedEvent]) and answers nothing, the others
    still answer.

    Args:
        vector: the vector route, or ``None``.
        bm25: the BM25 route, or ``None`` (off).
        keywords: the critical-keyword route, or ``None`` (off).
    """

    def __init__(self, vector: Optional[Route], bm25: Optional[Route], keywords: Optional[KeywordScoring]) -> None:
        self.keywords = keywords
        self.routes: Dict[str, Optional[Route]] = {VECTOR: vector, BM25: bm25, KEYWORDS: keywords}

    def enabled(self) -> List[str]:
        """The names of the routes that are on.

        Returns:
            Route names in ``ROUTES`` order.
        """
        return [name for name in ROUTES if self.routes[name] is not None]

    def _calls(
        self, query: QueryBundle, n: int, keywords: Optional[QuestionKeywords]
    ) -> Dict[str, Callable[[], RouteScores]]:
        """Each route's question as a call (an empty answer for a route that is off)."""
        calls: Dict[str, Callable[[], RouteScores]] = {}
        for name, route in self.routes.items():
            if name == KEYWORDS and self.keywords is not None:
                calls[name] = partial(self.keywords.scores, query, n, keywords)
            elif route is not None:
                calls[name] = partial(_route_scores, route, query, n)
            else:
                calls[name] = RouteScores
        return calls

    def ask(
        self, query: QueryBundle, n: int, errors: Dict[str, BaseException], concurrent: bool = True,
        keywords: Optional[QuestionKeywords] = None,
    ) -> Dict[str, RouteScores]:
        """Every route's best ``n`` for ``query``, in threads (no event loop needed, so it also
        works inside notebooks).

        Args:
            query: the question.
            n: candidates per route.
            errors: filled with the failures of this question alone (route name -> error).
            concurrent: ask the routes in threads; ``False``: one after the other (cheaper
                where the caller asks many questions in a row, as the evaluation does).
            keywords: the question's keywords when already extracted (``None``: the keyword
                route extracts them).

        Returns:
            Route name -> its scores (empty for a route that is off or failed).
        """
        text = query.query_str or ""
        calls = self._calls(query, n, keywords)
        if not concurrent:
            return {name: self.guarded(name, call, errors, text, RouteScores()) for name, call in calls.items()}
        with ThreadPoolExecutor(max_workers=3) as pool:
            futures = {name: pool.submit(self.guarded, name, call, errors, text, RouteScores()) for name, call in calls.items()}
            return {name: future.result() for name, future in futures.items()}

    async def aask(
        self, query: QueryBundle, n: int, errors: Dict[str, BaseException], keywords: Optional[QuestionKeywords] = None
    ) -> Dict[str, RouteScores]:
        """[`ask`][llama_index_hiqa.retrievers.routes.RouteSet.ask] concurrently on the event loop (each route's ``ascores``).

        Args:
            query: the question.
            n: candidates per route.
            errors: filled with the failures of this question alone.
            keywords: the question's keywords when already extracted.

        Returns:
            Route name -> its scores.
        """
        text = query.query_str or ""

        async def guarded(name: str, route: Optional[Route]) -> RouteScores:
            if route is None:
                return RouteScores()
            try:
                if name == KEYWORDS and self.keywords is not None:
                    return await self.keywords.ascores(query, n, keywords)
                return RouteScores.of(await route.ascores(query, n))
            except Exception as exc:  # noqa: BLE001 - a failing route must not sink the others
                route_failed(name, exc, errors, text)
                return RouteScores()

        answers = await asyncio.gather(*(guarded(name, route) for name, route in self.routes.items()))
        return dict(zip(self.routes, answers))

    def scores_within(
        self, query: QueryBundle, node_ids: Sequence[str], skip: Sequence[str] = (),
        keywords: Optional[QuestionKeywords] = None,
    ) -> Dict[str, Dict[str, float]]:
        """Each route's scores of exactly ``node_ids`` (the document focus).

        Args:
            query: the question.
            node_ids: the nodes to score.
            skip: routes not to ask (they already failed on this question, and said so).
            keywords: the question's keywords when already extracted.

        Returns:
            Route name -> ``{node id: score}`` (empty for a route that is off or failed: a
                failure is logged and reported as in `ask`).
        """
        text = query.query_str or ""
        errors: Dict[str, BaseException] = {}  # the question's failures go with its results
        out: Dict[str, Dict[str, float]] = {}
        for name, route in self.routes.items():
            if route is None or not node_ids or name in skip:
                out[name] = {}
            elif name == KEYWORDS and self.keywords is not None:
                within = partial(self.keywords.scores_within, query, node_ids, keywords)
                out[name] = self.guarded(name, within, errors, text, {})
            else:
                out[name] = self.guarded(name, partial(route.scores_within, query, node_ids), errors, text, {})
        return out

    @staticmethod
    def guarded(name: str, func: Callable[[], T], errors: Dict[str, BaseException], query: str, empty: T) -> T:
        """``func()``, or ``empty`` when it raises (the failure recorded in ``errors``).

        Args:
            name: the route's name.
            func: the call.
            errors: route name -> error, filled on failure.
            query: the question text (for the event).
            empty: what a failure returns.

        Returns:
            What ``func`` returned, or ``empty``.
        """
        try:
            return func()
        except Exception as exc:  # noqa: BLE001 - a failing route must not sink the others
            route_failed(name, exc, errors, query)
            return empty


def _route_scores(route: Route, query: QueryBundle, n: int) -> RouteScores:
    return RouteScores.of(route.scores(query, n))


def route_failed(name: str, exc: BaseException, errors: Dict[str, BaseException], query: str) -> None:
    """Log a route's failure (one WARNING line naming the route and the cause, the traceback at
    DEBUG), record it in ``errors`` and send a ``RouteFailedEvent``.

    Args:
        name: the route's name.
        exc: what it raised.
        errors: route name -> error of this question.
        query: the question text.
    """
    # One line a question (a served app must not fill its log with stacks); the stack at DEBUG.
    cause = " ".join(f"{type(exc).__name__}: {exc}".split())
    logger.warning(
        "MultiRouteRetriever: the %s route failed (%s); fusing the others",
        name, cause if len(cause) <= 300 else cause[:297] + "...",
    )
    logger.debug("MultiRouteRetriever: the %s route's traceback", name, exc_info=exc)
    errors[name] = exc
    dispatcher.event(RouteFailedEvent(query=query, route=name, error=f"{type(exc).__name__}: {exc}"))
