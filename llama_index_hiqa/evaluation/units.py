"""The units every ablation variant ranks: fixed chunks, Markdown segments, passages.

Fixed chunks are LlamaIndex's ``SentenceSplitter(256, 32)`` per page (or document); segments
are cut at headings (the pack's parser, or LlamaIndex's ``MarkdownNodeParser``) and long ones
cut into 256-token chunks *inside* the segment, so that every variant embeds the same amount of
text per vector (MiniLM reads 256 word pieces) and a comparison is about boundaries and
metadata, not truncation. Every unit carries the schema facts (document, position, character
span, pages, heading path) that gold evidence is matched on.
"""

from __future__ import annotations

import bisect
from typing import Any, Dict, List, Optional, Sequence, Tuple

from llama_index.core.node_parser import MarkdownNodeParser, SentenceSplitter
from llama_index.core.schema import BaseNode, Document, MetadataMode, TextNode

from llama_index_hiqa import schema
from llama_index_hiqa.evaluation.corpus import Corpus
from llama_index_hiqa.headings import heading_from_text, markdown_heading, markdown_headings
from llama_index_hiqa.page_geometry import pages_for_span

CHUNK_SIZE = 256
CHUNK_OVERLAP = 32


def _page_range(doc: Document, start: int, end: int) -> Optional[Tuple[int, int]]:
    spans = schema.page_spans_of(doc.metadata)
    return pages_for_span(spans, start, end) if spans else None


def _chunk_into_nodes(
    doc: Document,
    text: str,
    offset: int,
    heading_path: Optional[List[List[Any]]],
    position: int,
    splitter: SentenceSplitter,
    parse_path: str,
) -> List[TextNode]:
    """Cut one segment into ≤256-token chunks that keep the segment's facts."""
    doc_id = doc.metadata[schema.DOCUMENT_ID]
    nodes: List[TextNode] = []
    cursor = 0
    for chunk in splitter.split_text(text) if text.strip() else []:
        found = text.find(chunk[:50], max(cursor - CHUNK_OVERLAP * 8, 0))
        local = found if found >= 0 else cursor
        start, end = offset + local, offset + local + len(chunk)
        cursor = local + len(chunk)
        node = TextNode(text=chunk, id_=f"{doc_id}:u{position + len(nodes)}")
        schema.set_segment_facts(
            node,
            document_id=doc_id,
            document_title=doc.metadata.get(schema.DOCUMENT_TITLE, doc_id),
            position=position + len(nodes),
            char_span=(start, end),
            heading_path=heading_path,
            page_range=_page_range(doc, start, end),
            parse_path=parse_path,
        )
        nodes.append(node)
    return nodes


def _heading_walk(text: str) -> Tuple[List[int], List[List[List[Any]]]]:
    """Offsets of the Markdown heading lines of ``text`` and the heading path open at each
    (a heading of level L closes every open heading of level >= L, HiQA Algorithm 2)."""
    offsets: List[int] = []
    paths: List[List[List[Any]]] = []
    stack: List[List[Any]] = []
    for start, _end, level, body in markdown_headings(text):
        stack = [h for h in stack if h[2] < level] + [list(heading_from_text(body, level))]
        offsets.append(start)
        paths.append([list(h) for h in stack])
    return offsets, paths


def fixed_chunks(corpus: Corpus) -> List[BaseNode]:
    """SentenceSplitter(256, 32) per page (page spans known) or per document.

    Each chunk records, as hidden bookkeeping, the heading path open where it starts (from
    the document's Markdown headings), so (document, section) gold can be matched on fixed
    chunks too; what is embedded is the chunk text alone.

    Args:
        corpus: the corpus (its own ``fixed_chunks``, when set, are returned as they are).

    Returns:
        The chunks, in document order.
    """
    if corpus.fixed_chunks is not None:
        return corpus.fixed_chunks
    splitter = SentenceSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    nodes: List[BaseNode] = []
    for doc in corpus.documents:
        spans = schema.page_spans_of(doc.metadata) or [(None, 0, len(doc.text))]
        offsets, paths = _heading_walk(doc.text)
        position = 0
        for _page, start, end in spans:
            made = _chunk_into_nodes(doc, doc.text[start:end], start, None, position, splitter, "text")
            for node in made:
                at = bisect.bisect_right(offsets, node.metadata[schema.CHAR_START]) - 1
                if at >= 0:
                    schema.set_heading_path(node, paths[at])
            position += len(made)
            nodes.extend(made)
    return nodes


def markdown_segments(documents: Sequence[Document]) -> List[BaseNode]:
    """Segments at Markdown headings (LlamaIndex ``MarkdownNodeParser``).

    The heading path comes from its ``header_path``; each segment is cut into 256-token chunks
    inside the segment.

    Args:
        documents: the corpus's documents.

    Returns:
        The chunks, in document order.
    """
    parser = MarkdownNodeParser()
    splitter = SentenceSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    nodes: List[BaseNode] = []
    for doc in documents:
        # Parse a bare copy: the document's page spans must not be copied onto every segment.
        bare = Document(text=doc.text, id_=doc.doc_id)
        position = 0
        for seg in parser.get_nodes_from_documents([bare]):
            start = seg.start_char_idx if seg.start_char_idx is not None else doc.text.find(seg.text)
            parents = [p for p in (seg.metadata.get("header_path") or "").split("/") if p]
            path = [list(heading_from_text(p, i + 1)) for i, p in enumerate(parents)]
            first = markdown_heading(seg.text.lstrip().split("\n", 1)[0])
            if first:
                path.append(list(heading_from_text(first[1], len(path) + 1)))
            made = _chunk_into_nodes(doc, seg.text, max(start, 0), path, position, splitter, "markdown")
            position += len(made)
            nodes.extend(made)
    return nodes


def passage_segments(documents: Sequence[Document]) -> List[BaseNode]:
    """Multi-hop sets: each passage is one segment whose heading is its title.

    Args:
        documents: one Document a passage.

    Returns:
        The passages' 256-token chunks, in order.
    """
    splitter = SentenceSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    nodes: List[BaseNode] = []
    for doc in documents:
        title = doc.metadata.get(schema.DOCUMENT_TITLE, "")
        nodes.extend(_chunk_into_nodes(doc, doc.text, 0, [["", title, 1]], 0, splitter, "text"))
    return nodes


def _split_segments(segments: Sequence[BaseNode], documents: Sequence[Document]) -> List[BaseNode]:
    """Cut long text segments of a parser into 256-token chunks inside the segment, each with
    its own character span and pages; table and image segments stay whole (HCA embeds a
    table by its labels, so cutting it would lose them)."""
    splitter = SentenceSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    by_id = {d.metadata.get(schema.DOCUMENT_ID, d.doc_id): d for d in documents}
    out: List[BaseNode] = []
    position: Dict[str, int] = {}
    for seg in segments:
        doc_id = schema.get_document_id(seg) or ""
        doc = by_id.get(doc_id)
        at = position.get(doc_id, 0)
        if doc is None or schema.get_segment_kind(seg) != schema.KIND_TEXT:
            node = seg.model_copy(deep=True)
            node.metadata[schema.POSITION] = at
            made = [node]
        else:
            span = schema.get_char_span(seg)
            made = _chunk_into_nodes(
                doc,
                seg.get_content(MetadataMode.NONE),
                span[0] if span else 0,
                [list(h) for h in schema.get_heading_path(seg)] or None,
                at,
                splitter,
                seg.metadata.get(schema.PARSE_PATH) or "layout",
            )
        position[doc_id] = at + len(made)
        out.extend(made)
    return out
