"""Telling a damaged PDF from an intact one, so a cut-short download is an error rather
than a partly indexed document (or one reported as a scan without text)."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, List, Optional

from llama_index_hiqa.errors import CorruptDocumentError, EmptyDocumentError
from llama_index_hiqa.readers._page_layout import _page_lines, _PageLines

logger = logging.getLogger("llama_index_hiqa.readers.pdf")


def read_pages(path: Path, pdf: Any, truncated: bool) -> List[_PageLines]:
    """Text lines of every page of a PDF, refusing a damaged file.

    MuPDF repairs a broken file silently (``is_repaired``) and hands back what it found,
    which for a cut-short download is some pages, or none, of the real document. Indexing
    that would answer from part of a filing, so a damaged file is an error naming what was
    lost; a repair that lost nothing (only the cross-reference table was off) is kept.

    Args:
        path: the file, named in errors.
        pdf: the open PyMuPDF document.
        truncated: whether the file lacks its end-of-file marker ([`lacks_eof_marker`][llama_index_hiqa.readers._pdf_integrity.lacks_eof_marker]).

    Returns:
        One page's lines a page, in order.

    Raises:
        CorruptDocumentError: a page's text cannot be extracted, or the repair lost pages
            (names what was lost).
        EmptyDocumentError: the PDF has no pages.
    """
    # pymupdf (~1.5 s to import) loads when a PDF is read, not with the package.
    import pymupdf

    repaired = bool(pdf.is_repaired)
    declared = declared_page_count(pdf) if repaired else None
    pages: List[_PageLines] = []
    unreadable: List[int] = []
    if repaired:
        pymupdf.TOOLS.mupdf_warnings(reset=True)
    for i in range(pdf.page_count):
        try:
            pages.append(_page_lines(pdf[i], i))
        # MuPDF raises several types for a damaged page: the file is then corrupt (typed error)
        # or, when MuPDF repaired it, the page is reported as unreadable; nothing is silent.
        except Exception as exc:
            if not repaired:
                raise CorruptDocumentError(path, f"cannot extract text of page {i + 1} ({one_line(exc)})") from exc
            pages.append(_PageLines(i, 0.0, 0.0, []))
            unreadable.append(i + 1)
            continue
        # MuPDF reports content it had to drop as warnings (process-wide store, read per page).
        if repaired and pymupdf.TOOLS.mupdf_warnings(reset=True):
            unreadable.append(i + 1)
    damage: List[str] = []
    if truncated:
        damage.append(TRUNCATED)
    if declared is not None and declared > pdf.page_count:
        damage.append(f"the file declares {declared} pages, {pdf.page_count} were found")
    if unreadable:
        damage.append(f"page(s) {_page_numbers(unreadable)} of {pdf.page_count} could not be read in full")
    if repaired and pdf.page_count == 0:
        damage.append("MuPDF repaired its structure and found no page")
    if damage:
        raise CorruptDocumentError(path, "damaged or truncated PDF: " + "; ".join(damage) + "; re-download or re-export it")
    if pdf.page_count == 0:
        raise EmptyDocumentError(path, "the PDF has no pages")
    if repaired:
        logger.warning("%s: MuPDF repaired the PDF's cross-reference table; every page read in full", path)
    return pages


@contextmanager
def mupdf_messages_captured() -> Iterator[None]:
    """Read a PDF with MuPDF's own stderr messages off: what they say about a damaged file
    reaches the user once, in the typed error. The process-wide warning store is emptied
    before (it would otherwise grow with every file read) and the display setting restored."""
    # pymupdf (~1.5 s to import) loads when a PDF is read, not with the package.
    import pymupdf

    shown = pymupdf.TOOLS.mupdf_display_errors()
    pymupdf.TOOLS.mupdf_display_errors(False)
    pymupdf.TOOLS.reset_mupdf_warnings()
    try:
        yield
    finally:
        pymupdf.TOOLS.mupdf_display_errors(shown)


TRUNCATED = "the file ends before its %%EOF end marker (cut short, e.g. by an interrupted download or copy)"


def lacks_eof_marker(path: Path) -> bool:
    """Whether the last KiB of a PDF misses ``%%EOF``.

    The end-of-file marker closes every PDF (ISO 32000-1, PDF 1.7, §7.5.5 "File Trailer") and
    readers look for it there. A file cut short has lost it.

    Args:
        path: the PDF file.

    Returns:
        ``True`` when the marker is missing.
    """
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - 1024))
        return b"%%EOF" not in handle.read()


def declared_page_count(pdf: Any) -> Optional[int]:
    """``/Count`` of the page tree's root.

    Args:
        pdf: the open PyMuPDF document.

    Returns:
        The declared number of pages, or ``None`` when the file no longer holds it.
    """
    try:
        kind, value = pdf.xref_get_key(pdf.pdf_catalog(), "Pages/Count")
        return int(value) if kind == "int" else None
    # Safe: the catalog itself may be gone in a damaged file; the page count is then unknown
    # (None), which the caller reports.
    except Exception as exc:
        logger.debug("no declared page count (%s)", exc)
        return None


def _page_numbers(numbers: List[int]) -> str:
    shown = ", ".join(map(str, numbers[:10]))
    return shown + (f" and {len(numbers) - 10} more" if len(numbers) > 10 else "")


def one_line(exc: BaseException) -> str:
    """An exception as one line: failures are reported as ``path: reason`` lines.

    Args:
        exc: the exception.

    Returns:
        Its message with white space collapsed, or its type's name when it has none.
    """
    return " ".join(str(exc).split()) or type(exc).__name__
