"""OCR of PDF pages without a text layer (scans), offline, into the fast engine's text lines.

A scanned page has no text for PyMuPDF to extract: without OCR its chapter is silently
missing from the index (or the whole file is "empty"). HiQA's pipeline ("HiQA: A
Hierarchical Contextual Augmentation RAG for Multi-Documents QA", §Markdown Formatter)
starts from the text and layout of every page, so such a page is rendered to an image and
read by RapidOCR (PP-OCR detection + recognition as ONNX models that ship inside the
``rapidocr-onnxruntime`` wheel: nothing is downloaded) into the same ``_Line`` objects the
fast engine builds from a text layer. Everything after that (headings, reading order,
running lines, page spans) is the same code for scanned and digital pages.

Only pages without text are read (``needs_ocr``): OCR costs ~2 s a page on 2 shared cores,
against milliseconds for a text layer.

What OCR boxes say about layout: a box's height follows the type size only roughly
(descenders, padding; measured on the demo datasheets: body 10 pt lines give boxes of
11.5-15 pt), so a line counts as larger type only when its box is clearly taller than the
page's median line ([`LARGE_LINE_RATIO`][llama_index_hiqa.readers.ocr.LARGE_LINE_RATIO]); a short line numbered like a heading
("4.1 Absolute maximum ratings", "Item 7") or titled like a statement is marked bold, which
makes it a heading candidate whose level the segment parser takes from its numbering.
"""

from __future__ import annotations

import re
import statistics
import threading
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from llama_index_hiqa.errors import MissingExtraError
from llama_index_hiqa.headings import is_report_heading, parse_heading_number
from llama_index_hiqa.readers._page_layout import _Line, _PageLines, _body_font_size

OCR_EXTRA = "ocr"
OCR_PACKAGE = "rapidocr-onnxruntime"
# A page with fewer characters than this in its text layer, under an image covering most of
# the page, is a scan with a stamped page number or Bates label: it is read by OCR too.
MIN_TEXT_CHARS = 30
SCAN_COVER_SHARE = 0.6
LARGE_LINE_RATIO = 1.3
HEADING_SIZE_RATIO = 1.2  # above PDFLayoutReader.heading_size_ratio (1.15)
NOMINAL_BODY_SIZE = 10.0  # body size given to OCR lines of a document without a text layer
_MIN_SCORE = 0.5  # recognitions below this confidence are noise (speckles, rules)
_HEADING_MAX_WORDS = 12
_BULLET_RE = re.compile(r"^\s*([-•▪◦*]|\(?[a-z0-9]\))\s")
# PP-OCR's recogniser often drops the space after a section or table number ("4.2Electrical",
# "Table1."), which hides the number from the heading and caption patterns: put it back.
_NUMBER_GLUE_RE = re.compile(r"^(\d+(?:\.\d+)*)(?=[A-Z][a-z])|\b(Table|Figure|Fig\.|Item|Note|Part)(?=\d)")

_ENGINE: Any = None
_ENGINE_LOCK = threading.Lock()


def needs_ocr(page: Any, lines: _PageLines) -> bool:
    """Whether a page has no usable text layer.

    No text at all but something drawn on it, or a few characters over a page-sized image.

    Args:
        page: the PyMuPDF page.
        lines: the text lines its text layer gave.

    Returns:
        ``True`` when the page should be read by OCR.
    """
    chars = sum(len(line.text.strip()) for line in lines.lines)
    if chars >= MIN_TEXT_CHARS:
        return False
    try:
        infos = page.get_image_info()
    # Safe: a page whose images cannot be listed is treated as having none (no OCR).
    except Exception:
        infos = []
    area = max(float(page.rect.width * page.rect.height), 1.0)
    covered = max(
        ((b[2] - b[0]) * (b[3] - b[1]) for b in (i.get("bbox", (0, 0, 0, 0)) for i in infos)), default=0.0
    )
    if chars == 0:
        return bool(infos) or bool(page.get_drawings())
    return covered / area >= SCAN_COVER_SHARE


def ocr_engine(path: Path) -> Any:
    """The process's RapidOCR engine (loaded once, ~0.1 s).

    Args:
        path: the file being read, named in the error.

    Returns:
        The engine.

    Raises:
        MissingExtraError: the ``ocr`` extra is not installed.
    """
    global _ENGINE
    with _ENGINE_LOCK:
        if _ENGINE is None:
            try:
                # RapidOCR: the [ocr] extra.
                from rapidocr_onnxruntime import RapidOCR
            except ImportError as exc:
                raise MissingExtraError(path, OCR_EXTRA, OCR_PACKAGE, "pages without a text layer (scans)") from exc
            _ENGINE = RapidOCR()
        return _ENGINE


def ocr_page(path: Path, page: Any, number: int, dpi: int, body_size: float) -> _PageLines:
    """The page's text lines as read by OCR from a rendering at ``dpi``; boxes in PDF points.

    Args:
        path: the file, named in errors.
        page: the PyMuPDF page.
        number: its number, from 0.
        dpi: the rendering's resolution, in dots per inch.
        body_size: the font size given to body lines (the document's body size, when it has
            digital pages, so both kinds of page rank their headings alike).

    Returns:
        The page's lines.

    Raises:
        MissingExtraError: the ``ocr`` extra is not installed.
    """
    engine = ocr_engine(path)
    pixmap = page.get_pixmap(dpi=dpi)
    image = np.frombuffer(pixmap.samples, dtype=np.uint8).reshape(pixmap.height, pixmap.width, pixmap.n)
    if pixmap.n == 4:  # drop alpha: the detector expects RGB
        image = image[:, :, :3]
    with _ENGINE_LOCK:  # one ONNX session pair per process; calls are serialised
        # No text-direction classifier: PyMuPDF renders the page upright (its /Rotate
        # applied), and on the demo scans the classifier turned whole lines of upright body
        # text upside down, losing them (4 of 25 lines on NX-2043's first page).
        result, _ = engine(np.ascontiguousarray(image), use_cls=False)
    scale = 72.0 / dpi
    boxes: List[Tuple[Tuple[float, float, float, float], str]] = []
    for points, text, score in result or []:
        if float(score) < _MIN_SCORE or not str(text).strip():
            continue
        xs, ys = [p[0] * scale for p in points], [p[1] * scale for p in points]
        text = _NUMBER_GLUE_RE.sub(lambda m: (m.group(1) or m.group(2)) + " ", str(text).strip())
        boxes.append(((min(xs), min(ys), max(xs), max(ys)), text))
    rect = page.rect
    return _PageLines(number, float(rect.width), float(rect.height), _lines(boxes, number, body_size, float(rect.width)))


def _lines(
    boxes: Sequence[Tuple[Tuple[float, float, float, float], str]], number: int, body_size: float, width: float
) -> List[_Line]:
    """Boxes on one baseline joined left to right into a line (a table row keeps its label
    and values together); a new block where the gap above a line exceeds a line height."""
    if not boxes:
        return []
    median = statistics.median(b[3] - b[1] for b, _ in boxes) or 1.0
    rows: List[List[Tuple[Tuple[float, float, float, float], str]]] = []
    for box, text in sorted(boxes, key=lambda b: ((b[0][1] + b[0][3]) / 2, b[0][0])):
        for row in reversed(rows[-3:]):  # boxes of one text line differ in centre by a pixel or two
            top, bottom = min(b[1] for b, _ in row), max(b[3] for b, _ in row)
            overlap = min(bottom, box[3]) - max(top, box[1])
            same_line = overlap >= 0.5 * min(box[3] - box[1], bottom - top)
            # Two text columns are read as two lines, not one: lines of running text (each
            # a good part of the page wide) side by side stay apart; table cells are joined.
            columns = box[2] - box[0] >= width * 0.3 and any(b[2] - b[0] >= width * 0.3 for b, _ in row)
            if same_line and not columns:
                row.append((box, text))
                break
        else:
            rows.append([(box, text)])
    rows.sort(key=lambda row: (min(b[1] for b, _ in row), min(b[0] for b, _ in row)))
    lines: List[_Line] = []
    block = 0
    previous_bottom: Optional[float] = None
    for row in rows:
        row.sort(key=lambda b: b[0][0])
        x0 = min(b[0] for b, _ in row)
        y0 = min(b[1] for b, _ in row)
        x1 = max(b[2] for b, _ in row)
        y1 = max(b[3] for b, _ in row)
        text = " ".join(t for _, t in row)
        height = max(b[3] - b[1] for b, _ in row)
        large = height >= median * LARGE_LINE_RATIO
        heading_like = _heading_like(text)
        if large:
            size = round(body_size * height / median * 2) / 2
        elif heading_like:
            # Set just above the body size, so the fast engine writes it as a "#" heading
            # (as it does a digital page's) rather than a bold line; its level then comes
            # from its numbering in the segment parser.
            size = round(body_size * HEADING_SIZE_RATIO * 2) / 2
        else:
            size = body_size
        # A row of several boxes apart (a table row, a label and its value) stands alone:
        # joined to the next row as one paragraph it would lose which value is whose.
        tabular = len(row) > 1
        item = bool(_BULLET_RE.match(text))  # each list item is its own paragraph
        if previous_bottom is not None and (
            y0 - previous_bottom > median * 0.9 or heading_like or large or tabular or item
        ):
            block += 1
        lines.append(_Line(text, (x0, y0, x1, y1), size, heading_like, (number, f"ocr{block}")))
        previous_bottom = y1
        if heading_like or large or tabular:
            block += 1
    return lines


def _heading_like(text: str) -> bool:
    words = text.split()
    if not words or len(words) > _HEADING_MAX_WORDS or text.rstrip().endswith((".", ",", ";", ":")):
        return False
    # A number and a word ("4.1 Absolute maximum ratings"), not a value and its unit ("60 dB").
    numbered = parse_heading_number(text)
    if numbered.family != "none" and re.search(r"[A-Za-z]{3,}", numbered.title or ""):
        return True
    return is_report_heading(text)


def ocr_scanned_pages(path: Path, pdf: Any, pages: List[_PageLines], dpi: int) -> List[int]:
    """Replace the lines of every page without a text layer by its OCR lines, in place.

    Args:
        path: the file, named in errors.
        pdf: the open PyMuPDF document.
        pages: every page's lines (changed in place).
        dpi: the rendering's resolution, in dots per inch.

    Returns:
        The numbers (from 0) of the pages read by OCR.

    Raises:
        MissingExtraError: a page needs OCR and the ``ocr`` extra is not installed.
    """
    scans = [page.number for page in pages if needs_ocr(pdf[page.number], page)]
    if not scans:
        return []
    digital = [page for page in pages if page.number not in scans]
    body = _body_font_size(digital) or NOMINAL_BODY_SIZE
    for index, page in enumerate(pages):
        if page.number in scans:
            pages[index] = ocr_page(path, pdf[page.number], page.number, dpi, body)
    return scans


def is_scan_image(bbox: Sequence[float], page: _PageLines) -> bool:
    """Whether an image is the scan of its page (not a figure on it).

    Args:
        bbox: the image's ``(x0, y0, x1, y1)`` in PDF points.
        page: the page's lines and size.

    Returns:
        ``True`` when the image covers at least [`SCAN_COVER_SHARE`][llama_index_hiqa.readers.ocr.SCAN_COVER_SHARE] of the page.
    """
    area = max(page.width * page.height, 1.0)
    return (bbox[2] - bbox[0]) * (bbox[3] - bbox[1]) / area >= SCAN_COVER_SHARE
