"""Embedding backends: speed, memory and retrieval quality of torch, onnx and onnx-int8.

Question: how much faster do the ONNX builds of the packaged all-MiniLM-L6-v2 embed on a
CPU, and does the int8 build's vector drift cost retrieval quality? The default backend is
the fastest one whose retrieval figures stay within 0.01 of PyTorch's.

Parts (each stores its figures in ``benchmarks/embedding_backends.json``; the RESULTS.md
section is rebuilt from that file after every part):

* ``speed``: texts per second on FinanceBench passages (page text cut into pieces of up to
  1,000 characters), batch 64, at 1 and 2 threads. The machine's cores are shared with
  other work, so the backends run *interleaved* in one process (each repeat embeds every
  batch with every backend, the order rotating) and the figure reported is the ratio to
  torch in the same run.
* ``drift``: cosine of the ONNX backends' vectors to torch's on 256 passages.
* ``rss``: peak resident memory of a fresh process per backend that loads the model and
  embeds 256 passages.
* ``quality``: MuSiQue and HotpotQA recall@5 / all-gold@5 (the ablation runner's vanilla
  vector, BM25, RRF and HiQA variants, each backend's vectors) and FinanceBench page-hit@5 /
  doc-hit@1 of ``HiQAPack.from_directory`` on the PDFs with the pack's defaults (keywords
  without spaCy NER, see below). The pack's nodes are parsed once; each ONNX backend
  re-embeds the same nodes into its own index.

    .venv/bin/python benchmarks/bench_embedding.py [--parts speed drift rss quality]
        [--financebench-companies half|all] [--speed-texts 512]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _common, _results  # noqa: E402
from llama_index_hiqa.models.defaults import DEFAULT_EMBED_BACKEND, build_packaged_embed_model  # noqa: E402
from llama_index_hiqa.models.embedding_backends import EMBED_BACKENDS, cpu_flags, select_int8_config  # noqa: E402
import shared_data as datasets  # noqa: E402

OUT = Path(__file__).with_name("embedding_backends.json")
LOCK = Path(tempfile.gettempdir()) / "hiqa_bench_embedding.lock"
BATCH = 64
PASSAGE_CHARS = 1000
TOP_K = 5
MULTIHOP_VARIANTS = ("vector_only", "fixed_bm25", "fixed_rrf", "hca_multi_route")
QUALITY_TOLERANCE = 0.01


# --------------------------------------------------------------------------- data
def financebench_passages(limit: int) -> List[str]:
    """Page text cut into pieces of up to 1,000 characters, every page of every filing in
    turn, the first ``limit`` pieces of at least 200 characters (deterministic)."""
    pieces: List[str] = []
    for page in datasets.load_financebench_pages():
        text = page["text"] or ""
        for start in range(0, len(text), PASSAGE_CHARS):
            piece = text[start : start + PASSAGE_CHARS]
            if len(piece.strip()) >= 200:
                pieces.append(piece)
    step = max(1, len(pieces) // limit)  # spread over all filings, not the first one
    return pieces[::step][:limit]


def _load() -> Dict[str, Any]:
    return json.loads(OUT.read_text(encoding="utf-8")) if OUT.exists() else {}


def _save(key: str, value: Any) -> None:
    """Read-modify-write under a lock: the parts may run as separate processes at once."""
    import fcntl

    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = _load()
        data[key] = value
        OUT.write_text(json.dumps(data, indent=2), encoding="utf-8")


# --------------------------------------------------------------------------- speed
def _set_torch_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


def run_speed(n_texts: int, threads: Sequence[int], repeats: int) -> Dict[str, Any]:
    texts = financebench_passages(n_texts)
    batches = [texts[i : i + BATCH] for i in range(0, len(texts), BATCH)]
    out: Dict[str, Any] = {"texts": len(texts), "batch": BATCH, "repeats": repeats, "by_threads": {}}
    for n in threads:
        _set_torch_threads(n)
        models = {b: build_packaged_embed_model(b, embed_batch_size=BATCH, num_threads=n) for b in EMBED_BACKENDS}
        for model in models.values():  # warm-up: first call allocates
            model.get_text_embedding_batch(batches[0][:8])
        seconds = {b: 0.0 for b in EMBED_BACKENDS}
        order = list(EMBED_BACKENDS)
        for r in range(repeats):
            for bi, batch in enumerate(batches):
                shift = (r * len(batches) + bi) % len(order)
                for backend in order[shift:] + order[:shift]:
                    started = time.perf_counter()
                    models[backend].get_text_embedding_batch(batch)
                    seconds[backend] += time.perf_counter() - started
        done = len(texts) * repeats
        rates = {b: done / s for b, s in seconds.items()}
        out["by_threads"][str(n)] = {
            "texts_per_s": rates,
            "ratio_to_torch": {b: rates[b] / rates["torch"] for b in EMBED_BACKENDS},
        }
        print(f"threads={n}: " + ", ".join(f"{b} {rates[b]:.1f}/s ({rates[b] / rates['torch']:.2f}x)" for b in rates))
    return out


def run_drift(n_texts: int = 256) -> Dict[str, Any]:
    """Cosine of each backend's vectors to torch's, same passages."""
    import numpy as np

    texts = financebench_passages(n_texts)
    vectors = {
        b: np.asarray(build_packaged_embed_model(b, embed_batch_size=BATCH).get_text_embedding_batch(texts))
        for b in EMBED_BACKENDS
    }
    out: Dict[str, Any] = {"texts": len(texts)}
    for b in EMBED_BACKENDS:
        cos = (vectors[b] * vectors["torch"]).sum(1) / (
            np.linalg.norm(vectors[b], axis=1) * np.linalg.norm(vectors["torch"], axis=1)
        )
        out[b] = {"mean_cosine": float(cos.mean()), "min_cosine": float(cos.min())}
        print(f"{b}: cosine to torch mean {cos.mean():.5f}, min {cos.min():.5f}")
    return out


# --------------------------------------------------------------------------- memory
_RSS_CODE = """
import json, resource, sys
texts = json.load(open({texts!r}))
from llama_index_hiqa.models.defaults import build_packaged_embed_model
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
model = build_packaged_embed_model({backend!r}, embed_batch_size={batch})
model.get_text_embedding_batch(texts)
print(json.dumps({{"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                   "before_model_mib": before / 1024}}))
"""


def run_rss(n_texts: int = 256) -> Dict[str, Any]:
    """Peak RSS of a fresh process per backend; the passages come from a small file so the
    FinanceBench pages loaded to cut them do not count."""
    root = str(Path(__file__).resolve().parents[1])
    out: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(financebench_passages(n_texts)), encoding="utf-8")
        for backend in EMBED_BACKENDS:
            code = _RSS_CODE.format(texts=str(texts_file), backend=backend, batch=BATCH)
            env = {**os.environ, "PYTHONPATH": root}
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
            out[backend] = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"{backend}: peak RSS {out[backend]['peak_rss_mib']:.0f} MiB")
    return out


# --------------------------------------------------------------------------- quality
def _cached(backend: str):
    from llama_index_hiqa.models.embedding_cache import CachedEmbedding

    return CachedEmbedding(build_packaged_embed_model(backend, embed_batch_size=BATCH))


def run_multihop(backends: Sequence[str]) -> Dict[str, Any]:
    from llama_index_hiqa.evaluation.runner import AblationRunner
    from shared_data import multihop_corpus

    data = _load().get("multihop", {})
    for name in ("musique", "hotpotqa"):
        for backend in backends:
            started = time.perf_counter()
            runner = AblationRunner(embed_model=_cached(backend), show_progress=True)
            result = runner.run(multihop_corpus(name), variants=list(MULTIHOP_VARIANTS))
            rows = {
                v.label: {m: v.metrics.get(m) for m in ("recall@5", "all_gold@5")}
                for v in result.variants if v.status == "ok"
            }
            data.setdefault(name, {})[backend] = {"rows": rows, "seconds": time.perf_counter() - started}
            _save("multihop", data)
            print(name, backend, rows)
    return data


def _financebench_subset(which: str) -> List[str]:
    companies = sorted({r["company"] for r in datasets.load_financebench_documents() if r["available"]})
    return companies if which == "all" else companies[::2]


def _score_financebench(pack, questions) -> Dict[str, float]:
    from llama_index_hiqa.evaluation import metrics as M

    page_hits, doc_hits = [], []
    for q in questions:
        units = [M.UnitView.from_node(hit.node) for hit in pack.as_retriever().retrieve(q.question)[:TOP_K]]
        relevant = M.relevance_matrix(units, q.gold).any(axis=0) if units else []
        page_hits.append(bool(any(relevant)))
        gold_docs = {g.document_id for g in q.gold}
        doc_hits.append(bool(units) and units[0].document_id in gold_docs)
    n = max(1, len(questions))
    return {"page_hit@5": sum(page_hits) / n, "doc_hit@1": sum(doc_hits) / n}


def run_financebench(backends: Sequence[str], which: str) -> Dict[str, Any]:
    from llama_index.core import VectorStoreIndex

    from llama_index_hiqa.pack.hiqa_pack import HiQAPack

    folder = datasets.financebench_dir()
    companies = _financebench_subset(which)
    docs = [r for r in datasets.load_financebench_documents() if r["available"] and r["company"] in companies]
    questions = [q for q in datasets.load_financebench_questions() if q.meta.get("company") in companies]
    data: Dict[str, Any] = {
        "companies": companies, "filings": len(docs), "pages": sum(r["n_pages"] for r in docs),
        "questions": len(questions), "backends": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for r in docs:  # the subset as a folder of the real PDFs (links, nothing copied)
            os.symlink(folder / "pdfs" / f"{r['doc_name']}.pdf", Path(tmp) / f"{r['doc_name']}.pdf")
        first, *rest = backends
        started = time.perf_counter()
        pack = HiQAPack.from_directory(
            tmp, embed_model=_cached(first), similarity_top_k=TOP_K, keywords={"use_ner": False}, show_progress=True
        )
        data["nodes"] = len(pack.nodes)
        data["backends"][first] = {**_score_financebench(pack, questions), "seconds": time.perf_counter() - started}
        _save("financebench", data)
        print(first, data["backends"][first])
        for backend in rest:
            started = time.perf_counter()
            embed = _cached(backend)
            nodes = [n.model_copy(deep=True) for n in pack.nodes]
            for node in nodes:
                node.embedding = None
            index = VectorStoreIndex(nodes, embed_model=embed, show_progress=True)
            other = HiQAPack(index, config=pack.config, embed_model=embed)
            data["backends"][backend] = {**_score_financebench(other, questions), "seconds": time.perf_counter() - started}
            _save("financebench", data)
            print(backend, data["backends"][backend])
    return data


# --------------------------------------------------------------------------- report
def choose_default(data: Dict[str, Any]) -> Dict[str, Any]:
    """The fastest backend (2 threads) whose every retrieval figure is within 0.01 of torch's."""
    figures: Dict[str, Dict[str, float]] = {b: {} for b in EMBED_BACKENDS}
    for name, per_backend in data.get("multihop", {}).items():
        for backend, payload in per_backend.items():
            for label, metrics in payload["rows"].items():
                for metric, value in metrics.items():
                    figures[backend][f"{name} {label} {metric}"] = value
    for backend, payload in data.get("financebench", {}).get("backends", {}).items():
        for metric in ("page_hit@5", "doc_hit@1"):
            figures[backend][f"financebench pack {metric}"] = payload[metric]
    torch_figures = figures["torch"]
    keeps = {}
    for backend in EMBED_BACKENDS:
        shared = [k for k in torch_figures if k in figures[backend]]
        worst_key = min(shared, key=lambda k: figures[backend][k] - torch_figures[k], default=None)
        worst = None if worst_key is None else figures[backend][worst_key] - torch_figures[worst_key]
        below = [k for k in shared if figures[backend][k] - torch_figures[k] < -QUALITY_TOLERANCE - 1e-9]
        keeps[backend] = {"measured": len(shared), "worst_drop": worst, "worst_figure": worst_key,
                          "below_tolerance": below,
                          # every figure torch has must be measured: a partial run decides nothing
                          "keeps_quality": len(shared) == len(torch_figures) > 0 and not below}
    speed = data.get("speed", {}).get("by_threads", {})
    rates = (speed.get("2") or next(iter(speed.values()), {})).get("ratio_to_torch", {})
    eligible = [b for b in EMBED_BACKENDS if keeps[b]["keeps_quality"]]
    choice = max(eligible, key=lambda b: rates.get(b, 0.0)) if eligible and rates else None
    return {"per_backend": keeps, "choice": choice}


def write_section(data: Dict[str, Any]) -> None:
    parts: List[str] = [
        "The machine's 2 cores were **shared** with other running work (the lead's and other "
        "helpers' jobs, load average 6-8) during every part, so absolute texts-per-second figures are "
        "low and noisy; the backends were measured interleaved in one process and the ratios to torch "
        "of the same run are the figures to read. The parts ran as separate processes "
        "(`--parts speed`, `drift`, `rss`, `multihop`, `financebench`), partly at the same time."
        f" ONNX files exported once from the packaged weights; int8 configuration selected for this CPU: "
        f"`{select_int8_config(cpu_flags())}`. Default backend at the time of this run: "
        f"`{DEFAULT_EMBED_BACKEND}`."
    ]
    speed = data.get("speed")
    if speed:
        rows = []
        for n, payload in speed["by_threads"].items():
            for b in EMBED_BACKENDS:
                rows.append([n, b, f"{payload['texts_per_s'][b]:.1f}", f"{payload['ratio_to_torch'][b]:.2f}×"])
        parts.append(
            f"### Throughput\n\n{speed['texts']} FinanceBench passages of up to {PASSAGE_CHARS:,} characters, "
            f"batch {speed['batch']}, {speed['repeats']} repeat(s), backends interleaved batch by batch.\n\n"
            + _results.markdown_table(["threads", "backend", "texts / s", "vs torch"], rows)
        )
    drift = data.get("drift")
    if drift:
        rows = [[b, f"{drift[b]['mean_cosine']:.5f}", f"{drift[b]['min_cosine']:.5f}"] for b in EMBED_BACKENDS]
        parts.append(
            f"### Vector drift\n\nCosine of each backend's vector to torch's, {drift['texts']} FinanceBench "
            "passages.\n\n" + _results.markdown_table(["backend", "mean cosine", "min cosine"], rows)
        )
    rss = data.get("rss")
    if rss:
        rows = [[b, f"{rss[b]['peak_rss_mib']:.0f}", f"{rss[b]['before_model_mib']:.0f}"] for b in EMBED_BACKENDS if b in rss]
        parts.append(
            "### Peak memory\n\nOne fresh process per backend: import the pack, load the model (its ONNX "
            "file already exported), embed 256 passages at batch 64. 'Before the model': the peak after the "
            "imports.\n\n"
            + _results.markdown_table(["backend", "peak RSS (MiB)", "RSS before the model (MiB)"], rows)
        )
    multihop = data.get("multihop", {})
    for name, per_backend in multihop.items():
        backends = [b for b in EMBED_BACKENDS if b in per_backend]
        labels = list(next(iter(per_backend.values()))["rows"])
        rows = []
        for label in labels:
            row = [label]
            for b in backends:
                m = per_backend[b]["rows"].get(label, {})
                row.append(f"{m.get('recall@5', float('nan')):.3f} / {m.get('all_gold@5', float('nan')):.3f}")
            rows.append(row)
        parts.append(
            f"### {name}: recall@5 / all-gold@5, {len(labels)} retrievers × backend\n\n"
            "The ablation runner's variants (same code as the HiQA ablation section), each with that "
            "backend's vectors; keywords from the default extractor (spaCy NER + rules).\n\n"
            + _results.markdown_table(["retriever", *backends], rows)
        )
    fb = data.get("financebench")
    if fb:
        backends = [b for b in EMBED_BACKENDS if b in fb["backends"]]
        rows = [[b, f"{fb['backends'][b]['page_hit@5']:.3f}", f"{fb['backends'][b]['doc_hit@1']:.3f}",
                 f"{fb['backends'][b]['seconds']:.0f}"] for b in backends]
        subset = "All 18 companies" if len(fb["companies"]) == 18 else (
            f"A documented subset: every other company in alphabetical order ({', '.join(fb['companies'])})"
        )
        parts.append(
            f"### FinanceBench: HiQAPack.from_directory, page-hit@5 and doc-hit@1\n\n"
            f"{subset}: {fb['filings']} filings, {fb['pages']:,} pages, {fb.get('nodes', 0):,} pack nodes, "
            f"{fb['questions']} answerable questions (gold = filing and page, pages from 0). Pack defaults "
            "except `keywords={'use_ner': False}` (rules only: spaCy NER over ten thousand nodes takes hours "
            f"on 2 cores, and keywords do not depend on the embedding). Top {TOP_K}. The nodes are parsed once "
            "(torch run); each ONNX backend embeds the same nodes into its own index. Seconds: wall time of "
            f"that backend's build + {fb['questions']}-question scoring on the shared machine (torch's includes "
            "reading and parsing the PDFs). One question is 0.02 of these figures, so under the 0.01 rule a "
            "backend keeps FinanceBench quality only when no question's outcome changes on balance.\n\n"
            + _results.markdown_table(["backend", "page-hit@5", "doc-hit@1", "seconds"], rows)
        )
    decision = choose_default(data)
    lines = [
        f"- `{b}`: {d['measured']} figures compared with torch; worst change "
        f"{'n/a' if d['worst_drop'] is None else format(d['worst_drop'], '+.3f')} ({d['worst_figure']}); "
        + (f"keeps quality (tolerance {QUALITY_TOLERANCE})" if d["keeps_quality"] else
           f"more than {QUALITY_TOLERANCE} below torch on {len(d['below_tolerance'])}: " + "; ".join(d["below_tolerance"])
           if d["below_tolerance"] else "not every figure measured yet")
        for b, d in decision["per_backend"].items() if b != "torch"
    ]
    parts.append(
        "### Choice of the default\n\nRule: the fastest backend (2 threads) whose retrieval figures all stay "
        f"within {QUALITY_TOLERANCE} of torch's.\n\n" + "\n".join(lines)
        + f"\n\nMeasured choice: **`{decision['choice']}`**."
    )
    _results.write_section(
        "embedding", "Embedding backends", "\n\n".join(parts),
        command=".venv/bin/python benchmarks/bench_embedding.py",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["speed", "drift", "rss", "quality"],
                        choices=["speed", "drift", "rss", "quality", "multihop", "financebench", "report"])
    parser.add_argument("--financebench-companies", choices=["half", "all"], default="half")
    parser.add_argument("--speed-texts", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--backends", nargs="+", default=["torch", "onnx-int8", "onnx"], choices=EMBED_BACKENDS,
                        help="quality runs, in this order (torch first: the reference)")
    args = parser.parse_args()
    if _common.require_shared_data("embedding backends") is None:
        return
    if "speed" in args.parts:
        _save("speed", run_speed(args.speed_texts, (1, 2), args.repeats))
        write_section(_load())
    if "drift" in args.parts:
        _save("drift", run_drift())
    if "rss" in args.parts:
        _save("rss", run_rss())
        write_section(_load())
    if "quality" in args.parts or "multihop" in args.parts:
        run_multihop(args.backends)
        write_section(_load())
    if "quality" in args.parts or "financebench" in args.parts:
        run_financebench(args.backends, args.financebench_companies)
    with open(LOCK, "w") as lock:
        import fcntl

        fcntl.flock(lock, fcntl.LOCK_EX)
        write_section(_load())
    print(json.dumps(choose_default(_load()), indent=2))


if __name__ == "__main__":
    main()
