"""Formats beyond born-digital PDFs: reader speed per format, and OCR of scanned copies.

Questions:
1. How fast does PDFLayoutReader read each format it takes (PDF, HTML, DOCX), per source page?
2. On scanned copies of the demo datasheets (every page rendered to a 200 dpi grey image, no
   text layer, as a scanner produces), how many pages per second does the bundled OCR read,
   how many characters does it get wrong, and does the demo still find the gold datasheet?

Sample: the 10 demo datasheets (``llama_index_hiqa/demo_data``, 20 pages) and, when the shared
data is mounted, 20 pages of the 3M 2018 10-K (FinanceBench). HTML and DOCX copies are made
from the reader's own Markdown of each PDF (headings as h1-h4 / heading styles, tables as
tables), so every format carries the same text and the same source pages.

CER: Levenshtein distance over reference length, whitespace runs as one space, between the
reader's text of the digital PDF and of its scanned copy, Markdown marks (``#``, ``**``,
table pipes and rules) removed from both: the same reader and rendering on both sides, so
only what OCR read differs. Retrieval: ``hiqa demo``'s report (default offline embedding)
on the originals and on the scanned copies.

    PYTHONPATH=. python benchmarks/bench_formats.py
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import List

import _common  # noqa: F401  (sys.path, offline env)
from _results import markdown_table, write_section

from llama_index_hiqa import schema
from llama_index_hiqa.demo import DEMO_DATA_DIR, demo_report
from llama_index_hiqa.evaluation.metrics import character_error_rate
from llama_index_hiqa.readers.pdf import PDFLayoutReader

SCAN_DPI = 200
FILING = "3M_2018_10K.pdf"
FILING_PAGES = (20, 40)
_HEADING_RE = re.compile(r"^(#{1,6})\s+(.*)$")


def plain(text: str) -> str:
    return re.sub(r"[#*|]|---", " ", text)


def blocks(markdown: str):
    """``("h", level, text)``, ``("table", rows)`` or ``("p", text)`` per Markdown block."""
    for block in markdown.split("\n\n"):
        block = block.strip()
        if not block:
            continue
        heading = _HEADING_RE.match(block)
        lines = block.split("\n")
        if heading and len(lines) == 1:
            yield ("h", len(heading.group(1)), heading.group(2))
        elif all(line.startswith("|") for line in lines) and len(lines) >= 2:
            rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines if not set(line) <= set("|-: ")]
            yield ("table", rows)
        else:
            yield ("p", " ".join(lines).replace("**", ""))


def to_html(markdown: str, path: Path) -> None:
    from html import escape

    parts = ["<html><head><title>x</title></head><body>"]
    for block in blocks(markdown):
        if block[0] == "h":
            parts.append(f"<h{block[1]}>{escape(block[2])}</h{block[1]}>")
        elif block[0] == "table":
            rows = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in block[1])
            parts.append(f"<table>{rows}</table>")
        else:
            parts.append(f"<p>{escape(block[1])}</p>")
    path.write_text("".join(parts) + "</body></html>", encoding="utf-8")


def to_docx(markdown: str, path: Path) -> None:
    import docx

    document = docx.Document()
    for block in blocks(markdown):
        if block[0] == "h":
            document.add_heading(block[2], level=min(block[1], 9))
        elif block[0] == "table":
            rows = block[1]
            width = max(len(r) for r in rows)
            table = document.add_table(rows=len(rows), cols=width)
            for r, row in enumerate(rows):
                for c, value in enumerate(row):
                    table.cell(r, c).text = value
        else:
            document.add_paragraph(block[1])
    document.save(path)


def scanned_copy(source: Path, target: Path) -> int:
    import pymupdf

    src = pymupdf.open(source)
    out = pymupdf.open()
    for page in src:
        image = page.get_pixmap(dpi=SCAN_DPI, colorspace=pymupdf.csGRAY).tobytes("png")
        new = out.new_page(width=page.rect.width, height=page.rect.height)
        new.insert_image(new.rect, stream=image)
    out.save(target)
    return src.page_count


def timed_read(paths: List[Path]):
    reader = PDFLayoutReader()
    wall, cpu = time.perf_counter(), time.process_time()
    docs = reader.load_data(paths)
    return docs, time.perf_counter() - wall, time.process_time() - cpu


def main() -> int:
    import pymupdf

    work = Path(tempfile.mkdtemp(prefix="bench-formats-"))
    try:
        sources = sorted(Path(DEMO_DATA_DIR).glob("*.pdf"))
        corpora = {"demo datasheets": sources}
        filing = Path("/work/shared/data/financebench/pdfs") / FILING
        if filing.exists():
            cut = work / "filing"
            cut.mkdir()
            dst = pymupdf.open()
            dst.insert_pdf(pymupdf.open(filing), from_page=FILING_PAGES[0], to_page=FILING_PAGES[1] - 1)
            dst.save(cut / FILING)
            corpora[f"{FILING} pp.{FILING_PAGES[0] + 1}-{FILING_PAGES[1]}"] = [cut / FILING]

        speed_rows = []
        for label, pdfs in corpora.items():
            pages = sum(pymupdf.open(p).page_count for p in pdfs)
            docs, wall, cpu = timed_read(pdfs)
            speed_rows.append([label, "PDF (fast engine)", pages, round(pages / wall, 1), round(pages / max(cpu, 1e-9), 1), ""])
            for fmt, convert in (("HTML", to_html), ("DOCX", to_docx)):
                folder = work / f"{fmt}-{len(speed_rows)}"
                folder.mkdir()
                copies = []
                for doc, pdf in zip(docs, pdfs):
                    target = folder / (pdf.stem + (".html" if fmt == "HTML" else ".docx"))
                    convert(doc.text, target)
                    copies.append(target)
                read, wall, cpu = timed_read(copies)
                kept = sum(len(plain(d.text).split()) for d in read) / max(1, sum(len(plain(d.text).split()) for d in docs))
                speed_rows.append([label, fmt, pages, round(pages / wall, 1), round(pages / max(cpu, 1e-9), 1), f"{kept:.1%}"])
            print(speed_rows[-3:], flush=True)

        scans = work / "scanned"
        scans.mkdir()
        pages = sum(scanned_copy(p, scans / p.name) for p in sources)
        shutil.copy(Path(DEMO_DATA_DIR) / "questions.jsonl", scans / "questions.jsonl")
        digital, _, _ = timed_read(sources)
        scanned_docs, wall, cpu = timed_read(sorted(scans.glob("*.pdf")))
        ocr_pages = sum(len(schema.ocr_pages_of(d.metadata)) for d in scanned_docs)
        cers = [character_error_rate(plain(a.text), plain(b.text)) for a, b in zip(digital, scanned_docs)]
        heading_kept = []
        from llama_index_hiqa.parsers.layout_markdown import LayoutMarkdownParser

        parser = LayoutMarkdownParser()
        for a, b in zip(digital, scanned_docs):
            want = {h.label() for n in parser.get_nodes_from_documents([a]) for h in schema.get_heading_path(n)}
            got = {h.label() for n in parser.get_nodes_from_documents([b]) for h in schema.get_heading_path(n)}
            heading_kept.append(len(want & got) / max(1, len(want)))
        print("ocr", pages, wall, cers, flush=True)

        original = demo_report(data_dir=Path(DEMO_DATA_DIR))
        scanned = demo_report(data_dir=scans)

        def demo_row(label, report):
            n = len(report.answers)
            return [label, f"{report.hit_rate:.0%}", f"{sum(a.gold_rank == 1 for a in report.answers)}/{n}",
                    f"{sum(a.page_hit for a in report.answers)}/{n}", f"{sum(a.section_hit for a in report.answers)}/{n}"]

        body = "\n\n".join([
            "**Reader speed per format** (pages of the source PDF per second; HTML and DOCX copies carry the "
            "reader's Markdown of each PDF, so the same text and headings; 'words kept' = words of the copy's "
            "text over the PDF's):",
            markdown_table(["corpus", "format", "pages", "pages/s (wall)", "pages/CPU-s", "words kept"], speed_rows),
            f"**OCR on scanned copies** of the {len(sources)} demo datasheets ({pages} pages rendered at "
            f"{SCAN_DPI} dpi to grey images, no text layer; RapidOCR PP-OCRv4 ONNX from the `ocr` extra's wheel, "
            "no network):",
            markdown_table(
                ["pages read by OCR", "pages/s (wall)", "pages/CPU-s", "CER mean", "CER worst", "headings kept"],
                [[f"{ocr_pages}/{pages}", round(pages / wall, 2), round(pages / max(cpu, 1e-9), 2),
                  f"{sum(cers) / len(cers):.1%}", f"{max(cers):.1%}", f"{sum(heading_kept) / len(heading_kept):.0%}"]],
            ),
            "**Demo retrieval** (`hiqa demo` report, top 3, default offline embedding) on the originals and on "
            "the scanned copies:",
            markdown_table(["datasheets", "gold document in top 3", "at rank 1", "gold page", "gold section"],
                           [demo_row("digital (text layer)", original), demo_row("scanned (OCR)", scanned)]),
        ])
        write_section("formats", "Formats: HTML, DOCX and scanned PDFs (bench_formats.py)", body,
                      command="PYTHONPATH=. python benchmarks/bench_formats.py")
        print(body)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
