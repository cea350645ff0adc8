"""The shared metadata vocabulary of llama-index-hiqa (one place for each fact).

Every reader, parser, transform, retriever and postprocessor of the pack reads and writes
node metadata through the constants and helpers below, never through string literals of
its own.

Document-level facts (written by [`PDFLayoutReader`][llama_index_hiqa.readers.pdf.PDFLayoutReader]):

========================  ==============================================================
``DOCUMENT_ID``           stable id of the source document (file name without suffix)
``DOCUMENT_TITLE``        human title of the document; root of the heading cascade
``FILE_PATH``             path the document was read from
``PAGE_SPANS``            ``[[page, char_start, char_end], ...]``: where every page lies in
                          ``Document.text`` (pages numbered from 0, as PyMuPDF does)
``LAYOUT_HEADINGS``       compact layout facts for heading detection: ``[[char_start,
                          char_end, font_size, bold], ...]`` for lines set larger or
                          bolder than the body text
``BODY_FONT_SIZE``        the most common font size of the document's body text
``IMAGES``                ``[{"page", "bbox", "caption", "char_offset", "xref", "file"}, ...]``;
                          HTML/DOCX images add ``"source"`` (`IMAGE_SOURCE`)
``SOURCE_FORMAT``         ``"pdf"``, ``"markdown"``, ``"text"``, ``"html"`` or ``"docx"``;
                          HTML and DOCX have no pages ([`has_pages`][llama_index_hiqa.schema.has_pages]): their one
                          page span covers the text and citations name the section path
``OCR_PAGES``             pages (from 0) whose text was recognised by OCR (no text layer)
``TEXT_BOXES``            ``[[page, char_start, char_end, x0, y0, x1, y1, kind], ...]``: where
                          each line (kind 0) or table (kind 1) of ``Document.text`` lies on
                          its page, in PDF points (OCR pages: the OCR boxes); PDFs only
========================  ==============================================================

Segment/node facts (written by the parsers, read by everything downstream):

========================  ==============================================================
``POSITION``              0, 1, 2, ... order of the node inside its document
``CHAR_START/CHAR_END``   the node's span in its document's text (end exclusive)
``HEADING_PATH``          ``[[number, title, level], ...]`` from the top heading down to
                          the node's own heading (document title not included)
``PAGE_START/PAGE_END``   first and last page (inclusive, from 0) the node lies on
``PAGE_BOXES``            where the node's own text lies: ``"page:x0,y0,x1,y1;x0,... page:..."``
                          (PDF points, whole numbers; [`get_page_boxes`][llama_index_hiqa.schema.get_page_boxes]); unset
                          for documents without pages (their section path locates them)
``SEGMENT_KIND``          ``"text"``, ``"table"`` or ``"image"``
``TABLE_TITLE``           for tables: the table's title or caption
``TABLE_COLUMNS``         for tables: column labels
``TABLE_ROWS``            for tables: row labels (first column)
``TABLE_HEADER``          for a later part of a table split by rows: the table's Markdown
                          header lines, repeated in the part's LLM view
``IMAGE_CAPTION``         for images: the caption line next to the figure
``IMAGE_BBOX``            for images: ``[x0, y0, x1, y1]`` in PDF points on its page
``IMAGE_FILE``            for images: ``<content hash>.<ext>``, the file saved in the store
``IMAGE_XREF``            for images: the PDF object the bytes are read from (0: inline)
``IMAGE_SOURCE``          for HTML/DOCX images: where the bytes are (the DOCX part name,
                          the ``src`` path relative to the HTML file)
``PARSE_PATH``            which path produced the node: ``"llm"``, ``"layout"``,
                          ``"layout_fallback"``, ``"markdown"``, ``"text"``
========================  ==============================================================

Rendered views (written by the transforms, shown on purpose):

========================  ==============================================================
``HEADING_CASCADE``       ``"Doc title > 4 Specifications > 4.2 Electrical"`` (HCA)
``DOCUMENT_SUMMARY``      LLM summary of the whole document (AutoContext)
``SECTION_SUMMARY``       LLM summary of the node's section (AutoContext)
``IMAGE_DESCRIPTION``     for images: caption, a multimodal LLM's description (when one
                          was given) and the surrounding text (HiQA appendix A.5)
``TABLE_LEAD``            for a table (or a part of one split by rows) whose own text does not
                          open with them: the table's title and Markdown header lines, so
                          the part reads as its statement's name, its year columns and its
                          rows with their figures
========================  ==============================================================

Structured facts (``PAGE_SPANS``, ``LAYOUT_HEADINGS``, ``IMAGES``, ``OCR_PAGES``, ``HEADING_PATH``, the table
labels, ``IMAGE_BBOX``, ``CRITICAL_KEYWORDS``) are stored as compact JSON strings
(`JSON_KEYS`): vector stores with flat metadata (Chroma, Milvus, LanceDB, DuckDB,
Pinecone, Weaviate, ...) accept only ``str``, ``int``, ``float`` and ``None`` values. Read and
write them through the accessors below (``get_heading_path``, ``get_page_spans``,
``images_of``, ``ocr_pages_of``, ``get_table_labels``, ``get_critical_keywords``, ...), which also read the
plain lists that stores written before this format hold.

Where a span of a document's text lies on its pages (the pages it touches, from
``PAGE_SPANS``; the rectangles it covers, from ``TEXT_BOXES``) is computed by
[`page_geometry`][llama_index_hiqa.page_geometry]; this module stores and reads the results.

Every key of the first two tables is bookkeeping, hidden from both the embedding and the LLM view with
[`hide_from_views`][llama_index_hiqa.schema.hide_from_views]. Only the rendered views (``HEADING_CASCADE``, ``DOCUMENT_SUMMARY``,
``SECTION_SUMMARY``, written by the transforms) are shown, so what each view holds is
decided in one place and read with LlamaIndex's own
``node.get_content(MetadataMode.EMBED)`` / ``MetadataMode.LLM``; ``node.text`` is never
rewritten.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from llama_index.core.schema import BaseNode, Document, Node, RelatedNodeInfo, TextNode

from llama_index_hiqa.errors import InvalidMetadataError
from llama_index_hiqa.page_geometry import TEXT_LINE, Rect, TextBox, boxes_for_span

# --- document-level facts --------------------------------------------------------------
DOCUMENT_ID = "document_id"
DOCUMENT_TITLE = "document_title"
FILE_PATH = "file_path"
FILE_NAME = "file_name"
PAGE_COUNT = "page_count"
PAGE_SPANS = "page_spans"
LAYOUT_HEADINGS = "layout_headings"
BODY_FONT_SIZE = "body_font_size"
IMAGES = "images"
SOURCE_FORMAT = "source_format"
OCR_PAGES = "ocr_pages"
TEXT_BOXES = "text_boxes"

FORMAT_PDF = "pdf"
FORMAT_MARKDOWN = "markdown"
FORMAT_TEXT = "text"
FORMAT_HTML = "html"
FORMAT_DOCX = "docx"
# Formats whose documents have no pages: one page span covers the text (so every span maps
# somewhere), but no page number is cited.
FORMATS_WITHOUT_PAGES = (FORMAT_HTML, FORMAT_DOCX)

# --- segment / node facts --------------------------------------------------------------
POSITION = "position"
CHAR_START = "char_start"
CHAR_END = "char_end"
HEADING_PATH = "heading_path"
PAGE_START = "page_start"
PAGE_END = "page_end"
PAGE_BOXES = "page_boxes"
SEGMENT_KIND = "segment_kind"
TABLE_TITLE = "table_title"
TABLE_COLUMNS = "table_columns"
TABLE_ROWS = "table_rows"
TABLE_HEADER = "table_header"
IMAGE_CAPTION = "image_caption"
IMAGE_BBOX = "image_bbox"
IMAGE_FILE = "image_file"
IMAGE_XREF = "image_xref"
IMAGE_SOURCE = "image_source"
PARSE_PATH = "parse_path"
COVERAGE = "coverage"

# --- derived views and indexes (written by transforms, read by retrievers) -------------
HEADING_CASCADE = "heading_cascade"  # rendered "Doc > 2 Features > 2.3 Timing"
SECTION_TITLE = "section_title"
DOCUMENT_SUMMARY = "document_summary"
SECTION_SUMMARY = "section_summary"
IMAGE_DESCRIPTION = "image_description"  # image view: caption, VLM description, context
TABLE_LEAD = "table_lead"  # table view: title and header lines a part's text does not hold
CRITICAL_KEYWORDS = "critical_keywords"  # normalised keyword list, never embedded

# --- retrieval provenance (written by retrievers/postprocessors) -----------------------
ROUTE_SCORES = "route_scores"  # {"vector": .., "bm25": .., "keywords": ..}
CHAIN_ID = "chain_id"  # the evidence chain's number in the results (0 first)
CHAIN_HOP = "chain_hop"  # 0 for the chain's seed, then 1, 2, ... in traversal order
CHAIN_SCORE = "chain_score"  # the chain walk's own score (seed cosine, then the scorer's)
SEGMENT_NODE_IDS = "segment_node_ids"
POSITION_START = "position_start"
POSITION_END = "position_end"
SEGMENT_FILL = "segment_fill"  # "docstore": gaps filled from it; "retrieved_only": no docstore
SEGMENT_RELEVANCE = "segment_relevance"  # where relevance came from: reranker, scores, embedding

KIND_TEXT = "text"
KIND_TABLE = "table"
KIND_IMAGE = "image"
SEGMENT_KINDS = (KIND_TEXT, KIND_TABLE, KIND_IMAGE)

# Keys that are bookkeeping: never embedded, never shown to the LLM. Every key of the pack
# is bookkeeping except the rendered views below, which transforms add on purpose.
BOOKKEEPING_KEYS: Tuple[str, ...] = (
    DOCUMENT_ID,
    DOCUMENT_TITLE,
    FILE_PATH,
    FILE_NAME,
    PAGE_COUNT,
    PAGE_SPANS,
    LAYOUT_HEADINGS,
    BODY_FONT_SIZE,
    IMAGES,
    SOURCE_FORMAT,
    OCR_PAGES,
    TEXT_BOXES,
    POSITION,
    CHAR_START,
    CHAR_END,
    HEADING_PATH,
    PAGE_START,
    PAGE_END,
    PAGE_BOXES,
    SEGMENT_KIND,
    TABLE_TITLE,
    TABLE_COLUMNS,
    TABLE_ROWS,
    TABLE_HEADER,
    IMAGE_CAPTION,
    IMAGE_BBOX,
    IMAGE_FILE,
    IMAGE_XREF,
    IMAGE_SOURCE,
    PARSE_PATH,
    COVERAGE,
    SECTION_TITLE,
    CRITICAL_KEYWORDS,
    ROUTE_SCORES,
    CHAIN_ID,
    CHAIN_HOP,
    CHAIN_SCORE,
    SEGMENT_NODE_IDS,
    POSITION_START,
    POSITION_END,
    SEGMENT_FILL,
    SEGMENT_RELEVANCE,
)

# The rendered views: shown to the embedding model (and, as configured, the LLM).
VIEW_KEYS: Tuple[str, ...] = (HEADING_CASCADE, DOCUMENT_SUMMARY, SECTION_SUMMARY, IMAGE_DESCRIPTION, TABLE_LEAD)

# Keys that only make sense for a whole document and are not copied onto its segments.
DOCUMENT_ONLY_KEYS: Tuple[str, ...] = (PAGE_SPANS, LAYOUT_HEADINGS, IMAGES, OCR_PAGES, TEXT_BOXES)


# Facts whose values are lists or dicts, kept as JSON strings so that every LlamaIndex vector
# store takes the node as it is (flat metadata: str, int, float, None). Retrieval provenance
# (ROUTE_SCORES, SEGMENT_NODE_IDS) is written on returned nodes only, never stored, and stays
# a plain dict/list for the person reading it.
JSON_KEYS: Tuple[str, ...] = (
    PAGE_SPANS,
    LAYOUT_HEADINGS,
    IMAGES,
    OCR_PAGES,
    TEXT_BOXES,
    HEADING_PATH,
    TABLE_COLUMNS,
    TABLE_ROWS,
    IMAGE_BBOX,
    CRITICAL_KEYWORDS,
)

FLAT_VALUE_TYPES = (str, int, float, type(None))


class Heading(NamedTuple):
    """One level of a heading path: the document's own number ("2.3", "Item 7A", "" when
    unnumbered), the title text without the number, and the depth (1 = top level)."""

    number: str
    title: str
    level: int

    def label(self) -> str:
        """``"2.3 Timing"``; just the title when the heading has no number."""
        return f"{self.number} {self.title}".strip() if self.number else self.title


class PageSpan(NamedTuple):
    page: int
    start: int
    end: int


# --- structured facts as JSON strings -------------------------------------------------


def encode_json(value: Any) -> str:
    """The compact JSON string a structured fact is stored as.

    Args:
        value: the list, dict or scalar to encode (non-ASCII text kept as it is).

    Returns:
        The JSON text, without spaces after separators.
    """
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def read_json(metadata: Mapping[str, Any], key: str, owner: str = "?") -> Any:
    """The decoded value of the structured fact ``key`` (``None`` when absent).

    A list or dict is returned as it is: stores written before facts were flat hold them so,
    and they still load.

    Args:
        metadata: the node's or document's metadata.
        key: the structured fact to read (one of `JSON_KEYS`).
        owner: the node id named in the error; ``"?"`` when the caller has none.

    Returns:
        The decoded list, dict or scalar; a value that is not a string, as it is; ``None``
            when ``key`` is absent.

    Raises:
        InvalidMetadataError: the value is a string that is not JSON (names ``owner`` and
            ``key``).
    """
    value = metadata.get(key)
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError as exc:
        raise InvalidMetadataError(owner, key, f"not a JSON value ({exc}): {value[:80]!r}") from None


def write_json(metadata: Dict[str, Any], key: str, value: Any) -> None:
    """Store the structured fact ``key`` as a JSON string.

    Args:
        metadata: the metadata to write into (changed in place).
        key: the structured fact (one of `JSON_KEYS`).
        value: the list, dict or scalar to store.
    """
    metadata[key] = encode_json(value)


def flatten_metadata(metadata: Dict[str, Any]) -> Dict[str, Any]:
    """Encode, in place, every structured fact still held as a list or dict.

    Nodes made before facts were flat, or by code that wrote a list, hold such values; a
    vector store with flat metadata rejects them.

    Args:
        metadata: the metadata to flatten (changed in place).

    Returns:
        ``metadata`` itself.
    """
    for key in JSON_KEYS:
        if isinstance(metadata.get(key), (list, tuple, dict)):
            metadata[key] = encode_json(metadata[key])
    return metadata


def non_flat_keys(metadata: Mapping[str, Any]) -> List[str]:
    """The keys whose values a flat-metadata vector store would reject.

    Args:
        metadata: the metadata to check.

    Returns:
        The keys whose values are not ``str``, ``int``, ``float`` or ``None``, in
            ``metadata``'s order (empty when every value is flat).
    """
    return [key for key, value in metadata.items() if not isinstance(value, FLAT_VALUE_TYPES)]


# --- helpers -------------------------------------------------------------------------


def view_settings(source: Union[Node, TextNode]) -> Dict[str, Any]:
    """What a node cut from ``source`` inherits of how it is shown.

    The metadata keys each view hides and the templates (``TextNode(**view_settings(doc),
    ...)``), so its embedding and LLM views are built like its document's.

    Args:
        source: the document (or node) the new node is cut from.

    Returns:
        Keyword arguments for a ``TextNode``: the two excluded-key lists (copies), the
            metadata separator and the two templates.
    """
    return {
        "excluded_embed_metadata_keys": list(source.excluded_embed_metadata_keys),
        "excluded_llm_metadata_keys": list(source.excluded_llm_metadata_keys),
        "metadata_separator": source.metadata_separator,
        "metadata_template": source.metadata_template,
        "text_template": source.text_template,
    }


def source_node_info(doc: BaseNode) -> RelatedNodeInfo:
    """The SOURCE relationship a segment keeps to its document, without the document-only facts.

    LlamaIndex's ``as_related_node_info()`` copies the whole document metadata, and a 10-K's
    layout facts run to hundreds of kilobytes: copied into every node, the docstore and the
    BM25 corpus, that copy alone outgrew memory on a few dozen filings.

    Args:
        doc: the document the segment was cut from.

    Returns:
        A ``RelatedNodeInfo`` with the document's id, type, hash and metadata minus
            `DOCUMENT_ONLY_KEYS`.
    """
    return RelatedNodeInfo(
        node_id=doc.node_id,
        node_type=doc.get_type(),
        metadata={k: v for k, v in doc.metadata.items() if k not in DOCUMENT_ONLY_KEYS},
        hash=doc.hash,
    )


def without_document_only_facts(documents: Mapping[str, Document]) -> Dict[str, Document]:
    """Shallow copies of ``documents`` without the document-only facts.

    For LlamaIndex's node post-processing, which merges the document metadata into every node
    and then copies each node's metadata into its neighbours' PREVIOUS/NEXT relationships.
    The text is shared, not copied.

    Args:
        documents: the documents by key.

    Returns:
        The same keys mapped to copies whose metadata lacks `DOCUMENT_ONLY_KEYS`.
    """
    return {
        key: doc.model_copy(
            update={"metadata": {k: v for k, v in doc.metadata.items() if k not in DOCUMENT_ONLY_KEYS}}
        )
        for key, doc in documents.items()
    }


def hide_from_views(node: BaseNode, keys: Iterable[str] = BOOKKEEPING_KEYS) -> None:
    """Exclude ``keys`` from both the embedding and the LLM view of ``node`` (idempotent).

    Args:
        node: the node to change in place.
        keys: the metadata keys to hide; by default every bookkeeping key
            (`BOOKKEEPING_KEYS`).
    """
    for excluded in (node.excluded_embed_metadata_keys, node.excluded_llm_metadata_keys):
        for key in keys:
            if key not in excluded:
                excluded.append(key)


def get_heading_path(node: BaseNode) -> List[Heading]:
    """The node's heading path as typed [`Heading`][llama_index_hiqa.schema.Heading] tuples.

    Args:
        node: the segment node.

    Returns:
        The headings from the top level down to the node's own (document title not
            included); empty when unknown.

    Raises:
        InvalidMetadataError: the stored path is a string that is not JSON.
    """
    raw = read_json(node.metadata, HEADING_PATH, node.node_id) or []
    return [Heading(str(n), str(t), int(lvl)) for n, t, lvl in raw]


def has_heading_path(node: BaseNode) -> bool:
    """Whether the node has a non-empty heading path.

    Args:
        node: the segment node.

    Returns:
        ``True`` when `HEADING_PATH` holds at least one heading.

    Raises:
        InvalidMetadataError: the stored path is a string that is not JSON.
    """
    return bool(read_json(node.metadata, HEADING_PATH, node.node_id))


def set_heading_path(node: BaseNode, path: Sequence[Sequence[Any]]) -> None:
    """Store a heading path as a JSON string, and the last heading's label as the section title.

    Args:
        node: the segment node to change in place.
        path: ``[[number, title, level], ...]`` from the top heading down; empty for a node
            under no heading.
    """
    write_json(node.metadata, HEADING_PATH, [[str(n), str(t), int(lvl)] for n, t, lvl in path])
    if path:
        node.metadata[SECTION_TITLE] = Heading(*[path[-1][0], path[-1][1], path[-1][2]]).label()


def get_document_id(node: BaseNode) -> Optional[str]:
    """The document a node belongs to: our key, else LlamaIndex's ``ref_doc_id``.

    Args:
        node: the node.

    Returns:
        The document id, or ``None`` when the node carries neither.
    """
    return node.metadata.get(DOCUMENT_ID) or node.ref_doc_id


def get_document_title(node: BaseNode) -> str:
    """Title for the cascade root: our key, else the file name, else the document id.

    Args:
        node: the node or document.

    Returns:
        The title; ``""`` when none of the three is known.
    """
    meta = node.metadata
    return str(
        meta.get(DOCUMENT_TITLE) or meta.get(FILE_NAME) or get_document_id(node) or ""
    )


def get_position(node: BaseNode) -> Optional[int]:
    """The node's order inside its document (`POSITION`).

    Args:
        node: the segment node.

    Returns:
        0, 1, 2, ...; ``None`` when unknown.
    """
    value = node.metadata.get(POSITION)
    return int(value) if value is not None else None


def get_char_span(node: BaseNode) -> Optional[Tuple[int, int]]:
    """The node's span in its document's text (`CHAR_START`, `CHAR_END`).

    Args:
        node: the segment node.

    Returns:
        ``(start, end)`` in characters, end exclusive; ``None`` when either is unknown.
    """
    start, end = node.metadata.get(CHAR_START), node.metadata.get(CHAR_END)
    if start is None or end is None:
        return None
    return int(start), int(end)


def get_page_range(node: BaseNode) -> Optional[Tuple[int, int]]:
    """The pages a node lies on.

    Args:
        node: the segment node.

    Returns:
        ``(first_page, last_page)`` inclusive, pages from 0; ``None`` when unknown.
    """
    start, end = node.metadata.get(PAGE_START), node.metadata.get(PAGE_END)
    if start is None:
        return None
    return int(start), int(end if end is not None else start)


def get_segment_kind(node: BaseNode) -> str:
    """The node's kind (`SEGMENT_KIND`).

    Args:
        node: the segment node.

    Returns:
        ``"text"``, ``"table"`` or ``"image"``; ``"text"`` when unset.
    """
    return node.metadata.get(SEGMENT_KIND) or KIND_TEXT


def get_page_spans(node: BaseNode) -> List[PageSpan]:
    """`PAGE_SPANS` of a node's metadata as typed tuples.

    Args:
        node: the document or node.

    Returns:
        One `PageSpan` ``(page, start, end)`` a page, in stored order; empty when
            unknown.

    Raises:
        InvalidMetadataError: the stored spans are a string that is not JSON.
    """
    return page_spans_of(node.metadata)


def page_spans_of(metadata: Mapping[str, Any]) -> List[PageSpan]:
    """`PAGE_SPANS` of a document's (or a node's) metadata as typed tuples.

    Args:
        metadata: the metadata to read.

    Returns:
        One `PageSpan` ``(page, start, end)`` a page (pages from 0, end exclusive);
            empty when unknown.

    Raises:
        InvalidMetadataError: the stored spans are a string that is not JSON.
    """
    return [PageSpan(int(p), int(s), int(e)) for p, s, e in read_json(metadata, PAGE_SPANS) or []]


def set_page_spans(metadata: Dict[str, Any], spans: Sequence[Sequence[int]]) -> None:
    """Store `PAGE_SPANS` as a JSON string.

    Args:
        metadata: the document's metadata (changed in place).
        spans: ``[(page, char_start, char_end), ...]``, pages from 0, end exclusive.
    """
    write_json(metadata, PAGE_SPANS, [[int(p), int(s), int(e)] for p, s, e in spans])


def layout_headings_of(metadata: Mapping[str, Any]) -> List[List[Any]]:
    """`LAYOUT_HEADINGS` of a document's metadata.

    Args:
        metadata: the document's metadata.

    Returns:
        ``[[char_start, char_end, font_size, bold], ...]`` for lines set larger or bolder
            than the body text; empty when unknown.

    Raises:
        InvalidMetadataError: the stored value is a string that is not JSON.
    """
    return list(read_json(metadata, LAYOUT_HEADINGS) or [])


def set_layout_headings(metadata: Dict[str, Any], headings: Sequence[Sequence[Any]]) -> None:
    """Store `LAYOUT_HEADINGS` as a JSON string.

    Args:
        metadata: the document's metadata (changed in place).
        headings: ``[(char_start, char_end, font_size, bold), ...]``.
    """
    write_json(metadata, LAYOUT_HEADINGS, [list(h) for h in headings])


def images_of(metadata: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """`IMAGES` of a document's metadata.

    Args:
        metadata: the document's metadata.

    Returns:
        One dict an image, with ``"page"``, ``"bbox"``, ``"caption"``, ``"char_offset"``,
            ``"xref"`` and ``"file"``; empty when the document has none.

    Raises:
        InvalidMetadataError: the stored value is a string that is not JSON.
    """
    return [dict(e) for e in read_json(metadata, IMAGES) or []]


def set_images(metadata: Dict[str, Any], images: Sequence[Mapping[str, Any]]) -> None:
    """Store `IMAGES` as a JSON string.

    Args:
        metadata: the document's metadata (changed in place).
        images: one mapping an image (see [`images_of`][llama_index_hiqa.schema.images_of]).
    """
    write_json(metadata, IMAGES, [dict(e) for e in images])


def get_image_bbox(node: BaseNode) -> Optional[List[float]]:
    """An image node's box on its page (`IMAGE_BBOX`).

    Args:
        node: the image node.

    Returns:
        ``[x0, y0, x1, y1]`` in PDF points; ``None`` when unknown.

    Raises:
        InvalidMetadataError: the stored value is a string that is not JSON.
    """
    value = read_json(node.metadata, IMAGE_BBOX, node.node_id)
    return [float(v) for v in value] if value else None


def set_image_bbox(node: BaseNode, bbox: Sequence[float]) -> None:
    """Store an image node's box (`IMAGE_BBOX`) as a JSON string.

    Args:
        node: the image node (changed in place).
        bbox: ``(x0, y0, x1, y1)`` in PDF points.
    """
    write_json(node.metadata, IMAGE_BBOX, [float(v) for v in bbox])


def set_ocr_pages(metadata: Dict[str, Any], pages: Sequence[int]) -> None:
    """Store `OCR_PAGES`: the pages read by OCR.

    Args:
        metadata: the document's metadata (changed in place).
        pages: page numbers from 0 (stored sorted).
    """
    write_json(metadata, OCR_PAGES, sorted(int(p) for p in pages))


def ocr_pages_of(metadata: Mapping[str, Any]) -> List[int]:
    """`OCR_PAGES` of a document's metadata.

    Args:
        metadata: the document's metadata.

    Returns:
        The pages (from 0) whose text was recognised by OCR; empty when none.

    Raises:
        InvalidMetadataError: the stored value is a string that is not JSON.
    """
    return [int(p) for p in read_json(metadata, OCR_PAGES) or []]


def set_text_boxes(metadata: Dict[str, Any], boxes: Sequence[Sequence[Any]]) -> None:
    """Store `TEXT_BOXES` as a JSON string (coordinates to a tenth of a point).

    Args:
        metadata: the document's metadata (changed in place).
        boxes: ``(page, start, end, x0, y0, x1, y1, kind)`` a line or block, sorted by ``start``.
    """
    write_json(
        metadata, TEXT_BOXES,
        [[int(b[0]), int(b[1]), int(b[2]), *(round(float(v), 1) for v in b[3:7]), int(b[7]) if len(b) > 7 else TEXT_LINE]
         for b in boxes],
    )


def text_boxes_of(metadata: Mapping[str, Any]) -> List[TextBox]:
    """`TEXT_BOXES` of a document's metadata (decoded once per stored string).

    Args:
        metadata: the document's metadata.

    Returns:
        The boxes, sorted by their first character; empty when unknown (no text layer kept,
            a format without pages).

    Raises:
        InvalidMetadataError: the stored value is a string that is not JSON.
    """
    value = metadata.get(TEXT_BOXES)
    if isinstance(value, str):
        return _decoded_text_boxes(value)
    return [TextBox(*b) for b in value or []]


@functools.lru_cache(maxsize=8)
def _decoded_text_boxes(value: str) -> List[TextBox]:
    # Every node a parser makes of one document reads the same string: decode it once.
    return [TextBox(*b) for b in read_json({TEXT_BOXES: value}, TEXT_BOXES)]


# Beyond this many characters a node's boxes become one box per page: every vector store keeps
# the node (Pinecone allows 40 KB of metadata a vector) and a highlight needs no finer grain.
PAGE_BOXES_MAX_CHARS = 1500


def encode_page_boxes(pages: Mapping[int, Sequence[Sequence[float]]]) -> str:
    """The compact `PAGE_BOXES` string of rectangles by page.

    Whole points, widened outwards; one bounding rectangle per page when the string would pass
    `PAGE_BOXES_MAX_CHARS`.

    Args:
        pages: ``{page: [(x0, y0, x1, y1), ...]}``.

    Returns:
        ``"page:x0,y0,x1,y1;x0,y0,x1,y1 page:..."``; ``""`` for no rectangle.
    """

    def encoded(by_page: Mapping[int, Sequence[Sequence[float]]]) -> str:
        return " ".join(
            f"{page}:" + ";".join(
                f"{math.floor(r[0])},{math.floor(r[1])},{math.ceil(r[2])},{math.ceil(r[3])}" for r in rects
            )
            for page, rects in by_page.items() if rects
        )

    text = encoded(pages)
    if len(text) <= PAGE_BOXES_MAX_CHARS:
        return text
    return encoded({
        page: [(min(r[0] for r in rects), min(r[1] for r in rects), max(r[2] for r in rects), max(r[3] for r in rects))]
        for page, rects in pages.items() if rects
    })


def get_page_boxes(node: BaseNode) -> Dict[int, List[Rect]]:
    """Where the node's text lies on its pages (`PAGE_BOXES`); an image node's own box.

    Args:
        node: the node.

    Returns:
        ``{page: [(x0, y0, x1, y1), ...]}`` in PDF points, pages in text order; empty when
            unknown (HTML/DOCX, text files, nodes made before boxes were kept).

    Raises:
        InvalidMetadataError: the stored string is not in the `PAGE_BOXES` shape.
    """
    value = node.metadata.get(PAGE_BOXES)
    if not value:
        bbox = get_image_bbox(node) if get_segment_kind(node) == KIND_IMAGE else None
        pages = get_page_range(node)
        return {pages[0]: [(bbox[0], bbox[1], bbox[2], bbox[3])]} if bbox and pages else {}
    out: Dict[int, List[Rect]] = {}
    try:
        for part in str(value).split():
            page, _, rects = part.partition(":")
            out[int(page)] = [
                (float(x0), float(y0), float(x1), float(y1))
                for x0, y0, x1, y1 in (r.split(",") for r in rects.split(";"))
            ]
    except ValueError as exc:
        raise InvalidMetadataError(node.node_id, PAGE_BOXES, f"not 'page:x0,y0,x1,y1;...' ({exc})") from exc
    return out


def set_page_boxes(node: BaseNode, boxes: Sequence[TextBox], span: Tuple[int, int]) -> None:
    """Store where the node's characters ``span`` lie (`PAGE_BOXES`); unset when nowhere.

    Args:
        node: the node (changed in place).
        boxes: its document's `TEXT_BOXES`.
        span: the node's ``(start, end)`` in its document's text.
    """
    encoded = encode_page_boxes(boxes_for_span(boxes, span[0], span[1])) if boxes else ""
    if encoded:
        node.metadata[PAGE_BOXES] = encoded
    else:
        node.metadata.pop(PAGE_BOXES, None)


def has_pages(node: BaseNode) -> bool:
    """Whether the node's document has pages to cite.

    HTML and DOCX have none; a node without `SOURCE_FORMAT`, made elsewhere, is taken
    to have them.

    Args:
        node: the node or document.

    Returns:
        ``False`` only for a source format without pages.
    """
    return node.metadata.get(SOURCE_FORMAT) not in FORMATS_WITHOUT_PAGES


def set_segment_facts(
    node: BaseNode,
    *,
    document_id: str,
    document_title: str,
    position: int,
    char_span: Optional[Tuple[int, int]] = None,
    heading_path: Optional[Sequence[Sequence[Any]]] = None,
    page_range: Optional[Tuple[int, int]] = None,
    kind: str = KIND_TEXT,
    parse_path: Optional[str] = None,
    text_boxes: Optional[Sequence[TextBox]] = None,
) -> None:
    """Write the facts every segment node carries, and hide the bookkeeping ones.

    The document-only facts a node copied from its document are dropped; where its
    ``char_span`` lies on the pages (`PAGE_BOXES`) is kept from the document's `TEXT_BOXES`
    (``text_boxes``, or the copy in the node's metadata).

    Args:
        node: the segment node (changed in place).
        document_id: id of its document (`DOCUMENT_ID`).
        document_title: title of its document (`DOCUMENT_TITLE`).
        position: its order inside the document, from 0.
        char_span: ``(start, end)`` in the document's text, end exclusive; ``None`` leaves
            it unset.
        heading_path: ``[[number, title, level], ...]``; ``None`` leaves it unset.
        page_range: ``(first_page, last_page)`` inclusive, from 0; ``None`` leaves it unset.
        kind: ``"text"``, ``"table"`` or ``"image"``.
        parse_path: which path produced the node (``"llm"``, ``"layout"``, ...); ``None``
            leaves it unset.
        text_boxes: the document's `TEXT_BOXES`; ``None`` reads the node's copied metadata.

    Raises:
        ValueError: ``kind`` is not one of `SEGMENT_KINDS`.
    """
    if kind not in SEGMENT_KINDS:
        raise ValueError(f"segment kind must be one of {SEGMENT_KINDS}, got {kind!r}")
    meta = node.metadata
    if text_boxes is None:
        text_boxes = text_boxes_of(meta)
    if char_span is not None:
        set_page_boxes(node, text_boxes, char_span)
    for key in DOCUMENT_ONLY_KEYS:
        meta.pop(key, None)
    meta[DOCUMENT_ID] = document_id
    meta[DOCUMENT_TITLE] = document_title
    meta[POSITION] = int(position)
    meta[SEGMENT_KIND] = kind
    if char_span is not None:
        meta[CHAR_START], meta[CHAR_END] = int(char_span[0]), int(char_span[1])
    if heading_path is not None:
        set_heading_path(node, heading_path)
    if page_range is not None:
        meta[PAGE_START], meta[PAGE_END] = int(page_range[0]), int(page_range[1])
    if parse_path is not None:
        meta[PARSE_PATH] = parse_path
    hide_from_views(node)


def set_table_facts(
    node: BaseNode, *, title: str, columns: Sequence[str], rows: Sequence[str], header: Optional[str] = None
) -> None:
    """Write a table node's title, column labels and row labels.

    Args:
        node: the table node (changed in place).
        title: the table's title or caption.
        columns: the column labels.
        rows: the row labels (first column).
        header: the Markdown header lines, only on a part of a split table that does not
            start with them; ``""`` removes it; ``None`` keeps what is there.
    """
    node.metadata[TABLE_TITLE] = title
    write_json(node.metadata, TABLE_COLUMNS, [str(c) for c in columns])
    write_json(node.metadata, TABLE_ROWS, [str(r) for r in rows])
    if header is not None:
        if header:
            node.metadata[TABLE_HEADER] = str(header)
        else:
            node.metadata.pop(TABLE_HEADER, None)
    hide_from_views(node)


def get_table_header(node: BaseNode) -> str:
    """The Markdown header lines a later part of a split table repeats.

    Args:
        node: the table node.

    Returns:
        The header lines; ``""`` for a whole table or its first part.
    """
    return str(node.metadata.get(TABLE_HEADER) or "")


def get_table_labels(node: BaseNode) -> Tuple[List[str], List[str]]:
    """A table node's column and row labels.

    Args:
        node: the table node.

    Returns:
        ``(column labels, row labels)``; empty lists when unknown.

    Raises:
        InvalidMetadataError: a stored label list is a string that is not JSON.
    """
    meta = node.metadata
    columns = read_json(meta, TABLE_COLUMNS, node.node_id) or []
    rows = read_json(meta, TABLE_ROWS, node.node_id) or []
    return [str(c) for c in columns], [str(r) for r in rows]


def get_critical_keywords(node: BaseNode) -> List[str]:
    """The node's critical keywords (`CRITICAL_KEYWORDS`).

    Args:
        node: the segment node.

    Returns:
        The keywords as stored; empty when none were extracted.

    Raises:
        InvalidMetadataError: the stored value is a string that is not JSON.
    """
    return [str(k) for k in read_json(node.metadata, CRITICAL_KEYWORDS, node.node_id) or []]


def set_critical_keywords(node: BaseNode, keywords: Sequence[str]) -> None:
    """Store the node's critical keywords as a JSON string.

    Args:
        node: the segment node (changed in place).
        keywords: the keywords, in order.
    """
    write_json(node.metadata, CRITICAL_KEYWORDS, [str(k) for k in keywords])


# --- the embedding view's header ----------------------------------------------
# The shared header format: one line per view key, value only (the values say what they
# are), separated by newlines, in VIEW_KEYS order.
HEADER_METADATA_TEMPLATE = "{value}"
HEADER_METADATA_SEPARATOR = "\n"
_LLAMA_INDEX_DEFAULT_TEMPLATE = "{key}: {value}"


def apply_header_format(node: BaseNode) -> None:
    """Show the view keys the node carries in its embedding view, in the shared format.

    Idempotent: keys are moved, never added twice; the text is not touched. A node whose
    ``metadata_template`` the user customised keeps it.

    Args:
        node: the node (changed in place).
    """
    present = [k for k in VIEW_KEYS if node.metadata.get(k)]
    if not present:
        return
    node.excluded_embed_metadata_keys[:] = [
        k for k in node.excluded_embed_metadata_keys if k not in present
    ]
    # Re-insert the view keys last, in the shared order, so the header reads top-down.
    for key in present:
        node.metadata[key] = node.metadata.pop(key)
    if node.metadata_template == _LLAMA_INDEX_DEFAULT_TEMPLATE:
        node.metadata_template = HEADER_METADATA_TEMPLATE
        node.metadata_separator = HEADER_METADATA_SEPARATOR
