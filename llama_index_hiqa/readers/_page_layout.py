"""Page geometry of the fast engine: text lines with their font facts, ruled-table grids,
reading order of two-column pages, and page joining with contiguous spans."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Dict, Iterable, List, Sequence, Tuple

PAGE_JOINER = "\n\n"
_DIGITS_RE = re.compile(r"\d+")
_NOT_WORD_RE = re.compile(r"[^\w#]+")


class _Line:
    __slots__ = ("text", "bbox", "size", "bold", "block")

    def __init__(self, text: str, bbox: Tuple[float, ...], size: float, bold: bool, block: Any):
        self.text, self.bbox, self.size, self.bold, self.block = text, bbox, size, bold, block

    def in_margin(self, height: float, share: float) -> bool:
        return self.bbox[3] <= height * share or self.bbox[1] >= height * (1 - share)


class _PageLines:
    __slots__ = ("number", "width", "height", "lines")

    def __init__(self, number: int, width: float, height: float, lines: List[_Line]):
        self.number, self.width, self.height, self.lines = number, width, height, lines


def _page_lines(page: Any, number: int) -> _PageLines:
    """Text lines of a page with their dominant font size and weight (one get_text call)."""
    lines: List[_Line] = []
    # pymupdf (~1.5 s to import) loads when a PDF is read, not with the package.
    import pymupdf

    # Text flags without images: image blocks are read separately (get_image_info), cheaper.
    data = page.get_text("dict", flags=pymupdf.TEXTFLAGS_TEXT)
    for b_idx, block in enumerate(data.get("blocks", [])):
        for line in block.get("lines", []):
            spans = [s for s in line.get("spans", []) if s.get("text")]
            text = "".join(s["text"] for s in spans)
            if not text.strip():
                continue
            weights: Counter[float] = Counter()
            bold_chars = 0
            for s in spans:
                n = len(s["text"].strip())
                weights[round(float(s["size"]) * 2) / 2] += n
                if s.get("flags", 0) & 16 or "bold" in s.get("font", "").lower():
                    bold_chars += n
            size = weights.most_common(1)[0][0]
            total = sum(weights.values()) or 1
            lines.append(
                _Line(text, tuple(line["bbox"]), size, bold_chars >= 0.8 * total, (number, b_idx))
            )
    rect = page.rect
    return _PageLines(number, float(rect.width), float(rect.height), lines)


def _body_font_size(pages: List[_PageLines]) -> float:
    weights: Counter[float] = Counter()
    for page in pages:
        for line in page.lines:
            weights[line.size] += len(line.text.strip())
    return float(weights.most_common(1)[0][0]) if weights else 0.0


def _rules(page: Any) -> Tuple[List[Tuple[float, float, float]], List[Tuple[float, float, float]]]:
    """Horizontal ``(y, x0, x1)`` and vertical ``(x, y0, y1)`` rules: stroked lines, thin
    rectangles and the edges of stroked boxes (filled shading is not a rule)."""
    horizontal: List[Tuple[float, float, float]] = []
    vertical: List[Tuple[float, float, float]] = []
    for drawing in page.get_drawings():
        stroked = "s" in (drawing.get("type") or "")
        for item in drawing["items"]:
            if item[0] == "l":
                a, b = item[1], item[2]
                if abs(a.y - b.y) < 1 and abs(a.x - b.x) > 5:
                    horizontal.append((a.y, min(a.x, b.x), max(a.x, b.x)))
                elif abs(a.x - b.x) < 1 and abs(a.y - b.y) > 5:
                    vertical.append((a.x, min(a.y, b.y), max(a.y, b.y)))
            elif item[0] == "re":
                r = item[1]
                if r.height < 3 and r.width > 5:
                    horizontal.append(((r.y0 + r.y1) / 2, r.x0, r.x1))
                elif r.width < 3 and r.height > 5:
                    vertical.append(((r.x0 + r.x1) / 2, r.y0, r.y1))
                elif stroked and r.width > 5 and r.height > 5:
                    horizontal += [(r.y0, r.x0, r.x1), (r.y1, r.x0, r.x1)]
                    vertical += [(r.x0, r.y0, r.y1), (r.x1, r.y0, r.y1)]
    return horizontal, vertical


def _cluster(values: Iterable[float], tol: float = 2.0) -> List[float]:
    out: List[float] = []
    for v in sorted(values):
        if not out or v - out[-1] > tol:
            out.append(v)
    return out


def _grids(
    horizontal: Sequence[Tuple[float, float, float]], vertical: Sequence[Tuple[float, float, float]], min_rows: int
) -> List[Tuple[List[float], List[float]]]:
    """Connected components of crossing rules that form a grid: (row ys, column xs)."""
    tol = 2.0
    n_h = len(horizontal)
    parent = list(range(n_h + len(vertical)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, (y, x0, x1) in enumerate(horizontal):
        for j, (x, y0, y1) in enumerate(vertical):
            if x0 - tol <= x <= x1 + tol and y0 - tol <= y <= y1 + tol:
                parent[find(i)] = find(n_h + j)
    groups: Dict[int, List[int]] = {}
    for i in range(len(parent)):
        groups.setdefault(find(i), []).append(i)
    grids = []
    for members in groups.values():
        ys = _cluster(horizontal[i][0] for i in members if i < n_h)
        xs = _cluster(vertical[i - n_h][0] for i in members if i >= n_h)
        if len(ys) >= min_rows and len(xs) >= 2:
            grids.append((ys, xs))
    return sorted(grids)


def _grid_markdown(ys: List[float], xs: List[float], words: Sequence[Sequence[Any]]) -> str:
    """A Markdown table: every word goes to the grid cell holding its centre."""
    cells: Dict[Tuple[int, int], List[Sequence[Any]]] = {}
    for word in words:
        cx, cy = (word[0] + word[2]) / 2, (word[1] + word[3]) / 2
        if not (xs[0] <= cx <= xs[-1] and ys[0] <= cy <= ys[-1]):
            continue
        row = max(i for i in range(len(ys) - 1) if ys[i] <= cy) if cy < ys[-1] else len(ys) - 2
        col = max(i for i in range(len(xs) - 1) if xs[i] <= cx) if cx < xs[-1] else len(xs) - 2
        cells.setdefault((row, col), []).append(word)
    if not cells:
        return ""
    grid: List[List[str]] = []
    for r in range(len(ys) - 1):
        row_cells: List[str] = []
        for c in range(len(xs) - 1):
            inside = sorted(cells.get((r, c), []), key=lambda w: (w[5], w[6], w[7]))
            row_cells.append(" ".join(str(w[4]) for w in inside).replace("|", "\\|"))
        if any(row_cells):
            grid.append(row_cells)
    width = len(xs) - 1
    lines = ["|" + "|".join(grid[0]) + "|", "|" + "|".join(["---"] * width) + "|"]
    lines += ["|" + "|".join(r) + "|" for r in grid[1:]]
    return "\n".join(lines)


def _normalise(text: str) -> str:
    """Running-line key: digits (page numbers, dates) folded; case, whitespace and
    punctuation ignored (OCR reads one running header with different spacing and drops
    separators such as "|" on some pages)."""
    return _NOT_WORD_RE.sub("", _DIGITS_RE.sub("#", text).lower())


def _inside(inner: Sequence[float], outer: Sequence[float], tol: float = 2.0) -> bool:
    """Whether the centre of box ``inner`` lies in box ``outer``."""
    cx, cy = (inner[0] + inner[2]) / 2, (inner[1] + inner[3]) / 2
    return outer[0] - tol <= cx <= outer[2] + tol and outer[1] - tol <= cy <= outer[3] + tol


# A page item to place in reading order: its bbox, its kind and what it carries.
PageItem = Tuple[Tuple[float, ...], str, Any]


def _reading_order(items: List[PageItem], width: float) -> List[PageItem]:
    """Order page items top to bottom, reading two-column bands column by column.

    Full-width items (crossing the page middle) split the page into bands. A band is read
    left column first only when both sides hold running text (wide lines); otherwise (a label
    on the left, figures on the right, as in unruled financial tables) it stays in line order
    so each row keeps its label and numbers together. PyMuPDF's ``sort=True`` orders by y
    only and would interleave two text columns line by line.
    """
    mid = width / 2
    # Same baseline first (bottom edge, 2 pt buckets), then left to right.
    items = sorted(items, key=lambda it: (round(it[0][3] / 2), it[0][0]))
    ordered: List[PageItem] = []
    band: List[PageItem] = []

    def is_column(side: List[PageItem]) -> bool:
        wide = [it for it in side if it[0][2] - it[0][0] >= width * 0.25]
        return len(wide) >= 2 and len(wide) >= 0.5 * len(side)

    def close_band() -> None:
        left = [it for it in band if it[0][2] <= mid + 1]
        right = [it for it in band if it[0][2] > mid + 1]
        ordered.extend(left + right if is_column(left) and is_column(right) else band)
        band.clear()

    for item in items:
        x0, _, x1, _ = item[0]
        if x0 < mid - 1 and x1 > mid + 1:  # spans the middle: full width
            close_band()
            ordered.append(item)
        else:
            band.append(item)
    close_band()
    return ordered


def _join_pages(page_texts: List[str]) -> Tuple[str, List[List[int]]]:
    """Join pages with PAGE_JOINER; each page's span owns the joiner after it (contiguous)."""
    spans: List[List[int]] = []
    pieces: List[str] = []
    start = 0
    for i, page_text in enumerate(page_texts):
        piece = page_text + (PAGE_JOINER if i < len(page_texts) - 1 else "")
        pieces.append(piece)
        spans.append([i, start, start + len(piece)])
        start += len(piece)
    return "".join(pieces), spans


def _offset_below(bbox: List[float], page: _PageLines, text: str, start: int, end: int) -> int:
    """Where an uncaptioned image belongs: before the first text line below it on its page."""
    below = [l for l in page.lines if l.bbox[1] >= bbox[3] - 2 and l.text.strip()]
    below.sort(key=lambda l: l.bbox[1])
    for line in below:
        idx = text.find(line.text.strip(), start, end)
        if idx >= 0:
            return idx
    return end if end > start else start
