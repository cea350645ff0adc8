"""Figures of a document as retrievable image nodes, saved by content hash, listed with answers.

HiQA answers with the images that go with the retrieved sections (HiQA paper, appendix A.3
"Image References in Responses": PDFImageSearcher keeps, per document, a collection of image
files with descriptions built from the image title and its surrounding text; appendix A.5
"Image Augmentation"). Three steps:

1. [`with_figure_nodes`][llama_index_hiqa.figures.with_figure_nodes] (called by the parsers) adds one image node per figure the
   reader found (``schema.IMAGES``: page, bounding box, caption): its text is the caption, it
   sits right after the text segment the caption belongs to, in that segment's section, and
   names the image file by content hash (and, for HTML/DOCX, ``schema.IMAGE_SOURCE``). Text segments keep tiling their document: an image
   node's character span is empty (``start == end``, where the figure sits) and it takes a
   position between its neighbours. [`CascadingMetadataTransform`][llama_index_hiqa.transforms.cascading_metadata.CascadingMetadataTransform]
   embeds it by caption, heading cascade and surrounding text (appendix A.5).
2. [`save_figures`][llama_index_hiqa.figures.save_figures] writes the image files into a folder, one file per content hash
   (``<hash>.png``/``.jpg``), reading the bytes from the source files again (or copying them
   from an earlier store) so no image is held in memory or in node metadata;
   [`figure_bytes`][llama_index_hiqa.figures.figure_bytes] reads one figure's bytes the same way (for a multimodal LLM).
3. [`figures_for`][llama_index_hiqa.figures.figures_for] lists the figures on an answer's cited pages and sections.
"""

from __future__ import annotations

import logging
import os
import shutil
import zipfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from llama_index.core.bridge.pydantic import Field
from llama_index.core.schema import BaseNode, Document, NodeRelationship, NodeWithScore, TextNode

from llama_index_hiqa import schema

logger = logging.getLogger(__name__)

FIGURES_DIRNAME = "images"
# Smaller images are bullets, icons and rules, not figures (PDF points, both sides).
MIN_FIGURE_POINTS = 24.0
# An image on this many pages of one document is a logo or page decoration, not a figure.
MAX_FIGURE_PAGES = 3
RENDER_DPI = 150


# --------------------------------------------------------------------------- image nodes
def images_as_nodes_field() -> Any:
    """The ``images_as_nodes`` setting of the segment parsers (one definition for all three)."""
    return Field(
        default=True,
        description="Give each figure of the document (schema.IMAGES: page, box, caption) an image node "
        "after the segment it sits in (llama_index_hiqa.figures).",
    )


def figure_entries(doc: BaseNode) -> List[Dict[str, Any]]:
    """The document's images that are figures.

    Big enough, with a page, not repeated on [`MAX_FIGURE_PAGES`][llama_index_hiqa.figures.MAX_FIGURE_PAGES] or more pages (logos,
    running decorations).

    Args:
        doc: a document read by a reader (its ``schema.IMAGES``).

    Returns:
        The ``schema.IMAGES`` entries that are figures, in stored order.
    """
    entries = [
        e for e in schema.images_of(doc.metadata)
        if isinstance(e, dict) and e.get("page") is not None and _big_enough(e.get("bbox"))
    ]
    pages_of: Dict[str, Set[int]] = defaultdict(set)
    for e in entries:
        if e.get("file"):
            pages_of[e["file"]].add(int(e["page"]))
    return [e for e in entries if not e.get("file") or len(pages_of[e["file"]]) < MAX_FIGURE_PAGES]


def _big_enough(bbox: Any) -> bool:
    try:
        x0, y0, x1, y1 = (float(v) for v in bbox)
    except (TypeError, ValueError):
        return False
    return x1 - x0 >= MIN_FIGURE_POINTS and y1 - y0 >= MIN_FIGURE_POINTS


def with_figure_nodes(
    doc: BaseNode,
    nodes: List[TextNode],
    id_func: Optional[Callable[[int, Any], str]] = None,
    sections: Optional[Sequence[Tuple[int, int, Sequence[Sequence[Any]]]]] = None,
) -> List[TextNode]:
    """``nodes`` with an image node after the segment each figure sits in.

    Positions are renumbered 0..n-1. Without figures: ``nodes`` unchanged.

    Args:
        doc: the document the segments come from.
        nodes: its segments, in order.
        id_func: LlamaIndex's ``id_func(index, document)`` for the image nodes' ids; ``None``
            for random ids.
        sections: ``(start, end, heading path)`` of each section before segments were
            merged, so each figure gets the heading path of the section it sits in; ``None``
            keeps the heading path of the segment it sits in.

    Returns:
        The segments and image nodes, in document order.
    """
    entries = figure_entries(doc)
    if not entries or not nodes:
        return nodes
    spans = [schema.get_char_span(n) or (0, 0) for n in nodes]
    after: Dict[int, List[Dict[str, Any]]] = defaultdict(list)
    for entry in sorted(entries, key=lambda e: (int(e.get("char_offset") or 0), int(e["page"]))):
        offset = int(entry.get("char_offset") or 0)
        host = next((i for i, (s, e) in enumerate(spans) if s <= offset < e), None)
        if host is None:  # past the end (or spans unknown): after the last segment of its page
            host = max(
                (i for i, n in enumerate(nodes) if (schema.get_page_range(n) or (0, 0))[0] <= int(entry["page"])),
                default=len(nodes) - 1,
            )
        after[host].append(entry)
    out: List[TextNode] = []
    for i, node in enumerate(nodes):
        out.append(node)
        for entry in after.get(i, ()):
            image = _image_node(doc, node, entry, id_func, len(out))
            offset = int(entry.get("char_offset") or 0)
            path = next((p for s, e, p in sections or () if s <= offset < e), None)
            if path:
                schema.set_heading_path(image, path)
            out.append(image)
    for position, node in enumerate(out):
        node.metadata[schema.POSITION] = position
    return out


def _image_node(
    doc: BaseNode, host: TextNode, entry: Dict[str, Any], id_func: Optional[Callable[[int, BaseNode], str]], position: int
) -> TextNode:
    page = int(entry["page"])
    caption = " ".join(str(entry.get("caption") or "").split())
    offset = int(entry.get("char_offset") or 0)
    meta = {k: v for k, v in host.metadata.items() if k not in _PER_SEGMENT_KEYS}
    if doc.metadata.get(schema.FILE_PATH):  # where save_figures reads the image again
        meta.setdefault(schema.FILE_PATH, doc.metadata[schema.FILE_PATH])
    node = TextNode(
        text=caption or f"Figure on page {page + 1}",
        metadata=meta,
        **schema.view_settings(host),
        start_char_idx=offset,
        end_char_idx=offset,
    )
    if id_func is not None:
        node.id_ = id_func(position, doc)
    source = host.relationships.get(NodeRelationship.SOURCE)
    if source is not None:
        node.relationships[NodeRelationship.SOURCE] = source
    schema.set_segment_facts(
        node,
        document_id=str(host.metadata.get(schema.DOCUMENT_ID) or schema.get_document_id(host) or ""),
        document_title=str(host.metadata.get(schema.DOCUMENT_TITLE) or ""),
        position=position,
        char_span=(offset, offset),
        heading_path=schema.get_heading_path(host),
        page_range=(page, page),
        kind=schema.KIND_IMAGE,
        parse_path=host.metadata.get(schema.PARSE_PATH),
    )
    node.metadata[schema.IMAGE_CAPTION] = caption
    schema.set_image_bbox(node, entry.get("bbox") or [])
    node.metadata[schema.IMAGE_XREF] = int(entry.get("xref") or 0)
    if entry.get("source"):
        node.metadata[schema.IMAGE_SOURCE] = str(entry["source"])
    if entry.get("file"):
        node.metadata[schema.IMAGE_FILE] = str(entry["file"])
    schema.hide_from_views(node)
    return node


# Facts of the host segment an image node must not inherit.
_PER_SEGMENT_KEYS = frozenset({
    schema.TABLE_TITLE, schema.TABLE_COLUMNS, schema.TABLE_ROWS, schema.SECTION_SUMMARY,
    schema.HEADING_CASCADE, schema.CRITICAL_KEYWORDS, schema.COVERAGE, schema.IMAGE_DESCRIPTION,
})


# --------------------------------------------------------------------------- saving files
@dataclass
class FigureSaveReport:
    """What [`save_figures`][llama_index_hiqa.figures.save_figures] did: files written, already there, copied from an earlier
    store, and the ones it could not produce (``(file, reason)``)."""

    folder: Path
    written: List[str] = field(default_factory=list)
    present: List[str] = field(default_factory=list)
    copied: List[str] = field(default_factory=list)
    missing: List[Tuple[str, str]] = field(default_factory=list)

    @property
    def files(self) -> List[str]:
        return sorted(set(self.written) | set(self.present) | set(self.copied))


def save_figures(
    items: Iterable[BaseNode],
    images_dir: Union[str, Path],
    previous_dirs: Sequence[Union[str, Path]] = (),
) -> FigureSaveReport:
    """Write the image file of every figure in ``items`` into ``images_dir``.

    One file per content hash (``schema.IMAGE_FILE`` of image nodes, ``"file"`` of
    ``schema.IMAGES`` entries of documents). A file already in ``images_dir`` is kept; one in
    a ``previous_dirs`` folder (the store being replaced) is copied; otherwise the bytes are
    read again from the source PDF (``schema.FILE_PATH``, the image's PDF object, or its box
    on the page rendered at `RENDER_DPI`). Files are written atomically (temporary
    name, then rename). A figure whose source is gone is reported in ``missing``, never
    raised: the text index does not depend on it.

    Args:
        items: image nodes and documents (other nodes are skipped).
        images_dir: the folder to write into (created when needed).
        previous_dirs: image folders of the store being replaced, copied from first.

    Returns:
        A `FigureSaveReport`: files written, already there, copied, and missing with
            the reason.
    """
    folder = Path(images_dir)
    report = FigureSaveReport(folder)
    wanted: Dict[str, Tuple[str, Dict[str, Any]]] = {}
    for item in items:
        for name, source, entry in _figures_of(item):
            wanted.setdefault(name, (source, entry))
    if not wanted:
        return report
    folder.mkdir(parents=True, exist_ok=True)
    to_extract: Dict[str, List[Tuple[str, Dict[str, Any]]]] = defaultdict(list)
    for name, (source, entry) in wanted.items():
        target = folder / name
        if target.is_file():
            report.present.append(name)
            continue
        earlier = next((Path(d) / name for d in previous_dirs if (Path(d) / name).is_file()), None)
        if earlier is not None:
            _atomic_copy(earlier, target)
            report.copied.append(name)
            continue
        to_extract[source].append((name, entry))
    for source, figures in to_extract.items():
        for name, data in _read_figures(source, figures, report.missing):
            _atomic_write(folder / name, data)
            report.written.append(name)
    return report


def figure_bytes(node: BaseNode) -> Optional[bytes]:
    """The image of a figure node, read again from its source file.

    The PDF object or page box, the DOCX part, the file an HTML ``src`` names. This is what a
    multimodal LLM is shown ("HiQA: A Hierarchical Contextual Augmentation RAG for
    Multi-Documents QA", appendix A.5).

    Args:
        node: a node (``schema.KIND_IMAGE`` with ``schema.IMAGE_FILE`` to be a figure).

    Returns:
        The image bytes; ``None`` when it is not a figure node or its source is gone.
    """
    meta = node.metadata
    if meta.get(schema.SEGMENT_KIND) != schema.KIND_IMAGE or not meta.get(schema.IMAGE_FILE):
        return None
    missing: List[Tuple[str, str]] = []
    found = list(_read_figures(str(meta.get(schema.FILE_PATH) or ""), [(meta[schema.IMAGE_FILE], _node_entry(node))], missing))
    for name, reason in missing:
        logger.warning("figure %s unreadable: %s", name, reason)
    return found[0][1] if found else None


def _node_entry(node: BaseNode) -> Dict[str, Any]:
    """An image node's facts in the shape of a ``schema.IMAGES`` entry."""
    meta = node.metadata
    page = schema.get_page_range(node)
    return {
        "page": page[0] if page else 0, "bbox": schema.get_image_bbox(node) or [],
        "xref": meta.get(schema.IMAGE_XREF, 0), "source": meta.get(schema.IMAGE_SOURCE),
    }


def _figures_of(item: BaseNode) -> Iterable[Tuple[str, str, Dict[str, Any]]]:
    meta = item.metadata
    source = str(meta.get(schema.FILE_PATH) or "")
    if meta.get(schema.SEGMENT_KIND) == schema.KIND_IMAGE:
        if meta.get(schema.IMAGE_FILE):
            yield meta[schema.IMAGE_FILE], source, _node_entry(item)
        return
    if isinstance(item, Document):
        for entry in figure_entries(item):
            if entry.get("file"):
                yield entry["file"], source, entry


def _read_figures(
    source: str, figures: List[Tuple[str, Dict[str, Any]]], missing: List[Tuple[str, str]]
) -> Iterable[Tuple[str, bytes]]:
    """``(name, bytes)`` of each figure its source still holds; the others go to ``missing``
    as ``(name, reason)``, never raised: the text index does not depend on them."""
    if not source or not Path(source).is_file():
        missing.extend((name, f"source file {source or '?'} is gone") for name, _ in figures)
        return
    suffix = Path(source).suffix.lower()
    if suffix == ".docx":
        yield from _read_docx_parts(source, figures, missing)
        return
    if suffix in (".html", ".htm", ".xhtml"):
        for name, entry in figures:
            target = Path(source).parent / str(entry.get("source") or "")
            try:
                yield name, target.read_bytes()
            except OSError as exc:
                missing.append((name, f"{target}: {exc}"))
        return
    # pymupdf (~1.5 s to import) loads when a PDF is read, not with the package.
    import pymupdf

    try:
        pdf = pymupdf.open(source)
    # Safe: figures are extras; a source that no longer opens is reported in missing.
    except Exception as exc:
        missing.extend((name, f"{source}: {exc}") for name, _ in figures)
        return
    try:
        for name, entry in figures:
            try:
                data = _image_bytes(pdf, name, entry)
            # Safe: one unreadable image never stops the others; reported in missing.
            except Exception as exc:
                missing.append((name, f"{source} p.{int(entry.get('page') or 0) + 1}: {exc}"))
                continue
            yield name, data
    finally:
        pdf.close()


def _read_docx_parts(
    source: str, figures: List[Tuple[str, Dict[str, Any]]], missing: List[Tuple[str, str]]
) -> Iterable[Tuple[str, bytes]]:
    """A DOCX is a zip package: a picture is the part its entry names (``/word/media/...``)."""
    try:
        package = zipfile.ZipFile(source)
    except (OSError, zipfile.BadZipFile) as exc:
        missing.extend((name, f"{source}: {exc}") for name, _ in figures)
        return
    with package:
        for name, entry in figures:
            part = str(entry.get("source") or "").lstrip("/")
            try:
                yield name, package.read(part)
            except KeyError:
                missing.append((name, f"{source}: no part {part or '?'}"))


def _image_bytes(pdf: Any, name: str, entry: Dict[str, Any]) -> bytes:
    # pymupdf (~1.5 s to import) loads when a PDF is read, not with the package.
    import pymupdf

    xref = int(entry.get("xref") or 0)
    if xref and name.endswith(".jpg"):
        return pdf.extract_image(xref)["image"]
    if xref:
        pix = pymupdf.Pixmap(pdf, xref)
        if pix.colorspace is not None and pix.colorspace.n > 3:  # CMYK: PNG needs RGB
            pix = pymupdf.Pixmap(pymupdf.csRGB, pix)
        return pix.tobytes("png")
    page = pdf[int(entry.get("page") or 0)]
    return page.get_pixmap(clip=pymupdf.Rect(*entry["bbox"]), dpi=RENDER_DPI).tobytes("png")


def _atomic_write(target: Path, data: bytes) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)


def _atomic_copy(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)


# --------------------------------------------------------------------------- answers
def figure_record(node: BaseNode, images_dir: Optional[Union[str, Path]] = None) -> Dict[str, Any]:
    """A figure as a person (or ``--json``) reads it.

    Args:
        node: an image node.
        images_dir: the store's image folder; ``None`` when the figures were not saved.

    Returns:
        A dict with ``"document_id"``, ``"document_title"``, ``"page"`` (from 1; ``None``
            without pages), ``"section"``, ``"caption"``, ``"bbox"``, ``"file"`` (the saved
            file's path, ``None`` when not saved), ``"image_file"`` and ``"node_id"``.
    """
    page = schema.get_page_range(node) if schema.has_pages(node) else None
    name = node.metadata.get(schema.IMAGE_FILE)
    path = None
    if name and images_dir is not None and (Path(images_dir) / name).is_file():
        path = str(Path(images_dir) / name)
    return {
        "document_id": schema.get_document_id(node),
        "document_title": schema.get_document_title(node),
        "page": page[0] + 1 if page else None,
        "section": _section(node),
        "caption": node.metadata.get(schema.IMAGE_CAPTION) or "",
        "bbox": schema.get_image_bbox(node),
        "file": path,
        "image_file": name,
        "node_id": node.node_id,
    }


def _section(node: BaseNode) -> str:
    return " > ".join(h.label() for h in schema.get_heading_path(node))


def figures_for(
    sources: Sequence[Union[NodeWithScore, BaseNode]],
    docstore: Any,
    images_dir: Optional[Union[str, Path]] = None,
) -> List[Dict[str, Any]]:
    """The figures that go with an answer.

    Image nodes among ``sources``, then the image nodes of the cited documents that lie on a
    cited page or in a cited section, in the order of the sources that cite them. Reads only
    the cited documents' nodes from ``docstore`` (``get_ref_doc_info``), not the whole store.

    Args:
        sources: the answer's source nodes (scored or not).
        docstore: the store's docstore.
        images_dir: the store's image folder; ``None`` when the figures were not saved.

    Returns:
        One `figure_record` dict a figure, each figure once.
    """
    nodes = [s.node if isinstance(s, NodeWithScore) else s for s in sources]
    found: Dict[str, BaseNode] = {}
    for node in nodes:
        if schema.get_segment_kind(node) == schema.KIND_IMAGE:
            found.setdefault(node.node_id, node)
    by_document: Dict[str, List[BaseNode]] = {}
    for node in nodes:
        ref = node.ref_doc_id
        if ref is None:
            continue
        if ref not in by_document:
            by_document[ref] = _image_nodes_of(docstore, ref)
        pages = schema.get_page_range(node)
        section = _section(node)
        for image in by_document[ref]:
            page = schema.get_page_range(image)
            on_page = pages is not None and page is not None and pages[0] <= page[0] <= pages[1]
            in_section = bool(section) and (_section(image) + " > ").startswith(section + " > ")
            if on_page or in_section:
                found.setdefault(image.node_id, image)
    return [figure_record(n, images_dir) for n in found.values()]


def _image_nodes_of(docstore: Any, ref_doc_id: str) -> List[BaseNode]:
    info = docstore.get_ref_doc_info(ref_doc_id) if docstore is not None else None
    if info is None:
        return []
    nodes = docstore.get_nodes(list(info.node_ids), raise_error=False)
    images = [n for n in nodes if n is not None and schema.get_segment_kind(n) == schema.KIND_IMAGE]
    return sorted(images, key=lambda n: schema.get_position(n) or 0)


def format_figure(record: Dict[str, Any]) -> str:
    """One line for a figure record.

    ``"NX-2043 · p.1 · 3 Description · Figure 1. Typical application … · images/ab12.png"``.

    Args:
        record: a `figure_record` dict.

    Returns:
        Title, page, section, caption and file joined by ``" · "``.
    """
    parts = [record.get("document_title") or record.get("document_id") or "?"]
    if record.get("page"):  # HTML and DOCX figures have no page
        parts.append(f"p.{record['page']}")
    if record.get("section"):
        parts.append(record["section"])
    parts.append(record.get("caption") or "(no caption)")
    parts.append(record.get("file") or f"{record.get('image_file') or '?'} (not saved)")
    return " · ".join(parts)
