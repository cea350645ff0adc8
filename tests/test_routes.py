"""The multi-route retriever's parts: each route answers alone behind one interface, a route
set asks them together, and the retriever's ranking is ``fusion.fuse_routes`` of their scores."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.schema import QueryBundle

from llama_index_hiqa.errors import RetrievalRouteError
from llama_index_hiqa.retrievers import fusion, title_match
from llama_index_hiqa.retrievers.routes import BM25, KEYWORDS, VECTOR, Route, RouteScores, RouteSet
from tests.test_multi_route import ids, make_retriever

QUESTION = "OPT3004 quiescent current"


def test_each_folder_route_is_a_route_and_answers_alone_what_the_retriever_fuses():
    retriever, _ = make_retriever(similarity_top_k=3)
    routes = retriever.route_set().routes
    assert all(isinstance(route, Route) for route in routes.values())
    bundle = QueryBundle(QUESTION)
    alone = {name: dict(route.scores(bundle, retriever.config.candidates_per_route)) for name, route in routes.items()}
    assert alone == retriever.route_scores(QUESTION)
    assert alone[KEYWORDS]["opt3004"] >= 1  # the part number is a keyword of that node only
    assert "opt3004" not in retriever.route_set().routes[KEYWORDS].scores_within(bundle, ["cats"])
    assert asyncio.run(routes[BM25].ascores(bundle, 10)) == routes[BM25].scores(bundle, 10)


def test_bm25_scores_a_question_once_and_gives_every_caller_the_same_read_only_scores():
    retriever, _ = make_retriever()
    bm25 = retriever.bm25_route
    calls = []
    inner = bm25.retriever.bm25.get_scores_from_ids
    bm25.retriever.bm25.get_scores_from_ids = lambda ids: calls.append(ids) or inner(ids)
    first = bm25.all_scores(QUESTION)
    assert bm25.all_scores(QUESTION) is first and len(calls) == 1  # the focus asks it again
    with pytest.raises(ValueError):
        first[0] = 1.0  # shared: nobody may change it
    assert bm25.scores_of(QUESTION, bm25.node_ids) == {i: float(s) for i, s in zip(bm25.node_ids, first) if s > 0}
    bm25.all_scores("cats and dogs")
    assert len(calls) == 2 and bm25.all_scores(QUESTION) is not first  # one question remembered


def test_the_ranking_is_fuse_routes_of_the_route_scores():
    retriever, _ = make_retriever(similarity_top_k=4)
    scores = retriever.route_scores(QUESTION)
    c = retriever.config
    ranked = fusion.fuse_routes(
        scores[VECTOR], scores[BM25], scores[KEYWORDS], mode=c.mode, alpha=c.alpha, beta=retriever.beta,
        route_weights=c.route_weights, rrf_k=c.rrf_k, candidates_per_route=c.candidates_per_route, top_k=4,
    )
    hits = retriever.retrieve(QUESTION)
    assert [node_id for node_id, _ in ranked] == ids(hits) == retriever.full_ranking(QUESTION)[:4]
    assert [score for _, score in ranked] == [hit.score for hit in hits]


def test_a_switched_off_route_is_not_in_the_set_and_is_not_asked():
    retriever, _ = make_retriever()
    without = retriever.with_settings(use_bm25=False, use_keywords=False)
    assert without.route_set().enabled() == [VECTOR]
    assert retriever.route_set().enabled() == [VECTOR, BM25, KEYWORDS]
    assert without.route_scores(QUESTION)[BM25] == {} == without.route_scores(QUESTION)[KEYWORDS]


class _Broken:
    name = "bm25"

    def scores(self, query, n):
        raise RuntimeError("index unreadable")

    async def ascores(self, query, n):
        raise RuntimeError("index unreadable")

    def scores_within(self, query, node_ids):
        raise RuntimeError("index unreadable")


def test_a_route_set_records_a_failing_route_and_keeps_the_others():
    retriever, _ = make_retriever()
    routes = retriever.route_set().routes
    errors: dict = {}
    answers = RouteSet(routes[VECTOR], _Broken(), routes[KEYWORDS]).ask(QueryBundle(QUESTION), 10, errors)
    assert list(errors) == [BM25] and isinstance(errors[BM25], RuntimeError)
    assert answers[BM25] == {} and isinstance(answers[BM25], RouteScores)
    assert answers[VECTOR] and answers[KEYWORDS]
    errors = {}
    answers = asyncio.run(RouteSet(None, _Broken(), None).aask(QueryBundle(QUESTION), 10, errors))
    assert list(errors) == [BM25] and answers == {VECTOR: {}, BM25: {}, KEYWORDS: {}}


def test_every_enabled_route_failing_still_raises_through_the_parts(monkeypatch):
    retriever, _ = make_retriever(use_keywords=False)
    for route in (retriever.route_set().routes[VECTOR], retriever.bm25_route):
        monkeypatch.setattr(route, "scores", _Broken().scores)
    with pytest.raises(RetrievalRouteError):
        retriever.retrieve(QUESTION)


def test_question_keywords_add_the_names_the_question_abbreviates():
    class Extractor:
        def extract_query(self, question):
            return ["revenue"]

    names = {"americanexpress": (("american", "express"),)}
    keywords, normalized = title_match.question_keywords(Extractor(), "AMEX revenue in 2022?", names, True)
    assert keywords == ["revenue", "americanexpress"] and normalized == ["revenue", "americanexpress"]
    assert title_match.question_keywords(Extractor(), "AMEX revenue", names, False)[0] == ["revenue"]
    assert title_match.title_wanted(["2021", "2022", "amex"], True) == frozenset({"2022", "amex"})
