"""Does segment extraction put the whole evidence in the context, at the same size?

Question: at an equal context budget in characters, how often is the *whole* gold evidence
in the context the LLM gets — top-k chunks (what a LlamaIndex user has today: the same
candidates, best first, until the budget is spent) versus SegmentIntegrationPostprocessor's
segments? And how long does segment selection take for 100, 1,000 and 10,000 candidates,
next to the reference's exhaustive search?

Data (``../shared/data``; skipped with a message when absent):

* FinanceBench, 86 questions over all 46 filings: the baseline chunks
  (``SentenceSplitter(256, 32)`` per page, 23,685 chunks, positions consecutive per filing);
  gold = every chunk on the gold (filing, page); "whole evidence" = all of them in context.
* HotpotQA, 100 questions: chunk = sentence, document = passage (994 passages, ~4 sentences
  each); gold = the supporting-fact sentences; "whole evidence" = all of them in context.

Candidates: the top 50 chunks of one retriever over the whole corpus — exact cosine with the
packaged MiniLM when at most 5,000 chunk vectors are missing from the shared cache
(``--retriever vector``), else ``BM25Retriever`` (``--retriever bm25``; no embedding cost). Relevance = the incoming scores
(the pack's offline default). For each question the top-k context is filled, best first,
until it holds at least as many characters as that question's segments (so top-k never gets
less room than the segments).

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/bench_segment_integration.py``
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _common  # noqa: E402
from benchmarks._results import markdown_table, write_section  # noqa: E402

import numpy as np  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode  # noqa: E402
from llama_index.core.storage.docstore import SimpleDocumentStore  # noqa: E402

from llama_index_hiqa import schema  # noqa: E402
from llama_index_hiqa.page_geometry import pages_for_span  # noqa: E402
import shared_data as datasets  # noqa: E402
from llama_index_hiqa.postprocessors.segment_integration import SegmentIntegrationPostprocessor  # noqa: E402
from llama_index_hiqa.postprocessors.segment_selection import select_segments  # noqa: E402

HERE = Path(__file__).resolve().parent
FIGURE = HERE / "segment_integration.png"
CANDIDATES = 50
COMMAND = ".venv/bin/python benchmarks/bench_segment_integration.py"


# --- selection time --------------------------------------------------------------------


def _synthetic_values(n: int, dense: bool, seed: int = 0, penalty: float = 0.18, decay: float = 30.0):
    """A meta-document of ``n`` candidates in documents of 40 chunks.

    sparse (what RSE sees after a retriever): half the chunks not retrieved, Beta(0.4, 0.4)
    relevance decayed by rank, so only the top few hundred ranks are worth anything;
    dense (worst case for the search): every chunk retrieved, relevance uniform, no decay,
    so most chunks are positive and every start has many admissible ends.
    """
    rng = np.random.default_rng(seed)
    if dense:
        values = rng.random(n) - penalty
    else:
        ranks = rng.permutation(n)
        values = np.exp(-ranks / decay) * rng.beta(0.4, 0.4, size=n) - penalty
        values[rng.random(n) < 0.5] = -penalty  # not retrieved
    run_ids = np.arange(n) // 40
    return values.tolist(), run_ids.tolist()


def _exhaustive(values, run_ids, max_length, overall, minimum):
    """The reference's search: every (start, end) against every chosen segment, each round."""
    chosen: List[Tuple[int, int, float]] = []
    total, n = 0, len(values)
    while total < overall:
        best = None
        for s in range(n):
            if values[s] < 0:
                continue
            for e in range(s + 1, min(s + max_length, n) + 1):
                if values[e - 1] < 0 or run_ids[s] != run_ids[e - 1] or total + e - s > overall:
                    continue
                if any(s < ce and cs < e for cs, ce, _ in chosen):
                    continue
                value = sum(values[s:e])
                if best is None or value > best[2]:
                    best = (s, e, value)
        if best is None or best[2] < minimum:
            break
        chosen.append(best)
        total += best[1] - best[0]
    return chosen


def _timeit(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _postprocess_input(n: int, seed: int = 0) -> List[NodeWithScore]:
    rng = random.Random(seed)
    hits = []
    for i in range(n):
        node = TextNode(text="x" * 900, id_=f"n{i}")
        schema.set_segment_facts(node, document_id=f"d{i // 40}", document_title="D", position=i % 40)
        hits.append(NodeWithScore(node=node, score=rng.random()))
    return hits


def bench_selection() -> str:
    rows = []
    for preset, (max_length, overall, minimum) in {
        "balanced": (15, 30, 0.5),
        "find_all": (40, 200, 0.4),
    }.items():
        for dense in (False, True):
            for n in (100, 1000, 10000):
                values, runs = _synthetic_values(n, dense)
                fast = _timeit(lambda: select_segments(values, runs, max_length, overall, minimum), 5)
                if n <= 1000 or not dense:
                    start = time.perf_counter()
                    reference = _exhaustive(values, runs, max_length, overall, minimum)
                    slow = time.perf_counter() - start
                    # Same spans (values may differ in the last bit: other summation order).
                    same = str([(s, e) for s, e, _ in reference] == [
                        (s, e) for s, e, _ in select_segments(values, runs, max_length, overall, minimum)
                    ])
                    ref, speedup = f"{slow * 1000:,.1f} ms", f"{slow / fast:,.0f}x"
                else:
                    ref, speedup, same = "not run (too slow)", "-", "-"
                row = [preset, "dense" if dense else "sparse", n, f"{fast * 1000:.2f} ms", ref, speedup, same]
                if not dense:
                    rse = SegmentIntegrationPostprocessor(preset=preset)
                    hits = _postprocess_input(n)
                    whole = _timeit(lambda: rse.postprocess_nodes(hits, QueryBundle("q")), 3)
                    row.append(f"{whole * 1000:.1f} ms")
                else:
                    row.append("")
                rows.append(row)
                print(row, flush=True)
    return markdown_table(
        [
            "preset",
            "values",
            "candidates",
            "select_segments",
            "exhaustive reference",
            "speed-up",
            "same segments",
            "whole postprocess_nodes",
        ],
        rows,
    )


# --- quality at equal budget --------------------------------------------------------------


def _auto_retriever(nodes: Sequence[TextNode], max_new: int = 5000) -> str:
    """vector when at most ``max_new`` chunk vectors are missing from the shared cache."""
    from llama_index.core.schema import MetadataMode

    from llama_index_hiqa.models.embedding_cache import content_hash

    model = _common.embed_model()
    keys = [content_hash(model.model_id, "text", n.get_content(MetadataMode.EMBED)) for n in nodes]
    found = len(model._lookup(keys))
    print(f"{found}/{len(keys)} chunk vectors cached", flush=True)
    return "vector" if len(keys) - found <= max_new else "bm25"


def _retrieve(nodes: List[TextNode], questions: List[str], retriever: str) -> List[List[NodeWithScore]]:
    if retriever == "vector":
        matrix = _common.embed_nodes(nodes)
        queries = _common.embed_queries(questions)
        out = []
        for q in queries:
            scores = matrix @ q
            top = np.argsort(-scores)[:CANDIDATES]
            out.append([NodeWithScore(node=nodes[i], score=float(scores[i])) for i in top])
        return out
    from llama_index.retrievers.bm25 import BM25Retriever

    bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=CANDIDATES)
    return [bm25.retrieve(q) for q in questions]


def _neighbour_context(
    hits: List[NodeWithScore], budget: int, by_position: Dict[Tuple[str, int], str], length: Dict[str, int]
) -> set:
    """PrevNextNodePostprocessor's idea: each hit with its previous and next chunk, best first."""
    ids: set = set()
    used = 0
    for hit in hits:
        if used >= budget:
            break
        doc, pos = hit.node.metadata[schema.DOCUMENT_ID], hit.node.metadata[schema.POSITION]
        for p in (pos - 1, pos, pos + 1):
            node_id = by_position.get((doc, p))
            if node_id and node_id not in ids and used < budget:
                ids.add(node_id)
                used += length[node_id]
    return ids


def _topk_context(hits: List[NodeWithScore], budget: int) -> List[str]:
    ids, used = [], 0
    for hit in hits:
        if used >= budget:
            break
        ids.append(hit.node.node_id)
        used += len(hit.node.get_content())
    return ids


def _evaluate(
    name: str,
    nodes: List[TextNode],
    questions: List[Tuple[str, List[set]]],
    retriever: str,
) -> Dict[str, Dict[str, float]]:
    """``questions``: (text, gold groups); a group is the set of chunk ids of one gold unit."""
    docstore = SimpleDocumentStore()
    docstore.add_documents(nodes, allow_update=True)
    length = {n.node_id: len(n.get_content()) for n in nodes}
    by_position = {(n.metadata[schema.DOCUMENT_ID], n.metadata[schema.POSITION]): n.node_id for n in nodes}
    t0 = time.perf_counter()
    candidates = _retrieve(nodes, [q for q, _ in questions], retriever)
    print(f"{name}: retrieved in {time.perf_counter() - t0:.1f}s", flush=True)

    variants = {
        "balanced": SegmentIntegrationPostprocessor(preset="balanced", docstore=docstore),
        "precision": SegmentIntegrationPostprocessor(preset="precision", docstore=docstore),
        "find_all": SegmentIntegrationPostprocessor(preset="find_all", docstore=docstore),
    }
    results: Dict[str, Dict[str, float]] = {}
    curve: List[Tuple[float, float]] = []
    for k in (1, 2, 3, 5, 8, 12, 20, 30, 50):
        whole, chars = [], []
        for (q, gold), hits in zip(questions, candidates):
            ids = {h.node.node_id for h in hits[:k]}
            whole.append(all(g <= ids for g in gold))
            chars.append(sum(length[i] for i in ids))
        curve.append((float(np.mean(chars)), float(np.mean(whole))))
    for label, rse in variants.items():
        seg_whole, seg_touch, top_whole, top_touch, seg_chars, top_chars, n_segs = ([] for _ in range(7))
        nb_whole, nb_chars = [], []
        for (q, gold), hits in zip(questions, candidates):
            segments = rse.postprocess_nodes(list(hits), QueryBundle(q))
            ids = {i for s in segments for i in s.node.metadata[schema.SEGMENT_NODE_IDS]}
            budget = sum(len(s.node.get_content()) for s in segments)
            top_ids = set(_topk_context(hits, budget))
            seg_whole.append(all(g <= ids for g in gold))
            seg_touch.append(all(g & ids for g in gold))
            top_whole.append(all(g <= top_ids for g in gold))
            top_touch.append(all(g & top_ids for g in gold))
            seg_chars.append(budget)
            top_chars.append(sum(length[i] for i in top_ids))
            nb_ids = _neighbour_context(hits, budget, by_position, length)
            nb_whole.append(all(g <= nb_ids for g in gold))
            nb_chars.append(sum(length[i] for i in nb_ids))
            n_segs.append(len(segments))
        results[label] = {
            "seg_whole": float(np.mean(seg_whole)),
            "top_whole": float(np.mean(top_whole)),
            "seg_touch": float(np.mean(seg_touch)),
            "top_touch": float(np.mean(top_touch)),
            "seg_chars": float(np.mean(seg_chars)),
            "top_chars": float(np.mean(top_chars)),
            "nb_whole": float(np.mean(nb_whole)),
            "nb_chars": float(np.mean(nb_chars)),
            "segments": float(np.mean(n_segs)),
        }
        print(name, label, results[label], flush=True)
    results["_curve"] = curve  # type: ignore[assignment]
    return results


def financebench_setup():
    pages = datasets.load_financebench_pages()
    nodes = _common.baseline_page_chunks(pages)
    on_page: Dict[Tuple[str, int], set] = defaultdict(set)
    for n in nodes:
        on_page[(n.metadata[schema.DOCUMENT_ID], n.metadata[schema.PAGE_START])].add(n.node_id)
    questions = []
    for q in datasets.load_financebench_questions():
        gold = [on_page[(g.document_id, g.page)] for g in q.gold if on_page.get((g.document_id, g.page))]
        if gold:
            questions.append((q.question, gold))
    return nodes, questions


def hotpotqa_setup():
    nodes, by_passage = [], {}
    for row in datasets.read_jsonl(datasets.multihop_dir() / "hotpotqa_corpus.jsonl"):
        ids = []
        for position, sentence in enumerate(row.get("sentences") or [row["text"]]):
            node = TextNode(text=sentence, id_=f"{row['id']}:s{position}")
            schema.set_segment_facts(
                node, document_id=row["id"], document_title=row["title"], position=position
            )
            nodes.append(node)
            ids.append(node.node_id)
        by_passage[row["id"]] = ids
    known = {i for ids in by_passage.values() for i in ids}
    questions = []
    for row in datasets.read_jsonl(datasets.multihop_dir() / "hotpotqa_questions.jsonl"):
        gold = [{f"{f['passage_id']}:s{f['sent_idx']}"} for f in row["supporting_facts"]]
        gold = [g for g in gold if g <= known]  # a few facts point past the stored sentences
        if gold:
            questions.append((row["question"], gold))
    return nodes, questions


def demo_setup():
    """The demo datasheets (examples/data), read by PDFLayoutReader and cut like the baseline."""
    questions_file = _common.DEMO_DIR / "questions.jsonl"
    if not questions_file.exists():
        print(f"SKIP demo corpus: {questions_file} not found")
        return None
    from llama_index.core.node_parser import SentenceSplitter

    from llama_index_hiqa import PDFLayoutReader

    reader = PDFLayoutReader()
    documents = []
    for path in sorted(_common.DEMO_DIR.iterdir()):
        if path.suffix.lower() in (".pdf", ".md", ".txt"):
            documents.extend(reader.load_data(path))
    splitter = SentenceSplitter(
        chunk_size=_common.BASELINE_CHUNK_SIZE, chunk_overlap=_common.BASELINE_CHUNK_OVERLAP
    )
    nodes: List[TextNode] = []
    for document in documents:
        doc_id = document.metadata.get(schema.DOCUMENT_ID) or document.doc_id
        spans = schema.page_spans_of(document.metadata)
        for position, node in enumerate(splitter.get_nodes_from_documents([document])):
            pages = None
            if node.start_char_idx is not None and spans:
                pages = pages_for_span(spans, node.start_char_idx, node.end_char_idx)
            schema.set_segment_facts(
                node,
                document_id=doc_id,
                document_title=schema.get_document_title(document) or doc_id,
                position=position,
                page_range=pages,
            )
            nodes.append(node)
    questions = []
    for q in datasets.load_questions_jsonl(questions_file):
        gold = []
        for g in q.gold:
            ids = {
                n.node_id
                for n in nodes
                if n.metadata[schema.DOCUMENT_ID] == g.document_id
                and (g.page is None or schema.get_page_range(n) is None
                     or schema.get_page_range(n)[0] <= g.page <= schema.get_page_range(n)[1])
            }
            if ids:
                gold.append(ids)
        if gold:
            questions.append((q.question, gold))
    return nodes, questions


def _quality_table(name: str, res: Dict[str, Dict[str, float]]) -> str:
    rows = []
    for label, r in res.items():
        if label.startswith("_"):
            continue
        rows.append(
            [
                label,
                f"{r['seg_chars']:,.0f} / {r['top_chars']:,.0f} / {r['nb_chars']:,.0f}",
                f"{r['segments']:.1f}",
                r["top_whole"],
                r["nb_whole"],
                r["seg_whole"],
                r["top_touch"],
                r["seg_touch"],
            ]
        )
    return f"**{name}**\n\n" + markdown_table(
        [
            "preset",
            "mean context chars (segments / top-k / top-k ± 1)",
            "segments per question",
            "whole evidence: top-k",
            "whole evidence: top-k ± 1 neighbour",
            "whole evidence: segments",
            "every gold unit touched: top-k",
            "every gold unit touched: segments",
        ],
        rows,
    )


def _figure(all_results: Dict[str, Dict[str, Dict[str, float]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401

    fig, axes = plt.subplots(1, len(all_results), figsize=(6 * len(all_results), 4.2), squeeze=False)
    for ax, (name, res) in zip(axes[0], all_results.items()):
        xs, ys = zip(*res["_curve"])
        ax.plot(xs, ys, "o-", color="grey", label="top-k chunks (k = 1 … 50)")
        for label, marker in (("precision", "s"), ("balanced", "D"), ("find_all", "^")):
            r = res[label]
            ax.plot(r["seg_chars"], r["seg_whole"], marker, markersize=9, label=f"segments ({label})")
            ax.plot(r["top_chars"], r["top_whole"], marker, markersize=9, mfc="none", color="grey")
            ax.plot(r["nb_chars"], r["nb_whole"], marker, markersize=9, mfc="none", color="black", alpha=0.6)
        ax.plot([], [], "o", mfc="none", color="grey", label="top-k at each preset's size")
        ax.plot([], [], "o", mfc="none", color="black", alpha=0.6, label="top-k ± 1 neighbour, same size")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("mean context size (characters)")
        ax.set_ylabel("questions with the whole gold evidence in context")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(FIGURE, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retriever", choices=["auto", "vector", "bm25"], default="auto")
    parser.add_argument(
        "--skip-quality", action="store_true", help="only time the selection; write nothing"
    )
    args = parser.parse_args()

    timing_table = bench_selection()
    sections = [
        "### Selection time\n\nSynthetic meta-documents in documents of 40 chunks. *sparse*: "
        "what RSE sees after a retriever (half the chunks not retrieved, Beta(0.4, 0.4) "
        "relevance decayed by rank); *dense*: the worst case (every chunk retrieved, uniform "
        "relevance, no decay). Median of 5 runs. `select_segments` is the "
        "prefix-sum + lazy-heap search; the reference is the exhaustive search (every start "
        "and end, checked against every chosen segment, every round). The last column is the "
        "whole `postprocess_nodes` on that many `NodeWithScore` (relevance, values, "
        "meta-document, segment nodes).\n\n" + timing_table
    ]

    figures: Dict[str, Dict[str, Dict[str, float]]] = {}
    if not args.skip_quality:
        setups = [("Demo datasheets (examples/data)", demo_setup)]
        if _common.require_shared_data("segment integration on FinanceBench and HotpotQA"):
            setups[:0] = [
                ("FinanceBench (86 q, 23,685 chunks)", financebench_setup),
                ("HotpotQA (100 q, sentences of 994 passages)", hotpotqa_setup),
            ]
        notes = []
        for name, setup in setups:
            try:
                loaded = setup()
            except ImportError as exc:  # the reader lands with the foundation issue
                print(f"SKIP {name}: {exc}")
                loaded = None
            if loaded is None:
                continue
            nodes, questions = loaded
            retriever = args.retriever
            if retriever == "auto":
                retriever = _auto_retriever(nodes)
            notes.append(f"{name}: candidates = top {CANDIDATES} of {retriever}")
            figures[name] = _evaluate(name, nodes, questions, retriever)
    if figures:
        _figure(figures)
        quality = "\n\n".join(_quality_table(n, r) for n, r in figures.items())
        sections.insert(
            0,
            "### Whole gold evidence in context, at equal context size\n\n"
            + "; ".join(notes)
            + ". Relevance = the incoming scores (offline default). For every question the "
            "top-k context gets at least as many characters as the segments (chunks best "
            "first until the segments' size is reached). *Whole evidence*: every chunk of "
            "every gold unit (FinanceBench: gold page; HotpotQA: supporting sentence) is in "
            "the context; *touched*: at least one chunk of each. *top-k ± 1 neighbour*: "
            "PrevNextNodePostprocessor's idea (each hit with its previous and next chunk, best "
            "first) at the same size.\n\n"
            + quality
            + f"\n\n![whole evidence vs context size]({FIGURE.name})",
        )
    if args.skip_quality:  # a quick look at the timings; RESULTS.md keeps the full run
        print(timing_table)
        return
    write_section(
        "segment_integration",
        "SegmentIntegrationPostprocessor (issue 8)",
        "\n\n".join(sections),
        command=COMMAND,
    )
    print("wrote benchmarks/RESULTS.md section 'segment_integration'")


if __name__ == "__main__":
    main()
