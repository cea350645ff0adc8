"""Does the heading cascade (HiQA HCA) move the gold segment up? (HiQA appendix C, Table 2)

For every question: the rank of its gold segment among *all* segments of the corpus by cosine
similarity (packaged all-MiniLM-L6-v2, exact cosine), and the cosine between the question and
its gold segment, for the paper's ablation variants:

* ``none``        "Original RAG": the segment text as a LlamaIndex user embeds it today
                  (``MarkdownNodeParser`` + the same embedding + top-k),
* ``own_heading`` "No Hierarchy": the segment's own heading only,
* ``cascade``     "HCA": document title > ancestor headings > own heading (the default).

Corpora: the demo datasheets (``examples/data``, when present), FinanceBench filings from
``../shared/data`` (segments = ``MarkdownNodeParser`` over each filing's pymupdf4llm Markdown;
gold = every segment on a gold page; document title "3M 2018 10-K"), and, with
``--multihop``, HotpotQA and MuSiQue passages with their Wikipedia title as document title.
FinanceBench is restricted by default to the companies with several filings and the most
questions (``--companies``), to keep the embedding work on a shared 2-core machine within
~25 CPU minutes; ``--companies all`` runs the 46 filings.

    .venv/bin/python benchmarks/bench_cascade.py [--companies all] [--multihop]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _common  # noqa: E402
from benchmarks._results import markdown_table, write_section  # noqa: E402

import numpy as np  # noqa: E402
from llama_index.core import Document  # noqa: E402
from llama_index.core.node_parser import MarkdownNodeParser  # noqa: E402
from llama_index.core.schema import MetadataMode, TextNode  # noqa: E402

from llama_index_hiqa import schema  # noqa: E402
from llama_index_hiqa.page_geometry import pages_for_span  # noqa: E402
import shared_data as datasets  # noqa: E402
from llama_index_hiqa.transforms.cascading_metadata import CascadingMetadataTransform  # noqa: E402
from llama_index_hiqa.evaluation.metrics import log_rank_score  # noqa: E402

VARIANTS = ("none", "own_heading", "cascade")
LABELS = {"none": "Original RAG (no metadata)", "own_heading": "No Hierarchy (own heading)",
          "cascade": "HCA cascade"}
COLORS = {"none": "tab:blue", "own_heading": "tab:orange", "cascade": "tab:green"}
DEFAULT_COMPANIES = ("Amcor", "Best Buy", "Johnson & Johnson", "Boeing")
PNG = Path(__file__).resolve().parent / "cascade_ranks.png"
DOC_TYPES = {"10k": "10-K", "10q": "10-Q", "8k": "8-K", "earnings": "Earnings Release"}


# --- corpora: segments + questions with the indices of their gold segments ---------------


class Corpus:
    def __init__(self, name: str, segments: List[TextNode], questions: List[str],
                 gold: List[List[int]], note: str) -> None:
        self.name, self.segments, self.questions, self.gold, self.note = (
            name, segments, questions, gold, note)


def filing_title(row: Dict) -> str:
    """"3M 2018 10-K", "Amcor 2023Q2 10-Q", "PepsiCo 2023 8-K dated 2023-05-05"."""
    parts = row["doc_name"].split("_")
    period = parts[1] if len(parts) > 1 else str(row.get("doc_period", ""))
    title = f"{row['company']} {period} {DOC_TYPES.get(str(row['doc_type']).lower(), row['doc_type'])}"
    dated = re.search(r"dated-(\d{4}-\d{2}-\d{2})", row["doc_name"])
    return title + (f" dated {dated.group(1)}" if dated else "")


def segments_with_pages(doc_name: str, title: str, pages: List[Dict]) -> List[TextNode]:
    """MarkdownNodeParser over one filing; each segment learns the pages it lies on."""
    pages = sorted(pages, key=lambda p: p["page"])
    text, spans, offset = [], [], 0
    for page in pages:
        spans.append((page["page"], offset, offset + len(page["text"])))
        text.append(page["text"])
        offset += len(page["text"]) + 2
    full = "\n\n".join(text)
    nodes = MarkdownNodeParser()([Document(text=full, id_=doc_name)])
    cursor, out = 0, []
    for position, node in enumerate(nodes):
        probe = node.text[:200]
        start = full.find(probe, cursor)
        if start < 0:  # the parser rebuilt the heading line: look for the body instead
            start = full.find(node.text.split("\n", 1)[-1][:200], cursor)
        start = max(start, cursor)
        end = start + len(node.text)
        cursor = start
        schema.set_segment_facts(
            node, document_id=doc_name, document_title=title, position=position,
            page_range=pages_for_span(spans, start, end), parse_path="markdown",
        )
        out.append(node)
    return out


def financebench(companies: Optional[Sequence[str]]) -> Optional[Corpus]:
    if _common.require_shared_data("FinanceBench") is None:
        return None
    rows = {r["doc_name"]: r for r in datasets.load_financebench_documents()}
    keep = {d for d, r in rows.items() if companies is None or r["company"] in companies}
    by_doc: Dict[str, List[Dict]] = collections.defaultdict(list)
    for page in datasets.load_financebench_pages(markdown=True):
        if page["doc_name"] in keep:
            by_doc[page["doc_name"]].append(page)
    segments: List[TextNode] = []
    for doc_name in sorted(by_doc):
        segments += segments_with_pages(doc_name, filing_title(rows[doc_name]), by_doc[doc_name])
    on_page: Dict[Tuple[str, int], List[int]] = collections.defaultdict(list)
    for index, node in enumerate(segments):
        first, last = schema.get_page_range(node) or (-1, -2)
        for page in range(first, last + 1):
            on_page[(schema.get_document_id(node), page)].append(index)
    questions, gold = [], []
    for q in datasets.load_financebench_questions():
        if not all(g.document_id in keep for g in q.gold):
            continue
        hits = sorted({i for g in q.gold for i in on_page.get((g.document_id, g.page), [])})
        if hits:
            questions.append(q.question)
            gold.append(hits)
    scope = "all 46 filings" if companies is None else (
        f"the {len(by_doc)} filings of {', '.join(companies)}")
    note = (f"FinanceBench, {scope}: {len(segments):,} MarkdownNodeParser segments, "
            f"{len(questions)} questions (gold = every segment on a gold page)")
    return Corpus("FinanceBench", segments, questions, gold, note)


def demo() -> Optional[Corpus]:
    folder = _common.DEMO_DIR
    questions_file = folder / "questions.jsonl"
    if not questions_file.exists():
        print(f"SKIP demo corpus: {questions_file} not found (lands with issue 2)")
        return None
    # The datasheets are PDFs: read and segment them with the pack's own no-LLM path, so every
    # segment carries its numbered heading path (schema.HEADING_PATH).
    from llama_index_hiqa import LayoutMarkdownParser, PDFLayoutReader

    documents = PDFLayoutReader().load_data(sorted(folder.glob("*.pdf")))
    segments: List[TextNode] = [
        node for node in LayoutMarkdownParser()(documents)
        if node.text.strip().lstrip("#").strip() and "\n" in node.text.strip()  # heading-only nodes hold no answer
    ]
    if not segments:
        print(f"SKIP demo corpus: no PDF files in {folder}")
        return None
    questions, gold = [], []
    for q in datasets.load_questions_jsonl(questions_file):
        hits = []
        for g in q.gold:
            for i, node in enumerate(segments):
                if schema.get_document_id(node) != g.document_id:
                    continue
                labels = [h.label() for h in schema.get_heading_path(node)]
                if g.section and _norm(g.section) not in [_norm(label) for label in labels]:
                    continue
                hits.append(i)
        if hits:
            questions.append(q.question)
            gold.append(sorted(set(hits)))
    note = f"demo datasheets: {len(segments)} segments, {len(questions)} questions"
    return Corpus("demo datasheets", segments, questions, gold, note)


def multihop(name: str, label: str) -> Optional[Corpus]:
    if _common.require_shared_data(label) is None:
        return None
    passages = datasets.load_multihop_corpus(name)
    segments, index = [], {}
    for position, row in enumerate(passages):
        node = TextNode(text=row["text"], id_=row["id"])
        schema.set_segment_facts(node, document_id=row["id"], document_title=row["title"],
                                 position=0, parse_path="text")
        index[row["id"]] = position
        segments.append(node)
    questions, gold = [], []
    for q in datasets.load_multihop_questions(name):
        hits = [index[g.passage_id] for g in q.gold if g.passage_id in index]
        if hits:
            questions.append(q.question)
            gold.append(hits)
    note = (f"{label} (HippoRAG corpus): {len(segments):,} passages, {len(questions)} questions; "
            "cascade = the passage's Wikipedia title; rank of the best-ranked gold passage")
    return Corpus(label, segments, questions, gold, note)


def _norm(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", " ", text.lower()).strip()


# --- measurement -------------------------------------------------------------------------


def measure(corpus: Corpus, variant: str) -> Dict:
    nodes = [n.model_copy(deep=True) for n in corpus.segments]
    nodes = CascadingMetadataTransform(variant=variant)(nodes)
    start = time.perf_counter()
    matrix = _common.embed_nodes(nodes, show_progress=True)
    seconds = time.perf_counter() - start
    queries = _common.embed_queries(corpus.questions)
    sims = queries @ matrix.T
    docs = [schema.get_document_id(n) for n in nodes]
    ranks, cosines, doc_hits = [], [], []
    n = len(nodes)
    for row, gold in zip(sims, corpus.gold):
        order = np.argsort(-row)
        position = np.empty(n, dtype=np.int64)
        position[order] = np.arange(1, n + 1)
        ranks.append(int(position[gold].min()))
        cosines.append(float(row[gold].max()))
        doc_hits.append(docs[order[0]] in {docs[g] for g in gold})
    tables = sum(1 for node in nodes if node.metadata.get(schema.SEGMENT_KIND) == schema.KIND_TABLE)
    return {"ranks": ranks, "cosines": cosines, "doc_hits": doc_hits, "n": n,
            "embed_seconds": seconds, "tables": tables}


def summary_row(label: str, result: Dict) -> List:
    ranks = np.asarray(result["ranks"])
    n = result["n"]
    return [
        label,
        float(np.mean(ranks)),
        float(np.median(ranks)),
        float(np.mean(ranks <= 1)),
        float(np.mean(ranks <= 5)),
        float(np.mean(ranks <= 20)),
        float(np.mean(1.0 / ranks)),
        float(np.mean(log_rank_score([int(r) for r in ranks], n))),
        float(np.mean(result["doc_hits"])),
        float(np.mean(result["cosines"])),
    ]


HEADERS = ["variant", "mean rank", "median rank", "hit@1", "hit@5", "hit@20", "MRR",
           "Log-Rank (γ=1)", "top-1 right document", "mean cos(question, gold)"]


def plot(results: Dict[str, Dict[str, Dict]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4.2), squeeze=False)
    for ax, (name, by_variant) in zip(axes[0], results.items()):
        for variant, result in by_variant.items():
            ranks = np.sort(np.asarray(result["ranks"]))
            ax.step(ranks, np.arange(1, len(ranks) + 1) / len(ranks), where="post",
                    color=COLORS[variant],
                    label=f"{LABELS[variant]} (median {np.median(ranks):.0f})")
        ax.set_xscale("log")
        ax.set_xlabel(f"rank of the gold segment among {next(iter(by_variant.values()))['n']:,}")
        ax.set_ylabel("share of questions, gold at rank ≤ x")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("HiQA HCA: rank of the gold segment (exact cosine, MiniLM)", fontsize=10)
    fig.tight_layout()
    fig.savefig(PNG, dpi=110)
    print(f"wrote {PNG}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--companies", default=",".join(DEFAULT_COMPANIES),
                        help="FinanceBench companies, comma separated, or 'all'")
    parser.add_argument("--multihop", action="store_true", help="also HotpotQA and MuSiQue passages")
    args = parser.parse_args()
    companies = None if args.companies == "all" else [c.strip() for c in args.companies.split(",")]

    extra = [multihop("hotpotqa", "HotpotQA"), multihop("musique", "MuSiQue")] if args.multihop else []
    corpora = [c for c in (demo(), financebench(companies), *extra) if c]
    if not corpora:
        print("SKIP: no corpus available")
        return
    results: Dict[str, Dict[str, Dict]] = {}
    body = [
        "Rank of each question's gold segment among all segments by exact cosine "
        "(packaged all-MiniLM-L6-v2, cached), per HiQA ablation variant of "
        "`CascadingMetadataTransform`; the segments are LlamaIndex `MarkdownNodeParser` "
        "output, so `none` is what a LlamaIndex user embeds today. Lower ranks are better; "
        "hit@k = gold in the top k; top-1 right document = the best segment comes from a "
        "gold filing/datasheet/passage. `own_heading` differs from `none` only for "
        "table segments and segments without a heading line: a MarkdownNodeParser segment's "
        "text already opens with its own heading (which HCA does not embed twice).",
    ]
    for corpus in corpora:
        print(corpus.note)
        results[corpus.name] = {}
        for variant in VARIANTS:
            if corpus.name in ("HotpotQA", "MuSiQue") and variant == "own_heading":
                continue  # passages have no headings: identical to 'none'
            results[corpus.name][variant] = measure(corpus, variant)
            print(corpus.name, variant, json.dumps(
                dict(zip(HEADERS, summary_row(variant, results[corpus.name][variant]))), default=str))
        rows = [summary_row(LABELS[v], r) for v, r in results[corpus.name].items()]
        tables = results[corpus.name].get("cascade", {}).get("tables", 0)
        table_note = (f"; {tables} segments are whole Markdown tables, embedded by their "
                      "labels (appendix A.4)") if tables else ""
        body.append(f"\n### {corpus.name}\n\n{corpus.note}{table_note}.\n\n"
                    + markdown_table(HEADERS, rows))
        base = results[corpus.name]["none"]
        hca = results[corpus.name]["cascade"]
        better = sum(h < b for h, b in zip(hca["ranks"], base["ranks"]))
        worse = sum(h > b for h, b in zip(hca["ranks"], base["ranks"]))
        body.append(f"\nHCA moved the gold segment up for {better} and down for {worse} of "
                    f"{len(base['ranks'])} questions.")
    plot(results)
    body.append(f"\n![rank distributions]({PNG.name})")
    command = ".venv/bin/python benchmarks/bench_cascade.py" + (
        "" if args.companies == ",".join(DEFAULT_COMPANIES) else f" --companies '{args.companies}'"
    ) + (" --multihop" if args.multihop else "")
    write_section("cascade", "HCA cascade: rank of the gold segment (bench_cascade.py)",
                  "\n".join(body), command=command)
    print("wrote benchmarks/RESULTS.md section 'cascade'")


if __name__ == "__main__":
    main()
