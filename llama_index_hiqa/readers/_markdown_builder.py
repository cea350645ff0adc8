"""What every reader hands to ``PDFLayoutReader``: Markdown text plus its layout facts.

HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA", §Markdown
Formatter) works on Markdown whose chapters are headings and whose tables are Markdown
tables with their caption above them. Formats that state their structure (HTML ``h1``-``h6``,
DOCX heading styles) are written straight into that shape here, so the segment parsers read
them exactly as they read a ``.md`` file: ``#`` lines are the headings, ``|`` blocks the
tables. [`MarkdownBuilder`][llama_index_hiqa.readers._markdown_builder.MarkdownBuilder] keeps the character offsets of headings and images while
the text is built, so no offset has to be searched for afterwards.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

BLOCK_JOINER = "\n\n"
COVER_BLOCKS = 60
_SPACE_RE = re.compile(r"\s+")


class Parsed:
    """One file as the reader's engines return it (see ``schema`` for each fact's shape)."""

    __slots__ = (
        "text", "page_spans", "headings", "body_size", "images", "title", "source_format", "ocr_pages", "text_boxes",
    )

    def __init__(
        self,
        text: str,
        page_spans: Sequence[Sequence[int]],
        headings: Sequence[Sequence[Any]],
        body_size: float,
        images: Sequence[Mapping[str, Any]],
        title: str = "",
        source_format: str = "",
        ocr_pages: Iterable[int] = (),
        text_boxes: Sequence[Sequence[Any]] = (),
    ) -> None:
        self.text, self.page_spans, self.headings = text, page_spans, headings
        self.body_size, self.images, self.title = body_size, images, title
        self.source_format, self.ocr_pages = source_format, list(ocr_pages)
        self.text_boxes = list(text_boxes)  # PDFs only: HTML/DOCX nodes are located by their section


def inline(text: str) -> str:
    """Whitespace collapsed to single spaces (HTML/DOCX line breaks inside a paragraph).

    Args:
        text: the text (``None`` gives ``""``).

    Returns:
        The text on one line, stripped.
    """
    return _SPACE_RE.sub(" ", text or "").strip()


def _cell(text: str) -> str:
    return inline(text).replace("|", "\\|")


def markdown_table(rows: Sequence[Sequence[str]]) -> str:
    """Rows of cell texts as a Markdown table, the first row its header.

    Columns empty in every row are dropped (spacer columns of SEC filings), short rows are
    padded.

    Args:
        rows: the rows' cell texts.

    Returns:
        The table's Markdown lines; ``""`` when fewer than two rows or one column remain (a
            layout box, not a table).
    """
    cleaned = [[_cell(c) for c in row] for row in rows]
    cleaned = [row for row in cleaned if any(row)]
    if len(cleaned) < 2:
        return ""
    width = max(len(row) for row in cleaned)
    cleaned = [row + [""] * (width - len(row)) for row in cleaned]
    keep = [c for c in range(width) if any(row[c] for row in cleaned)]
    if len(keep) < 2:
        return ""
    grid = [[row[c] for c in keep] for row in cleaned]
    lines = ["|" + "|".join(grid[0]) + "|", "|" + "|".join(["---"] * len(keep)) + "|"]
    lines += ["|" + "|".join(row) + "|" for row in grid[1:]]
    return "\n".join(lines)


class MarkdownBuilder:
    """Markdown text built block by block, with heading and image offsets kept.

    ``heading`` writes a ``#`` line (and records it as a layout heading, bold, size unknown,
    as ``.md`` headings are); ``paragraph(bold=True)`` records a short bold paragraph as a
    layout heading candidate too (documents that mark chapters by bold type only, as many
    SEC filings do), leaving the parser to decide by its numbering.
    """

    def __init__(self, max_heading_chars: int = 160) -> None:
        self.max_heading_chars = max_heading_chars
        self._parts: List[str] = []
        self._offset = 0
        self.headings: List[List[Any]] = []
        self.images: List[Dict[str, Any]] = []
        self.first_heading = ""
        # (text, font size, bold) of the first blocks: the cover a title is picked from.
        self.cover: List[Tuple[str, float, bool]] = []

    def _note_cover(self, text: str, size: float, bold: bool) -> None:
        if len(self.cover) < COVER_BLOCKS:
            self.cover.append((text, float(size), bool(bold)))

    def _append(self, block: str) -> int:
        start = self._offset
        self._parts.append(block)
        self._offset += len(block) + len(BLOCK_JOINER)
        return start

    def heading(self, text: str, level: int, size: float = 0.0) -> None:
        """Append a ``#`` heading line and record it as a layout heading (bold).

        Args:
            text: the heading's text (blank text writes nothing).
            level: its depth, 1 to 6 (clamped).
            size: its font size in points; 0 when unknown (it then ranks by level for the title).
        """
        text = inline(text)
        if not text:
            return
        line = "#" * max(1, min(int(level), 6)) + " " + text
        # Unknown sizes rank by level (h1 over h2 ...), as a title picker reading sizes expects.
        self._note_cover(text, size or 30.0 - 2 * int(level), True)
        start = self._append(line)
        self.headings.append([start, start + len(line), float(size), True])
        self.first_heading = self.first_heading or text

    def paragraph(self, text: str, bold: bool = False, size: float = 0.0, prefix: str = "") -> None:
        """Append a paragraph; a short bold one is recorded as a layout heading candidate.

        Args:
            text: the paragraph's text (blank text writes nothing).
            bold: whether it is set in bold (short ones become ``**text**`` heading candidates).
            size: its font size in points; 0 when unknown.
            prefix: written before the text (a list marker).
        """
        text = inline(text)
        if not text:
            return
        self._note_cover(text, size, bold)
        if bold and len(text) <= self.max_heading_chars:
            line = f"**{text}**"
            start = self._append(prefix + line)
            self.headings.append([start, start + len(prefix + line), float(size), True])
            return
        self._append(prefix + text)

    def table(self, rows: Sequence[Sequence[str]]) -> bool:
        """Append ``rows`` as a Markdown table.

        Args:
            rows: the rows' cell texts, the first row the header.

        Returns:
            ``False`` (nothing written) when they do not make a table, so the caller can write
                the cells as text instead.
        """
        markdown = markdown_table(rows)
        if not markdown:
            return False
        self._append(markdown)
        return True

    def image(self, source: str, file: str, size_points: Sequence[float], caption: str = "") -> None:
        """Record an image entry at the current offset (``schema.IMAGES`` shape).

        Page 0: these formats have no pages; ``bbox`` is the image's size in points at the origin.

        Args:
            source: where the bytes are (the DOCX part name, the HTML ``src`` path).
            file: the file name the image is saved under (``<content hash>.<ext>``).
            size_points: ``(width, height)`` in points.
            caption: the caption next to the image.
        """
        width, height = (float(v) for v in size_points)
        self.images.append(
            {"page": 0, "bbox": [0.0, 0.0, round(width, 1), round(height, 1)], "caption": inline(caption),
             "char_offset": self._offset, "xref": 0, "file": file, "source": source}
        )

    @property
    def text(self) -> str:
        return BLOCK_JOINER.join(self._parts)

    def result(self, title: str, source_format: str) -> Parsed:
        """The document built so far, as the reader's engines return it.

        Args:
            title: the document's title.
            source_format: ``schema.FORMAT_HTML`` or ``schema.FORMAT_DOCX``.

        Returns:
            A [`Parsed`][llama_index_hiqa.readers._markdown_builder.Parsed] with one page span over the whole text, the headings and images.
        """
        text = self.text
        # An image after the last block points just past the text: keep it inside.
        for entry in self.images:
            entry["char_offset"] = min(entry["char_offset"], max(len(text) - 1, 0))
        return Parsed(text, [[0, 0, len(text)]], self.headings, 0.0, self.images, inline(title), source_format)


def image_points(data: Optional[bytes]) -> Sequence[float]:
    """An image's size in points (pixels at 96 dpi, as browsers and Word lay them out).

    Args:
        data: the image's bytes; ``None`` when missing.

    Returns:
        ``(width, height)``; ``(0, 0)`` when the bytes are missing or unreadable (the figure
            filter then drops it).
    """
    if not data:
        return (0.0, 0.0)
    try:
        # pymupdf (~1.5 s to import) loads when a PDF is read, not with the package.
        import pymupdf

        pixmap = pymupdf.Pixmap(data)
        return (pixmap.width * 0.75, pixmap.height * 0.75)
    # Safe: an unreadable image only loses its figure node; the text is read all the same.
    except Exception:
        return (0.0, 0.0)
