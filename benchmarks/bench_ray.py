"""Ingestion on Ray against one process and ``--workers 2``, same folder, same machine.

What a user runs: ``HiQAPack.empty().add_directory(pdfs)`` with every default (packaged MiniLM
behind the shared vector cache), then ``ingest_workers=2``, then
``add_directory(pdfs, executor=RayExecutor(workers=W, num_cpus=2))`` for W in 1, 2 on a local
Ray cluster started for the run, then Ray with 2 workers while one worker is killed
(``SIGKILL``) mid-run. Reported per run: wall time and its ratio to ``--workers 2``, nodes, the
peak RSS of the driver and of the largest child process (workers), and whether the store holds
the same nodes (document, position, text), vectors and top 5 of every FinanceBench question as
the one-process build (node ids are uuid4 per build: nodes are named by document and
position). From the Ray run's per-batch costs and the writer's rate, an estimate for N
machines (stated as an estimate, not a measurement).

    nice -n 10 python benchmarks/bench_ray.py --filings 3
    # the 46 filings a few rows at a time (each row kept in --save-dir, the table from all of them)
    nice -n 10 python benchmarks/bench_ray.py --filings 46 --runs workers2 ray2 --save-dir runs --no-write
    python benchmarks/bench_ray.py --filings 46 --runs process workers2 ray1 ray2 ray2-killed --save-dir runs
"""

from __future__ import annotations

import argparse
import os
import pickle
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchmarks import _results  # noqa: E402
from benchmarks import shared_data  # noqa: E402
from benchmarks.bench_product import git_commit  # noqa: E402
from benchmarks.bench_workers import WorkerMemory  # noqa: E402

import psutil  # noqa: E402

SECTION, TITLE = "ray", "Ray ingestion"


def kill_one_worker(killed: List[int]) -> None:
    """SIGKILL one Ray worker actor (a child process running the ingestion); its pid goes in ``killed``."""
    deadline = time.monotonic() + 60
    while not killed and time.monotonic() < deadline:
        for child in psutil.Process().children(recursive=True):
            try:
                if "MapWorker" in " ".join(child.cmdline()):
                    os.kill(child.pid, signal.SIGKILL)
                    killed.append(child.pid)
                    return
            except (psutil.Error, ProcessLookupError):
                pass
        time.sleep(0.2)


def build(folder: Path, questions: List[str], label: str, batch_size: int, workers: int = 1,
          ray_workers: Optional[int] = None, kill_after: Optional[float] = None) -> Dict[str, Any]:
    """One build into an empty store; returns its figures and the store's content."""
    import numpy as np

    from llama_index_hiqa import HiQAPack, RayExecutor, schema

    pack = HiQAPack.empty(ingest_workers=workers, ingest_batch_size=batch_size)
    executor = RayExecutor(workers=ray_workers, num_cpus=2) if ray_workers else None
    killed: List[int] = []
    killer = threading.Timer(kill_after, kill_one_worker, args=(killed,)) if kill_after is not None else None
    watcher = WorkerMemory()
    load = os.getloadavg()[0]  # the machine's load as the run starts (1-minute average)
    start = time.perf_counter()
    with watcher:
        if killer is not None:
            killer.start()
        report = pack.add_directory(folder, executor=executor)
    if killer is not None:
        killer.cancel()
    wall = time.perf_counter() - start
    nodes = pack.nodes
    content = [(schema.get_document_id(n), schema.get_position(n), n.get_content()) for n in nodes]
    vectors = np.asarray([pack.index.vector_store.get(n.node_id) for n in nodes], dtype=np.float32)
    top5 = [[(schema.get_document_id(h.node), schema.get_position(h.node)) for h in pack.retrieve(q)[:5]] for q in questions]
    print(f"{label}: {wall:.1f} s, {len(nodes)} nodes", flush=True)
    return {
        "label": label, "wall": wall, "commit": git_commit(), "load": load, "nodes": len(nodes), "stages": dict(report.seconds), "content": content,
        "vectors": vectors, "top5": top5, "driver_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_rss_mib": watcher.peak_mib, "killed": killed[0] if killed else None,
        "doubled": len(report.node_ids) - len(set(report.node_ids)),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--filings", type=int, default=3, help="first N FinanceBench PDFs by file name")
    parser.add_argument("--batch-size", type=int, default=1, help="ingest_batch_size: files a batch, the unit of work")
    parser.add_argument("--kill-after", type=float, default=20.0, help="seconds into the killed run")
    parser.add_argument("--runs", nargs="+", default=["process", "workers2", "ray1", "ray2", "ray2-killed"],
                        choices=["process", "workers2", "ray1", "ray2", "ray2-killed"],
                        help="the rows, in table order (the first is the reference store)")
    parser.add_argument("--save-dir", default=None,
                        help="keep each row's figures and store here; a row found there is read, not run again")
    parser.add_argument("--no-write", action="store_true", help="measure (and save) only; RESULTS.md untouched")
    args = parser.parse_args(argv)
    pdfs = shared_data.first_financebench_pdfs(args.filings)
    if pdfs is None:
        return
    folder = Path(tempfile.mkdtemp(prefix="bench_ray_docs_"))
    for pdf in pdfs:
        shutil.copy(pdf, folder / pdf.name)
    questions = [q.question for q in shared_data.load_financebench_questions()]
    plans = {
        "process": lambda: build(folder, questions, "1 process", args.batch_size),
        "workers2": lambda: build(folder, questions, "--workers 2", args.batch_size, workers=2),
        "ray1": lambda: build(folder, questions, "Ray, 1 worker", args.batch_size, ray_workers=1),
        "ray2": lambda: build(folder, questions, "Ray, 2 workers", args.batch_size, ray_workers=2),
        "ray2-killed": lambda: build(
            folder, questions, "Ray, 2 workers, one killed", args.batch_size, ray_workers=2, kill_after=args.kill_after
        ),
    }
    runs = []
    for key in args.runs:
        saved = Path(args.save_dir) / f"{args.filings}-{key}.pkl" if args.save_dir else None
        if saved is not None and saved.exists():  # a row an earlier invocation measured
            runs.append(pickle.loads(saved.read_bytes()))
            print(f"{runs[-1]['label']}: {runs[-1]['wall']:.1f} s (from {saved})", flush=True)
            continue
        runs.append(plans[key]())
        if saved is not None:
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_bytes(pickle.dumps(runs[-1]))
    if args.no_write:
        return
    # The reference store: one process's when it ran, else the first row's.
    base = runs[0]
    pool = next((r for r in runs if r["label"] == "--workers 2"), base)
    rows = []
    for run in runs:
        same = run["content"] == base["content"]
        drift = float(abs(run["vectors"] - base["vectors"]).max()) if same else float("nan")
        killed = f"pid {run['killed']} killed" if run["killed"] else ("none" if "killed" not in run["label"] else "kill missed")
        rows.append(
            f"| {run['label']} | {run['nodes']:,} | {run['wall']:.1f} | {run['wall'] / pool['wall']:.2f}× "
            f"| {run['driver_rss_mib']:.0f} | {run['worker_rss_mib']:.0f} | {'yes' if same else 'no'} | {drift:.1e} "
            f"| {'yes' if run['top5'] == base['top5'] else 'no'} | {killed}; {run['doubled']} doubled "
            f"| {run.get('load', float('nan')):.1f} | {run.get('commit', '?')} |"
        )
    ray2 = next((r for r in runs if r["label"] == "Ray, 2 workers"), runs[-1])
    worker_seconds = sum(v for k, v in ray2["stages"].items() if k in ("read", "parse", "cascade", "keywords", "embed"))
    per_node = worker_seconds / max(ray2["nodes"], 1)
    writer = ray2["nodes"] / max(ray2["stages"].get("index", 0.0), 1e-9)
    cores = os.cpu_count()
    estimate = "\n".join(
        f"| {n} × 16 cores | {min(n * 16 / per_node, writer):,.0f} | "
        f"{'writer' if n * 16 / per_node >= writer else 'workers'} |" for n in (1, 4, 16, 64)
    )
    every = len(shared_data.first_financebench_pdfs(10**6) or [])
    body = (
        (f"All {len(pdfs)} FinanceBench PDFs" if len(pdfs) == every else
           f"The first {len(pdfs)} FinanceBench PDFs by file name ({', '.join(p.stem for p in pdfs)}; a subset: the "
           f"{every} filings take ~16 min a run on these 2 shared cores)")
        + f", every default but `ingest_batch_size={args.batch_size}` "
        f"(a batch is the unit of work: with 8, two filings are one batch and one worker), the shared vector cache by content "
        f"hash (`HIQA_CACHE_DIR`; warm after the first run, so embedding costs a lookup: parsing, keywords and "
        f"the cascade dominate); Ray on a local cluster started per run with `num_cpus=2`; the killed run's worker "
        f"SIGKILLed {args.kill_after:g} s into it; {cores} cores; "
        "each row's commit and the load average as it started in its last columns; the reference store (same "
        f"nodes, vectors, top 5) is the first row's. Top 5 over the {len(questions)} FinanceBench questions. Node ids are uuid4 per "
        "build, so nodes are compared by document, position and text. Ray rows include starting and stopping the "
        "local cluster; driver peak RSS is the benchmark process's peak so far in its process (`ru_maxrss`; rows run in one invocation run in table order); "
        "children are the `--workers` processes or Ray's workers and daemons.\n\n"
        "| run | nodes | wall s | vs --workers 2 | driver peak RSS MiB | largest child peak RSS MiB | same nodes "
        "| max vector difference | same top 5 | killed worker | load average | commit |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        f"**Estimate for N machines** (not measured): the Ray 2-worker run spent {worker_seconds:.0f} worker-seconds "
        f"on {ray2['nodes']:,} nodes ({per_node * 1000:.1f} ms a node on one core, warm vector cache), and the "
        f"driver's writes took {ray2['stages'].get('index', 0.0):.1f} s: the writer's ceiling is {writer:,.0f} "
        "nodes/s (embedded store, one writer). Nodes/s ≈ min(cores / per-node cost, writer ceiling):\n\n"
        "| cluster | nodes/s | bound by |\n|---|---|---|\n" + estimate + "\n\n"
        "With a cold cache embedding is ~90% of the per-node cost (docs/pack.md), so the workers' bound is "
        "several times lower and the writer is reached later."
    )
    _results.write_section(SECTION, TITLE, body)
    print(body)


if __name__ == "__main__":
    main()
