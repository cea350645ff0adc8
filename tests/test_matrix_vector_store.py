"""MatrixVectorStore against a brute-force cosine reference and LlamaIndex's SimpleVectorStore."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import VectorStoreQuery

from llama_index_hiqa import MatrixVectorStore


def _nodes(vectors, doc_of=lambda i: f"doc{i % 3}", prefix="n"):
    return [
        TextNode(
            id_=f"{prefix}{i}", text=f"t{i}", embedding=[float(x) for x in v],
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_of(i))},
        )
        for i, v in enumerate(vectors)
    ]


def _reference_top(vectors, ids, query, k):
    if not ids:
        return [], []
    m = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(m, axis=1)
    q = np.asarray(query, dtype=np.float64)
    sims = (m @ q) / np.where(norms == 0, 1, norms) / (np.linalg.norm(q) or 1)
    order = sorted(range(len(ids)), key=lambda i: -sims[i])[:k]
    return [ids[i] for i in order], [sims[i] for i in order]


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(
            st.lists(st.lists(st.integers(-5, 5), min_size=4, max_size=4), min_size=n, max_size=n),
            st.lists(st.integers(-5, 5), min_size=4, max_size=4),
            st.integers(1, 50),
            st.sets(st.integers(0, n - 1)),
        )
    )
)
def test_top_k_matches_brute_force_after_adds_and_deletes(case):
    raw, query, k, deleted = case
    vectors = [[float(v) for v in row] for row in raw]
    q = [float(x) + 0.0001 for x in query]
    store = MatrixVectorStore()
    nodes = _nodes(vectors)
    store.add(nodes[: len(nodes) // 2])
    store.add(nodes[len(nodes) // 2:])  # several batches, as ingestion adds them
    store.delete_nodes([f"n{i}" for i in deleted])
    kept = [i for i in range(len(vectors)) if i not in deleted]
    result = store.query(VectorStoreQuery(query_embedding=q, similarity_top_k=k))
    ids, sims = _reference_top([vectors[i] for i in kept], [f"n{i}" for i in kept], q, k)
    # ties may come in any order: the scores must be the reference's, and each id's own
    assert np.allclose(result.similarities, sims, atol=1e-4)
    assert len(set(result.ids)) == len(result.ids) == len(ids)
    own = dict(zip(*_reference_top(vectors, [f"n{i}" for i in range(len(vectors))], q, len(vectors))))
    assert all(abs(own[i] - s) < 1e-4 for i, s in zip(result.ids, result.similarities))


def test_same_ranking_as_simple_vector_store_and_delete_by_document():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(200, 16))
    nodes = _nodes(vectors)
    ours, simple = MatrixVectorStore(), SimpleVectorStore()
    ours.add(nodes)
    simple.add(nodes)
    for _ in range(5):
        q = VectorStoreQuery(query_embedding=list(rng.normal(size=16)), similarity_top_k=10)
        assert ours.query(q).ids == simple.query(q).ids
    ours.delete("doc1")
    assert ours.count == len([i for i in range(200) if i % 3 != 1])
    q = VectorStoreQuery(query_embedding=list(rng.normal(size=16)), similarity_top_k=200)
    assert all(int(i[1:]) % 3 != 1 for i in ours.query(q).ids)
    restricted = ours.query(VectorStoreQuery(query_embedding=list(rng.normal(size=16)), similarity_top_k=5, node_ids=["n0", "n3"]))
    assert set(restricted.ids) == {"n0", "n3"}


def test_readding_an_id_overwrites_its_vector():
    store = MatrixVectorStore()
    store.add(_nodes([[1, 0], [0, 1]]))
    store.add([TextNode(id_="n0", text="x", embedding=[0.0, 1.0])])
    assert store.count == 2
    assert np.allclose(store.get_embeddings(["n0"]), [[0.0, 1.0]])
    assert store.get("n1") == [0.0, 1.0]  # SimpleVectorStore's accessor, used by the chunk graph


def test_persist_round_trip_and_damaged_files(tmp_path):
    store = MatrixVectorStore()
    store.add(_nodes(np.eye(5)))
    path = tmp_path / "vectors.npz"
    store.persist(str(path))
    loaded = MatrixVectorStore.from_persist_path(str(path))
    assert loaded.node_ids == store.node_ids and loaded.dim == 5
    q = VectorStoreQuery(query_embedding=[0, 0, 1, 0, 0], similarity_top_k=1)
    assert loaded.query(q).ids == ["n2"]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="vectors.npz"):
        MatrixVectorStore.from_persist_path(str(path))
    with pytest.raises(ValueError, match="dimension"):
        loaded.add([TextNode(id_="x", text="x", embedding=[1.0, 2.0])])
    with pytest.raises(ValueError, match="metadata"):
        from llama_index.core.vector_stores.types import MetadataFilters

        loaded.query(VectorStoreQuery(query_embedding=[1, 0, 0, 0, 0], filters=MetadataFilters(filters=[])))


def test_memory_is_four_bytes_a_dimension():
    store = MatrixVectorStore()
    store.add(_nodes(np.ones((1000, 384))))
    store.query(VectorStoreQuery(query_embedding=[1.0] * 384, similarity_top_k=1))  # stacks the batches
    assert store.get_embeddings(["n0"]).dtype == np.float32
    assert store._matrix.nbytes == 1000 * 384 * 4
