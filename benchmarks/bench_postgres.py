"""The PostgreSQL store against the local folder store, measured in the same run.

Part ``financebench``: the 46 FinanceBench filings built once with
``HiQAPack.from_directory`` (defaults, the folder store), then copied into PostgreSQL with
``HiQAPack.copy_to(url)`` (same nodes and vectors, so any difference is the store's: HNSW
instead of exact search, BM25 in SQL instead of bm25s). Both answer the 86 answerable questions
with the pack's default multi-route retriever; page-hit@1/5/20 and doc-hit@1/5 are scored by
``bench_product.score`` over each store's top-20 (MRR and the Log-Rank Index need full
rankings, which the database route does not produce, so they are not compared).

Part ``synthetic``: collections of fast deterministic nodes (a Zipf vocabulary, a few
identifier keywords per node, 384-dimension vectors from a seeded generator), ingested through
the same seam (``HiQAPack._write_batch``) into both stores: ingest throughput, multi-route query
p50/p95 (sync, and async for PostgreSQL), HNSW recall@10 against exact search, database size
per node, and the resident memory of a fresh client process that opens the store and answers
questions (it must not grow with the collection for PostgreSQL).

The server is a ``pgserver`` instance (PostgreSQL 16.2, pgvector 0.6.2) in ``--pg-dir`` unless
``--url`` names another.

    nice -n 10 .venv/bin/python benchmarks/bench_postgres.py --part financebench
    nice -n 10 .venv/bin/python benchmarks/bench_postgres.py --part synthetic --sizes 10000,100000
    nice -n 10 .venv/bin/python benchmarks/bench_postgres.py --part routes --database hiqa_synthetic_100000
    nice -n 10 .venv/bin/python benchmarks/bench_postgres.py --part routes --database hiqa_synthetic_1000000 --before main

Part ``routes``: on a saved database, the routes in a statement each sent at once against the
one statement, each question asked both ways in turn (``--database hiqa_financebench`` for
FinanceBench's questions); with ``--before REV``, the route statements of commit REV against
this checkout's, alternating the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks import _common, _results  # noqa: E402
from benchmarks.bench_product import git_commit, peak_rss_mib, score  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "postgres"
SECTION = "postgres"
TITLE = "PostgreSQL store"
TOP = 20


# --- server ------------------------------------------------------------------------------------
def server_url(args: argparse.Namespace, database: str, fresh: bool = True) -> str:
    """The URL of database ``database`` on the benchmark's server (dropped and created anew
    when ``fresh``)."""
    if args.url:
        base = args.url
        admin = _admin_engine(base)
    else:
        import pgserver

        server = pgserver.get_server(str(args.pg_dir), cleanup_mode=None)
        base = server.get_uri()
        admin = _admin_engine(base)
    if fresh:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {database}")
            conn.exec_driver_sql(f"CREATE DATABASE {database}")
    admin.dispose()
    head, _, tail = base.partition("?")
    return head.rsplit("/", 1)[0] + f"/{database}" + (f"?{tail}" if tail else "")


def _admin_engine(url: str) -> Any:
    from sqlalchemy import create_engine

    from llama_index_hiqa.storage.pg_connection import _driver_url

    return create_engine(_driver_url(url, "psycopg2"), isolation_level="AUTOCOMMIT")


def rss_mib() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


TABLE_GROUPS = {
    "vectors+HNSW": ("data_hiqa_vectors",),
    "docstore": ("data_hiqa_docstore", "data_hiqa_index_store"),
    "BM25 postings": ("hiqa_postings",),
    "nodes+keywords+documents": ("hiqa_nodes", "hiqa_documents", "hiqa_pack"),
}


def table_sizes(store: Any) -> Dict[str, int]:
    """Bytes on disk (table, TOAST and indexes) of each group of the pack's tables."""
    sizes = {}
    for group, tables in TABLE_GROUPS.items():
        sizes[group] = int(sum(store.scalar("SELECT coalesce(pg_total_relation_size(to_regclass(:t)), 0)", t=t) for t in tables))
    return sizes


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) * 1000.0


# --- FinanceBench ---------------------------------------------------------------------------------
def top_ids(retriever: Any, question: str) -> List[str]:
    return [hit.node.node_id for hit in retriever.retrieve(question)]


FTS_SQL = """
SELECT node_id, ts_rank_cd(fts, q) AS score
FROM hiqa_nodes, to_tsquery('english', :query) q
WHERE fts @@ q ORDER BY score DESC, node_id LIMIT :n
"""


def add_fulltext(pg: Any) -> float:
    """The alternative to stored BM25 statistics, for measurement only: PostgreSQL full-text
    search (``to_tsvector('english', ...)`` of each node's embedding view, GIN, ``ts_rank_cd``)
    in a column the benchmark adds; returns the seconds it took."""
    from llama_index.core.schema import MetadataMode
    from sqlalchemy import text

    t0 = time.perf_counter()
    ids = [r[0] for r in pg.store.rows("SELECT node_id FROM hiqa_nodes")]
    with pg.store.engine.begin() as conn:
        conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
        conn.exec_driver_sql("ALTER TABLE hiqa_nodes ADD COLUMN IF NOT EXISTS fts tsvector")
        for start in range(0, len(ids), 1000):
            nodes = pg.store.nodes(ids[start:start + 1000])
            conn.execute(
                text("UPDATE hiqa_nodes SET fts = to_tsvector('english', :t) WHERE node_id = :i"),
                [{"i": i, "t": n.get_content(metadata_mode=MetadataMode.EMBED)} for i, n in nodes.items()],
            )
        conn.exec_driver_sql("CREATE INDEX IF NOT EXISTS hiqa_nodes_fts ON hiqa_nodes USING gin (fts)")
    return time.perf_counter() - t0


class _FullTextRoute:
    """The BM25 route's place taken by ``ts_rank_cd`` over the query's words OR-ed."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def top(self, query: str, n: int) -> Dict[str, float]:
        import re

        words = [w for w in re.findall(r"\w+", query.lower()) if len(w) > 1]
        if not words:
            return {}
        rows = self.store.rows(FTS_SQL, query=" | ".join(dict.fromkeys(words)), n=n)
        return {node_id: float(score) for node_id, score in rows if score > 0}


def financebench_ef_search(args: argparse.Namespace, ef_search: int = 400) -> None:
    """One more PostgreSQL row on the saved FinanceBench stores, with a wider HNSW search."""
    from llama_index_hiqa import HiQAPack
    import shared_data as datasets  # benchmarks/ is on the path (_common)
    from llama_index_hiqa.pack.config import HiQAPackSettings
    from llama_index_hiqa.pack.hiqa_pack import RESOLVERS
    from llama_index_hiqa.storage.backends.postgres import PostgresBackend
    from llama_index_hiqa.storage.postgres import PostgresStoreSettings

    path = OUT_DIR / "financebench.json"
    saved = json.loads(path.read_text())
    root = _common.require_shared_data("FinanceBench on the PostgreSQL store")
    pdf_dir = root / "financebench" / "pdfs"
    doc_names = {p.stem for p in pdf_dir.glob("*.pdf")}
    questions = [q for q in datasets.load_financebench_questions(root) if set(q.gold_documents) <= doc_names]
    local = HiQAPack.load(args.store_dir / "financebench_local")
    # HiQAPack.load takes the pack's settings; the connection's are the backend's.
    pg = HiQAPack(backend=PostgresBackend.open(
        server_url(args, "hiqa_financebench", fresh=False), HiQAPackSettings(), resolvers=RESOLVERS,
        store_settings=PostgresStoreSettings(hnsw_ef_search=ef_search),
    ))
    retriever = pg.multi_route.with_settings(similarity_top_k=TOP)
    top_ids(retriever, questions[0].question)
    t0 = time.perf_counter()
    ranking = [top_ids(retriever, q.question) for q in questions]
    seconds = (time.perf_counter() - t0) / len(questions)
    saved["rows"][f"postgres_ef{ef_search}"] = {**score(ranking, local.nodes, questions), "query_ms": seconds * 1000.0}
    local_ranking = [top_ids(local.multi_route.with_settings(similarity_top_k=TOP), q.question) for q in questions]
    saved[f"same_top5_ef{ef_search}"] = sum(a[:5] == b[:5] for a, b in zip(local_ranking, ranking)) / len(questions)
    print(saved["rows"][f"postgres_ef{ef_search}"], saved[f"same_top5_ef{ef_search}"], flush=True)
    path.write_text(json.dumps(saved, indent=1))


HNSW_GRID = ((16, 64), (16, 32), (12, 24), (8, 16))  # (m, ef_construction); pgvector's defaults first


def financebench_hnsw(args: argparse.Namespace) -> Dict[str, Any]:
    """The HNSW build against its parameters on the saved FinanceBench database: for each
    (m, ef_construction) of ``HNSW_GRID``, the index rebuilt (seconds, size), recall@10 of the
    vector route at ef_search 400 against exact search on the questions' embeddings, and
    whether ``pack.as_retriever()``'s top 5 and the multi-route top 20 of the 86 questions are
    the folder store's; the default index is built again at the end."""
    from types import SimpleNamespace

    from llama_index_hiqa import HiQAPack
    from llama_index_hiqa.storage.pg_bulk import VECTOR_INDEX, build_vector_index
    from llama_index_hiqa.storage.postgres import PostgresStoreSettings

    questions = financebench_questions("FinanceBench HNSW parameters")
    if questions is None:
        return {}
    local = HiQAPack.load(args.store_dir / "financebench_local")
    pg = HiQAPack.load(server_url(args, "hiqa_financebench", fresh=False))

    def rankings(pack: Any) -> Dict[str, List[List[str]]]:
        focus, routes = pack.as_retriever(), pack.multi_route.with_settings(similarity_top_k=TOP)
        return {"top5": [top_ids(focus, q.question)[:5] for q in questions],
                "top20": [top_ids(routes, q.question) for q in questions]}

    expected = rankings(local)
    out: Dict[str, Any] = {"questions": len(questions), "nodes": len(local.nodes), "load_average_start": os.getloadavg(),
                           "grid": {}}
    for m, ef_construction in (*HNSW_GRID, HNSW_GRID[0]):
        settings = PostgresStoreSettings(hnsw_m=m, hnsw_ef_construction=ef_construction)
        t0 = time.perf_counter()
        with pg.store.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP INDEX IF EXISTS {VECTOR_INDEX}")
            build_vector_index(SimpleNamespace(settings=settings), conn)
        seconds = time.perf_counter() - t0
        key = f"m{m}_efc{ef_construction}"
        if key in out["grid"]:
            break  # the default index built again: the store as it was
        got = rankings(pg)
        row = {
            "m": m, "ef_construction": ef_construction, "build_s": seconds,
            "index_bytes": int(pg.store.scalar(f"SELECT pg_relation_size('{VECTOR_INDEX}')")),
            "recall@10_ef400": financebench_recall(local, pg, questions),
            "same_top5": sum(a == b for a, b in zip(expected["top5"], got["top5"])) / len(questions),
            "same_top20": sum(a == b for a, b in zip(expected["top20"], got["top20"])) / len(questions),
            "load_average": os.getloadavg(),
        }
        out["grid"][key] = row
        print(key, row, flush=True)
    pg.close()
    return out


def financebench_recall(local: Any, pg: Any, questions: Sequence[Any], k: int = 10) -> float:
    """Recall@k of pgvector's HNSW against the folder store's exact search, on the questions'
    MiniLM embeddings over the same vectors."""
    from llama_index.core.vector_stores.types import VectorStoreQuery

    hits = 0
    for question in questions:
        vector = local.embed_model.get_query_embedding(question.question)
        exact = local.index.vector_store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=k)).ids
        approx = pg.index.vector_store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=k)).ids
        hits += len(set(exact or []) & set(approx or []))
    return hits / (k * len(questions))


def financebench_questions(what: str) -> Optional[List[Any]]:
    """The FinanceBench questions whose gold filings are in the shared folder (``None``, said
    why, without the shared data)."""
    import shared_data as datasets  # benchmarks/ is on the path (_common)

    root = _common.require_shared_data(what)
    if root is None:
        return None
    doc_names = {p.stem for p in (root / "financebench" / "pdfs").glob("*.pdf")}
    return [q for q in datasets.load_financebench_questions(root) if set(q.gold_documents) <= doc_names]


def run_financebench(args: argparse.Namespace) -> Dict[str, Any]:
    from llama_index_hiqa import HiQAPack

    questions = financebench_questions("FinanceBench on the PostgreSQL store")
    if questions is None:
        return {}
    pdf_dir = _common.require_shared_data("FinanceBench filings") / "financebench" / "pdfs"
    local_dir = args.store_dir / "financebench_local"
    if args.reuse and local_dir.exists():
        t0 = time.perf_counter()
        local = HiQAPack.load(local_dir)
        build = {"loaded_s": time.perf_counter() - t0}
    else:
        t0 = time.perf_counter()
        local = HiQAPack.from_directory(pdf_dir, show_progress=True)
        build = {"build_s": time.perf_counter() - t0}
        local.persist(local_dir)
    url = server_url(args, "hiqa_financebench")
    t0 = time.perf_counter()
    pg = local.copy_to(url)
    copy_s = time.perf_counter() - t0
    load_average = os.getloadavg()
    size = pg.store.scalar("SELECT pg_database_size(current_database())")  # before the fts experiment
    sizes = table_sizes(pg.store)
    nodes = local.nodes
    n = len(nodes)
    rows: Dict[str, Any] = {}
    rankings: Dict[str, List[List[str]]] = {}

    def measure(name: str, retriever: Any) -> None:
        top_ids(retriever, questions[0].question)  # warm (models, pools)
        times, rankings[name] = [], []
        for q in questions:
            t0 = time.perf_counter()
            rankings[name].append(top_ids(retriever, q.question))
            times.append(time.perf_counter() - t0)
        rows[name] = {**score(rankings[name], nodes, questions), "query_ms": float(np.mean(times)) * 1000.0,
                      "p50_ms": pct(times, 50), "p95_ms": pct(times, 95)}
        print(name, rows[name], flush=True)

    for name, pack in (("local", local), ("postgres", pg)):
        measure(name, pack.multi_route.with_settings(similarity_top_k=TOP))
    # What pack.as_retriever() answers with on each store: the document focus over the routes.
    from llama_index_hiqa.retrievers.document_focus import DocumentFocusRetriever

    for name, pack in (("local_focus", local), ("postgres_focus", pg)):
        retriever = DocumentFocusRetriever(
            pack.multi_route.with_settings(similarity_top_k=TOP), embed_model=pack.embed_model, config=pack.config.document_focus
        )
        if name == "postgres_focus":
            with count_statements(pg.store) as counted:
                measure(name, retriever)
            rows[name]["statements_per_question"] = counted[0] / (len(questions) + 1)
        else:
            measure(name, retriever)
    recall = financebench_recall(local, pg, questions)
    fts_s = None
    if args.fulltext:
        fts_s = add_fulltext(pg)
        retriever = pg.multi_route.with_settings(similarity_top_k=TOP)
        retriever._bm25 = _FullTextRoute(pg.store)
        measure("postgres_fulltext", retriever)
    same_top5 = sum(a[:5] == b[:5] for a, b in zip(rankings["local"], rankings["postgres"])) / len(questions)
    same_top1 = sum(a[:1] == b[:1] for a, b in zip(rankings["local"], rankings["postgres"])) / len(questions)
    same_focus_top5 = sum(
        a[:5] == b[:5] for a, b in zip(rankings["local_focus"], rankings["postgres_focus"])
    ) / len(questions)
    return {
        "local_store": local.config.store_format or "folder",
        "ef_search": pg.store.settings.hnsw_ef_search, "same_focus_top5": same_focus_top5,
        "rows": rows, "nodes": n, "questions": len(questions), "build": build,
        "hnsw_recall@10": recall, "fulltext_index_s": fts_s, "copy_s": copy_s, "copy_nodes_per_s": n / copy_s, "same_top5": same_top5, "same_top1": same_top1,
        "db_bytes": int(size), "db_bytes_per_node": int(size) / n, "table_bytes": sizes, "peak_rss_mib": peak_rss_mib(),
        "load_average_copied": load_average, "load_average_end": os.getloadavg(),
    }


# --- synthetic collections ------------------------------------------------------------------------
DIM = 384
VOCAB = [f"w{i}" for i in range(20000)]


class SeededEmbedding:
    """Deterministic unit vectors: a node's from its id, a query's from its text (no model)."""

    @staticmethod
    def vector(key: str) -> np.ndarray:
        import hashlib

        # hashlib, not hash(): str hashes differ between processes (PYTHONHASHSEED).
        rng = np.random.default_rng(int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:8], "little"))
        v = rng.standard_normal(DIM).astype(np.float32)
        return v / np.linalg.norm(v)


def synthetic_batches(n_nodes: int, per_doc: int = 50, docs_per_batch: int = 20, seed: int = 7):
    """Documents and their nodes, ``docs_per_batch`` documents at a time."""
    from llama_index.core.schema import Document, NodeRelationship, RelatedNodeInfo, TextNode

    from llama_index_hiqa import schema

    rng = np.random.default_rng(seed)
    ranks = np.arange(1, len(VOCAB) + 1)
    probs = (1.0 / ranks) / (1.0 / ranks).sum()
    n_docs = n_nodes // per_doc
    for start in range(0, n_docs, docs_per_batch):
        documents, nodes = [], []
        for d in range(start, min(n_docs, start + docs_per_batch)):
            doc_id = f"doc{d:06d}"
            title = f"Model X{d % 997:03d} datasheet {2000 + d % 25}"
            documents.append(Document(id_=doc_id, text=title, metadata={schema.DOCUMENT_ID: doc_id}))
            for p in range(per_doc):
                words = rng.choice(len(VOCAB), size=60, p=probs)
                keywords = [f"X{(d * 7 + p) % 5000:04d}", f"P{(d + p * 13) % 20000:05d}", str(2000 + (d + p) % 25)]
                text = " ".join(VOCAB[i] for i in words) + " " + " ".join(keywords)
                node = TextNode(
                    id_=f"{doc_id}-{p:03d}", text=text,
                    metadata={schema.DOCUMENT_ID: doc_id, schema.DOCUMENT_TITLE: title, schema.POSITION: p,
                              schema.CRITICAL_KEYWORDS: keywords},
                )
                node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=doc_id)
                node.embedding = SeededEmbedding.vector(node.node_id).tolist()
                nodes.append(node)
        yield documents, nodes


def synthetic_questions(n: int, seed: int = 11) -> List[str]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = " ".join(VOCAB[j] for j in rng.integers(0, 2000, size=6))
        out.append(f"{words} X{int(rng.integers(0, 5000)):04d} {2000 + int(rng.integers(0, 25))}")
    return out


def _fast_embedding() -> Any:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    class _Seeded(BaseEmbedding):
        model_name: str = "seeded-384"

        def _get_query_embedding(self, query: str) -> List[float]:
            return SeededEmbedding.vector("q:" + query).tolist()

        async def _aget_query_embedding(self, query: str) -> List[float]:
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text: str) -> List[float]:
            return SeededEmbedding.vector("t:" + text).tolist()

    return _Seeded()


FAST = {"keywords": {"use_ner": False}}


def ingest_synthetic(pack: Any, n_nodes: int) -> float:
    t0 = time.perf_counter()
    for documents, nodes in synthetic_batches(n_nodes):
        pack._write_batch(documents, [], nodes)
        pack._invalidate()
    return time.perf_counter() - t0


def server_cpu_s(store: Any) -> float:
    """CPU seconds used so far by the server processes connected to ``store``'s database
    (``pg_stat_activity`` and ``/proc``: the server runs on this machine; NaN otherwise).
    Processes that exited (the index build's parallel workers) are not counted."""
    try:
        pids = [int(r[0]) for r in store.rows("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")]
        tick = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / tick
        return total
    except Exception:  # noqa: BLE001 - a measurement aid only
        return float("nan")


def cpu_s() -> float:
    """CPU seconds of this process so far."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def ingest_synthetic_pg(pack: Any, n_nodes: int, pg_dir: Optional[Path] = None, ahead: int = 20) -> Dict[str, float]:
    """Ingest into PostgreSQL as ``HiQAPack.ingest`` does: inside ``backend.bulk_writes()``
    (one transaction a batch, committed on the committer thread while the next batch is
    prepared; the HNSW index built after the last batch). The store-side time counts the writes
    and the index build, not the generation of the synthetic nodes: ``ahead`` batches are made
    off the clock, then written on it, and the clock stops only once the last of them has
    committed, so no server work hides behind the generation."""
    writes = client_cpu = 0.0
    server0 = server_cpu_s(pack.store) if pg_dir else float("nan")
    t0 = time.perf_counter()
    generated = synthetic_batches(n_nodes)
    with pack.backend.bulk_writes():
        while True:
            chunk = list(itertools.islice(generated, ahead))
            if not chunk:
                break
            t1, c1 = time.perf_counter(), cpu_s()
            for documents, nodes in chunk:
                pack._write_batch(documents, [], nodes)
                pack._invalidate()
            pack.backend.wait_for_writes()
            writes += time.perf_counter() - t1
            client_cpu += cpu_s() - c1
            del chunk
        t_index = time.perf_counter()
        server_rows = (server_cpu_s(pack.store) if pg_dir else float("nan")) - server0
    index_s = time.perf_counter() - t_index
    server = (server_cpu_s(pack.store) if pg_dir else float("nan")) - server0
    return {"pg_ingest_s": time.perf_counter() - t0, "pg_store_s": writes + index_s, "pg_rows_s": writes,
            "pg_index_s": index_s, "pg_client_cpu_s": client_cpu, "pg_server_cpu_rows_s": server_rows,
            "pg_server_cpu_s": server}


def query_times(retriever: Any, questions: Sequence[str]) -> List[float]:
    times = []
    for q in questions:
        t0 = time.perf_counter()
        retriever.retrieve(q)
        times.append(time.perf_counter() - t0)
    return times


async def aquery_times(retriever: Any, questions: Sequence[str]) -> List[float]:
    times = []
    for q in questions:
        t0 = time.perf_counter()
        await retriever.aretrieve(q)
        times.append(time.perf_counter() - t0)
    return times


def hnsw_recall(pack: Any, n_nodes: int, queries: int = 100, k: int = 10) -> float:
    """Recall@k of the pgvector HNSW index against exact cosine search over the same vectors."""
    from llama_index.core.vector_stores.types import VectorStoreQuery

    ids, matrix = [], []
    for _, nodes in synthetic_batches(n_nodes):
        ids += [n.node_id for n in nodes]
        matrix.append(np.asarray([n.embedding for n in nodes], dtype=np.float32))
    vectors = np.concatenate(matrix)
    rng = np.random.default_rng(3)
    hits = 0
    store = pack.index.vector_store
    for _ in range(queries):
        q = rng.standard_normal(DIM).astype(np.float32)
        q /= np.linalg.norm(q)
        exact = {ids[i] for i in np.argsort(-(vectors @ q))[:k]}
        result = store.query(VectorStoreQuery(query_embedding=q.tolist(), similarity_top_k=k))
        hits += len(exact & set(result.ids or []))
    return hits / (queries * k)


CLIENT = r"""
import json, sys, time, resource
sys.path.insert(0, {root!r})
sys.path.insert(0, {root!r} + "/benchmarks")
from benchmarks.bench_postgres import _fast_embedding, synthetic_questions, rss_mib, FAST
from llama_index_hiqa import HiQAPack
t0 = time.perf_counter()
pack = HiQAPack.load({store!r}, embed_model=_fast_embedding(), **FAST)
retriever = pack.as_retriever()
for q in synthetic_questions(20):
    retriever.retrieve(q)
print(json.dumps({{"rss_mib": rss_mib(), "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "open_and_20_queries_s": time.perf_counter() - t0}}))
"""


def client_memory(store: str) -> Dict[str, float]:
    root = str(HERE.parent)
    out = subprocess.run(
        [sys.executable, "-c", CLIENT.format(root=root, store=store)], capture_output=True, text=True, timeout=1800,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def pg_queries(url: str, questions: Sequence[str]) -> Dict[str, Any]:
    """``pack.as_retriever()`` on a PostgreSQL pack: sync and async p50/p95 and statements a question."""
    from llama_index_hiqa import HiQAPack

    pg = HiQAPack.load(url, embed_model=_fast_embedding(), **FAST)
    result: Dict[str, Any] = {}
    retriever = pg.as_retriever()
    retriever.retrieve(questions[0])
    with count_statements(pg.store) as counted:
        times = query_times(retriever, questions)
    result["pg_statements_per_question"] = counted[0] / len(questions)
    result["pg_p50_ms"], result["pg_p95_ms"] = pct(times, 50), pct(times, 95)
    atimes = asyncio.run(aquery_times(retriever, questions))
    result["pg_async_p50_ms"], result["pg_async_p95_ms"] = pct(atimes, 50), pct(atimes, 95)
    pg.close()
    return result


class count_statements:
    """Counts the statements the store's engines (writes, reads) send while inside (SQLAlchemy's
    cursor event)."""

    def __init__(self, store: Any) -> None:
        self.engines, self.count = [store.engine, store.read_engine], [0]

    def _seen(self, *args: Any) -> None:
        self.count[0] += 1

    def __enter__(self) -> List[int]:
        from sqlalchemy import event

        for engine in self.engines:
            event.listen(engine, "before_cursor_execute", self._seen)
        return self.count

    def __exit__(self, *exc: Any) -> None:
        from sqlalchemy import event

        for engine in self.engines:
            event.remove(engine, "before_cursor_execute", self._seen)


def run_synthetic(args: argparse.Namespace, n_nodes: int) -> Dict[str, Any]:
    import resource

    from llama_index_hiqa import HiQAPack

    embed = _fast_embedding()
    questions = synthetic_questions(args.queries)
    url = server_url(args, f"hiqa_synthetic_{n_nodes}")
    result: Dict[str, Any] = {"nodes": n_nodes, "load_average_start": os.getloadavg()}
    pg = HiQAPack.empty(embed_model=embed, store=url, **FAST)
    result.update(ingest_synthetic_pg(pg, n_nodes, None if args.url else args.pg_dir))
    result["pg_ingest_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["load_average_ingested"] = os.getloadavg()
    print(n_nodes, "pg ingest", result, flush=True)
    t0 = time.perf_counter()
    pg.store.analyze()
    result["pg_analyze_s"] = time.perf_counter() - t0
    result["db_bytes"] = int(pg.store.scalar("SELECT pg_database_size(current_database())"))
    result["table_bytes"] = table_sizes(pg.store)
    if n_nodes <= 200_000:  # exact search over every vector, in this process
        result["hnsw_recall@10"] = hnsw_recall(pg, n_nodes)
    pg.close()
    result.update(pg_queries(url, questions))
    result["pg_client"] = client_memory(url)
    print(n_nodes, "pg", result, flush=True)
    if not args.skip_local:
        local = HiQAPack.empty(embed_model=embed, **FAST)
        result["local_ingest_s"] = ingest_synthetic(local, n_nodes)
        t0 = time.perf_counter()
        retriever = local.as_retriever()  # BM25 and keyword indexes are built on first use
        result["local_route_build_s"] = time.perf_counter() - t0
        times = query_times(retriever, questions)
        result["local_p50_ms"], result["local_p95_ms"] = pct(times, 50), pct(times, 95)
        # PostgreSQL again right after, so the ratio compares the two under the same load.
        again = pg_queries(url, questions)
        result["pg_p50_ms_after_local"], result["pg_p95_ms_after_local"] = again["pg_p50_ms"], again["pg_p95_ms"]
        folder = args.store_dir / f"synthetic_local_{n_nodes}"
        t0 = time.perf_counter()
        local.persist(folder)
        result["local_persist_s"] = time.perf_counter() - t0
        del local, retriever
        result["local_client"] = client_memory(str(folder))
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(n_nodes, result, flush=True)
    return result


def requery_synthetic(args: argparse.Namespace, n_nodes: int) -> None:
    """Measure the queries again on a saved synthetic database (after a change of the query code)."""
    path = OUT_DIR / f"synthetic_{n_nodes}.json"
    result = json.loads(path.read_text())
    url = server_url(args, f"hiqa_synthetic_{n_nodes}", fresh=False)
    result.update(pg_queries(url, synthetic_questions(args.queries)))
    result["pg_client"] = client_memory(url)
    result["requeried"] = f"{time.strftime('%Y-%m-%d %H:%M')}, {git_commit()}"
    print(n_nodes, result, flush=True)
    path.write_text(json.dumps(result, indent=1))


def saved_pack(args: argparse.Namespace) -> Any:
    """``--part routes``: the questions of the saved database ``--database`` and its pack (FinanceBench's
    with the pack's own model, a synthetic one's with the seeded embedding)."""
    from llama_index_hiqa import HiQAPack

    url = server_url(args, args.database, fresh=False)
    if args.database == "hiqa_financebench":
        questions = [q.question for q in (financebench_questions("FinanceBench questions") or [])][: args.queries]
        return questions, HiQAPack.load(url)
    return synthetic_questions(args.queries), HiQAPack.load(url, embed_model=_fast_embedding(), **FAST)


# The statements of pg_routes that --before swaps for an earlier commit's.
ROUTE_STATEMENTS = ("ROUTES_SQL", "VECTOR_ROUTE_SQL", "BM25_ROUTE_SQL", "KEYWORD_ROUTE_SQL", "WITHIN_SQL", "KEYWORD_SQL",
                    "DOCUMENT_NODES_SQL", "SHAPE_SQL", "TITLES_SQL")


def statements_of(rev: str) -> Dict[str, str]:
    """The route statements of ``pg_schema.py`` at commit ``rev`` (read with ``git show``, not imported
    into the package: the code of this checkout runs both arms, only the SQL differs)."""
    import types

    source = subprocess.run(["git", "show", f"{rev}:llama_index_hiqa/storage/pg_schema.py"], cwd=HERE.parent,
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType(f"pg_schema_{rev}")
    exec(compile(source, module.__name__, "exec"), module.__dict__)  # noqa: S102 - this repository's own file
    return {name: getattr(module, name) for name in ROUTE_STATEMENTS}


def alternate(pg: Any, questions: Sequence[str], arms: Dict[str, Any], result: Dict[str, Any]) -> Dict[str, List[float]]:
    """Each question asked under each arm in turn (``arms``: name -> a function that puts the
    store in that arm; the order alternating, so both see the same load): ``pack.as_retriever()``,
    then the routes alone (``RouteSet.ask`` with the question's embedding given). Fills
    ``result`` with the statements a question of each arm, whether the arms give the same top 5
    with the same scores and the same route scores, and the load average every 10 questions;
    returns the times (``ARM`` and ``ARM_routes``)."""
    from llama_index.core.schema import QueryBundle

    multi, retriever = pg.multi_route, pg.as_retriever()
    n, embed = multi.config.candidates_per_route, pg.embed_model
    first, second = arms
    times: Dict[str, List[float]] = {f"{arm}{what}": [] for arm in arms for what in ("", "_routes")}
    statements = {arm: 0 for arm in arms}
    same = same_routes = 0
    loads = []
    for q in questions[:3]:  # warm: the shape, the titles, the model, the buffers
        retriever.retrieve(q)
    for i, q in enumerate(questions):
        hits: Dict[str, Any] = {}
        routes: Dict[str, Any] = {}
        bundle = QueryBundle(q, embedding=embed.get_query_embedding(q))
        for arm in ((first, second) if i % 2 == 0 else (second, first)):
            arms[arm]()
            with count_statements(pg.store) as counted:
                t0 = time.perf_counter()
                hits[arm] = [(h.node.node_id, round(h.score, 9)) for h in retriever.retrieve(q)]
                times[arm].append(time.perf_counter() - t0)
            statements[arm] += counted[0]
            t0 = time.perf_counter()
            scores = multi.route_set().ask(bundle, n, {})
            times[arm + "_routes"].append(time.perf_counter() - t0)
            routes[arm] = {name: {k: round(v, 9) for k, v in found.items()} for name, found in scores.items()}
        same += hits[first] == hits[second]
        same_routes += routes[first] == routes[second]
        if i % 10 == 0:
            loads.append(os.getloadavg()[0])
    for arm in arms:
        result[f"{arm}_statements_per_question"] = statements[arm] / len(questions)
    result["same_results"], result["same_route_scores"], result["load_average_during"] = same, same_routes, loads
    return times


def finished(pg: Any, times: Dict[str, List[float]], result: Dict[str, Any]) -> Dict[str, Any]:
    """``result`` with each arm's p50/p95 and the load average at the end; the pack closed."""
    for name, values in times.items():
        result[f"{name}_p50_ms"], result[f"{name}_p95_ms"] = pct(values, 50), pct(values, 95)
    result["load_average_end"] = os.getloadavg()
    pg.close()
    print(json.dumps(result), flush=True)
    return result


def routes_before_after(args: argparse.Namespace) -> Dict[str, Any]:
    """The route statements of commit ``--before`` against this checkout's, on a saved database,
    each question asked with both in turn (`alternate`): p50/p95 of ``pack.as_retriever()`` and
    of the routes alone (the statements at once), statements a question, and whether both give
    the same top 5 and route scores."""
    from llama_index_hiqa.storage.backends import pg_routes

    statements = {"before": statements_of(args.before), "after": {name: getattr(pg_routes, name) for name in ROUTE_STATEMENTS}}

    def arm(name: str) -> Any:
        return lambda: [setattr(pg_routes, statement, sql) for statement, sql in statements[name].items()]

    questions, pg = saved_pack(args)
    result: Dict[str, Any] = {"database": args.database, "before": args.before, "after": git_commit(),
                              "nodes": pg.store.node_count(), "questions": len(questions), "load_average_start": os.getloadavg()}
    times = alternate(pg, questions, {"before": arm("before"), "after": arm("after")}, result)
    arm("after")()
    return finished(pg, times, result)


def routes_concurrency(args: argparse.Namespace) -> Dict[str, Any]:
    """The routes in two statements at once (``concurrent_routes``, the default) against one
    statement, on a saved database (``--database``: a synthetic one, or ``hiqa_financebench``
    with its questions and the pack's own model), each question asked both ways in turn
    (`alternate`): ``pack.as_retriever()`` and the routes alone, p50/p95, and whether the two
    give the same results; then ``aretrieve`` the same way."""
    questions, pg = saved_pack(args)
    settings, retriever = pg.store.settings, pg.as_retriever()
    result: Dict[str, Any] = {"database": args.database, "nodes": pg.store.node_count(), "questions": len(questions),
                              "load_average_start": os.getloadavg()}
    times = alternate(pg, questions, {"two": lambda: setattr(settings, "concurrent_routes", True),
                                      "one": lambda: setattr(settings, "concurrent_routes", False)}, result)

    async def asked() -> None:  # aretrieve on one event loop (one asyncpg pool), the arms alternating
        for i, q in enumerate(questions):
            for arm in (("two", "one") if i % 2 == 0 else ("one", "two")):
                settings.concurrent_routes = arm == "two"
                t0 = time.perf_counter()
                await retriever.aretrieve(q)
                times.setdefault(arm + "_async", []).append(time.perf_counter() - t0)

    asyncio.run(asked())
    settings.concurrent_routes = True
    return finished(pg, times, result)


# --- RESULTS.md -------------------------------------------------------------------------------------
FB_LABELS = {
    "local": "local store (exact vectors)",
    "postgres": "PostgreSQL store (BM25 in SQL, HNSW)",
    "local_focus": "local store, `pack.as_retriever()` (document focus over the routes)",
    "postgres_focus": "PostgreSQL store, `pack.as_retriever()` (document focus over the routes)",
    "postgres_fulltext": "PostgreSQL, full-text search (ts_rank_cd) instead of BM25 (not shipped)",
    "postgres_ef400": "PostgreSQL store, HNSW ef_search = 400 (the default)",
}


def fill_table_sizes(args: argparse.Namespace) -> None:
    """Table sizes for saved synthetic results that lack them, from their databases."""
    from llama_index_hiqa.storage.postgres import PostgresStore

    for path in sorted(OUT_DIR.glob("synthetic_*.json")):
        result = json.loads(path.read_text())
        if "table_bytes" in result:
            continue
        store = PostgresStore(server_url(args, f"hiqa_synthetic_{result['nodes']}", fresh=False)).connect()
        result["table_bytes"] = table_sizes(store)
        store.dispose()
        path.write_text(json.dumps(result, indent=1))


EF_SWEEP = (40, 200, 800)


def stored_recall(pack: Any, ef_values: Sequence[int], queries: int = 100, k: int = 10) -> Dict[str, float]:
    """Recall@k of HNSW at each ef_search against exact search over the vectors as stored."""
    from llama_index.core.vector_stores.types import VectorStoreQuery

    ids: List[str] = []
    blocks = []
    with pack.store.engine.connect() as conn:
        result = conn.execution_options(stream_results=True, max_row_buffer=5000).exec_driver_sql(
            "SELECT node_id, embedding::real[] FROM data_hiqa_vectors"
        )
        for rows in result.partitions(5000):
            ids += [r[0] for r in rows]
            blocks.append(np.asarray([r[1] for r in rows], dtype=np.float32))
    vectors = np.concatenate(blocks)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    rng = np.random.default_rng(3)
    probes = rng.standard_normal((queries, vectors.shape[1])).astype(np.float32)
    probes /= np.linalg.norm(probes, axis=1, keepdims=True)
    exact = [{ids[i] for i in np.argsort(-(vectors @ q))[:k]} for q in probes]
    store = pack.index.vector_store
    out = {}
    for ef in ef_values:
        hits = 0
        for q, truth in zip(probes, exact):
            found = store.query(VectorStoreQuery(query_embedding=q.tolist(), similarity_top_k=k), hnsw_ef_search=ef).ids
            hits += len(truth & set(found or []))
        out[str(ef)] = hits / (queries * k)
    return out


def fill_recall_sweep(args: argparse.Namespace) -> None:
    """HNSW recall@10 at several ef_search values for the saved synthetic collections."""
    from llama_index_hiqa import HiQAPack

    for path in sorted(OUT_DIR.glob("synthetic_*.json")):
        result = json.loads(path.read_text())
        if "recall_by_ef_search" in result:
            continue
        pack = HiQAPack.load(server_url(args, f"hiqa_synthetic_{result['nodes']}", fresh=False),
                             embed_model=_fast_embedding(), **FAST)
        result["recall_by_ef_search"] = stored_recall(pack, EF_SWEEP)
        print(result["nodes"], result["recall_by_ef_search"], flush=True)
        pack.close()
        path.write_text(json.dumps(result, indent=1))


# --- shards: three concurrent writers against one ---------------------------------------------------
def _shard_state(url: str, questions: Sequence[Any]) -> Dict[str, Any]:
    """What must not depend on how many writers built the store (keyed by document and position,
    not by node ids or row numbers), and the top 5 of every question."""
    from llama_index_hiqa import HiQAPack, schema

    pack = HiQAPack.load(url)
    store = pack.store
    key = {i: (d, p) for i, d, p in store.rows(
        "SELECT n.node_id, d.document_id, n.position FROM hiqa_nodes n JOIN hiqa_documents d USING (ref_doc_id)")}
    state = {
        "documents": sorted(store.rows("SELECT document_id, doc_hash, pages, node_count FROM hiqa_documents")),
        "statistics": store.rows("SELECT node_count, total_length FROM hiqa_pack"),
        "nodes": sorted((key[i], kw, tkw, n) for i, kw, tkw, n in store.rows(
            "SELECT node_id, keywords, title_keywords, length FROM hiqa_nodes")),
        "vectors": sorted((key[i], e) for i, e in store.rows("SELECT node_id, md5(embedding::text) FROM data_hiqa_vectors")),
        "terms": sorted(store.rows("SELECT term, df FROM hiqa_terms WHERE df > 0")),
        "postings": store.scalar("SELECT count(*) FROM hiqa_postings"),
        "heading_vectors": sorted(store.rows("SELECT hash, md5(vector) FROM hiqa_heading_vectors")),
    }
    retriever = pack.as_retriever()
    state["top5"] = [
        [((schema.get_document_id(h.node), schema.get_position(h.node)), round(h.score, 6)) for h in retriever.retrieve(q.question)][:5]
        for q in questions
    ]
    pack.close()
    return state


def run_shards(args: argparse.Namespace) -> Dict[str, Any]:
    """``hiqa ingest`` of the FinanceBench filings into an empty database by one process, then by
    three processes at once (``--shard 1/3``, ``2/3``, ``3/3``, as three machines would run it)
    into another; wall time of each and whether the two stores are the same."""
    import shared_data as datasets

    root = _common.require_shared_data("FinanceBench shards on PostgreSQL")
    if root is None:
        return {}
    folder = root / "financebench" / "pdfs"
    every = sorted(folder.glob("*.pdf"))
    pdfs = every[: args.filings]
    if len(pdfs) < len(every):  # a copy of the first N (the reader follows no link out of its folder)
        folder = args.store_dir / f"shard_pdfs_{len(pdfs)}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for pdf in pdfs:
            shutil.copy(pdf, folder / pdf.name)
    names = {p.stem for p in pdfs}
    questions = [q for q in datasets.load_financebench_questions(root) if set(q.gold_documents) <= names]
    hiqa = str(Path(sys.executable).with_name("hiqa"))
    result: Dict[str, Any] = {"filings": len(pdfs), "questions": len(questions)}
    urls = {}
    for name, shards in (("one writer", [None]), ("three shard writers", ["1/3", "2/3", "3/3"])):
        url = urls[name] = server_url(args, "hiqa_shards_" + ("one" if shards == [None] else "three"))
        load = os.getloadavg()
        t0 = time.perf_counter()
        procs = [subprocess.Popen([hiqa, "ingest", str(folder), "--store", url, "--quiet",
                                   *(["--shard", s] if s else [])], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for s in shards]
        for proc in procs:
            _out, err = proc.communicate()
            if proc.returncode:
                raise RuntimeError(f"{name}: hiqa ingest failed: {err[-2000:]}")
        result[name] = {"wall_s": time.perf_counter() - t0, "load_average_start": load, "load_average_end": os.getloadavg()}
        print(name, result[name], flush=True)
    one, three = (_shard_state(urls[n], questions) for n in ("one writer", "three shard writers"))
    result["nodes"] = one["statistics"][0][0]
    result["same"] = {k: one[k] == three[k] for k in one}
    result["same_top5"] = sum(a == b for a, b in zip(one["top5"], three["top5"])) / max(len(questions), 1)
    result["peak_rss_mib"] = peak_rss_mib()
    return result


def _shards_part(r: Dict[str, Any]) -> str:
    one, three = r["one writer"], r["three shard writers"]
    same = ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in r["same"].items())
    return (
        f"**Three shard writers at once** (run {r['run']}): `hiqa ingest DIR --store URL` of {r['filings']} FinanceBench "
        f"filings ({r['nodes']:,} nodes) into an empty database by one process, then `hiqa ingest DIR --store URL2 --shard "
        f"I/3` by three processes started together (what three machines sharing the folder run), each with the "
        f"defaults (the packaged model behind the shared vector cache, which held these filings' vectors: the "
        f"figures are reading, parsing, keywords and writing, not the model). One writer {one['wall_s']:.0f} s, three "
        f"shard writers {three['wall_s']:.0f} s ({one['wall_s'] / three['wall_s']:.2f}x; load average "
        f"{one['load_average_start'][0]:.1f} and {three['load_average_start'][0]:.1f} at their starts, 2 cores shared "
        f"with other developers' jobs). The same store: {same}; identical top 5 (`pack.as_retriever()`) for "
        f"{r['same_top5']:.3f} of the {r['questions']} questions on these filings."
    )



def _hnsw_part(h: Dict[str, Any]) -> str:
    rows = [[f"{r['m']} / {r['ef_construction']}", f"{r['build_s']:.1f}", f"{r['index_bytes'] / 2**20:.0f}",
             f"{r['recall@10_ef400']:.3f}", f"{r['same_top5']:.3f}", f"{r['same_top20']:.3f}", f"{r['load_average'][0]:.1f}"]
            for r in h["grid"].values()]
    table = _results.markdown_table(
        ["m / ef_construction", "build s", "index MiB", "recall@10 at ef_search 400", "same `as_retriever()` top 5",
         "same multi-route top 20", "load average"], rows)
    return (f"**HNSW build parameters** (run {h['run']}; `--part financebench-hnsw`): the FinanceBench database above "
            f"({h['nodes']:,} nodes, MiniLM vectors), its HNSW index dropped and built again with each setting "
            "(`maintenance_work_mem` 3 GB, pgvector 0.6.2), then the vector route's recall@10 against exact search on the "
            f"{h['questions']} questions' embeddings at ef_search 400 (the default), and the share of questions whose "
            "`pack.as_retriever()` top 5 and multi-route top 20 are the folder store's (exact search).\n\n" + table)


def _per_node(result: Dict[str, Any]) -> str:
    sizes = result.get("table_bytes") or {}
    return ", ".join(f"{group} {size / result['nodes'] / 1024:.1f}" for group, size in sizes.items())


def _focus_ratio(fb: Dict[str, Any]) -> str:
    pg, local = fb["rows"]["postgres_focus"], fb["rows"]["local_focus"]
    return (f" `pack.as_retriever()` p50 on PostgreSQL / folder store: {pg['p50_ms'] / local['p50_ms']:.2f} "
            f"({pg['p50_ms']:.0f} / {local['p50_ms']:.0f} ms); p95/p50 {pg['p95_ms'] / pg['p50_ms']:.2f} on PostgreSQL, "
            f"{local['p95_ms'] / local['p50_ms']:.2f} on the folder store; "
            f"{pg.get('statements_per_question', float('nan')):.1f} SQL statements a question on PostgreSQL "
            "(the routes in one, the focused document's scores in one, the result nodes, the document's node ids).")


def write_section() -> None:
    saved = {p.stem: json.loads(p.read_text()) for p in sorted(OUT_DIR.glob("*.json"))}
    parts: List[str] = []
    fb = saved.get("financebench")
    if fb:
        keys = ("page-hit@1", "page-hit@5", "page-hit@20", "doc-hit@1", "doc-hit@5")
        table = _results.markdown_table(
            ["store", "nodes", *keys, "query ms mean (sync, top-20)", "p50 / p95 ms"],
            [[FB_LABELS.get(name, name), f"{fb['nodes']:,}", *[row[k] for k in keys], f"{row['query_ms']:.0f}",
              f"{row['p50_ms']:.0f} / {row['p95_ms']:.0f}" if "p50_ms" in row else "-"]
             for name, row in fb["rows"].items()],
        )
        deltas = {k: fb["rows"]["postgres"][k] - fb["rows"]["local"][k] for k in keys}
        fts = fb["rows"].get("postgres_fulltext")
        parts.append(
            f"**FinanceBench** ({fb['questions']} answerable questions; run {fb['run']}). One build with "
            f"`HiQAPack.from_directory` (defaults, {fb.get('local_store', 'folder')} store; in the table, the rows "
            "of the local store), then `HiQAPack.copy_to` copies the same "
            "nodes and vectors into PostgreSQL, so differences are the store's (HNSW instead of exact search; BM25 "
            "computed in SQL over stored term statistics instead of bm25s). Scores from `bench_product.score` "
            "over each store's top-20.\n\n" + table + "\n\n"
            f"PostgreSQL (ef_search {fb.get('ef_search', 200)}) minus local, multi-route top 20: "
            + ", ".join(f"{k} {v:+.3f}" for k, v in deltas.items()) + ". "
            + ("With ef_search = 400 every figure equals the folder store's; 400 became the default after this "
               "run, chosen by looking at these questions (the query time did not change measurably). "
               if "postgres_ef400" in fb["rows"] else "")
            + (f"With the document focus (what `pack.as_retriever()` returns on both stores): PostgreSQL minus local "
               + ", ".join(f"{k} {fb['rows']['postgres_focus'][k] - fb['rows']['local_focus'][k]:+.3f}" for k in keys)
               + f"; identical top-5 lists {fb['same_focus_top5']:.3f} of questions. "
               if "postgres_focus" in fb["rows"] else "")
            + (f"Full-text search in BM25's place minus local: "
               + ", ".join(f"{k} {fts[k] - fb['rows']['local'][k]:+.3f}" for k in keys) + ". " if fts else "")
            + f"Identical top-5 lists: {fb['same_top5']:.3f} of questions, identical top-1: {fb['same_top1']:.3f}"
            + (f" (with ef_search = 400: identical top-5 {fb['same_top5_ef400']:.3f})" if "same_top5_ef400" in fb else "")
            + ". BM25 and keyword scores are the same by construction (tests check them on the demo corpus), so "
            "the differences left are HNSW's approximation. "
            f"Copy into PostgreSQL: {fb['copy_s']:.0f} s ({fb['copy_nodes_per_s']:.0f} nodes/s, 8 documents per "
            f"transaction, the HNSW index built after the last batch); HNSW recall@10 against exact search on the "
            f"questions' embeddings: {fb['hnsw_recall@10']:.3f}; "
            f"database {fb['db_bytes'] / 2**20:.0f} MiB ({fb['db_bytes_per_node'] / 1024:.1f} KiB per node, "
            "vectors, text, metadata, docstore copy and indexes; KiB per node by table group: "
            + _per_node({**fb, "table_bytes": fb.get("table_bytes")}) + ")."
            + (_focus_ratio(fb) if "p50_ms" in fb["rows"].get("postgres_focus", {}) else "")
            + (f" Load average while the questions ran: {fb['load_average_copied'][0]:.1f} to "
               f"{fb['load_average_end'][0]:.1f} on 2 cores (other developers' jobs), so absolute times are inflated; "
               "each PostgreSQL/folder ratio is measured in the same run." if "load_average_end" in fb else "")
        )
    synth = [v for k, v in saved.items() if k.startswith("synthetic_")]
    if synth:
        synth.sort(key=lambda r: r["nodes"])
        rows = []
        for r in synth:
            lc, pc = r.get("local_client", {}), r.get("pg_client", {})
            store_s = r.get("pg_store_s", r["pg_ingest_s"])
            cpu = r.get("pg_client_cpu_s", float("nan")) + r.get("pg_server_cpu_s", float("nan"))
            pg50 = r.get("pg_p50_ms_after_local", r["pg_p50_ms"])
            rows.append([
                f"{r['nodes']:,}",
                f"{r['nodes'] / store_s:.0f}",
                f"{r['pg_rows_s']:.0f} + {r['pg_index_s']:.0f}" if "pg_rows_s" in r else "-",
                f"{r['nodes'] / cpu:.0f}" if cpu == cpu else "-",
                f"{r['nodes'] / r['local_ingest_s']:.0f}" if "local_ingest_s" in r else "-",
                f"{r['db_bytes'] / r['nodes'] / 1024:.1f}",
                f"{r['pg_p50_ms']:.0f} / {r['pg_p95_ms']:.0f}",
                f"{r['pg_async_p50_ms']:.0f} / {r['pg_async_p95_ms']:.0f}",
                f"{r['local_p50_ms']:.0f} / {r['local_p95_ms']:.0f}" if "local_p50_ms" in r else "-",
                f"{pg50 / r['local_p50_ms']:.2f}" if "local_p50_ms" in r else "-",
                f"{r['pg_statements_per_question']:.1f}" if "pg_statements_per_question" in r else "-",
                f"{r['hnsw_recall@10']:.3f}" if "hnsw_recall@10" in r else "-",
                f"{r['pg_ingest_peak_rss_mib']:.0f}" if "pg_ingest_peak_rss_mib" in r else "-",
                f"{pc.get('rss_mib', float('nan')):.0f}",
                f"{lc.get('rss_mib', float('nan')):.0f}" if lc else "-",
            ])
        table = _results.markdown_table(
            ["nodes", "PG ingest nodes/s (store-side)", "PG rows + HNSW build s", "PG nodes per CPU-second (client + backends)",
             "local ingest nodes/s", "DB KiB/node", "PG query p50/p95 ms", "PG async p50/p95 ms", "local query p50/p95 ms",
             "PG/local p50", "statements a question", "HNSW recall@10", "PG ingest peak RSS MiB",
             "PG client RSS MiB", "local client RSS MiB"],
            rows,
        )
        sizes = "; ".join(f"{r['nodes']:,} nodes: {_per_node(r)}" for r in synth if r.get("table_bytes"))
        loads = "; ".join(
            f"{r['nodes']:,} nodes {r['load_average_start'][0]:.0f} to {r['load_average_ingested'][0]:.0f}"
            for r in synth if "load_average_start" in r
        )
        parts.append(
            f"**Synthetic collections** (run {synth[-1]['run']}): 50-node documents of 60 Zipf-distributed words and "
            "3 identifier keywords per node, 384-dimension seeded random unit vectors (no model; unclustered "
            "random vectors are HNSW's hardest case, so its recall here is a floor), ingested through the pack's "
            "batch seam (20 documents a transaction) inside the backend's `bulk_writes()` (what an ingestion does: "
            "the HNSW index built once after the last batch; since 2026-11-26 10:33, each batch committed behind the "
            "next batch's preparation; the 10,000 and 100,000 rows are from before, each batch written in turn). "
            "Store-side time: the writes and the index build, not the generation of the synthetic nodes (made 20 "
            "batches ahead, off the clock; the clock stops once their last batch has committed, which is why the "
            "client's peak RSS rose at 1M: 20,000 generated nodes held); CPU-seconds: this process plus "
            "the server's processes (what the same ingestion costs on a machine of its own). Questions: "
            "`pack.as_retriever()` (the document focus over the multi-route ranking; 6 words, an identifier, a "
            "year; top 5); PG/local p50 compares PostgreSQL measured again right after the folder store. Local "
            "ingest is the in-memory insert only (its BM25 index is built on the first question, and `persist` "
            "writes the folder); client RSS: a fresh process that opens the store and answers 20 questions.\n\n"
            + table
            + (f"\n\nDatabase KiB per node by table group (tables, TOAST and indexes): {sizes}." if sizes else "")
            + (f"\n\nLoad average (2 cores, shared with other developers' jobs) while ingesting: {loads}." if loads else "")
        )
    for g in sorted((v for k, v in saved.items() if k.startswith("graph_")), key=lambda r: r["nodes"]):
        graph_bytes = sum(g["graph_bytes"].values())
        vacuumed = sum(g.get("graph_bytes_vacuumed", g["graph_bytes"]).values())
        parts.append(
            f"**Chunk graph** (`use_chunk_graph=True`; run {g['run']}; `benchmarks/bench_postgres_graph.py`): the "
            f"synthetic collection above at {g['nodes']:,} nodes, 20 documents a transaction. Ingestion into PostgreSQL "
            f"{g['pg_ingest_graph_s']:.0f} s with the graph against {g['pg_ingest_no_graph_s']:.0f} s without "
            f"({g['pg_ingest_graph_s'] / g['pg_ingest_no_graph_s']:.2f}x; each batch's graph update and changed rows "
            f"are written in its transaction); the folder store builds its graph once, on first use "
            f"({g['local_routes_and_graph_build_s']:.1f} s with the BM25 and keyword routes, after a "
            f"{g['local_ingest_s']:.0f} s insert). Graph tables: {g['edge_rows']:,} edge rows (one per edge and kind; "
            f"{g['edges']['edges']:,} linked pairs) and {g['graph_node_rows']:,} node rows, {graph_bytes / 2**20:.1f} MiB "
            f"as ingestion leaves them, {vacuumed / 2**20:.1f} MiB after `VACUUM FULL` ({vacuumed / g['nodes'] / 1024:.2f} "
            "KiB per node, indexes included; each batch rewrites the rows it changed, and autovacuum makes the old "
            f"versions' space reusable); the folder store's graph files {g['folder_graph_bytes'] / 2**20:.1f} MiB, vectors "
            f"included. Loading the graph in a fresh pack: "
            f"{g['pg_graph_load_s']:.2f} s from the tables (vectors read from the vector table) against "
            f"{g['folder_graph_load_s']:.2f} s from the folder (`ChunkInteractionGraph.load`). Same edges and weights "
            f"as the folder store's graph: {'yes' if g['same_edges_as_folder_store'] else 'no'}; the same after "
            f"reloading: {'yes' if g['same_after_reload'] else 'no'}."
        )
    if saved.get("hnsw_financebench"):
        parts.append(_hnsw_part(saved["hnsw_financebench"]))
    if saved.get("shards"):
        parts.append(_shards_part(saved["shards"]))
    parts.append(
        "Choices: BM25 is Okapi BM25 computed in SQL over a postings table with bm25s's tokens and parameters, "
        "so it ranks as the in-memory route; since store format 4 its top 100 skips the postings of the commonest "
        "terms whose upper bounds (each term's largest tf and smallest node length, kept by every write) add up to "
        "less than the 100th best partial score of the rarest terms (MaxScore), exact (tested against summing every "
        "posting), and the keyword route counts |C| from a narrow table of (keyword, node id, in title) read from its "
        "primary key alone, instead of a GIN index on `hiqa_nodes.keywords` that read each matching node's row. "
        "Since store format 3 a posting is (term id, node row, node length, "
        "term frequency as a smallint) under a primary key covering the rest, with the vocabulary and each term's "
        "document frequency in `hiqa_terms` (updated by every write); format 2 kept (term text, node id text, "
        "ref_doc_id text, tf, length) and counted document frequencies at query time: 12.9 KiB of postings a "
        "FinanceBench node against 5.7 now, and at 100k synthetic nodes 7.9 against 5.0. Term arrays per node "
        "with a GIN index (the first version) took 8x longer per query at 10k nodes. PostgreSQL full-text "
        "search (`ts_rank_cd`, GIN) in BM25's place lost 0.058 of page-hit@5 on FinanceBench (measured "
        "2026-11-23; `--fulltext` measures it again). A batch is written with one COPY per table (the vectors in "
        "COPY's binary format); a load into an empty vector table drops the HNSW index and builds it once after "
        "the last batch (`maintenance_work_mem` 3 GB for the build, `PostgresStoreSettings.index_build_memory_mb`). "
        "pgvector HNSW settings are pgvector's defaults (m = 16, ef_construction = 64), ef_search = 400 (chosen "
        "on the FinanceBench questions: at 200 one question's top 5 changed)."
    )
    body = "\n\n".join(parts) + "\n"
    _results.write_section(SECTION, TITLE, body, "nice -n 10 .venv/bin/python benchmarks/bench_postgres.py --part ...")


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--part", choices=["financebench", "financebench-ef", "financebench-hnsw", "synthetic", "synthetic-query", "routes", "sizes", "recall", "shards", "section"],
        required=True
    )
    parser.add_argument("--url", default=os.environ.get("HIQA_BENCH_POSTGRES_URL"), help="server to use instead of pgserver")
    parser.add_argument("--pg-dir", type=Path, default=Path("/tmp/hiqa_bench_pg"))
    parser.add_argument("--store-dir", type=Path, default=Path("/tmp/hiqa_bench_postgres"))
    parser.add_argument("--reuse", action="store_true", help="load the saved local FinanceBench store")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--filings", type=int, default=46, help="--part shards: the first N FinanceBench filings")
    parser.add_argument("--database", default="hiqa_financebench", help="--part routes: the saved database")
    parser.add_argument("--fulltext", action="store_true", help="also measure full-text search in BM25's place")
    parser.add_argument("--before", help="--part routes: a commit whose route statements are measured against this checkout's")
    args = parser.parse_args(argv)
    OUT_DIR.mkdir(exist_ok=True)
    args.store_dir.mkdir(parents=True, exist_ok=True)
    run = f"{time.strftime('%Y-%m-%d %H:%M')}, {git_commit()}"
    if args.part == "financebench":
        result = run_financebench(args)
        if result:
            result["run"] = run
            (OUT_DIR / "financebench.json").write_text(json.dumps(result, indent=1))
    elif args.part == "synthetic":
        for size in [int(s) for s in args.sizes.split(",") if s]:
            result = run_synthetic(args, size)
            result["run"] = run
            (OUT_DIR / f"synthetic_{size}.json").write_text(json.dumps(result, indent=1))
    elif args.part == "synthetic-query":
        for size in [int(s) for s in args.sizes.split(",") if s]:
            requery_synthetic(args, size)
    elif args.part == "routes":
        result = routes_before_after(args) if args.before else routes_concurrency(args)
        result["run"] = run
        name = "financebench" if args.database == "hiqa_financebench" else f"synthetic_{result['nodes']}"
        (OUT_DIR / f"routes_{name}{'_before_after' if args.before else ''}.json").write_text(json.dumps(result, indent=1))
    elif args.part == "shards":
        result = run_shards(args)
        if result:
            result["run"] = run
            (OUT_DIR / "shards.json").write_text(json.dumps(result, indent=1))
    elif args.part == "financebench-ef":
        financebench_ef_search(args)
    elif args.part == "financebench-hnsw":
        result = financebench_hnsw(args)
        if result:
            result["run"] = run
            (OUT_DIR / "hnsw_financebench.json").write_text(json.dumps(result, indent=1))
    elif args.part == "sizes":
        fill_table_sizes(args)
    elif args.part == "recall":
        fill_recall_sweep(args)
    write_section()


if __name__ == "__main__":
    main()
