"""The look-alike preference on FinanceBench's product path, question by question.

``prefer_implied_period`` changes only which document the document focus puts first, so a
question whose focus choice (``DocumentFocusRetriever.choose``: documents and the document of
each first place) is the same with the preference on and off gets the same full ranking both
ways. This script asks every question's choice both ways (one multi-route ranking each), ranks
in full, both ways, only the questions whose choice differs plus a sample of the others, and
takes every other question's ranks from a saved ``bench_product.py`` run over the same store
(``--base``, by default main's ``benchmarks/product/defaults.json``). It checks that claim:
the preference-off ranks of every question ranked here must equal the saved run's, else it
stops. On a machine shared by many jobs this takes minutes where a full run of the 86
questions takes hours.

    nice -n 10 .venv/bin/python benchmarks/bench_product_lookalike.py --store /path/to/defaults
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _common  # noqa: E402
from benchmarks import bench_product as product  # noqa: E402

from llama_index.core.schema import QueryBundle  # noqa: E402

import shared_data as datasets  # noqa: E402

OUT = product.HERE / "product_lookalike.json"  # not in product/: the section reads every JSON there as a row
KS = product.KS


def saved_run(base: str) -> Dict[str, Any]:
    """A saved ``bench_product.py`` variant: a path, or ``git:REF:PATH``."""
    if base.startswith("git:"):
        _, ref, path = base.split(":", 2)
        text = subprocess.check_output(["git", "show", f"{ref}:{path}"], cwd=product.HERE, text=True)
        return json.loads(text)
    return json.loads(Path(base).read_text())


def summary(per_question: List[Dict[str, Any]]) -> Dict[str, float]:
    """page-hit@k, doc-hit@k and MRR from each question's first gold page and right-filing ranks."""
    n = len(per_question)

    def rank(row: Dict[str, Any], key: str) -> float:
        return float("inf") if row.get(key) is None else row[key]

    out = {f"page-hit@{k}": sum(rank(r, "page_rank") <= k for r in per_question) / n for k in KS}
    out.update({f"doc-hit@{k}": sum(rank(r, "doc_rank") <= k for r in per_question) / n for k in (1, 5)})
    out["MRR"] = sum(1.0 / rank(r, "page_rank") for r in per_question) / n
    return out


def write_rows(result: Dict[str, Any], base: Dict[str, Any]) -> None:
    """The two rows of bench_product.py's section: the saved run as the row without the
    preference, and the defaults composed from it and this run's re-ranked questions (no LRI:
    the saved run keeps no per-question LRI). The section is then rewritten."""
    off = {
        **base, "settings": product.VARIANTS["no_implied_period"], "label": product.VARIANT_LABELS["no_implied_period"],
        "row": {**base["row"], **result["row_off"], "LRI": None}, "per_question": result["per_question_off"],
        "run": f"{result['run']}, {len(result['ranked_in_full'])} questions re-ranked, the others from {base['run']}",
    }
    rank_s = result["timing"]["rank_s"] / max(1, 2 * len(result["ranked_in_full"]))
    on = {
        **base,
        "row": {**base["row"], **result["row_on"], "LRI": None, "query_s": rank_s},
        "per_question": result["per_question"],
        "run": f"{result['run']}, {len(result['ranked_in_full'])} questions re-ranked, the others from {base['run']}",
        "label": "HiQAPack.from_directory (defaults, with the look-alike preference; composed, see the note under the table)",
        "timing": {"store_of": "defaults", "loaded_s": result["timing"]["load_s"]},
    }
    (product.OUT_DIR / "no_implied_period.json").write_text(json.dumps(off, indent=1))
    (product.OUT_DIR / "defaults.json").write_text(json.dumps(on, indent=1))
    product.write_section()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="the defaults store bench_product.py built")
    parser.add_argument("--base", default="git:main:benchmarks/product/defaults.json")
    parser.add_argument("--sample", type=int, default=6, help="unchanged questions also ranked in full (the check)")
    parser.add_argument("--rows-only", action="store_true", help="write bench_product.py's rows from the saved run")
    args = parser.parse_args(argv)
    if args.rows_only:
        write_rows(json.loads(OUT.read_text()), saved_run(args.base))
        return
    root = _common.require_shared_data("FinanceBench look-alike preference")
    if root is None:
        return
    from llama_index_hiqa import DocumentFocusRetriever, HiQAPack

    pdf_dir = root / "financebench" / "pdfs"
    doc_names = {p.stem for p in pdf_dir.glob("*.pdf")}
    questions = [q for q in datasets.load_financebench_questions(root) if set(q.gold_documents) <= doc_names]
    base = saved_run(args.base)
    base_rows = {row["id"]: row for row in base["per_question"]}
    t0 = time.perf_counter()
    pack = HiQAPack.load(args.store)
    load_s = time.perf_counter() - t0
    settings = pack.config.document_focus.model_dump()
    on = DocumentFocusRetriever(pack.multi_route, embed_model=pack.embed_model, **{**settings, "prefer_implied_period": True})
    off = DocumentFocusRetriever(pack.multi_route, embed_model=pack.embed_model, **{**settings, "prefer_implied_period": False})
    t0 = time.perf_counter()
    changed, choices = [], {}
    for question in questions:
        bundle = on._embedded(QueryBundle(question.question))
        head = pack.multi_route.rank(bundle)
        chosen_on = on.choose(bundle, head.results, head.keywords)
        chosen_off = off.choose(bundle, head.results, head.keywords)
        choices[question.id] = {"on": chosen_on.documents, "off": chosen_off.documents}
        if (chosen_on.documents, chosen_on.pattern) != (chosen_off.documents, chosen_off.pattern):
            changed.append(question)
        print(question.id, "changed" if changed and changed[-1] is question else "same", chosen_on.documents[:3], flush=True)
    choose_s = time.perf_counter() - t0
    unchanged = [q for q in questions if q not in changed]
    checked = changed + unchanged[:: max(1, len(unchanged) // max(1, args.sample))][: args.sample]
    nodes = pack.nodes
    t0 = time.perf_counter()
    rows: Dict[str, List[Dict[str, Any]]] = {"on": [], "off": []}
    for name, retriever in (("on", on), ("off", off)):
        rankings = [retriever.full_ranking(q.question) for q in checked]
        product.score(rankings, nodes, checked, rows[name])
    rank_s = time.perf_counter() - t0
    def differs(row: Dict[str, Any]) -> bool:
        return (row["page_rank"], row["doc_rank"]) != (base_rows[row["id"]]["page_rank"], base_rows[row["id"]]["doc_rank"])

    changed_ids = {q.id for q in changed}
    # The check: a question whose choice is the same both ways must rank as in the saved run.
    mismatched = [r["id"] for name in ("on", "off") for r in rows[name] if r["id"] not in changed_ids and differs(r)]
    on_rows, off_rows = {r["id"]: r for r in rows["on"]}, {r["id"]: r for r in rows["off"]}
    # Every question ranked here takes both its ranks from this run; the others both from the saved run.
    per_question_on = [on_rows.get(q.id, base_rows[q.id]) for q in questions]
    per_question_off = [off_rows.get(q.id, base_rows[q.id]) for q in questions]
    result = {
        "run": f"{time.strftime('%Y-%m-%d %H:%M')}, {product.git_commit()}",
        "base": {"source": args.base, "run": base.get("run")},
        "store": str(args.store),
        "changed": [q.id for q in changed],
        "choices": {q.id: choices[q.id] for q in changed},
        "ranked_in_full": [q.id for q in checked],
        "unchanged_differs_from_base": mismatched,
        "changed_off_differs_from_base": [r["id"] for r in rows["off"] if r["id"] in changed_ids and differs(r)],
        "row_base": summary([base_rows[q.id] for q in questions]),
        "row_on": summary(per_question_on),
        "row_off": summary(per_question_off),
        "per_question": per_question_on,
        "per_question_off": per_question_off,
        "moves": product.moves(per_question_off, per_question_on),
        "timing": {"load_s": load_s, "choose_s": choose_s, "rank_s": rank_s},
    }
    OUT.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("changed", "unchanged_differs_from_base", "changed_off_differs_from_base",
                                             "row_on", "row_off", "row_base", "timing")}, indent=1))
    if mismatched:
        sys.exit("a question ranks otherwise than in the saved run: that run is not of this store or code")


if __name__ == "__main__":
    main()
