"""The pack on the vector stores LlamaIndex apps use, side by side in one run.

For every store of the conformance suite (``tests/vector_stores.py``: the pack's default
MatrixVectorStore, SimpleVectorStore, Chroma, Qdrant local mode, LanceDB, Milvus Lite, DuckDB,
FAISS, pgvector), ``HiQAPack.from_directory(pdfs, vector_store=store)`` with defaults (the
packaged MiniLM behind the shared vector cache) on two collections:

* ``demo``: the ten demo datasheets and their 25 questions;
* ``financebench``: the first ten FinanceBench filings by file name (no choice by question)
  and the dev questions about them.

Per store: ingestion seconds (vectors already cached: a warm-up build embeds every node once,
so the figure is parsing, keywords and the store's writes), the ratio to the default store,
query p50 of ``pack.as_retriever()``, rank-1 agreement and mean top-5 overlap with the default
store (nodes compared as document and position), and page-hit@5 on the gold pages.

    nice -n 10 .venv/bin/python benchmarks/bench_stores.py
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _common, _results  # noqa: E402
from benchmarks.bench_product import git_commit, peak_rss_mib, score  # noqa: E402
from tests.vector_stores import STORE_KINDS, available, close_store, open_store  # noqa: E402

from llama_index_hiqa import HiQAPack, demo_data_dir, schema  # noqa: E402
from llama_index_hiqa.evaluation.datasets import load_questions_jsonl  # noqa: E402

SECTION = "stores"
TITLE = "Vector stores"
TOP = 5
N_FILINGS = 10


def _key(node: Any) -> str:
    return f"{schema.get_document_id(node)}:{schema.get_position(node)}"


def collections(root: Optional[Path]) -> Dict[str, Dict[str, Any]]:
    """name -> {"pdfs": [paths], "questions": [EvalQuestion]}"""
    out: Dict[str, Dict[str, Any]] = {}
    out["demo"] = {
        "pdfs": sorted(demo_data_dir().glob("*.pdf")),
        "questions": load_questions_jsonl(demo_data_dir() / "questions.jsonl"),
    }
    if root is not None:
        from benchmarks import shared_data

        pdf_dir = root / "financebench" / "pdfs"
        pdfs = sorted(pdf_dir.glob("*.pdf"))[:N_FILINGS]
        stems = {p.stem for p in pdfs}
        questions = [
            q for q in shared_data.load_financebench_questions(root)
            if q.gold and all(g.document_id in stems for g in q.gold)
        ]
        out["financebench"] = {"pdfs": pdfs, "questions": questions}
    return out


def run_store(kind: str, pdfs: List[Path], questions, work: Path, pg_url: Optional[str]) -> Dict[str, Any]:
    folder = work / kind
    source = folder / "pdfs"
    source.mkdir(parents=True)
    for pdf in pdfs:
        shutil.copy(pdf, source / pdf.name)
    store = open_store(kind, folder / "vectors", 384, pg_url)
    start = time.perf_counter()
    pack = HiQAPack.from_directory(source, vector_store=store, embed_model=_common.embed_model())
    ingest = time.perf_counter() - start
    retriever = pack.as_retriever()
    retriever.retrieve(questions[0].question)  # first-question costs (heading vectors) out of the p50
    tops, seconds, rankings = {}, [], []
    for q in questions:
        t = time.perf_counter()
        found = retriever.retrieve(q.question)[:TOP]
        seconds.append(time.perf_counter() - t)
        tops[q.id] = [_key(n.node) for n in found]
        rankings.append([n.node.node_id for n in found])
    metrics = score(rankings, pack.nodes, questions)
    close_store(kind, store)
    return {
        "nodes": pack.node_count, "ingest_s": ingest, "query_p50_ms": 1000 * statistics.median(seconds),
        "tops": tops, "page_hit5": metrics["page-hit@5"], "doc_hit1": metrics["doc-hit@1"],
    }


def agreement(ours: Dict[str, List[str]], reference: Dict[str, List[str]]):
    first = sum(ours[q][:1] == reference[q][:1] for q in reference) / len(reference)
    overlap = sum(len(set(ours[q]) & set(reference[q])) / max(1, len(reference[q])) for q in reference) / len(reference)
    return first, overlap


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default=",".join(STORE_KINDS))
    parser.add_argument("--collections", default="demo,financebench")
    parser.add_argument("--pg-dir", type=Path, default=Path("/tmp/hiqa_bench_stores_pg"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    kinds = [k for k in args.stores.split(",") if available(k)]
    missing = [k for k in args.stores.split(",") if not available(k)]
    pg_url = None
    if "pgvector" in kinds:
        import pgserver

        server = pgserver.get_server(str(args.pg_dir), cleanup_mode=None)
        pg_url = server.get_uri()
    data = collections(_common.require_shared_data("bench_stores financebench"))
    sections = []
    for name in args.collections.split(","):
        if name not in data:
            continue
        pdfs, questions = data[name]["pdfs"], data[name]["questions"]
        with tempfile.TemporaryDirectory(prefix=f"hiqa-stores-{name}-") as tmp:
            warm = time.perf_counter()
            run_store("matrix", pdfs, questions, Path(tmp) / "warm-up", None)  # embeds every node once
            cold = time.perf_counter() - warm
            results: Dict[str, Dict[str, Any]] = {}
            for kind in kinds:
                url = None
                if kind == "pgvector":
                    url = _fresh_database(pg_url, f"hiqa_stores_{name}")
                print(f"{name}: {kind} ...", flush=True)
                results[kind] = run_store(kind, pdfs, questions, Path(tmp), url)
                r = results[kind]
                print(f"  {r['nodes']} nodes, ingest {r['ingest_s']:.1f}s, p50 {r['query_p50_ms']:.0f} ms", flush=True)
        base = results.get("matrix") or next(iter(results.values()))
        rows = []
        for kind, r in results.items():
            first, overlap = agreement(r["tops"], base["tops"])
            rows.append([
                kind, r["nodes"], round(r["ingest_s"], 1), round(r["ingest_s"] / base["ingest_s"], 2),
                round(r["query_p50_ms"], 1), round(r["query_p50_ms"] / base["query_p50_ms"], 2),
                first, overlap, r["doc_hit1"], r["page_hit5"],
            ])
        table = _results.markdown_table(
            ["store", "nodes", "ingest s", "× default", "query p50 ms", "× default",
             "rank-1 agreement", "top-5 overlap", "right document first", "page-hit@5"], rows)
        sections.append(
            f"### {name}: {len(pdfs)} PDFs, {len(questions)} questions\n\n"
            f"Warm-up build on the default store, embedding every node once: {cold:.0f} s.\n\n{table}\n"
        )
    body = (
        f"`HiQAPack.from_directory(pdfs, vector_store=store)` with defaults (packaged MiniLM, vectors "
        f"cached by content hash), one process, commit {git_commit()}, peak RSS {peak_rss_mib():.0f} MiB. "
        "Agreement is with the default store (MatrixVectorStore, exact cosine) on the same questions, "
        "nodes compared by document and position. Stores opened as in tests/vector_stores.py "
        "(Chroma's default HNSW space, Qdrant local mode, LanceDB without an index, Milvus Lite, "
        "DuckDB, FAISS IndexFlatIP, pgvector without HNSW).\n\n" + "\n".join(sections)
    )
    if missing:
        body += f"\nNot run (integration not installed): {', '.join(missing)}.\n"
    print(body)
    if not args.no_write:
        _results.write_section(SECTION, TITLE, body)


def _fresh_database(base_url: str, name: str) -> str:
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    from llama_index_hiqa.storage.pg_connection import _driver_url

    admin = create_engine(_driver_url(base_url, "psycopg2"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    return make_url(base_url).set(database=name).render_as_string(hide_password=False)


if __name__ == "__main__":
    main()
