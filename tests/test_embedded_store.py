"""The embedded store: SQLite docstore (LlamaIndex's docstore contract), memory-mapped vectors
(exact cosine, MatrixVectorStore's scores), the pack on it (the folder store's rankings, one
transaction a batch, a kill mid-batch leaves the previous state), and what opening costs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.schema import Document, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery

from llama_index_hiqa import MatrixVectorStore, schema
from llama_index_hiqa.settings import updated
from llama_index_hiqa.demo import load_demo_documents
from llama_index_hiqa.errors import InvalidSettingError, PackStoreError
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from llama_index_hiqa.storage.embedded import EmbeddedStore, is_embedded_store
from llama_index_hiqa.storage.backends.folder import holds_folder_store
from llama_index_hiqa.storage.backends.embedded import EmbeddedBackend
from llama_index_hiqa.storage.memmap_vectors import MemmapVectorStore
from llama_index_hiqa.storage.sqlite_kv import SQLiteDatabase, SQLiteDocumentStore, SQLiteKVStore
from tests.pack_helpers import HashEmbedding

ROOT = Path(__file__).resolve().parents[1]
FAST = {"keywords": {"use_ner": False}}
QUESTIONS = [
    "What is the maximum output current of the NX-2043?",
    "supply current NX-2047 typical",
    "thermal shutdown temperature",
    "package dimensions of NX-2041",
    "NX-2045 input voltage range",
]


def _node(i: int, doc: str = "d0", text: str = "", vector=None) -> TextNode:
    return TextNode(
        id_=f"n{i}", text=text or f"text {i}", metadata={schema.DOCUMENT_ID: doc, schema.POSITION: i},
        embedding=vector, relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc)},
    )


# --------------------------------------------------------------------------- docstore
def test_the_sqlite_docstore_keeps_llamaindex_docstore_contract(tmp_path):
    docstore = SQLiteDocumentStore.from_path(tmp_path / "d.sqlite")
    nodes = [_node(i, doc="a" if i < 3 else "b", text="ü " * i) for i in range(5)]
    docstore.add_documents(nodes)
    docstore.set_document_hash("a", "hash-a")
    assert docstore.get_node("n2").get_content() == nodes[2].get_content()
    assert docstore.get_node("n2").metadata == nodes[2].metadata
    assert docstore.get_node("n2").ref_doc_id == "a"
    assert [n.node_id for n in docstore.get_nodes(["n4", "n0"])] == ["n4", "n0"]
    assert sorted(docstore.get_ref_doc_info("a").node_ids) == ["n0", "n1", "n2"]
    assert set(docstore.get_all_ref_doc_info()) == {"a", "b"}
    assert docstore.document_exists("n1") and docstore.get_document_hash("a") == "hash-a"
    assert len(docstore.docs) == 5

    # a second process (a new connection) reads the same records
    again = SQLiteDocumentStore.from_path(tmp_path / "d.sqlite")
    assert again.get_node("n3").text == nodes[3].text and again.get_document_hash("a") == "hash-a"

    docstore.delete_ref_doc("a")
    assert docstore.get_ref_doc_info("a") is None and not docstore.document_exists("n1")
    assert sorted(docstore.docs) == ["n3", "n4"]
    with pytest.raises(ValueError):
        docstore.get_node("n0")
    assert docstore.get_nodes(["n0", "n3"], raise_error=False)[0].node_id == "n3"
    docstore.delete_document("n3")
    assert sorted(n.node_id for batch in [list(docstore.iter_nodes(chunk=1))] for n in batch) == ["n4"]


def test_the_kv_store_compresses_node_records_and_rolls_back_with_its_transaction(tmp_path):
    db = SQLiteDatabase(tmp_path / "kv.sqlite")
    kv = SQLiteKVStore(db)
    value = {"__data__": {"text": "x" * 500, "metadata": {"k": "v"}}}
    kv.put("a", value, collection="c")
    blob = db.scalar("SELECT value FROM kv WHERE key = 'a'")
    assert kv.get("a", collection="c") == value and len(blob) < len(json.dumps(value)) / 4
    with pytest.raises(RuntimeError):
        with db.transaction():
            kv.put("b", {"v": 1}, collection="c")
            kv.delete("a", collection="c")
            raise RuntimeError("killed")
    assert kv.get("b", collection="c") is None and kv.get("a", collection="c") == value
    assert kv.get_all("c") == {"a": value} and kv.get_all("other") == {}


def test_records_of_a_few_kilobytes_take_about_their_own_size_on_disk(tmp_path):
    """A node's compressed JSON (1 to 2 KB for a page-long chunk) and a 1.5 KB heading vector
    stay in their table's pages: no overflow page of 4 KB for each record."""
    import random

    db = SQLiteDatabase(tmp_path / "size.sqlite")
    kv = SQLiteKVStore(db, compression_level=0)
    rng = random.Random(3)
    records = {f"n{i}": {"text": "".join(rng.choice("abcdefghij0123456789 ") for _ in range(1500))} for i in range(400)}
    with db.transaction():
        kv.put_all(list(records.items()), collection="docstore/data")
    store = EmbeddedStore.open(tmp_path / "embedded", create=True)  # its schema holds heading_vectors
    with store.db.transaction():
        store.db.executemany(
            "INSERT INTO heading_vectors (hash, vector) VALUES (?, ?)",
            [(f"{i:064x}", np.ones(384, dtype=np.float32).tobytes()) for i in range(400)],
        )
    for database, payload in (
        (db, db.scalar("SELECT sum(length(value) + length(key) + length(collection)) FROM kv")),
        (store.db, store.db.scalar("SELECT sum(length(vector) + length(hash)) FROM heading_vectors")),
    ):
        database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = database.scalar("PRAGMA page_count") - database.scalar("PRAGMA freelist_count")
        assert pages * database.scalar("PRAGMA page_size") < 1.6 * payload + 200_000


# --------------------------------------------------------------------------- vectors
@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 30).flatmap(
        lambda n: st.tuples(
            st.lists(st.lists(st.integers(-5, 5), min_size=4, max_size=4), min_size=n, max_size=n),
            st.lists(st.integers(-5, 5), min_size=4, max_size=4),
            st.integers(1, 40),
            st.sets(st.integers(0, n - 1)),
        )
    )
)
def test_memmap_top_k_is_exact_cosine_and_matrix_vector_store_s_scores(tmp_path_factory, case):
    raw, query, k, deleted = case
    vectors = [[float(v) for v in row] for row in raw]
    q = [float(x) + 0.0001 for x in query]
    nodes = [_node(i, doc=f"doc{i % 3}", vector=v) for i, v in enumerate(vectors)]
    ours, matrix = MemmapVectorStore.open(str(tmp_path_factory.mktemp("m"))), MatrixVectorStore()
    for store in (ours, matrix):
        store.add(nodes[: len(nodes) // 2])
        store.add(nodes[len(nodes) // 2:])
        store.delete_nodes([f"n{i}" for i in deleted])
    got = ours.query(VectorStoreQuery(query_embedding=q, similarity_top_k=k))
    reference = matrix.query(VectorStoreQuery(query_embedding=q, similarity_top_k=k))
    if not deleted:  # the same product over the same rows: the same scores, ties in the same order
        assert got.ids == reference.ids and got.similarities == reference.similarities
    assert len(set(got.ids)) == len(got.ids) == len(reference.ids) and not {f"n{i}" for i in deleted} & set(got.ids)
    kept = [i for i in range(len(vectors)) if i not in deleted]
    m = np.asarray(vectors, dtype=np.float64)
    norms = np.where(np.linalg.norm(m, axis=1) == 0, 1, np.linalg.norm(m, axis=1))
    exact = (m @ np.asarray(q)) / norms / np.linalg.norm(q)
    assert sorted(got.similarities, reverse=True) == got.similarities
    assert np.allclose(got.similarities, sorted((exact[i] for i in kept), reverse=True)[:k], atol=1e-5)
    assert all(abs(exact[int(i[1:])] - s) < 1e-5 for i, s in zip(got.ids, got.similarities))


def test_memmap_restrictions_overwrites_deletes_and_reopening(tmp_path):
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(60, 8))
    nodes = [_node(i, doc=f"doc{i % 3}", vector=list(v)) for i, v in enumerate(vectors)]
    store = MemmapVectorStore.open(str(tmp_path))
    store.add(nodes)
    matrix = MatrixVectorStore()
    matrix.add(nodes)
    query = VectorStoreQuery(query_embedding=list(rng.normal(size=8)), similarity_top_k=7, node_ids=["n1", "n4", "n9", "zz"])
    assert store.query(query).ids == matrix.query(query).ids and set(store.query(query).ids) == {"n1", "n4", "n9"}
    by_doc = VectorStoreQuery(query_embedding=list(rng.normal(size=8)), similarity_top_k=100, doc_ids=["doc1"])
    assert store.query(by_doc).ids == matrix.query(by_doc).ids
    store.delete("doc1")
    assert store.count == 40
    assert np.allclose(store.get_embeddings(["n3"]), matrix.get_embeddings(["n3"]))
    store.add([_node(3, doc="doc0", vector=[0.0] * 7 + [1.0])])  # an id added again: overwritten in place
    reopened = MemmapVectorStore.open(str(tmp_path))
    assert reopened.count == 40 and reopened.dim == 8 and reopened.get("n3") == [0.0] * 7 + [1.0]
    top = reopened.query(VectorStoreQuery(query_embedding=[0.0] * 7 + [1.0], similarity_top_k=100))
    assert top.ids[0] == "n3" and len(top.ids) == 40 and not any(int(i[1:]) % 3 == 1 for i in top.ids)
    with pytest.raises(ValueError, match="dimension"):
        reopened.add([_node(99, vector=[1.0, 2.0])])
    with pytest.raises(KeyError):
        reopened.get_embeddings(["n1"])


def test_memmap_node_ids_follow_this_process_s_writes_without_reading_every_id_again(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    nodes = [_node(i, doc=f"doc{i % 3}", vector=list(rng.normal(size=8))) for i in range(60)]
    db = SQLiteDatabase(tmp_path / "v.sqlite")
    store = MemmapVectorStore(str(tmp_path), database=db)
    store.add(nodes[:30])
    assert list(store.node_id_order()) == [f"n{i}" for i in range(30)]
    full_reads = []
    rows = db.rows

    def counting(sql, params=()):
        if "ORDER BY row" in sql:
            full_reads.append(sql)
        return rows(sql, params)

    monkeypatch.setattr(db, "rows", counting)
    store.add(nodes[30:45])
    store.delete("doc1")
    store.add([_node(3, doc="doc0", vector=[1.0] * 8), nodes[1]])  # n3 in place; n1 back, at the end
    store.delete_nodes(["n0", "zz"])
    held = list(store.node_id_order())
    assert not full_reads  # this process's writes were applied to the held ids
    assert held == [r[0] for r in rows("SELECT node_id FROM vector_rows ORDER BY row")] == store.node_ids
    assert held[-1] == "n1" and "n0" not in held and "n4" not in held
    # Another process's write (its own connection): the ids are read again, once.
    other = MemmapVectorStore(str(tmp_path), database=SQLiteDatabase(tmp_path / "v.sqlite"))
    other.add([_node(70, vector=list(rng.normal(size=8)))])
    assert list(store.node_id_order()) == held + ["n70"] and len(full_reads) == 1
    # A write rolled back leaves no id behind.
    with pytest.raises(RuntimeError):
        with db.transaction():
            store.add([_node(80, vector=list(rng.normal(size=8)))])
            raise RuntimeError("undone")
    assert list(store.node_id_order()) == held + ["n70"]


# Steps of one process's view of a store shared with another process: its own adds (new ids
# and ids again) and deletes, another process's, a write rolled back, then its two readings
# (the live ids, a query over every row), each of whatever version it was held at, in either
# order (the first one read must not make the other right by chance).
_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "add_again", "delete", "other_add", "other_delete", "rolled_back"]),
        st.sampled_from(["ids", "query", "both", "none"]),
        st.booleans(),
    ),
    min_size=1, max_size=10,
)


@settings(max_examples=30, deadline=None)
@given(_STEPS)
def test_memmap_ids_and_rows_are_always_of_the_same_version(tmp_path_factory, steps):
    """What the store has read (the live ids in row order, the mapped rows and the deleted ones)
    is always of the version on disk: a query returns exactly the live ids, with the vectors a
    fresh reader reads, whichever of the two this process read last and whoever wrote since."""
    folder = tmp_path_factory.mktemp("versions")
    db = SQLiteDatabase(folder / "v.sqlite")
    store = MemmapVectorStore(str(folder), database=db)
    other = MemmapVectorStore(str(folder), database=SQLiteDatabase(folder / "v.sqlite"))
    rng = np.random.default_rng(7)
    made = iter(range(10_000))

    def fresh():
        return [_node(next(made), vector=list(rng.normal(size=4))) for _ in range(2)]

    store.add(fresh())
    query = VectorStoreQuery(query_embedding=[0.5, -1.0, 0.25, 2.0], similarity_top_k=10_000)
    for step, read, ids_first in steps:
        live = store.node_ids
        if step == "add":
            store.add(fresh())
        elif step == "add_again" and live:  # an id stored already: overwritten in place
            store.add([_node(int(live[0][1:]), vector=list(rng.normal(size=4)))])
        elif step == "delete" and live:
            store.delete_nodes([live[-1]])
        elif step == "other_add":
            other.add(fresh())
        elif step == "other_delete" and live:
            other.delete_nodes([live[0]])
        elif step == "rolled_back":
            with pytest.raises(RuntimeError):
                with db.transaction():
                    store.add(fresh())
                    store.delete_nodes(live[:1])
                    assert store.query(query).ids  # read inside the transaction, then undone
                    raise RuntimeError("undone")
        if read in ("ids", "both"):
            store.node_id_order()
        if read in ("query", "both"):
            store.query(query)
        reader = MemmapVectorStore(str(folder), database=SQLiteDatabase(folder / "v.sqlite"))
        expected = reader.node_ids
        if ids_first:
            assert list(store.node_id_order()) == expected
        got = store.query(query)
        assert sorted(got.ids) == sorted(expected) and list(store.node_id_order()) == expected
        assert np.array_equal(store.get_embeddings(expected), reader.get_embeddings(expected))
        truth = reader.query(query)
        assert dict(zip(got.ids, got.similarities)) == dict(zip(truth.ids, truth.similarities))


def test_a_question_and_a_write_at_once_in_one_process_both_finish(tmp_path, monkeypatch):
    """A thread reading the live ids while another writes: neither waits for the other forever
    (the reading is done under the database's lock, which the writer also takes first)."""
    import threading

    rng = np.random.default_rng(3)
    db = SQLiteDatabase(tmp_path / "v.sqlite")
    store = MemmapVectorStore(str(tmp_path), database=db)
    store.add([_node(i, vector=list(rng.normal(size=4))) for i in range(5)])
    reading, writing = threading.Event(), threading.Event()
    rows, on_rollback = db.rows, db.on_rollback

    def slow_rows(sql, params=()):
        if "ORDER BY row" in sql and threading.current_thread().name == "reader":
            reading.set()
            writing.wait(timeout=1.0)  # give the writer every chance to start its transaction
        return rows(sql, params)

    def entered(undo):
        writing.set()
        on_rollback(undo)

    monkeypatch.setattr(db, "rows", slow_rows)
    monkeypatch.setattr(db, "on_rollback", entered)
    seen = {}
    reader = threading.Thread(name="reader", daemon=True, target=lambda: seen.update(ids=list(store.node_id_order())))
    writer = threading.Thread(
        name="writer", daemon=True,
        target=lambda: (reading.wait(timeout=5.0), store.add([_node(9, vector=list(rng.normal(size=4)))])),
    )
    reader.start()
    writer.start()
    reader.join(timeout=10.0)
    writer.join(timeout=10.0)
    assert not reader.is_alive() and not writer.is_alive()
    assert seen["ids"] in ([f"n{i}" for i in range(5)], [f"n{i}" for i in (0, 1, 2, 3, 4, 9)])
    assert list(store.node_id_order()) == [f"n{i}" for i in (0, 1, 2, 3, 4, 9)]


# --------------------------------------------------------------------------- the pack
def _keyed(results):
    return [((schema.get_document_id(r.node), schema.get_position(r.node)), r.score) for r in results]


def _tie_free(results):
    """Results as comparable across two ingestions of the same documents, which give their
    nodes other random ids (and the fusion breaks ties by node id): the scores in order, and
    the node (document, position) of every result whose score no other result shares and is
    not the last one's (a tie at the cut may bring in another node of the tie)."""
    keyed = _keyed(results)
    scores = [score for _, score in keyed]
    last = scores[-1] if scores else None
    return scores, [key for key, score in keyed if scores.count(score) == 1 and score != last]


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    """The demo datasheets on the folder store (saved and loaded) and on the embedded store,
    ingested and copied from the folder store."""
    base = tmp_path_factory.mktemp("stores")
    built = HiQAPack.from_documents(load_demo_documents(), embed_model=HashEmbedding(), store_format="folder", **FAST)
    built.persist(base / "folder")
    folder = HiQAPack.load(base / "folder", embed_model=HashEmbedding())
    embedded = HiQAPack.empty(embed_model=HashEmbedding(), store=str(base / "ingested"), store_format="embedded", **FAST)
    embedded.ingest(load_demo_documents())
    embedded.persist()
    copied = folder.copy_to(base / "copied", store_format="embedded")
    return folder, embedded, copied, base


def test_the_embedded_pack_ranks_as_the_folder_pack(packs):
    folder, embedded, copied, base = packs
    assert isinstance(embedded.backend, EmbeddedBackend) and is_embedded_store(base / "ingested")
    assert embedded.node_count == folder.node_count and embedded.document_ids == folder.document_ids
    loaded = HiQAPack.load(base / "copied", embed_model=HashEmbedding())
    assert isinstance(loaded.backend, EmbeddedBackend) and loaded.config.store_format == "embedded"
    for question in QUESTIONS:
        expected = folder.retrieve(question)
        # the same nodes (ids included): the same ranking, bit for bit, ties and all
        assert [(r.node.node_id, r.score) for r in copied.retrieve(question)] == [(r.node.node_id, r.score) for r in expected]
        assert [(r.node.node_id, r.score) for r in loaded.retrieve(question)] == [(r.node.node_id, r.score) for r in expected]
        assert loaded.retrieve(question)[0].node.get_content() == expected[0].node.get_content()
        assert loaded.retrieve(question)[0].node.metadata == expected[0].node.metadata
        # an ingestion of the same documents: the same scores, ties among other node ids
        assert _tie_free(embedded.retrieve(question)) == _tie_free(expected)
    for route in ("vector", "bm25", "keywords"):
        question = QUESTIONS[0]
        assert loaded.multi_route.route_scores(question)[route] == folder.multi_route.route_scores(question)[route]
    assert loaded.multi_route.beta == folder.multi_route.beta
    assert loaded.multi_route.collection_shape() == folder.multi_route.collection_shape()
    assert loaded.multi_route.document_names() == folder.multi_route.document_names()


def test_a_previous_release_store_copies_into_an_embedded_store(tmp_path):
    source = HiQAPack.load(ROOT / "tests" / "data" / "store_v0_2", embed_model=HashEmbedding())
    copied = source.copy_to(tmp_path / "e", store_format="embedded")
    reopened = HiQAPack.load(tmp_path / "e", embed_model=HashEmbedding())
    assert reopened.document_ids == source.document_ids and reopened.node_count == source.node_count
    for question in QUESTIONS[:2]:
        assert [(r.node.node_id, r.score) for r in reopened.retrieve(question)] == [
            (r.node.node_id, r.score) for r in source.retrieve(question)]
    assert copied.store.docstore.get_document_hash(reopened._documents()[reopened.document_ids[0]])


def test_deleting_and_replacing_a_document_ranks_as_the_folder_pack(tmp_path):
    documents = load_demo_documents()
    folder = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), **FAST)
    embedded = HiQAPack.empty(embed_model=HashEmbedding(), store=str(tmp_path / "s"), store_format="embedded", **FAST)
    embedded.ingest(load_demo_documents())
    assert embedded.delete_document("NX-2043") == folder.delete_document("NX-2043")
    changed = [d for d in load_demo_documents() if d.metadata.get(schema.DOCUMENT_ID) == "NX-2045"][0]
    changed = Document(text=changed.text + "\n\nAddendum: the NX-2045 ships in tape and reel.", id_=changed.doc_id,
                       metadata=dict(changed.metadata))
    for pack in (folder, embedded):
        report = pack.ingest([changed.model_copy()])
        assert report.documents_replaced == 1
    reloaded = HiQAPack.load(tmp_path / "s", embed_model=HashEmbedding())
    assert reloaded.node_count == folder.node_count and "NX-2043" not in reloaded.document_ids
    for question in QUESTIONS + ["tape and reel"]:
        assert _tie_free(reloaded.retrieve(question)) == _tie_free(folder.retrieve(question))
    assert reloaded.ingest(load_demo_documents()).documents_unchanged == len(documents) - 2


def test_routes_rebuilt_after_a_write_extract_only_the_new_document_s_title(tmp_path, monkeypatch):
    from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

    documents = load_demo_documents()
    pack = HiQAPack.empty(embed_model=HashEmbedding(), store=str(tmp_path / "s"), **FAST)
    pack.ingest(documents[:4])
    pack.retrieve(QUESTIONS[0])
    old_titles = {schema.get_document_title(d) for d in documents[:4]}
    extracted = []
    original = CriticalKeywordExtractor._extract_many

    def spy(self, texts, ner=True):
        extracted.extend(texts)
        return original(self, texts, ner=ner)

    monkeypatch.setattr(CriticalKeywordExtractor, "_extract_many", spy)
    pack.ingest(documents[4:5])
    assert pack.retrieve(QUESTIONS[1])
    assert not old_titles & set(extracted)
    assert schema.get_document_title(documents[4]) in extracted
    pack.config = updated(pack.config, keywords={"use_ner": False, "min_length": 3})  # other settings: read again
    extracted.clear()
    pack.ingest(documents[5:6])
    pack.retrieve(QUESTIONS[1])
    assert old_titles <= set(extracted)


def _ranked(pack, question):
    return [(r.node.node_id, r.score) for r in pack.retrieve(question)]


def test_a_new_store_is_the_embedded_store_unless_the_folder_store_is_asked_for(tmp_path):
    documents = load_demo_documents()
    given = HiQAPack.empty(embed_model=HashEmbedding(), store=str(tmp_path / "given"), **FAST)
    assert is_embedded_store(tmp_path / "given") and given.backend.commits_batches
    # In memory until the first persist, which writes an embedded store the pack then holds.
    pack = HiQAPack.from_documents(documents[:3], embed_model=HashEmbedding(), **FAST)
    assert not pack.backend.commits_batches and pack.store_path is None
    before = {q: _ranked(pack, q) for q in QUESTIONS}
    assert pack.persist(tmp_path / "saved") == tmp_path / "saved"
    assert is_embedded_store(tmp_path / "saved") and pack.backend.commits_batches
    assert {q: _ranked(pack, q) for q in QUESTIONS} == before
    pack.ingest(documents[3:4])  # committed as it is indexed: no persist needed
    assert HiQAPack.load(tmp_path / "saved", embed_model=HashEmbedding()).node_count == pack.node_count
    # Asked for, the folder store; the chunk graph (kept by it alone) makes it the default.
    HiQAPack.from_documents(documents[:2], embed_model=HashEmbedding(), store_format="folder", **FAST).persist(tmp_path / "f")
    assert holds_folder_store(tmp_path / "f") and not is_embedded_store(tmp_path / "f")
    graph = HiQAPack.empty(embed_model=HashEmbedding(), store=str(tmp_path / "g"), use_chunk_graph=True, **FAST)
    assert not graph.backend.commits_batches and graph.config.new_store_format() == "folder"
    # A pack persisted over a folder that holds a store already is refused (nothing is mixed).
    with pytest.raises(PackStoreError, match="holds a store already"):
        HiQAPack.from_documents(documents[:1], embed_model=HashEmbedding(), **FAST).persist(tmp_path / "saved")


def test_a_store_migrates_into_the_other_format_with_the_same_rankings(tmp_path):
    built = HiQAPack.from_documents(load_demo_documents(), embed_model=HashEmbedding(), store_format="folder", **FAST)
    built.persist(tmp_path / "folder")
    folder = HiQAPack.load(tmp_path / "folder", embed_model=HashEmbedding())
    embedded = folder.copy_to(tmp_path / "embedded")
    assert is_embedded_store(tmp_path / "embedded") and embedded.config.store_format == "embedded"
    back = HiQAPack.load(tmp_path / "embedded", embed_model=HashEmbedding()).copy_to(tmp_path / "back")
    assert holds_folder_store(tmp_path / "back") and back.config.store_format == "folder"
    again = HiQAPack.load(tmp_path / "back", embed_model=HashEmbedding())
    for question in QUESTIONS:
        expected = _ranked(folder, question)
        assert _ranked(embedded, question) == expected
        assert _ranked(again, question) == expected
    assert again.file_stats == folder.file_stats and again.document_ids == folder.document_ids
    with pytest.raises(PackStoreError, match="holds a store already"):
        folder.copy_to(tmp_path / "embedded")


def test_what_the_embedded_store_refuses_is_a_typed_error(tmp_path):
    with pytest.raises(InvalidSettingError, match="use_chunk_graph"):
        HiQAPack.empty(embed_model=HashEmbedding(), store=str(tmp_path / "g"), store_format="embedded", use_chunk_graph=True)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(PackStoreError, match="not empty"):
        HiQAPack.empty(embed_model=HashEmbedding(), store=str(tmp_path / "busy"), store_format="embedded")
    store = tmp_path / "s"
    pack = HiQAPack.empty(embed_model=HashEmbedding(), store=str(store), store_format="embedded", **FAST)
    pack.ingest(load_demo_documents()[:2])
    pack.close()
    from llama_index_hiqa.testing import HashingEmbedding

    with pytest.raises(PackStoreError, match="dimension"):
        HiQAPack.load(store, embed_model=HashingEmbedding(dim=64))
    data = (store / "vectors.f32").read_bytes()
    (store / "vectors.f32").write_bytes(data[: len(data) // 2])
    with pytest.raises(PackStoreError, match="vectors.f32"):
        HiQAPack.load(store, embed_model=HashEmbedding())
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "hiqa.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(PackStoreError, match="hiqa.sqlite"):
        HiQAPack.load(tmp_path / "bad", embed_model=HashEmbedding())


CRASH_CHILD = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {root!r})
    from llama_index_hiqa.demo import load_demo_documents
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack
    from llama_index_hiqa.storage import embedded
    from tests.pack_helpers import HashEmbedding

    pack = HiQAPack.load({store!r}, embed_model=HashEmbedding())
    point = {point!r}
    original = embedded.EmbeddedStore.{method}

    def killed(self, *args, **kwargs):
        if point == "before":
            os._exit(9)
        result = original(self, *args, **kwargs)
        os._exit(9)

    setattr(embedded.EmbeddedStore, {method!r}, killed)
    pack.ingest(load_demo_documents()[5:], batch_size=2)
    """
)


@pytest.mark.parametrize("method,point", [
    ("add_keywords", "before"),  # after the vectors and nodes were written, before the commit
    ("put_documents", "after"),  # everything written but the commit
    ("bump_generation", "after"),
])
def test_a_kill_in_the_middle_of_a_batch_leaves_the_previous_state(tmp_path, method, point):
    documents = load_demo_documents()
    store = tmp_path / "s"
    pack = HiQAPack.empty(embed_model=HashEmbedding(), store=str(store), store_format="embedded", **FAST)
    pack.ingest(documents[:5])
    pack.persist()
    before = {q: _keyed(pack.retrieve(q)) for q in QUESTIONS}
    count, ids = pack.node_count, pack.document_ids
    pack.close()
    child = CRASH_CHILD.format(root=str(ROOT), store=str(store), point=point, method=method)
    proc = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 9, proc.stderr[-2000:]
    after = HiQAPack.load(store, embed_model=HashEmbedding())
    assert after.node_count == count and after.document_ids == ids
    assert {q: _keyed(after.retrieve(q)) for q in QUESTIONS} == before
    # the next writer goes on from there, over the bytes the killed one left past the last row
    after.ingest(load_demo_documents()[5:])
    folder = HiQAPack.from_documents(load_demo_documents(), embed_model=HashEmbedding(), **FAST)
    assert after.node_count == folder.node_count
    for question in QUESTIONS:
        assert _tie_free(after.retrieve(question)) == _tie_free(folder.retrieve(question))


OPEN_CHILD = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack
    # What any store's first load imports or builds once a process (the settings check, the
    # PostgreSQL URL check, LlamaIndex's default splitter): not the store's cost.
    import llama_index_hiqa.retrievers.chunk_graph, llama_index_hiqa.storage.postgres
    import llama_index_hiqa.storage.backends.embedded, llama_index_hiqa.storage.backends.folder
    import llama_index_hiqa.retrievers.multi_route, llama_index.retrievers.bm25
    from llama_index.core import Settings
    Settings.transformations
    from tests.pack_helpers import HashEmbedding

    def rss():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

    embed = HashEmbedding()
    embed.get_query_embedding("warm up")
    before = rss()
    start = time.perf_counter()
    pack = HiQAPack.load({store!r}, embed_model=embed)
    opened = time.perf_counter() - start
    after = rss()
    pack.retrieve("output current of NX-000003 section 2")
    print(json.dumps({{"open_s": opened, "open_mb": after - before, "answer_mb": rss() - before}}))
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmRSS")
def test_opening_a_store_costs_little_memory_and_time(tmp_path):
    """4,000 synthetic nodes: the folder store loads them all; the embedded store maps them."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_scale import synthetic_documents

    store = tmp_path / "e"
    pack = HiQAPack.empty(embed_model=HashEmbedding(), store=str(store), store_format="embedded",
                          ingest_batch_size=20, **FAST)
    pack.ingest(synthetic_documents(4000))
    pack.persist()
    folder = HiQAPack.from_documents(
        synthetic_documents(4000), embed_model=HashEmbedding(), ingest_batch_size=20, store_format="folder", **FAST
    )
    folder.persist(tmp_path / "f")
    figures = {}
    for kind, path in (("embedded", store), ("folder", tmp_path / "f")):
        proc = subprocess.run(
            [sys.executable, "-c", OPEN_CHILD.format(root=str(ROOT), store=str(path))],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        figures[kind] = json.loads(proc.stdout.strip().splitlines()[-1])
    embedded, loaded = figures["embedded"], figures["folder"]
    assert embedded["open_s"] < 1.0 and embedded["open_s"] < loaded["open_s"] / 3, figures
    assert embedded["open_mb"] < 15 and embedded["open_mb"] < loaded["open_mb"] / 3, figures
    assert embedded["answer_mb"] < loaded["answer_mb"] / 2, figures


def test_the_command_line_builds_adds_to_asks_and_deletes_from_an_embedded_store(tmp_path, monkeypatch, capsys):
    from llama_index_hiqa import cli
    from llama_index_hiqa.pack import hiqa_pack as pack_module
    from llama_index_hiqa.demo import DEMO_DATA_DIR

    real = pack_module.keyword_extractor
    monkeypatch.setattr(pack_module, "default_embed_model", lambda m=None, backend=None: m or HashEmbedding())
    monkeypatch.setattr(pack_module, "keyword_extractor", lambda c: real(updated(c, FAST)))
    store = tmp_path / "s"
    base = ["ingest", str(DEMO_DATA_DIR), "--store", str(store), "--quiet"]
    assert cli.main(base + ["--store-format", "embedded"]) == 0
    assert is_embedded_store(store) and "built" in capsys.readouterr().out
    assert cli.main(base) == 2 and "--add" in capsys.readouterr().err  # never a silent overwrite
    assert cli.main(base + ["--add"]) == 0
    assert "0 added, 0 replaced, 10 unchanged" in capsys.readouterr().out
    assert cli.main(base + ["--rebuild"]) == 2 and "new folder" in capsys.readouterr().err
    assert cli.main(["ask", "What is the output voltage of the NX-2043?", "--store", str(store)]) == 0
    assert "NX-2043" in capsys.readouterr().out
    assert cli.main(["delete", "NX-2043", "--store", str(store)]) == 0
    pack = HiQAPack.load(store, embed_model=HashEmbedding())
    assert isinstance(pack.backend, EmbeddedBackend) and len(pack.document_ids) == 9 and "NX-2043" not in pack.document_ids


def _embedded_documents(store: Path) -> set:
    """The documents an embedded store holds, read as any reader would."""
    from tests.fault_cases import cheap_models

    with cheap_models():
        pack = HiQAPack.load(store, embed_model=HashEmbedding())
        try:
            return set(pack.document_ids)
        finally:
            pack.close()


@pytest.fixture(scope="module")
def embedded_base_store(tmp_path_factory):
    from tests import fault_cases

    path = tmp_path_factory.mktemp("faults") / "store"
    result = fault_cases.hiqa("ingest", fault_cases.DEMO_DATA_DIR, "--store", path, "--quiet", "--store-format", "embedded")
    assert result.code == 0, result
    return path


@pytest.mark.parametrize("name", [
    "two --add processes on one store",
    "writer killed mid-run, then --add again",
    "--sync removes a deleted file's document",
    "hiqa delete DOC",
    "hiqa delete of an unknown document",
])
def test_the_fault_cases_that_apply_to_any_store_are_handled_on_the_embedded_store(
    name, embedded_base_store, tmp_path, monkeypatch
):
    """The writer, kill and store-follows-the-folder cases of the fault suite, on an embedded
    store (the damage cases name the folder store's files: CURRENT, snapshots, manifests)."""
    from tests import fault_cases

    monkeypatch.setattr(fault_cases, "stored_documents", _embedded_documents)
    item = next(c for c in fault_cases.CASES if c.name == name)
    handled, note = fault_cases.run_case(item, tmp_path, embedded_base_store)
    assert handled, f"{item.cause}: {name} was not handled on the embedded store"


def test_opening_an_embedded_store_builds_no_text_splitter(tmp_path, monkeypatch):
    from llama_index.core import Settings

    store = tmp_path / "s"
    HiQAPack.empty(embed_model=HashEmbedding(), store=str(store), **FAST).ingest(load_demo_documents()[:1])
    # LlamaIndex's default splitter loads tiktoken's vocabulary (seconds): an open needs none.
    monkeypatch.setattr(Settings, "_node_parser", None)
    monkeypatch.setattr(Settings, "_transformations", None)
    loaded = HiQAPack.load(store, embed_model=HashEmbedding())
    assert loaded.retrieve(QUESTIONS[0])
    assert Settings._node_parser is None
    # A document inserted into the index itself still goes through Settings.transformations.
    loaded.index.insert(Document(text="The NX-9999 regulator.\n\nIt delivers 2 A.", id_="extra"))
    assert Settings._node_parser is not None and loaded.index.docstore.get_ref_doc_info("extra") is not None


def test_a_row_another_process_deletes_during_a_question_is_left_out(tmp_path, monkeypatch):
    """The matrix is mapped, then another process deletes a node before the question reads the
    chosen rows' ids: the deleted node is not an answer and the others keep their scores."""
    rng = np.random.default_rng(1)
    nodes = [_node(i, doc=f"doc{i}", vector=list(v)) for i, v in enumerate(rng.normal(size=(6, 8)))]
    store = MemmapVectorStore.open(str(tmp_path))
    store.add(nodes)
    query = VectorStoreQuery(query_embedding=list(rng.normal(size=8)), similarity_top_k=6)
    before = store.query(query)
    mapped = store._matrix()  # the reading the question made before the other process wrote
    MemmapVectorStore.open(str(tmp_path)).delete(f"doc{before.ids[0][1:]}")  # node nI is doc docI
    monkeypatch.setattr(MemmapVectorStore, "_matrix", lambda self: mapped)
    during = store.query(query)
    assert during.ids == before.ids[1:]
    assert during.similarities == pytest.approx(before.similarities[1:])
