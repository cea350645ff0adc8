"""Do questions generated from a collection rank fusion settings as its real questions do?

Self-calibration (``pack.calibrate()``, removed after this measurement) chose α, β and the title keyword weight on questions
generated from the store's headings. Twice on FinanceBench it made the real questions worse.
This benchmark asks why, before deciding whether the feature stays:

* One store: the FinanceBench defaults store that ``bench_product.py`` built
  (``HiQAPack.from_directory`` on the 46 PDFs; ``--store``), loaded read-only.
* A grid of settings in the defaults' neighbourhood (α, β, title weight); every question's
  route scores are computed once per title weight and re-fused for every setting (the pure
  fusion the calibration itself uses).
* Real questions: FinanceBench's 86 answerable ones; per setting, over the multi-route
  ranking: the gold filing first (doc@1), a gold page among the first 5 nodes (page@5), and
  the reciprocal rank of the first gold page (MRR).
* Generated questions, two generators (no labels): ``headings`` (the removed calibration's: "What does
  <document title> say about <heading>?") and ``content`` (a question as FinanceBench asks
  one: the filing's company and fiscal year, and the rarest words of one node's text; the node
  answers it).
* Agreement: Kendall's τ and Spearman's ρ between the settings' order by each generated set
  and by the real questions; and what a fit on each generated set would choose (the best
  setting, kept only when it beats the defaults by a paired sign test at p < 0.05 over the
  generated questions), scored on the real questions.

Run: ``nice -n 10 .venv/bin/python benchmarks/bench_calibration.py``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402,F401  (sets sys.path and offline env)
from _results import markdown_table, write_section  # noqa: E402

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from llama_index_hiqa import schema  # noqa: E402
import shared_data  # noqa: E402

HERE = Path(__file__).resolve().parent
RUN_FILE = HERE / "calibration_agreement.json"  # not in product/: bench_product reads every file there
COMMAND = "nice -n 10 .venv/bin/python benchmarks/bench_calibration.py"
GRID = {
    "alpha": [0.5, 0.6, 0.7, 0.8, 0.9],
    "beta": [0.5, 1.0, 1.5, 2.0, "auto"],
    "document_keyword_weight": [1.0, 2.0, 3.0],
}
_STOP = set(
    "the and for with that this from have has were was are which their other such these those been "
    "will would could should than also into more most including total company companies year years "
    "fiscal ended million billion percent based related upon under over within during each any".split()
)


_GENERIC_HEADINGS = {"", "table of contents", "index", "signatures", "exhibits", "none"}


def heading_questions(nodes: Sequence[Any], limit: int = 120, seed: int = 0) -> List[Dict[str, Any]]:
    """The removed ``calibration_questions``: one question per headed section ("What does
    <document title> say about <heading>?"), round robin over the documents; the section's
    nodes answer it."""
    from collections import defaultdict

    sections: Dict[tuple, List[str]] = defaultdict(list)
    titles: Dict[str, str] = {}
    for node in nodes:
        if schema.get_segment_kind(node) == schema.KIND_IMAGE:
            continue
        path = schema.get_heading_path(node)
        document_id = schema.get_document_id(node) or ""
        if not path or not document_id:
            continue
        heading = path[-1].title.strip() or path[-1].label()
        if heading.lower() in _GENERIC_HEADINGS or len(heading) < 4:
            continue
        titles.setdefault(document_id, schema.get_document_title(node) or document_id)
        sections[(document_id, tuple(h.label() for h in path), heading)].append(node.node_id)
    by_document: Dict[str, List[tuple]] = defaultdict(list)
    for key in sections:
        by_document[key[0]].append(key)
    rng = random.Random(seed)
    queues = []
    for document_id in sorted(by_document):
        keys = sorted(by_document[document_id])
        rng.shuffle(keys)
        queues.append(keys)
    picked: List[tuple] = []
    while len(picked) < limit and any(queues):
        for queue in queues:
            if queue and len(picked) < limit:
                picked.append(queue.pop())
    return [
        {"question": f"What does {titles[d]} say about {h}?", "document_id": d, "node_ids": sections[(d, p, h)]}
        for d, p, h in picked
    ]


def content_questions(nodes: Sequence[Any], limit: int = 120, seed: int = 0) -> List[Dict[str, Any]]:
    """Questions as a FinanceBench user words them: company and fiscal year from the filing's
    title, and the four rarest words (collection document frequency) of one node's text."""
    rng = random.Random(seed)
    words_of = {}
    df: Counter = Counter()
    for node in nodes:
        words = {w for w in re.findall(r"[a-z]{4,}", node.get_content().lower()) if w not in _STOP}
        words_of[node.node_id] = words
        df.update(words)
    by_doc: Dict[str, List[Any]] = {}
    for node in nodes:
        if len(words_of[node.node_id]) >= 8 and schema.get_page_range(node) is not None:
            by_doc.setdefault(schema.get_document_id(node) or "", []).append(node)
    out = []
    docs = sorted(by_doc)
    rng.shuffle(docs)
    while len(out) < limit:
        for doc in docs:
            if len(out) >= limit:
                break
            node = rng.choice(by_doc[doc])
            title = schema.get_document_title(node) or doc
            company = title.split(",")[0]
            year = (re.findall(r"(?:19|20)\d\d", title) or [""])[-1]
            rare = sorted(words_of[node.node_id], key=lambda w: (df[w], w))[:4]
            out.append({
                "question": f"What does {company} report about {' '.join(rare)} in fiscal {year}?",
                "document_id": doc,
                "node_ids": [node.node_id],
            })
    return out


def setting_key(s: Dict[str, Any]) -> str:
    return f"α={s['alpha']} β={s['beta']} w={s['document_keyword_weight']}"


def run(store: Path) -> Dict[str, Any]:
    from llama_index_hiqa import HiQAPack

    t0 = time.perf_counter()
    pack = HiQAPack.load(store)
    multi = pack.multi_route
    nodes = list(pack.index.docstore.docs.values())
    print(f"loaded {len(nodes)} nodes in {time.perf_counter() - t0:.0f} s", flush=True)
    doc_of = {n.node_id: schema.get_document_id(n) for n in nodes}
    pages_of = {n.node_id: schema.get_page_range(n) for n in nodes}
    real = shared_data.load_financebench_questions()
    question_sets = {
        "real": [
            {"question": q.question, "gold": [(g.document_id, g.page) for g in q.gold]} for q in real
        ],
        "headings": heading_questions(nodes),
        "content": content_questions(nodes),
    }
    defaults = {k: multi.config.model_dump()[k] for k in GRID}

    def per_question(name: str, ranking: List[str], q: Dict[str, Any]) -> Tuple[float, float, float]:
        """(doc@1, hit@5, reciprocal rank) of one question under one ranking."""
        if name == "real":
            gold_docs = {d for d, _ in q["gold"]}

            def hit(i: str) -> bool:
                pr = pages_of.get(i)
                return any(doc_of.get(i) == d and pr and pr[0] <= p <= pr[1] for d, p in q["gold"])
        else:
            gold_docs = {q["document_id"]}
            answers = set(q["node_ids"])

            def hit(i: str) -> bool:
                return i in answers
        first_doc = float(bool(ranking) and doc_of.get(ranking[0]) in gold_docs)
        rank = next((r for r, i in enumerate(ranking, 1) if hit(i)), None)
        return first_doc, float(rank is not None and rank <= 5), (1.0 / rank if rank else 0.0)

    fusion_keys = ["alpha", "beta"]
    settings = [dict(zip(GRID, combo)) for combo in itertools.product(*GRID.values())]
    if defaults not in settings:
        settings.append(defaults)
    per: Dict[str, Dict[str, List[Tuple[float, float, float]]]] = {name: {} for name in question_sets}
    for weight in GRID["document_keyword_weight"]:
        weighted = multi.with_settings(document_keyword_weight=weight)
        for name, qs in question_sets.items():
            t0 = time.perf_counter()
            scored = [weighted.route_scores(q["question"]) for q in qs]
            print(f"w={weight} {name}: route scores {time.perf_counter() - t0:.0f} s", flush=True)
            for s in settings:
                if s["document_keyword_weight"] != weight:
                    continue
                variant = weighted.with_settings(**{k: s[k] for k in fusion_keys})
                per[name][setting_key(s)] = [per_question(name, variant.fuse(sc), q) for sc, q in zip(scored, qs)]
    keys = [setting_key(s) for s in settings]
    means = {
        name: {k: [float(np.mean([t[m] for t in per[name][k]])) for m in range(3)] for k in keys}
        for name in question_sets
    }
    agreement = {}
    for gen in ("headings", "content"):
        agreement[gen] = {}
        for m_gen, m_real, label in ((2, 2, "MRR vs MRR"), (2, 1, "MRR vs page@5"), (0, 0, "doc@1 vs doc@1")):
            x = [means[gen][k][m_gen] for k in keys]
            y = [means["real"][k][m_real] for k in keys]
            tau = stats.kendalltau(x, y)
            rho = stats.spearmanr(x, y)
            agreement[gen][label] = {"kendall_tau": float(tau.statistic), "kendall_p": float(tau.pvalue),
                                     "spearman_rho": float(rho.statistic), "spearman_p": float(rho.pvalue)}
    fits = {}
    dkey = setting_key(defaults)
    for gen in ("headings", "content"):
        best = max(keys, key=lambda k: (means[gen][k][2], means[gen][k][0]))
        # Paired sign test over the generated questions: reciprocal rank better / worse.
        a = [t[2] for t in per[gen][best]]
        b = [t[2] for t in per[gen][dkey]]
        wins, losses = sum(x > y for x, y in zip(a, b)), sum(x < y for x, y in zip(a, b))
        p = float(stats.binomtest(wins, wins + losses).pvalue) if wins + losses else 1.0
        chosen = best if (p < 0.05 and wins > losses) else dkey
        fits[gen] = {"best": best, "wins": wins, "losses": losses, "sign_p": p, "chosen": chosen,
                     "generated_mrr": [means[gen][dkey][2], means[gen][best][2]],
                     "real": {"defaults": means["real"][dkey], "best_on_generated": means["real"][best],
                              "chosen": means["real"][chosen]}}
    best_real = max(keys, key=lambda k: (means["real"][k][1], means["real"][k][2]))
    return {"n": {k: len(v) for k, v in question_sets.items()}, "defaults": dkey, "keys": keys, "means": means,
            "agreement": agreement, "fits": fits, "best_real": best_real,
            "examples": {g: [q["question"] for q in question_sets[g][:3]] for g in ("headings", "content")}}


def report(r: Dict[str, Any]) -> None:
    m = r["means"]
    rows = [[gen, label, f"{a['kendall_tau']:+.3f} (p {a['kendall_p']:.2g})", f"{a['spearman_rho']:+.3f} (p {a['spearman_p']:.2g})"]
            for gen, by in r["agreement"].items() for label, a in by.items()]
    agree = markdown_table(["generator", "generated metric vs real metric", "Kendall τ", "Spearman ρ"], rows)
    fit_rows = []
    for gen, f in r["fits"].items():
        fit_rows.append([gen, f["best"], f"{f['generated_mrr'][0]:.3f} → {f['generated_mrr'][1]:.3f}",
                         f"{f['wins']}/{f['losses']}, p {f['sign_p']:.2g}", f["chosen"],
                         *(f"{v:.3f}" for v in f["real"]["best_on_generated"]), *(f"{v:.3f}" for v in f["real"]["chosen"])])
    fits = markdown_table(
        ["generator", "best setting on generated", "generated MRR defaults → best", "wins/losses (sign test)",
         "chosen (p < 0.05)", "real doc@1 (best)", "real page@5 (best)", "real MRR (best)",
         "real doc@1 (chosen)", "real page@5 (chosen)", "real MRR (chosen)"], fit_rows)
    top = sorted(r["keys"], key=lambda k: -m["real"][k][1])
    grid_rows = [[k + (" (defaults)" if k == r["defaults"] else ""), *(f"{v:.3f}" for v in m["real"][k]),
                  f"{m['headings'][k][2]:.3f}", f"{m['content'][k][2]:.3f}"] for k in top]
    grid = markdown_table(["setting", "real doc@1", "real page@5", "real MRR", "headings MRR", "content MRR"], grid_rows)
    ex = "\n".join(f"* {g}: " + " / ".join(f"\"{q}\"" for q in qs) for g, qs in r["examples"].items())
    body = (
        __doc__.split("\n\n", 1)[1].split("Run:")[0].strip()
        + f"\n\nQuestions: {r['n']}. Settings: {len(r['keys'])} (defaults {r['defaults']}); the real figures "
        "are over the multi-route ranking (the calibration's own object), not the document focus above it.\n\n"
        f"Examples:\n{ex}\n\n**Rank agreement of the settings** (generated vs real):\n\n{agree}\n\n"
        f"**What a fit would choose** (best real setting: {r['best_real']}):\n\n{fits}\n\n"
        f"Every setting, by real page@5:\n\n{grid}"
    )
    write_section("calibration_agreement", "Self-calibration: do generated questions rank settings as real ones do?",
                  body, command=COMMAND)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, default=Path("/tmp/hiqa_bench_product/defaults"))
    parser.add_argument("--section-only", action="store_true")
    args = parser.parse_args()
    if not args.section_only:
        result = run(args.store)
        RUN_FILE.write_text(json.dumps(result, indent=1))
    report(json.loads(RUN_FILE.read_text()))


if __name__ == "__main__":
    main()
