"""The PostgreSQL store against a real server: build, other processes, updates, a kill during
ingestion, the errors a user can cause, and the same rankings as the folder store.

A ``pgserver`` instance (PostgreSQL 16 with pgvector, from its wheel) is started once per
session, unless ``HIQA_TEST_POSTGRES_URL`` names a server to use (its user must be allowed to
create databases and roles). Each test works in a database of its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("llama_index.vector_stores.postgres")

from llama_index.core.schema import Document  # noqa: E402

from llama_index_hiqa import cli, schema  # noqa: E402
from llama_index_hiqa.settings import updated  # noqa: E402
from llama_index_hiqa.pack import hiqa_pack as pack_module  # noqa: E402
from llama_index_hiqa.demo import DEMO_DATA_DIR, load_demo_documents  # noqa: E402
from llama_index_hiqa.errors import PackStoreError, UnknownNodeError  # noqa: E402
from llama_index_hiqa.pack.hiqa_pack import HiQAPack  # noqa: E402
from llama_index_hiqa.storage.backends.postgres import PostgresBackend  # noqa: E402
from llama_index_hiqa.storage.pg_connection import mask_url  # noqa: E402
from llama_index_hiqa.storage.postgres import PostgresStore  # noqa: E402
from tests.pack_helpers import HashEmbedding  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FAST = {"keywords": {"use_ner": False}}
QUESTIONS = [
    "What is the maximum output current of the NX-2043?",
    "NX-2040 dropout voltage at 150 mA",
    "Which pin enables the regulator?",
    "thermal shutdown temperature",
]


# The server (`server` fixture, `Server`) lives in conftest.py: the README test uses it too.


@pytest.fixture
def url(server):
    return server.database()


@pytest.fixture(scope="module")
def documents():
    return load_demo_documents()


@pytest.fixture(scope="module")
def local_pack(documents):
    return HiQAPack.from_documents(documents, embed_model=HashEmbedding(), **FAST)


@pytest.fixture(scope="module")
def built(server, documents):
    """One database with the demo corpus, shared by the read-only tests."""
    url = server.database()
    HiQAPack.from_documents(documents, embed_model=HashEmbedding(), store=url, **FAST).close()
    return url


def _assert_same_ranking(expected, got):
    """Same scores in the same order and the same nodes at each score. Look-alike datasheets
    tie (identical pin tables); ties are ordered by node id, which differs between two builds,
    so only the nodes of the tie that the top-k cut also cuts may differ."""
    assert [round(h.score, 4) for h in got] == [round(h.score, 4) for h in expected]
    groups = {}
    for keys, hits in (("expected", expected), ("got", got)):
        for key, hit in zip(_keys(hits), hits):
            groups.setdefault(round(hit.score, 4), {}).setdefault(keys, set()).add(key)
    last = round(expected[-1].score, 4)
    for score_value, sides in groups.items():
        if score_value != last:
            assert sides["got"] == sides["expected"], score_value


def _keys(hits):
    return [(schema.get_document_id(h.node), schema.get_position(h.node)) for h in hits]


def _run(code: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


ASK = """
import json, sys
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from tests.pack_helpers import HashEmbedding
pack = HiQAPack.load({url!r}, embed_model=HashEmbedding())
out = [[(h.node.metadata["document_id"], h.node.metadata["position"]) for h in pack.retrieve(q)] for q in {questions!r}]
print(json.dumps(out))
"""


# --- build and rankings ----------------------------------------------------------------------------
def test_same_rankings_as_the_folder_store(built, local_pack):
    pack = HiQAPack.load(built, embed_model=HashEmbedding())
    assert isinstance(pack.backend, PostgresBackend)
    assert pack.node_count == local_pack.node_count
    assert pack.document_ids == local_pack.document_ids
    for question in QUESTIONS:
        here, there = local_pack.retrieve(question), pack.retrieve(question)
        _assert_same_ranking(here, there)
        by_key = {k: h for k, h in zip(_keys(here), here)}
        for key, b in zip(_keys(there), there):
            if key not in by_key:
                continue
            a = by_key[key]
            for route in ("bm25", "keywords"):
                ra, rb = a.node.metadata[schema.ROUTE_SCORES][route], b.node.metadata[schema.ROUTE_SCORES][route]
                assert (ra is None) == (rb is None) and (ra is None or rb == pytest.approx(ra, rel=1e-4)), (question, key, [(k, h.node.node_id[:6], h.node.metadata[schema.ROUTE_SCORES]) for k, h in zip(_keys(here), here)], [(k, h.node.node_id[:6], h.node.metadata[schema.ROUTE_SCORES]) for k, h in zip(_keys(there), there)])


def test_async_retrieval_ranks_as_sync(built):
    pack = HiQAPack.load(built, embed_model=HashEmbedding())
    retriever = pack.as_retriever()
    for question in QUESTIONS[:2]:
        _assert_same_ranking(retriever.retrieve(question), asyncio.run(retriever.aretrieve(question)))


def test_the_postgres_retriever_is_the_one_class_with_what_its_parts_cannot_do_refused(built, monkeypatch, tmp_path):
    from llama_index_hiqa import MultiRouteRetriever
    from llama_index_hiqa.retrievers.document_focus import DocumentFocusRetriever, MultiRouteRanking
    from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

    pack = HiQAPack.load(built, embed_model=HashEmbedding())
    multi = pack.multi_route
    assert type(multi) is MultiRouteRetriever and isinstance(multi, MultiRouteRanking)
    with pytest.raises(NotImplementedError, match="full_ranking"):
        multi.full_ranking(QUESTIONS[0])
    with pytest.raises(NotImplementedError, match="nothing to persist"):
        multi.persist(tmp_path / "routes")
    assert multi.with_settings(similarity_top_k=3).retrieve(QUESTIONS[0])  # the parent's methods work
    retriever = pack.as_retriever()
    assert isinstance(retriever, DocumentFocusRetriever)
    calls = []
    real = CriticalKeywordExtractor.extract_query
    monkeypatch.setattr(
        CriticalKeywordExtractor, "extract_query", lambda self, q, *a, **k: calls.append(q) or real(self, q, *a, **k)
    )
    for question in QUESTIONS[:2]:
        calls.clear()
        assert retriever.retrieve(question)
        assert calls == [question]  # the statement's keywords, the focus's choice and its scores: one extraction


def test_a_read_only_session_answers_like_a_replica(built):
    """Opening and querying write nothing, so a read replica (here: a read-only session,
    set through the URL's own options) serves a pack."""
    from urllib.parse import quote

    read_only = built + ("&" if "?" in built else "?") + "options=" + quote("-c default_transaction_read_only=on")
    pack = HiQAPack.load(read_only, embed_model=HashEmbedding())
    assert pack.store.scalar("SHOW default_transaction_read_only") == "on"
    assert pack.retrieve(QUESTIONS[0])
    assert asyncio.run(pack.as_retriever().aretrieve(QUESTIONS[0]))
    with pytest.raises(PackStoreError, match="read-only"):
        pack.delete_document(pack.document_ids[0])


def test_query_from_another_process_and_several_at_once(built):
    expected = [_keys(HiQAPack.load(built, embed_model=HashEmbedding()).retrieve(q)) for q in QUESTIONS]
    expected = [[list(k) for k in keys] for keys in expected]
    procs = [_run(ASK.format(url=built, questions=QUESTIONS)) for _ in range(3)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1]) == expected


# --- updates ---------------------------------------------------------------------------------------
class CountingEmbedding(HashEmbedding):
    texts_embedded: int = 0

    def _get_text_embeddings(self, texts):
        self.texts_embedded += len(texts)
        return super()._get_text_embeddings(texts)


def _table_counts(pack):
    store = pack.store
    return {
        "nodes": store.scalar("SELECT count(*) FROM hiqa_nodes"),
        "vectors": store.scalar("SELECT count(*) FROM data_hiqa_vectors"),
        "docstore": store.scalar("SELECT count(*) FROM data_hiqa_docstore WHERE namespace = 'docstore/data'"),
        "documents": store.scalar("SELECT count(*) FROM hiqa_documents"),
        "counted": pack.node_count,
    }


def test_add_replace_delete_and_unchanged_reingestion(url, documents):
    embed = CountingEmbedding()
    pack = HiQAPack.from_documents(documents[:4], embed_model=embed, store=url, **FAST)
    first = pack.node_count
    other = HiQAPack.load(url, embed_model=HashEmbedding())  # another handle sees each commit

    embed.texts_embedded = 0
    report = pack.ingest(documents[:4])
    assert (report.documents_unchanged, report.nodes_added, embed.texts_embedded) == (4, 0, 0)

    added = pack.add_documents(documents[4:6])
    assert added and other.node_count == first + len(added)
    new_doc = schema.get_document_id(added[0])
    assert new_doc in other.document_ids
    hits = other.retrieve(QUESTIONS[0])
    assert hits

    changed = documents[0].model_copy()
    changed.set_content(documents[0].text + "\n\nErratum: the NX-9999 supersedes this part.")
    report = pack.ingest([changed])
    assert report.documents_replaced == 1 and report.nodes_removed > 0
    counts = _table_counts(other)
    assert counts["nodes"] == counts["vectors"] == counts["docstore"] == counts["counted"]

    removed = pack.delete_document(new_doc)
    assert removed > 0 and new_doc not in other.document_ids
    counts = _table_counts(other)
    assert counts["nodes"] == counts["vectors"] == counts["docstore"] == counts["counted"]
    assert all(schema.get_document_id(h.node) != new_doc for h in other.retrieve(QUESTIONS[0]))
    with pytest.raises(UnknownNodeError):
        pack.delete_document(new_doc)


KILLED_INGEST = """
import sys, time
from llama_index_hiqa.demo import load_demo_documents
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from llama_index_hiqa.storage import postgres
from tests.pack_helpers import HashEmbedding

real_insert = postgres.PostgresStore._insert
def insert_then_stall(self, *args, **kwargs):
    real_insert(self, *args, **kwargs)   # every row of the batch written, not committed
    print("INSERTED", flush=True)
    time.sleep(120)
postgres.PostgresStore._insert = insert_then_stall
pack = HiQAPack.load({url!r}, embed_model=HashEmbedding())
docs = load_demo_documents()
changed = docs[0].model_copy()
changed.set_content(docs[0].text + " revised")
pack.ingest([changed] + docs[5:])
"""


def test_a_kill_during_ingestion_leaves_the_previous_state(url, documents):
    pack = HiQAPack.from_documents(documents[:5], embed_model=HashEmbedding(), store=url, **FAST)
    before = (_table_counts(pack), pack.document_ids, _keys(pack.retrieve(QUESTIONS[0])))
    proc = _run(KILLED_INGEST.format(url=url))
    line = proc.stdout.readline()
    assert line.strip() == "INSERTED", proc.stderr.read()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    fresh = HiQAPack.load(url, embed_model=HashEmbedding())
    assert (_table_counts(fresh), fresh.document_ids, _keys(fresh.retrieve(QUESTIONS[0]))) == before
    # The killed writer's lock went with its connection: the next ingestion proceeds.
    report = fresh.ingest(documents[5:7])
    assert report.documents_added == 2


# --- errors ----------------------------------------------------------------------------------------
def test_a_database_without_a_pack_and_a_malformed_url(url):
    with pytest.raises(PackStoreError, match="holds no HiQA pack"):
        HiQAPack.load(url, embed_model=HashEmbedding())
    with pytest.raises(PackStoreError, match="not a valid PostgreSQL URL"):
        HiQAPack.load("postgresql://app:pw@db:notaport/rag", embed_model=HashEmbedding())


def test_unreachable_server_is_one_line_with_the_password_masked(caplog, capsys):
    secret = "s3cret-pw"
    url = f"postgresql://app:{secret}@127.0.0.1:1/rag"
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(PackStoreError, match="cannot reach the server") as info:
            HiQAPack.load(url, embed_model=HashEmbedding())
        assert secret not in str(info.value) and "app:***@" in str(info.value)
        assert cli.main(["ask", "question", "--store", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach the server" in err and secret not in err
    assert secret not in caplog.text


def test_wrong_credentials(server, caplog):
    if server.pgdata is None:
        pytest.skip("needs the pgserver instance (its pg_hba.conf is edited)")
    role = f"hiqa_pw_{uuid.uuid4().hex[:6]}"
    server.sql(f"CREATE ROLE {role} LOGIN PASSWORD 'right-password'")
    hba = server.pgdata / "pg_hba.conf"
    hba.write_text(f"local all {role} scram-sha-256\nhost all {role} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
    server.sql("SELECT pg_reload_conf()")
    url = server.database(user=role, password="wrong-password")
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(PackStoreError, match="password authentication failed") as info:
            HiQAPack.load(url, embed_model=HashEmbedding())
    assert "wrong-password" not in str(info.value) and "wrong-password" not in caplog.text


def test_missing_pgvector_extension(server):
    role = f"hiqa_plain_{uuid.uuid4().hex[:6]}"
    server.sql(f"CREATE ROLE {role} LOGIN")
    url = server.database(user=role)
    name = url.rsplit("/", 1)[1].split("?")[0]
    server.sql(f"REVOKE CREATE ON DATABASE {name} FROM PUBLIC")
    with pytest.raises(PackStoreError, match="pgvector extension") as info:
        HiQAPack.from_documents(load_demo_documents()[:1], embed_model=HashEmbedding(), store=url, **FAST)
    assert "CREATE EXTENSION vector" in str(info.value)


class OtherEmbedding(HashEmbedding):
    model_name: str = "another-model"


def test_a_store_built_with_another_embedding_model(built):
    with pytest.raises(PackStoreError, match="another-model") as info:
        HiQAPack.load(built, embed_model=OtherEmbedding())
    assert "hash-bow-256" in str(info.value)



def test_mask_url_hides_every_password():
    assert mask_url("postgresql://app:p%40ss@db.internal:5432/rag") == "postgresql://app:***@db.internal:5432/rag"
    assert mask_url("postgresql://app@db/rag") == "postgresql://app@db/rag"


# --- the command line --------------------------------------------------------------------------------
def test_cli_ingest_and_ask_with_a_database(url, monkeypatch, capsys):
    from tests.test_cli import _rules_only

    monkeypatch.setattr(pack_module, "default_embed_model", lambda m=None, backend=None: m or HashEmbedding())
    monkeypatch.setattr(pack_module, "keyword_extractor", _rules_only)
    assert cli.main(["ingest", str(DEMO_DATA_DIR), "--store", url, "--quiet"]) == 0
    assert "built" in capsys.readouterr().out
    assert cli.main(["ingest", str(DEMO_DATA_DIR), "--store", url, "--quiet"]) == 2
    assert "--add" in capsys.readouterr().err
    assert cli.main(["ingest", str(DEMO_DATA_DIR), "--store", url, "--quiet", "--add"]) == 0
    assert "added to" in capsys.readouterr().out
    assert cli.main(["ask", QUESTIONS[0], "--store", url, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["sources"] and payload["sources"][0]["document_id"]
    store = PostgresStore(url).connect()
    assert store.scalar("SELECT count(*) FROM hiqa_documents WHERE file_size IS NOT NULL") == len(list(DEMO_DATA_DIR.glob("*.pdf")))
    store.dispose()


def test_cli_sync_and_delete_with_a_database(url, monkeypatch, capsys, tmp_path):
    import shutil

    from tests.test_cli import _rules_only

    monkeypatch.setattr(pack_module, "default_embed_model", lambda m=None, backend=None: m or HashEmbedding())
    monkeypatch.setattr(pack_module, "keyword_extractor", _rules_only)
    docs = tmp_path / "docs"
    shutil.copytree(DEMO_DATA_DIR, docs, ignore=shutil.ignore_patterns("*.jsonl"))
    assert cli.main(["ingest", str(docs), "--store", url, "--quiet"]) == 0
    (docs / "NX-2046.pdf").unlink()
    assert cli.main(["ingest", str(docs), "--store", url, "--quiet", "--sync"]) == 0
    captured = capsys.readouterr()
    assert "removed NX-2046" in captured.err and "1 removed" in captured.out
    assert cli.main(["delete", "NX-2040", "--store", url]) == 0
    pack = HiQAPack.load(url, embed_model=HashEmbedding())
    try:
        assert sorted(pack.document_ids) == [f"NX-{n}" for n in range(2041, 2050) if n != 2046]
    finally:
        pack.close()


def test_from_directory_store_argument_for_a_database_and_a_folder(url, tmp_path):
    in_database = HiQAPack.from_directory(DEMO_DATA_DIR, store=url, embed_model=HashEmbedding(), **FAST)
    in_folder = HiQAPack.from_directory(DEMO_DATA_DIR, store=tmp_path / "store", embed_model=HashEmbedding(), **FAST)
    assert isinstance(in_database.backend, PostgresBackend) and in_folder.store_path == tmp_path / "store"
    reloaded = HiQAPack.load(tmp_path / "store", embed_model=HashEmbedding())
    assert reloaded.node_count == in_database.node_count == in_folder.node_count
    assert sorted(in_database.file_stats) == sorted(reloaded.file_stats)


def test_a_folder_pack_copied_into_a_database_ranks_the_same(url, local_pack):
    copied = local_pack.copy_to(url)
    assert copied.node_count == local_pack.node_count
    for question in QUESTIONS:
        hits = copied.retrieve(question)
        assert [h.node.node_id for h in hits] == [h.node.node_id for h in local_pack.retrieve(question)]


def test_persist_saves_the_settings_in_the_database(url, documents):
    pack = HiQAPack.from_documents(documents[:2], embed_model=HashEmbedding(), store=url, **FAST)
    pack.config = updated(pack.config, multi_route={"alpha": 0.5})
    assert pack.persist(url) == mask_url(url)
    assert HiQAPack.load(url, embed_model=HashEmbedding()).config.multi_route.alpha == 0.5
    with pytest.raises(PackStoreError, match="cannot be persisted"):
        pack.persist("/tmp/elsewhere")


def test_text_with_nul_characters_is_stored(url):
    """PDF text sometimes holds NUL characters, which PostgreSQL text and jsonb cannot."""
    document = Document(text="# NX-9000\n\nOutput\x00 current 3 A.", metadata={schema.DOCUMENT_TITLE: "NX\x009000"})
    pack = HiQAPack.from_documents([document], embed_model=HashEmbedding(), store=url, **FAST)
    hits = pack.retrieve("NX-9000 output current")
    assert hits and "\x00" not in hits[0].node.get_content() and "Output current" in hits[0].node.get_content()


def test_no_password_in_the_objects_or_the_logs(server, caplog):
    if server.pgdata is None:
        pytest.skip("needs the pgserver instance (trust authentication accepts any password)")
    url = server.database(user="postgres", password="pw-must-not-leak")
    with caplog.at_level(logging.DEBUG):
        pack = HiQAPack.from_documents(load_demo_documents()[:2], embed_model=HashEmbedding(), store=url, **FAST)
        pack.retrieve(QUESTIONS[0])
        asyncio.run(pack.as_retriever().aretrieve(QUESTIONS[0]))
    shown = " ".join([caplog.text, repr(pack.index.vector_store), repr(pack.index.docstore._kvstore.__dict__),
                      str(pack.store.engine), mask_url(url), pack.persist(url)])
    assert "pw-must-not-leak" not in shown


def test_name_abbreviations_and_the_latest_year_match_titles_as_in_the_folder_store(url):
    filings = {
        "AMERICANEXPRESS_2022_10K": ("American Express Company, Form 10-K, fiscal year ended December 31, 2022",
                                     "Operating margin improved as card member spending grew."),
        "BOEING_2022_10K": ("The Boeing Company, Form 10-K, fiscal year ended December 31, 2022",
                            "Operating margin of commercial airplanes improved in 2022."),
        "PEPSICO_2021_10K": ("PepsiCo, Inc., Form 10-K, fiscal year ended December 25, 2021",
                             "Legal proceedings of 2021 and 2020 are described here."),
        "PEPSICO_2022_10K": ("PepsiCo, Inc., Form 10-K, fiscal year ended December 31, 2022",
                             "Legal proceedings are described here."),
    }
    documents = [
        Document(text=text, metadata={schema.DOCUMENT_ID: doc_id, schema.DOCUMENT_TITLE: title})
        for doc_id, (title, text) in filings.items()
    ]
    settings = {"keywords": {"use_ner": False, "expert_keywords": ["American Express", "Boeing", "PepsiCo"]}}
    local = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), **settings)
    stored = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), store=url, **settings)
    for question, first in [
        ("Does AMEX have an improving operating margin profile as of 2022?", "AMERICANEXPRESS_2022_10K"),
        ("Has PepsiCo reported any ongoing legal battles from FY2022 and FY2021?", "PEPSICO_2022_10K"),
    ]:
        scores = []
        for pack in (local, stored):
            hits = pack.multi_route.retrieve(question)
            assert schema.get_document_id(hits[0].node) == first, question
            scores.append({schema.get_document_id(h.node): h.node.metadata[schema.ROUTE_SCORES]["keywords"] for h in hits})
        assert scores[0] == scores[1], question
    stored.close()
