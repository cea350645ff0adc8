"""PDFLayoutReader: one LlamaIndex ``Document`` per PDF, HTML, DOCX, Markdown or text file, with layout facts.

HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for
Multi-Documents QA" (Chen et al.), §Markdown Formatter) starts from documents whose chapter
structure is visible: headings, tables with their titles, images with their captions. This
reader keeps what later stages need to recover that structure, without showing any of it to
the embedding model or the LLM (every key is hidden with [`schema.hide_from_views`][llama_index_hiqa.schema.hide_from_views]):

* ``Document.text``: the file as Markdown, page after page joined with ``"\\n\\n"``: headings as
  ``#`` lines, tables as Markdown tables (their caption is the line above them), running
  headers/footers removed. ``.md``/``.txt`` files are kept as they are; HTML and DOCX files
  are written into the same Markdown from their own heading levels and tables
  ([`html_reader`][llama_index_hiqa.readers.html_reader], [`docx_reader`][llama_index_hiqa.readers.docx_reader]).
* ``PAGE_SPANS``: ``[[page, char_start, char_end], ...]`` (pages from 0), contiguous and
  covering ``Document.text``, so any character span maps back to its pages.
* ``LAYOUT_HEADINGS``: ``[[char_start, char_end, font_size, bold], ...]`` for the lines of
  ``Document.text`` set larger or bolder than the body text (the whole line, Markdown marks
  included); ``BODY_FONT_SIZE``: the most common font size of the text. For ``.md`` files the
  ``#`` lines are the headings (font size 0.0 = unknown, bold ``True``).
* ``IMAGES``: ``[{"page", "bbox", "caption", "char_offset", "xref", "file"}, ...]``: ``file``
  is the name the image is saved under by content hash ([`llama_index_hiqa.figures.save_figures`][llama_index_hiqa.figures.save_figures]).
* ``TEXT_BOXES`` (PDFs): where every written line and table of ``Document.text`` lies on its
  page (the text layer's boxes, the OCR boxes on scanned pages), from which each node keeps
  the rectangles its own characters cover (``schema.PAGE_BOXES``).

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

import logging
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Literal, Optional, Sequence, Union

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.readers.base import BasePydanticReader
from llama_index.core.schema import Document
from tqdm import tqdm

from llama_index_hiqa import schema
from llama_index_hiqa.errors import (
    CorruptDocumentError,
    DocumentReadError,
    EmptyDocumentError,
    EncryptedDocumentError,
    UnsupportedDocumentError,
)
from llama_index_hiqa.errors import describe_os_error
from llama_index_hiqa.readers._collection import plan_folder, plan_paths
from llama_index_hiqa.readers._markdown_builder import Parsed as _Parsed
from llama_index_hiqa.readers._page_layout import _body_font_size, _join_pages
# The page rendering and the figures of a PDF, each in its own module.
from llama_index_hiqa.readers._pdf_figures import pdf_images
from llama_index_hiqa.readers._pdf_integrity import (
    TRUNCATED,
    lacks_eof_marker,
    mupdf_messages_captured,
    one_line,
    read_pages,
)
from llama_index_hiqa.readers._pdf_render import (
    _MD_MARKS_RE,
    locate_headings,
    locate_lines,
    render_fast,
    render_pymupdf4llm,
    running_lines,
)
from llama_index_hiqa.readers.docx_reader import DOCX_SUFFIXES, read_docx
from llama_index_hiqa.readers.html_reader import HTML_SUFFIXES, read_html
from llama_index_hiqa.readers.text_reader import TEXT_SUFFIXES, read_text_file
from llama_index_hiqa.readers.ocr import ocr_scanned_pages
from llama_index_hiqa.readers.titles import CoverLine, document_title, file_name_title

logger = logging.getLogger(__name__)

PDF_SUFFIXES = (".pdf",)
COVER_PAGES = 3  # pages read for the document title (a designed cover may precede the form's)
SUPPORTED_SUFFIXES = PDF_SUFFIXES + HTML_SUFFIXES + DOCX_SUFFIXES + TEXT_SUFFIXES



class PDFLayoutReader(BasePydanticReader):
    """Read PDF, HTML, DOCX, Markdown and text files into one ``Document`` each, keeping layout facts.

    ``load_data(path)`` takes a file, a folder (every supported file in it, sorted) or a list
    of paths; ``lazy_load_data`` takes the same and yields one ``Document`` at a time, so a
    caller can ingest a large folder in batches. A single bad file passed directly raises its
    typed [`DocumentReadError`][llama_index_hiqa.errors.DocumentReadError]; in a folder or a list the reader
    logs a warning (``log_skipped``), records the file once in [`failures`][llama_index_hiqa.readers.pdf.PDFLayoutReader.failures] and goes on.

    Bad files: a PDF that is cut short or whose damage MuPDF had to repair with loss (no
    ``%%EOF`` end marker, pages it could not read, fewer pages than the file declares) raises
    [`CorruptDocumentError`][llama_index_hiqa.errors.CorruptDocumentError]; "no extractable text" is kept for
    intact PDFs without a text layer. A ``.txt``/``.md`` file holding binary data raises
    [`UndecodableTextError`][llama_index_hiqa.errors.UndecodableTextError].

    Folders: symlinks whose target lies outside the folder are not followed unless
    ``follow_symlinks`` (each is a [`SkippedDocumentError`][llama_index_hiqa.errors.SkippedDocumentError] in
    [`failures`][llama_index_hiqa.readers.pdf.PDFLayoutReader.failures], as is a broken symlink); symlinks inside it are followed, and a file
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
        """Documents of a file, of every supported file in a folder, or of a list of files.

        Args:
            file_path: A file, a folder or a list of files.
            extra_info: Metadata added to every document.

        Returns:
            One ``Document`` per readable file; the others are in [`failures`][llama_index_hiqa.readers.pdf.PDFLayoutReader.failures].
        """
        return list(self.lazy_load_data(file_path, extra_info))

    def lazy_load_data(
        self,
        file_path: Union[str, Path, Sequence[Union[str, Path]]],
        extra_info: Optional[Dict[str, Any]] = None,
        skip: Optional[Callable[[str, Path], bool]] = None,
    ) -> Iterator[Document]:
        """Yield the documents of ``load_data`` one file at a time (one parsed file in memory).

        [`failures`][llama_index_hiqa.readers.pdf.PDFLayoutReader.failures] is reset when iteration starts and is complete once it ends.

        Args:
            file_path: A file, a folder or a list of files.
            extra_info: Metadata added to every document.
            skip: ``skip(document_id, path)`` returning True leaves a file of a folder unread
                (an index that already holds it unchanged).

        Yields:
            One ``Document`` per readable file.

        Raises:
            DocumentReadError: For a single file that cannot be read (a folder's failures are
                recorded in [`failures`][llama_index_hiqa.readers.pdf.PDFLayoutReader.failures] instead).
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
        """One file to one ``Document``.

        Args:
            file_path: The file (PDF, HTML, DOCX, Markdown or text).
            extra_info: Metadata added to the document.
            document_id: Becomes both ``schema.DOCUMENT_ID`` and ``id_`` (default: the file stem).

        Returns:
            The document.

        Raises:
            DocumentReadError: A typed subclass (corrupt, encrypted, empty, unsupported,
                unreadable) naming the file.
        """
        path = Path(file_path)
        try:
            return self._read_checked(path, extra_info, document_id)
        except OSError as exc:  # unreadable (permissions, I/O error): this file only, named

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
        if parsed.text_boxes:
            schema.set_text_boxes(metadata, parsed.text_boxes)
        # id_ is the ref_doc_id a docstore upserts by: re-ingesting the file replaces it.
        document = Document(text=parsed.text, id_=document_id, metadata=metadata)
        schema.hide_from_views(document)
        return document

    def _read_pdf(self, path: Path) -> "_Parsed":
        with mupdf_messages_captured():
            return parse_pdf(self, path)

def parse_pdf(settings: Any, path: Path) -> _Parsed:
    """A PDF file to its Markdown, page spans, headings, figures and title.

    Args:
        settings: The reader (its layout, OCR and engine settings).
        path: The PDF file.

    Returns:
        What the reader makes its ``Document`` of.

    Raises:
        CorruptDocumentError: MuPDF cannot open the file (a damaged or truncated one says so).
        EncryptedDocumentError: The PDF is password protected.
        EmptyDocumentError: No page has text (OCR found none either, or was off).
    """
    # pymupdf (~1.5 s to import) loads when a PDF is read, not with the package.
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
        ocr_pages = ocr_scanned_pages(path, pdf, pages, settings.ocr_dpi) if settings.ocr == "auto" else []
        if not any(line.text.strip() for page in pages for line in page.lines):
            reason = (
                "OCR found no text either" if ocr_pages
                else "scanned? read it with ocr='auto'" if settings.ocr == "off" else "nothing is drawn on its pages"
            )
            raise EmptyDocumentError(path, f"the PDF has no extractable text ({reason})")
        body_size = _body_font_size(pages)
        running = running_lines(settings, pages) if settings.remove_running_lines else set()
        boxes: Optional[List[List[Any]]] = None
        if settings.engine == "fast":
            page_texts, headings, boxes = render_fast(settings, pdf, pages, body_size, running, ocr_pages)
        else:
            page_texts = render_pymupdf4llm(settings, pdf, pages, running)
            if ocr_pages:  # pymupdf4llm sees no text on a scan: its OCR lines, rendered here
                scanned, _, _ = render_fast(settings, pdf, [pages[n] for n in ocr_pages], body_size, running)
                for number, page_text in zip(ocr_pages, scanned):
                    page_texts[number] = page_text
            headings = None
        text, spans = _join_pages(page_texts)
        if headings is None:
            headings = locate_headings(settings, text, spans, pages, body_size, running)
        if boxes is None:
            boxes = locate_lines(settings, text, spans, pages, running)
        images = pdf_images(settings, pdf, pages, text, spans, set(ocr_pages))
        title = document_title(
            [CoverLine(ln.text, ln.size, ln.bold, page.number) for page in pages[:COVER_PAGES] for ln in page.lines],
            (pdf.metadata or {}).get("title") or "",
            path.stem,
        )
        return _Parsed(text, spans, headings, body_size, images, title, schema.FORMAT_PDF, ocr_pages, boxes)
    finally:
        pdf.close()


# --- plain data and helpers --------------------------------------------------------------


def _first_top_heading(text: str) -> str:
    for line in text.split("\n"):
        if line.startswith("# "):
            return _MD_MARKS_RE.sub("", line).strip()
    return ""
