"""Segments the embedding model can read whole: sizes bounded by its token window.

A sentence-embedding model reads a fixed number of word pieces (all-MiniLM-L6-v2: 256,
special tokens included) and silently drops the rest; HiQA's cascade header (§Hierarchical
Contextual Augmentor) is embedded in front of the text and spends part of that window. A
chapter segment of 3,000 characters is therefore embedded by its first ~900 characters only,
while a financial statement whose bold row labels were taken for headings becomes hundreds of
two-line segments that carry no context. [`fit_pieces_to_window`][llama_index_hiqa.parsers._token_budget.fit_pieces_to_window] evens this out, after
the heading cut and before the nodes are made:

1. **split** every text piece whose header + text exceeds the window, at paragraph, then
   line, then sentence, then word boundaries; every part keeps the piece's heading path, so
   the cascade is repeated in each (it is rendered per node);
2. **merge** runs of consecutive small text pieces of one section (same heading path, or
   siblings / parent and child) while header + text still fits; the merged piece takes the
   common heading path and keeps every heading line in its text.

Pieces still tile the document: splits and merges only move boundaries between adjacent
pieces, never drop or repeat a character.

With the ``rows`` view (``transforms.table_view``) a table is embedded by its cascade, its
title and header lines and its rows with their figures, so a table's cost is that view: a
financial statement of sixty rows runs to well over 256 word pieces, of which the model reads
the first 256. [`split_table_piece`][llama_index_hiqa.parsers._token_budget.split_table_piece] cuts such a table between rows into parts whose view fits; every
part keeps the table's title, column labels and cascade, lists only its own rows, and a later
part carries the table's Markdown header lines (``schema.TABLE_HEADER``), shown again before
its rows (``schema.TABLE_LEAD``). With HiQA's labels view (appendix A.4: cascade, title,
"Columns: ...", "Rows: ..." without the cells) a part's cost is its labels instead: a financial
statement's sixty row labels run to 600 word pieces. Table parts are never merged.

Token counts come from the model's own tokenizer (any LlamaIndex-style ``tokenizer`` callable:
text -> list of tokens); the counts of adjacent units are summed, which is exact for
word-piece and BPE tokenizers that split on whitespace first.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, List, Literal, Optional, Sequence, Tuple

from llama_index_hiqa import schema
from llama_index_hiqa.parsers._markdown_segments import Piece, row_label, table_head

Path = List[Tuple[str, str, int]]
# A table's embedding view (transforms.table_view): its rows with their figures, or HiQA's labels.
TableView = Literal["rows", "labels"]
TokenCounter = Callable[[str], int]

# Boundaries tried in order when a unit is too long: paragraph, line, sentence, word.
_SEPARATORS = (re.compile(r"\n\s*\n"), re.compile(r"\n"), re.compile(r"(?<=[.!?;])\s+"), re.compile(r"\s+"))
MIN_TEXT_TOKENS = 32  # never squeeze the text below this, however long the header
# Row labels a table's embedding view shows at most (CascadingMetadataTransform.max_table_labels
# takes its default from here): a part never holds more, so none is cut from its view.
MAX_TABLE_ROWS = 60
_MAX_CHARS_PER_TOKEN = 12


def token_counter(tokenizer: Callable[[str], Sequence[object]]) -> TokenCounter:
    """Count tokens of a text without the special tokens the tokenizer adds to every call.

    Args:
        tokenizer: a function from text to token ids.

    Returns:
        A function from text to its token count (short texts cached).
    """
    overhead = len(tokenizer(""))
    cache: Dict[str, int] = {}

    def count(text: str) -> int:
        if len(text) < 64:
            hit = cache.get(text)
            if hit is None:
                hit = cache[text] = max(0, len(tokenizer(text)) - overhead)
            return hit
        return max(0, len(tokenizer(text)) - overhead)

    return count


def _common_path(a: Path, b: Path) -> Path:
    out = []
    for x, y in zip(a, b):
        if x != y:
            break
        out.append(x)
    return out


def _units(text: str, start: int, end: int, level: int) -> List[Tuple[int, int]]:
    """``text[start:end]`` cut after each separator of ``level`` (separators stay attached)."""
    out, cursor = [], start
    for match in _SEPARATORS[level].finditer(text, start, end):
        if match.end() > cursor and match.start() > cursor:
            out.append((cursor, match.end()))
            cursor = match.end()
    if cursor < end:
        out.append((cursor, end))
    return out


def _cuts(text: str, start: int, end: int, budget: int, count: TokenCounter, level: int = 0) -> List[Tuple[int, int]]:
    """``(end offset, tokens)`` of consecutive parts of ``text[start:end]`` of at most
    ``budget`` tokens each, cut at the coarsest boundary that works."""
    if level >= len(_SEPARATORS):
        # One "word" longer than the window (a run of table dashes): cut by characters.
        out, cursor = [], start
        step = max(1, budget * 2)
        while cursor < end:
            nxt = min(end, cursor + step)
            out.append((nxt, count(text[cursor:nxt])))
            cursor = nxt
        return out
    cuts: List[Tuple[int, int]] = []
    current_start, current_tokens = start, 0
    for u_start, u_end in _units(text, start, end, level):
        tokens = count(text[u_start:u_end])
        if tokens > budget:
            if u_start > current_start:
                cuts.append((u_start, current_tokens))
            cuts.extend(_cuts(text, u_start, u_end, budget, count, level + 1))
            current_start, current_tokens = u_end, 0
        elif current_tokens + tokens > budget and u_start > current_start:
            cuts.append((u_start, current_tokens))
            current_start, current_tokens = u_start, tokens
        else:
            current_tokens += tokens
    if current_start < end:
        cuts.append((end, current_tokens))
    return cuts


def fit_pieces_to_window(
    text: str,
    pieces: Sequence[Piece],
    count: TokenCounter,
    window: int,
    header_tokens: Callable[[Path], int],
    merge: bool = True,
    table_view: TableView = "labels",
) -> List[Piece]:
    """Fit text pieces to the embedding model's window.

    Pieces over ``window`` tokens (header included) are split and small neighbours of one
    section merged up to it (see the module docstring).

    Args:
        text: the Markdown text the pieces tile.
        pieces: the pieces, in order.
        count: the token counter.
        window: the model's window, in tokens.
        header_tokens: what the cascade of a node with a given heading path costs, in tokens.
        merge: whether small neighbours are merged.
        table_view: the tables' embedding view, ``"rows"`` or ``"labels"`` (what a table part's
            cost is: [`split_table_piece`][llama_index_hiqa.parsers._token_budget.split_table_piece]).

    Returns:
        The pieces, still tiling ``text``.
    """
    split: List[Tuple[Piece, int]] = []  # piece, its text tokens
    for piece in pieces:
        if piece.kind == schema.KIND_TABLE:
            split.extend((part, -1) for part in split_table_piece(
                text, piece, count, window, header_tokens, table_view=table_view))
            continue
        if piece.kind != schema.KIND_TEXT:
            split.append((piece, -1))
            continue
        budget = max(MIN_TEXT_TOKENS, window - header_tokens(piece.path))
        # A word piece covers at most ~_MAX_CHARS_PER_TOKEN characters of prose: a piece far
        # longer than the budget needs no count of its own before it is cut.
        if piece.end - piece.start <= budget * _MAX_CHARS_PER_TOKEN:
            tokens = count(text[piece.start : piece.end])
            if tokens <= budget:
                split.append((piece, tokens))
                continue
        cursor = piece.start
        for cut, tokens in _cuts(text, piece.start, piece.end, budget, count):
            if cut > cursor:
                split.append((Piece(cursor, cut, list(piece.path)), tokens))
                cursor = cut
    if not merge:
        return [p for p, _ in split]
    out: List[Tuple[Piece, int]] = []
    for piece, tokens in split:
        if out and tokens >= 0 and out[-1][1] >= 0:
            prev, prev_tokens = out[-1]
            common = _common_path(prev.path, piece.path)
            related = len(common) >= min(len(prev.path), len(piece.path)) - 1
            if related and prev_tokens + tokens + header_tokens(common) <= window:
                out[-1] = (Piece(prev.start, piece.end, common), prev_tokens + tokens)
                continue
        out.append((piece, tokens))
    return [p for p, _ in out]


def table_view_tokens(count: TokenCounter, title: str, columns: Sequence[str], rows: Sequence[str]) -> int:
    """Tokens of a table's labels view without its cascade.

    Title, ``Columns: a; b`` and ``Rows: r1; r2`` lines (the view
    [`HCATableNode`][llama_index_hiqa.transforms.table_view.HCATableNode] renders), each label
    counted with its ``; `` separator.

    Args:
        count: the token counter.
        title: the table's title (``""`` for none).
        columns: its column labels.
        rows: its row labels.

    Returns:
        The token count.
    """
    total = count(title) + 1 if title else 0
    if columns:
        total += count("Columns:") + sum(count(c) + 1 for c in columns) + 1
    if rows:
        total += count("Rows:") + sum(count(r) + 1 for r in rows)
    return total


def table_lead_tokens(count: TokenCounter, title: str, header: str) -> int:
    """Tokens of the most a table part's lead can add to its view: its title and header lines.

    The ``rows`` view ([`table_lead`][llama_index_hiqa.transforms.table_view.table_lead]) shows
    them before a part whose text does not hold them.

    Args:
        count: the token counter.
        title: the table's title (``""`` for none).
        header: its Markdown header lines (``""`` for none).

    Returns:
        The token count.
    """
    return (count(title) + 1 if title else 0) + sum(count(line) + 1 for line in header.splitlines() if line.strip())


def split_table_piece(
    text: str,
    piece: Piece,
    count: TokenCounter,
    window: int,
    header_tokens: Callable[[Path], int],
    max_rows: int = MAX_TABLE_ROWS,
    table_view: TableView = "labels",
) -> List[Piece]:
    """``piece`` (a table) cut between rows into parts that fit ``window``.

    Each part's embedding view fits ``window``, and a part lists at most ``max_rows`` rows.
    The ``rows`` view is the cascade, the table's title and header lines and the part's rows
    with their figures: the caption and header lines the piece opens with are counted in every
    part (the first holds them in its text, the others show them as their lead), and a cut
    may fall before any row line. The ``labels`` view is the cascade, title, column labels and
    the part's row labels: a cut falls before a labelled row. The parts tile the piece; the
    first keeps the caption and header lines in its text, the others carry the header in
    ``table_header``. A single row longer than the budget is a part of its own (over the
    window: the model reads its first word pieces).

    Args:
        text: the Markdown text.
        piece: the table piece.
        count: the token counter.
        window: the model's window, in tokens.
        header_tokens: what the cascade of a node with a given heading path costs, in tokens.
        max_rows: the most rows a part lists.
        table_view: ``"rows"`` or ``"labels"`` (``CascadingMetadataTransform.table_view``).

    Returns:
        The parts, in order; ``[piece]`` when it fits already.
    """
    rows_from, head = table_head(text, piece.start, piece.end)
    header = head or piece.table_header
    by_rows = table_view == "rows"
    if by_rows:
        fixed = (header_tokens(piece.path) + table_lead_tokens(count, piece.table_title, header)
                 + count(text[piece.start : rows_from]))
        budget = max(MIN_TEXT_TOKENS, window - fixed)
        fits = count(text[rows_from : piece.end]) <= budget
    else:
        fixed = header_tokens(piece.path) + table_view_tokens(count, piece.table_title, piece.table_columns, ())
        budget = max(MIN_TEXT_TOKENS, window - fixed - count("Rows:"))
        fits = fixed + table_view_tokens(count, "", (), piece.table_rows) <= window
    if len(piece.table_rows) <= max_rows and fits:
        return [piece]
    lines: List[Tuple[int, str, int]] = []  # line start, its row label, its tokens in the view
    offset = rows_from
    for line in text[rows_from : piece.end].splitlines(keepends=True):
        label = row_label(line)
        cost = (count(line) if line.strip() else 0) if by_rows else (count(label) + 1 if label else 0)
        lines.append((offset, label, cost))
        offset += len(line)
    labelled = [i for i, (_, label, _) in enumerate(lines) if label]
    # A header row without a |---| line is the columns, not a row (as the parser reads it).
    if len(labelled) == len(piece.table_rows) + 1 and [lines[i][1] for i in labelled[1:]] == piece.table_rows:
        lines[labelled[0]] = (lines[labelled[0]][0], "", lines[labelled[0]][2] if by_rows else 0)
    parts: List[Piece] = []
    part_start, used, held = piece.start, 0, 0
    labels: List[str] = []
    for line_start, label, cost in lines:
        # A cut before any row (an unlabelled one continues the row above, but its figures
        # cost as much), never before the part holds one.
        if cost and held and (used + cost > budget or (label and len(labels) >= max_rows)):
            parts.append(_table_part(piece, part_start, line_start, labels, header))
            part_start, used, held, labels = line_start, 0, 0, []
        if label:
            labels.append(label)
        used += cost
        held += 1 if cost else 0
    parts.append(_table_part(piece, part_start, piece.end, labels, header))
    return parts


def _table_part(piece: Piece, start: int, end: int, rows: List[str], header: str) -> Piece:
    return Piece(
        start, end, list(piece.path), schema.KIND_TABLE, piece.table_title, list(piece.table_columns),
        list(rows), piece.table_header if start == piece.start else header,
    )


def cascade_header_counter(
    count: TokenCounter, title: str, separator: str = " > "
) -> Callable[[Path], int]:
    """Tokens of the cascade header ``title > 1 Chapter > 1.2 Section`` of a heading path.

    The label format of [`Heading`][llama_index_hiqa.schema.Heading], cached per path, plus the
    blank line between header and text.

    Args:
        count: the token counter.
        title: the document title (the cascade's root).
        separator: what joins the labels.

    Returns:
        A function from a heading path to its header's token count.
    """
    cache: Dict[Tuple[Tuple[str, str, int], ...], int] = {}

    def header(path: Path) -> int:
        key = tuple(path)
        if key not in cache:
            labels = [" ".join(p for p in (number, title_) if p) for number, title_, _ in path]
            cache[key] = count(separator.join([p for p in (title, *labels) if p])) + 1
        return cache[key]

    return header


def resolve_window(window: Optional[int], tokenizer: Optional[Callable[[str], Sequence[object]]]) -> Optional[Tuple[TokenCounter, int]]:
    """A token counter and window when both are known.

    Args:
        window: the model's window in tokens; ``None`` or 0 when unknown.
        tokenizer: a function from text to token ids; ``None`` when unknown.

    Returns:
        ``(counter, window)``, else ``None`` (character limits only).
    """
    if not window or tokenizer is None:
        return None
    return token_counter(tokenizer), int(window)
