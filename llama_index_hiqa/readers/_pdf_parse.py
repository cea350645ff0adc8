"""A PDF file to what :class:`~llama_index_hiqa.readers.pdf.PDFLayoutReader` makes its
``Document`` of: the integrity checks, OCR of scanned pages, the page rendering of
:mod:`~llama_index_hiqa.readers._pdf_render`, the figures of
:mod:`~llama_index_hiqa.readers._pdf_figures` and the title read from the cover.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llama_index_hiqa import schema
from llama_index_hiqa.errors import CorruptDocumentError, EmptyDocumentError, EncryptedDocumentError
from llama_index_hiqa.readers._markdown_builder import Parsed
from llama_index_hiqa.readers._page_layout import _body_font_size, _join_pages
from llama_index_hiqa.readers._pdf_figures import pdf_images
from llama_index_hiqa.readers._pdf_integrity import TRUNCATED, lacks_eof_marker, one_line, read_pages
from llama_index_hiqa.readers._pdf_render import locate_headings, render_fast, render_pymupdf4llm, running_lines
from llama_index_hiqa.readers.ocr import ocr_scanned_pages
from llama_index_hiqa.readers.titles import CoverLine, document_title

COVER_PAGES = 3  # pages read for the document title (a designed cover may precede the form's)


def parse_pdf(settings: Any, path: Path) -> Parsed:
    """A PDF file to its Markdown, page spans, headings, figures and title.

    Args:
        settings: The reader (its layout, OCR and engine settings).
        path: The PDF file.

    Returns:
        What the reader makes its ``Document`` of.

    Raises:
        CorruptDocumentError: MuPDF cannot open the file (a damaged or truncated one says so).
        EncryptedDocumentError: The PDF is password protected.
        EmptyDocumentError: No page has text (OCR found none either, or was off).
    """
    import pymupdf

    no_eof_marker = lacks_eof_marker(path)
    try:
        pdf = pymupdf.open(path)
    # pymupdf raises FileDataError and friends: one typed error naming the file.
    except Exception as exc:
        if no_eof_marker:
            raise CorruptDocumentError(path, f"damaged or truncated PDF: {TRUNCATED}; MuPDF cannot open it") from exc
        raise CorruptDocumentError(path, f"not a readable PDF ({one_line(exc)})") from exc
    try:
        if pdf.needs_pass or pdf.is_encrypted:
            raise EncryptedDocumentError(path, "the PDF is password protected")
        # Without a repair MuPDF followed the file's own cross-references to the end: a
        # missing marker alone (junk appended after it) is then no loss.
        pages = read_pages(path, pdf, truncated=no_eof_marker and bool(pdf.is_repaired))
        ocr_pages = ocr_scanned_pages(path, pdf, pages, settings.ocr_dpi) if settings.ocr == "auto" else []
        if not any(line.text.strip() for page in pages for line in page.lines):
            reason = (
                "OCR found no text either" if ocr_pages
                else "scanned? read it with ocr='auto'" if settings.ocr == "off" else "nothing is drawn on its pages"
            )
            raise EmptyDocumentError(path, f"the PDF has no extractable text ({reason})")
        body_size = _body_font_size(pages)
        running = running_lines(settings, pages) if settings.remove_running_lines else set()
        if settings.engine == "fast":
            page_texts, headings = render_fast(settings, pdf, pages, body_size, running, ocr_pages)
        else:
            page_texts = render_pymupdf4llm(settings, pdf, pages, running)
            if ocr_pages:  # pymupdf4llm sees no text on a scan: its OCR lines, rendered here
                scanned, _ = render_fast(settings, pdf, [pages[n] for n in ocr_pages], body_size, running)
                for number, page_text in zip(ocr_pages, scanned):
                    page_texts[number] = page_text
            headings = None
        text, spans = _join_pages(page_texts)
        if headings is None:
            headings = locate_headings(settings, text, spans, pages, body_size, running)
        images = pdf_images(settings, pdf, pages, text, spans, set(ocr_pages))
        title = document_title(
            [CoverLine(ln.text, ln.size, ln.bold, page.number) for page in pages[:COVER_PAGES] for ln in page.lines],
            (pdf.metadata or {}).get("title") or "",
            path.stem,
        )
        return Parsed(text, spans, headings, body_size, images, title, schema.FORMAT_PDF, ocr_pages)
    finally:
        pdf.close()
