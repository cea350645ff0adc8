"""Three processes ingesting the shards 1/3, 2/3 and 3/3 of one folder into one PostgreSQL
database at the same time (`hiqa ingest DIR --store URL --shard I/3`, as three machines would)
end with the store one writer builds: the same nodes, vectors, BM25 statistics, keyword
postings, heading vectors and focus facts, and the same rankings. The database starts empty, so the three
also race to create the schema. With the chunk graph, every chunk is in it and every edge joins
two chunks; its edges themselves depend on the order documents arrive in (three shards written
one after another differ from one writer as well), so they are not compared.

Uses the ``server`` fixture of conftest.py (a pgserver instance, or ``HIQA_TEST_POSTGRES_URL``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_index.vector_stores.postgres")

from llama_index_hiqa import schema  # noqa: E402
from llama_index_hiqa.demo import DEMO_DATA_DIR  # noqa: E402
from llama_index_hiqa.pack.hiqa_pack import HiQAPack  # noqa: E402
from tests.pack_helpers import HashEmbedding  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = [
    "What is the maximum output current of the NX-2043?",
    "NX-2040 dropout voltage at 150 mA",
    "Which pin enables the regulator?",
    "thermal shutdown temperature",
    "NX-2047 quiescent current",
]


WRITER = """
import sys
from llama_index_hiqa.demo import DEMO_DATA_DIR
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from tests.pack_helpers import HashEmbedding

url, shard, graph = sys.argv[1], sys.argv[2], sys.argv[3] == "graph"
index, count = (int(v) for v in shard.split("/"))
pack = HiQAPack.empty(embed_model=HashEmbedding(), store=url, keywords={"use_ner": False}, ingest_batch_size=1,
                      use_chunk_graph=graph)
pack.add_directory(DEMO_DATA_DIR, shard=None if count == 1 else (index, count))
pack.close()
"""


def _writer(url: str, shard: str, graph: bool) -> subprocess.Popen:
    """One writer process: the shard ``shard`` ("i/n") of the demo folder, one document a
    transaction (so the writers' transactions interleave)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, url, shard, "graph" if graph else "-"], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _wait(writers) -> None:
    for writer in writers:
        _out, err = writer.communicate(timeout=600)
        assert writer.returncode == 0, err


def _state(url: str):
    """What must not depend on how many writers built the store, keyed by what is the same in
    two builds of one folder (document and position, term text; not node ids or row numbers)."""
    pack = HiQAPack.load(url, embed_model=HashEmbedding())
    store = pack.store
    by_node = {
        node_id: (doc, pos)
        for node_id, doc, pos in store.rows(
            "SELECT n.node_id, d.document_id, n.position FROM hiqa_nodes n JOIN hiqa_documents d USING (ref_doc_id)"
        )
    }
    state = {
        "documents": sorted(store.rows("SELECT document_id, title, doc_hash, pages, node_count FROM hiqa_documents")),
        "pack": store.rows("SELECT node_count, total_length FROM hiqa_pack"),
        "nodes": sorted(
            (by_node[i], kw, tkw, length)
            for i, kw, tkw, length in store.rows("SELECT node_id, keywords, title_keywords, length FROM hiqa_nodes")
        ),
        "vectors": sorted(
            (by_node[i], text, vector)
            for i, text, vector in store.rows("SELECT node_id, text, embedding::text FROM data_hiqa_vectors")
        ),
        "docstore": store.scalar("SELECT count(*) FROM data_hiqa_docstore"),
        "terms": sorted(store.rows("SELECT term, df FROM hiqa_terms WHERE df > 0")),
        "postings": sorted(
            (term, by_node[node_id], length, tf)
            for term, node_id, length, tf in store.rows(
                "SELECT t.term, n.node_id, p.length, p.tf FROM hiqa_postings p JOIN hiqa_terms t USING (term_id) "
                "JOIN hiqa_nodes n ON n.node_row = p.node_row"
            )
        ),
        "heading_vectors": sorted(store.rows("SELECT hash, vector FROM hiqa_heading_vectors")),
        "focus_facts": sorted((by_node[i], f) for i, f in store.rows("SELECT node_id, facts::text FROM hiqa_focus_facts")),
        # The chunk graph's chunks and whether every edge joins two of them: its edges depend
        # on the order documents arrive in (the shards one after another differ from one
        # writer too), so only what does not is compared.
        "graph_nodes": sorted(by_node[i] for (i,) in store.rows("SELECT node_id FROM hiqa_graph_nodes")),
        "graph_edges_join_chunks": all(
            u in by_node and v in by_node for u, v in store.rows("SELECT u, v FROM hiqa_graph_edges")
        ),
        "vector_index": store.scalar("SELECT to_regclass('data_hiqa_vectors_embedding_idx') IS NOT NULL"),
    }
    retriever = pack.as_retriever()
    state["rankings"] = [
        [((schema.get_document_id(h.node), schema.get_position(h.node)), round(h.score, 6)) for h in retriever.retrieve(q)]
        for q in QUESTIONS
    ] if not pack.config.use_chunk_graph else None  # the chains follow the edges
    pack.close()
    return state


@pytest.mark.parametrize("graph", [False, True], ids=["routes", "chunk-graph"])
def test_three_concurrent_shard_writers_build_the_one_writer_store(server, graph):
    one, sharded = server.database(), server.database()
    _wait([_writer(one, "1/1", graph)])
    _wait([_writer(sharded, f"{i}/3", graph) for i in (1, 2, 3)])  # at once, into an empty database
    expected, got = _state(one), _state(sharded)
    assert len(got["documents"]) == 10 and (not graph or len(got["graph_nodes"]) == len(got["nodes"]))
    for key in expected:
        assert got[key] == expected[key], key
