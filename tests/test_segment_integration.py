"""SegmentIntegrationPostprocessor: values, segment selection, relevance sources, fill-in."""

from __future__ import annotations

import math
import random
from typing import List, Optional

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import Document
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.postprocessor import LLMRerank
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from scipy.stats import beta as scipy_beta

from llama_index_hiqa import RerankerError, SegmentIntegrationPostprocessor, schema
from llama_index_hiqa.postprocessors.segment_integration import PRESETS
from llama_index_hiqa.postprocessors.segment_selection import (
    beta_transform,
    chunk_values,
    length_factors,
    select_segments,
)
from llama_index_hiqa.testing import ScriptedLLM

# --- fixtures ------------------------------------------------------------------------

WORDS = "revenue margin cash debt equity lease tax segment goodwill dividend".split()


def _document(doc_id: str, n_sentences: int = 90, seed: int = 0) -> Document:
    rng = random.Random(seed)
    sentences = [
        " ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "." for _ in range(n_sentences)
    ]
    return Document(text=" ".join(sentences), id_=doc_id)


def _tiled_chunks(doc_id: str, text: str, size: int = 200, title: str = "") -> List[TextNode]:
    """Chunks that tile the text exactly (as the section parsers produce), with facts."""
    nodes = []
    for position, start in enumerate(range(0, len(text), size)):
        end = min(start + size, len(text))
        node = TextNode(text=text[start:end], id_=f"{doc_id}-{position}")
        schema.set_segment_facts(
            node,
            document_id=doc_id,
            document_title=title or doc_id,
            position=position,
            char_span=(start, end),
            heading_path=[["1", "Intro", 1]] if position < 5 else [["2", "Results", 1]],
            page_range=(position // 4, position // 4),
        )
        nodes.append(node)
    return nodes


def _hits(nodes: List[TextNode], scored: dict) -> List[NodeWithScore]:
    return [NodeWithScore(node=nodes[i], score=s) for i, s in scored.items()]


def _docstore(nodes) -> SimpleDocumentStore:
    store = SimpleDocumentStore()
    store.add_documents(nodes)
    return store


class KeywordEmbedding(BaseEmbedding):
    """Bag-of-words over WORDS: cosine = shared vocabulary (deterministic, offline)."""

    def _vector(self, text: str) -> List[float]:
        lowered = text.lower()
        return [float(lowered.count(w)) + 1e-3 for w in WORDS]

    def _get_query_embedding(self, query: str) -> List[float]:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._vector(text)


class FakeCohereRerank(BaseNodePostprocessor):
    """Scores like LlamaIndex's ``CohereRerank`` (same class name, relevance in [0, 1], its
    own ``top_n``), from a function of the chunk text, or raises ``error``."""

    top_n: int = 2
    error: Optional[str] = None
    queries: List[str] = []

    @classmethod
    def class_name(cls) -> str:
        return "CohereRerank"

    def _postprocess_nodes(self, nodes, query_bundle=None):
        self.queries.append(query_bundle.query_str)
        if self.error:
            raise TimeoutError(self.error)
        scored = [NodeWithScore(node=n.node, score=_cash_score(n.node.get_content())) for n in nodes]
        return sorted(scored, key=lambda n: -n.score)[: self.top_n]


class PickyReranker(BaseNodePostprocessor):
    """A LlamaIndex reranker that keeps its own top_n and scores by a keyword."""

    keyword: str = "cash"
    top_n: int = 2

    def _postprocess_nodes(self, nodes, query_bundle=None):
        for n in nodes:
            n.score = float(n.node.get_content().count(self.keyword))
        return sorted(nodes, key=lambda n: -n.score)[: self.top_n]


# --- values and the Beta transform ------------------------------------------------------


def test_chunk_value_by_hand():
    values = chunk_values([0, 1, 1000], [1.0, 0.5, 0.0], irrelevant_chunk_penalty=0.2, decay_rate=10)
    assert values == pytest.approx([0.8, math.exp(-0.1) * 0.5 - 0.2, -0.2])


def test_length_adjustment_by_hand():
    assert length_factors([350, 700, 1400], 700).tolist() == [1.0, 1.0, 2.0]
    values = chunk_values([0, 0], [1.0, 1.0], 0.2, 30, lengths=[350, 1400], reference_length=700)
    assert values == pytest.approx([0.8, 1.6])


def test_beta_transform_matches_scipy_and_spreads_scores():
    x = np.linspace(0, 1, 11)
    assert beta_transform(x, 0.4, 0.4) == pytest.approx(scipy_beta.cdf(x, 0.4, 0.4))
    assert beta_transform(x, 1.0, 1.0) == pytest.approx(x)
    assert beta_transform([-0.5, 1.7], 0.4, 0.4).tolist() == [0.0, 1.0]  # clipped first
    # Cohere's scores crowd near 0 and 1 (about Beta(0.4, 0.4)); their CDF spreads such
    # scores evenly over [0, 1]: each decile then holds about a tenth of them.
    crowded = np.random.default_rng(0).beta(0.4, 0.4, size=5000)
    assert np.mean((crowded < 0.1) | (crowded > 0.9)) > 0.4
    spread = beta_transform(crowded, 0.4, 0.4)
    deciles = np.histogram(spread, bins=10, range=(0, 1))[0] / len(spread)
    assert deciles == pytest.approx([0.1] * 10, abs=0.02)


# --- segment selection -------------------------------------------------------------------


def test_segments_by_hand_best_first():
    values = [0.5, -0.1, 0.4, -0.3, -0.3, 0.9]
    # Unlimited length: one segment spanning the dip is worth most (0.5-0.1+0.4-0.6+0.9).
    assert select_segments(values, [0] * 6, 10, 10, 0.1) == [(0, 6, pytest.approx(1.1))]
    # At most 3 chunks: 0.9 alone first, then 0.5-0.1+0.4.
    assert select_segments(values, [0] * 6, 3, 10, 0.1) == [
        (5, 6, pytest.approx(0.9)),
        (0, 3, pytest.approx(0.8)),
    ]


def test_segments_never_cross_documents():
    assert select_segments([0.5, 0.5], [0, 1], 5, 5, 0.1) == [(0, 1, 0.5), (1, 2, 0.5)]
    assert select_segments([0.5, 0.5], [0, 0], 5, 5, 0.1) == [(0, 2, 1.0)]


def test_overall_max_length_and_minimum_value():
    assert select_segments([1.0] * 4, [0] * 4, 4, 3, 0.0) == [(0, 3, 3.0)]
    assert select_segments([1.0, -5.0, 1.0, 1.0], [0] * 4, 4, 3, 0.0) == [(2, 4, 2.0), (0, 1, 1.0)]
    assert select_segments([0.3], [0], 5, 5, 0.5) == []
    assert select_segments([0.6, -1, 0.4], [0] * 3, 5, 5, 0.5) == [(0, 1, 0.6)]


def test_no_segment_starts_or_ends_on_a_negative_chunk():
    # Even a permissive minimum does not admit a segment of negative chunks.
    assert select_segments([-0.1, -0.2], [0, 0], 5, 5, -10.0) == []
    # The negative chunks stay out even though the minimum would admit them.
    found = select_segments([-0.1, 1.0, -0.1, 0.05], [0] * 4, 5, 5, -10.0)
    assert found == [(1, 2, 1.0), (3, 4, pytest.approx(0.05))]


def _brute_force(values, run_ids, max_length, overall, minimum):
    """The reference's exhaustive rounds, with the same prefix-sum arithmetic."""
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(values, dtype=float))]).tolist()
    chosen, total, n = [], 0, len(values)
    while total < overall:
        best = None
        for s in range(n):
            if values[s] < 0:
                continue
            for e in range(s + 1, min(s + max_length, n) + 1):
                if values[e - 1] < 0 or len(set(run_ids[s:e])) > 1 or total + e - s > overall:
                    continue
                if any(s < ce and cs < e for cs, ce, _ in chosen):
                    continue
                value = prefix[e] - prefix[s]
                if best is None or value > best[2]:
                    best = (s, e, value)
        if best is None or best[2] < minimum:
            break
        chosen.append(best)
        total += best[1] - best[0]
    return chosen


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(st.integers(-30, 30).map(lambda x: x / 20), min_size=1, max_size=40),
    breaks=st.lists(st.booleans(), min_size=40, max_size=40),
    max_length=st.integers(1, 8),
    overall=st.integers(1, 25),
    minimum=st.sampled_from([-1.0, 0.0, 0.3, 1.0]),
)
def test_selection_equals_exhaustive_search(values, breaks, max_length, overall, minimum):
    run_ids = list(np.cumsum([0] + [int(b) for b in breaks[: len(values) - 1]]))
    fast = select_segments(values, run_ids, max_length, overall, minimum)
    assert fast == _brute_force(values, run_ids, max_length, overall, minimum)
    covered = [i for s, e, _ in fast for i in range(s, e)]
    assert len(covered) == len(set(covered)) <= overall
    assert all(e - s <= max_length and len(set(run_ids[s:e])) == 1 for s, e, _ in fast)


# --- the postprocessor: fill-in, text, metadata ---------------------------------------


def test_docstore_fill_in_reproduces_the_source_span():
    doc = _document("acme-2023")
    nodes = _tiled_chunks("acme-2023", doc.text, title="ACME 10-K 2023")
    rse = SegmentIntegrationPostprocessor(docstore=_docstore(nodes), minimum_value=0.3)
    out = rse.postprocess_nodes(_hits(nodes, {3: 0.9, 4: 0.8, 6: 0.85, 20: 0.2}), query_str="q")
    assert len(out) == 1
    seg = out[0].node
    meta = seg.metadata
    assert meta[schema.SEGMENT_NODE_IDS] == [f"acme-2023-{i}" for i in range(3, 7)]
    assert (meta[schema.POSITION_START], meta[schema.POSITION_END]) == (3, 6)
    assert seg.text == doc.text[meta[schema.CHAR_START] : meta[schema.CHAR_END]]
    assert (meta[schema.CHAR_START], meta[schema.CHAR_END]) == (600, 1400)
    assert (meta[schema.PAGE_START], meta[schema.PAGE_END]) == (0, 1)
    assert meta[schema.DOCUMENT_ID] == "acme-2023"
    assert meta[schema.SEGMENT_FILL] == "docstore"
    assert meta[schema.HEADING_CASCADE] == "ACME 10-K 2023 > 1 Intro … 2 Results"
    # The header reaches the LLM; the bookkeeping does not.
    llm_view = seg.get_content("llm")
    assert llm_view.startswith(f"{schema.HEADING_CASCADE}: ACME 10-K 2023 > 1 Intro") and "segment_node_ids" not in llm_view
    # Score = segment value: three retrieved chunks (incoming scores relative to the best,
    # 0.2 ranks last) minus one filled gap; chunks of 200 chars are not length-scaled.
    assert out[0].score == pytest.approx(
        sum(chunk_values([0, 1, 2], [1.0, 0.85 / 0.9, 0.8 / 0.9], 0.18, 30)) - 0.18
    )


def test_without_docstore_segments_hold_only_retrieved_chunks():
    doc = _document("acme-2023")
    nodes = _tiled_chunks("acme-2023", doc.text)
    out = SegmentIntegrationPostprocessor(minimum_value=0.3).postprocess_nodes(
        _hits(nodes, {3: 0.9, 4: 0.8, 6: 0.85}), query_str="q"
    )
    ids = [o.node.metadata[schema.SEGMENT_NODE_IDS] for o in out]
    assert ids == [["acme-2023-3", "acme-2023-4"], ["acme-2023-6"]]
    assert all(o.node.metadata[schema.SEGMENT_FILL] == "retrieved_only" for o in out)
    assert out[0].score >= out[1].score


def test_segments_keep_to_their_document():
    a, b = _document("a", seed=1), _document("b", seed=2)
    nodes_a, nodes_b = _tiled_chunks("a", a.text), _tiled_chunks("b", b.text)
    store = _docstore(nodes_a + nodes_b)
    hits = _hits(nodes_a, {1: 0.9, 2: 0.9}) + _hits(nodes_b, {2: 0.95, 3: 0.8})
    out = SegmentIntegrationPostprocessor(docstore=store).postprocess_nodes(hits, query_str="q")
    for o in out:
        doc_id = o.node.metadata[schema.DOCUMENT_ID]
        assert all(i.startswith(doc_id + "-") for i in o.node.metadata[schema.SEGMENT_NODE_IDS])
    assert sorted(o.node.metadata[schema.DOCUMENT_ID] for o in out) == ["a", "b"]


def test_sentence_splitter_overlap_is_kept_once():
    doc = _document("d", n_sentences=60)
    nodes = SentenceSplitter(chunk_size=64, chunk_overlap=16).get_nodes_from_documents([doc])
    for i, n in enumerate(nodes):
        schema.set_segment_facts(n, document_id="d", document_title="D", position=i)
    hits = _hits(nodes, {2: 0.9, 3: 0.9, 4: 0.9})
    seg = SegmentIntegrationPostprocessor().postprocess_nodes(hits, query_str="q")[0].node
    start, end = nodes[2].start_char_idx, nodes[4].end_char_idx
    assert seg.text == doc.text[start:end]
    # Without character spans the repeated overlap is still found and kept once.
    for n in nodes:
        n.start_char_idx = n.end_char_idx = None
    seg = SegmentIntegrationPostprocessor().postprocess_nodes(hits, query_str="q")[0].node
    assert " ".join(seg.text.split()) == " ".join(doc.text[start:end].split())


def test_nodes_without_positions_stand_alone_and_empty_input():
    loose = [NodeWithScore(node=TextNode(text="cash " * 200, id_=f"n{i}"), score=0.9) for i in range(2)]
    out = SegmentIntegrationPostprocessor().postprocess_nodes(loose, query_str="q")
    assert sorted(o.node.metadata[schema.SEGMENT_NODE_IDS][0] for o in out) == ["n0", "n1"]
    assert SegmentIntegrationPostprocessor().postprocess_nodes([], query_str="q") == []


def test_duplicate_hits_count_once():
    doc = _document("d")
    nodes = _tiled_chunks("d", doc.text)
    hits = _hits(nodes, {2: 0.9}) + _hits(nodes, {2: 0.5})
    out = SegmentIntegrationPostprocessor(minimum_value=0.1).postprocess_nodes(hits, query_str="q")
    assert [o.node.metadata[schema.SEGMENT_NODE_IDS] for o in out] == [["d-2"]]
    assert out[0].score == pytest.approx(1.0 - 0.18)  # the best incoming score is relevance 1


def test_top_k_for_document_selection_limits_documents():
    hits = []
    for d in range(4):
        nodes = _tiled_chunks(f"d{d}", _document(f"d{d}", seed=d).text)
        hits += _hits(nodes, {0: 0.9 - d / 100})
    out = SegmentIntegrationPostprocessor(top_k_for_document_selection=2, minimum_value=0.1).postprocess_nodes(
        hits, query_str="q"
    )
    assert sorted(o.node.metadata[schema.DOCUMENT_ID] for o in out) == ["d0", "d1"]


# --- presets and settings ---------------------------------------------------------------


def test_presets_and_overrides():
    default = SegmentIntegrationPostprocessor()
    assert (default.max_length, default.overall_max_length, default.minimum_value) == (15, 30, 0.5)
    assert (default.irrelevant_chunk_penalty, default.decay_rate) == (0.18, 30)
    precision = SegmentIntegrationPostprocessor.from_preset("precision")
    assert (precision.minimum_value, precision.irrelevant_chunk_penalty) == (0.7, 0.2)
    find_all = SegmentIntegrationPostprocessor(preset="find_all", minimum_value=0.3)
    assert (find_all.max_length, find_all.overall_max_length, find_all.decay_rate) == (40, 200, 200)
    assert find_all.minimum_value == 0.3
    assert set(PRESETS) == {"balanced", "precision", "find_all"}
    with pytest.raises(ValueError, match="unknown preset"):
        SegmentIntegrationPostprocessor(preset="fast")


def test_presets_change_the_segments():
    doc = _document("d")
    nodes = _tiled_chunks("d", doc.text)
    hits = _hits(nodes, {2: 0.62, 3: 0.6, 4: 0.58})
    balanced = SegmentIntegrationPostprocessor(preset="balanced").postprocess_nodes(hits, query_str="q")
    precision = SegmentIntegrationPostprocessor(preset="precision").postprocess_nodes(hits, query_str="q")
    # Same chunks, but precision's larger penalty values each lower.
    assert len(balanced) == len(precision) == 1
    assert balanced[0].score - precision[0].score == pytest.approx(3 * 0.02)
    # A lone chunk far behind the best passes balanced's minimum (0.5) but not precision's (0.7).
    lone = hits + _hits(nodes, {20: 0.8 * 0.62})  # rank 3: 0.8 * exp(-3/30) = 0.72
    assert len(SegmentIntegrationPostprocessor(preset="balanced").postprocess_nodes(lone, query_str="q")) == 2
    assert len(SegmentIntegrationPostprocessor(preset="precision").postprocess_nodes(lone, query_str="q")) == 1


def test_serialisation_round_trip_and_unknown_settings():
    rse = SegmentIntegrationPostprocessor(preset="precision", max_length=9)
    again = SegmentIntegrationPostprocessor.from_dict(rse.to_dict())
    assert (again.max_length, again.minimum_value, again.preset) == (9, 0.7, "precision")
    # The Cohere SDK path is gone: its settings fail loudly instead of reranking nothing.
    with pytest.raises(ValueError, match="cohere_api_key"):
        SegmentIntegrationPostprocessor(cohere_api_key="secret")


# --- relevance sources ------------------------------------------------------------------


def _mixed_corpus():
    """Chunk 2 is about cash, chunk 7 about tax; the incoming scores prefer chunk 7."""
    texts = [("lease equity margin. " * 40) for _ in range(10)]
    texts[2] = "cash cash cash flow from operations. " * 25
    texts[7] = "tax tax rate and deferred tax. " * 25
    nodes = []
    for i, t in enumerate(texts):
        node = TextNode(text=t, id_=f"c{i}")
        schema.set_segment_facts(node, document_id="doc", document_title="Doc", position=i)
        nodes.append(node)
    return nodes, _hits(nodes, {7: 0.9, 2: 0.4})


def _cash_score(text: str) -> float:
    return 0.95 if "cash" in text else 0.05


def test_cohere_rerank_relevance_reorders_and_uses_beta():
    nodes, hits = _mixed_corpus()
    reranker = FakeCohereRerank(queries=[])
    rse = SegmentIntegrationPostprocessor(reranker=reranker)
    out = rse.postprocess_nodes(hits, query_str="operating cash flow")
    assert reranker.queries == ["operating cash flow"]
    assert [o.node.metadata[schema.SEGMENT_NODE_IDS] for o in out] == [["c2"]]
    assert out[0].node.metadata[schema.SEGMENT_RELEVANCE] == "reranker"
    # CohereRerank's scores are read on Cohere's calibration: Beta(0.4, 0.4).
    expected = (scipy_beta.cdf(0.95, 0.4, 0.4) - 0.18) * len(nodes[2].text) / 700
    assert out[0].score == pytest.approx(expected)


async def test_async_reranker_path():
    nodes, hits = _mixed_corpus()
    reranker = FakeCohereRerank(queries=[])
    out = await SegmentIntegrationPostprocessor(reranker=reranker).apostprocess_nodes(hits, query_str="cash")
    assert reranker.queries == ["cash"] and [o.node.node_id for o in out] == ["segment:doc:2-2"]


def test_reranker_failure_falls_back_or_raises():
    nodes, hits = _mixed_corpus()
    failing = FakeCohereRerank(error="cohere timed out", queries=[])
    out = SegmentIntegrationPostprocessor(reranker=failing).postprocess_nodes(hits, query_str="q")
    assert out[0].node.metadata[schema.SEGMENT_NODE_IDS] == ["c7"]  # incoming scores
    assert out[0].node.metadata[schema.SEGMENT_RELEVANCE] == "scores (fallback from reranker)"
    strict = SegmentIntegrationPostprocessor(reranker=failing, fallback_on_reranker_error=False)
    with pytest.raises(RerankerError, match="cohere timed out"):
        strict.postprocess_nodes(hits, query_str="q")


def test_llamaindex_reranker_relevance_and_dropped_chunks():
    nodes, hits = _mixed_corpus()
    hits = hits + _hits(nodes, {3: 0.8})
    rse = SegmentIntegrationPostprocessor(reranker=PickyReranker(top_n=1), minimum_value=0.1)
    out = rse.postprocess_nodes(hits, query_str="cash")
    # Only chunk 2 survives the reranker's top_n=1; as the best on an unknown scale it has
    # relevance 1, and the dropped chunks relevance 0.
    assert [o.node.metadata[schema.SEGMENT_NODE_IDS] for o in out] == [["c2"]]
    assert out[0].node.metadata[schema.SEGMENT_RELEVANCE] == "reranker"
    # The caller's nodes keep their retrieval scores.
    assert [h.score for h in hits] == [0.9, 0.4, 0.8]


def test_llm_rerank_with_scripted_llm_and_malformed_answer():
    nodes, hits = _mixed_corpus()
    # LLMRerank numbers the documents in the order given: 1 = c7 (tax), 2 = c2 (cash).
    llm = ScriptedLLM(["Doc: 2, Relevance: 9\nDoc: 1, Relevance: 2\n"])
    rse = SegmentIntegrationPostprocessor(reranker=LLMRerank(llm=llm, top_n=2), minimum_value=0.1)
    out = rse.postprocess_nodes(hits, query_str="cash")
    assert llm.calls == 1
    assert out[0].node.metadata[schema.SEGMENT_NODE_IDS] == ["c2"]
    # Scores 1-10 are read on LLMRerank's scale: 9 -> 0.9.
    assert out[0].score == pytest.approx((0.9 - 0.18) * len(nodes[2].text) / 700)
    garbled = ScriptedLLM(["I think the second one"])
    rse = SegmentIntegrationPostprocessor(reranker=LLMRerank(llm=garbled, top_n=2), minimum_value=0.1)
    out = rse.postprocess_nodes(hits, query_str="cash")
    # LLMRerank parses nothing from it: the incoming scores are used, and the node says so.
    assert out[0].node.metadata[schema.SEGMENT_NODE_IDS] == ["c7"]
    assert out[0].node.metadata[schema.SEGMENT_RELEVANCE] == "scores (fallback from reranker)"


def test_embedding_relevance_when_scores_are_missing():
    nodes, _ = _mixed_corpus()
    hits = [NodeWithScore(node=nodes[i], score=None) for i in (7, 2)]
    rse = SegmentIntegrationPostprocessor(embed_model=KeywordEmbedding(), minimum_value=0.1)
    out = rse.postprocess_nodes(hits, query_str="cash flow")
    assert out[0].node.metadata[schema.SEGMENT_RELEVANCE] == "embedding"
    assert out[0].node.metadata[schema.SEGMENT_NODE_IDS] == ["c2"]
    with pytest.raises(ValueError, match="needs a query"):
        SegmentIntegrationPostprocessor(relevance="embedding").postprocess_nodes(hits)


async def test_sync_and_async_agree():
    doc = _document("d")
    nodes = _tiled_chunks("d", doc.text)
    hits = _hits(nodes, {3: 0.9, 4: 0.7, 6: 0.8, 12: 0.6, 13: 0.65})
    rse = SegmentIntegrationPostprocessor(docstore=_docstore(nodes), minimum_value=0.2)
    sync = rse.postprocess_nodes(hits, query_str="q")
    asynchronous = await rse.apostprocess_nodes(hits, query_bundle=QueryBundle("q"))
    assert [(o.node.node_id, o.score, o.node.text) for o in sync] == [
        (o.node.node_id, o.score, o.node.text) for o in asynchronous
    ]
    assert len(sync) == 2


def test_docstore_lookup_is_built_once():
    doc = _document("d")
    nodes = _tiled_chunks("d", doc.text)
    store = _docstore(nodes)
    rse = SegmentIntegrationPostprocessor(docstore=store, minimum_value=0.3)
    scans = {"n": 0}
    original = type(store).docs

    class CountingStore(type(store)):
        @property
        def docs(self):
            scans["n"] += 1
            return original.fget(self)

    store.__class__ = CountingStore
    for _ in range(3):
        rse.postprocess_nodes(_hits(nodes, {3: 0.9, 5: 0.9}), query_str="q")
    assert scans["n"] == 1


def test_from_index_fills_gaps_from_the_index_docstore():
    from llama_index.core import VectorStoreIndex

    doc = _document("d")
    nodes = _tiled_chunks("d", doc.text)
    index = VectorStoreIndex(nodes, embed_model=KeywordEmbedding())
    rse = SegmentIntegrationPostprocessor.from_index(index, minimum_value=0.3)
    out = rse.postprocess_nodes(_hits(nodes, {8: 0.9, 10: 0.9}), query_str="q")
    assert out[0].node.metadata[schema.SEGMENT_NODE_IDS] == ["d-8", "d-9", "d-10"]
    assert out[0].node.text == doc.text[1600:2200]


def test_reranker_is_a_part_passed_back_to_from_dict():
    # A reranker may hold an API key (CohereRerank): to_dict records its class only.
    reranker = PickyReranker(top_n=3)
    rse = SegmentIntegrationPostprocessor(reranker=reranker, max_length=4)
    data = rse.to_dict()
    assert data["reranker"] == {"class_name": "PickyReranker", "not_serialised": True}
    again = SegmentIntegrationPostprocessor.from_dict(data, reranker=reranker)
    assert again.reranker is reranker and again.max_length == 4


def test_query_engine_prompt_gets_whole_segments_with_header():
    from llama_index.core import VectorStoreIndex
    from llama_index.core.query_engine import RetrieverQueryEngine

    doc = _document("acme-2023")
    nodes = _tiled_chunks("acme-2023", doc.text, title="ACME 10-K 2023")
    index = VectorStoreIndex(nodes, embed_model=KeywordEmbedding())
    llm = ScriptedLLM(default_response="Cash rose.")
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=5),
        llm=llm,
        node_postprocessors=[SegmentIntegrationPostprocessor.from_index(index)],
    )
    response = engine.query("cash dividend")
    assert str(response) == "Cash rose."
    segment = response.source_nodes[0].node
    assert "ACME 10-K 2023 >" in llm.prompts[0] and segment.text in llm.prompts[0]
    assert "segment_node_ids" not in llm.prompts[0]
    span = segment.metadata[schema.CHAR_START], segment.metadata[schema.CHAR_END]
    assert segment.text == doc.text[span[0] : span[1]]


