"""The chunk graph's edge functions (pure, over rows) against brute force."""

from __future__ import annotations

import itertools

import numpy as np

from llama_index_hiqa.retrievers.graph_edges import (
    document_chains,
    keyword_postings,
    semantic_top_k,
    shared_keyword_counts,
    unit_rows,
)


def _brute_top_k(vectors: np.ndarray, k: int) -> list:
    sims = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    np.fill_diagonal(sims, -np.inf)
    return [sorted(np.argsort(-row, kind="stable")[:k].tolist()) for row in sims]


def test_semantic_top_k_equals_brute_force_and_an_incremental_update_equals_the_whole():
    rng = np.random.default_rng(3)
    vectors = unit_rows(rng.normal(size=(40, 8)).astype(np.float32))
    empty_ids, empty_sims = np.zeros((0, 0), np.int64), np.zeros((0, 0), np.float32)
    ids, sims = semantic_top_k(vectors, empty_ids, empty_sims, start=0, k=4, block_size=7)
    assert [sorted(row) for row in ids.tolist()] == _brute_top_k(vectors, 4)
    assert np.all(np.diff(sims, axis=1) <= 0)  # best first
    old_ids, old_sims = semantic_top_k(vectors[:25], empty_ids, empty_sims, start=0, k=4, block_size=7)
    more_ids, more_sims = semantic_top_k(vectors, old_ids, old_sims, start=25, k=4, block_size=5)
    np.testing.assert_array_equal(more_ids, ids)
    np.testing.assert_array_equal(more_sims, sims)
    assert old_ids.shape == (25, 4)  # the lists before are left as they were


def test_document_chains_order_touched_documents_by_position_only():
    docs = ["a", "b", "a", "a", None, "b", "c"]
    positions = [2, 0, 0, None, 1, 1, 0]
    # Row 3 has no position, row 4 no document: in no chain. Document c is not touched.
    assert document_chains(docs, positions, new=[0, 4]) == {"a": [2, 0]}
    assert document_chains(docs, positions, new=[1, 2]) == {"a": [2, 0], "b": [1, 5]}
    assert document_chains(docs, positions, new=[3, 4]) == {}


def test_shared_keyword_counts_equal_pairwise_intersections_of_keywords_not_too_common():
    keywords = [{"x", "y", "common"}, {"x", "y", "common"}, {"y", "z", "common"}, {"z", "common"}, set()]
    titles = [set()] * len(keywords)
    postings = keyword_postings(keywords)
    assert postings["common"] == {0, 1, 2, 3}
    shared = shared_keyword_counts(keywords, titles, postings, limit=3, title_mentions=False)
    got = {(i, j): c for i, j, c in zip(shared.row.tolist(), shared.col.tolist(), shared.data.tolist())}
    rare = [k - {"common"} for k in keywords]
    want = {(i, j): len(rare[i] & rare[j]) for i, j in itertools.combinations(range(len(keywords)), 2) if rare[i] & rare[j]}
    assert got == want
    assert shared_keyword_counts([set(), set()], [set(), set()], keyword_postings([set(), set()]), 3, False) is None
