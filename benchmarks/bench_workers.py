"""Ingestion with worker processes: ``hiqa ingest --workers N`` against one process, same run.

What a user runs: ``HiQAPack.empty(ingest_workers=N).add_directory(pdfs)`` with every default
(packaged MiniLM on its default backend), on the first ``--filings`` FinanceBench PDFs by file
name. Every build starts from an empty vector cache file of its own, so each one really embeds: the cache would otherwise make the second build
free. Reported per worker count: ingestion wall time and its ratio to one process, nodes per
second, the stages' summed seconds, the peak RSS of the main process and of the largest
worker, and whether the store holds the same nodes (document, position, text) and vectors as
the one-process build.

    python benchmarks/bench_workers.py --filings 4 --workers 1 2
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchmarks import _results  # noqa: E402
from benchmarks import shared_data  # noqa: E402
from benchmarks.bench_product import git_commit  # noqa: E402

import psutil  # noqa: E402

SECTION, TITLE = "workers", "Ingestion with worker processes"


class WorkerMemory:
    """The largest resident size any child process reached, sampled every 0.2 s."""

    def __init__(self) -> None:
        self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.2):
            for child in me.children(recursive=True):
                try:
                    self.peak_mib = max(self.peak_mib, child.memory_info().rss / 2**20)
                except psutil.Error:
                    pass

    def __enter__(self) -> "WorkerMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def build(pdfs: List[Path], workers: int, batch_size: int) -> Dict[str, Any]:
    """One build in a fresh vector cache; returns its figures and the store's content."""
    import numpy as np

    from llama_index_hiqa import CachedEmbedding, HiQAPack, schema
    from llama_index_hiqa.models.defaults import packaged_embed_model

    folder = Path(tempfile.mkdtemp(prefix="bench_workers_docs_"))
    for pdf in pdfs:
        shutil.copy(pdf, folder / pdf.name)  # a temporary copy: the reader does not follow links out
    # The default model and cache wrapper, on an empty cache file of this build's own (the
    # model's ONNX export stays where it is: building it is not ingestion).
    embed_model = CachedEmbedding(packaged_embed_model(), cache_path=str(Path(tempfile.mkdtemp()) / "vectors.sqlite"))
    pack = HiQAPack.empty(ingest_workers=workers, ingest_batch_size=batch_size, embed_model=embed_model)
    watcher = WorkerMemory()
    start = time.perf_counter()
    with watcher:
        report = pack.add_directory(folder)
    wall = time.perf_counter() - start
    content = [
        (schema.get_document_id(n), schema.get_position(n), n.get_content()) for n in pack.nodes
    ]
    vectors = np.asarray([pack.index.vector_store.get(n.node_id) for n in pack.nodes], dtype=np.float32)
    return {
        "workers": workers, "wall": wall, "nodes": pack.node_count, "stages": dict(report.seconds),
        "content": content, "vectors": vectors,
        "main_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_rss_mib": watcher.peak_mib,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--filings", type=int, default=4, help="first N FinanceBench PDFs by file name")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch-size", type=int, default=8, help="ingest_batch_size (documents a batch)")
    args = parser.parse_args(argv)
    pdfs = shared_data.first_financebench_pdfs(args.filings)
    if pdfs is None:
        return
    runs = [build(pdfs, w, args.batch_size) for w in args.workers]
    base = runs[0]
    rows = []
    for run in runs:
        same_nodes = run["content"] == base["content"]
        drift = float(abs(run["vectors"] - base["vectors"]).max()) if same_nodes else float("nan")
        stages = ", ".join(f"{k} {v:.0f}" for k, v in run["stages"].items() if v >= 0.5)
        rows.append(
            f"| {run['workers']} | {run['nodes']:,} | {run['wall']:.1f} | {base['wall'] / run['wall']:.2f}× "
            f"| {run['nodes'] / run['wall']:.1f} | {stages} | {run['main_rss_mib']:.0f} | "
            f"{run['worker_rss_mib']:.0f} | {'yes' if same_nodes else 'no'} | {drift:.1e} |"
        )
    cores = os.cpu_count()
    body = (
        f"`HiQAPack.empty(ingest_workers=N, ingest_batch_size={args.batch_size}).add_directory(pdfs)` with defaults on the first {len(pdfs)} "
        f"FinanceBench PDFs by file name ({', '.join(p.stem for p in pdfs)}); every build embeds "
        f"from an empty vector cache of its own; one process, {cores} cores; commit {git_commit()}.\n\n"
        "| workers | nodes | ingestion s | speed-up | nodes/s | stage seconds (summed over workers) "
        "| main peak RSS MiB | largest worker peak RSS MiB | same nodes | max vector difference |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows)
    )
    _results.write_section(SECTION, TITLE, body)
    print(body)


if __name__ == "__main__":
    main()
