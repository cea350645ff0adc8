"""The IIER chunk graph on the PostgreSQL store: saved in its tables by every write's
transaction, loaded by any process, ranking as the folder store's graph.

Uses the ``server`` fixture of conftest.py (a pgserver instance, or ``HIQA_TEST_POSTGRES_URL``).
"""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.vector_stores.postgres")

from llama_index_hiqa import schema  # noqa: E402
from llama_index_hiqa.demo import load_demo_documents  # noqa: E402
from llama_index_hiqa.pack.hiqa_pack import HiQAPack  # noqa: E402
from llama_index_hiqa.retrievers.chain_augmented import ChainAugmentedRetriever  # noqa: E402
from llama_index_hiqa.storage.backends import pg_graph  # noqa: E402
from llama_index_hiqa.storage.backends.postgres import PostgresBackend  # noqa: E402
from tests.pack_helpers import HashEmbedding  # noqa: E402
from tests.test_postgres_store import FAST, QUESTIONS, _assert_same_ranking, _keys  # noqa: E402

GRAPH = {**FAST, "use_chunk_graph": True}


@pytest.fixture(scope="module")
def documents():
    return load_demo_documents()


def _edges(graph):
    """Edges keyed by (document, position) of both ends: node ids differ between two builds."""
    key = {i: (graph.document_id(i), graph._positions[graph.index_of(i)]) for i in graph.node_ids}
    return {
        tuple(sorted((key[u], key[v]))): (st, round(se, 5), kw)
        for u, v, st, se, kw in graph.edge_records()
    }


def _stored_edges(pack):
    """The edge rows in the database, keyed as :func:`_edges`."""
    rows = pack.store.rows(
        "SELECT hu.document_id, hu.position, hv.document_id, hv.position, e.kind, e.weight FROM hiqa_graph_edges e "
        "JOIN hiqa_graph_nodes hu ON hu.node_id = e.u JOIN hiqa_graph_nodes hv ON hv.node_id = e.v"
    )
    edges = {}
    for du, pu, dv, pv, kind, weight in rows:
        weights = edges.setdefault(tuple(sorted(((du, pu), (dv, pv)))), dict.fromkeys(pg_graph.KINDS, 0))
        weights[kind] = round(weight, 5) if kind == pg_graph.SEMANTIC else int(weight)
    return {pair: tuple(w[k] for k in pg_graph.KINDS) for pair, w in edges.items()}


def test_a_reopened_store_loads_the_graph_and_ranks_as_the_folder_store(server, documents):
    url = server.database()
    HiQAPack.from_documents(documents, embed_model=HashEmbedding(), store=url, **GRAPH).close()
    folder = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), **GRAPH)

    pack = HiQAPack.load(url, embed_model=HashEmbedding())  # a fresh object: everything from the tables
    assert isinstance(pack.backend, PostgresBackend) and pack.config.use_chunk_graph
    assert isinstance(pack.as_retriever(), ChainAugmentedRetriever)
    graph, expected = pack.graph.graph, folder.graph.graph
    assert sorted(graph.node_ids) == sorted(n.node_id for n in pack.index.docstore.docs.values())
    assert _edges(graph) == _edges(expected) == _stored_edges(pack)
    assert graph.edge_counts() == expected.edge_counts() and all(graph.edge_counts().values())
    assert graph.resolved_keyword_threshold == expected.resolved_keyword_threshold
    for question in QUESTIONS:
        assert _keys(pack.graph.retrieve(question)) == _keys(folder.graph.retrieve(question))
        _assert_same_ranking(folder.multi_route.retrieve(question), pack.multi_route.retrieve(question))
    pack.close()

    # With the same node ids (the folder pack copied in), ties break alike: the pack's
    # retriever (multi-route top k shared with the chains) returns the same nodes in order.
    other = server.database()
    folder.copy_to(other).close()
    copied = HiQAPack.load(other, embed_model=HashEmbedding())
    assert _edges(copied.graph.graph) == _edges(expected)
    for question in QUESTIONS:
        got, want = copied.retrieve(question), folder.retrieve(question)
        assert [h.node.node_id for h in got] == [h.node.node_id for h in want]
        assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-5)


def test_add_and_delete_update_the_graph_rows(server, documents):
    url = server.database()
    pack = HiQAPack.from_documents(documents[:4], embed_model=HashEmbedding(), store=url, **GRAPH)
    pack.add_documents(documents[4:6])
    gone = schema.get_document_id(pack.index.docstore.get_node(pack.graph.graph.node_ids[-1]))
    gone_ids = set(pack.store.rows("SELECT node_id FROM hiqa_nodes WHERE ref_doc_id = "
                                   "(SELECT ref_doc_id FROM hiqa_documents WHERE document_id = :d)", d=gone))
    assert gone_ids and pack.store.scalar(
        "SELECT count(*) FROM hiqa_graph_edges WHERE u = ANY(:i) OR v = ANY(:i)", i=[i for i, in gone_ids]) > 0

    pack.delete_document(gone)
    ids = [i for i, in gone_ids]
    assert pack.store.scalar("SELECT count(*) FROM hiqa_graph_edges WHERE u = ANY(:i) OR v = ANY(:i)", i=ids) == 0
    assert pack.store.scalar("SELECT count(*) FROM hiqa_graph_nodes WHERE node_id = ANY(:i)", i=ids) == 0
    assert pack.store.scalar("SELECT node_count FROM hiqa_graph") == pack.node_count
    # What is left is the graph a build over the remaining documents makes.
    kept = set(pack._documents().values())
    remaining = [d for d in documents[:6] if d.doc_id in kept]
    assert len(remaining) == 5
    folder = HiQAPack.from_documents(remaining, embed_model=HashEmbedding(), **GRAPH)
    reopened = HiQAPack.load(url, embed_model=HashEmbedding())
    assert _stored_edges(pack) == _edges(reopened.graph.graph) == _edges(folder.graph.graph)

    # A changed document is replaced in one batch: its old chunks leave the graph, its new ones
    # join at the end, as in the folder store.
    changed = remaining[0].model_copy()
    changed.set_content(remaining[0].text + "\n\n## Errata\n\nThe NX-9999 supersedes this part.")
    assert pack.ingest([changed]).documents_replaced == 1
    folder = HiQAPack.from_documents([*remaining[1:], changed], embed_model=HashEmbedding(), **GRAPH)
    assert _stored_edges(pack) == _edges(pack.graph.graph) == _edges(folder.graph.graph)
    assert pack.store.scalar("SELECT count(*) FROM hiqa_graph_nodes") == pack.node_count


def test_a_failed_write_leaves_the_previous_graph(server, documents, monkeypatch):
    url = server.database()
    pack = HiQAPack.from_documents(documents[:3], embed_model=HashEmbedding(), store=url, **GRAPH)
    before = (_stored_edges(pack), pack.store.scalar("SELECT generation FROM hiqa_graph"), pack.document_ids,
              _keys(pack.retrieve(QUESTIONS[0])))
    real_sync = pg_graph.StoredChunkGraph.sync

    def sync_then_fail(self, conn, nodes):
        real_sync(self, conn, nodes)  # every graph row of the batch written, not committed
        raise RuntimeError("the writer dies here")

    monkeypatch.setattr(pg_graph.StoredChunkGraph, "sync", sync_then_fail)
    with pytest.raises(RuntimeError, match="dies"):
        pack.ingest(documents[3:5])
    with pytest.raises(RuntimeError, match="dies"):
        pack.delete_document(pack.document_ids[0])
    monkeypatch.setattr(pg_graph.StoredChunkGraph, "sync", real_sync)
    after = (_stored_edges(pack), pack.store.scalar("SELECT generation FROM hiqa_graph"), pack.document_ids,
             _keys(pack.retrieve(QUESTIONS[0])))
    assert after == before
    assert len(pack.graph.graph) == pack.node_count  # the copy in memory was read again
    assert pack.ingest(documents[3:5]).documents_added == 2
    assert _stored_edges(pack) == _edges(HiQAPack.load(url, embed_model=HashEmbedding()).graph.graph)


def test_another_process_follows_the_committed_graph(server, documents, monkeypatch):
    url = server.database()
    writer = HiQAPack.from_documents(documents[:2], embed_model=HashEmbedding(), store=url, **GRAPH)
    reader = HiQAPack.load(url, embed_model=HashEmbedding())
    retriever = reader.as_retriever()
    assert len(reader.graph.graph) == writer.node_count
    monkeypatch.setattr(pg_graph, "GRAPH_TTL_S", 0.0)
    writer.add_documents(documents[2:4])
    retriever.retrieve(QUESTIONS[0])  # the same retriever object: its graph is the new one
    assert len(reader.graph.graph) == writer.node_count == len(writer.graph.graph)


def test_a_pack_built_without_the_graph_gets_one(server, documents, monkeypatch):
    """A store built with use_chunk_graph=False, opened with it on: the graph is built from the
    stored chunks and vectors (in memory), and written by the next batch; chunks a writer
    without the graph adds are followed too."""
    url = server.database()
    HiQAPack.from_documents(documents[:3], embed_model=HashEmbedding(), store=url, **FAST).close()
    pack = HiQAPack.load(url, embed_model=HashEmbedding(), use_chunk_graph=True)
    assert len(pack.graph.graph) == pack.node_count
    assert pack.store.scalar("SELECT to_regclass('hiqa_graph_edges')") is not None  # format 2 creates them
    assert pack.store.scalar("SELECT count(*) FROM hiqa_graph_nodes") == 0
    pack.add_documents(documents[3:4])
    assert pack.store.scalar("SELECT count(*) FROM hiqa_graph_nodes") == pack.node_count
    assert _stored_edges(pack) == _edges(pack.graph.graph)

    monkeypatch.setattr(pg_graph, "GRAPH_TTL_S", 0.0)
    HiQAPack.load(url, embed_model=HashEmbedding(), use_chunk_graph=False).add_documents(documents[4:5])
    pack.retrieve(QUESTIONS[0])
    assert len(pack.graph.graph) == pack.node_count == pack.store.scalar("SELECT count(*) FROM hiqa_nodes")
    pack.add_documents(documents[5:6])
    assert pack.store.scalar("SELECT count(*) FROM hiqa_graph_nodes") == pack.node_count
    folder = HiQAPack.from_documents(documents[:6], embed_model=HashEmbedding(), **GRAPH)
    assert len(_stored_edges(pack)) == len(_edges(folder.graph.graph))


def test_a_graph_smaller_than_its_top_k_round_trips(server):
    """Fewer chunks than semantic_top_k: the top-k lists are padded (-1, -inf) in the rows too."""
    from llama_index.core.schema import Document

    url = server.database()
    text = "# NX-9000\n\nOutput current 3 A.\n\n## Pins\n\nVIN, GND, VOUT.\n\n## Thermal\n\nShutdown at 160 C."
    pack = HiQAPack.from_documents([Document(text=text, id_="NX-9000")], embed_model=HashEmbedding(), store=url, **GRAPH)
    graph = pack.graph.graph
    assert 1 < len(graph) <= graph.semantic_top_k and (graph.knn[0] == -1).any()
    reopened = HiQAPack.load(url, embed_model=HashEmbedding()).graph.graph
    assert _edges(reopened) == _edges(graph)
    assert (reopened.knn[0] == graph.knn[0]).all() and (reopened.knn[1] == graph.knn[1]).all()
