"""HiQAPack end to end on the demo datasheets: answer quality, ingestion, persist / load.

Question: does the one-line pack (``HiQAPack.from_directory``) find the right datasheet and
section where what a LlamaIndex user has today does not, and what does it cost to build,
save and reload?

Side by side on ``examples/data`` (ten look-alike datasheets, 25 questions with gold
document / section / page), every retriever returning 3 nodes:

* ``SentenceSplitter(256, 32)`` + the same embedding + vector top-k (the LlamaIndex default);
* ``BM25Retriever`` over the same chunks;
* ``QueryFusionRetriever`` (reciprocal rank, no query generation) of the two;
* ``HiQAPack`` defaults (layout parser + cascade + multi-route), and with the chunk graph.

Metrics: gold document at rank 1 / in the top 3, gold page and gold section in the top 3.
Costs: wall seconds to ingest (vectors come from the shared cache, so the embedding cost is
the same for every variant and not what is measured), to persist, and to load + answer in a
new process. Run: ``PYTHONPATH=. .venv/bin/python benchmarks/bench_pack.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _common, _results  # noqa: E402
from llama_index_hiqa import schema  # noqa: E402
from llama_index_hiqa.demo import DEMO_DATA_DIR, answer_questions, build_nodes, load_demo_documents  # noqa: E402
from llama_index_hiqa.evaluation.datasets import load_questions_jsonl  # noqa: E402

TOP_K = 3
FIGURE = Path(__file__).with_name("pack.png")


def _scores(answers) -> Dict[str, float]:
    n = max(1, len(answers))
    return {
        "doc@1": sum(a.gold_rank == 1 for a in answers) / n,
        "doc@3": sum(a.gold_rank is not None for a in answers) / n,
        "page@3": sum(a.page_hit for a in answers) / n,
        "section@3": sum(a.section_hit for a in answers) / n,
    }


def main() -> None:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.retrievers.bm25 import BM25Retriever

    from llama_index_hiqa.pack.hiqa_pack import HiQAPack
    from llama_index_hiqa.testing import ScriptedLLM

    embed = _common.embed_model()
    questions = load_questions_jsonl(DEMO_DATA_DIR / "questions.jsonl")
    documents = load_demo_documents()
    chunks = build_nodes(documents)

    results: Dict[str, Dict[str, float]] = {}
    vector = VectorStoreIndex(chunks, embed_model=embed).as_retriever(similarity_top_k=TOP_K)
    bm25 = BM25Retriever.from_defaults(nodes=chunks, similarity_top_k=TOP_K)
    fusion = QueryFusionRetriever(
        [vector, bm25], similarity_top_k=TOP_K, num_queries=1, mode="reciprocal_rerank",
        llm=ScriptedLLM(), use_async=False,
    )
    for name, retriever in (
        ("SentenceSplitter + vector top-k", vector),
        ("BM25Retriever", bm25),
        ("QueryFusionRetriever (RRF)", fusion),
    ):
        results[name] = _scores(answer_questions(questions, retriever))

    # Wall seconds on a shared 2-core machine; the CPU-seconds row is the cost without waiting.
    timings: Dict[str, float] = {}
    started = time.perf_counter()
    pack = HiQAPack.from_documents(documents, embed_model=embed, similarity_top_k=TOP_K)
    timings["ingest (parse + cascade + keywords + index, cached vectors)"] = time.perf_counter() - started
    results["HiQAPack (defaults)"] = _scores(answer_questions(questions, pack.as_retriever()))

    started = time.perf_counter()
    graph_pack = HiQAPack.from_documents(
        documents, embed_model=embed, similarity_top_k=TOP_K, use_chunk_graph=True, chunk_graph={"max_nodes": 2}
    )
    timings["ingest with the chunk graph"] = time.perf_counter() - started
    # the graph appends chain nodes after the multi-route top 3: score the first 3 + 2 chain nodes
    results["HiQAPack + chunk graph (3 + ≤2 chain nodes)"] = _scores(
        answer_questions(questions, graph_pack.as_retriever())
    )

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        started = time.perf_counter()
        pack.persist(store)
        timings["persist"] = time.perf_counter() - started
        size = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
        code = (
            "import json, time; t = time.perf_counter(); c = time.process_time()\n"
            "from llama_index_hiqa.pack.hiqa_pack import HiQAPack\n"
            f"pack = HiQAPack.load({str(store)!r}); loaded = time.perf_counter() - t\n"
            f"ids = [n.node.node_id for n in pack.retrieve({questions[0].question!r})]\n"
            "print(json.dumps({'load': loaded, 'total': time.perf_counter() - t, 'cpu': time.process_time() - c, 'ids': ids}))\n"
        )
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        payload = json.loads(out.stdout.strip().splitlines()[-1])
        same = payload["ids"] == [n.node.node_id for n in pack.retrieve(questions[0].question)]
        timings["new process: import + load (models included)"] = payload["load"]
        timings["new process: load + first answer"] = payload["total"]
        timings["new process: load + first answer, CPU seconds"] = payload["cpu"]

    rows = [[name, *(f"{v:.2f}" for v in s.values())] for name, s in results.items()]
    quality = _results.markdown_table(["retriever (3 nodes)", "doc@1", "doc@3", "page@3", "section@3"], rows)
    costs = _results.markdown_table(["step", "seconds"], [[k, f"{v:.1f}"] for k, v in timings.items()])
    body = (
        f"Demo datasheets: {len(documents)} documents, {len(questions)} questions; baseline "
        f"{len(chunks)} SentenceSplitter chunks, HiQAPack {len(pack.nodes)} segment nodes; "
        f"same embedding (packaged MiniLM).\n\n{quality}\n\n{costs}\n\n"
        f"Store on disk: {size / 1024:.0f} KiB; a new process answers with the same evidence: {same}.\n\n"
        f"![HiQAPack on the demo datasheets]({FIGURE.name})"
    )
    _plot(results)
    _results.write_section(
        "pack", "HiQAPack end to end (issue 10)", body, command="PYTHONPATH=. .venv/bin/python benchmarks/bench_pack.py"
    )
    print(quality)
    print(costs)
    print(f"store {size / 1024:.0f} KiB, same evidence after load: {same}")


def _plot(results: Dict[str, Dict[str, float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    metrics = list(next(iter(results.values())))
    names = list(results)
    x = np.arange(len(metrics))
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(9, 4))
    for i, name in enumerate(names):
        ax.bar(x + i * width, [results[name][m] for m in metrics], width, label=name)
    ax.set_xticks(x + 0.4 - width / 2)
    ax.set_xticklabels(metrics)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of the 25 demo questions")
    ax.set_title("Ten look-alike datasheets: the right datasheet / page / section in the top 3")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(FIGURE, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
