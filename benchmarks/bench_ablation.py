"""The HiQA ablation (Table 2) on the demo corpus and on every dataset of ../shared/data.

Question: does each piece of HiQA (chapter segments, heading metadata, its cascade,
multi-route retrieval, the chunk graph, segment integration) move the gold evidence up the
ranking, against what a LlamaIndex user has today (SentenceSplitter + vector top-k,
BM25Retriever, RRF of the two)? Every variant the pack can build is scored with the Log-Rank
Index over all units and the usual ranking metrics; variants whose component has not landed
are listed as "not yet available".

    .venv/bin/python benchmarks/bench_ablation.py [--datasets demo musique hotpotqa financebench]
                                                  [--financebench-budget 30000] [--section-only]

Writes benchmarks/ablation/ablation_<dataset>.{json,md} and the PNGs there, and the
"ablation" section of benchmarks/RESULTS.md. Vectors come from the shared cache, so a re-run
only embeds text no run has embedded before. On FinanceBench the fixed-chunk variants are
exactly ``_common.baseline_page_chunks`` (pages_text), the segment variants are cut from
pages_markdown; a segment variant needing more new embeddings than the budget is reported as
skipped (each new FinanceBench text variant is ~25k vectors, 20+ minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

import _common  # noqa: F401  (sets sys.path, offline env)
from _common import (
    DEMO_DIR,
    ROOT,
    baseline_page_chunks,
    embed_model,
    financebench_keyword_extractor,
    require_shared_data,
)
from _results import write_section

import shared_data as datasets
from llama_index_hiqa.evaluation.corpus import folder_corpus
from llama_index_hiqa.evaluation.runner import AblationRunner
from shared_data import financebench_corpus, multihop_corpus

OUT = ROOT / "benchmarks" / "ablation"
ALL = ("demo", "hotpotqa", "musique", "financebench")


def _demo_corpus():
    questions = DEMO_DIR / "questions.jsonl"
    if not questions.exists():
        print(f"SKIP demo: {questions} not found (the demo corpus has not landed)")
        return None
    return folder_corpus(DEMO_DIR, questions, name="demo")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(ALL), choices=ALL)
    parser.add_argument("--variants", nargs="+", help="default: all")
    parser.add_argument("--financebench-budget", type=int, default=30000,
                        help="max new embeddings per FinanceBench variant (0: cached only)")
    parser.add_argument("--section-only", action="store_true",
                        help="only rebuild the RESULTS.md section from the saved runs")
    args = parser.parse_args()

    for name in [] if args.section_only else args.datasets:
        started = time.perf_counter()
        budget, keywords = None, None
        if name == "demo":
            corpus = _demo_corpus()
        elif require_shared_data(name) is None:
            corpus = None
        elif name == "financebench":
            pages = datasets.load_financebench_pages()
            corpus = financebench_corpus(fixed_chunks=baseline_page_chunks(pages))
            budget = args.financebench_budget
            keywords = financebench_keyword_extractor()
        else:
            corpus = multihop_corpus(name)
        if corpus is None:
            continue
        runner = AblationRunner(embed_model=embed_model(), keyword_extractor=keywords, max_new_embeddings=budget)
        result = runner.run(corpus, variants=args.variants)
        result.save(OUT)
        print(result.to_markdown())
        # What the RESULTS section states about this run, kept beside the figures so a later
        # run of other datasets rebuilds the whole section without re-running this one.
        info = OUT / f"ablation_{name}.run.json"
        info.write_text(json.dumps({
            "documents": len(corpus.documents),
            "questions": len(corpus.questions),
            "seconds": round(time.perf_counter() - started),
            "run_at": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "financebench_budget": budget,
        }))

    sections = []
    for name in ALL:
        table, info = OUT / f"ablation_{name}.md", OUT / f"ablation_{name}.run.json"
        if not (table.exists() and info.exists()):
            sections.append(f"### {name}\n\nSKIP: no saved run (data or demo corpus not found, or not run yet).")
            continue
        run = json.loads(info.read_text())
        images = "\n".join(
            f"![{p.stem}](ablation/{p.name})" for p in sorted(OUT.glob(f"ablation_{name}_*.png"))
        )
        budget = (
            f" Embedding budget per variant: {run['financebench_budget']:,} new vectors."
            if run.get("financebench_budget") is not None else ""
        )
        sections.append(
            f"### {name}: {run['questions']} questions, {run['documents']:,} documents "
            f"(run {run['run_at']}, {run['seconds']} s)\n\n{table.read_text().strip()}\n\n{images}\n\n"
            f"Per-question gold ranks: `benchmarks/ablation/ablation_{name}.json`.{budget}"
        )

    body = (
        "Log-Rank Index (HiQA formula 3, γ = 1, over all N units of the variant; Table 2 columns "
        "mean = `log_rank`, max/min/std) and ranking metrics per variant. `hit@k`: a unit matching "
        "a gold item (FinanceBench: the gold page; multi-hop: a gold passage) in the top k; "
        "`recall@k`: share of gold items in the top k; `doc_hit@k`: the right filing in the top k; "
        "`all_gold@k`: every gold passage in the top k. Same embedding model (packaged "
        "all-MiniLM-L6-v2) for every variant. Variants whose component has not landed are listed "
        "as not yet available. On the multi-hop sets a passage is short (one chunk) and has one "
        "heading level (its title), so `original` equals `vector_only` and `no_hierarchy` equals "
        "`hca` there: the HCA effect measured is the title prepended to the embedding. On "
        "FinanceBench, a variant that needs more new vectors than the stated budget is "
        "skipped, and its note below the table says how many are missing; its critical keywords "
        "come from the rules plus the 18 company names as expert keywords (no spaCy NER over "
        "25k units), every filing is titled \"3M 2018 10-K\", the fixed chunks embed pages_text "
        "and the segments pages_markdown (pymupdf4llm). Elsewhere keywords are the default "
        "extractor's (NER + rules). Multi-route keeps its defaults (β=auto, title keywords count "
        "twice).\n\n" + "\n\n".join(sections)
    )
    runs = {n: json.loads((OUT / f"ablation_{n}.run.json").read_text()) for n in ALL if (OUT / f"ablation_{n}.run.json").exists()}
    budget = runs.get("financebench", {}).get("financebench_budget")
    command = ".venv/bin/python benchmarks/bench_ablation.py" + (f" --financebench-budget {budget}" if budget is not None else "")
    write_section("ablation", "HiQA ablation (issue 9)", body, command=command)


if __name__ == "__main__":
    main()
