"""Word files (``.docx``: clinical guides, internal manuals) as HiQA Markdown.

HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA",
§Markdown Formatter) needs each chapter as a heading with its level; Word states it with its
heading styles. ``Heading 1``-``Heading 6`` (and any style whose outline level is set) become
``#`` lines of that level, tables become Markdown tables (merged cells once), list paragraphs
``- `` items, and the ``Title`` paragraph the document title; the segment parsers then read
the file as they read a ``.md`` file. Embedded pictures become image entries whose bytes stay
in the file (``schema.IMAGE_SOURCE`` names the part, e.g. ``/word/media/image1.png``), with
the following ``Caption`` paragraph (or the picture's alt text) as caption.

Read with python-docx (the ``docx`` extra). Headers, footers, comments and tracked deletions
are not part of the text.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from llama_index_hiqa import schema
from llama_index_hiqa.errors import CorruptDocumentError, EmptyDocumentError, MissingExtraError
from llama_index_hiqa.readers._markdown_builder import MarkdownBuilder, Parsed, image_points, inline
from llama_index_hiqa.readers._pdf_integrity import one_line

DOCX_SUFFIXES = (".docx",)

_HEADING_STYLE_RE = re.compile(r"^heading\s*([1-9])$", re.I)
_LIST_STYLE_RE = re.compile(r"^list\b", re.I)
_FIGURE_CAPTION_RE = re.compile(r"^\s*(fig(ure)?\.?|image|photo|diagram|chart)\s*\d", re.I)
_EMU_PER_POINT = 12700


def read_docx(path: Path, max_heading_chars: int = 160) -> Parsed:
    """One DOCX file as Markdown with its headings, tables and pictures (see the module doc).

    Args:
        path: the DOCX file.
        max_heading_chars: the longest bold paragraph taken as a heading candidate, in
            characters.

    Returns:
        The [`Parsed`][llama_index_hiqa.readers._markdown_builder.Parsed] document.

    Raises:
        MissingExtraError: python-docx is not installed (names the ``docx`` extra).
        CorruptDocumentError: the file is not a readable DOCX file.
        EmptyDocumentError: the file has no text.
    """
    try:
        # python-docx: the [docx] extra.
        import docx
    except ImportError as exc:
        raise MissingExtraError(path, "docx", "python-docx", "reading DOCX") from exc
    try:
        document = docx.Document(str(path))
    # python-docx raises zipfile/KeyError/lxml errors for a broken package: one typed error.
    except Exception as exc:
        raise CorruptDocumentError(path, f"not a readable DOCX file ({one_line(exc)})") from exc
    reader = _DocxWalk(document, MarkdownBuilder(max_heading_chars))
    reader.walk()
    if not reader.builder.text.strip():
        raise EmptyDocumentError(path, "the DOCX file has no text")
    title = inline(document.core_properties.title or "") or reader.title_paragraph
    return reader.builder.result(title, schema.FORMAT_DOCX)


class _DocxWalk:
    def __init__(self, document: Any, builder: MarkdownBuilder) -> None:
        self.document = document
        self.builder = builder
        self.title_paragraph = ""
        self._uncaptioned: List[int] = []  # indices into builder.images awaiting a caption
        # style id -> (name, outline heading level, bold): python-docx resolves a paragraph's
        # style by scanning every style of the document (~3 ms each: 9 s for a 20-page
        # filing's 670 paragraphs); each style is resolved once.
        self._styles: Dict[Optional[str], Tuple[str, Optional[int], bool]] = {}

    def style(self, paragraph: Any) -> Tuple[str, Optional[int], bool]:
        key = paragraph._p.style
        if key not in self._styles:
            try:
                style = paragraph.style
            # Safe: a style id the styles part does not define reads as no style (body text).
            except Exception:
                style = None
            name = str(getattr(style, "name", "") or "")
            try:
                bold = bool(style.font.bold) if style is not None else False
            # Safe: a style without font facts reads as regular weight.
            except Exception:
                bold = False
            self._styles[key] = (name, _style_outline_level(style, name), bold)
        return self._styles[key]

    def walk(self) -> None:
        # python-docx: the [docx] extra.
        from docx.oxml.ns import qn
        from docx.table import Table
        from docx.text.paragraph import Paragraph

        for child in self.document.element.body.iterchildren():
            if child.tag == qn("w:p"):
                self.paragraph(Paragraph(child, self.document))
            elif child.tag == qn("w:tbl"):
                self._uncaptioned.clear()
                self.table(Table(child, self.document))

    def paragraph(self, paragraph: Any) -> None:
        # A caption is the paragraph right after its picture (or the picture's own line).
        self._uncaptioned += self.pictures(paragraph)
        text = inline(paragraph.text)
        if not text:
            return
        style, style_level, style_bold = self.style(paragraph)
        level = _paragraph_outline_level(paragraph) or style_level
        if style.lower() == "title":
            self.title_paragraph = self.title_paragraph or text
            self.builder.paragraph(text)
        elif level:
            self.builder.heading(text, level)
        elif style.lower() == "caption" or (self._uncaptioned and _FIGURE_CAPTION_RE.match(text)):
            for index in self._uncaptioned:
                self.builder.images[index]["caption"] = text
            self.builder.paragraph(text)
        elif _LIST_STYLE_RE.match(style) or paragraph._p.pPr is not None and paragraph._p.pPr.numPr is not None:
            self.builder.paragraph(text, prefix="- ")
        else:
            runs = [run for run in paragraph.runs if run.text.strip()]
            # All of its text bold: a chapter line set by hand rather than with a heading style.
            bold = bool(runs) and all(run.bold if run.bold is not None else style_bold for run in runs)
            self.builder.paragraph(text, bold=bold)
        self._uncaptioned = []

    def table(self, table: Any) -> None:
        rows: List[List[str]] = []
        for row in table.rows:
            cells, seen = [], set()
            for cell in row.cells:
                # python-docx repeats a merged cell once per grid column it spans: keep one.
                if id(cell._tc) in seen:
                    cells.append("")
                    continue
                seen.add(id(cell._tc))
                cells.append(inline(cell.text))
            rows.append(cells)
        if not self.builder.table(rows):
            for row in rows:
                for text in row:
                    self.builder.paragraph(text)

    def pictures(self, paragraph: Any) -> List[int]:
        """Image entries for the paragraph's pictures; their indices in ``builder.images``."""
        # python-docx: the [docx] extra.
        from docx.oxml.ns import qn

        added: List[int] = []
        for drawing in paragraph._p.iter(qn("w:drawing")):
            blip = next(drawing.iter(qn("a:blip")), None)
            rel = blip.get(qn("r:embed")) if blip is not None else None
            part = self.document.part.related_parts.get(rel) if rel else None
            data = getattr(part, "blob", None)
            if not data:
                continue
            extent = next(drawing.iter(qn("wp:extent")), None)
            try:
                size = (int(extent.get("cx")) / _EMU_PER_POINT, int(extent.get("cy")) / _EMU_PER_POINT)
            except (AttributeError, TypeError, ValueError):
                size = image_points(data)
            prop = next(drawing.iter(qn("wp:docPr")), None)
            alt = inline(prop.get("descr") or "") if prop is not None else ""
            partname = str(part.partname)
            ext = partname.rsplit(".", 1)[-1].lower() if "." in partname else "png"
            ext = "jpg" if ext == "jpeg" else ext
            self.builder.image(partname, f"{hashlib.md5(data).hexdigest()}.{ext}", size, alt)
            added.append(len(self.builder.images) - 1)
        return added


def _style_outline_level(style: Any, name: str) -> Optional[int]:
    """``Heading N`` (or a style whose outline level is set, as Word marks custom headings)."""
    match = _HEADING_STYLE_RE.match(name)
    if match:
        return int(match.group(1))
    return _outline_level(getattr(getattr(style, "element", None), "pPr", None))


def _paragraph_outline_level(paragraph: Any) -> Optional[int]:
    return _outline_level(paragraph._p.pPr)


def _outline_level(props: Any) -> Optional[int]:
    # python-docx: the [docx] extra.
    from docx.oxml.ns import qn

    outline = props.find(qn("w:outlineLvl")) if props is not None else None
    if outline is None:
        return None
    try:
        level = int(outline.get(qn("w:val"))) + 1
    except (TypeError, ValueError):
        return None
    return level if 1 <= level <= 6 else None  # 10 (value 9) is Word's "body text"
