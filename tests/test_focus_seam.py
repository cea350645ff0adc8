"""The seam between the document focus and the ranking below it: a typed Protocol that each
store's multi-route retriever satisfies, and one keyword extraction a question however many
steps (the routes, the focus's choice of documents, the scores inside them) match the keywords."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import QueryBundle

from llama_index_hiqa import DocumentFocusRetriever, HiQAPack, MultiRouteRetriever
from llama_index_hiqa.demo import load_demo_documents
from llama_index_hiqa.retrievers.document_focus import MultiRouteRanking
from llama_index_hiqa.retrievers.multi_route import Ranking
from llama_index_hiqa.storage.vector_store import MatrixVectorStore
from llama_index_hiqa.testing import HashingEmbedding
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor
from tests.pack_helpers import HashEmbedding

FAST = {"keywords": {"use_ner": False}}
QUESTIONS = ["What is the maximum output current of the NX-2043?", "NX-2045 input voltage range"]


@pytest.fixture(scope="module")
def in_memory():
    embed = HashingEmbedding(dim=64)
    index = VectorStoreIndex(
        load_demo_documents(), embed_model=embed, storage_context=StorageContext.from_defaults(vector_store=MatrixVectorStore())
    )
    return MultiRouteRetriever.from_index(index, similarity_top_k=5), embed


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    root = tmp_path_factory.mktemp("embedded") / "store"
    return HiQAPack.from_documents(
        load_demo_documents(), embed_model=HashEmbedding(), store=str(root), store_format="embedded", **FAST
    )


class CountedExtractions:
    """``CriticalKeywordExtractor.extract_query`` counted, per question text."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list = []
        real = CriticalKeywordExtractor.extract_query

        def counted(extractor, question, *args, **kwargs):
            self.calls.append(question)
            return real(extractor, question, *args, **kwargs)

        monkeypatch.setattr(CriticalKeywordExtractor, "extract_query", counted)


def test_each_stores_multi_route_retriever_is_the_ranking_the_focus_needs(in_memory, embedded):
    multi, _ = in_memory
    for retriever in (multi, embedded.multi_route):
        assert type(retriever) is MultiRouteRetriever and isinstance(retriever, MultiRouteRanking)
    assert not isinstance(object(), MultiRouteRanking)
    # the Protocol names public members only
    members = {name for name in vars(MultiRouteRanking) if not name.startswith(("__", "_abc", "_is_"))}
    members |= set(MultiRouteRanking.__annotations__)
    assert members >= {"rank", "scores_within", "config"} and not [name for name in members if name.startswith("_")]


def test_one_keyword_extraction_a_question_through_retriever_and_focus(in_memory, monkeypatch):
    multi, embed = in_memory
    focus = DocumentFocusRetriever(multi, embed_model=embed)
    counted = CountedExtractions(monkeypatch)
    for question in QUESTIONS:
        counted.calls.clear()
        ranking = multi.rank(QueryBundle(question))
        assert isinstance(ranking, Ranking) and counted.calls == [question]
        assert ranking.keywords == multi.question_keywords(question) and ranking.keywords.normalized
        counted.calls.clear()
        multi.retrieve(question)
        assert counted.calls == [question]
        counted.calls.clear()
        hits = focus.retrieve(question)
        assert hits and counted.calls == [question]  # was three: the routes, the choice, the scores inside
        counted.calls.clear()
        asyncio.run(focus.aretrieve(question))
        assert counted.calls == [question]
        counted.calls.clear()
        focus.full_ranking(question)
        assert counted.calls == [question]


def test_one_keyword_extraction_a_question_on_the_embedded_store(embedded, monkeypatch):
    retriever = embedded.as_retriever()
    assert isinstance(retriever, DocumentFocusRetriever)
    counted = CountedExtractions(monkeypatch)
    for question in QUESTIONS:
        counted.calls.clear()
        assert retriever.retrieve(question)
        assert counted.calls == [question]


def test_the_focus_extracts_the_keywords_itself_when_the_keyword_route_is_off(in_memory, monkeypatch):
    multi, embed = in_memory
    focus = DocumentFocusRetriever(multi.with_settings(use_keywords=False), embed_model=embed, focus_documents=2)
    counted = CountedExtractions(monkeypatch)
    focus.retrieve(QUESTIONS[0])
    assert counted.calls == [QUESTIONS[0]]  # for the choice of documents: still once


def test_the_focus_type_checks_against_the_protocol(tmp_path, tmp_path_factory):
    from tests.test_public_api import run_mypy

    out = run_mypy(tmp_path, tmp_path_factory.mktemp("mypy_cache"), """\
from llama_index_hiqa import EmbeddedMultiRouteRetriever, MultiRouteRetriever, PostgresMultiRouteRetriever
from llama_index_hiqa.retrievers.document_focus import DocumentFocusRetriever, MultiRouteRanking


def focus(ranking: MultiRouteRanking) -> DocumentFocusRetriever:
    return DocumentFocusRetriever(ranking)


def in_memory(retriever: MultiRouteRetriever) -> MultiRouteRanking:
    return retriever


class NotARanking:
    def rank(self, query: str) -> list:
        return []


reveal_type(EmbeddedMultiRouteRetriever)
reveal_type(PostgresMultiRouteRetriever)
focus(NotARanking())
""")
    revealed = [line for line in out.splitlines() if "Revealed type is" in line]
    assert len(revealed) == 2 and all(line.endswith('-> llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever"') for line in revealed), out
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "user_app.py:20:" in errors[0] and '"NotARanking"' in errors[0], out
