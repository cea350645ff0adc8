"""PDFLayoutReader: one LlamaIndex ``Document`` per PDF, HTML, DOCX, Markdown or text file, with layout facts.

HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for
Multi-Documents QA" (Chen et al.), §Markdown Formatter) starts from documents whose chapter
structure is visible: headings, tables with their titles, images with their captions. This
reader keeps what later stages need to recover that structure, without showing any of it to
the embedding model or the LLM (every key is hidden with :func:`schema.hide_from_views`):

* ``Document.text``: the file as Markdown, page after page joined with ``"\\n\\n"``: headings as
  ``#`` lines, tables as Markdown tables (their caption is the line above them), running
  headers/footers removed. ``.md``/``.txt`` files are kept as they are; HTML and DOCX files
  are written into the same Markdown from their own heading levels and tables
  (:mod:`~llama_index_hiqa.readers.html_reader`, :mod:`~llama_index_hiqa.readers.docx_reader`).
* ``PAGE_SPANS``: ``[[page, char_start, char_end], ...]`` (pages from 0), contiguous and
  covering ``Document.text``, so any character span maps back to its pages.
* ``LAYOUT_HEADINGS``: ``[[char_start, char_end, font_size, bold], ...]`` for the lines of
  ``Document.text`` set larger or bolder than the body text (the whole line, Markdown marks
  included); ``BODY_FONT_SIZE``: the most common font size of the text. For ``.md`` files the
  ``#`` lines are the headings (font size 0.0 = unknown, bold ``True``).
* ``IMAGES``: ``[{"page", "bbox", "caption", "char_offset", "xref", "file"}, ...]``: ``file``
  is the name the image is saved under by content hash (:func:`llama_index_hiqa.figures.save_figures`).

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
from typing import Any, Callable, Dict, Iterable, Iterator, List, Literal, Optional, Sequence, Tuple, Union

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.readers.base import BasePydanticReader
from llama_index.core.schema import Document

from llama_index_hiqa import schema
from llama_index_hiqa.readers.titles import CoverLine, document_title, file_name_title
from llama_index_hiqa.headings import is_report_heading
from llama_index_hiqa.errors import (
    CorruptDocumentError,
    DocumentReadError,
    EmptyDocumentError,
    EncryptedDocumentError,
    UnsupportedDocumentError,
)
from llama_index_hiqa.readers._collection import plan_folder, plan_paths
from llama_index_hiqa.readers._markdown_builder import Parsed as _Parsed
from llama_index_hiqa.readers.docx_reader import DOCX_SUFFIXES, read_docx
from llama_index_hiqa.readers.html_reader import HTML_SUFFIXES, read_html
from llama_index_hiqa.readers.text_reader import TEXT_SUFFIXES, read_text_file
from llama_index_hiqa.readers.ocr import is_scan_image, ocr_scanned_pages
from llama_index_hiqa.readers._unruled_tables import unruled_tables
from llama_index_hiqa.readers._page_layout import (
    PAGE_JOINER,
    _body_font_size,
    _grid_markdown,
    _grids,
    _inside,
    _join_pages,
    _Line,
    _normalise,
    _offset_below,
    _PageLines,
    _reading_order,
    _rules,
)
from llama_index_hiqa.readers._pdf_integrity import (
    TRUNCATED,
    lacks_eof_marker,
    mupdf_messages_captured,
    one_line,
    read_pages,
)

logger = logging.getLogger(__name__)

PDF_SUFFIXES = (".pdf",)
COVER_PAGES = 3  # pages read for the document title (a designed cover may precede the form's)
SUPPORTED_SUFFIXES = PDF_SUFFIXES + HTML_SUFFIXES + DOCX_SUFFIXES + TEXT_SUFFIXES

# Captions of figures: the nearest line that starts like one wins over merely near text.
_CAPTION_RE = re.compile(r"^\s*(fig(ure)?\.?|image|photo|diagram|chart|plate)\s*\d*", re.I)
_MD_MARKS_RE = re.compile(r"^[#>\s]*|[*_`]+")
# pymupdf4llm's global switch between its two engines is process-wide state: serialise it.
_PYMUPDF4LLM_LOCK = threading.Lock()


class PDFLayoutReader(BasePydanticReader):
    """Read PDF, HTML, DOCX, Markdown and text files into one ``Document`` each, keeping layout facts.

    ``load_data(path)`` takes a file, a folder (every supported file in it, sorted) or a list
    of paths; ``lazy_load_data`` takes the same and yields one ``Document`` at a time, so a
    caller can ingest a large folder in batches. A single bad file passed directly raises its
    typed :class:`~llama_index_hiqa.errors.DocumentReadError`; in a folder or a list the reader
    logs a warning (``log_skipped``), records the file once in :attr:`failures` and goes on.

    Bad files: a PDF that is cut short or whose damage MuPDF had to repair with loss (no
    ``%%EOF`` end marker, pages it could not read, fewer pages than the file declares) raises
    :class:`~llama_index_hiqa.errors.CorruptDocumentError`; "no extractable text" is kept for
    intact PDFs without a text layer. A ``.txt``/``.md`` file holding binary data raises
    :class:`~llama_index_hiqa.errors.UndecodableTextError`.

    Folders: symlinks whose target lies outside the folder are not followed unless
    ``follow_symlinks`` (each is a :class:`~llama_index_hiqa.errors.SkippedDocumentError` in
    :attr:`failures`, as is a broken symlink); symlinks inside it are followed, and a file
    reachable by several paths (symlinks, hard links) is read once, under its path without
    symlinks when there is one.

    Document ids: ``Document.id_`` and ``schema.DOCUMENT_ID`` are the same string, so
    re-ingesting a file upserts it in a LlamaIndex docstore: the file stem (``manual`` for
    ``manual.pdf``) when no other file of the load has that stem, else the file's path relative
    to the folder with its suffix (``x.md`` and ``x.txt``; ``a/x.pdf`` and ``b/x.pdf`` when
    recursive). A file loaded on its own gets its stem.
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
    detect_unruled_tables: bool = Field(
        default=False,
        description=(
            "Fast engine: also render tables without rules (aligned value columns under their "
            "header row, from word positions) as Markdown tables."
        ),
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
    follow_symlinks: bool = Field(
        default=False,
        description=(
            "Folder loading: follow symlinks whose target lies outside the folder (skipped and "
            "reported in failures otherwise). Symlinks inside the folder are always followed; "
            "a file reachable by several paths is read once."
        ),
    )
    log_skipped: bool = Field(
        default=True,
        description=(
            "Log one warning per file a folder/list load skips. Turn off when the caller "
            "reports reader.failures itself, so each file is reported once."
        ),
    )
    show_progress: bool = Field(default=False, description="Show a progress bar over the files of a folder or list.")
    ocr: Literal["auto", "off"] = Field(
        default="auto",
        description=(
            "'auto': read PDF pages without a text layer (scans) with the bundled OCR (the 'ocr' "
            "extra; MissingExtraError naming it when absent); 'off': such pages stay empty."
        ),
    )
    ocr_dpi: int = Field(default=200, ge=72, le=600, description="Rendering resolution of a page read by OCR.")

    _failures: Dict[str, DocumentReadError] = PrivateAttr(default_factory=dict)

    @classmethod
    def class_name(cls) -> str:
        return "PDFLayoutReader"

    # -- public API ---------------------------------------------------------------------

    @property
    def failures(self) -> List[DocumentReadError]:
        """The files of the last folder/list load that were not read: one typed error per
        path, in the order met; ``str(error)`` is the one line ``"path: reason"``."""
        return list(self._failures.values())

    def load_data(
        self,
        file_path: Union[str, Path, Sequence[Union[str, Path]]],
        extra_info: Optional[Dict[str, Any]] = None,
    ) -> List[Document]:
        """Documents of a file, of every supported file in a folder, or of a list of files."""
        return list(self.lazy_load_data(file_path, extra_info))

    def lazy_load_data(
        self,
        file_path: Union[str, Path, Sequence[Union[str, Path]]],
        extra_info: Optional[Dict[str, Any]] = None,
        skip: Optional[Callable[[str, Path], bool]] = None,
    ) -> Iterator[Document]:
        """Yield the documents of ``load_data`` one file at a time (one parsed file in memory).

        ``skip(document_id, path)`` returning True leaves a file of a folder unread (an index
        that already holds it unchanged). :attr:`failures` is reset when iteration starts and
        is complete once it ends.
        """
        self._failures = {}
        if isinstance(file_path, (str, Path)) and not Path(file_path).is_dir():
            yield self.read_file(file_path, extra_info)
            return
        if isinstance(file_path, (str, Path)):
            plan = plan_folder(Path(file_path), SUPPORTED_SUFFIXES, self.recursive, self.follow_symlinks)
        else:
            plan = plan_paths(file_path)
        for skipped in plan.skipped:
            self._record_failure(skipped)
        files: Iterable[Any] = plan.files
        if self.show_progress:
            from tqdm import tqdm

            files = tqdm(plan.files, desc="reading", unit="file")
        for planned in files:
            if skip is not None and skip(planned.document_id, planned.path):
                continue
            try:
                document = self.read_file(planned.path, extra_info, document_id=planned.document_id)
            except DocumentReadError as exc:
                self._record_failure(exc)
                continue
            yield document

    def read_file(
        self,
        file_path: Union[str, Path],
        extra_info: Optional[Dict[str, Any]] = None,
        document_id: Optional[str] = None,
    ) -> Document:
        """One file to one ``Document``; raises a typed ``DocumentReadError`` naming the file.

        ``document_id`` (default: the file stem) becomes both ``schema.DOCUMENT_ID`` and ``id_``.
        """
        path = Path(file_path)
        try:
            return self._read_checked(path, extra_info, document_id)
        except OSError as exc:  # unreadable (permissions, I/O error): this file only, named
            from llama_index_hiqa.storage.os_boundary import describe_os_error

            raise DocumentReadError(path, f"cannot be read ({describe_os_error(exc)})") from exc

    def _read_checked(self, path: Path, extra_info: Optional[Dict[str, Any]], document_id: Optional[str]) -> Document:
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
        elif suffix in HTML_SUFFIXES:
            parsed = read_html(path, self.max_heading_chars)
        elif suffix in DOCX_SUFFIXES:
            parsed = read_docx(path, self.max_heading_chars)
        else:
            parsed = read_text_file(path)
        return self._to_document(path, parsed, extra_info, document_id or path.stem)

    # -- internals ----------------------------------------------------------------------

    def _record_failure(self, error: DocumentReadError) -> None:
        """One entry per path, logged once (``log_skipped``): a path is never reported twice in a load."""
        if error.path in self._failures:
            return
        self._failures[error.path] = error
        if self.log_skipped:
            logger.warning("PDFLayoutReader skipped %s", error)

    def _to_document(
        self, path: Path, parsed: "_Parsed", extra_info: Optional[Dict[str, Any]], document_id: str
    ) -> Document:
        title = parsed.title or _first_top_heading(parsed.text) or file_name_title(path.stem) or path.stem
        metadata: Dict[str, Any] = dict(extra_info or {})
        metadata.update(
            {
                schema.DOCUMENT_ID: document_id,
                schema.DOCUMENT_TITLE: title,
                schema.FILE_PATH: str(path),
                schema.FILE_NAME: path.name,
                schema.SOURCE_FORMAT: parsed.source_format,
                # HTML and DOCX have no pages: their one page span is only for offsets.
                schema.PAGE_COUNT: 0 if parsed.source_format in schema.FORMATS_WITHOUT_PAGES else len(parsed.page_spans),
                schema.BODY_FONT_SIZE: parsed.body_size,
            }
        )
        schema.set_page_spans(metadata, parsed.page_spans)
        schema.set_layout_headings(metadata, parsed.headings)
        schema.set_images(metadata, parsed.images)
        if parsed.ocr_pages:
            schema.set_ocr_pages(metadata, parsed.ocr_pages)
        # id_ is the ref_doc_id a docstore upserts by: re-ingesting the file replaces it.
        document = Document(text=parsed.text, id_=document_id, metadata=metadata)
        schema.hide_from_views(document)
        return document

    def _read_pdf(self, path: Path) -> "_Parsed":
        with mupdf_messages_captured():
            return self._parse_pdf(path)

    def _parse_pdf(self, path: Path) -> "_Parsed":
        import pymupdf

        no_eof_marker = lacks_eof_marker(path)
        try:
            pdf = pymupdf.open(path)
        # pymupdf raises FileDataError and friends: one typed error naming the file.
        except Exception as exc:
            if no_eof_marker:
                raise CorruptDocumentError(path, f"damaged or truncated PDF: {TRUNCATED}; MuPDF cannot open it") from exc
            raise CorruptDocumentError(path, f"not a readable PDF ({one_line(exc)})") from exc
        try:
            if pdf.needs_pass or pdf.is_encrypted:
                raise EncryptedDocumentError(path, "the PDF is password protected")
            # Without a repair MuPDF followed the file's own cross-references to the end: a
            # missing marker alone (junk appended after it) is then no loss.
            pages = read_pages(path, pdf, truncated=no_eof_marker and bool(pdf.is_repaired))
            ocr_pages = ocr_scanned_pages(path, pdf, pages, self.ocr_dpi) if self.ocr == "auto" else []
            if not any(line.text.strip() for page in pages for line in page.lines):
                reason = (
                    "OCR found no text either" if ocr_pages
                    else "scanned? read it with ocr='auto'" if self.ocr == "off" else "nothing is drawn on its pages"
                )
                raise EmptyDocumentError(path, f"the PDF has no extractable text ({reason})")
            body_size = _body_font_size(pages)
            running = self._running_lines(pages) if self.remove_running_lines else set()
            if self.engine == "fast":
                page_texts, headings = self._render_fast(pdf, pages, body_size, running, ocr_pages)
            else:
                page_texts = self._render_pymupdf4llm(pdf, pages, running)
                if ocr_pages:  # pymupdf4llm sees no text on a scan: its OCR lines, rendered here
                    scanned, _ = self._render_fast(pdf, [pages[n] for n in ocr_pages], body_size, running)
                    for number, page_text in zip(ocr_pages, scanned):
                        page_texts[number] = page_text
                headings = None
            text, spans = _join_pages(page_texts)
            if headings is None:
                headings = self._locate_headings(text, spans, pages, body_size, running)
            images = self._images(pdf, pages, text, spans, set(ocr_pages))
            title = document_title(
                [CoverLine(ln.text, ln.size, ln.bold, page.number) for page in pages[:COVER_PAGES] for ln in page.lines],
                (pdf.metadata or {}).get("title") or "",
                path.stem,
            )
            return _Parsed(text, spans, headings, body_size, images, title, schema.FORMAT_PDF, ocr_pages)
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
            # Financial statements are set in a smaller type than the text, their titles bold
            # in that type: a statement or note title is a heading whatever its size.
            line.bold and (line.size >= body_size * 0.95 or is_report_heading(text))
        )

    def _render_fast(
        self, pdf: Any, pages: List["_PageLines"], body_size: float, running: set, scanned: Sequence[int] = ()
    ) -> Tuple[List[str], List[List[Any]]]:
        levels = self._heading_levels(pages, body_size)
        page_texts: List[str] = []
        headings: List[List[Any]] = []  # offsets relative to the page first, fixed below
        for page in pages:
            tables = self._tables(pdf[page.number]) if self.detect_tables else []
            if self.detect_tables and self.detect_unruled_tables and page.number not in scanned:
                tables += unruled_tables(pdf[page.number].get_text("words"), [t[0] for t in tables])
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
        # Safe: a table we cannot parse stays as plain lines (no text lost); logged.
        except Exception as exc:
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
        self, pdf: Any, pages: List["_PageLines"], text: str, spans: List[List[int]], scanned: set = frozenset()
    ) -> List[Dict[str, Any]]:
        images: List[Dict[str, Any]] = []
        for (page_no, start, end), page in zip(spans, pages):
            try:
                # digest: MuPDF's MD5 of the image, its content hash (the file name it is saved
                # under, see llama_index_hiqa.figures); xref: where to read its bytes again.
                infos = pdf[page_no].get_image_info(hashes=True, xrefs=True)
            # Safe: images are extras (figures); the page's text is read all the same.
            except Exception as exc:
                logger.debug("no image info on page %s (%s)", page_no + 1, exc)
                continue
            for info in infos:
                bbox = [round(float(v), 1) for v in info.get("bbox", (0, 0, 0, 0))]
                if bbox[2] - bbox[0] < 2 or bbox[3] - bbox[1] < 2:
                    continue
                if page_no in scanned and is_scan_image(bbox, page):
                    continue  # the page's own scan, read by OCR: not a figure
                xref = int(info.get("xref") or 0)
                digest = info.get("digest") or b""
                caption = self._caption(bbox, page)
                offset = start
                if caption:
                    idx = text.find(caption, start, end)
                    offset = idx if idx >= 0 else start
                else:
                    offset = _offset_below(bbox, page, text, start, end)
                images.append(
                    {"page": page_no, "bbox": bbox, "caption": caption, "char_offset": offset,
                     "xref": xref, "file": _image_file_name(pdf, xref, digest, page_no, bbox)}
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


def _image_file_name(pdf: Any, xref: int, digest: bytes, page_no: int, bbox: List[float]) -> str:
    """``<content hash>.<ext>``: JPEG images are kept as they are stored, others become PNG.
    Without MuPDF's digest the hash is taken over where the image is (file-stable, not global)."""
    content = digest.hex() if digest else hashlib.md5(f"{page_no}:{xref}:{bbox}".encode()).hexdigest()
    ext = "png"
    if xref:
        try:
            if "DCTDecode" in str(pdf.xref_get_key(xref, "Filter")[1]):
                ext = "jpg"
        # Safe: an odd xref only changes the file suffix (saved as PNG).
        except Exception as exc:
            logger.debug("no image filter for xref %s (%s); saved as PNG", xref, exc)
    return f"{content}.{ext}"


def _first_top_heading(text: str) -> str:
    for line in text.split("\n"):
        if line.startswith("# "):
            return _MD_MARKS_RE.sub("", line).strip()
    return ""
