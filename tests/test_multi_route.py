import asyncio
import logging
import math
import re
from typing import List

import numpy as np
import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from llama_index_hiqa import schema
from llama_index_hiqa.errors import InvalidSettingError, RetrievalRouteError, UnknownNodeError
from llama_index_hiqa.retrievers import fusion
from llama_index_hiqa.testing import HashingEmbedding, ScriptedLLM
from llama_index_hiqa.retrievers.multi_route import MultiRouteSettings, MultiRouteRetriever
from llama_index_hiqa.indexes.keyword_index import KeywordIndex
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor


# --- pure fusion functions ---------------------------------------------------------------


def test_min_max_normalize():
    assert fusion.min_max_normalize({"a": 2.0, "b": 4.0, "c": 3.0}) == {"a": 0.0, "b": 1.0, "c": 0.5}
    assert fusion.min_max_normalize({"a": 3.0, "b": 3.0}) == {"a": 1.0, "b": 1.0}
    assert fusion.min_max_normalize({"a": 0.0}) == {"a": 0.0}
    assert fusion.min_max_normalize({}) == {}


def test_hiqa_fusion_hand_computed():
    vector = {"a": 0.9, "b": 0.7, "c": 0.5}  # -> a 1, b 0.5, c 0
    bm25 = {"b": 12.0, "d": 4.0}  # -> b 1, d 0
    counts = {"c": 3, "d": 1}
    fused = fusion.hiqa_fusion(vector, bm25, counts, alpha=0.6, beta=0.5)
    assert fused["a"] == pytest.approx(0.6)
    assert fused["b"] == pytest.approx(0.6 * 0.5 + 0.4 * 1.0)
    assert fused["c"] == pytest.approx(0.5 * math.log(4))
    assert fused["d"] == pytest.approx(0.5 * math.log(2))
    assert fusion.rank_ids(fused) == ["b", "c", "a", "d"]


def test_hiqa_fusion_rejects_bad_weights():
    with pytest.raises(ValueError):
        fusion.hiqa_fusion({}, {}, {}, alpha=1.5, beta=0.1)
    with pytest.raises(ValueError):
        fusion.hiqa_fusion({}, {}, {}, alpha=0.5, beta=-1)


def test_weighted_rrf_hand_computed_and_weights_apply():
    rankings = {"vector": ["a", "b"], "bm25": ["b", "c"]}
    fused = fusion.reciprocal_rank_fusion(rankings, {"vector": 2.0, "bm25": 1.0}, k=60)
    assert fused["a"] == pytest.approx(2 / 61)
    assert fused["b"] == pytest.approx(2 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 62)
    # with the weights reversed the order changes: the weights really apply
    heavy_bm25 = fusion.reciprocal_rank_fusion(rankings, {"vector": 0.1, "bm25": 5.0})
    assert fusion.rank_ids(heavy_bm25)[:2] == ["b", "c"]
    assert fusion.rank_ids(fused)[0] == "b"


def test_rrf_with_tied_ranks():
    ranks = fusion.ranks_from_scores({"a": 2.0, "b": 1.0, "c": 1.0, "d": 0.5})
    assert ranks == {"a": 1, "b": 2, "c": 2, "d": 4}
    fused = fusion.reciprocal_rank_fusion({"kw": ["a", "b", "c"]}, ranks={"kw": ranks}, k=1)
    assert fused == {"a": pytest.approx(0.5), "b": pytest.approx(1 / 3), "c": pytest.approx(1 / 3)}


def _llama_index_fusion(route_scores, weights, mode):
    """LlamaIndex's own QueryFusionRetriever implementation, for comparison."""
    from llama_index.core.retrievers import QueryFusionRetriever

    class _Dummy(BaseRetriever):
        def _retrieve(self, q):
            return []

    names = list(route_scores)
    qfr = QueryFusionRetriever(
        [_Dummy() for _ in names], retriever_weights=[weights[n] for n in names], num_queries=1, use_async=False,
        llm=ScriptedLLM(default_response="")
    )
    results = {
        ("q", i): [NodeWithScore(node=TextNode(text=nid, id_=nid), score=s) for nid, s in route_scores[n].items()]
        for i, n in enumerate(names)
    }
    out = qfr._relative_score_fusion(results, dist_based=(mode == "dist"))
    return {r.node.node_id: r.score for r in out}


@pytest.mark.parametrize("mode", ["relative", "dist"])
def test_relative_and_dist_based_match_llama_index(mode):
    route_scores = {"vector": {"a": 0.9, "b": 0.5, "c": 0.2}, "bm25": {"b": 7.0, "d": 1.0, "e": 3.0}}
    weights = {"vector": 0.7, "bm25": 0.3}
    ours = (fusion.relative_score_fusion if mode == "relative" else fusion.dist_based_score_fusion)(
        route_scores, weights
    )
    theirs = _llama_index_fusion(route_scores, weights, mode)
    assert ours.keys() == theirs.keys()
    for node_id in ours:
        assert ours[node_id] == pytest.approx(theirs[node_id])


def test_relative_score_hand_computed():
    fused = fusion.relative_score_fusion({"v": {"a": 1.0, "b": 0.0}, "r": {"b": 2.0, "c": 1.0}}, {"v": 0.5, "r": 1.0})
    assert fused == {"a": pytest.approx(0.5), "b": pytest.approx(1.0), "c": pytest.approx(0.0)}


def test_auto_beta_grows_with_documents_per_page():
    assert fusion.auto_beta(46, 132) == pytest.approx(0.5 + 1.5 * (46 / 132) / (1 + 46 / 132))
    assert fusion.auto_beta(10, 10) == pytest.approx(1.25)
    assert fusion.auto_beta(0, 10) == 0.5
    assert fusion.auto_beta(5, 100, 0.1, 1.0) < fusion.auto_beta(50, 100, 0.1, 1.0) < fusion.auto_beta(500, 5, 0.1, 1.0) < 1.0


# --- the retriever -----------------------------------------------------------------------


def HashEmbedding() -> HashingEmbedding:
    """Letters only: blind to part numbers, so the vector route alone confuses products."""
    return HashingEmbedding(dim=64, token_pattern=r"[a-z]+", signed=False)


DOCS = {
    "opt3001": "OPT3001 ambient light sensor. The supply current is 1.8 uA typical.",
    "opt3004": "OPT3004 ambient light sensor. Quiescent current of the device is 2.5 uA.",
    "tps7a4700": "TPS7A4700 low noise regulator. The output noise is 4 uV RMS.",
    "cats": "Cats sleep sixteen hours a day and purr.",
}


def make_nodes():
    nodes = []
    for doc_id, text in DOCS.items():
        node = TextNode(text=text, id_=doc_id)
        schema.set_segment_facts(node, document_id=doc_id, document_title=doc_id.upper(), position=0)
        nodes.append(node)
    return nodes


def make_retriever(**settings):
    nodes = make_nodes()
    index = VectorStoreIndex(nodes, embed_model=HashEmbedding())
    extractor = CriticalKeywordExtractor(use_ner=False, include_document_keywords=False)
    return MultiRouteRetriever.from_index(index, keyword_extractor=extractor, **settings), index


def ids(results):
    return [r.node.node_id for r in results]


def test_part_number_decides_where_vector_only_is_confused():
    retriever, index = make_retriever(similarity_top_k=2, beta=0.5)
    query = "What is the supply current of the OPT3004?"
    assert ids(index.as_retriever(similarity_top_k=1).retrieve(query)) == ["opt3001"]
    results = retriever.retrieve(query)
    assert ids(results)[0] == "opt3004"
    scores = results[0].node.metadata[schema.ROUTE_SCORES]
    assert scores["keywords"] == 1 and scores["vector"] is not None and scores["fused"] == results[0].score
    # provenance is hidden from both views and never written onto the shared nodes
    assert "route_scores" not in results[0].node.get_content(MetadataMode.EMBED)
    assert "route_scores" not in results[0].node.get_content(MetadataMode.LLM)
    assert schema.ROUTE_SCORES not in index.docstore.get_node("opt3004").metadata


@pytest.mark.parametrize("mode", ["hiqa", "rrf", "relative_score", "dist_based_score"])
def test_every_mode_retrieves_sync_and_async_alike(mode):
    retriever, _ = make_retriever(mode=mode, similarity_top_k=3)
    query = "OPT3004 quiescent current"
    sync = retriever.retrieve(query)
    asynchronous = asyncio.run(retriever.aretrieve(query))
    assert ids(sync) == ids(asynchronous)
    assert ids(sync)[0] == "opt3004"
    assert len(sync) == 3
    assert [r.score for r in sync] == sorted((r.score for r in sync), reverse=True)


def test_sync_retrieve_inside_a_running_event_loop():
    retriever, _ = make_retriever()

    async def notebook_cell():
        return retriever.retrieve("OPT3004 quiescent current")

    assert ids(asyncio.run(notebook_cell()))[0] == "opt3004"


def test_bm25_zero_score_padding_is_dropped():
    retriever, _ = make_retriever(similarity_top_k=4, use_keywords=False, alpha=0.0)
    results = retriever.retrieve("purr")
    bm25 = {r.node.node_id: r.node.metadata[schema.ROUTE_SCORES]["bm25"] for r in results}
    assert bm25["cats"] > 0
    assert all(score is None for node_id, score in bm25.items() if node_id != "cats")


class _Fixed(BaseRetriever):
    def __init__(self, results=None, error=None):
        super().__init__()
        self.results, self.error, self.similarity_top_k = results or [], error, 1

    def _retrieve(self, query_bundle):
        if self.error:
            raise self.error
        return list(self.results)


def test_duplicates_from_a_route_are_merged_by_node_id():
    nodes = make_nodes()
    dupes = [NodeWithScore(node=nodes[3], score=0.9), NodeWithScore(node=nodes[3], score=0.2)]
    retriever = MultiRouteRetriever(
        vector_retriever=_Fixed(dupes), nodes=nodes, use_bm25=False, use_keywords=False,
        keyword_extractor=CriticalKeywordExtractor(use_ner=False),
    )
    results = retriever.retrieve("anything")
    assert ids(results) == ["cats"]
    assert results[0].node.metadata[schema.ROUTE_SCORES]["vector"] == 0.9


def test_vector_route_is_asked_for_candidates_without_touching_the_users_retriever():
    retriever, index = make_retriever(candidates_per_route=3)
    user_retriever = index.as_retriever(similarity_top_k=1)
    mr = MultiRouteRetriever(
        vector_retriever=user_retriever, nodes=make_nodes(), use_bm25=False, use_keywords=False,
        similarity_top_k=3, candidates_per_route=3,
        keyword_extractor=CriticalKeywordExtractor(use_ner=False),
    )
    assert len(mr.retrieve("current sensor")) == 3
    assert user_retriever.similarity_top_k == 1


def test_a_failing_route_is_one_warning_line_and_the_others_answer(caplog):
    nodes = make_nodes()
    retriever = MultiRouteRetriever(
        vector_retriever=_Fixed(error=ConnectionError("vector store down\nat 10.0.0.1")), nodes=nodes,
        keyword_extractor=CriticalKeywordExtractor(use_ner=False),
    )
    route_log = "llama_index_hiqa.retrievers.routes"
    with caplog.at_level(logging.WARNING):
        results = retriever.retrieve("OPT3004 quiescent current")
    assert ids(results)[0] == "opt3004"
    said = [r for r in caplog.records if r.name == route_log]
    assert len(said) == 1 and said[0].levelno == logging.WARNING and said[0].exc_info is None
    assert said[0].getMessage() == (
        "MultiRouteRetriever: the vector route failed (ConnectionError: vector store down at 10.0.0.1); fusing the others"
    )
    assert "Traceback" not in caplog.text
    assert all(r.node.metadata[schema.ROUTE_SCORES]["failed"] == ["vector"] for r in results)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger=route_log):
        results = asyncio.run(retriever.aretrieve("OPT3004 quiescent current"))
    said = [r for r in caplog.records if r.name == route_log]
    assert ids(results)[0] == "opt3004" and [r.levelno for r in said] == [logging.WARNING, logging.DEBUG]
    assert said[1].exc_info is not None and "vector store down" in caplog.text  # the stack, at DEBUG


def test_every_route_failing_raises_a_typed_error():
    class Broken(CriticalKeywordExtractor):
        def extract_query(self, question):
            raise RuntimeError("ner broke")

    retriever = MultiRouteRetriever(
        vector_retriever=_Fixed(error=TimeoutError("slow")), nodes=make_nodes(), use_bm25=False,
        keyword_extractor=Broken(use_ner=False),
    )
    with pytest.raises(RetrievalRouteError) as info:
        retriever.retrieve("OPT3004")
    assert set(info.value.errors) == {"vector", "keywords"}


def test_empty_query_returns_nothing_without_asking_routes():
    failing = _Fixed(error=AssertionError("must not be called"))
    retriever = MultiRouteRetriever(
        vector_retriever=failing, nodes=make_nodes(), keyword_extractor=CriticalKeywordExtractor(use_ner=False)
    )
    assert retriever.retrieve("   ") == []
    assert asyncio.run(retriever.aretrieve("")) == []


def test_unknown_node_ids_are_typed_errors():
    nodes = make_nodes()
    stale = KeywordIndex()
    stale.add("not-a-node", ["opt3004"])
    with pytest.raises(UnknownNodeError):
        MultiRouteRetriever(nodes=nodes, keyword_index=stale, keyword_extractor=CriticalKeywordExtractor(use_ner=False))
    retriever, _ = make_retriever()
    with pytest.raises(UnknownNodeError):
        retriever.rank_of("OPT3004", ["opt3004", "nope"])


def test_unknown_settings_are_rejected():
    with pytest.raises(InvalidSettingError, match="alpah"):
        make_retriever(alpah=0.3)
    with pytest.raises(InvalidSettingError, match=r"^alpha: must be <= 1\.0 \(got 2\.0\)$"):
        MultiRouteSettings(alpha=2.0)


@pytest.mark.parametrize("mode", ["hiqa", "rrf", "relative_score", "dist_based_score"])
def test_full_ranking_covers_every_node_once_and_agrees_with_top_k(mode):
    retriever, _ = make_retriever(similarity_top_k=2, candidates_per_route=2, mode=mode)
    query = "OPT3004 quiescent current"
    ranking = retriever.full_ranking(query)
    assert sorted(ranking) == sorted(DOCS)  # every node exactly once
    assert ranking[:2] == ids(retriever.retrieve(query))
    assert retriever.rank_of(query, ["opt3004", "cats"]) == {"opt3004": 1, "cats": ranking.index("cats") + 1}


def test_beta_auto_uses_collection_shape():
    retriever, _ = make_retriever()
    assert retriever.collection_shape() == (4, 1.0)
    assert retriever.beta == pytest.approx(fusion.auto_beta(4, 1.0))
    fixed, _ = make_retriever(beta=0.25)
    assert fixed.beta == 0.25


def test_persistence_round_trip(tmp_path):
    retriever, index = make_retriever(mode="rrf", similarity_top_k=3)
    retriever.persist(tmp_path / "mr")
    loaded = MultiRouteRetriever.from_persist_dir(tmp_path / "mr", index=index)
    assert loaded.config == retriever.config
    for query in ["OPT3004 quiescent current", "purr", "TPS7A4700 noise"]:
        assert ids(loaded.retrieve(query)) == ids(retriever.retrieve(query))
        assert [r.score for r in loaded.retrieve(query)] == pytest.approx([r.score for r in retriever.retrieve(query)])
    assert loaded.keyword_index.keywords_of("opt3004") == retriever.keyword_index.keywords_of("opt3004")
    # a docstore that does not hold the persisted ids is refused
    with pytest.raises(UnknownNodeError):
        MultiRouteRetriever.from_persist_dir(tmp_path / "mr", nodes=make_nodes()[:2])


def test_custom_bm25_tokenizer_and_its_persistence(tmp_path):
    def char_trigrams(text):
        text = re.sub(r"\W+", "", text.lower())
        return [text[i : i + 3] for i in range(max(1, len(text) - 2))]

    nodes = make_nodes()
    retriever = MultiRouteRetriever(
        nodes=nodes, bm25_tokenizer=char_trigrams, use_keywords=False,
        keyword_extractor=CriticalKeywordExtractor(use_ner=False),
    )
    assert ids(retriever.retrieve("opt-3004"))[0] == "opt3004"
    retriever.persist(tmp_path)
    with pytest.raises(ValueError):
        MultiRouteRetriever.from_persist_dir(tmp_path, nodes=nodes)
    loaded = MultiRouteRetriever.from_persist_dir(tmp_path, nodes=nodes, bm25_tokenizer=char_trigrams)
    assert ids(loaded.retrieve("opt-3004")) == ids(retriever.retrieve("opt-3004"))


def test_keywords_are_extracted_for_nodes_that_lack_them():
    retriever, _ = make_retriever()
    assert retriever.keyword_index.keywords_of("opt3004") == ["opt3004"]


@pytest.mark.slow
def test_identifier_case_with_the_real_embedding_model():
    from llama_index_hiqa.models.defaults import resolve_embed_model

    texts = {
        "OPT3001": "OPT3001 ambient light sensor. The supply current is 1.8 uA typical at 3.3 V.",
        "OPT3004": "OPT3004 ambient light sensor. Quiescent current of the device: 2.5 uA typical at 3.3 V.",
        "TPS7A4700": "TPS7A4700 low-noise LDO regulator. The supply current is 0.6 mA.",
        "TPS7A4701": "TPS7A4701 low-noise LDO regulator. Ground pin current is 0.7 mA.",
    }
    nodes = [TextNode(text=t, id_=k) for k, t in texts.items()]
    index = VectorStoreIndex(nodes, embed_model=resolve_embed_model())
    queries = {
        "What is the supply current of the OPT3004?": "OPT3004",
        "What is the supply current of the TPS7A4701?": "TPS7A4701",
    }
    vector_only = index.as_retriever(similarity_top_k=1)
    multi = MultiRouteRetriever.from_index(index, similarity_top_k=1, keyword_extractor=CriticalKeywordExtractor())
    for query, gold in queries.items():
        assert ids(vector_only.retrieve(query)) != [gold]  # the look-alike wins on wording
        assert ids(multi.retrieve(query)) == [gold]


def _filings():
    """Two filings of one company: the 2019 one repeats 2018 as its comparative year."""
    texts = {
        ("ACME_2018_10K", "p1"): "Acme sales were 10 million dollars in 2018.",
        ("ACME_2019_10K", "p1"): "Acme revenue was 12 million dollars in 2019, up from 10 million in 2018.",
        ("ACME_2019_10K", "p2"): "The board met four times.",
    }
    nodes = []
    for (doc_id, page), text in texts.items():
        node = TextNode(text=text, id_=f"{doc_id}:{page}")
        schema.set_segment_facts(node, document_id=doc_id, document_title=doc_id, position=0)
        nodes.append(node)
    return nodes


@pytest.mark.parametrize("weight, first", [(1.0, "ACME_2019_10K:p1"), (2.0, "ACME_2018_10K:p1")])
def test_a_keyword_of_the_document_title_outweighs_the_same_keyword_in_the_text(weight, first):
    extractor = CriticalKeywordExtractor(use_ner=False, expert_keywords=["Acme"])
    retriever = MultiRouteRetriever(
        nodes=_filings(), keyword_extractor=extractor, document_keyword_weight=weight, beta=2.0
    )
    results = retriever.retrieve("What was Acme revenue in 2018?")
    # both nodes hold acme + 2018 and BM25 prefers the 2019 text ("revenue"); the title
    # weight lets the filing whose title says 2018 win
    assert ids(results)[0] == first
    scores = {r.node.node_id: r.node.metadata[schema.ROUTE_SCORES]["keywords"] for r in results}
    assert scores["ACME_2018_10K:p1"] == 2 * weight  # acme and 2018, both in its title
    assert scores["ACME_2019_10K:p1"] == weight + 1  # acme in its title, 2018 in its text


class _FailsFor(BaseRetriever):
    """A vector route that fails for questions holding ``marker`` and answers the others."""

    def __init__(self, nodes, marker):
        super().__init__()
        self.nodes, self.marker, self.similarity_top_k = nodes, marker, 1

    def _retrieve(self, query_bundle):
        if self.marker in query_bundle.query_str:
            raise ConnectionError("vector store down for " + query_bundle.query_str)
        return [NodeWithScore(node=n, score=1.0 / (i + 1)) for i, n in enumerate(self.nodes)]

    async def _aretrieve(self, query_bundle):
        await asyncio.sleep(0.01)  # interleave the queries
        return self._retrieve(query_bundle)


def test_concurrent_queries_on_one_retriever_keep_their_own_route_failures():
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler

    from llama_index_hiqa.events import MultiRouteRetrievalEndEvent, RouteFailedEvent

    class Collect(BaseEventHandler):
        events: list = []

        @classmethod
        def class_name(cls):
            return "Collect"

        def handle(self, event, **kwargs):
            if isinstance(event, (RouteFailedEvent, MultiRouteRetrievalEndEvent)):
                self.events.append(event)

    handler = Collect()
    root = get_dispatcher()
    root.add_event_handler(handler)
    try:
        nodes = make_nodes()
        retriever = MultiRouteRetriever(
            vector_retriever=_FailsFor(nodes, "FAIL"), nodes=nodes, use_bm25=False,
            keyword_extractor=CriticalKeywordExtractor(use_ner=False),
        )
        questions = [f"OPT3004 quiescent current {'FAIL ' if i % 4 == 0 else ''}#{i}" for i in range(16)]

        async def run_all():
            return await asyncio.gather(*(retriever.aretrieve(q) for q in questions))

        results = asyncio.run(run_all())
    finally:
        root.event_handlers.remove(handler)
    for question, hits in zip(questions, results):
        assert hits, question
        failed = hits[0].node.metadata[schema.ROUTE_SCORES].get("failed")
        assert failed == (["vector"] if "FAIL" in question else None), question
    failures = [e for e in handler.events if isinstance(e, RouteFailedEvent)]
    assert sorted(e.query for e in failures) == sorted(q for q in questions if "FAIL" in q)
    assert all(e.route == "vector" and "ConnectionError" in e.error for e in failures)
    ends = [e for e in handler.events if isinstance(e, MultiRouteRetrievalEndEvent)]
    assert len(ends) == 16 and sum(bool(e.failed_routes) for e in ends) == 4


def test_from_defaults_takes_exactly_one_of_index_nodes_docstore():
    """LlamaIndex's BM25Retriever.from_defaults shape: index, nodes or docstore, one of them."""
    from llama_index.core.storage.docstore import SimpleDocumentStore

    from llama_index_hiqa import DocumentFocusRetriever
    from llama_index_hiqa.errors import InvalidSettingError

    extractor = CriticalKeywordExtractor(use_ner=False, include_document_keywords=False)
    by_index, index = make_retriever(similarity_top_k=2)
    from_index = MultiRouteRetriever.from_defaults(index=index, similarity_top_k=2, keyword_extractor=extractor)
    question = "OPT3004 quiescent current"
    assert ids(from_index.retrieve(question)) == ids(by_index.retrieve(question))
    assert from_index.config.similarity_top_k == 2

    # Nodes alone: BM25 and keywords over them; the vector route is the one passed (here none).
    lexical = MultiRouteRetriever.from_defaults(nodes=make_nodes(), similarity_top_k=1, keyword_extractor=extractor)
    assert ids(lexical.retrieve(question)) == ["opt3004"]
    assert lexical.retrieve(question)[0].node.metadata[schema.ROUTE_SCORES]["vector"] is None
    docstore = SimpleDocumentStore()
    docstore.add_documents(make_nodes())
    stored = MultiRouteRetriever.from_defaults(docstore=docstore, similarity_top_k=1, keyword_extractor=extractor)
    assert ids(stored.retrieve(question)) == ["opt3004"]

    focus = DocumentFocusRetriever.from_defaults(index=index, similarity_top_k=3, keyword_extractor=extractor,
                                                 heading_weight=0.5)
    assert focus.config.heading_weight == 0.5 and focus.multi_route.config.similarity_top_k == 3
    assert ids(focus.retrieve(question))[0] == "opt3004"

    for bad in ({}, {"index": index, "nodes": make_nodes()}):
        with pytest.raises(InvalidSettingError, match="exactly one of index, nodes or docstore"):
            MultiRouteRetriever.from_defaults(**bad)
