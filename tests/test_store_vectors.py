"""retrievers/store_vectors.py: each store's similarity read as a cosine, and the scores of
given nodes from a store that honours node ids, only a filter, or neither."""

from __future__ import annotations

import math
from typing import List

import pytest
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_hiqa.retrievers import store_vectors as sv


@pytest.mark.parametrize("cos", [-0.5, 0.0, 0.3, 0.99])
def test_each_scale_gives_the_cosine_back(cos):
    assert sv.from_exp_squared_l2(math.exp(-(2 - 2 * cos))) == pytest.approx(cos)
    assert sv.from_exp_cosine_distance(math.exp(-(1 - cos))) == pytest.approx(cos)
    assert sv.from_squared_l2(2 - 2 * cos) == pytest.approx(cos)


class FakeRetriever:
    """A VectorIndexRetriever's knobs over ten nodes of two documents; the store it stands
    for may ignore ``_node_ids`` and may refuse ``_filters``."""

    def __init__(self, honours_ids: bool, has_filters: bool) -> None:
        self.similarity_top_k = 10
        self._node_ids = None
        self._filters = None
        self.honours_ids, self.has_filters = honours_ids, has_filters
        self.asked: List[str] = []
        self.nodes = [TextNode(text=f"n{i}", id_=f"n{i}") for i in range(10)]
        for i, node in enumerate(self.nodes):
            node.relationships = {}
            node.metadata["ref"] = "a" if i < 5 else "b"

    def retrieve(self, query):
        if self._filters is not None:
            self.asked.append("filter")
            if not self.has_filters:
                raise NotImplementedError("no filters")
            ref = self._filters.filters[0].value
            found = [n for n in self.nodes if n.metadata["ref"] == ref]
        elif self._node_ids is not None and self.honours_ids:
            self.asked.append("ids")
            found = [n for n in self.nodes if n.node_id in self._node_ids]
        else:
            self.asked.append("ids" if self._node_ids is not None else "all")
            found = self.nodes
        scored = [NodeWithScore(node=n, score=1.0 - int(n.node_id[1:]) / 10) for n in found]
        return scored[: self.similarity_top_k]


class RefNode:
    def __init__(self, ref: str) -> None:
        self.ref_doc_id = ref


NODES = {f"n{i}": RefNode("a" if i < 5 else "b") for i in range(10)}
WANTED = ["n5", "n6", "n7", "n8", "n9"]
EXPECTED = {f"n{i}": 1.0 - i / 10 for i in range(5, 10)}


@pytest.mark.parametrize(
    "honours_ids, has_filters, restriction, first_asks",
    [
        (True, True, sv.BY_NODE_IDS, ["ids"]),
        (False, True, sv.BY_DOCUMENTS, ["ids", "filter"]),
        (False, False, sv.WHOLE_COLLECTION, ["ids", "filter", "all"]),
    ],
)
def test_the_restriction_that_works_is_found_once_and_then_used(honours_ids, has_filters, restriction, first_asks):
    retriever = FakeRetriever(honours_ids, has_filters)
    scores, learned = sv.scores_of_nodes(retriever, QueryBundle("q"), WANTED, NODES, collection_size=10)
    assert scores == pytest.approx(EXPECTED) and learned == restriction
    assert retriever.asked == first_asks
    retriever.asked.clear()
    again, kept = sv.scores_of_nodes(retriever, QueryBundle("q"), WANTED, NODES, collection_size=10, restriction=learned)
    assert again == pytest.approx(EXPECTED) and kept == restriction
    assert len(retriever.asked) == 1  # the store is asked once, the way that worked
