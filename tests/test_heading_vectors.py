"""Heading-path vectors computed at ingestion and stored with every store: a question embeds no
heading path, ranks as when the focus embedded them itself, and a store built before (without
them) still loads and falls back to embedding them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llama_index_hiqa.demo import load_demo_documents
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from llama_index_hiqa.retrievers.document_focus import DocumentFocusRetriever, embed_headings
from llama_index_hiqa.storage.backends.heading_vectors import FILENAME, HeadingVectors, batch_headings
from tests.pack_helpers import HashEmbedding

FAST = {"keywords": {"use_ner": False}}
QUESTIONS = [
    "What is the maximum output current of the NX-2043?",
    "NX-2040 dropout voltage at 150 mA",
    "Which pin enables the regulator?",
    "thermal shutdown temperature",
]


@pytest.fixture(scope="module")
def documents():
    return load_demo_documents()


@pytest.fixture
def embedded_texts(monkeypatch):
    """Every text embedded as a document (not a query) while the test runs."""
    seen = []
    original = HashEmbedding._get_text_embedding

    def recording(self, text):
        seen.append(text)
        return original(self, text)

    monkeypatch.setattr(HashEmbedding, "_get_text_embedding", recording)
    return seen


def _ranking(retriever):
    return [[(h.node.node_id, round(h.score, 9)) for h in retriever.retrieve(q)] for q in QUESTIONS]


def _without_stored(pack):
    """The pack's default retriever as it was before heading vectors were stored."""
    return DocumentFocusRetriever(pack.multi_route, embed_model=pack.embed_model, config=pack.config.document_focus)


@pytest.fixture
def fact_reads(monkeypatch):
    """The nodes whose focus facts were computed from the node itself while the test runs (the
    fallback for a store without stored facts; the stores' writers compute them too)."""
    from llama_index_hiqa.retrievers import document_focus

    seen = []
    original = document_focus.focus_facts

    def recording(node):
        seen.append(node.node_id)
        return original(node)

    monkeypatch.setattr(document_focus, "focus_facts", recording)
    return seen


def _headings(pack_nodes):
    headings = batch_headings(pack_nodes)
    assert len(headings) > 5  # the demo datasheets have sections
    return headings


def _check_stored(source, headings, model):
    found = source.lookup(list(headings.values()))
    assert set(found) == set(headings.values())
    texts = sorted(found)
    assert np.allclose(np.stack([found[t] for t in texts]), embed_headings(model, texts), atol=1e-6)


def test_folder_store_keeps_heading_vectors_and_questions_embed_none(tmp_path, documents, embedded_texts):
    model = HashEmbedding()
    pack = HiQAPack.from_documents(documents, embed_model=model, store_format="folder", **FAST)
    headings = _headings(pack.nodes)
    _check_stored(pack.heading_vectors, headings, model)
    assert len(pack.heading_vectors) == len(headings)
    embedded_texts.clear()
    stored = _ranking(pack.as_retriever())
    assert not set(embedded_texts) & set(headings.values())  # no heading path embedded at question time
    assert stored == _ranking(_without_stored(pack))  # the same ranking as the focus embedding them

    pack.persist(tmp_path / "store")
    loaded = HiQAPack.load(tmp_path / "store", embed_model=HashEmbedding())
    assert len(loaded.heading_vectors) == len(headings)
    embedded_texts.clear()
    assert _ranking(loaded.as_retriever()) == stored
    assert not set(embedded_texts) & set(headings.values())


def test_folder_store_built_before_loads_and_embeds_at_the_question(tmp_path, documents, embedded_texts):
    pack = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), store_format="folder", **FAST)
    expected = _ranking(pack.as_retriever())
    pack.backend.heading_vectors = HeadingVectors()  # what a store of an earlier release holds
    pack.persist(tmp_path / "old")
    assert not list((tmp_path / "old").glob(f"*/{FILENAME}"))
    loaded = HiQAPack.load(tmp_path / "old", embed_model=HashEmbedding())
    assert len(loaded.heading_vectors) == 0
    embedded_texts.clear()
    assert _ranking(loaded.as_retriever()) == expected
    assert set(embedded_texts) & set(batch_headings(pack.nodes).values())  # the fallback embedded them


def test_heading_vectors_of_another_model_are_not_used(tmp_path, documents):
    pack = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), store_format="folder", **FAST)
    pack.persist(tmp_path / "store")

    class Other(HashEmbedding):
        model_name: str = "another-model"

    loaded = HiQAPack.load(tmp_path / "store", embed_model=Other())
    assert len(loaded.heading_vectors) == 0


def test_embedded_store_writes_heading_vectors_with_each_batch(tmp_path, documents, embedded_texts, fact_reads):
    folder = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), **FAST)
    expected = _ranking(folder.as_retriever())
    pack = HiQAPack.from_documents(
        documents, embed_model=HashEmbedding(), store=tmp_path / "emb", store_format="embedded", **FAST
    )
    pack.persist()
    pack.close()
    headings = _headings(folder.nodes)
    loaded = HiQAPack.load(tmp_path / "emb", embed_model=HashEmbedding())
    assert loaded.store.db.scalar("SELECT count(*) FROM heading_vectors") == len(headings)
    assert loaded.store.db.scalar("SELECT count(*) FROM focus_facts") == loaded.node_count
    _check_stored(loaded.heading_vectors, headings, HashEmbedding())
    embedded_texts.clear()
    retriever = loaded.as_retriever()
    fact_reads.clear()
    got = _ranking(retriever)
    assert not fact_reads  # the focus read its facts, not the nodes
    assert not set(embedded_texts) & set(headings.values())
    assert [[s for _, s in q] for q in got] == [[s for _, s in q] for q in expected]  # ids differ between builds
    # a store built before: the tables empty, the focus embeds and reads nodes, the same ranking
    loaded.store.db.execute("DELETE FROM heading_vectors")
    loaded.store.db.execute("DELETE FROM focus_facts")
    again = HiQAPack.load(tmp_path / "emb", embed_model=HashEmbedding())
    embedded_texts.clear()
    retriever = again.as_retriever()
    fact_reads.clear()
    assert _ranking(retriever) == got
    assert set(embedded_texts) & set(headings.values()) and fact_reads
    # a document ingested again gets its facts; deleted, they go with it
    again.delete_document("NX-2040")
    again.add_documents(documents)  # only NX-2040 is written
    facts = again.store.db.scalar("SELECT count(*) FROM focus_facts")
    assert facts == len(again.store.document_node_ids("NX-2040")) > 0
    again.delete_document("NX-2040")
    assert again.store.db.scalar("SELECT count(*) FROM focus_facts") == 0


def test_facts_stored_by_an_earlier_release_are_read_from_the_nodes(tmp_path, documents, fact_reads):
    pack = HiQAPack.from_documents(
        documents, embed_model=HashEmbedding(), store=tmp_path / "emb", store_format="embedded", **FAST
    )
    pack.persist()
    pack.close()
    loaded = HiQAPack.load(tmp_path / "emb", embed_model=HashEmbedding())
    expected = _ranking(loaded.as_retriever())
    # the five facts an earlier release stored, without a version, and a number share of 0
    rows = loaded.store.db.rows_in("SELECT node_id, facts FROM focus_facts WHERE node_id IN ({})",
                                   [n.node_id for n in loaded.nodes])
    old = [(json.dumps([*json.loads(f)[:2], 0.0, *json.loads(f)[3:5]]), i) for i, f in rows]
    loaded.store.db.executemany("UPDATE focus_facts SET facts = ? WHERE node_id = ?", old)
    again = HiQAPack.load(tmp_path / "emb", embed_model=HashEmbedding())
    retriever = again.as_retriever()
    fact_reads.clear()
    assert _ranking(retriever) == expected  # the stale share was not used
    assert fact_reads  # the facts were computed from the nodes


def test_a_rolled_back_embedded_batch_leaves_no_heading_vector(tmp_path, documents, monkeypatch):
    from llama_index_hiqa.storage.embedded import EmbeddedStore

    pack = HiQAPack.empty(embed_model=HashEmbedding(), store=tmp_path / "emb", store_format="embedded", **FAST)

    def fail(self, records):
        raise RuntimeError("killed mid-batch")

    monkeypatch.setattr(EmbeddedStore, "put_documents", fail)
    with pytest.raises(RuntimeError):
        pack.add_documents(documents[:2])
    assert pack.store.db.scalar("SELECT count(*) FROM heading_vectors") == 0
    assert pack.store.db.scalar("SELECT count(*) FROM focus_facts") == 0


def test_postgres_store_writes_heading_vectors_in_the_batch_transaction(server, documents, embedded_texts, fact_reads):
    pytest.importorskip("llama_index.vector_stores.postgres")
    url = server.database()
    folder = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), **FAST)
    headings = _headings(folder.nodes)
    HiQAPack.from_documents(documents, embed_model=HashEmbedding(), store=url, **FAST).close()
    pack = HiQAPack.load(url, embed_model=HashEmbedding())
    rows = dict(pack.store.rows("SELECT hash, length(vector) FROM hiqa_heading_vectors"))
    assert set(rows) == set(headings) and set(rows.values()) == {4 * 256}
    _check_stored(pack.heading_vectors, headings, HashEmbedding())
    assert pack.store.scalar("SELECT count(*) FROM hiqa_focus_facts") == pack.node_count
    embedded_texts.clear()
    retriever = pack.as_retriever()
    fact_reads.clear()
    got = _ranking(retriever)
    assert not fact_reads and not set(embedded_texts) & set(headings.values())
    assert got == _ranking(_without_stored(pack))
    pack.delete_document("NX-2042")  # its facts go with its nodes
    assert pack.store.scalar("SELECT count(*) FROM hiqa_focus_facts") == pack.node_count
    pack.add_documents(documents)
    assert pack.store.scalar("SELECT count(*) FROM hiqa_focus_facts") == pack.node_count
    pack.close()

    # A database written before the table existed: it loads, the focus embeds, the next writer
    # creates the table.
    old = HiQAPack.load(url, embed_model=HashEmbedding())
    with old.store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE hiqa_heading_vectors")
        conn.exec_driver_sql("DROP TABLE hiqa_focus_facts")
    old.close()
    old = HiQAPack.load(url, embed_model=HashEmbedding())
    embedded_texts.clear()
    assert _ranking(old.as_retriever()) == got
    assert set(embedded_texts) & set(headings.values())
    old.delete_document("NX-2040")
    old.add_documents(documents)  # only NX-2040 is new: the next writer creates both tables
    assert old.store.scalar("SELECT count(*) FROM hiqa_heading_vectors") > 0
    assert old.store.scalar("SELECT count(*) FROM hiqa_focus_facts") == len(old.multi_route.document_node_ids("NX-2040")) > 0
    old.close()
