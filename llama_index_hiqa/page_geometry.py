"""Where a span of a document's text lies on its pages: the pages it touches and the
rectangles it covers.

Computation over two facts the reader stores (`schema.py` holds their keys and accessors):
where each page lies in ``Document.text`` (``PAGE_SPANS``) and where each line or table lies
on its page (``TEXT_BOXES``, read as [`TextBox`][llama_index_hiqa.page_geometry.TextBox]es).
The parsers place every node with it; ``schema.set_segment_facts`` stores the rectangles of a
node's span as its ``PAGE_BOXES``.
"""

from __future__ import annotations

import bisect
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

# A rectangle on a page, in PDF points: (x0, y0, x1, y1).
Rect = Tuple[float, float, float, float]

# How a box's characters run: a text line left to right, a block such as a table top to bottom
# (row by row), so a span covering part of a box is cut across its width or down its height.
TEXT_LINE, TEXT_BLOCK = 0, 1


class TextBox(NamedTuple):
    """Where a piece of a document's text lies on its page (one entry of ``TEXT_BOXES``): the
    characters ``[start, end)`` of ``Document.text`` and their box in PDF points; ``kind``
    `TEXT_LINE` (0) for a text line, `TEXT_BLOCK` (1) for a block such as a table."""

    page: int
    start: int
    end: int
    x0: float
    y0: float
    x1: float
    y1: float
    kind: int = TEXT_LINE


def pages_for_span(
    page_spans: Sequence[Sequence[int]], start: int, end: int
) -> Optional[Tuple[int, int]]:
    """The inclusive page range that the character span ``[start, end)`` touches.

    Args:
        page_spans: the document's ``[(page, char_start, char_end), ...]`` (``schema.PAGE_SPANS``).
        start: first character of the span.
        end: end of the span (exclusive); an empty span counts its first character.

    Returns:
        ``(first_page, last_page)``; ``None`` when the span touches no page.
    """
    pages = [int(p) for p, s, e in page_spans if s < max(end, start + 1) and e > start]
    if not pages:
        return None
    return min(pages), max(pages)


def boxes_for_span(boxes: Sequence[TextBox], start: int, end: int) -> Dict[int, List[Rect]]:
    """The rectangles the characters ``[start, end)`` cover, by page.

    A line the span covers in part is cut in proportion to its characters (left to right), a
    block in proportion to its rows (top to bottom); lines of one paragraph that touch are
    joined into one rectangle.

    Args:
        boxes: the document's text boxes (``schema.TEXT_BOXES``), sorted by start.
        start: the span's first character.
        end: the span's end (exclusive).

    Returns:
        ``{page: [(x0, y0, x1, y1), ...]}``, pages and rectangles in text order; empty when
            the span covers no box.
    """
    first = bisect.bisect_left(boxes, start + 1, key=lambda b: b.end)
    pages: Dict[int, List[Rect]] = {}
    for box in boxes[first:]:
        if box.start >= end:
            break
        length = max(box.end - box.start, 1)
        a = max(start - box.start, 0) / length
        b = min(end - box.start, length) / length
        if a >= b:
            continue
        if box.kind == TEXT_BLOCK:
            height = box.y1 - box.y0
            rect = (box.x0, box.y0 + a * height, box.x1, box.y0 + b * height)
        else:
            width = box.x1 - box.x0
            rect = (box.x0 + a * width, box.y0, box.x0 + b * width, box.y1)
        rects = pages.setdefault(box.page, [])
        if rects and _continues(rects[-1], rect):
            last = rects[-1]
            rects[-1] = (min(last[0], rect[0]), min(last[1], rect[1]), max(last[2], rect[2]), max(last[3], rect[3]))
        else:
            rects.append(rect)
    return pages


def _continues(above: Sequence[float], below: Sequence[float]) -> bool:
    """Whether ``below`` is the next line of ``above``'s paragraph: it starts within half a
    line under it, in the same column (left edges within 4 pt, right edges within 40 pt)."""
    line = max(above[3] - above[1], below[3] - below[1], 1.0)
    return (
        -line <= below[1] - above[3] <= 0.5 * line
        and abs(below[0] - above[0]) <= 4 and abs(below[2] - above[2]) <= 40
    )
