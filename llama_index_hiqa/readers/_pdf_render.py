"""PDF pages to Markdown for [`PDFLayoutReader`][llama_index_hiqa.readers.pdf.PDFLayoutReader]: running
headers and footers, heading candidates by font size, the fast engine (lines and ruled tables
in reading order) and the pymupdf4llm engines.

Each function takes the reader as ``settings`` and reads only its layout settings.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from llama_index_hiqa.headings import is_report_heading
from llama_index_hiqa.page_geometry import TEXT_BLOCK, TEXT_LINE
from llama_index_hiqa.readers._page_layout import (
    PAGE_JOINER,
    PageItem,
    _grid_markdown,
    _grids,
    _inside,
    _Line,
    _normalise,
    _PageLines,
    _reading_order,
    _rules,
)
from llama_index_hiqa.readers._unruled_tables import unruled_tables

logger = logging.getLogger(__name__)

_MD_MARKS_RE = re.compile(r"^[#>\s]*|[*_`]+")
# pymupdf4llm's global switch between its two engines is process-wide state: serialise it.
_PYMUPDF4LLM_LOCK = threading.Lock()



# --- running headers / footers ---


def running_lines(settings: Any, pages: List["_PageLines"]) -> Set[str]:
    """Normalised texts of margin lines that repeat on most pages (page numbers ignored).

    Args:
        settings: The reader (its layout settings).
        pages: The pages' lines.

    Returns:
        The texts of the running headers and footers.
    """
    if len(pages) < 2:
        return set()
    counts: Counter[str] = Counter()
    for page in pages:
        seen = {
            _normalise(line.text)
            for line in page.lines
            if line.in_margin(page.height, settings.running_margin) and _normalise(line.text)
        }
        counts.update(seen)
    need = max(2, int(round(settings.running_min_share * len(pages))))
    return {key for key, n in counts.items() if n >= need}

def is_running(settings: Any, line: "_Line", page: "_PageLines", running: Set[str]) -> bool:
    """Whether a line is a running header or footer.

    Args:
        settings: The reader (its layout settings).
        line: The line.
        page: Its page.
        running: The texts [`running_lines`][llama_index_hiqa.readers._pdf_render.running_lines] found.

    Returns:
        True for a running line.
    """
    return bool(running) and line.in_margin(page.height, settings.running_margin) and (
        _normalise(line.text) in running
    )


# --- fast engine ---


def heading_levels(settings: Any, pages: List["_PageLines"], body_size: float) -> Dict[float, int]:
    """Font sizes larger than the body, largest first, mapped to Markdown levels 1..4.

    Args:
        settings: The reader (its layout settings).
        pages: The pages' lines.
        body_size: The body font size.

    Returns:
        Font size -> heading level.
    """
    sizes = sorted(
        {
            line.size
            for page in pages
            for line in page.lines
            if line.size >= body_size * settings.heading_size_ratio
            and len(line.text.strip()) <= settings.max_heading_chars
        },
        reverse=True,
    )
    return {size: min(i + 1, 4) for i, size in enumerate(sizes)}

def is_heading_candidate(settings: Any, line: "_Line", body_size: float) -> bool:
    """Whether a line may be a heading: larger than the body, or bold in the body's size (or a
    report's statement or note title set bold in a smaller type).

    Args:
        settings: The reader (its layout settings).
        line: The line.
        body_size: The body font size.

    Returns:
        True for a heading candidate.
    """
    text = line.text.strip()
    if not text or len(text) > settings.max_heading_chars:
        return False
    return line.size >= body_size * settings.heading_size_ratio or (
        # Financial statements are set in a smaller type than the text, their titles bold
        # in that type: a statement or note title is a heading whatever its size.
        line.bold and (line.size >= body_size * 0.95 or is_report_heading(text))
    )

def render_fast(
    settings: Any, pdf: Any, pages: List["_PageLines"], body_size: float, running: Set[str], scanned: Sequence[int] = ()
) -> Tuple[List[str], List[List[Any]], List[List[Any]]]:
    """The fast engine: each page's lines and ruled tables as Markdown, in reading order.

    Args:
        settings: The reader (its layout settings).
        pdf: The open ``pymupdf`` document.
        pages: The pages' lines.
        body_size: The body font size.
        running: The running lines to leave out.
        scanned: Page numbers read by OCR (no unruled-table search there).

    Returns:
        The Markdown of each page, the headings as ``[start, end, size, bold]`` document
            offsets and where each written line or table lies (``schema.TEXT_BOXES`` rows,
            document offsets), both in text order.
    """
    levels = heading_levels(settings, pages, body_size)
    page_texts: List[str] = []
    headings: List[List[Any]] = []  # offsets relative to the page first, fixed below
    page_boxes: List[List[List[Any]]] = []  # [start, end, bbox, kind], page-relative
    for page in pages:
        tables = ruled_tables(settings, pdf[page.number]) if settings.detect_tables else []
        if settings.detect_tables and settings.detect_unruled_tables and page.number not in scanned:
            tables += unruled_tables(pdf[page.number].get_text("words"), [t[0] for t in tables])
        items: List[PageItem] = []
        for line in page.lines:
            if is_running(settings, line, page, running):
                continue
            if any(_inside(line.bbox, t[0]) for t in tables):
                continue
            items.append((line.bbox, "line", line))
        for bbox, markdown in tables:
            items.append((bbox, "table", markdown))
        ordered = _reading_order(items, page.width)
        parts: List[str] = []
        page_heads: List[List[Any]] = []
        boxes: List[List[Any]] = []
        offset = 0
        paragraph: List[str] = []
        paragraph_boxes: List[Tuple[float, ...]] = []
        last_block: Optional[Tuple[int, Any]] = None

        def flush() -> None:
            nonlocal offset
            if paragraph:
                chunk = " ".join(paragraph)
                start = offset
                for text, bbox in zip(paragraph, paragraph_boxes):
                    boxes.append([start, start + len(text), bbox, TEXT_LINE])
                    start += len(text) + 1
                parts.append(chunk)
                offset += len(chunk) + 2
                paragraph.clear()
                paragraph_boxes.clear()

        for item_bbox, kind, payload in ordered:
            if kind == "table":
                flush()
                boxes.append([offset, offset + len(payload), item_bbox, TEXT_BLOCK])
                parts.append(payload)
                offset += len(payload) + 2
                last_block = None
                continue
            line = payload
            text = line.text.strip()
            if not text:
                continue
            if is_heading_candidate(settings, line, body_size):
                flush()
                level = levels.get(line.size)
                rendered = ("#" * level + " " + text) if level else f"**{text}**"
                page_heads.append([offset, offset + len(rendered), line.size, line.bold])
                boxes.append([offset, offset + len(rendered), line.bbox, TEXT_LINE])
                parts.append(rendered)
                offset += len(rendered) + 2
                last_block = None
                continue
            if last_block is not None and last_block != line.block:
                flush()
            paragraph.append(text)
            paragraph_boxes.append(line.bbox)
            last_block = line.block
        flush()
        page_texts.append("\n\n".join(parts))
        headings.append(page_heads)
        page_boxes.append(boxes)
    # Convert page-relative offsets to document offsets.
    absolute: List[List[Any]] = []
    located: List[List[Any]] = []
    start = 0
    for page, text, heads, boxes in zip(pages, page_texts, headings, page_boxes):
        for s, e, size, bold in heads:
            absolute.append([start + s, start + e, size, bool(bold)])
        for s, e, bbox, kind in boxes:
            located.append([page.number, start + s, start + e, *bbox[:4], kind])
        start += len(text) + len(PAGE_JOINER)
    return page_texts, absolute, located

def ruled_tables(settings: Any, page: Any) -> List[Tuple[Tuple[float, float, float, float], str]]:
    """Ruled tables of a page as (bbox, Markdown), from the page's grid of rules and words.

    Why not PyMuPDF's ``find_tables``: measured on FinanceBench pages it costs 0.3-1 s a
    page on 2 shared cores (its per-character extraction in Python dominates; with its
    default ``use_layout=True`` it also runs the layout model), which alone would hold the
    reader under 5 pages/s. A ruled table is a connected grid of horizontal and vertical
    rules; finding that grid and dropping the page's words into its cells takes
    milliseconds. Tables without vertical rules stay plain text lines (no text is lost);
    the pymupdf4llm engines find those too.

    Args:
        settings: The reader (its layout settings).
        page: The ``pymupdf`` page.

    Returns:
        ``(bbox, Markdown)`` of each ruled table; ``[]`` when detection fails (logged).
    """
    try:
        horizontal, vertical = _rules(page)
        if len(horizontal) < settings.min_table_rules or len(vertical) < 2:
            return []
        grids = _grids(horizontal, vertical, settings.min_table_rules)
        if not grids:
            return []
        words = page.get_text("words")
        tables = []
        for ys, xs in grids:
            markdown = _grid_markdown(ys, xs, words)
            if markdown:
                tables.append(((xs[0], ys[0], xs[-1], ys[-1]), markdown))
        return tables
    # Safe: a table we cannot parse stays as plain lines (no text lost); logged.
    except Exception as exc:
        logger.debug("table detection failed on page %s: %s", page.number, exc)
        return []


# --- pymupdf4llm engines ---


def render_pymupdf4llm(settings: Any, pdf: Any, pages: List["_PageLines"], running: Set[str]) -> List[str]:
    """The pymupdf4llm engines (``"pymupdf4llm"``, ``"layout"``): each page's Markdown, running
    lines removed.

    Args:
        settings: The reader (its layout settings).
        pdf: The open ``pymupdf`` document.
        pages: The pages' lines.
        running: The running lines to leave out.

    Returns:
        The Markdown of each page.
    """
    # pymupdf4llm (~1.7 s to import) loads when a PDF is read.
    import pymupdf4llm

    with _PYMUPDF4LLM_LOCK:
        previous = bool(getattr(pymupdf4llm, "_use_layout", False))
        pymupdf4llm.use_layout(settings.engine == "layout")
        try:
            kwargs: Dict[str, Any] = {"page_chunks": True, "show_progress": False}
            if settings.engine == "layout":
                kwargs.update(header=not settings.remove_running_lines, footer=not settings.remove_running_lines, use_ocr=False)
            elif not settings.detect_tables:
                kwargs["table_strategy"] = None
            chunks = pymupdf4llm.to_markdown(pdf, **kwargs)
        finally:  # leave the process-wide switch as we found it
            pymupdf4llm.use_layout(previous)
    texts = [chunk.get("text", "") for chunk in chunks]
    if running:
        texts = [
            "\n".join(l for l in t.split("\n") if _normalise(_MD_MARKS_RE.sub("", l)) not in running)
            for t in texts
        ]
    return [t.strip() for t in texts]

def locate_lines(
    settings: Any, text: str, spans: List[List[int]], pages: List["_PageLines"], running: Set[str]
) -> List[List[Any]]:
    """Where each text line of the pages lies in pymupdf4llm's Markdown (``schema.TEXT_BOXES`` rows).

    Each line is searched for after the previous one found on its page; a line written
    differently (a table cell, a line pymupdf4llm joined or reordered) is searched for from
    the page's start, and left out when it is not there.

    Args:
        settings: The reader (its layout settings).
        text: The document's Markdown.
        spans: ``[page, start, end]`` of each page in ``text``.
        pages: The pages' lines.
        running: The running lines to leave out.

    Returns:
        ``[page, start, end, x0, y0, x1, y1, kind]`` rows, sorted by ``start``.
    """
    found: List[List[Any]] = []
    for (_, start, end), page in zip(spans, pages):
        cursor = start
        for line in page.lines:
            needle = line.text.strip()
            if not needle or is_running(settings, line, page, running):
                continue
            idx = text.find(needle, cursor, end)
            if idx < 0:
                idx = text.find(needle, start, end)
                if idx < 0:
                    continue
            else:
                cursor = idx + len(needle)
            found.append([page.number, idx, idx + len(needle), *line.bbox[:4], TEXT_LINE])
    found.sort(key=lambda row: row[1])
    # Boxes of one document never overlap in characters: a repeated line found twice keeps one.
    kept: List[List[Any]] = []
    for row in found:
        if not kept or row[1] >= kept[-1][2]:
            kept.append(row)
    return kept


def locate_headings(
    settings: Any, text: str, spans: List[List[int]], pages: List["_PageLines"], body_size: float, running: Set[str]
) -> List[List[Any]]:
    """Map heading candidates found by font size onto lines of pymupdf4llm's Markdown.

    Args:
        settings: The reader (its layout settings).
        text: The document's Markdown.
        spans: ``[page, start, end]`` of each page in ``text``.
        pages: The pages' lines.
        body_size: The body font size.
        running: The running lines to leave out.

    Returns:
        The headings as ``[start, end, size, bold]`` offsets in ``text``.
    """
    found: List[List[Any]] = []
    for (page_no, start, end), page in zip(spans, pages):
        cursor = start
        for line in page.lines:
            if not is_heading_candidate(settings, line, body_size) or is_running(settings, line, page, running):
                continue
            idx = text.find(line.text.strip(), cursor, end)
            if idx < 0:
                continue
            line_start = text.rfind("\n", start, idx) + 1 if text.rfind("\n", start, idx) >= 0 else start
            line_start = max(line_start, start)
            line_end = text.find("\n", idx, end)
            line_end = end if line_end < 0 else line_end
            found.append([line_start, line_end, line.size, line.bold])
            cursor = line_end
    return found
