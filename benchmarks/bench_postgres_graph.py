"""The chunk graph on the PostgreSQL store, against the folder store, in the same run.

A synthetic collection (``bench_postgres.synthetic_batches``: 50-node documents, 3 identifier
keywords a node, 384-dimension seeded vectors, deterministic node ids) goes through the pack's
batch seam (``HiQAPack._write_batch``, 20 documents a transaction) into PostgreSQL with
``use_chunk_graph=True``, into PostgreSQL without the graph, and into the folder store with it.
Measured: ingestion time with and without the graph (the graph is updated and written in each
batch's transaction), the folder store's graph build (one build on first use), the graph
tables' rows and bytes, the time to load the graph from the tables in a fresh pack object
against ``ChunkInteractionGraph.load`` of the folder store's files, and whether the two stores'
graphs have the same edges. Results go to ``benchmarks/postgres/graph_<nodes>.json`` and the
"PostgreSQL store" section of RESULTS.md.

    nice -n 10 .venv/bin/python benchmarks/bench_postgres_graph.py --nodes 10000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_postgres as bp  # noqa: E402
from benchmarks.bench_product import git_commit  # noqa: E402

GRAPH = {**bp.FAST, "use_chunk_graph": True}
GRAPH_TABLES = ("hiqa_graph", "hiqa_graph_nodes", "hiqa_graph_edges")


def _edges(graph: Any) -> set:
    return {(min(u, v), max(u, v), st, se, kw) for u, v, st, se, kw in graph.edge_records()}


def run(args: argparse.Namespace) -> Dict[str, Any]:
    from llama_index_hiqa import HiQAPack
    from llama_index_hiqa.retrievers.chunk_interaction_graph import ChunkInteractionGraph
    from llama_index_hiqa.storage.pack_files import CHUNK_GRAPH_DIRNAME, CONFIG_FILENAME
    from llama_index_hiqa.storage.snapshots import snapshot_for_reading

    n, embed = args.nodes, bp._fast_embedding()
    result: Dict[str, Any] = {"nodes": n}

    plain_url = bp.server_url(args, f"hiqa_graph_off_{n}")
    plain = HiQAPack.empty(embed_model=embed, store=plain_url, **bp.FAST)
    result["pg_ingest_no_graph_s"] = bp.ingest_synthetic(plain, n)
    plain.close()

    url = bp.server_url(args, f"hiqa_graph_on_{n}")
    pg = HiQAPack.empty(embed_model=embed, store=url, **GRAPH)
    result["pg_ingest_graph_s"] = bp.ingest_synthetic(pg, n)
    print(n, result, flush=True)
    store = pg.store
    store.analyze()
    result["edge_rows"] = int(store.scalar("SELECT count(*) FROM hiqa_graph_edges"))
    result["graph_node_rows"] = int(store.scalar("SELECT count(*) FROM hiqa_graph_nodes"))
    def graph_bytes() -> Dict[str, int]:
        return {t: int(store.scalar("SELECT pg_total_relation_size(to_regclass(:t))", t=t)) for t in GRAPH_TABLES}

    result["graph_bytes"] = graph_bytes()  # as ingestion leaves them: rewritten rows not yet reclaimed
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in GRAPH_TABLES:
            conn.exec_driver_sql(f"VACUUM FULL {table}")
    result["graph_bytes_vacuumed"] = graph_bytes()
    pg_edges = _edges(pg.graph.graph)
    pg.close()

    fresh = HiQAPack.load(url, embed_model=embed)
    t0 = time.perf_counter()
    loaded = fresh.backend.stored_graph.current()
    result["pg_graph_load_s"] = time.perf_counter() - t0
    result["same_after_reload"] = _edges(loaded) == pg_edges
    fresh.close()

    local = HiQAPack.empty(embed_model=embed, **GRAPH)
    t0 = time.perf_counter()
    bp.ingest_synthetic(local, n)
    result["local_ingest_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    local_graph = local.graph.graph  # routes and graph are built on first use
    result["local_routes_and_graph_build_s"] = time.perf_counter() - t0
    result["same_edges_as_folder_store"] = _edges(local_graph) == pg_edges
    result["edges"] = local_graph.edge_counts()
    folder = args.store_dir / f"graph_local_{n}"
    local.persist(folder)
    graph_dir = snapshot_for_reading(folder, legacy_marker=CONFIG_FILENAME) / CHUNK_GRAPH_DIRNAME
    result["folder_graph_bytes"] = int(sum(p.stat().st_size for p in graph_dir.iterdir()))
    t0 = time.perf_counter()
    ChunkInteractionGraph.load(graph_dir)
    result["folder_graph_load_s"] = time.perf_counter() - t0
    print(n, result, flush=True)
    return result


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=10000)
    parser.add_argument("--url", default=None, help="server to use instead of pgserver")
    parser.add_argument("--pg-dir", type=Path, default=Path("/tmp/hiqa_bench_pg"))
    parser.add_argument("--store-dir", type=Path, default=Path("/tmp/hiqa_bench_postgres"))
    args = parser.parse_args(argv)
    bp.OUT_DIR.mkdir(exist_ok=True)
    args.store_dir.mkdir(parents=True, exist_ok=True)
    result = run(args)
    result["run"] = f"{time.strftime('%Y-%m-%d %H:%M')}, {git_commit()}"
    (bp.OUT_DIR / f"graph_{args.nodes}.json").write_text(json.dumps(result, indent=1))
    bp.write_section()


if __name__ == "__main__":
    main()
