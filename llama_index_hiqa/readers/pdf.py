"""PDFLayoutReader: one LlamaIndex ``Document`` per PDF, Markdown or text file, with layout facts.

HiQA (``papers/hiqa-paper.md``, §Markdown Formatter) starts from documents whose chapter
structure is visible: headings, tables with their titles, images with their captions. This
reader keeps what later stages need to recover that structure, without showing any of it to
the embedding model or the LLM (every key is hidden with :func:`schema.hide_from_views`):

* ``Document.text``: the file as Markdown, page after page joined with ``"\\n\\n"``: headings as
  ``#`` lines, tables as Markdown tables (their caption is the line above them), running
  headers/footers removed. ``.md``/``.txt`` files are kept as they are.
* ``PAGE_SPANS``: ``[[page, char_start, char_end], ...]`` (pages from 0), contiguous and
  covering ``Document.text``, so any character span maps back to its pages.
* ``LAYOUT_HEADINGS``: ``[[char_start, char_end, font_size, bold], ...]`` for the lines of
  ``Document.text`` set larger or bolder than the body text (the whole line, Markdown marks
  included); ``BODY_FONT_SIZE``: the most common font size of the text. For ``.md`` files the
  ``#`` lines are the headings (font size 0.0 = unknown, bold ``True``).
* ``IMAGES``: ``[{"page", "bbox", "caption", "char_offset"}, ...]``.

Three engines (``engine=``), chosen by measured pages per second (``benchmarks/bench_reader.py``,
section "PDF reader speed" of ``benchmarks/RESULTS.md``):

* ``"fast"`` (default): PyMuPDF's own text extraction (``page.get_text("dict")``) rendered to
  Markdown here, headings from font size/weight, two-column pages read column by column, and
  ruled tables found from the page's grid of rules (see ``_tables`` for why not
  ``find_tables``). It reads at near plain-text speed.
* ``"pymupdf4llm"``: ``pymupdf4llm.to_markdown`` without its layout model: better table and
  multi-column handling on complex pages, several times slower (table detection dominates).
* ``"layout"``: ``pymupdf4llm`` with the ``pymupdf_layout`` model: the best reading order and
  tables, and the slowest.

pymupdf4llm does not reach 20 pages/s on 2 shared cores in any configuration we measured, so
it is an opt-in rather than the default; the fast engine renders the same Markdown shape.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Iterable, List, Literal, Optional, Sequence, Tuple, Union

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.readers.base import BasePydanticReader
from llama_index.core.schema import Document

from llama_index_hiqa import schema
from llama_index_hiqa.readers.titles import CoverLine, document_title, file_name_title
from llama_index_hiqa.errors import (
    CorruptDocumentError,
    DocumentReadError,
    EmptyDocumentError,
    EncryptedDocumentError,
    UnsupportedDocumentError,
)

logger = logging.getLogger(__name__)

PDF_SUFFIXES = (".pdf",)
COVER_PAGES = 3  # pages read for the document title (a designed cover may precede the form's)
TEXT_SUFFIXES = (".md", ".markdown", ".txt")
SUPPORTED_SUFFIXES = PDF_SUFFIXES + TEXT_SUFFIXES

PAGE_JOINER = "\n\n"
# Captions of figures: the nearest line that starts like one wins over merely near text.
_CAPTION_RE = re.compile(r"^\s*(fig(ure)?\.?|image|photo|diagram|chart|plate)\s*\d*", re.I)
_DIGITS_RE = re.compile(r"\d+")
_MD_MARKS_RE = re.compile(r"^[#>\s]*|[*_`]+")
# pymupdf4llm's global switch between its two engines is process-wide state: serialise it.
_PYMUPDF4LLM_LOCK = threading.Lock()


class PDFLayoutReader(BasePydanticReader):
    """Read PDF, Markdown and text files into one ``Document`` each, keeping layout facts.

    ``load_data(path)`` takes a file, a folder (every supported file in it, sorted) or a list
    of paths. A single bad file passed directly raises its typed
    :class:`~llama_index_hiqa.errors.DocumentReadError`; in a folder or a list the reader logs
    a warning, records the failure in :attr:`failures` and goes on with the other files.
    """

    engine: Literal["fast", "pymupdf4llm", "layout"] = Field(
        default="fast",
        description=(
            "'fast': PyMuPDF text + own Markdown rendering (default, plain-text speed); "
            "'pymupdf4llm': pymupdf4llm.to_markdown without the layout model; "
            "'layout': pymupdf4llm with the pymupdf_layout model (slowest, best order/tables)."
        ),
    )
    detect_tables: bool = Field(
        default=True,
        description="Render ruled tables as Markdown tables (fast engine: only pages with ruling lines are searched).",
    )
    min_table_rules: int = Field(
        default=3,
        description=(
            "Fast engine: a grid of rules is a table when it has at least this many "
            "horizontal rules (header + one row) and 2 vertical ones."
        ),
    )
    heading_size_ratio: float = Field(
        default=1.15,
        description="A line whose font size is at least this multiple of the body size is a heading candidate.",
    )
    max_heading_chars: int = Field(
        default=160,
        description="Longer lines are never heading candidates (bold sentences are emphasis, not headings).",
    )
    remove_running_lines: bool = Field(
        default=True,
        description="Drop running headers/footers: lines repeated (digits ignored) in the page margins of most pages.",
    )
    running_margin: float = Field(
        default=0.12,
        description="Share of page height at top and bottom where running headers/footers live.",
    )
    running_min_share: float = Field(
        default=0.5,
        description="A margin line is a running header/footer when it occurs on at least this share of the pages (and on 2 or more).",
    )
    caption_distance: float = Field(
        default=36.0,
        description="Maximum distance in points between an image and its caption line.",
    )
    recursive: bool = Field(default=False, description="Folder loading: include subfolders.")
    show_progress: bool = Field(default=False, description="Show a progress bar over the files of a folder or list.")

    _failures: List[DocumentReadError] = PrivateAttr(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        return "PDFLayoutReader"

    # -- public API ---------------------------------------------------------------------

    @property
    def failures(self) -> List[DocumentReadError]:
        """The files of the last folder/list load that could not be read (path + typed error)."""
        return list(self._failures)

    def load_data(
        self,
        file_path: Union[str, Path, Sequence[Union[str, Path]]],
        extra_info: Optional[Dict[str, Any]] = None,
    ) -> List[Document]:
        """Documents of a file, of every supported file in a folder, or of a list of files."""
        self._failures = []
        if isinstance(file_path, (str, Path)) and not Path(file_path).is_dir():
            return [self.read_file(file_path, extra_info)]
        paths = self._collect(file_path)
        documents: List[Document] = []
        if self.show_progress:
            from tqdm import tqdm

            paths = tqdm(paths, desc="reading", unit="file")
        for path in paths:
            try:
                documents.append(self.read_file(path, extra_info))
            except DocumentReadError as exc:
                logger.warning("PDFLayoutReader skipped %s", exc)
                self._failures.append(exc)
        return documents

    def lazy_load_data(self, *args: Any, **kwargs: Any) -> Iterable[Document]:
        yield from self.load_data(*args, **kwargs)

    def read_file(
        self, file_path: Union[str, Path], extra_info: Optional[Dict[str, Any]] = None
    ) -> Document:
        """One file to one ``Document``; raises a typed ``DocumentReadError`` naming the file."""
        path = Path(file_path)
        suffix = path.suffix.lower()
        if not path.exists():
            raise DocumentReadError(path, "no such file or folder")
        if suffix not in SUPPORTED_SUFFIXES:
            raise UnsupportedDocumentError(
                path, f"unsupported file type {suffix or '(none)'}; expected one of {SUPPORTED_SUFFIXES}"
            )
        if not path.is_file():
            raise UnsupportedDocumentError(path, "not a regular file")
        if path.stat().st_size == 0:
            raise EmptyDocumentError(path, "the file is empty (0 bytes)")
        if suffix in PDF_SUFFIXES:
            parsed = self._read_pdf(path)
        else:
            parsed = _read_text_file(path)
        return self._to_document(path, parsed, extra_info)

    # -- internals ----------------------------------------------------------------------

    def _collect(self, spec: Union[str, Path, Sequence[Union[str, Path]]]) -> List[Path]:
        if isinstance(spec, (str, Path)):
            folder = Path(spec)
            pattern = "**/*" if self.recursive else "*"
            return sorted(
                p for p in folder.glob(pattern)
                if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES
            )
        return [Path(p) for p in spec]

    def _to_document(
        self, path: Path, parsed: "_Parsed", extra_info: Optional[Dict[str, Any]]
    ) -> Document:
        title = parsed.title or _first_top_heading(parsed.text) or file_name_title(path.stem) or path.stem
        metadata: Dict[str, Any] = dict(extra_info or {})
        metadata.update(
            {
                schema.DOCUMENT_ID: path.stem,
                schema.DOCUMENT_TITLE: title,
                schema.FILE_PATH: str(path),
                schema.FILE_NAME: path.name,
                schema.PAGE_COUNT: len(parsed.page_spans),
                schema.PAGE_SPANS: parsed.page_spans,
                schema.LAYOUT_HEADINGS: parsed.headings,
                schema.BODY_FONT_SIZE: parsed.body_size,
                schema.IMAGES: parsed.images,
            }
        )
        # Stable per resolved path, so IngestionPipeline's docstore dedups re-ingestion.
        doc_id = hashlib.sha1(str(path.resolve()).encode("utf-8")).hexdigest()
        document = Document(text=parsed.text, id_=doc_id, metadata=metadata)
        schema.hide_from_views(document)
        return document

    def _read_pdf(self, path: Path) -> "_Parsed":
        import pymupdf

        try:
            pdf = pymupdf.open(path)
        except Exception as exc:  # pymupdf raises FileDataError and friends
            raise CorruptDocumentError(path, f"not a readable PDF ({exc})") from exc
        try:
            if pdf.needs_pass or pdf.is_encrypted:
                raise EncryptedDocumentError(path, "the PDF is password protected")
            if pdf.page_count == 0:
                raise EmptyDocumentError(path, "the PDF has no pages")
            try:
                pages = [_page_lines(pdf[i], i) for i in range(pdf.page_count)]
            except Exception as exc:
                raise CorruptDocumentError(path, f"cannot extract text ({exc})") from exc
            if not any(line.text.strip() for page in pages for line in page.lines):
                raise EmptyDocumentError(path, "the PDF has no extractable text (scanned? run OCR first)")
            body_size = _body_font_size(pages)
            running = self._running_lines(pages) if self.remove_running_lines else set()
            if self.engine == "fast":
                page_texts, headings = self._render_fast(pdf, pages, body_size, running)
            else:
                page_texts = self._render_pymupdf4llm(pdf, pages, running)
                headings = None
            text, spans = _join_pages(page_texts)
            if headings is None:
                headings = self._locate_headings(text, spans, pages, body_size, running)
            images = self._images(pdf, pages, text, spans)
            title = document_title(
                [CoverLine(ln.text, ln.size, ln.bold, page.number) for page in pages[:COVER_PAGES] for ln in page.lines],
                (pdf.metadata or {}).get("title") or "",
                path.stem,
            )
            return _Parsed(text, spans, headings, body_size, images, title)
        finally:
            pdf.close()

    # running headers / footers --------------------------------------------------------

    def _running_lines(self, pages: List["_PageLines"]) -> set:
        """Normalised texts of margin lines that repeat on most pages (page numbers ignored)."""
        if len(pages) < 2:
            return set()
        counts: Counter = Counter()
        for page in pages:
            seen = {
                _normalise(line.text)
                for line in page.lines
                if line.in_margin(page.height, self.running_margin) and _normalise(line.text)
            }
            counts.update(seen)
        need = max(2, int(round(self.running_min_share * len(pages))))
        return {key for key, n in counts.items() if n >= need}

    def _is_running(self, line: "_Line", page: "_PageLines", running: set) -> bool:
        return bool(running) and line.in_margin(page.height, self.running_margin) and (
            _normalise(line.text) in running
        )

    # fast engine ----------------------------------------------------------------------

    def _heading_levels(self, pages: List["_PageLines"], body_size: float) -> Dict[float, int]:
        """Font sizes larger than the body, largest first, mapped to Markdown levels 1..4."""
        sizes = sorted(
            {
                line.size
                for page in pages
                for line in page.lines
                if line.size >= body_size * self.heading_size_ratio
                and len(line.text.strip()) <= self.max_heading_chars
            },
            reverse=True,
        )
        return {size: min(i + 1, 4) for i, size in enumerate(sizes)}

    def _is_candidate(self, line: "_Line", body_size: float) -> bool:
        text = line.text.strip()
        if not text or len(text) > self.max_heading_chars:
            return False
        return line.size >= body_size * self.heading_size_ratio or (
            line.bold and line.size >= body_size * 0.95
        )

    def _render_fast(
        self, pdf: Any, pages: List["_PageLines"], body_size: float, running: set
    ) -> Tuple[List[str], List[List[Any]]]:
        levels = self._heading_levels(pages, body_size)
        page_texts: List[str] = []
        headings: List[List[Any]] = []  # offsets relative to the page first, fixed below
        for page in pages:
            tables = self._tables(pdf[page.number]) if self.detect_tables else []
            items: List[Tuple[float, float, int, Any]] = []  # (band key..., payload)
            for line in page.lines:
                if self._is_running(line, page, running):
                    continue
                if any(_inside(line.bbox, t[0]) for t in tables):
                    continue
                items.append((line.bbox, "line", line))
            for bbox, markdown in tables:
                items.append((bbox, "table", markdown))
            ordered = _reading_order(items, page.width)
            parts: List[str] = []
            page_heads: List[List[Any]] = []
            offset = 0
            paragraph: List[str] = []
            last_block: Optional[Tuple[int, Any]] = None

            def flush() -> None:
                nonlocal offset
                if paragraph:
                    chunk = " ".join(paragraph)
                    parts.append(chunk)
                    offset += len(chunk) + 2
                    paragraph.clear()

            for _, kind, payload in ordered:
                if kind == "table":
                    flush()
                    parts.append(payload)
                    offset += len(payload) + 2
                    last_block = None
                    continue
                line = payload
                text = line.text.strip()
                if not text:
                    continue
                if self._is_candidate(line, body_size):
                    flush()
                    level = levels.get(line.size)
                    rendered = ("#" * level + " " + text) if level else f"**{text}**"
                    page_heads.append([offset, offset + len(rendered), line.size, line.bold])
                    parts.append(rendered)
                    offset += len(rendered) + 2
                    last_block = None
                    continue
                if last_block is not None and last_block != line.block:
                    flush()
                paragraph.append(text)
                last_block = line.block
            flush()
            page_texts.append("\n\n".join(parts))
            headings.append(page_heads)
        # Convert page-relative heading offsets to document offsets.
        absolute: List[List[Any]] = []
        start = 0
        for text, heads in zip(page_texts, headings):
            for s, e, size, bold in heads:
                absolute.append([start + s, start + e, size, bool(bold)])
            start += len(text) + len(PAGE_JOINER)
        return page_texts, absolute

    def _tables(self, page: Any) -> List[Tuple[Tuple[float, float, float, float], str]]:
        """Ruled tables of a page as (bbox, Markdown), from the page's grid of rules and words.

        Why not PyMuPDF's ``find_tables``: measured on FinanceBench pages it costs 0.3-1 s a
        page on 2 shared cores (its per-character extraction in Python dominates; with its
        default ``use_layout=True`` it also runs the layout model), which alone would hold the
        reader under 5 pages/s. A ruled table is a connected grid of horizontal and vertical
        rules; finding that grid and dropping the page's words into its cells takes
        milliseconds. Tables without vertical rules stay plain text lines (no text is lost);
        the pymupdf4llm engines find those too.
        """
        try:
            horizontal, vertical = _rules(page)
            if len(horizontal) < self.min_table_rules or len(vertical) < 2:
                return []
            grids = _grids(horizontal, vertical, self.min_table_rules)
            if not grids:
                return []
            words = page.get_text("words")
            tables = []
            for ys, xs in grids:
                markdown = _grid_markdown(ys, xs, words)
                if markdown:
                    tables.append(((xs[0], ys[0], xs[-1], ys[-1]), markdown))
            return tables
        except Exception as exc:  # a table we cannot parse stays as plain lines: no text lost
            logger.debug("table detection failed on page %s: %s", page.number, exc)
            return []

    # pymupdf4llm engines ----------------------------------------------------------------

    def _render_pymupdf4llm(self, pdf: Any, pages: List["_PageLines"], running: set) -> List[str]:
        import pymupdf4llm

        with _PYMUPDF4LLM_LOCK:
            previous = bool(getattr(pymupdf4llm, "_use_layout", False))
            pymupdf4llm.use_layout(self.engine == "layout")
            try:
                kwargs: Dict[str, Any] = {"page_chunks": True, "show_progress": False}
                if self.engine == "layout":
                    kwargs.update(header=not self.remove_running_lines, footer=not self.remove_running_lines, use_ocr=False)
                elif not self.detect_tables:
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

    def _locate_headings(
        self, text: str, spans: List[List[int]], pages: List["_PageLines"], body_size: float, running: set
    ) -> List[List[Any]]:
        """Map heading candidates found by font size onto lines of pymupdf4llm's Markdown."""
        found: List[List[Any]] = []
        for (page_no, start, end), page in zip(spans, pages):
            cursor = start
            for line in page.lines:
                if not self._is_candidate(line, body_size) or self._is_running(line, page, running):
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

    # images -----------------------------------------------------------------------------

    def _images(
        self, pdf: Any, pages: List["_PageLines"], text: str, spans: List[List[int]]
    ) -> List[Dict[str, Any]]:
        images: List[Dict[str, Any]] = []
        for (page_no, start, end), page in zip(spans, pages):
            try:
                infos = pdf[page_no].get_image_info()
            except Exception:  # images are extras: never fail a document for them
                continue
            for info in infos:
                bbox = [round(float(v), 1) for v in info.get("bbox", (0, 0, 0, 0))]
                if bbox[2] - bbox[0] < 2 or bbox[3] - bbox[1] < 2:
                    continue
                caption = self._caption(bbox, page)
                offset = start
                if caption:
                    idx = text.find(caption, start, end)
                    offset = idx if idx >= 0 else start
                else:
                    offset = _offset_below(bbox, page, text, start, end)
                images.append(
                    {"page": page_no, "bbox": bbox, "caption": caption, "char_offset": offset}
                )
        return images

    def _caption(self, bbox: List[float], page: "_PageLines") -> str:
        """The nearest line below (else above) the image; lines that read like captions first."""
        best: Optional[Tuple[int, float, str]] = None
        for line in page.lines:
            text = line.text.strip()
            if not text:
                continue
            x0, y0, x1, y1 = line.bbox
            if x1 < bbox[0] - 5 or x0 > bbox[2] + 5:
                continue
            if y0 >= bbox[3] - 2:
                distance = y0 - bbox[3]
            elif y1 <= bbox[1] + 2:
                distance = (bbox[1] - y1) * 1.5  # captions sit below images more often
            else:
                continue
            if distance > self.caption_distance:
                continue
            rank = (0 if _CAPTION_RE.match(text) else 1, distance, text)
            if best is None or rank < best:
                best = rank
        return best[2] if best else ""


# --- plain data and helpers --------------------------------------------------------------


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


class _Parsed:
    __slots__ = ("text", "page_spans", "headings", "body_size", "images", "title")

    def __init__(self, text, page_spans, headings, body_size, images, title=""):
        self.text, self.page_spans, self.headings = text, page_spans, headings
        self.body_size, self.images, self.title = body_size, images, title


def _page_lines(page: Any, number: int) -> _PageLines:
    """Text lines of a page with their dominant font size and weight (one get_text call)."""
    lines: List[_Line] = []
    import pymupdf

    # Text flags without images: image blocks are read separately (get_image_info), cheaper.
    data = page.get_text("dict", flags=pymupdf.TEXTFLAGS_TEXT)
    for b_idx, block in enumerate(data.get("blocks", [])):
        for line in block.get("lines", []):
            spans = [s for s in line.get("spans", []) if s.get("text")]
            text = "".join(s["text"] for s in spans)
            if not text.strip():
                continue
            weights: Counter = Counter()
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
    weights: Counter = Counter()
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


def _grids(horizontal, vertical, min_rows: int) -> List[Tuple[List[float], List[float]]]:
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
    grid = []
    for r in range(len(ys) - 1):
        row = []
        for c in range(len(xs) - 1):
            inside = sorted(cells.get((r, c), []), key=lambda w: (w[5], w[6], w[7]))
            row.append(" ".join(str(w[4]) for w in inside).replace("|", "\\|"))
        if any(row):
            grid.append(row)
    width = len(xs) - 1
    lines = ["|" + "|".join(grid[0]) + "|", "|" + "|".join(["---"] * width) + "|"]
    lines += ["|" + "|".join(r) + "|" for r in grid[1:]]
    return "\n".join(lines)


def _normalise(text: str) -> str:
    """Running-line key: digits (page numbers, dates) folded, whitespace and case ignored."""
    return " ".join(_DIGITS_RE.sub("#", text).lower().split())


def _inside(inner: Sequence[float], outer: Sequence[float], tol: float = 2.0) -> bool:
    """Whether the centre of box ``inner`` lies in box ``outer``."""
    cx, cy = (inner[0] + inner[2]) / 2, (inner[1] + inner[3]) / 2
    return outer[0] - tol <= cx <= outer[2] + tol and outer[1] - tol <= cy <= outer[3] + tol


def _reading_order(items: List[Tuple[Tuple[float, ...], str, Any]], width: float) -> List[Tuple]:
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
    ordered: List[Tuple] = []
    band: List[Tuple] = []

    def is_column(side: List[Tuple]) -> bool:
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


def _first_top_heading(text: str) -> str:
    for line in text.split("\n"):
        if line.startswith("# "):
            return _MD_MARKS_RE.sub("", line).strip()
    return ""


def _read_text_file(path: Path) -> _Parsed:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:  # keep every byte: latin-1 decodes anything
        text = raw.decode("latin-1")
    if not text.strip():
        raise EmptyDocumentError(path, "the file has no text")
    headings = []
    if path.suffix.lower() in (".md", ".markdown"):
        offset = 0
        for line in text.split("\n"):
            if re.match(r"^#{1,6}\s", line):
                headings.append([offset, offset + len(line.rstrip("\r")), 0.0, True])
            offset += len(line) + 1
    return _Parsed(text, [[0, 0, len(text)]], headings, 0.0, [], "")
