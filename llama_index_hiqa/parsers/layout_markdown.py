"""LayoutMarkdownParser: HiQA's chapter segments without an LLM, from the PDF's layout.

The HiQA paper (§Markdown Formatter, Algorithm 1) has an LLM rewrite each document as
Markdown whose every chapter is a numbered heading, then cuts it into *segments*, one per
chapter. This parser produces the same segments with no LLM, from what
[`PDFLayoutReader`][llama_index_hiqa.readers.pdf.PDFLayoutReader] provides: pymupdf4llm's Markdown headings and
tables plus the font size/weight of candidate heading lines (``schema.LAYOUT_HEADINGS``),
corrected by numbering patterns (``1``, ``1.2``, ``1.2.3``, ``A.1``, ``Chapter 3``, and SEC
filings' ``Part II``, ``Item 7.``, ``Item 7A.``) to get true heading levels. Running
headers/footers and table-of-contents pages never become headings. Markdown files are parsed
by their ``#`` headings (the rule of LlamaIndex's ``MarkdownNodeParser``, with character
offsets kept).

Documents of another reader carry no layout facts: ``SimpleDirectoryReader``'s pages (or a
PDF's raw bytes) are replaced by the file their ``file_path`` names, read again with
``PDFLayoutReader`` once per file (``read_source_files``, `source_files`),
so the parser gives the nodes it gives for ``PDFLayoutReader``'s documents; a document it cannot
read again and that yields no heading is reported in one warning per parser.

It is the default of the pack when no LLM is configured and the fallback of
[`MarkdownFormatterParser`][llama_index_hiqa.parsers.markdown_formatter.MarkdownFormatterParser] for a window
whose LLM output cannot be used.

Nodes tile the document: node text is exactly ``document.text[CHAR_START:CHAR_END]`` and the
spans of one document's nodes are consecutive and cover all of it, so no text is lost
(running headers stay inside the text they interrupt; they are only kept out of headings).

>>> from llama_index_hiqa import LayoutMarkdownParser
>>> nodes = LayoutMarkdownParser().get_nodes_from_documents(documents)
"""

from __future__ import annotations

import bisect
import logging
import re
from collections import Counter
from typing import Any, Callable, ClassVar, Dict, List, Optional, Sequence, Set, Tuple

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import BaseNode, Document, TextNode
from llama_index.core.utils import get_tqdm_iterable

from llama_index_hiqa.component_dict import PartsRoundTrip
from llama_index_hiqa import schema
from llama_index_hiqa.figures import images_as_nodes_field, with_figure_nodes
from llama_index_hiqa.headings import (
    clean_inline,
    is_strong_sec_heading,
    iter_lines,
    markdown_headings,
    parse_heading_number,
)
from llama_index_hiqa.parsers._markdown_segments import (
    SegmentNodeParser,
    as_document,
    HeadingMark,
    LevelResolver,
    Piece,
    build_pieces,
    drop_title_marks,
    merge_stacked_headings,
    pieces_to_nodes,
)
from llama_index_hiqa.parsers._token_budget import TableView, cascade_header_counter, fit_pieces_to_window, resolve_window
from llama_index_hiqa.headings import is_report_heading, join_split_letters

logger = logging.getLogger(__name__)

# A ToC entry: a heading number or dotted leaders, ending with a page number.
_TOC_TAIL_RE = re.compile(r"(?:\.{3,}|…+|\s)\s*\d{1,4}\s*$")
_TOC_TITLE_RE = re.compile(r"^(table of contents|contents|index)$", re.I)
_LEADERS_RE = re.compile(r"(\.\s?){4,}\s*\d{1,4}\s*$")
_MAX_HEADING_WORDS = 25
_RUN_IN_RE = re.compile(r"^(\*\*|__)(.+?)\1")
# Cheap test before the regex work: can this plain line start with a heading number?
_MAYBE_NUMBERED_RE = re.compile(
    r"^[\s*_#>]*(?:<[^>]+>\s*)*(?:part|item|chapter|section|appendix|annex|\d|[A-Z]\.\d)", re.I
)


def _norm_running(line: str) -> str:
    """Key of a possibly running line: no markup, case or digits (page numbers vary)."""
    return re.sub(r"\d+", "#", clean_inline(line.replace("|", " ")).lower()).strip()


class LayoutMarkdownParser(PartsRoundTrip, SegmentNodeParser):
    """One node per chapter segment (tables as their own nodes) from layout Markdown."""

    part_names: ClassVar[Tuple[str, ...]] = ("tokenizer",)  # not serialised: component_dict

    def held_parts(self) -> Dict[str, Any]:
        """The tokenizer (``from_dict(data, tokenizer=...)`` takes it back).

        Returns:
            ``{"tokenizer": the tokenizer or None}``.
        """
        return {"tokenizer": self._tokenizer}

    max_segment_chars: Optional[int] = Field(
        default=4000, ge=1,
        description=(
            "Sub-split segments longer than this many characters at paragraph/line/word "
            "boundaries (all parts keep the chapter's metadata; positions stay "
            "consecutive). None keeps every chapter whole, as the paper does."
        ),
    )
    max_segment_tokens: Optional[int] = Field(
        default=None, ge=1,
        description=(
            "The embedding model's token window (all-MiniLM-L6-v2: 256). With a tokenizer, "
            "segments whose cascade header + text exceed it are split (the cascade repeated in "
            "each part) and small neighbouring segments of one section are merged up to it. "
            "None: character limits only."
        ),
    )
    merge_small_segments: bool = Field(
        default=True,
        description="With max_segment_tokens: merge small neighbouring segments of one section.",
    )
    table_view: TableView = Field(
        default="labels", description="With max_segment_tokens: the tables' embedding view a long table "
        "is cut by rows to fit (CascadingMetadataTransform.table_view: 'labels' or 'rows').",
    )
    tables_as_nodes: bool = Field(
        default=True,
        description="Give each Markdown table (with its title) a node of its own, kind 'table'.",
    )
    images_as_nodes: bool = images_as_nodes_field()
    skip_running_lines: bool = Field(
        default=True,
        description="Never take a line repeated at the top/bottom of many pages as a heading.",
    )
    running_line_min_share: float = Field(
        default=0.4,
        description="Share of pages a top/bottom line must repeat on to count as running.",
    )
    skip_toc_pages: bool = Field(
        default=True,
        description="Never take headings from table-of-contents pages.",
    )
    use_sec_patterns: bool = Field(
        default=True,
        description="Take plain 'Item 7.' / 'PART II' lines as headings even without emphasis.",
    )

    _tokenizer: Optional[Callable[[str], Sequence[object]]] = PrivateAttr(default=None)
    _warned_headless: bool = PrivateAttr(default=False)

    def __init__(self, tokenizer: Optional[Callable[[str], Sequence[object]]] = None, **data: Any) -> None:
        """``tokenizer``: the embedding model's (text -> tokens), for ``max_segment_tokens``."""
        super().__init__(**data)
        self._tokenizer = tokenizer

    @classmethod
    def class_name(cls) -> str:
        return "LayoutMarkdownParser"

    # --- LlamaIndex NodeParser API ------------------------------------------------------

    def _parse_nodes(
        self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any
    ) -> List[BaseNode]:
        reading = self.source_documents(nodes)
        unread = {doc.doc_id for doc in reading.unread}
        out: List[BaseNode] = []
        headless: List[Document] = []
        for doc in get_tqdm_iterable(reading.documents, show_progress, "Parsing layout segments"):
            doc = as_document(doc)
            doc_nodes = self.parse_document(doc)
            if doc.doc_id in unread and doc_nodes and not any(schema.has_heading_path(n) for n in doc_nodes):
                headless.append(doc)
            out.extend(doc_nodes)
        if headless and not self._warned_headless:
            # Once per parser: an ingestion calls it batch after batch with the same cause.
            self._warned_headless = True
            first = headless[0]
            logger.warning(
                "LayoutMarkdownParser: %d document(s) without layout facts gave segments with no "
                "heading (first: %s, not read again: %s); each is cut by size alone and its "
                "cascade holds only its file name. Read the files with "
                "PDFLayoutReader().load_data(...), or give the documents a file_path naming the "
                "file (read_source_files=True reads it again).",
                len(headless), first.metadata.get(schema.FILE_NAME) or first.doc_id,
                reading.reasons.get(first.doc_id, "?"),
            )
        return out


    # --- public helpers -------------------------------------------------------------

    def parse_document(self, doc: Document, parse_path: Optional[str] = None) -> List[TextNode]:
        """The segment nodes of one document (positions from 0); none for a blank one.

        Args:
            doc: a document read by one of the pack's readers (its layout facts are used when
                present).
            parse_path: the ``schema.PARSE_PATH`` the nodes get; ``None``: ``"markdown"`` for a
                Markdown, HTML or DOCX source, ``"text"`` for a text file, else ``"layout"``.

        Returns:
            The text and table nodes in order, with an image node after the segment each figure
                sits in (``images_as_nodes``).
        """
        if not doc.text.strip():
            logger.warning("document %s has no text: no segments", doc.doc_id)
            return []
        sections = self.section_pieces(doc.text, doc.metadata)
        pieces = self.fit_to_window(doc.text, sections, doc.metadata)
        path = parse_path or _default_parse_path(doc)
        nodes = pieces_to_nodes(
            doc,
            pieces,
            node_text=lambda p: doc.text[p.start : p.end],
            source_span=lambda p: (p.start, p.end),
            parse_path=lambda p: path,
            id_func=self.id_func,
        )
        if not self.images_as_nodes:
            return nodes
        # A figure belongs to the section it sits in, also when that section's text was
        # merged with its siblings into one node for the embedding window.
        return with_figure_nodes(doc, nodes, self.id_func, sections=[(p.start, p.end, p.path) for p in sections])

    def pieces(
        self, text: str, metadata: Optional[Dict[str, Any]] = None,
        span: Optional[Tuple[int, int]] = None,
    ) -> List[Piece]:
        """Segments of ``text`` as character spans with heading paths.

        Fitted to the embedding model's window when one is set.

        Args:
            text: the document's Markdown text.
            metadata: the document's metadata (title, layout facts); ``None`` for none.
            span: ``(start, end)`` of the part to cut; ``None``: the whole text.

        Returns:
            The pieces, in order, tiling the span.
        """
        return self.fit_to_window(text, self.section_pieces(text, metadata, span), metadata)

    def section_pieces(
        self, text: str, metadata: Optional[Dict[str, Any]] = None,
        span: Optional[Tuple[int, int]] = None,
    ) -> List[Piece]:
        """One piece per section (and table) as the headings cut the text, before fitting.

        Args:
            text: the document's Markdown text.
            metadata: the document's metadata (title, layout facts); ``None`` for none.
            span: ``(start, end)`` of the part to cut; ``None``: the whole text.

        Returns:
            The pieces, in order, tiling the span.
        """
        marks = self.detect_headings(text, metadata or {})
        return build_pieces(
            text, marks, span=span, max_chars=self.max_segment_chars,
            tables_as_nodes=self.tables_as_nodes,
        )

    def fit_to_window(self, text: str, pieces: List[Piece], metadata: Optional[Dict[str, Any]] = None) -> List[Piece]:
        """``pieces`` split and merged to the embedding window (unchanged without one).

        Args:
            text: the document's Markdown text.
            pieces: its section pieces, in order.
            metadata: the document's metadata (its title is the cascade's root, counted in each
                node's tokens); ``None`` for none.

        Returns:
            The fitted pieces, still tiling the same span.
        """
        window = resolve_window(self.max_segment_tokens, self._tokenizer)
        if window is None:
            return pieces
        count, size = window
        title = str((metadata or {}).get(schema.DOCUMENT_TITLE) or "")
        return fit_pieces_to_window(
            text, pieces, count, size, cascade_header_counter(count, title), merge=self.merge_small_segments,
            table_view=self.table_view,
        )

    def detect_headings(self, text: str, metadata: Dict[str, Any]) -> List[HeadingMark]:
        """Every chapter heading of a document, in order, with number, title and level.

        Args:
            text: the document's Markdown text.
            metadata: the document's metadata: its page spans and ``schema.LAYOUT_HEADINGS``
                when a reader wrote them, ``schema.DOCUMENT_TITLE`` (headings repeating it are
                left out).

        Returns:
            The headings as marks with their character spans.
        """
        page_spans = [tuple(s) for s in schema.page_spans_of(metadata)]
        if not page_spans:
            page_spans = [(0, 0, len(text))]
        lines = iter_lines(text)
        running = self._running_lines(text, page_spans) if self.skip_running_lines else set()
        toc_ranges = self._toc_ranges(text, page_spans) if self.skip_toc_pages else []
        layout = _layout_lines(metadata, lines)
        layout_styles = _layout_styles(layout)

        def line_style(start: int) -> int:
            """Markdown-like level of a layout-marked line's style; 6 for any other line."""
            return layout_styles.get(layout[start], 6) if start in layout else 6

        candidates: List[Tuple[int, int, str, int]] = []  # start, end, text, style
        md = {start: (hashes, body) for start, _, hashes, body in markdown_headings(text)}
        for start, end, line in lines:
            if any(a <= start < b for a, b in toc_ranges):
                continue
            if start in md:
                hashes, body = md[start]
                style = hashes
            else:
                body = line.strip()
                if not body or body.startswith("|"):
                    continue
                if (start in layout or _is_emphasised(body)) and is_report_heading(clean_inline(body)):
                    # A statement / note title: a heading without a number (headings.is_report_heading).
                    candidates.append((start, end, join_split_letters(clean_inline(body)), line_style(start)))
                    continue
                if not _MAYBE_NUMBERED_RE.match(body):
                    continue
                # A run-in heading: "**ITEM 2 - Properties** We own our offices ..." —
                # the bold lead is the heading, the rest of the line its first sentence.
                lead = _RUN_IN_RE.match(body)
                if lead and lead.end() < len(body.rstrip()):
                    run_in = clean_inline(lead.group(2))
                    if parse_heading_number(run_in).family != "none":
                        body = lead.group(0)
                if len(body) > 300:
                    continue
                cleaned = clean_inline(body)
                numbered = parse_heading_number(cleaned).family != "none"
                in_layout = start in layout
                strong = self.use_sec_patterns and is_strong_sec_heading(cleaned)
                if not (numbered and (_is_emphasised(body) or in_layout)) and not strong:
                    continue
                style = line_style(start)
            cleaned = clean_inline(body)
            if not cleaned or len(cleaned.split()) > _MAX_HEADING_WORDS or not plausible_heading(cleaned):
                continue
            if _norm_running(line) in running or _LEADERS_RE.search(cleaned):
                continue
            candidates.append((start, end, cleaned, style))

        min_style = min((c[3] for c in candidates), default=1)
        resolver = LevelResolver(min_style=min_style)
        marks: List[HeadingMark] = []
        open_numbers: Dict[str, str] = {}  # family -> number of the last Part / Item
        for start, end, cleaned, style in candidates:
            parsed = parse_heading_number(cleaned)
            if parsed.family in ("part", "item"):
                # "Item 8 (continued)", side markers repeating the current item on every
                # page: a repeat of the open Part/Item is not a new chapter.
                if open_numbers.get(parsed.family) == parsed.number:
                    continue
                open_numbers[parsed.family] = parsed.number
                if parsed.family == "part":
                    open_numbers.pop("item", None)
            level = resolver.level(parsed, style)
            marks.append(HeadingMark(start, end, parsed.number, parsed.title, level))
        marks = merge_stacked_headings(text, marks)
        return drop_title_marks(marks, metadata.get(schema.DOCUMENT_TITLE))

    # --- layout noise -----------------------------------------------------------------

    def _running_lines(self, text: str, page_spans: Sequence[Tuple[int, int, int]]) -> Set[str]:
        """Lines among the first/last three of a page that repeat on many pages."""
        if len(page_spans) < 3:
            return set()
        counts: Counter[str] = Counter()
        for _, start, end in page_spans:
            page_lines = [ln for ln in text[start:end].split("\n") if ln.strip()]
            keys = {_norm_running(ln) for ln in page_lines[:3] + page_lines[-3:]}
            counts.update(k for k in keys if k)
        need = max(3, self.running_line_min_share * len(page_spans))
        return {k for k, c in counts.items() if c >= need}

    def _toc_ranges(
        self, text: str, page_spans: Sequence[Tuple[int, int, int]]
    ) -> List[Tuple[int, int]]:
        """Character ranges of table-of-contents pages (only in the first part of a
        multi-page document, where a ToC sits; a one-page text has none to skip)."""
        if len(page_spans) < 2:
            return []
        limit = max(3, len(page_spans) // 4)
        ranges = []
        for page, start, end in page_spans[:limit]:
            entries, titled = 0, False
            for line in text[start:end].split("\n"):
                cells = [c for c in (clean_inline(x) for x in line.split("|")) if c]
                flat = " ".join(cells)
                if _TOC_TITLE_RE.match(clean_inline(line.lstrip("#"))):
                    titled = True
                elif cells and _TOC_TAIL_RE.search(flat) and (
                    parse_heading_number(flat).family != "none" or _LEADERS_RE.search(flat)
                ):
                    entries += 1
            if entries >= 4 or (titled and entries >= 2):
                ranges.append((start, end))
        return ranges


def _is_emphasised(body: str) -> bool:
    """The whole line is bold (``**...**`` / ``__...__``)."""
    return body.startswith(("**", "__")) and body.rstrip().endswith(("**", "__"))


def plausible_heading(text: str) -> bool:
    """Whether a heading candidate reads like a heading, whatever its font.

    Not a line that continues a sentence (starts in lower case, ends with a comma or
    semicolon; exhibits set in a larger type give hundreds of those) and not a number with no
    words ("2.6 %" in a statement's column, parsed as section 2.6).

    Args:
        text: the candidate line (markup removed).

    Returns:
        ``True`` when it may be a heading.
    """
    parsed = parse_heading_number(text)
    if parsed.family in ("part", "item"):
        return True
    title = parsed.title
    if not any(c.isalpha() for c in title) or text.rstrip().endswith((",", ";")):
        return False
    first = next((c for c in title if c.isalpha()), "")
    if first.islower():
        return False
    # A long unnumbered line mostly in lower-case words is a sentence set in a larger type.
    words = [w for w in title.split() if w[:1].isalpha()]
    if not parsed.number and len(words) >= 8 and sum(w[0].islower() for w in words) > 0.6 * len(words):
        return False
    return True


def _default_parse_path(doc: Document) -> str:
    name = str(doc.metadata.get(schema.FILE_NAME) or doc.metadata.get(schema.FILE_PATH) or "")
    # HTML and DOCX arrive as Markdown written from their own heading levels.
    if name.lower().endswith((".md", ".markdown")) or doc.metadata.get(schema.SOURCE_FORMAT) in (
        schema.FORMAT_HTML, schema.FORMAT_DOCX
    ):
        return "markdown"
    if name.lower().endswith(".txt"):
        return "text"
    return "layout"


def _layout_lines(
    metadata: Dict[str, Any], lines: Sequence[Tuple[int, int, str]]
) -> Dict[int, Tuple[float, bool]]:
    """``line start -> (font size, bold)`` from the reader's layout heading facts (whose
    spans may start inside the line, after the Markdown marks)."""
    starts = [ln[0] for ln in lines]
    out = {}
    for item in schema.layout_headings_of(metadata):
        start, _end, size, bold = item[:4]
        idx = bisect.bisect_right(starts, int(start)) - 1
        if idx >= 0:
            out[starts[idx]] = (float(size), bool(bold))
    return out


def _layout_styles(layout: Dict[int, Tuple[float, bool]]) -> Dict[Tuple[float, bool], int]:
    """Rank layout heading styles like Markdown ``#`` counts: biggest (then bold) first."""
    styles = sorted(set(layout.values()), key=lambda s: (-s[0], not s[1]))
    return {s: i + 1 for i, s in enumerate(styles[:6])}
