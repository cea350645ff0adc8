"""Unruled tables in the fast engine: page-level precision/recall on a hand-labelled sample.

Question: does ``PDFLayoutReader(detect_unruled_tables=True)`` find the tables of financial
filings that the default fast engine (ruled grids only) leaves as text lines, without making
tables of running text, and at what cost per page?

Sample: 24 pages drawn with ``random.Random(0)`` (4 pages from each of 6 FinanceBench filings,
pages past the cover), each judged by reading its text: ``tables`` is the number of tables a
reader would call one (a statement, a schedule, a grid of figures under column headers; a
single "label .... figure" line is not). Labels: ``benchmarks/table_detection_labels.json``.

Scored per page: a detection is right on a page with at least one labelled table; precision =
pages with a detected table that have one, recall = pages with a table on which one is detected
(page level, because the labels are page level); plus the tables found in all, and pages per
second of each reader on the sample (same process, one after the other; OCR off, so the
page without a text layer costs nothing; one page per file, so per-file overhead counts).

    PYTHONPATH=. python benchmarks/table_detection.py            # score
    PYTHONPATH=. python benchmarks/table_detection.py --print    # show the sample for labelling
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (sys.path, offline env)
from _results import markdown_table, write_section

from llama_index_hiqa.errors import DocumentReadError
from llama_index_hiqa.readers.pdf import PDFLayoutReader

HERE = Path(__file__).resolve().parent
LABELS = HERE / "table_detection_labels.json"
PDFS = Path("/work/shared/data/financebench/pdfs")
FILINGS = ["3M_2018_10K.pdf", "ADOBE_2017_10K.pdf", "AMCOR_2023Q2_10Q.pdf", "BESTBUY_2019_10K.pdf",
           "BOEING_2022_10K.pdf", "COCACOLA_2017_10K.pdf"]
PAGES_PER_FILING = 4


def sample():
    import pymupdf

    rng = random.Random(0)
    out = []
    for name in FILINGS:
        count = pymupdf.open(PDFS / name).page_count
        for page in sorted(rng.sample(range(3, count), PAGES_PER_FILING)):
            out.append((name, page))
    return out


def tables_in(text: str) -> int:
    """Markdown tables in a page's text (a header row followed by its rule row)."""
    lines = text.split("\n")
    return sum(1 for a, b in zip(lines, lines[1:]) if a.startswith("|") and b.startswith("|---"))


def read_pages(reader: PDFLayoutReader, folder: Path, pages):
    texts, seconds = [], 0.0
    for name, page in pages:
        path = folder / f"{Path(name).stem}-{page}.pdf"
        start = time.perf_counter()
        try:
            texts.append(reader.load_data(path)[0].text)
        except DocumentReadError:  # a page with nothing to read (p.21 of Best Buy's 10-K)
            texts.append("")
        seconds += time.perf_counter() - start
    return texts, seconds


def main(argv=None) -> int:
    import pymupdf

    parser = argparse.ArgumentParser()
    parser.add_argument("--print", action="store_true")
    args = parser.parse_args(argv)
    pages = sample()
    if args.print:
        for i, (name, page) in enumerate(pages):
            text = pymupdf.open(PDFS / name)[page].get_text(sort=True)
            print(f"===== {i} {name} p.{page + 1}\n" + "\n".join(text.split("\n")[:45]))
        return 0
    labels = json.loads(LABELS.read_text())["pages"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, page in pages:  # one page per file: every reader reads the same pages
            one = pymupdf.open()
            one.insert_pdf(pymupdf.open(PDFS / name), from_page=page, to_page=page)
            one.save(folder / f"{Path(name).stem}-{page}.pdf")
        readers = {
            "fast, ruled grids (default)": PDFLayoutReader(ocr="off"),
            "fast + unruled tables": PDFLayoutReader(detect_unruled_tables=True, ocr="off"),
            "pymupdf4llm": PDFLayoutReader(engine="pymupdf4llm", ocr="off"),
        }
        rows = []
        for label, reader in readers.items():
            texts, seconds = read_pages(reader, folder, pages)
            found = [tables_in(t) for t in texts]
            truth = [int(labels[str(i)]["tables"]) for i in range(len(pages))]
            tp = sum(1 for f, t in zip(found, truth) if f and t)
            fp = sum(1 for f, t in zip(found, truth) if f and not t)
            fn = sum(1 for f, t in zip(found, truth) if not f and t)
            precision = tp / max(1, tp + fp)
            recall = tp / max(1, tp + fn)
            rows.append([label, f"{tp + fp}/{len(pages)}", round(precision, 3), round(recall, 3), sum(found),
                         round(len(pages) / seconds, 1)])
            print(rows[-1], flush=True)
        tables = sum(int(labels[str(i)]["tables"]) for i in range(len(pages)))
        with_tables = sum(1 for i in range(len(pages)) if int(labels[str(i)]["tables"]))
        body = (
            f"Sample: {len(pages)} FinanceBench pages (4 from each of {len(FILINGS)} filings, `random.Random(0)`), "
            f"hand-labelled in `benchmarks/table_detection_labels.json`: {with_tables} pages hold "
            f"{tables} tables. Page level: precision = pages with a detected table that hold one; recall = "
            "pages holding a table on which one is detected.\n\n"
            + markdown_table(["reader", "pages with a table found", "precision", "recall", "tables found", "pages/s"], rows)
        )
        write_section("table_detection", "Unruled tables: detection on labelled FinanceBench pages (table_detection.py)",
                      body, command="PYTHONPATH=. python benchmarks/table_detection.py")
        print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
