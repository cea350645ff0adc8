"""BM25 as a base plus segments: the scores of one index built over the live nodes, whatever the
split into base, segments and removed nodes; on the embedded store, an added document becomes a
segment (the base is not rebuilt), removals are masked, and persist() merges when due."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.schema import Document, NodeRelationship, RelatedNodeInfo, TextNode

from llama_index_hiqa import schema
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from llama_index_hiqa.retrievers.bm25_route import BM25Route, corpus_tokenizer
from llama_index_hiqa.retrievers import bm25_segments
from llama_index_hiqa.retrievers.bm25_segments import Postings, SegmentedBM25Route
from llama_index_hiqa.storage.backends import embedded_bm25
from tests.pack_helpers import HashEmbedding

WORDS = "voltage current output input thermal package pin timing the of and currents outputs".split()
QUESTIONS = ["output current", "thermal thermal pin of", "timing package voltages", "nothing here", "the"]


def _text_node(i: int, text: str, doc: str = "d0") -> TextNode:
    return TextNode(
        id_=f"n{i}", text=text, metadata={schema.DOCUMENT_ID: doc, schema.POSITION: i},
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc)},
    )


def _postings(nodes, first_row: int) -> Postings:
    rows = list(range(first_row, first_row + len(nodes)))
    return Postings.from_tokens([([n.node_id for n in nodes], rows, corpus_tokenizer()(nodes))])


corpora = st.lists(st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join), min_size=2, max_size=40)


@settings(max_examples=60, deadline=None)
@given(texts=corpora, data=st.data())
def test_base_segments_and_removals_score_as_one_index_over_the_live_nodes(texts, data):
    nodes = [_text_node(i, t) for i, t in enumerate(texts)]
    cuts = sorted(data.draw(st.lists(st.integers(1, len(nodes) - 1), max_size=3, unique=True)))
    bounds = [0, *cuts, len(nodes)]
    dead = set(data.draw(st.lists(st.integers(0, len(nodes) - 1), max_size=len(nodes) // 2, unique=True)))
    if len(dead) == len(nodes):
        dead.pop()
    route = SegmentedBM25Route.from_postings(_postings(nodes[: bounds[1]], 0))
    segments = [_postings(nodes[a:b], a) for a, b in zip(bounds[1:], bounds[2:])]
    route = route.with_segments(segments, dead)
    live = [n for i, n in enumerate(nodes) if i not in dead]
    full = BM25Route.build(live)  # the folder store's route: BM25Retriever's own index
    merged = route.merged()
    assert merged.node_ids == full.node_ids and route.node_ids == [n.node_id for n in nodes]
    keep = np.array([i not in dead for i in range(len(nodes))])
    for question in QUESTIONS:
        expected = full.all_scores(question)
        np.testing.assert_allclose(route.all_scores(question)[keep], expected, rtol=1e-6, atol=1e-7)
        assert not route.all_scores(question)[~keep].any()  # removed nodes never score
        np.testing.assert_allclose(merged.all_scores(question), expected, rtol=1e-6, atol=1e-7)
        assert route.top(question, 5).keys() <= {n.node_id for n in live}


@pytest.mark.parametrize("cache_budget", [bm25_segments.TERM_CACHE_POSTINGS, 1])
def test_the_scores_are_bit_for_bit_those_of_one_index(monkeypatch, cache_budget):
    monkeypatch.setattr(bm25_segments, "TERM_CACHE_POSTINGS", cache_budget)  # 1: every term evicted
    nodes = [_text_node(i, " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(i % 9))) for i in range(30)]
    route = SegmentedBM25Route.from_postings(_postings(nodes[:20], 0)).with_segments([_postings(nodes[20:], 20)], [4])
    full = BM25Route.build([n for i, n in enumerate(nodes) if i != 4])
    for question in QUESTIONS + QUESTIONS[::-1]:  # again: the kept term scores answer
        route._last_scores = None
        assert np.array_equal(np.delete(route.all_scores(question), 4), full.all_scores(question))
    assert len(route._term_cache) == 1 if cache_budget == 1 else len(route._term_cache) > 1


def _batch(first_doc: int, count: int, rng: np.random.Generator):
    documents, nodes = [], []
    for d in range(first_doc, first_doc + count):
        doc = f"doc{d}"
        documents.append(Document(id_=doc, text="", metadata={schema.DOCUMENT_ID: doc}))
        for k in range(5):
            node = _text_node(d * 100 + k, f"{doc} " + " ".join(rng.choice(WORDS, 8)), doc)
            node.embedding = HashEmbedding().get_text_embedding(node.text)
            nodes.append(node)
    return documents, [], nodes  # _write_batch(documents, replaced, nodes)


def _embedded_pack(store, rng, documents: int, persist: bool = True):
    """An embedded store of ``documents`` documents (5 nodes each), its BM25 base saved."""
    pack = HiQAPack.empty(embed_model=HashEmbedding(), store=str(store), store_format="embedded", keywords={"use_ner": False})
    pack._write_batch(*_batch(0, documents, rng))
    if persist:
        pack.persist()
    return pack


def _full_rebuild_matches(pack) -> None:
    route = pack.multi_route.bm25_route
    full = BM25Route.build_from_chunks(pack.store.iter_nodes())
    position = {node_id: i for i, node_id in enumerate(route.node_ids)}
    order = [position[node_id] for node_id in full.node_ids]
    for question in QUESTIONS + ["doc3 output"]:
        np.testing.assert_allclose(route.all_scores(question)[order], full.all_scores(question), rtol=1e-6, atol=1e-7)


def test_an_added_document_becomes_a_segment_and_persist_merges_when_due(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    store = tmp_path / "s"
    pack = _embedded_pack(store, rng, 6)
    (base,) = store.glob("bm25-*")
    base_data = (base / "data.csc.index.npy").stat().st_mtime_ns

    pack._write_batch(*_batch(6, 1, rng))
    pack.retrieve("output current")
    assert [p.name for p in store.glob("bm25-*")] == [base.name]  # the base was not rebuilt
    assert (base / "data.csc.index.npy").stat().st_mtime_ns == base_data
    assert [p.name for p in base.glob("segment-*")] == ["segment-35"]  # rows 30..34 of the new document
    _full_rebuild_matches(pack)

    pack.delete_document("doc2")
    pack.retrieve("output current")
    assert pack.multi_route.bm25_route.dead_count == 5
    _full_rebuild_matches(pack)

    pack.persist()  # 5 segment + 5 removed nodes of 30 in the base: past the 10 % policy
    (merged,) = store.glob("bm25-*")
    assert merged != base and not list(merged.glob("segment-*"))
    reopened = HiQAPack.load(store, embed_model=HashEmbedding())
    reopened.retrieve("output current")
    route = reopened.multi_route.bm25_route
    assert route.exact_from_base and len(route.node_ids) == 30
    _full_rebuild_matches(reopened)

    # below the policy, persist() keeps the segment; a new process loads it as saved
    monkeypatch.setattr(embedded_bm25, "MERGE_FRACTION", 0.5)
    reopened._write_batch(*_batch(7, 1, rng))
    reopened.persist()
    again = HiQAPack.load(store, embed_model=HashEmbedding())
    again.retrieve("output current")
    assert len(again.multi_route.bm25_route.parts) == 2 and len(list(merged.glob("segment-*"))) == 1
    _full_rebuild_matches(again)


def test_an_index_written_before_segments_still_answers_and_is_replaced_when_stale(tmp_path):
    rng = np.random.default_rng(1)
    store = tmp_path / "s"
    pack = _embedded_pack(store, rng, 4, persist=False)
    old = BM25Route.build_from_chunks(pack.store.iter_nodes())
    pack.store.save_bm25(old, pack.store.generation)  # the previous format: no term frequencies
    pack._invalidate()
    pack.retrieve("output")
    assert type(pack.multi_route.bm25_route) is BM25Route
    pack._write_batch(*_batch(4, 1, rng))
    pack.retrieve("output")
    assert isinstance(pack.multi_route.bm25_route, SegmentedBM25Route)
    (base,) = store.glob("bm25-*")
    assert Postings.saved_in(base)
    _full_rebuild_matches(pack)


@pytest.mark.parametrize("policy", ["segments", "fraction"])
def test_merge_when_due_follows_the_policy(tmp_path, monkeypatch, policy):
    rng = np.random.default_rng(2)
    pack = _embedded_pack(tmp_path / "s", rng, 20)
    for d in (20, 21):
        pack._write_batch(*_batch(d, 1, rng))
        pack.retrieve("output")
    route = pack.multi_route.bm25_route
    assert embedded_bm25.merge_when_due(pack.store, route) is None  # 2 segments, 10 of 100 nodes
    monkeypatch.setattr(embedded_bm25, "MAX_SEGMENTS" if policy == "segments" else "MERGE_FRACTION", 1 if policy == "segments" else 0.05)
    merged = embedded_bm25.merge_when_due(pack.store, route)
    assert merged is not None and merged.exact_from_base and merged.node_ids == route.node_ids


def _counting(monkeypatch, owner, name):
    calls = []
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_persist_after_a_question_saves_with_the_routes_bm25_route(tmp_path, monkeypatch):
    from llama_index_hiqa.storage.backends import embedded as embedded_backend

    rng = np.random.default_rng(3)
    pack = _embedded_pack(tmp_path / "s", rng, 6)
    pack._write_batch(*_batch(6, 1, rng))
    opened = _counting(monkeypatch, embedded_backend, "open_bm25_route")
    pack.retrieve("output current")
    route = pack.multi_route.bm25_route
    monkeypatch.setattr(embedded_bm25, "MERGE_FRACTION", 0.5)
    pack.persist()  # nothing added since the question, no merge due: nothing opened again
    assert opened == ["open_bm25_route"] and pack.multi_route.bm25_route is route
    monkeypatch.setattr(embedded_bm25, "MERGE_FRACTION", 0.01)
    pack.persist()  # the merge is made from the same route, not from one opened again
    assert opened == ["open_bm25_route"] and not list((tmp_path / "s").glob("bm25-*/segment-*"))
    _full_rebuild_matches(pack)


def test_a_write_extends_the_route_held_instead_of_reading_the_base_again(tmp_path, monkeypatch):
    rng = np.random.default_rng(4)
    store = tmp_path / "s"
    pack = _embedded_pack(store, rng, 10)
    pack.retrieve("output current")
    loads = _counting(monkeypatch, SegmentedBM25Route, "load_base")
    for first, deleted in ((10, None), (12, "doc3"), (14, None)):
        before = pack.multi_route.bm25_route
        if deleted:
            pack.delete_document(deleted)
        pack._write_batch(*_batch(first, 2, rng))
        pack.retrieve("output current")
        route = pack.multi_route.bm25_route
        assert route.node_ids[: len(before.node_ids)] == before.node_ids and len(route.node_ids) == len(before.node_ids) + 10
        _full_rebuild_matches(pack)
    assert loads == []  # the base was mapped once, before the writes
    assert [p.name for p in next(store.glob("bm25-*")).glob("segment-*")] and len(route.parts) == 4

    # another writer's segment beside the same base: the route held is not extended past it
    other = HiQAPack.load(store, embed_model=HashEmbedding())
    other._write_batch(*_batch(20, 1, rng))
    other.retrieve("output current")
    assert loads == ["load_base"]
    pack._write_batch(*_batch(21, 1, rng))
    pack.retrieve("output current")
    assert loads == ["load_base"] * 2  # read again from disk, with the other writer's segment
    _full_rebuild_matches(pack)
    fresh = HiQAPack.load(store, embed_model=HashEmbedding())
    fresh.retrieve("output current")
    assert len(fresh.multi_route.bm25_route.node_ids) == len(pack.multi_route.bm25_route.node_ids)
    _full_rebuild_matches(fresh)


def test_saved_term_frequencies_take_two_bytes_and_score_as_before(tmp_path):
    nodes = [_text_node(i, " ".join(["output"] * (i + 1) + ["current", "the"])) for i in range(12)]
    postings = _postings(nodes, 0)
    postings.save(tmp_path / "p")
    assert np.load(tmp_path / "p" / "tf.npy").dtype == np.uint16
    loaded = Postings.load(tmp_path / "p", mmap=True)
    for question in QUESTIONS:
        assert np.array_equal(
            SegmentedBM25Route.from_postings(loaded).all_scores(question),
            SegmentedBM25Route.from_postings(postings).all_scores(question),
        )
    huge = np.array([1, 70_000], dtype=np.int32)  # a count past 16 bits stays as it was
    assert bm25_segments.narrow_counts(huge) is huge
    assert bm25_segments.narrow_counts(np.array([3, 65_535], dtype=np.int32)).dtype == np.uint16
