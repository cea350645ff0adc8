"""From ranked chunks to segment nodes: the meta-document layout and the node of a segment.

TextRAG Part 4 (Pei Ma's TextRAG blog post (2024), "Chunks Integration"), after dsRAG's relevant
segment extraction: the candidate chunks of the best documents are laid out run by run (gaps a
segment could bridge filled from a docstore), and each chosen segment becomes one node whose
text is its chunks joined in document order (overlap kept once) under a header saying which
document and section it is from. The selection between the two is
[`select_segments`][llama_index_hiqa.postprocessors.segment_selection.select_segments].
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode, NodeRelationship, NodeWithScore, TextNode

from llama_index_hiqa import schema
from llama_index_hiqa.postprocessors.segment_selection import length_factors

logger = logging.getLogger(__name__)

FILL_DOCSTORE = "docstore"
FILL_RETRIEVED_ONLY = "retrieved_only"


@dataclass
class LayoutChunk:
    """One chunk of the meta-document: retrieved (``node`` set) or only known by id."""

    document_id: Optional[str]
    position: Optional[int]
    node_id: str
    length: int
    node: Optional[BaseNode] = None
    value: float = 0.0


def docstore_lookup(docstore: Any) -> Dict[Tuple[str, int], Tuple[str, int]]:
    """Where each chunk of a docstore sits: the gaps a segment may be filled with.

    Args:
        docstore: A LlamaIndex docstore, or ``None``.

    Returns:
        (document id, position) -> (node id, text length); empty without a docstore.
    """
    lookup: Dict[Tuple[str, int], Tuple[str, int]] = {}
    if docstore is not None:
        for node in docstore.docs.values():
            doc_id, position = schema.get_document_id(node), schema.get_position(node)
            if doc_id is not None and position is not None:
                lookup.setdefault((doc_id, position), (node.node_id, len(chunk_text(node))))
    return lookup


def meta_document(
    nodes: List[NodeWithScore],
    values: np.ndarray,
    settings: Any,
    lookup: Dict[Tuple[str, int], Tuple[str, int]],
) -> Tuple[List[LayoutChunk], List[int]]:
    """The candidate chunks of the best documents, laid out run by run.

    Args:
        nodes: The retrieved nodes, best first.
        values: Each node's chunk value.
        settings: The postprocessor's settings (``top_k_for_document_selection``,
            ``irrelevant_chunk_penalty``, ``max_length``, ``chunk_length_adjustment``,
            ``reference_length``).
        lookup: (document id, position) -> (node id, length) of the chunks a docstore can
            fill gaps with; empty without a docstore.

    Returns:
        The chunks in layout order and the run each belongs to (a run is a stretch of one
            document without a gap that cannot be filled).
    """
    # Documents in order of their best chunk (nodes arrive sorted by relevance rank).
    by_doc: Dict[Any, Dict[int, LayoutChunk]] = {}
    for nws, value in zip(nodes, values):
        node = nws.node
        doc_id, position = schema.get_document_id(node), schema.get_position(node)
        doc_key: Any = doc_id
        if doc_id is None or position is None:
            doc_key, position = ("__node__", node.node_id), 0  # a run of its own
        if doc_key not in by_doc and len(by_doc) >= settings.top_k_for_document_selection:
            continue
        chunks = by_doc.setdefault(doc_key, {})
        if position in chunks:
            logger.warning(
                "nodes %s and %s share document %s position %s; keeping the first",
                chunks[position].node_id, node.node_id, doc_key, position,
            )
            continue
        chunks[position] = LayoutChunk(
            doc_id, position, node.node_id, len(chunk_text(node)), node, float(value)
        )

    penalty_chunk = -settings.irrelevant_chunk_penalty
    layout: List[LayoutChunk] = []
    run_ids: List[int] = []
    run = -1
    for doc_key, chunks in by_doc.items():
        run += 1  # documents never share a run
        previous: Optional[int] = None
        for position in sorted(chunks):
            if previous is not None and position > previous + 1:
                gap = range(previous + 1, position)
                # Only gaps a segment could bridge are worth filling: a segment starts
                # and ends on retrieved chunks and holds at most max_length chunks.
                fill = (
                    [lookup.get((doc_key, p)) for p in gap]
                    if lookup and len(gap) <= settings.max_length - 2
                    else [None]
                )
                if any(f is None for f in fill):
                    run += 1  # a position we cannot show ends the run
                else:
                    for p, (node_id, length) in zip(gap, fill):
                        value = penalty_chunk
                        if settings.chunk_length_adjustment:
                            value *= float(length_factors([length], settings.reference_length)[0])
                        layout.append(LayoutChunk(doc_key, p, node_id, length, None, value))
                        run_ids.append(run)
            layout.append(chunks[position])
            run_ids.append(run)
            previous = position
    return layout, run_ids


def join_members(
    members: List[BaseNode], separator: str, min_overlap_chars: int
) -> Tuple[str, Optional[Tuple[int, int]]]:
    """The members' texts in order, overlap between consecutive chunks kept once.

    Args:
        members: The segment's nodes in document order.
        separator: Joins consecutive chunks whose source spans do not touch.
        min_overlap_chars: Without character spans, a suffix/prefix repeat at least this long
            is taken as splitter overlap.

    Returns:
        The text and the joined character span (``None`` when not known).
    """
    text = chunk_text(members[0])
    span = _span(members[0])
    for node in members[1:]:
        piece, node_span = chunk_text(node), _span(node)
        if schema.get_segment_kind(node) == schema.KIND_IMAGE and piece in text:
            continue  # a figure node's caption is already in the segment it sits in
        if span is not None and node_span is not None:
            if node_span[0] < span[1]:
                text += piece[min(span[1] - node_span[0], len(piece)):]
            elif node_span[0] == span[1]:
                text += piece
            else:
                text += separator + piece
            span = (span[0], max(span[1], node_span[1]))
            continue
        span = None
        overlap = _overlap(text, piece, min_overlap_chars)
        text += piece[overlap:] if overlap else separator + piece
    return text, span


def segment_node(
    chunks: List[LayoutChunk],
    members: List[BaseNode],
    value: float,
    source: str,
    filled: bool,
    separator: str,
    min_overlap_chars: int,
) -> NodeWithScore:
    """One segment as a node: its chunks' text joined, the segment header, the provenance.

    Args:
        chunks: The segment's chunks in layout order.
        members: Their nodes (retrieved or fetched from the docstore), in the same order.
        value: The segment's value (the node's score).
        source: Where the relevance came from (``schema.SEGMENT_RELEVANCE``).
        filled: Whether gaps were filled from a docstore (``schema.SEGMENT_FILL``).
        separator: See [`join_members`][llama_index_hiqa.postprocessors.segment_assembly.join_members].
        min_overlap_chars: See [`join_members`][llama_index_hiqa.postprocessors.segment_assembly.join_members].

    Returns:
        The segment node with its score.
    """
    first, last = members[0], members[-1]
    text, span = join_members(members, separator, min_overlap_chars)
    doc_id = chunks[0].document_id or schema.get_document_id(first)
    title = schema.get_document_title(first)
    metadata = dict(first.metadata)
    for key in schema.DOCUMENT_ONLY_KEYS + (schema.POSITION, schema.CHAR_START, schema.CHAR_END):
        metadata.pop(key, None)
    metadata[schema.HEADING_CASCADE] = _header(title, first, last)
    metadata[schema.SEGMENT_NODE_IDS] = [m.node_id for m in members]
    metadata[schema.SEGMENT_FILL] = FILL_DOCSTORE if filled else FILL_RETRIEVED_ONLY
    metadata[schema.SEGMENT_RELEVANCE] = source
    if doc_id is not None:
        metadata[schema.DOCUMENT_ID] = doc_id
    if title:
        metadata[schema.DOCUMENT_TITLE] = title
    if chunks[0].document_id is not None:
        metadata[schema.POSITION_START] = chunks[0].position
        metadata[schema.POSITION_END] = chunks[-1].position
    pages = [r for r in (schema.get_page_range(m) for m in members) if r is not None]
    if pages:
        metadata[schema.PAGE_START] = min(p[0] for p in pages)
        metadata[schema.PAGE_END] = max(p[1] for p in pages)
    if span is not None:
        metadata[schema.CHAR_START], metadata[schema.CHAR_END] = span
    start = chunks[0].position if chunks[0].document_id is not None else first.node_id
    node = TextNode(
        id_=f"segment:{doc_id}:{start}-{chunks[-1].position}" if doc_id else f"segment:{first.node_id}",
        text=text,
        metadata=metadata,
        excluded_embed_metadata_keys=list(first.excluded_embed_metadata_keys),
        excluded_llm_metadata_keys=list(first.excluded_llm_metadata_keys),
        start_char_idx=span[0] if span else None,
        end_char_idx=span[1] if span else None,
    )
    source_rel = first.relationships.get(NodeRelationship.SOURCE)
    if source_rel is not None:
        node.relationships[NodeRelationship.SOURCE] = source_rel
    schema.hide_from_views(node)
    for excluded in (node.excluded_embed_metadata_keys, node.excluded_llm_metadata_keys):
        if schema.HEADING_CASCADE in excluded:  # the header is meant to be read
            excluded.remove(schema.HEADING_CASCADE)
    return NodeWithScore(node=node, score=float(value))


def chunk_text(node: BaseNode) -> str:
    """A node's own text, without metadata.

    Args:
        node: The node.

    Returns:
        Its text.
    """
    return node.get_content(MetadataMode.NONE)


def _span(node: BaseNode) -> Optional[Tuple[int, int]]:
    """The node's character span, trusted only when it matches the text length."""
    span = schema.get_char_span(node)
    if span is None and getattr(node, "start_char_idx", None) is not None:
        if node.end_char_idx is not None:
            span = (int(node.start_char_idx), int(node.end_char_idx))
    if span is None or span[1] - span[0] != len(chunk_text(node)):
        return None
    return span


def _overlap(text: str, piece: str, minimum: int) -> int:
    """Length of the longest suffix of ``text`` that starts ``piece`` (0 if < minimum)."""
    limit = min(len(text), len(piece))
    for size in range(limit, minimum - 1, -1):
        if text.endswith(piece[:size]):
            return size
    return 0


def _header(title: str, first: BaseNode, last: BaseNode) -> str:
    """``Title > 2 Features > 2.3 Timing`` (``… 2.4 Limits`` when the segment runs on)."""
    path = schema.get_heading_path(first)
    header = " > ".join([title, *[h.label() for h in path]]) if title else " > ".join(
        h.label() for h in path
    )
    end_path = schema.get_heading_path(last)
    if end_path and end_path != path:
        header += f" … {end_path[-1].label()}"
    return header
