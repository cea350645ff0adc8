"""Shared helpers of the two HiQA segment parsers (HiQA paper, §Markdown Formatter).

Both [`LayoutMarkdownParser`][llama_index_hiqa.parsers.layout_markdown.LayoutMarkdownParser] and
[`MarkdownFormatterParser`][llama_index_hiqa.parsers.markdown_formatter.MarkdownFormatterParser] end the same
way: Markdown text is cut at its headings into *segments* (one per chapter of any depth),
tables become segments of their own inside their chapter, long segments are sub-split, and
every piece becomes a node carrying the shared schema facts. This module holds that common
part; what a heading is and what its number says is [`llama_index_hiqa.headings`][llama_index_hiqa.headings].
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from llama_index.core.bridge.pydantic import Field
from llama_index.core.node_parser import NodeParser
from llama_index.core.schema import BaseNode, Document, NodeRelationship, TextNode

from llama_index_hiqa import schema
from llama_index_hiqa.headings import HeadingNumber, clean_inline, iter_lines, markdown_headings
from llama_index_hiqa.page_geometry import pages_for_span
from llama_index_hiqa.readers.source_files import SourceReading, has_layout_facts, read_source_files

_TABLE_LINE_RE = re.compile(r"^\s*\|.*\|\s*$")
_TABLE_SEP_RE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_CAPTION_RE = re.compile(r"^(table|tab\.)\s*[\dA-Z][\w.\-]*\b", re.I)


class SegmentNodeParser(NodeParser):
    """Base of the pack's segment parsers (layout, LLM formatter, line-number sectioning).

    Documents of another reader (``SimpleDirectoryReader``'s pages or raw PDF text) are read
    again from the file they name (``read_source_files``), so a parser dropped into an app in
    place of ``SentenceSplitter`` cuts the segments it cuts from ``PDFLayoutReader`` documents.

    LlamaIndex's post-processing (ids, relationships, metadata inheritance) runs on the nodes
    without the document-only facts (a filing's layout facts would be copied into every node),
    and the exact character spans the parsers know are restored after it: the base class finds
    spans again by text search, which a repeated sentence fools.
    """

    read_source_files: bool = Field(
        default=True,
        description=(
            "Documents without layout facts (SimpleDirectoryReader's) whose file_path names a "
            "PDF, HTML, DOCX, Markdown or text file are read again with PDFLayoutReader, once "
            "per file, giving the segments and document ids of PDFLayoutReader's documents. "
            "False: their text is cut as it is."
        ),
    )

    def source_documents(self, nodes: Sequence[BaseNode]) -> SourceReading:
        """The documents to cut: ``nodes`` as documents, files read again (``read_source_files``).

        Args:
            nodes: the documents (or nodes) given to the parser.

        Returns:
            The documents (or nodes) in order, and those without layout facts left as given.
        """
        documents = list(nodes)  # a node stays what it is; each parser reads it as it did
        if not self.read_source_files:
            without = [doc for doc in documents if not has_layout_facts(doc)]
            return SourceReading(documents, without, {d.doc_id: "read_source_files=False" for d in without})
        return read_source_files(documents)

    def _postprocess_parsed_nodes(
        self, nodes: List[BaseNode], parent_doc_map: Dict[str, Document]
    ) -> List[BaseNode]:
        return finish_nodes(
            super()._postprocess_parsed_nodes(nodes, schema.without_document_only_facts(parent_doc_map))
        )


class LevelResolver:
    """Gives every heading of one document its true depth, in reading order.

    Numbers win: ``1.2.3`` is level 3 whatever its font, ``Chapter 3`` level 1. SEC filings:
    ``Part`` is level 1 and an ``Item`` one below the last part (level 1 in filings without
    parts). Unnumbered headings are placed relative to the last numbered one by their style
    (Markdown ``#`` count, larger = smaller type): smaller type -> one level below; the same
    type -> below an Item/Part/Chapter (filings set "OVERVIEW" in the same type as
    "Item 7."), beside a decimal section; bigger type -> as many levels up as styles up.
    Before any numbered heading, the style rank (relative to the biggest style) is the level.
    """

    def __init__(self, min_style: int = 1) -> None:
        self.min_style = min_style
        self.seen_part = False
        self.last: Optional[Tuple[int, int, str]] = None  # level, style, family

    def level(self, parsed: HeadingNumber, style: int) -> int:
        """The depth of the next heading in reading order (the rules of the class docstring).

        Args:
            parsed: the heading's number, title, implied level and family
                ([`parse_heading_number`][llama_index_hiqa.headings.parse_heading_number]).
            style: its style rank (Markdown ``#`` count; larger = smaller type).

        Returns:
            The level, 1 = top.
        """
        if parsed.family == "part":
            self.seen_part = True
            lvl = 1
        elif parsed.family == "item":
            lvl = 2 if self.seen_part else 1
        elif parsed.family == "chapter":
            lvl = 1
        elif parsed.level is not None:
            lvl = parsed.level
        elif self.last is None:
            return max(1, style - self.min_style + 1)
        else:
            last_level, last_style, family = self.last
            if style > last_style or (style == last_style and family != "decimal"):
                return last_level + 1
            if style == last_style:
                return last_level
            return max(1, last_level - (last_style - style))
        self.last = (lvl, style, parsed.family)
        return lvl


# --- Markdown structure ------------------------------------------------------------------


@dataclass
class HeadingMark:
    """A heading found in a text: its line span and what it says."""

    start: int
    end: int
    number: str
    title: str
    level: int


@dataclass
class Piece:
    """One future node: a span of the Markdown text with its chapter and kind."""

    start: int
    end: int
    path: List[Tuple[str, str, int]]
    kind: str = schema.KIND_TEXT
    table_title: str = ""
    table_columns: List[str] = field(default_factory=list)
    table_rows: List[str] = field(default_factory=list)
    table_header: str = ""  # a later part of a split table: the header lines it repeats


def drop_title_marks(marks: List[HeadingMark], title: Optional[str]) -> List[HeadingMark]:
    """Leave out unnumbered headings that repeat the document title.

    The title is the root of the cascade already, and ``HEADING_PATH`` must not hold it (the
    title's segment then has an empty path, like any preamble).

    Args:
        marks: the document's headings, in order.
        title: the document title; ``None`` or ``""`` keeps every mark.

    Returns:
        The marks without the title's repeats.
    """
    key = clean_inline(title or "").lower()
    if not key:
        return list(marks)
    return [m for m in marks if m.number or clean_inline(m.title).lower() != key]


def merge_stacked_headings(
    text: str, marks: Sequence[HeadingMark], max_title_chars: int = 200
) -> List[HeadingMark]:
    """One heading for a stack of same-level headings with nothing between them.

    Financial statements are titled by stacked lines ("ADOBE INC." / "CONSOLIDATED STATEMENTS
    OF CASH FLOWS" / "(In millions)"), which PDF-to-Markdown tools emit as separate headings of
    one level. Kept apart, each closes the one before, so the table under them loses the
    statement's name from its cascade and the lines above become heading-only segments.
    Numbered headings are never merged: "Item 1. Business" directly followed by "General"
    keeps "General" as the first section of Item 1.

    Args:
        text: the Markdown text the marks point into.
        marks: its headings, in order.
        max_title_chars: the longest merged title, in characters; a stack that would exceed
            it stays apart.

    Returns:
        The marks, each stack merged into one.
    """
    out: List[HeadingMark] = []
    for mark in marks:
        prev = out[-1] if out else None
        if (
            prev is not None
            and mark.level == prev.level
            and not mark.number
            and not prev.number
            and not text[prev.end : mark.start].strip()
            and len(prev.title) + len(mark.title) < max_title_chars
        ):
            out[-1] = HeadingMark(prev.start, mark.end, prev.number, f"{prev.title} {mark.title}", prev.level)
        else:
            out.append(mark)
    return out


def heading_paths(marks: Sequence[HeadingMark]) -> List[List[Tuple[str, str, int]]]:
    """The path from the top heading down to each mark (a stack walk over levels).

    Args:
        marks: the headings, in order.

    Returns:
        One path a mark: ``[(number, title, level), ...]`` ending with the mark itself.
    """
    stack: List[Tuple[str, str, int]] = []
    paths = []
    for mark in marks:
        while stack and stack[-1][2] >= mark.level:
            stack.pop()
        stack.append((mark.number, mark.title, mark.level))
        paths.append(list(stack))
    return paths


def _split_cells(line: str) -> List[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") else inner
    return [clean_inline(c.replace("<br>", " ")) for c in inner.split("|")]


def find_tables(
    text: str, start: int, end: int, all_lines: Optional[List[Tuple[int, int, str]]] = None
) -> List[Tuple[int, int, str, List[str], List[str]]]:
    """Markdown tables inside ``text[start:end]``.

    The title is a caption line ("Table 3. Pin functions") just above or below the table,
    else the nearest non-empty line above it when short; the span includes that caption
    when it sits directly above, so the table node carries its own title.

    Args:
        text: the whole Markdown text.
        start: start of the region searched.
        end: end of the region searched (exclusive).
        all_lines: [`iter_lines`][llama_index_hiqa.headings.iter_lines] of ``text`` when the caller
            has them; ``None`` computes them.

    Returns:
        ``(start, end, title, column labels, row labels)`` a table, in order.
    """
    all_lines = all_lines if all_lines is not None else iter_lines(text)
    # the lines inside [start, end), found by bisection (one chapter of a long document)
    first = bisect.bisect_left(all_lines, (start, -1, ""))
    last = bisect.bisect_right(all_lines, (end, end + 1, ""))
    lines = [ln for ln in all_lines[first:last] if ln[0] >= start and ln[1] <= end]
    tables = []
    i = 0
    while i < len(lines):
        if _TABLE_LINE_RE.match(lines[i][2]):
            j = i
            while j + 1 < len(lines) and _TABLE_LINE_RE.match(lines[j + 1][2]):
                j += 1
            block = lines[i : j + 1]
            if len(block) >= 2:
                t_start, t_end = block[0][0], block[-1][1]
                header = _split_cells(block[0][2])
                body = [ln for ln in block[1:] if not _TABLE_SEP_RE.match(ln[2])]
                rows = [c[0] for c in (_split_cells(ln[2]) for ln in body) if c and c[0]]
                title = ""
                k = i - 1
                while k >= 0 and not lines[k][2].strip():
                    k -= 1
                above = clean_inline(lines[k][2].lstrip("#")) if k >= 0 else ""
                # (never the chapter's own heading line, which opens the span)
                if k >= 0 and lines[k][0] > start and above and not _TABLE_LINE_RE.match(lines[k][2]) and (
                    _CAPTION_RE.match(above) or len(above.split()) <= 12
                ) and not markdown_headings(lines[k][2]):
                    title = above
                    t_start = lines[k][0]
                else:
                    m = j + 1
                    while m < len(lines) and not lines[m][2].strip():
                        m += 1
                    below = clean_inline(lines[m][2]) if m < len(lines) else ""
                    if below and _CAPTION_RE.match(below):
                        title = below
                        t_end = lines[m][1]
                        j = m
                tables.append((t_start, t_end, title, [c for c in header if c], rows))
            i = j + 1
        else:
            i += 1
    return tables


def build_pieces(
    text: str,
    marks: Sequence[HeadingMark],
    *,
    span: Tuple[int, int] = None,
    max_chars: Optional[int] = None,
    tables_as_nodes: bool = True,
) -> List[Piece]:
    """Cut ``text`` at ``marks`` into pieces that tile ``span``.

    Text before the first heading is a piece with an empty heading path. Tables become
    pieces of their own (kind ``table``) inside their chapter; long text pieces are cut at
    paragraph, then line, then word boundaries into parts of at most ``max_chars``.

    Args:
        text: the Markdown text.
        marks: its headings with their levels, in order.
        span: ``(start, end)`` of the part of ``text`` to cut; ``None``: the whole text.
        max_chars: the longest text piece, in characters; ``None``: no limit.
        tables_as_nodes: whether tables become pieces of their own.

    Returns:
        The pieces, in order, tiling ``span``.
    """
    lo, hi = span or (0, len(text))
    marks = [m for m in marks if lo <= m.start < hi]
    paths = heading_paths(marks)
    bounds: List[Tuple[int, int, List[Tuple[str, str, int]]]] = []
    if not marks:
        bounds.append((lo, hi, []))
    else:
        first_start = marks[0].start
        if text[lo:first_start].strip():
            bounds.append((lo, first_start, []))  # preamble: before any heading
        else:
            first_start = lo  # leading blank text joins the first chapter
        for idx, mark in enumerate(marks):
            start = first_start if idx == 0 else mark.start
            nxt = marks[idx + 1].start if idx + 1 < len(marks) else hi
            bounds.append((start, nxt, paths[idx]))

    pieces: List[Piece] = []
    all_lines = iter_lines(text) if tables_as_nodes else []
    for b_start, b_end, path in bounds:
        cursor = b_start
        tables = find_tables(text, b_start, b_end, all_lines) if tables_as_nodes else []
        for t_start, t_end, title, cols, rows in tables:
            if text[cursor:t_start].strip():
                pieces.extend(_sub_split(text, cursor, t_start, path, max_chars))
                cursor = t_start
            # blank text before a table joins the table; the table keeps its chapter path
            table_title = title or (path[-1][1] if path else "")
            pieces.extend(_split_table(text, cursor, t_end, path, table_title, cols, max_chars))
            cursor = t_end
        if cursor < b_end:
            if text[cursor:b_end].strip() or not pieces:
                pieces.extend(_sub_split(text, cursor, b_end, path, max_chars))
            else:
                pieces[-1].end = b_end  # trailing blank text joins the previous piece
    return pieces


def table_head(text: str, start: int, end: int) -> Tuple[int, str]:
    """Where the rows of the table piece ``text[start:end]`` begin, and its header lines.

    The rows begin after its caption, header row and ``|---|`` line.

    Args:
        text: the Markdown text.
        start: the table piece's start.
        end: the table piece's end (exclusive).

    Returns:
        ``(offset of the first row, Markdown header lines)``; ``(start, "")`` for a part
            that holds rows only (a later part of a table already split).
    """
    offset = start
    header: List[str] = []
    for line in text[start:end].splitlines(keepends=True):
        stripped = line.strip()
        offset += len(line)
        if _TABLE_SEP_RE.match(stripped) and header:
            return offset, "\n".join(header + [stripped])
        if _TABLE_LINE_RE.match(stripped):
            header.append(stripped)
            if len(header) > 1:
                break  # a row before any separator: no header block
    return start, ""


def row_label(line: str) -> str:
    """The row label (first cell) of a Markdown table line.

    Args:
        line: one line.

    Returns:
        The first cell; ``""`` for a separator, a line that is not a table row, or a row
            whose first cell is empty.
    """
    if not _TABLE_LINE_RE.match(line) or _TABLE_SEP_RE.match(line):
        return ""
    cells = _split_cells(line)
    return cells[0] if cells else ""


def _split_table(
    text: str, start: int, end: int, path: List[Tuple[str, str, int]], title: str,
    columns: List[str], max_chars: Optional[int],
) -> List[Piece]:
    """A table piece, cut between rows when longer than ``max_chars`` (financial statements
    run to pages); every part keeps the title and column labels and lists its own rows."""
    parts = [(start, end)]
    if max_chars is not None and max_chars < 1:  # every step below must move forward
        raise ValueError(f"max_segment_chars must be at least 1, not {max_chars}")
    if max_chars and end - start > max_chars:
        parts, cursor = [], start
        while end - cursor > max_chars:
            cut = text.rfind("\n", cursor, cursor + max_chars)
            cut = cut + 1 if cut > cursor else cursor + max_chars
            parts.append((cursor, cut))
            cursor = cut
        parts.append((cursor, end))
    rows_from, header = table_head(text, start, end)
    pieces = []
    for p_start, p_end in parts:
        # the header row is columns, not a row label
        body = max(p_start, rows_from) if p_start == start else p_start
        rows = [label for label in map(row_label, text[body:p_end].split("\n")) if label]
        if p_start == start and not header and rows and columns and rows[0] == columns[0]:
            rows = rows[1:]  # a header row without a |---| line
        pieces.append(Piece(
            p_start, p_end, list(path), schema.KIND_TABLE, title, list(columns), rows,
            header if p_start != start else "",
        ))
    return pieces


def _sub_split(
    text: str, start: int, end: int, path: List[Tuple[str, str, int]], max_chars: Optional[int]
) -> List[Piece]:
    if max_chars is not None and max_chars < 1:  # the cursor must move forward
        raise ValueError(f"max_segment_chars must be at least 1, not {max_chars}")
    if not max_chars or end - start <= max_chars:
        return [Piece(start, end, list(path))]
    out, cursor = [], start
    while end - cursor > max_chars:
        limit = cursor + max_chars
        window = text[cursor:limit]
        cut = -1
        for sep in ("\n\n", "\n", ". ", " "):
            pos = window.rfind(sep)
            if pos > max_chars // 3:
                cut = cursor + pos + len(sep)
                break
        if cut <= cursor:
            cut = limit
        out.append(Piece(cursor, cut, list(path)))
        cursor = cut
    out.append(Piece(cursor, end, list(path)))
    return out


def as_document(node: BaseNode) -> Document:
    """A node given to a parser as a ``Document`` (a ``Document`` as it is).

    Args:
        node: the document or node.

    Returns:
        The document: same text, metadata, id and hidden keys.
    """
    if isinstance(node, Document):
        return node
    doc = Document(text=node.get_content(), metadata=dict(node.metadata), id_=node.node_id)
    doc.excluded_embed_metadata_keys = list(node.excluded_embed_metadata_keys)
    doc.excluded_llm_metadata_keys = list(node.excluded_llm_metadata_keys)
    return doc


def document_title(doc: Document) -> str:
    """A document's title: our key, else the file name, else its id.

    Args:
        doc: the document.

    Returns:
        The title.
    """
    meta = doc.metadata
    return str(
        meta.get(schema.DOCUMENT_TITLE)
        or meta.get(schema.FILE_NAME)
        or meta.get(schema.DOCUMENT_ID)
        or doc.doc_id
    )


def document_id(doc: Document) -> str:
    """A document's id: our key, else LlamaIndex's ``doc_id``.

    Args:
        doc: the document.

    Returns:
        The id.
    """
    return str(doc.metadata.get(schema.DOCUMENT_ID) or doc.doc_id)


def pieces_to_nodes(
    doc: Document,
    pieces: Sequence[Piece],
    *,
    node_text: Callable[[Piece], str],
    source_span: Callable[[Piece], Tuple[int, int]],
    parse_path: Callable[[Piece], str],
    id_func: Callable[[int, Document], str],
    extra_metadata: Optional[Dict[str, Any]] = None,
) -> List[TextNode]:
    """One ``TextNode`` per piece with the shared schema facts; positions from 0.

    Args:
        doc: the document the pieces come from.
        pieces: its pieces, in order.
        node_text: the text of a piece's node.
        source_span: a piece's ``(start, end)`` in the document's text.
        parse_path: the ``schema.PARSE_PATH`` of a piece's node.
        id_func: LlamaIndex's ``id_func(index, document)``.
        extra_metadata: metadata every node gets besides the document's; ``None`` for none.

    Returns:
        The nodes, in order.
    """
    page_spans = schema.page_spans_of(doc.metadata)
    text_boxes = schema.text_boxes_of(doc.metadata)
    span_starts = [int(s) for _, s, _ in page_spans]
    base_meta = {
        k: v for k, v in doc.metadata.items() if k not in schema.DOCUMENT_ONLY_KEYS
    }
    source = schema.source_node_info(doc)
    nodes: List[TextNode] = []
    for pos, piece in enumerate(pieces):
        c_start, c_end = source_span(piece)
        node = TextNode(
            id_=id_func(pos, doc),
            text=node_text(piece),
            metadata=dict(base_meta, **(extra_metadata or {})),
            **schema.view_settings(doc),
            relationships={NodeRelationship.SOURCE: source},
            start_char_idx=c_start,
            end_char_idx=c_end,
        )
        pages = None
        if page_spans:
            # only the pages around the span (page spans are sorted): keeps this linear
            lo = max(0, bisect.bisect_right(span_starts, c_start) - 1)
            hi = bisect.bisect_right(span_starts, max(c_end, c_start + 1))
            pages = pages_for_span(page_spans[lo:hi], c_start, c_end)
        if pages is None and not page_spans:
            pages = (0, 0)  # .md/.txt input is one page
        schema.set_segment_facts(
            node,
            document_id=document_id(doc),
            document_title=document_title(doc),
            position=pos,
            char_span=(c_start, c_end),
            heading_path=piece.path,
            page_range=pages,
            kind=piece.kind,
            parse_path=parse_path(piece),
            text_boxes=text_boxes,
        )
        if piece.kind == schema.KIND_TABLE:
            schema.set_table_facts(
                node, title=piece.table_title, columns=piece.table_columns, rows=piece.table_rows,
                header=piece.table_header or None,
            )
        nodes.append(node)
    return nodes


def finish_nodes(nodes: List[TextNode]) -> List[TextNode]:
    """Restore what LlamaIndex's post-processing changed on the nodes.

    Our character spans come back (LlamaIndex re-derives them by string search and cannot
    find LLM-rewritten text), no document-only fact comes back with the document metadata it
    merges into every node (pass it [`schema.without_document_only_facts`][llama_index_hiqa.schema.without_document_only_facts] of the parent
    map so none does), and the neighbours' metadata copies are dropped.

    Args:
        nodes: the post-processed nodes (changed in place).

    Returns:
        ``nodes`` itself.
    """
    for node in nodes:
        for key in schema.DOCUMENT_ONLY_KEYS:
            node.metadata.pop(key, None)
        # LlamaIndex copies each neighbour's whole metadata into PREVIOUS/NEXT; the id and
        # hash are what anything follows them by, and the copies doubled a node's size.
        for relation in (NodeRelationship.PREVIOUS, NodeRelationship.NEXT):
            related = node.relationships.get(relation)
            if related is not None and getattr(related, "metadata", None):
                related.metadata = {}
        span = schema.get_char_span(node)
        if span is not None:
            node.start_char_idx, node.end_char_idx = span
    return nodes
