"""HTML files (SEC filings as EDGAR publishes them, exported manuals) as HiQA Markdown.

HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA",
§Markdown Formatter) needs each chapter as a heading with its level and each table as a
Markdown table under its caption; an LLM rewrites PDFs into that shape. HTML states it:
``h1``-``h6`` become ``#`` lines of the same level, ``table`` elements Markdown tables, and
the segment parsers then read the file exactly as they read a ``.md`` file. Filings that mark
their chapters by bold type only ("Item 7. Management's Discussion ...") keep those lines as
``**bold**`` paragraphs recorded as layout headings, which the parsers accept when numbered
like a report heading (``Part II``, ``Item 7A``, ``Note 3``).

Parsed with BeautifulSoup over lxml (the ``html`` extra). What is skipped: scripts, styles,
``<head>``, and anything hidden with ``display:none`` (EDGAR's inline-XBRL header facts).
Images are local ``src`` files next to the HTML (remote and ``data:`` images are not read:
nothing is downloaded).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Iterable, List
from urllib.parse import unquote, urlparse

from llama_index_hiqa import schema
from llama_index_hiqa.errors import CorruptDocumentError, DocumentReadError, EmptyDocumentError, MissingExtraError
from llama_index_hiqa.readers._markdown_builder import MarkdownBuilder, Parsed, image_points, inline
from llama_index_hiqa.readers._pdf_integrity import one_line
from llama_index_hiqa.readers.titles import CoverLine, document_title

HTML_SUFFIXES = (".html", ".htm", ".xhtml")

_BLOCK_TAGS = frozenset(
    "address article aside blockquote body center dd details div dl dt fieldset figcaption figure footer "
    "form h1 h2 h3 h4 h5 h6 header hr html li main nav ol p pre section summary table tbody td tfoot th "
    "thead tr ul".split()
)
_SKIP_TAGS = ("script", "style", "noscript", "template", "head", "iframe", "object", "svg")
_HIDDEN_RE = re.compile(r"display\s*:\s*none", re.I)
_BOLD_RE = re.compile(r"font-weight\s*:\s*(bold|bolder|[6-9]00)", re.I)
_SIZE_RE = re.compile(r"font-size\s*:\s*([\d.]+)\s*(pt|px)", re.I)
_HEADING_RE = re.compile(r"^h([1-6])$")
# Cells that belong to their neighbour in SEC statements: "$" before a value, ")" / "%" after.
_LEADING_CELLS = frozenset({"$", "€", "£", "¥", "("})
_TRAILING_CELLS = frozenset({")", "%", ")%", "%)"})


def read_html(path: Path, max_heading_chars: int = 160) -> Parsed:
    """One HTML file as Markdown with its headings, tables and images (see the module doc).

    Args:
        path: the HTML file.
        max_heading_chars: the longest bold paragraph taken as a heading candidate, in
            characters.

    Returns:
        The [`Parsed`][llama_index_hiqa.readers._markdown_builder.Parsed] document.

    Raises:
        MissingExtraError: the ``html`` extra is not installed (names the package).
        DocumentReadError: the file cannot be read.
        CorruptDocumentError: the file is not readable HTML.
        EmptyDocumentError: the file has no text.
    """
    try:
        import lxml  # noqa: F401  (the parser BeautifulSoup is asked for)
        from bs4 import BeautifulSoup
    except ImportError as exc:
        raise MissingExtraError(path, "html", exc.name or "beautifulsoup4", "reading HTML") from exc
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DocumentReadError(path, f"cannot read the file ({one_line(exc)})") from exc
    try:
        # bytes, not text: BeautifulSoup finds the encoding (BOM, <meta charset>, detection).
        soup = BeautifulSoup(raw, "lxml")
    # Safe: any parser failure is this file's typed error; lxml rarely gives up on HTML.
    except Exception as exc:
        raise CorruptDocumentError(path, f"not a readable HTML file ({one_line(exc)})") from exc
    page_title = inline(soup.title.get_text(" ")) if soup.title else ""
    for tag in soup(_SKIP_TAGS):
        tag.decompose()
    for tag in soup.find_all(style=_HIDDEN_RE):
        tag.decompose()
    walker = _Walker(path, MarkdownBuilder(max_heading_chars))
    walker.block(soup.body or soup)
    builder = walker.builder
    if not builder.text.strip():
        raise EmptyDocumentError(path, "the HTML file has no text")
    # A filing's <title> is often its EDGAR file name ("acme-20231231"): the cover lines,
    # the <title> and the file name are weighed as for a PDF's first page.
    cover = [CoverLine(text, size, bold, 0) for text, size, bold in builder.cover]
    title = document_title(cover, page_title, path.stem)
    return builder.result(title, schema.FORMAT_HTML)


class _Walker:
    """Depth-first walk of the body: inline runs become paragraphs, blocks are handled by kind."""

    def __init__(self, path: Path, builder: MarkdownBuilder) -> None:
        self.path = path
        self.builder = builder

    # -- blocks ---------------------------------------------------------------------------

    def block(self, element: Any) -> None:
        """Walk ``element``'s children: consecutive inline content is one paragraph."""
        run: List[Any] = []
        for child in element.children:
            name = getattr(child, "name", None)
            if name is None:
                if _is_text(child):
                    run.append(child)
                continue
            if name in _BLOCK_TAGS or name == "img":
                self.flush(run)
                self.element(child)
            elif child.find(list(_BLOCK_TAGS) + ["img"]) is not None:
                # An inline element wrapping blocks (<a><div>..</div></a>, <font><p>..): walk it.
                self.flush(run)
                self.block(child)
            else:
                run.append(child)
        self.flush(run)

    def element(self, element: Any) -> None:
        name = element.name
        heading = _HEADING_RE.match(name)
        if heading:
            self.builder.heading(element.get_text(" "), int(heading.group(1)), _font_size(element))
        elif name == "table":
            self.table(element)
        elif name == "img":
            self.image(element, "")
        elif name == "figure":
            caption_el = element.find("figcaption")
            caption = inline(caption_el.get_text(" ")) if caption_el is not None else ""
            for img in element.find_all("img"):
                self.image(img, caption)
            if caption:
                self.builder.paragraph(caption)
        elif name in ("ul", "ol"):
            for item in element.find_all("li", recursive=False):
                if item.find(list(_BLOCK_TAGS) + ["img"]) is not None:
                    self.block(item)
                else:
                    self.builder.paragraph(item.get_text(" "), prefix="- ")
        elif name == "hr":
            return
        elif element.find(list(_BLOCK_TAGS) + ["img"]) is not None:
            self.block(element)
        else:
            self.flush([element])

    def flush(self, run: List[Any]) -> None:
        if not run:
            return
        text = "".join(_text_of(node) for node in run)
        strings = [t for node in run for t in _strings(node) if t.strip()]
        run.clear()
        if not inline(text):
            return
        # Bold when every piece of its text is bold: a chapter line of a filing set in bold
        # type; a bold word inside a sentence does not make the sentence a heading.
        bold = bool(strings) and all(_is_bold(t) for t in strings)
        self.builder.paragraph(text, bold=bold, size=_font_size(strings[0].parent) if strings else 0.0)

    # -- tables and images --------------------------------------------------------------

    def table(self, element: Any) -> None:
        rows = _table_rows(element)
        if not self.builder.table(rows):
            # A layout table (one column, one row): its cells are ordinary blocks.
            for cell in element.find_all(["td", "th"]):
                if cell.find_parent("table") is element:
                    self.block(cell)

    def image(self, element: Any, caption: str) -> None:
        src = str(element.get("src") or "").strip()
        parsed = urlparse(src)
        if not src or parsed.scheme not in ("", "file"):
            return  # remote and data: images are not read (nothing is downloaded)
        target = (self.path.parent / unquote(parsed.path)).resolve()
        try:
            data = target.read_bytes()
        except OSError:
            return  # a missing image file loses its figure only
        width, height = _attr_points(element.get("width")), _attr_points(element.get("height"))
        size = (width, height) if width and height else image_points(data)
        ext = target.suffix.lower().lstrip(".") or "png"
        ext = "jpg" if ext == "jpeg" else ext
        name = f"{hashlib.md5(data).hexdigest()}.{ext}"
        alt = inline(str(element.get("alt") or element.get("title") or ""))
        self.builder.image(unquote(parsed.path), name, size, caption or alt)


# --- helpers ---------------------------------------------------------------------------------


def _is_text(node: Any) -> bool:
    # BeautifulSoup: the [html] extra.
    from bs4 import Comment, Declaration, Doctype, ProcessingInstruction

    return not isinstance(node, (Comment, Declaration, Doctype, ProcessingInstruction))


def _strings(node: Any) -> Iterable[Any]:
    if getattr(node, "name", None) is None:
        return [node] if _is_text(node) else []
    return [s for s in node.find_all(string=True) if _is_text(s)]


def _text_of(node: Any) -> str:
    if getattr(node, "name", None) is None:
        return str(node) if _is_text(node) else ""
    if node.name == "br":
        return " "
    return node.get_text(" ")


def _is_bold(string: Any) -> bool:
    """Whether a text node is set bold by a ``b``/``strong`` or a ``font-weight`` style on
    the way up to (and including) its block."""
    element = string.parent
    while element is not None and getattr(element, "name", None):
        if element.name in ("b", "strong", "th") or _BOLD_RE.search(str(element.get("style") or "")):
            return True
        if element.name in _BLOCK_TAGS:
            return False
        element = element.parent
    return False


def _font_size(element: Any) -> float:
    """The nearest ``font-size`` style in points (px at 96 dpi); 0.0 when none is set."""
    while element is not None and getattr(element, "name", None):
        match = _SIZE_RE.search(str(element.get("style") or ""))
        if match:
            value = float(match.group(1))
            return round(value * 0.75 if match.group(2).lower() == "px" else value, 1)
        element = element.parent
    return 0.0


def _attr_points(value: Any) -> float:
    match = re.match(r"^\s*([\d.]+)\s*(px)?\s*$", str(value or ""))
    return float(match.group(1)) * 0.75 if match else 0.0


def _table_rows(table: Any) -> List[List[str]]:
    """The table's rows as cell texts (this table's own rows, not a nested table's), a
    ``colspan`` cell followed by empty cells, SEC statement cells ("$", ")", "%") joined to
    their value; spacer columns of filings are then compacted (see ``_compact``)."""
    rows: List[List[str]] = []
    for tr in table.find_all("tr"):
        if tr.find_parent("table") is not table:
            continue
        cells: List[str] = []
        for cell in tr.find_all(["td", "th"], recursive=False):
            cells.append(inline(cell.get_text(" ")))
            try:
                span = min(int(cell.get("colspan") or 1), 50)
            except ValueError:
                span = 1
            cells.extend([""] * (span - 1))
        rows.append(_join_symbols(cells))
    return _compact(rows)


def _join_symbols(cells: List[str]) -> List[str]:
    out = list(cells)
    for i, text in enumerate(out):
        if text in _LEADING_CELLS:
            nxt = next((j for j in range(i + 1, len(out)) if out[j]), None)
            if nxt is not None:
                out[nxt] = text + out[nxt] if text != "(" else "(" + out[nxt]
                out[i] = ""
        elif text in _TRAILING_CELLS:
            prev = next((j for j in range(i - 1, -1, -1) if out[j]), None)
            if prev is not None:
                out[prev] = out[prev] + text
                out[i] = ""
    return out


def _compact(rows: List[List[str]]) -> List[List[str]]:
    """SEC filings lay statements out on a grid of narrow spacer columns, so a header and
    its values rarely share a column index. When most cells after the row label are empty
    (a sparse grid), each row keeps its label and its non-empty cells in order, which lines
    the values up under the year headers; a dense table is kept as it is (its empty cells
    mean missing values)."""
    if not rows:
        return rows
    body = [cell for row in rows for cell in row[1:]]
    if not body or sum(1 for c in body if c) / len(body) >= 0.5:
        return rows
    rows = [[row[0]] + [c for c in row[1:] if c] for row in rows]
    rows = [row for row in rows if any(row)]
    return _merge_header_rows(rows)


def _merge_header_rows(rows: List[List[str]]) -> List[List[str]]:
    """Leading rows without a row label are stacked column headers ("Year Ended December 31,"
    over "2023 | 2022"): one header row whose labels carry both, so a value's column says
    which year of which period."""
    head = 0
    while head < len(rows) - 1 and not rows[head][0]:
        head += 1
    if head < 2:
        return rows
    stacked, header = rows[: head - 1], list(rows[head - 1])
    for upper in reversed(stacked):
        cells = upper[1:]
        for j in range(1, len(header)):
            over = cells[0] if len(cells) == 1 else (cells[j - 1] if j - 1 < len(cells) else "")
            if over:
                header[j] = f"{over} {header[j]}".strip()
    return [header] + rows[head:]
