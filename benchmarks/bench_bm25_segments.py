"""Documents added to a large embedded store: the first answer after the add, against a full
BM25 rebuild, and the BM25 rankings against a full rebuild.

The store is one `bench_scale.py` builds store-side (``replicated_batches``: synthetic
datasheets, 51 nodes a document: a title and 50 sections); build it once outside the repository, e.g.::

    python benchmarks/bench_scale.py --replicated 1000000 --embedded-dir /work/bench_stores

(or any embedded store of those documents), then::

    python benchmarks/bench_bm25_segments.py STORE [STORE ...]

For each store: a base over the whole store first (merged, saved), then 1 document (51 nodes)
is added through the pack's batch write and a question asked (time to the first answer: the
new segment tokenized and saved, the question scored with every node's statistics), then 100
documents (two batches of 50). After each add, the BM25 scores of 100 questions are compared
with those of a full rebuild (``BM25Route.build_from_chunks``, the index every question after
a write was waiting for before segments). Before the adds, a fresh process opens the store
(open time and resident memory before the first question, ``bench_scale.py``'s ``openonly``);
at the end its bytes a node are measured against the nodes' own (``fbbytes``). Writes the "BM25
segments" section of RESULTS.md and ``benchmarks/bm25_segments.json`` (the results of other
stores and of ``--route-only`` already there are kept). The store is modified (the added
documents stay). ``--single-adds K`` instead adds K documents one at a time, a question after
each (one timing on a shared machine swings with its load; K give a median).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_scale import SECTIONS_PER_DOC, child, fast_embedding, query_latencies, replicated_batches  # noqa: E402


def questions_over(n_docs: int, count: int = 100) -> List[str]:
    """``count`` questions naming documents spread over the collection, the last ones added too."""
    return [f"output current of NX-{(i * 7919) % n_docs:06d} section {i % 7}" for i in range(count)]


def compare(route: Any, full: Any, questions: List[str]) -> Dict[str, Any]:
    """The segmented route's BM25 scores against a full rebuild's, node by node."""
    position = {node_id: i for i, node_id in enumerate(route.node_ids)}
    order = np.array([position[node_id] for node_id in full.node_ids])
    worst_abs, worst_rel, bitwise, same_top = 0.0, 0.0, 0, 0
    for question in questions:
        ours = route.all_scores(question)[order]
        theirs = full.all_scores(question)
        diff = np.abs(ours.astype(np.float64) - theirs)
        worst_abs = max(worst_abs, float(diff.max(initial=0.0)))
        worst_rel = max(worst_rel, float((diff / np.maximum(np.abs(theirs), 1e-12)).max(initial=0.0)))
        bitwise += bool(np.array_equal(ours, theirs))
        same_top += list(route.top(question, 50)) == list(full.top(question, 50))
    dead = np.zeros(len(route.node_ids), dtype=bool) if getattr(route, "dead", None) is None else route.dead
    masked_scored = any(route.all_scores(q)[dead].any() for q in questions[:5])
    return {
        "questions": len(questions), "max_abs_diff": worst_abs, "max_rel_diff": worst_rel,
        "bitwise_equal": bitwise, "same_top50": same_top, "removed_scored": bool(masked_scored),
    }


def add_documents(pack: Any, first: int, count: int) -> float:
    """``count`` documents numbered from ``first`` through the pack's batch write; seconds in
    the writes (not in making the documents)."""
    seconds = 0.0
    for documents, nodes, _own in replicated_batches(count * SECTIONS_PER_DOC, first_document=first):
        start = time.perf_counter()
        pack._write_batch(documents, [], nodes)
        seconds += time.perf_counter() - start
    return seconds


def full_rebuild(store: Any) -> tuple:
    from llama_index_hiqa.retrievers.bm25_route import BM25Route

    start = time.perf_counter()
    route = BM25Route.build_from_chunks(store.iter_nodes())
    return route, time.perf_counter() - start


def run(store_path: Path, n_questions: int = 100, out: Optional[Dict[str, Any]] = None,
        checkpoint: Callable[[], None] = lambda: None) -> Dict[str, Any]:
    """The run on one store, its figures added to ``out`` as they come (``checkpoint()`` after
    each step saves them, so a run cut short keeps its first steps)."""
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack
    from llama_index_hiqa.retrievers.bm25_segments import SegmentedBM25Route
    from llama_index_hiqa.storage.backends.embedded_bm25 import open_bm25_route

    pack = HiQAPack.load(store_path, embed_model=fast_embedding())
    store = pack.store
    out = {} if out is None else out
    out["nodes_before"] = pack.node_count
    # The starting point: one base over the whole store (built or merged, saved).
    start = time.perf_counter()
    route = open_bm25_route(store)
    if isinstance(route, SegmentedBM25Route) and not route.exact_from_base:
        store.save_bm25(route.merged(), store.generation)
    out["base_s"] = time.perf_counter() - start
    out["open"] = child("openonly", "-", str(store_path))  # a fresh process, before any question
    print("open", json.dumps(out["open"]), flush=True)
    checkpoint()
    n_docs = len(pack.document_ids)
    pack._invalidate()
    out["p50_before"] = query_latencies(pack, questions_over(n_docs, 20))

    for label, count in (("add_1", 1), ("add_100", 100)):
        step: Dict[str, Any] = {"documents": count}
        before = pack.node_count
        step["write_s"] = add_documents(pack, n_docs, count)
        step["nodes"] = pack.node_count - before  # a title node and 50 sections a document
        n_docs += count
        questions = questions_over(n_docs, n_questions)
        start = time.perf_counter()
        pack.retrieve(questions[-1])
        step["first_answer_s"] = time.perf_counter() - start
        route = pack.multi_route.bm25_route
        step["segments"] = len(route.parts) - 1 if isinstance(route, SegmentedBM25Route) else 0
        step["latency_with_segments"] = query_latencies(pack, questions[:20])
        full, step["full_rebuild_s"] = full_rebuild(store)
        start = time.perf_counter()
        full.all_scores(questions[-1])
        step["full_rebuild_first_answer_s"] = step["full_rebuild_s"] + time.perf_counter() - start
        step["rankings"] = compare(route, full, questions)
        del full
        out[label] = step
        print(label, json.dumps(step), flush=True)
        checkpoint()

    start = time.perf_counter()
    pack.persist()  # saves nothing new, or merges when the merge policy says so
    out["persist_s"] = time.perf_counter() - start
    start = time.perf_counter()
    merged = pack.multi_route.bm25_route
    if isinstance(merged, SegmentedBM25Route) and not merged.exact_from_base:
        merged = merged.merged()
        store.save_bm25(merged, store.generation)
        pack = HiQAPack.load(store_path, embed_model=fast_embedding())  # routes over the merged base
    out["merge_s"] = time.perf_counter() - start
    out["latency_after_merge"] = query_latencies(pack, questions_over(n_docs, 20))
    out["nodes_after"] = pack.node_count
    print("after merge", out["merge_s"], json.dumps(out["latency_after_merge"]), flush=True)
    out["bytes"] = child("fbbytes", "-", str(store_path))  # a pass over every node: last
    return out


def run_single_adds(store_path: Path, adds: int) -> Dict[str, Any]:
    """``adds`` one-document adds in a row, each followed by a question: the first answer after
    each (one timing on a shared machine swings with its load; several give a median)."""
    import os

    from llama_index_hiqa.pack.hiqa_pack import HiQAPack

    pack = HiQAPack.load(store_path, embed_model=fast_embedding())
    n_docs = len(pack.document_ids)
    out: Dict[str, Any] = {"nodes_before": pack.node_count, "p50_before": query_latencies(pack, questions_over(n_docs, 20))}
    firsts, loads = [], []
    for _ in range(adds):
        add_documents(pack, n_docs, 1)
        n_docs += 1
        start = time.perf_counter()
        pack.retrieve(questions_over(n_docs, 100)[-1])  # names the document just added
        firsts.append(time.perf_counter() - start)
        loads.append(os.getloadavg()[0])
        print("single add", round(firsts[-1], 2), "load", loads[-1], flush=True)
    out.update(first_answer_s=firsts, load_average=loads, p50_after=query_latencies(pack, questions_over(n_docs, 20)))
    return out


def run_route_only(n_nodes: int, folder: Path, n_questions: int = 100) -> Dict[str, Any]:
    """The BM25 route alone at ``n_nodes``: the template documents' tokens copied with each
    document's number (what ``replicated_batches`` writes), a base saved and mapped back, then a
    segment of 1 document and one of 100 scored against one index over the same tokens."""
    import shutil

    from llama_index_hiqa.retrievers.bm25_route import corpus_tokenizer
    from llama_index_hiqa.retrievers.bm25_segments import Postings, SegmentedBM25Route

    templates = []
    for documents, nodes, _own in replicated_batches(20 * SECTIONS_PER_DOC):
        templates += corpus_tokenizer()(nodes)
    number = {f"{d:06d}" for d in range(20)}

    def tokens(first: int, count: int):
        for start in range(first, first + count, 5000):
            end = min(first + count, start + 5000)
            docs = [
                [f"{i // SECTIONS_PER_DOC:06d}" if t in number else t for t in templates[i % len(templates)]]
                for i in range(start, end)
            ]
            yield [f"n{i}" for i in range(start, end)], np.arange(start, end), docs

    out: Dict[str, Any] = {"nodes_before": n_nodes}
    start = time.perf_counter()
    base = SegmentedBM25Route.from_postings(Postings.from_tokens(tokens(0, n_nodes)))
    out["base_from_tokens_s"] = time.perf_counter() - start
    shutil.rmtree(folder, ignore_errors=True)
    base.persist(folder)
    del base
    start = time.perf_counter()
    base = SegmentedBM25Route.load_base(folder, mmap=True)
    out["base_load_s"] = time.perf_counter() - start
    questions = questions_over(n_nodes // SECTIONS_PER_DOC + 1, n_questions)
    out["base_p50_ms"] = _p50(base, questions[:20])
    for label, count in (("add_1", 1), ("add_100", 100)):
        step: Dict[str, Any] = {"documents": count, "nodes": count * SECTIONS_PER_DOC}
        start = time.perf_counter()
        segment = Postings.from_tokens(tokens(n_nodes, count * SECTIONS_PER_DOC))
        route = base.with_segments([segment])
        route.all_scores(questions[-1])
        step["segment_and_first_scores_s"] = time.perf_counter() - start
        step["p50_ms"] = _p50(route, questions[:20])
        start = time.perf_counter()
        full = SegmentedBM25Route.from_postings(Postings.from_tokens(tokens(0, n_nodes + count * SECTIONS_PER_DOC)))
        step["one_index_from_tokens_s"] = time.perf_counter() - start
        step["rankings"] = compare(route, full.base, questions)
        start = time.perf_counter()
        route.merged()
        step["merge_s"] = time.perf_counter() - start
        del full
        out[label] = step
        print(label, json.dumps(step), flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    return out


def _p50(route: Any, questions: List[str]) -> float:
    times = []
    for question in questions:
        route._last_scores = None
        start = time.perf_counter()
        route.all_scores(question)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def _rows(results: Dict[str, Any], cells: Any) -> List[str]:
    """A table row a run and add: size, what was added, ``cells(run, step)``, the rankings."""
    rows = []
    for r in results.values():
        for label in ("add_1", "add_100"):
            s, rk = r[label], r[label]["rankings"]
            rows.append(
                f"| {r['nodes_before']:,} | {s['documents']} doc ({s['nodes']:,} nodes) | {cells(r, s)} | "
                f"top-50 identical {rk['same_top50']}/{rk['questions']}, scores bit-equal "
                f"{rk['bitwise_equal']}/{rk['questions']}, max diff {rk['max_abs_diff']:.1e} |"
            )
    return rows


def _open_and_bytes(r: Dict[str, Any]) -> List[str]:
    """A fresh process opening the store before the adds, and its bytes a node, when measured."""
    lines = []
    opened, size = r.get("open") or {}, r.get("bytes") or {}
    if opened and "error" not in opened:
        lines.append(
            f"  A fresh process opens it in {opened['open_s']:.2f} s adding {opened['rss_added_mb']:.1f} MB "
            f"({opened['rss_added_mb'] * 1048576 / opened['nodes']:,.1f} bytes a node) before the first question "
            f"(the packaged MiniLM loaded first; target ≤ 0.5 s and ≤ 2,000 bytes a node)."
        )
    if size and "error" not in size:
        nodes = size["nodes"]
        lines.append(
            f"  On disk {size['bytes_per_node']:,.0f} bytes a node (SQLite {size['database_pages_bytes'] / nodes:,.0f}, "
            f"float32 vectors {size['vector_bytes_committed'] / nodes:,.0f}, BM25 {size['bm25'] / nodes:,.0f}) against "
            f"{size['own_bytes_per_node']:,.0f} of the nodes' own text and metadata; heading-path vectors "
            f"{size['heading_vector_rows']:,} rows ({size['by_table_per_node'].get('heading_vectors', 0):,.0f} bytes a node)."
        )
    return lines


def section(results: Dict[str, Any]) -> str:
    stores = {name: r for name, r in results.items() if name != "route_only" and not r.get("partial")}
    lines = [
        "A document added to an embedded store is tokenized into a small BM25 segment when the",
        "route is next opened; questions are scored with every live node's statistics (N, average",
        "length, document frequencies), so the scores are a full rebuild's. Before segments, the",
        "first question after any write rebuilt BM25 over the whole store (the \"full rebuild\" column).",
        "Synthetic datasheets fed store-side (`bench_scale.replicated_batches`, 51 nodes a document; the route-only rows 50).",
        "",
        "| store (nodes) | added | first answer after the add | full rebuild + answer | question p50 / p95 with segments | "
        "rankings vs full rebuild (100 questions) |",
        "|---|---|---|---|---|---|",
    ]
    lines += _rows(stores, lambda r, s: (
        f"{s['first_answer_s']:.2f} s | {s['full_rebuild_first_answer_s']:.1f} s | "
        f"{s['latency_with_segments']['p50_ms']:.0f} / {s['latency_with_segments']['p95_ms']:.0f} ms"
    ))
    lines.append("")
    for r in stores.values():
        lines.append(
            f"- {r['nodes_before']:,} nodes: p50 {r['p50_before']['p50_ms']:.0f} ms before the adds, "
            f"{r['latency_after_merge']['p50_ms']:.0f} ms after the merge; `persist()` after the adds "
            f"{r['persist_s']:.1f} s (it merges when the policy says so), reopening or merging what was left "
            f"{r['merge_s']:.1f} s (no tokenizing: term frequencies are kept)."
        )
        lines += _open_and_bytes(r)
        single = r.get("single_adds")
        if single:
            firsts = single["first_answer_s"]
            lines.append(
                f"  `--single-adds {len(firsts)}` (one document at a time, a question after each, in a fresh process "
                f"on the store above): first answer median {float(np.median(firsts)):.2f} s, max {max(firsts):.2f} s "
                f"(each: {', '.join(f'{x:.1f}' for x in firsts)} s); question p50 {single['p50_before']['p50_ms']:.0f} ms "
                f"before, {single['p50_after']['p50_ms']:.0f} ms after; load average {min(single['load_average']):.1f}–"
                f"{max(single['load_average']):.1f}."
            )
    route_only = results.get("route_only") or {}
    if route_only:
        lines += [
            "",
            "The BM25 route alone (`--route-only N`: the same documents' tokens, no store), at sizes",
            "the store-side build would take hours to reach on this shared machine:",
            "",
            "| nodes | added | segment + first scores | one index from tokens | base: build from tokens / map from disk "
            "| BM25 p50 base → with segments | merge | rankings vs one index (100 questions) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += _rows(route_only, lambda r, s: (
            f"{s['segment_and_first_scores_s']:.2f} s | {s['one_index_from_tokens_s']:.0f} s | "
            f"{r['base_from_tokens_s']:.0f} s / {r['base_load_s']:.2f} s | "
            f"{r['base_p50_ms']:.0f} → {s['p50_ms']:.0f} ms | {s['merge_s']:.1f} s"
        ))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("stores", nargs="*")
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--route-only", type=int, nargs="*", default=[], help="sizes of the BM25-route-only run")
    parser.add_argument("--route-dir", default="/tmp/bm25_route_only", help="where the route-only base is written")
    parser.add_argument("--result-file", default=str(ROOT / "benchmarks" / "bm25_segments.json"))
    parser.add_argument("--section-only", action="store_true", help="rewrite RESULTS.md from the JSON file")
    parser.add_argument("--single-adds", type=int, default=0,
                        help="instead of the full run: this many one-document adds in a row on each store, timed")
    args = parser.parse_args()
    path = Path(args.result_file)
    results = json.loads(path.read_text()) if path.exists() else {}
    if not args.section_only:
        for store in args.stores if args.single_adds else []:
            results.setdefault(Path(store).name, {})["single_adds"] = run_single_adds(Path(store), args.single_adds)
            path.write_text(json.dumps(results, indent=1))
        for store in args.stores if not args.single_adds else []:
            out = results[Path(store).name] = {"partial": True}
            run(Path(store), args.questions, out, lambda: path.write_text(json.dumps(results, indent=1)))
            del out["partial"]
            path.write_text(json.dumps(results, indent=1))
        for n in args.route_only:
            results.setdefault("route_only", {})[str(n)] = run_route_only(n, Path(args.route_dir), args.questions)
            path.write_text(json.dumps(results, indent=1))
    from _results import write_section

    write_section("bm25-segments", "BM25 segments: documents added to a large store", section(results))


if __name__ == "__main__":
    main()
