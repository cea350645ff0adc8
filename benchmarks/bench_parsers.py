"""Benchmark the HiQA segment parsers (issue 3).

Questions answered, each side by side with what a LlamaIndex user has today
(``MarkdownNodeParser`` / ``SentenceSplitter`` on the same Markdown):

1. Heading recovery of ``LayoutMarkdownParser`` on real filings: FinanceBench 10-Ks
   (pymupdf4llm Markdown from ``../shared/data``), recall of the 19 Items every 10-K must
   have and precision of the Item headings emitted (a valid Item, first occurrence).
2. Heading recovery on the demo corpus (``examples/data``, known structure), when present.
3. Pages per second of the layout parser on this machine, against MarkdownNodeParser and
   SentenceSplitter in the same run.
4. LLM calls and tokens per 100 pages of ``MarkdownFormatterParser``, counted with the
   scripted fake LLM (echoing the window with numbered headings) for several window sizes.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/bench_parsers.py`` (writes the "parsers"
section of benchmarks/RESULTS.md and benchmarks/parsers.png).
"""

from __future__ import annotations

import gzip
import json
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Tuple

from llama_index.core.node_parser import MarkdownNodeParser, SentenceSplitter
from llama_index.core.schema import Document

from llama_index_hiqa import schema
from shared_data import shared_data_dir
from llama_index_hiqa.headings import clean_inline, parse_heading_number
from llama_index_hiqa.parsers.layout_markdown import LayoutMarkdownParser
from llama_index_hiqa.parsers.markdown_formatter import MarkdownFormatterParser, window_from_prompt
from llama_index_hiqa.testing import ScriptedLLM

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _results import write_section  # noqa: E402

# Items every 10-K has had throughout FinanceBench's years (1C, 6, 9C, 16 vary by year).
REQUIRED_ITEMS = ["1", "1A", "1B", "2", "3", "4", "5", "7", "7A", "8", "9", "9A", "9B",
                  "10", "11", "12", "13", "14", "15"]
VALID_ITEMS = set(REQUIRED_ITEMS) | {"1C", "6", "9C", "16"}
DEMO_CHAPTERS = {
    ("1", "features", 1), ("2", "applications", 1), ("3", "description", 1),
    ("4", "specifications", 1), ("4.1", "absolute maximum ratings", 2),
    ("4.2", "electrical characteristics", 2), ("5", "pin configuration", 1),
    ("6", "ordering information", 1),
}
_ITEM_TEXT = re.compile(r"^item\s+(\d{1,2}[A-Z]?)\b", re.I)


def financebench_documents() -> Tuple[List[Document], Dict[str, str]]:
    """One Document per filing, built as PDFLayoutReader builds it from pymupdf4llm pages."""
    base = shared_data_dir() / "financebench"
    kinds = {}
    for line in (base / "documents.jsonl").read_text().splitlines():
        row = json.loads(line)
        kinds[row["doc_name"]] = row["doc_type"]
    pages = defaultdict(list)
    with gzip.open(base / "pages_markdown.jsonl.gz", "rt") as handle:
        for line in handle:
            row = json.loads(line)
            pages[row["doc_name"]].append(row)
    docs = []
    for name in sorted(pages):
        text, spans = "", []
        for row in sorted(pages[name], key=lambda r: r["page"]):
            if text:
                text += "\n\n"
            start = len(text)
            text += row["markdown"]
            spans.append([row["page"], start, len(text)])
        doc = Document(
            text=text, id_=name,
            metadata={schema.DOCUMENT_ID: name, schema.DOCUMENT_TITLE: name,
                      schema.FILE_NAME: f"{name}.pdf", schema.PAGE_SPANS: spans,
                      schema.PAGE_COUNT: len(spans)},
        )
        schema.hide_from_views(doc)  # as the reader does: page spans are bookkeeping
        docs.append(doc)
    return docs, kinds


def item_scores(items: List[str]) -> Tuple[float, float]:
    """(recall of the required Items, precision of the emitted Item headings)."""
    found = set(items)
    recall = sum(i in found for i in REQUIRED_ITEMS) / len(REQUIRED_ITEMS)
    seen, good = set(), 0
    for item in items:
        good += item in VALID_ITEMS and item not in seen
        seen.add(item)
    precision = good / len(items) if items else 0.0
    return recall, precision


def layout_items(nodes) -> List[str]:
    items, last = [], None
    for node in nodes:
        path = schema.get_heading_path(node)
        head = path[-1] if path else None
        if head and head.number.startswith("Item ") and head != last:
            items.append(head.number.split()[1])
        last = head
    return items


def markdown_parser_items(nodes) -> List[str]:
    """Item headings as LlamaIndex's MarkdownNodeParser splits them (its node's header line)."""
    items = []
    for node in nodes:
        first = node.text.split("\n", 1)[0]
        if first.startswith("#"):
            match = _ITEM_TEXT.match(clean_inline(first.lstrip("#")))
            if match:
                items.append(match.group(1).upper())
    return items


def bench_items(docs, kinds) -> Tuple[str, Dict]:
    tenks = [d for d in docs if kinds.get(d.doc_id) == "10k"]
    layout = LayoutMarkdownParser()
    md_parser = MarkdownNodeParser()
    rows, per_doc = [], {}
    for doc in tenks:
        lr, lp = item_scores(layout_items(layout.get_nodes_from_documents([doc])))
        mr, mp = item_scores(markdown_parser_items(md_parser.get_nodes_from_documents([doc])))
        per_doc[doc.doc_id] = (lr, mr)
        rows.append((lr, lp, mr, mp))
    n = len(rows)
    mean = [sum(r[i] for r in rows) / n for i in range(4)]
    full = [sum(r[0] == 1.0 for r in rows), sum(r[2] == 1.0 for r in rows)]
    table = (
        f"FinanceBench 10-Ks: {n} filings, {sum(d.metadata[schema.PAGE_COUNT] for d in tenks)} pages "
        "(pymupdf4llm Markdown). Recall = share of the 19 Items every 10-K has that come out as "
        "a heading; precision = share of emitted Item headings that are a valid Item seen for "
        "the first time.\n\n"
        "| parser | Item recall (mean) | Item precision (mean) | filings with every Item |\n"
        "| --- | --- | --- | --- |\n"
        f"| LayoutMarkdownParser | {mean[0]:.3f} | {mean[1]:.3f} | {full[0]}/{n} |\n"
        f"| MarkdownNodeParser (LlamaIndex) | {mean[2]:.3f} | {mean[3]:.3f} | {full[1]}/{n} |\n"
    )
    return table, per_doc


GENERATED_CHAPTERS = [
    ("1", "Features"), ("2", "Applications"), ("3", "Specifications"),
    ("3.1", "Absolute Maximum Ratings"), ("3.2", "Electrical Characteristics"),
    ("3.2.1", "Static Characteristics"), ("4", "Detailed Description"), ("4.1", "Overview"),
    ("4.2", "Feature Description"), ("5", "Layout"), ("A", "Appendix Revision History"),
]
_BODY = ("The device operates from a single supply and measures current and voltage with low "
         "drift over the full temperature range. ")


def generated_corpus(tmp: Path, count: int = 6) -> List[Document]:
    """Datasheets drawn with pymupdf (bold numbered headings in three sizes, running header and
    footer, a ruled table), read into the reader's Document contract with pymupdf4llm."""
    import pymupdf
    import pymupdf4llm

    docs = []
    for k in range(count):
        pdf, page_no = pymupdf.open(), 0

        def new_page():
            nonlocal page_no
            page_no += 1
            page = pdf.new_page(width=595, height=842)
            page.insert_text((50, 30), f"GX-{k} Sensor | Acme | Rev. B", fontsize=8)
            page.insert_text((50, 820), f"www.acme.example  Page {page_no}", fontsize=8)
            return page

        page, y = new_page(), 80
        page.insert_text((50, y), f"GX-{k} Current Sensor", fontsize=22, fontname="hebo")
        y += 40
        for number, title in GENERATED_CHAPTERS[: 7 + k % 5]:
            depth = number.count(".")
            if y > 640 or (depth == 0 and number in ("3", "4", "5")):
                page, y = new_page(), 80
            label = f"Appendix {number}: {title.split(' ', 1)[1]}" if number == "A" else f"{number} {title}"
            page.insert_text((50, y), label, fontsize=(16, 13, 11)[depth], fontname="hebo")
            y += 24
            for _ in range(3 + (k + depth) % 4):
                page.insert_text((50, y), _BODY[:90], fontsize=10)
                y += 14
            y += 10
        pdf.save(str(tmp / f"GX-{k}.pdf"))
        pages = pymupdf4llm.to_markdown(str(tmp / f"GX-{k}.pdf"), page_chunks=True, show_progress=False)
        text, spans = "", []
        for i, p in enumerate(pages):
            if text:
                text += "\n\n"
            start = len(text)
            text += p["text"]
            spans.append([i, start, len(text)])
        doc = Document(text=text, id_=f"GX-{k}", metadata={
            schema.DOCUMENT_ID: f"GX-{k}", schema.DOCUMENT_TITLE: f"GX-{k} Current Sensor",
            schema.PAGE_SPANS: spans, schema.PAGE_COUNT: len(spans)})
        schema.hide_from_views(doc)
        expected = set()
        for number, title in GENERATED_CHAPTERS[: 7 + k % 5]:
            if number == "A":
                expected.add(("Appendix A", "revision history", 1))
            else:
                expected.add((number, title.lower(), number.count(".") + 1))
        doc.metadata["_expected"] = sorted(expected)
        docs.append(doc)
    return docs


def heading_prf(docs: List[Document], gold_of) -> str:
    """Precision/recall of (number, title, level) for both parsers, and recall of
    (number, title) alone (the level ignored)."""
    stats = {"layout": [0, 0, 0], "md": [0, 0, 0]}  # found, true positives, tp without level
    gold_n = 0
    for doc in docs:
        gold = gold_of(doc)
        gold_short = {(n, t) for n, t, _ in gold}
        gold_n += len(gold)
        heads = set()
        for node in LayoutMarkdownParser().get_nodes_from_documents([doc]):
            for h in schema.get_heading_path(node):
                heads.add((h.number, h.title.lower(), h.level))
        md_heads = set()
        for node in MarkdownNodeParser().get_nodes_from_documents([doc]):
            first = node.text.split("\n", 1)[0]
            if first.startswith("#"):
                level = len(first) - len(first.lstrip("#"))
                parsed = parse_heading_number(first.lstrip("#"))
                md_heads.add((parsed.number, parsed.title.lower(), level))
        for key, found in (("layout", heads), ("md", md_heads)):
            stats[key][0] += len(found)
            stats[key][1] += len(found & gold)
            stats[key][2] += len({(n, t) for n, t, _ in found} & gold_short)
    rows = []
    for key, name in (("layout", "LayoutMarkdownParser"),
                      ("md", "MarkdownNodeParser (LlamaIndex, `#` depth as level)")):
        found, tp, tp_short = stats[key]
        rows.append(f"| {name} | {tp / max(found, 1):.3f} | {tp / gold_n:.3f} | {tp_short / gold_n:.3f} |")
    return (
        "| parser | precision | recall | recall ignoring level |\n| --- | --- | --- | --- |\n"
        + "\n".join(rows) + "\n"
    )


def bench_generated() -> str:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        docs = generated_corpus(Path(tmp))
    gold_n = sum(len(d.metadata["_expected"]) for d in docs)
    return (
        f"Generated datasheets: {len(docs)} PDFs drawn by this script (chapters to depth 3, an "
        f"`Appendix A:` chapter, running header/footer), {gold_n} headings; number, title and "
        "level must all be right.\n\n"
        + heading_prf(docs, lambda d: {tuple(x) for x in d.metadata["_expected"]})
    )


def bench_demo() -> str:
    pdfs = sorted((ROOT / "examples" / "data").glob("*.pdf"))
    if not pdfs:
        return "Demo corpus: SKIP (examples/data has no PDFs on this branch yet).\n"
    try:
        from llama_index_hiqa.readers.pdf import PDFLayoutReader
    except ImportError:
        return "Demo corpus: SKIP (PDFLayoutReader not available).\n"
    docs = [PDFLayoutReader().load_data(p)[0] for p in pdfs]
    gold = len(DEMO_CHAPTERS) * len(docs)
    return (
        f"Demo corpus: {len(docs)} datasheets read by PDFLayoutReader, {gold} chapter headings "
        "(number, title and level must all be right).\n\n"
        + heading_prf(docs, lambda d: DEMO_CHAPTERS)
    )


def bench_speed(docs) -> str:
    pages = sum(d.metadata[schema.PAGE_COUNT] for d in docs)
    out = []
    for name, parser in (
        ("LayoutMarkdownParser", LayoutMarkdownParser()),
        ("MarkdownNodeParser (LlamaIndex)", MarkdownNodeParser()),
        ("SentenceSplitter 1024 (LlamaIndex)", SentenceSplitter(chunk_size=1024, chunk_overlap=20)),
    ):
        start = time.perf_counter()
        nodes = parser.get_nodes_from_documents(docs)
        seconds = time.perf_counter() - start
        out.append((name, pages / seconds, len(nodes)))
    rows = "\n".join(f"| {n} | {pps:,.0f} | {k:,} |" for n, pps, k in out)
    return (
        f"Speed: all {len(docs)} FinanceBench filings, {pages:,} pages, from their Markdown "
        "(the PDF reading itself is the reader's benchmark), one process.\n\n"
        "| parser | pages / s | nodes |\n| --- | --- | --- |\n" + rows + "\n"
    ), out


_HEADING_LINE = re.compile(
    r"(?m)^(#+\s*)?\**\s*((?:\d+(?:\.\d+)*|Item \d+[A-Z]?\.?|PART [IVX]+)\s+[A-Za-z][^\n]*)$"
)


def _echo_formatter(prompt: str) -> str:
    """A well-behaved model: the window's own text with headings as single-# lines."""
    return _HEADING_LINE.sub(lambda m: "# " + clean_inline(m.group(2)), window_from_prompt(prompt))


def bench_llm_cost(docs, kinds) -> Tuple[str, List]:
    sample = [d for d in docs if kinds.get(d.doc_id) == "10k"][:3]
    pages = sum(d.metadata[schema.PAGE_COUNT] for d in sample)
    rows = []
    for window in (1000, 2000, 4000):
        llm = ScriptedLLM(_echo_formatter)
        parser = MarkdownFormatterParser(llm=llm, window_words=window, padding_words=200)
        start = time.perf_counter()
        nodes = parser.get_nodes_from_documents(sample)
        seconds = time.perf_counter() - start
        words = sum(len(d.text.split()) for d in sample)
        expected = sum(-(-len(d.text.split()) // window) for d in sample)
        paths = {n.metadata[schema.PARSE_PATH] for n in nodes}
        rows.append(dict(
            window=window, calls=llm.calls, expected=expected,
            calls_100=llm.calls * 100 / pages, prompt_100=llm.prompt_tokens * 100 / pages,
            completion_100=llm.completion_tokens * 100 / pages,
            overhead_100=seconds * 100 / pages, words=words, paths=sorted(paths),
        ))
    body = "\n".join(
        f"| {r['window']}{' (default)' if r['window'] == 2000 else ''} | {r['calls_100']:.1f} | "
        f"{r['prompt_100']:,.0f} | {r['completion_100']:,.0f} | {r['overhead_100']:.2f} s |"
        for r in rows
    )
    return (
        f"LLM path cost: {len(sample)} FinanceBench 10-Ks ({pages} pages, "
        f"{rows[0]['words']:,} words), padding K = 200 words, counted with the scripted LLM "
        "(it echoes each window with numbered headings; calls = T = ceil(N / W) per document "
        f"as in Algorithm 1: {rows[1]['calls']} calls for W = 2000, expected {rows[1]['expected']}). "
        "Tokens by the pack's word+punctuation estimate (≈ tiktoken ± 20%). Our own time "
        "(windows, checks, stitching, alignment) excludes the LLM's latency.\n\n"
        "| window W (words) | LLM calls / 100 pages | prompt tokens / 100 pages | "
        "completion tokens / 100 pages | our time / 100 pages |\n| --- | --- | --- | --- | --- |\n"
        + body + "\n"
    ), rows


def plot(per_doc: Dict, llm_rows: List, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 1]})
    names = list(per_doc)
    x = range(len(names))
    ax1.bar([i - 0.2 for i in x], [per_doc[n][0] for n in names], 0.4, label="LayoutMarkdownParser")
    ax1.bar([i + 0.2 for i in x], [per_doc[n][1] for n in names], 0.4, label="MarkdownNodeParser")
    ax1.set_xticks(list(x))
    ax1.set_xticklabels([n.replace("_10K", "") for n in names], rotation=75, fontsize=7)
    ax1.set_ylabel("share of the 19 required Items found as headings")
    ax1.set_title("FinanceBench 10-Ks: Item heading recall")
    ax1.legend(loc="lower left", fontsize=8)
    ws = [r["window"] for r in llm_rows]
    ax2.plot(ws, [r["prompt_100"] for r in llm_rows], "o-", label="prompt")
    ax2.plot(ws, [r["completion_100"] for r in llm_rows], "s-", label="completion")
    ax2.set_xlabel("window W (words)")
    ax2.set_ylabel("tokens per 100 pages")
    ax2.set_title("MarkdownFormatterParser cost")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    data = shared_data_dir()
    if data is None or not (data / "financebench" / "pages_markdown.jsonl.gz").exists():
        print("SKIP: ../shared/data/financebench not found (set HIQA_DATA_DIR)")
        return
    docs, kinds = financebench_documents()
    items_table, per_doc = bench_items(docs, kinds)
    print(items_table)
    demo = bench_demo()
    print(demo)
    generated = bench_generated()
    print(generated)
    speed, _ = bench_speed(docs)
    print(speed)
    llm_table, llm_rows = bench_llm_cost(docs, kinds)
    print(llm_table)
    png = HERE / "parsers.png"
    plot(per_doc, llm_rows, png)
    write_section(
        "parsers",
        "HiQA segment parsers: heading recovery, speed, LLM cost (issue 3)",
        "\n".join([items_table, demo, generated, speed, llm_table, f"![parsers]({png.name})"]),
        command=".venv/bin/python benchmarks/bench_parsers.py",
    )


if __name__ == "__main__":
    main()
