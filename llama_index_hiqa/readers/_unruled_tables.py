"""Unruled tables of the fast engine: aligned columns of values found from word positions.

HiQA embeds a table by its title, column and row labels (appendix A.4, B.1 of "HiQA: A
Hierarchical Contextual Augmentation RAG for Multi-Documents QA"), which needs the table as a
table. Financial statements, datasheet parameter tables and dosing tables are mostly set
without vertical rules, so the ruled-grid search of the fast engine misses them and their rows
are embedded as lines of numbers without their column headers.

This finds them from the page's words alone (one ``get_text("words")`` call, no drawing or
character analysis), at near plain-text speed:

1. words are grouped into visual rows (vertical overlap) and each row into cells at gaps
   wider than a space ([`CELL_GAP`][llama_index_hiqa.readers._unruled_tables.CELL_GAP]);
2. a *data row* has a label cell on the left and at least one value cell (a number, "$ 1,234",
   "(5,001)", "12.5%", "—") to its right; a table is a run of at least [`MIN_DATA_ROWS`][llama_index_hiqa.readers._unruled_tables.MIN_DATA_ROWS] data
   rows, with short label-only rows ("Current assets:") allowed between them;
3. its columns are the overlapping x-ranges of the non-label cells of its data rows (numbers of
   one column overlap, numbers of two columns do not), kept when at least two rows use them;
4. up to [`MAX_HEADER_ROWS`][llama_index_hiqa.readers._unruled_tables.MAX_HEADER_ROWS] short rows right above it whose cells sit over the columns
   are its header ("2018 2017", "Min Typ Max Unit"), stacked rows joined per column.

The Markdown keeps the row labels, the column headers and every value; the line above the
table (its caption or heading) stays a text line, where the segment parser takes the title.
"""

from __future__ import annotations

import re
from typing import Any, List, Optional, Sequence, Tuple

CELL_GAP = 6.0  # points: wider than a word space of body or table type, narrower than a column gap
MIN_DATA_ROWS = 3
MAX_HEADER_ROWS = 3
MAX_LABEL_ONLY_RUN = 2
MAX_LABEL_CHARS = 120
_VALUE_RE = re.compile(r"^[$€£(]*[-–—+]?\$?\(?\d[\d,]*(\.\d+)?\)?%?[)]*$|^[-–—]+$|^\$$|^%$|^\)$")

Box = Tuple[float, float, float, float]
_CURRENCY = frozenset({"$", "€", "£"})
_YEAR_RE = re.compile(r"^(19|20)\d\d\W{0,2}$")


class _Cell:
    __slots__ = ("x0", "y0", "x1", "y1", "text", "value")

    def __init__(self, words: Sequence[Sequence[Any]]) -> None:
        self.x0, self.y0 = min(w[0] for w in words), min(w[1] for w in words)
        self.x1, self.y1 = max(w[2] for w in words), max(w[3] for w in words)
        self.text = " ".join(str(w[4]) for w in words)
        self.value = all(_VALUE_RE.match(str(w[4])) for w in words)


def _rows(words: Sequence[Sequence[Any]]) -> List[List[_Cell]]:
    rows: List[List[Sequence[Any]]] = []
    for word in sorted(words, key=lambda w: ((w[1] + w[3]) / 2, w[0])):
        for row in reversed(rows[-2:]):
            top, bottom = min(w[1] for w in row), max(w[3] for w in row)
            if min(bottom, word[3]) - max(top, word[1]) >= 0.5 * min(word[3] - word[1], bottom - top):
                row.append(word)
                break
        else:
            rows.append([word])
    out = []
    for row in sorted(rows, key=lambda r: min(w[1] for w in r)):
        row.sort(key=lambda w: w[0])
        cells, current = [], [row[0]]
        for word in row[1:]:
            if word[0] - current[-1][2] > CELL_GAP:
                cells.append(_Cell(current))
                current = []
            current.append(word)
        cells.append(_Cell(current))
        out.append(_join_currency(cells))
    return out


def _join_currency(cells: List[_Cell]) -> List[_Cell]:
    """A "$" set apart from its figure (statements align the signs in a column of their own)
    is one cell with it: the sign is not a column."""
    out: List[_Cell] = []
    pending: Optional[_Cell] = None
    for cell in cells:
        if cell.text in _CURRENCY and pending is None:
            pending = cell
            continue
        if pending is not None:
            merged = _Cell([(pending.x0, pending.y0, pending.x1, pending.y1, pending.text)])
            merged.x1, merged.y0, merged.y1 = cell.x1, min(pending.y0, cell.y0), max(pending.y1, cell.y1)
            merged.text, merged.value = pending.text + cell.text, cell.value
            cell, pending = merged, None
        out.append(cell)
    if pending is not None:
        out.append(pending)
    return out


def _is_data(row: List[_Cell]) -> bool:
    return (
        len(row) >= 2 and not row[0].value and len(row[0].text) <= MAX_LABEL_CHARS
        and any(c.value for c in row[1:])
    )


def _is_values_only(row: List[_Cell]) -> bool:
    """A row of values without a label (its label wrapped onto the line above)."""
    return len(row) >= 2 and all(c.value for c in row)


def _is_year_header(row: List[_Cell]) -> bool:
    """"(Millions) 2018 2017", "2022 2021 Change": a data row by its shape, the years'
    header by its content (years, with words between them, and no other figure)."""
    years = [c for c in row[1:] if _YEAR_RE.match(c.text.strip("()"))]
    return bool(years) and all(c in years or not c.value for c in row[1:])


def _is_label_only(row: List[_Cell]) -> bool:
    return len(row) == 1 and not row[0].value and len(row[0].text) <= 80


def _columns(rows: List[List[_Cell]]) -> List[Tuple[float, float]]:
    """Overlapping x-ranges of the non-label cells, merged; kept when two or more rows use them."""
    spans = sorted((c.x0, c.x1) for row in rows for c in row[1:])
    merged: List[List[float]] = []
    for x0, x1 in spans:
        if merged and x0 <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], x1)
            merged[-1][2] += 1
        else:
            merged.append([x0, x1, 1])
    return [(x0, x1) for x0, x1, n in merged if n >= 2]


def _column_of(cell: _Cell, columns: List[Tuple[float, float]]) -> Optional[int]:
    centre = (cell.x0 + cell.x1) / 2
    best, distance = None, None
    for i, (x0, x1) in enumerate(columns):
        d = 0.0 if x0 - 2 <= centre <= x1 + 2 else min(abs(centre - x0), abs(centre - x1))
        if distance is None or d < distance:
            best, distance = i, d
    return best if distance is not None and distance <= 30 else None


def _table(rows: List[List[_Cell]], header: List[List[_Cell]]) -> Optional[Tuple[Box, str]]:
    columns = _columns([r for r in rows if _is_data(r)])
    if not columns:
        return None
    left = columns[0][0]
    grid: List[List[str]] = []
    for row in rows:
        label = " ".join(c.text for c in row if c.x1 <= left + 1 and not (c.value and _column_of(c, columns) is not None))
        values = [""] * len(columns)
        for cell in row:
            if cell.x1 <= left + 1 and not cell.value:
                continue
            index = _column_of(cell, columns)
            if index is None:
                label = f"{label} {cell.text}".strip()
            else:
                values[index] = f"{values[index]} {cell.text}".strip()
        grid.append([label] + values)
    titles = [""] * len(columns)
    corner = ""
    for row in header:
        for cell in row:
            if cell.x0 < left - 40:
                corner = f"{corner} {cell.text}".strip()
                continue
            index = _column_of(cell, columns)
            if index is not None:
                titles[index] = f"{titles[index]} {cell.text}".strip()
    # "$" and ")" set as cells of their own belong to their value.
    grid = [[re.sub(r"^\$ (?=\S)", "$", v).replace(" )", ")").replace(" %", "%") for v in r] for r in grid]
    cells = [c for row in header + rows for c in row]
    box = (min(c.x0 for c in cells), min(c.y0 for c in cells), max(c.x1 for c in cells), max(c.y1 for c in cells))
    lines = ["|" + "|".join([corner] + titles).replace("\n", " ") + "|", "|" + "|".join(["---"] * (len(columns) + 1)) + "|"]
    lines += ["|" + "|".join(v.replace("|", "\\|") for v in r) + "|" for r in grid]
    return box, "\n".join(lines)


def unruled_tables(words: Sequence[Sequence[Any]], skip: Sequence[Box] = ()) -> List[Tuple[Box, str]]:
    """The unruled tables among a page's words, as Markdown.

    Args:
        words: PyMuPDF ``get_text("words")`` tuples of one page.
        skip: boxes of ruled tables; words whose centre lies in one are left out.

    Returns:
        ``(bbox, Markdown)`` a table, in reading order.
    """
    kept = [
        w for w in words
        if not any(b[0] - 2 <= (w[0] + w[2]) / 2 <= b[2] + 2 and b[1] - 2 <= (w[1] + w[3]) / 2 <= b[3] + 2 for b in skip)
    ]
    if not kept:
        return []
    rows = _rows(kept)
    tables: List[Tuple[Box, str]] = []
    i = 0
    while i < len(rows):
        if not _is_data(rows[i]):
            i += 1
            continue
        start, end, data, gap_run = i, i, 0, 0
        j = i
        while j < len(rows):
            row = rows[j]
            height = max(c.y1 - c.y0 for c in rows[j - 1]) if j > start else 0
            if j > start and row[0].y0 - max(c.y1 for c in rows[j - 1]) > 2.5 * max(height, 6.0):
                break
            if j > start and _is_year_header(row):
                break  # a new years header starts the next table
            if _is_data(row) or (j > start and _is_values_only(row)):
                data, gap_run, end = data + 1, 0, j
            elif _is_label_only(row) and gap_run < MAX_LABEL_ONLY_RUN:
                gap_run += 1
            else:
                break
            j += 1
        if _is_year_header(rows[start]) and end > start:
            start, data = start + 1, data - 1  # the years row heads the table
            header_rows = [rows[start - 1]]
        else:
            header_rows = []
        # Under a years header two rows make a table ("Cost of sales", "as a % of revenues").
        if data >= (MIN_DATA_ROWS - 1 if header_rows else MIN_DATA_ROWS):
            header = list(header_rows)
            k = start - 1 - len(header_rows)
            body_columns = _columns([r for r in rows[start:end + 1] if _is_data(r)])
            first_left = body_columns[0][0] if body_columns else 0.0
            while k >= 0 and len(header) < MAX_HEADER_ROWS:
                row = rows[k]
                # A header sits over the value columns (with at most a short label-column
                # title such as "Parameter"); a caption or a text line does not.
                over = [c for c in row if c.x0 >= first_left - 40]
                under = [c for c in row if c.x0 < first_left - 40]
                if not over or len(under) > 1 or any(len(c.text.split()) > 4 for c in under) \
                        or sum(len(c.text.split()) for c in row) > 16 or _is_data(row):
                    break
                header.insert(0, row)
                k -= 1
            table = _table(rows[start:end + 1], header)
            if table is not None:
                tables.append(table)
            i = end + 1
        else:
            i = max(j, i + 1)
    return tables
