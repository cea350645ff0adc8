"""The PostgreSQL store's bulk path against a real server: what COPY writes is what LlamaIndex's
own stores and bm25s would hold, a failed batch leaves nothing, the HNSW index is built after a
load into an empty table (and rebuilt by the next writer when a load died first), format-2 and
format-3 databases are migrated, BM25's pruned top-k is the top-k of summing every posting, and
a question costs a fixed number of statements.

Uses the ``server`` fixture of conftest.py (a pgserver instance, or ``HIQA_TEST_POSTGRES_URL``).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st

pytest.importorskip("llama_index.vector_stores.postgres")

from llama_index.core.schema import MetadataMode  # noqa: E402
from sqlalchemy import text  # noqa: E402

from llama_index_hiqa import schema  # noqa: E402
from llama_index_hiqa.errors import PackStoreError  # noqa: E402
from llama_index_hiqa.pack.hiqa_pack import HiQAPack  # noqa: E402
from llama_index_hiqa.storage import pg_bulk  # noqa: E402
from llama_index_hiqa.storage.pg_bulk import BULK_LOCK, VECTOR_INDEX  # noqa: E402
from llama_index_hiqa.storage import pg_schema  # noqa: E402
from llama_index_hiqa.storage.pg_schema import STORE_FORMAT, BM25Tokenizer  # noqa: E402
from llama_index_hiqa.indexes.keyword_index import normalize_keyword  # noqa: E402
from tests.pack_helpers import HashEmbedding  # noqa: E402
from tests.test_postgres_store import FAST, QUESTIONS, _assert_same_ranking, _keys, _table_counts  # noqa: E402


@pytest.fixture(scope="module")
def documents():
    from llama_index_hiqa.demo import load_demo_documents

    return load_demo_documents()


@pytest.fixture(scope="module")
def built(server, documents):
    url = server.database()
    HiQAPack.from_documents(documents, embed_model=HashEmbedding(), store=url, **FAST).close()
    return url


def _has_index(pack) -> bool:
    return pack.store.scalar(f"SELECT to_regclass('{VECTOR_INDEX}') IS NOT NULL")


def _stored_nodes(pack):
    """Every node as the docstore holds it, with its stored vector, in the order written."""
    ids = [r[0] for r in pack.store.rows("SELECT node_id FROM hiqa_nodes ORDER BY node_row")]  # as written
    nodes = pack.store.nodes(ids)
    vectors = dict(pack.store.rows("SELECT node_id, embedding::real[] FROM data_hiqa_vectors"))
    for node_id, node in nodes.items():
        node.embedding = [float(v) for v in vectors[node_id]]
    return [nodes[i] for i in ids]


def test_copy_writes_what_llamaindex_stores_write(server, built):
    """The vector and docstore rows COPY wrote equal those PGVectorStore.add and
    PostgresDocumentStore.add_documents write for the same nodes, row by row."""
    pack = HiQAPack.load(built, embed_model=HashEmbedding())
    nodes = _stored_nodes(pack)
    other = HiQAPack.empty(embed_model=HashEmbedding(), store=server.database(), **FAST)
    other.index.vector_store.add(nodes)
    other.index.docstore.add_documents([n.model_copy(update={"embedding": None}) for n in nodes])

    # (Compared as parsed JSON: the nodes given to LlamaIndex's stores here were read back from
    # jsonb, which orders object keys its own way.)
    def vector_rows(p):
        rows = p.store.rows("SELECT node_id, text, metadata_, embedding::text FROM data_hiqa_vectors")
        return sorted((i, t, {**m, "_node_content": json.loads(m["_node_content"])}, e) for i, t, m, e in rows)

    def docstore_rows(p, namespace):
        return sorted(p.store.rows("SELECT key, value::text FROM data_hiqa_docstore WHERE namespace = :n", n=namespace))

    assert vector_rows(pack) == vector_rows(other)
    ours, theirs = (dict(docstore_rows(p, "docstore/data")) for p in (pack, other))
    assert {k: json.loads(v) for k, v in ours.items()} == {k: json.loads(v) for k, v in theirs.items()}
    ours = {k: json.loads(v) for k, v in docstore_rows(pack, "docstore/metadata")}
    theirs = {k: json.loads(v) for k, v in docstore_rows(other, "docstore/metadata")}
    # (node.hash covers the metadata as ordered in the node, so only its presence is compared)
    assert {k: ours[k]["ref_doc_id"] for k in theirs} == {k: v["ref_doc_id"] for k, v in theirs.items()}
    assert all(ours[k]["doc_hash"] for k in ours)  # nodes' hashes plus the documents' hashes
    # Each document's node ids in order (its metadata: a node's of that document, as the folder
    # store's add_to_docstore keeps the first one's).
    ours, theirs = ({k: json.loads(v) for k, v in docstore_rows(p, "docstore/ref_doc_info")} for p in (pack, other))
    assert {k: v["node_ids"] for k, v in ours.items()} == {k: v["node_ids"] for k, v in theirs.items()}
    assert all(v["metadata"]["document_id"] == theirs[k]["metadata"]["document_id"] for k, v in ours.items())
    pack.close()
    other.close()


def test_postings_keywords_and_statistics_are_the_nodes_tokens(built):
    """Each node's postings are its BM25 tokens counted (the tokens bm25s indexes), each
    term's document frequency counts its nodes, and the keyword index holds the normalised
    critical keywords."""
    pack = HiQAPack.load(built, embed_model=HashEmbedding())
    tokenizer = BM25Tokenizer()
    nodes = _stored_nodes(pack)
    tokens = tokenizer.documents([n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes])
    postings = {}
    for node_id, term, tf, length in pack.store.rows(
        "SELECT n.node_id, t.term, p.tf, p.length FROM hiqa_postings p JOIN hiqa_terms t USING (term_id) "
        "JOIN hiqa_nodes n USING (node_row)"
    ):
        postings.setdefault(node_id, {})[term] = (tf, length)
    df, max_tf, min_length = Counter(), Counter(), {}
    for node, toks in zip(nodes, tokens):
        assert postings.get(node.node_id, {}) == {t: (c, len(toks)) for t, c in Counter(toks).items()}
        df.update(set(toks))
        for term, count in Counter(toks).items():
            max_tf[term] = max(max_tf[term], count)
            min_length[term] = min(min_length.get(term, len(toks)), len(toks))
    assert dict(pack.store.rows("SELECT term, df FROM hiqa_terms WHERE df > 0")) == dict(df)
    assert {t: (m, n) for t, m, n in pack.store.rows("SELECT term, max_tf, min_length FROM hiqa_terms WHERE df > 0")} == {
        t: (max_tf[t], min_length[t]) for t in df}
    assert pack.store.scalar("SELECT total_length FROM hiqa_pack") == sum(len(t) for t in tokens)
    keywords = dict(pack.store.rows("SELECT node_id, keywords FROM hiqa_nodes"))
    title_keywords = dict(pack.store.rows("SELECT node_id, title_keywords FROM hiqa_nodes"))
    keyword_postings = set(pack.store.rows("SELECT keyword, node_id, in_title FROM hiqa_keywords"))
    expected_postings = set()
    for node in nodes:
        expected = [k for k in dict.fromkeys(normalize_keyword(k) for k in schema.get_critical_keywords(node)) if k]
        assert keywords[node.node_id] == expected
        expected_postings |= {(k, node.node_id, k in title_keywords[node.node_id]) for k in expected}
    assert keyword_postings == expected_postings and any(in_title for _, _, in_title in keyword_postings)
    pack.close()


def test_a_failed_batch_leaves_no_row(server, documents, monkeypatch):
    url = server.database()
    pack = HiQAPack.from_documents(documents[:3], embed_model=HashEmbedding(), store=url, **FAST)
    tables = ("hiqa_terms", "hiqa_postings", "hiqa_nodes", "hiqa_documents", "data_hiqa_vectors", "data_hiqa_docstore")

    def state():
        return ({t: pack.store.scalar(f"SELECT count(*) FROM {t}") for t in tables},
                pack.store.rows("SELECT term, df FROM hiqa_terms ORDER BY term"),
                pack.store.rows("SELECT node_count, total_length FROM hiqa_pack"))

    before = state()

    def fail(*args, **kwargs):  # the batch's last write
        raise RuntimeError("disk full")

    monkeypatch.setattr(pg_bulk, "upsert_kv", fail)
    monkeypatch.setattr("llama_index_hiqa.storage.postgres.upsert_kv", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        pack.ingest(documents[3:])
    assert state() == before
    monkeypatch.undo()
    report = pack.ingest(documents[3:])
    assert report.documents_added == len(documents) - 3
    counts = _table_counts(pack)
    assert counts["nodes"] == counts["vectors"] == counts["docstore"] == counts["counted"]
    pack.close()


def test_a_batch_commits_while_the_next_is_prepared_and_the_store_is_the_same(server, documents, monkeypatch):
    import threading
    import time

    from llama_index_hiqa.storage.postgres import PostgresStore

    events = []
    real_prepare, real_commit = PostgresStore.prepare, PostgresStore.commit

    def prepare(self, *args, **kwargs):
        events.append(("prepare", threading.current_thread().name))
        return real_prepare(self, *args, **kwargs)

    def commit(self, prepared, *args, **kwargs):
        events.append(("commit start", threading.current_thread().name))
        time.sleep(0.3)  # a slow server: the next batch is prepared meanwhile
        removed = real_commit(self, prepared, *args, **kwargs)
        events.append(("commit end", threading.current_thread().name))
        return removed

    monkeypatch.setattr(PostgresStore, "prepare", prepare)
    monkeypatch.setattr(PostgresStore, "commit", commit)
    behind = HiQAPack.empty(embed_model=HashEmbedding(), store=server.database(), **FAST)
    behind.ingest(documents[:6], batch_size=2)
    kinds = [kind for kind, _ in events]
    assert kinds.count("commit start") == 3
    # Batch 2 is prepared on the caller's thread while batch 1 commits on the committer's.
    assert kinds.index("prepare", kinds.index("commit start")) < kinds.index("commit end")
    assert {name for kind, name in events if kind.startswith("commit")} != {threading.current_thread().name}
    monkeypatch.undo()
    alone = HiQAPack.empty(embed_model=HashEmbedding(), store=server.database(), **FAST)
    for start in range(0, 6, 2):  # batch by batch, each committed before the next
        alone.ingest(documents[start:start + 2])
    assert _table_counts(behind) == _table_counts(alone)
    assert [n.node_id for n in _stored_nodes(behind)] != []
    assert [n.get_content() for n in _stored_nodes(behind)] == [n.get_content() for n in _stored_nodes(alone)]
    for question in QUESTIONS:
        _assert_same_ranking(alone.retrieve(question), behind.retrieve(question))
    behind.close()
    alone.close()


def test_a_document_read_again_while_its_batch_commits_replaces_it(server, documents):
    from llama_index.core.schema import Document

    first = documents[0]
    again = Document(id_=first.doc_id, text=first.text + "\n\nRevision B adds a note.", metadata=dict(first.metadata))
    pack = HiQAPack.empty(embed_model=HashEmbedding(), store=server.database(), **FAST)
    report = pack.ingest([first, documents[1], again], batch_size=2)
    assert report.documents_added == 2 and report.documents_replaced == 1
    assert report.nodes_removed > 0  # the first version's nodes
    assert pack.store.scalar("SELECT count(*) FROM hiqa_documents") == 2
    texts = [n.get_content() for n in _stored_nodes(pack) if n.ref_doc_id == first.doc_id]
    assert any("Revision B" in t for t in texts)
    assert _table_counts(pack)["nodes"] == pack.node_count
    pack.close()


def test_a_commit_that_fails_behind_is_raised_and_the_next_batch_is_not_written(server, documents, monkeypatch):
    from llama_index_hiqa.storage.postgres import PostgresStore

    pack = HiQAPack.empty(embed_model=HashEmbedding(), store=server.database(), **FAST)
    real_commit, calls = PostgresStore.commit, []

    def commit(self, prepared, *args, **kwargs):
        calls.append(len(prepared.documents))
        if len(calls) == 2:
            raise PackStoreError("postgresql://x", "disk full")
        return real_commit(self, prepared, *args, **kwargs)

    monkeypatch.setattr(PostgresStore, "commit", commit)
    with pytest.raises(PackStoreError, match="disk full"):
        pack.ingest(documents[:6], batch_size=2)
    assert len(calls) == 2  # the third batch was prepared but never committed
    assert pack.store.scalar("SELECT count(*) FROM hiqa_documents") == 2  # the first batch, whole
    monkeypatch.undo()
    report = pack.ingest(documents[:6], batch_size=2)
    assert report.documents_unchanged == 2 and report.documents_added == 4
    pack.close()


def test_hnsw_is_built_after_a_load_into_an_empty_table_and_kept_otherwise(server, documents, monkeypatch):
    url = server.database()
    pack = HiQAPack.empty(embed_model=HashEmbedding(), store=url, **FAST)
    seen = []
    real = pack._write_batch

    def write_and_look(*args, **kwargs):
        seen.append(_has_index(pack))
        return real(*args, **kwargs)

    monkeypatch.setattr(pack, "_write_batch", write_and_look)
    pack.ingest(documents[:4], batch_size=2)
    assert seen == [False, False]  # deferred while the load ran
    assert _has_index(pack)  # and built at its end
    seen.clear()
    pack.ingest(documents[4:])  # a non-empty table: the index is extended, never dropped
    assert seen and all(seen) and _has_index(pack)
    plan = "\n".join(r[0] for r in pack.store.rows(
        "EXPLAIN SELECT node_id FROM data_hiqa_vectors ORDER BY embedding <=> CAST(:q AS vector) LIMIT 5",
        _settings={"enable_seqscan": "off"},  # (a table this small is cheaper to scan)
        q=str([0.1] * len(pack.embed_model.get_query_embedding("x")))))
    assert VECTOR_INDEX in plan
    pack.close()


def test_a_load_that_died_before_its_index_build_is_finished_by_the_next_writer(server, documents):
    url = server.database()
    pack = HiQAPack.from_documents(documents[:2], embed_model=HashEmbedding(), store=url, **FAST)
    with pack.store.engine.begin() as conn:
        conn.exec_driver_sql(f"DROP INDEX {VECTOR_INDEX}")  # as a killed bulk load leaves it
    # While a live bulk load holds its lock, a writer leaves the index to it ...
    holder = pack.store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    holder.exec_driver_sql(f"SELECT pg_advisory_lock({BULK_LOCK})")
    other = HiQAPack.load(url, embed_model=HashEmbedding())
    other.store.write(other.index.vector_store, other.index.docstore, [])
    assert not _has_index(pack)
    holder.exec_driver_sql(f"SELECT pg_advisory_unlock({BULK_LOCK})")
    holder.close()
    # ... and builds it once no process does.
    report = other.ingest(documents[2:3])
    assert report.documents_added == 1 and _has_index(pack)
    pack.close()
    other.close()


def _back_to_format_3(conn) -> None:
    """The previous release's layout: no keyword postings (a GIN index on the keyword column
    instead), no term bounds."""
    conn.exec_driver_sql("DROP TABLE hiqa_keywords")
    conn.exec_driver_sql("ALTER TABLE hiqa_terms DROP COLUMN max_tf, DROP COLUMN min_length")
    conn.exec_driver_sql("CREATE INDEX hiqa_nodes_keywords ON hiqa_nodes USING gin (keywords)")
    conn.exec_driver_sql("UPDATE hiqa_pack SET format = 3")


def _assert_migrated(url, expected, old_format) -> None:
    from urllib.parse import quote

    read_only = url + ("&" if "?" in url else "?") + "options=" + quote("-c default_transaction_read_only=on")
    with pytest.raises(PackStoreError, match=f"store format {old_format}.*hiqa migrate"):
        HiQAPack.load(read_only, embed_model=HashEmbedding())
    migrated = HiQAPack.load(url, embed_model=HashEmbedding())
    assert migrated.store.read_pack()["format"] == STORE_FORMAT
    assert migrated.store.scalar("SELECT to_regclass('hiqa_nodes_keywords')") is None
    for question in QUESTIONS:
        _assert_same_ranking(expected[question], migrated.retrieve(question))
    bounds = dict(migrated.store.rows(
        "SELECT t.term_id, (t.max_tf, t.min_length) = (max(p.tf), min(p.length)) FROM hiqa_terms t "
        "JOIN hiqa_postings p USING (term_id) GROUP BY t.term_id"))
    assert bounds and all(bounds.values())
    assert migrated.store.scalar("SELECT count(*) FROM hiqa_keywords") == migrated.store.scalar(
        "SELECT count(*) FROM hiqa_nodes, unnest(keywords)") > 0
    migrated.ingest(expected["documents"][:1])  # unchanged: a no-op; the store still takes writes
    removed = migrated.delete_document(migrated.document_ids[0])
    assert removed > 0
    counts = _table_counts(migrated)
    assert counts["nodes"] == counts["vectors"] == counts["docstore"] == counts["counted"]
    assert migrated.store.scalar("SELECT count(*) FROM hiqa_keywords") == migrated.store.scalar(
        "SELECT count(*) FROM hiqa_nodes, unnest(keywords)")
    migrated.close()


def test_a_format_2_database_is_migrated_on_open(server, documents):
    """A database written two releases ago (text postings, no vocabulary, no keyword postings)
    answers as before after a one-time upgrade, and a read-only session gets a clear error."""
    url = server.database()
    pack = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), store=url, **FAST)
    expected = {q: pack.retrieve(q) for q in QUESTIONS}
    expected["documents"] = documents
    with pack.store.engine.begin() as conn:  # back to format 2's layout
        _back_to_format_3(conn)
        conn.exec_driver_sql(
            "CREATE TABLE old_postings AS SELECT t.term, n.node_id, n.ref_doc_id, p.tf::int AS tf, p.length "
            "FROM hiqa_postings p JOIN hiqa_terms t USING (term_id) JOIN hiqa_nodes n USING (node_row)"
        )
        conn.exec_driver_sql("DROP TABLE hiqa_postings, hiqa_terms")
        conn.exec_driver_sql("DROP SEQUENCE hiqa_term_ids, hiqa_node_rows")
        conn.exec_driver_sql("ALTER TABLE hiqa_nodes DROP COLUMN node_row, DROP COLUMN term_ids")
        conn.exec_driver_sql("ALTER TABLE old_postings RENAME TO hiqa_postings")
        conn.exec_driver_sql("CREATE INDEX hiqa_postings_term ON hiqa_postings (term) INCLUDE (node_id, tf, length)")
        conn.exec_driver_sql("UPDATE hiqa_pack SET format = 2")
    pack.close()
    _assert_migrated(url, expected, 2)


def test_a_format_3_database_is_migrated_on_open(server, documents):
    """A database of the previous release (keywords found through a GIN index, no term bounds)
    gets the keyword postings and the bounds on open, and answers as before."""
    url = server.database()
    pack = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), store=url, **FAST)
    expected = {q: pack.retrieve(q) for q in QUESTIONS}
    expected["documents"] = documents
    with pack.store.engine.begin() as conn:
        _back_to_format_3(conn)
    pack.close()
    _assert_migrated(url, expected, 3)


def _bm25_top(store, terms, n, rare_postings, probe_postings=pg_schema.PROBE_POSTINGS):
    """BM25's top ``n`` as ROUTES_SQL computes it, with the rare terms' postings budget and the
    skipped terms' read-or-look-up rule given; and how many terms were skipped."""
    rows = store.rows(
        f"WITH {pg_schema._BM25_TERMS_AND_STATS}, {pg_schema._BM25_TOP} SELECT node_id, score FROM b "
        "UNION ALL SELECT '#skipped', count(*) FROM skip",
        terms=terms, n=n, rare_postings=rare_postings, probe_postings=probe_postings,
    )
    return [(i, float(s)) for i, s in rows if i != "#skipped"], next(int(s) for i, s in rows if i == "#skipped")


def _bm25_every_posting(store, terms, n):
    """BM25's top ``n`` by summing every posting of the question's terms."""
    rows = store.rows(
        f"WITH {pg_schema._BM25_TERMS_AND_STATS} SELECT n.node_id, s.score FROM ("
        f"  SELECT p.node_row, {pg_schema._BM25_SUM} AS score FROM qt JOIN hiqa_postings p USING (term_id) "
        "   GROUP BY p.node_row) s JOIN hiqa_nodes n USING (node_row) WHERE s.score > 0 ORDER BY s.score DESC, 1 LIMIT :n",
        terms=terms, n=n,
    )
    return [(i, float(s)) for i, s in rows]


def _assert_same_top(expected, got):
    """The same scores in order, and the same nodes above the last score (the nodes tied at the
    cut are any of the tie, ordered by node id; sums in another order differ in the last bits)."""
    assert [round(s, 9) for _, s in got] == [round(s, 9) for _, s in expected]
    if expected:
        cut = round(expected[-1][1], 9)
        assert {i for i, s in got if round(s, 9) > cut} == {i for i, s in expected if round(s, 9) > cut}


def test_bm25_top_k_that_skips_common_terms_is_the_top_k_of_every_posting(server, documents):
    """With the rare terms' budget at 0 (only the rarest term read first), the commonest terms
    are skipped for many questions and cut sizes, and the top k and its scores are those of
    summing every posting; also after a document is removed (the bounds are then stale, still
    bounds) and another written."""
    url = server.database()
    pack = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), store=url, **FAST)
    tokenizer = BM25Tokenizer()
    questions = QUESTIONS + [
        "output current dropout voltage enable pin thermal shutdown regulator",
        "the regulator output voltage and current at temperature",
        "package pin enable input voltage range",
    ]

    def check():
        skipped = 0
        for question in questions:
            terms = tokenizer.query(question)
            for n in (1, 2, 3, 5, 10, 100):
                for probe_postings in (0, 10**9):  # the skipped terms looked up, or read whole
                    got, skip = _bm25_top(pack.store, terms, n, 0, probe_postings)
                    _assert_same_top(_bm25_every_posting(pack.store, terms, n), got)
                    skipped += skip
                default, _ = _bm25_top(pack.store, terms, n, pg_schema.RARE_POSTINGS)
                _assert_same_top(_bm25_every_posting(pack.store, terms, n), default)
        return skipped

    assert check() > 0  # the pruning was exercised, not only the full sum
    pack.delete_document(pack.document_ids[0])
    pack.ingest(documents[:1])
    assert check() > 0
    pack.close()


@pytest.fixture(scope="module")
def postings_store(server):
    """A database holding the BM25 tables alone (no vectors), for random postings."""
    from llama_index_hiqa.storage.postgres import PostgresStore

    store = PostgresStore(server.database()).connect()
    with store.engine.begin() as conn:
        for statement in pg_schema.SCHEMA:
            if "data_" not in statement:  # the vector table's index: no vector table here
                conn.exec_driver_sql(statement)
    yield store
    store.dispose()


def _write_postings(store, lengths, postings):
    """Replace the collection by nodes of ``lengths`` and ``postings`` ({term: {node: tf}}),
    with each term's document frequency and bounds as a write keeps them."""
    with store.engine.begin() as conn:
        for table in ("hiqa_postings", "hiqa_terms", "hiqa_nodes", "hiqa_documents", "hiqa_pack"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
        conn.exec_driver_sql(
            "INSERT INTO hiqa_pack (id, format, config, embed_model, embed_dim, index_id, node_count, total_length) "
            f"VALUES (1, {STORE_FORMAT}, '{{}}', 'm', 1, 'i', {len(lengths)}, {sum(lengths)})"
        )
        conn.exec_driver_sql(
            "INSERT INTO hiqa_documents (ref_doc_id, document_id, doc_hash, pages, node_count) VALUES ('d', 'd', 'h', 1, 1)"
        )
        for row, length in enumerate(lengths):
            conn.exec_driver_sql(
                "INSERT INTO hiqa_nodes (node_id, ref_doc_id, keywords, title_keywords, length, node_row) "
                f"VALUES ('n{row:03d}', 'd', '{{}}', '{{}}', {length}, {row})"
            )
        for term_id, (term, tfs) in enumerate(sorted(postings.items())):
            conn.exec_driver_sql(
                "INSERT INTO hiqa_terms (term_id, term, df, max_tf, min_length) VALUES "
                f"({term_id}, '{term}', {len(tfs)}, {max(tfs.values())}, {min(lengths[r] for r in tfs)})"
            )
            for row, tf in tfs.items():
                conn.exec_driver_sql(
                    f"INSERT INTO hiqa_postings (term_id, node_row, length, tf) VALUES ({term_id}, {row}, {lengths[row]}, {tf})"
                )


@st.composite
def _collections(draw):
    """Node lengths, postings of up to six terms over them (some common, some rare, the same
    tf often, so that scores tie), and a question of those terms (a term may repeat)."""
    nodes = draw(st.integers(1, 60))
    lengths = draw(st.lists(st.integers(1, 30), min_size=nodes, max_size=nodes))
    postings = {}
    for k, term in enumerate(("t0", "t1", "t2", "t3", "t4", "t5")[: draw(st.integers(1, 6))]):
        # t0 is the rarest; each next term is held by more nodes (the commonest are the skipped ones)
        rows = draw(st.sets(st.integers(0, nodes - 1), min_size=max(1, k * nodes // 6), max_size=max(1, (k + 1) * nodes // 6)))
        postings[term] = {row: draw(st.integers(1, 3)) for row in sorted(rows)}
    question = draw(st.lists(st.sampled_from(sorted(postings) + ["unknown"]), min_size=1, max_size=8))
    return lengths, postings, question


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(collection=_collections(), n=st.integers(1, 6), rare_postings=st.sampled_from([0, 3, 5000]),
       probe_postings=st.sampled_from([0, 1, pg_schema.PROBE_POSTINGS, 10**9]))
def test_bm25_top_k_on_random_postings_is_the_top_k_of_every_posting(
    postings_store, collection, n, rare_postings, probe_postings
):
    """Whatever the postings, the pruned top k (the rarest terms read first, the commonest skipped,
    each skipped term read whole or looked up per candidate) has the scores, and the nodes above
    the cut, of summing every posting."""
    lengths, postings, question = collection
    _write_postings(postings_store, lengths, postings)
    got, skipped = _bm25_top(postings_store, question, n, rare_postings, probe_postings)
    target(float(skipped))  # towards questions whose common terms are skipped
    _assert_same_top(_bm25_every_posting(postings_store, question, n), got)


@st.composite
def _keyword_postings(draw):
    """Keyword postings of up to four keywords over nodes whose ids sort differently by byte and by
    language (the route breaks ties by byte order), some in their title; a question's keywords."""
    nodes = draw(st.lists(st.text("aB_9z-", min_size=1, max_size=4), min_size=1, max_size=40, unique=True))
    postings = {}
    for k, keyword in enumerate(("k0", "k1", "k2", "k3")[: draw(st.integers(1, 4))]):
        held = draw(st.sets(st.sampled_from(nodes), min_size=1, max_size=max(1, (k + 1) * len(nodes) // 4)))
        postings[keyword] = {node: draw(st.booleans()) for node in held}
    asked = draw(st.lists(st.sampled_from(sorted(postings) + ["unknown"]), min_size=1, max_size=4, unique=True))
    in_titles = draw(st.lists(st.sampled_from(asked), unique=True))
    return postings, asked, in_titles


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(collection=_keyword_postings(), n=st.integers(1, 6), extra=st.sampled_from([-1.0, -0.5, 0.0, 1.0]),
       few_postings=st.sampled_from([0, 1, 3, pg_schema.KEYWORD_FEW_POSTINGS]))
def test_keyword_top_k_without_the_common_keywords_postings_is_the_top_k_of_every_posting(
    postings_store, collection, n, extra, few_postings
):
    """KEYWORD_ROUTE_SQL (the commonest keyword's postings read only for its first nodes by id,
    when it is the one common keyword) returns the nodes and |C| of counting every posting, ties at
    the cut broken by node id alike, whatever the title weight."""
    postings, asked, in_titles = collection
    with postings_store.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM hiqa_keywords")
        for keyword, held in postings.items():
            for node_id, in_title in held.items():
                conn.execute(text("INSERT INTO hiqa_keywords (keyword, node_id, in_title) VALUES (:k, :i, :t)"),
                             {"k": keyword, "i": node_id, "t": in_title})
    params = {"kw": asked, "tw": in_titles, "extra": extra, "n": n}
    got = postings_store.rows(pg_schema.KEYWORD_ROUTE_SQL, few_postings=few_postings, **params)
    every = postings_store.rows(  # |C| of every node holding a keyword, its top n
        f"WITH k AS ({pg_schema.KEYWORD_SQL}), kt AS (SELECT node_id FROM k ORDER BY score DESC, node_id COLLATE \"C\" LIMIT :n) "
        "SELECT 'k', node_id, score FROM k WHERE node_id IN (SELECT node_id FROM kt)", **params
    )
    assert sorted(got) == sorted(every)


def _route_rows(scores):
    return {route: dict(found) for route, found in scores.items()}


@pytest.mark.parametrize("few_postings", [pg_schema.KEYWORD_FEW_POSTINGS, 1])
def test_the_routes_in_concurrent_statements_are_the_one_statements_rows(built, monkeypatch, few_postings):
    """VECTOR_ROUTE_SQL, BM25_ROUTE_SQL and KEYWORD_ROUTE_SQL, sent at once (sync on pooled
    connections, async on the asyncpg pool), return every route's candidates and scores as ROUTES_SQL does,
    so ``pack.as_retriever()`` ranks the same; a failing statement fails only its routes. Also
    with a keyword of more than one posting counted as common (its first nodes by id only)."""
    from llama_index.core.schema import QueryBundle

    from llama_index_hiqa.retrievers.settings import BM25, KEYWORDS, VECTOR
    from llama_index_hiqa.storage.backends import pg_routes

    monkeypatch.setattr(pg_routes, "KEYWORD_FEW_POSTINGS", few_postings)

    pack = HiQAPack.load(built, embed_model=HashEmbedding(), **FAST)
    multi = pack.multi_route
    n = multi.config.candidates_per_route
    questions = QUESTIONS + ["NX-2043 NX-2040 regulator 2019", "pin", "zzzz unknown words only"]
    answered, beyond = set(), set()  # beyond: |C| a node has only as another route's candidate
    for question in questions:
        routes, bundle = multi.route_set(), QueryBundle(question)
        keywords = multi.route_set().keyword_route.question_keywords(bundle)
        for cut in (2, n):  # at 2, |C| of the other routes' candidates is beyond the keyword route's top
            one = _route_rows(routes.ask(bundle, cut, {}, concurrent=False, keywords=keywords))
            two = _route_rows(routes.ask(bundle, cut, {}, concurrent=True, keywords=keywords))
            both = _route_rows(asyncio.run(routes.aask(bundle, cut, {}, keywords=keywords)))
            answered.update(route for route in one if one[route])
            alone = routes.bm25_route.scores(bundle, cut)  # the BM25 route asked on its own
            assert alone == pytest.approx(one[BM25]) and asyncio.run(routes.bm25_route.ascores(bundle, cut)) == pytest.approx(one[BM25])
            beyond.update(set(one[KEYWORDS]) - set(one[BM25]) - set(sorted(one[KEYWORDS], key=lambda i: (-one[KEYWORDS][i], i))[:cut]))
            for got in (two, both):
                assert got.keys() == one.keys()
                for route in one:
                    assert got[route].keys() == one[route].keys(), (question, cut, route)
                    assert got[route] == pytest.approx(one[route], rel=1e-12, abs=1e-12), (question, cut, route)
    assert answered == {VECTOR, BM25, KEYWORDS} and beyond
    # the whole retriever, sync and async: concurrent (the default) against one statement
    retriever = pack.as_retriever()

    def answers():
        return [[(h.node.node_id, h.score) for h in hits] for q in QUESTIONS
                for hits in (retriever.retrieve(q), asyncio.run(retriever.aretrieve(q)))]

    concurrent = answers()
    pack.store.settings.concurrent_routes = False
    assert answers() == concurrent
    pack.store.settings.concurrent_routes = True
    # the vector statement fails: the vector route is reported failed, the others still answer
    monkeypatch.setattr(pg_routes, "VECTOR_ROUTE_SQL", "SELECT no_such_column FROM hiqa_nodes")
    bundle = QueryBundle(QUESTIONS[0])
    routes = multi.route_set()
    errors = {}
    failed = _route_rows(routes.ask(bundle, n, errors))
    one = _route_rows(routes.ask(bundle, n, {}, concurrent=False))
    assert set(errors) == {VECTOR} and failed[VECTOR] == {}
    assert failed[BM25] == pytest.approx(one[BM25]) and failed[BM25]
    assert set(failed[KEYWORDS]) <= set(one[KEYWORDS]) and failed[KEYWORDS]
    pack.close()


def _statement_threads():
    import threading

    return {t for t in threading.enumerate() if t.name.startswith("hiqa-pg-statement")}


def test_the_routes_statements_share_the_stores_threads_until_it_closes(built):
    """A question's concurrent statements run on the store's threads, started once and shared by
    every question (none started per question), also by questions asked from several threads at
    once (the same scores as asked one by one); closing the pack stops them, and a question
    asked afterwards starts them again."""
    from concurrent.futures import ThreadPoolExecutor

    from llama_index.core.schema import QueryBundle

    pack = HiQAPack.load(built, embed_model=HashEmbedding(), **FAST)
    multi = pack.multi_route
    n = multi.config.candidates_per_route
    alone = {q: _route_rows(multi.route_set().ask(QueryBundle(q), n, {})) for q in QUESTIONS}
    threads = pack.store.statement_threads
    started = _statement_threads()
    assert started and len(started) <= pack.store.settings.pool_size + pack.store.settings.max_overflow
    for question in QUESTIONS:
        assert _route_rows(multi.route_set().ask(QueryBundle(question), n, {})) == alone[question]
    assert pack.store.statement_threads is threads  # one pool for every question
    with ThreadPoolExecutor(max_workers=4) as callers:  # questions from several threads at once
        together = list(callers.map(lambda q: _route_rows(multi.route_set().ask(QueryBundle(q), n, {})), QUESTIONS * 3))
    assert together == [alone[q] for q in QUESTIONS * 3]
    assert pack.store.statement_threads is threads
    assert _statement_threads() <= started | set(threads._threads)
    pack.close()
    assert threads._shutdown and not (_statement_threads() & started)  # stopped with the store
    assert _route_rows(multi.route_set().ask(QueryBundle(QUESTIONS[0]), n, {})) == alone[QUESTIONS[0]]
    assert pack.store.statement_threads is not threads
    pack.close()


def test_a_question_costs_a_fixed_number_of_statements(built, monkeypatch):
    """pack.as_retriever() on PostgreSQL: the routes in a statement each, the focused document's
    scores in one, whatever the number of its nodes (a regression to a query per route or per
    node fails here)."""
    from sqlalchemy import event

    from llama_index_hiqa.storage.backends import pg_routes

    monkeypatch.setattr(pg_routes, "SHAPE_TTL_S", 1e9)  # the shape and titles, re-read every few seconds: once
    pack = HiQAPack.load(built, embed_model=HashEmbedding())
    retriever = pack.as_retriever()
    retriever.retrieve(QUESTIONS[0])  # the collection's shape and titles are read (then every few seconds)
    statements = []

    def seen(conn, cursor, statement, *args):
        statements.append(" ".join(statement.split())[:60])

    event.listen(pack.store.engine, "before_cursor_execute", seen)
    try:
        for question in QUESTIONS:
            statements.clear()
            hits = retriever.retrieve(question)
            assert hits
            # routes (three statements), their result nodes, the focused document's node ids, (its nodes the first
            # time it is focused,) every score inside it, the focused results' nodes
            assert len(statements) <= 8, statements
    finally:
        event.remove(pack.store.engine, "before_cursor_execute", seen)
    pack.close()


def test_focus_rankings_match_the_folder_store(built, documents):
    local = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), **FAST)
    pack = HiQAPack.load(built, embed_model=HashEmbedding())
    for question in QUESTIONS:
        here, there = local.as_retriever().retrieve(question), pack.as_retriever().retrieve(question)
        _assert_same_ranking(here, there)
        assert _keys(here)[:3] == _keys(there)[:3]
    pack.close()
