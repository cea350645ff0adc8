"""Relevant segment extraction: rerank, then return the best contiguous segments of each document.

TextRAG Parts 3 and 4 (Pei Ma's TextRAG blog post (2024), "Reranking" and "Chunks Integration"),
whose public reference is dsRAG's relevant segment extraction (RSE). Placed after any
retriever, [`SegmentIntegrationPostprocessor`][llama_index_hiqa.postprocessors.segment_integration.SegmentIntegrationPostprocessor] turns ten scattered chunks into the two
or three passages where the answer lives, each whole, in reading order, with a header saying
which document and section it is from:

1. **Relevance** (Part 3). Every retrieved chunk gets a relevance from a reranker — any
   LlamaIndex reranker postprocessor given as ``reranker=`` (``CohereRerank`` from
   ``llama-index-postprocessor-cohere-rerank``, ``SentenceTransformerRerank``,
   ``LLMRerank``, ...), or, offline, the incoming retrieval scores or the packaged embedding
   model's cosine — mapped to [0, 1] and spread by a Beta CDF whose parameters depend on the
   reranker (``CohereRerank``: a = b = 0.4, dsRAG's published value for Cohere rerank-v3).
2. **Chunk value** (Part 4, "Evaluating the relevance of text blocks"):
   ``exp(-rank / decay_rate) * relevance - irrelevant_chunk_penalty``; chunks that were not
   retrieved are worth ``-irrelevant_chunk_penalty``. Optional length adjustment
   ``value * max(length, reference_length) / reference_length``.
3. **Best segments** (Part 4, "Selecting the optimal fragment combination"): contiguous
   runs of one document, each at most ``max_length`` chunks, together at most
   ``overall_max_length``, each worth at least ``minimum_value``, never starting or ending
   on a negative chunk, never overlapping; chosen best first. The reference tries every
   (start, end) pair against every chosen segment in every round; here prefix sums give a
   segment's value in O(1), each start's best end is found in O(max_length), and a lazy
   max-heap re-examines only the starts a new segment invalidated, so a thousand candidates
   take milliseconds (``benchmarks/bench_segment_integration.py``).
4. **Fill-in**: chunks inside a segment that were not retrieved are fetched from a docstore
   (``docstore=`` or `from_index`) by (document id, position) through a lookup built
   once, lazily. Without a docstore a segment can only hold retrieved chunks (a missing
   position ends it) and its node says so (``schema.SEGMENT_FILL``).
5. **Output**: one ``NodeWithScore`` per segment, score = segment value, best first; text
   joined in document order (overlap between consecutive chunks removed, so the segment is
   the source span), the segment header in ``schema.HEADING_CASCADE`` and the provenance in
   schema keys (member ids, document, position range, pages).
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any, ClassVar, Dict, List, Literal, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr, SerializeAsAny
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import (
    BaseNode,
    MetadataMode,
    NodeWithScore,
    QueryBundle,
)
from llama_index.core.storage.docstore.types import BaseDocumentStore

from llama_index_hiqa.component_dict import PartsRoundTrip
from llama_index_hiqa import schema
from llama_index_hiqa.models.defaults import resolve_embed_model
from llama_index_hiqa.storage.vector_store_access import index_nodes
from llama_index_hiqa.errors import RerankerError, UnknownNodeError
from llama_index_hiqa.models.llm_calls import acall_llm, call_llm
from llama_index_hiqa.postprocessors.segment_assembly import (
    LayoutChunk,
    chunk_text,
    docstore_lookup,
    meta_document,
    segment_node,
)
from llama_index_hiqa.postprocessors.segment_selection import beta_transform, chunk_values, select_segments

logger = logging.getLogger(__name__)

# dsRAG's published RSE presets (paper values; the penalty sets the segment length: 0.05 long
# ... 0.4 very short, TextRAG Part 4).
PRESETS: Dict[str, Dict[str, Any]] = {
    "balanced": {
        "max_length": 15,
        "overall_max_length": 30,
        "minimum_value": 0.5,
        "irrelevant_chunk_penalty": 0.18,
        "decay_rate": 30.0,
        "top_k_for_document_selection": 10,
    },
    "precision": {
        "max_length": 15,
        "overall_max_length": 30,
        "minimum_value": 0.7,
        "irrelevant_chunk_penalty": 0.2,
        "decay_rate": 30.0,
        "top_k_for_document_selection": 10,
    },
    "find_all": {
        "max_length": 40,
        "overall_max_length": 200,
        "minimum_value": 0.4,
        "irrelevant_chunk_penalty": 0.18,
        "decay_rate": 200.0,
        "top_k_for_document_selection": 200,
    },
}

RelevanceSource = Literal["auto", "reranker", "scores", "embedding"]

# How raw scores of each source become a relevance in [0, 1]: a linear map of ``score_range``,
# then the Beta CDF with (a, b); (1, 1) is the identity; keyed by the reranker's class name.
# CohereRerank's values are dsRAG's (Cohere's scores crowd near 0 and 1, about
# Beta(0.4, 0.4)); LLMRerank scores 1-10. Scores of no known
# scale — retrieval scores (cosine of whatever embedding model, BM25, fused), the embedding
# cosine, an unknown reranker — have range None: relevance = score / best score (min-max if
# any is negative). dsRAG's thresholds are tuned on calibrated reranker scores; raw cosines
# of small models rarely pass 0.7, so read absolutely they would return nothing at all.
CALIBRATION: Dict[str, Tuple[Optional[Tuple[float, float]], Tuple[float, float]]] = {
    "CohereRerank": ((0.0, 1.0), (0.4, 0.4)),
    "LLMRerank": ((0.0, 10.0), (1.0, 1.0)),
    "SentenceTransformerRerank": ((0.0, 1.0), (0.4, 0.4)),
    "embedding": (None, (1.0, 1.0)),
    "scores": (None, (1.0, 1.0)),
    "reranker": (None, (1.0, 1.0)),
}

UNRETRIEVED_RANK = 1000  # dsRAG's rank for chunks the reranker did not return


# --- the postprocessor ---------------------------------------------------------------


class SegmentIntegrationPostprocessor(PartsRoundTrip, BaseNodePostprocessor):
    """Rerank retrieved chunks, then return the best contiguous segments of each document.

    Drop it into any query engine after the retriever::

        rse = SegmentIntegrationPostprocessor.from_index(index, preset="balanced")
        engine = index.as_query_engine(similarity_top_k=50, node_postprocessors=[rse])

    Defaults are dsRAG's ``balanced`` preset; ``preset="precision"`` or ``"find_all"``
    selects the others (explicit settings override the preset's). Cohere's reranker comes in
    as LlamaIndex's own postprocessor: ``reranker=CohereRerank(api_key=..., top_n=50)``.
    """

    part_names: ClassVar[Tuple[str, ...]] = ("reranker", "embed_model", "docstore")  # not serialised: component_dict

    # Unknown settings fail at construction (a misspelt or removed one, e.g. the former
    # cohere_api_key, would otherwise be ignored and rerank nothing).
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    preset: Optional[str] = Field(
        default=None, description="Preset the settings came from: balanced, precision, find_all."
    )
    max_length: int = Field(default=15, ge=1, description="Most chunks in one segment.")
    overall_max_length: int = Field(
        default=30, ge=1, description="Most chunks in all segments together."
    )
    minimum_value: float = Field(
        default=0.5, description="A segment must be worth at least this (sum of chunk values)."
    )
    irrelevant_chunk_penalty: float = Field(
        default=0.18,
        description="Subtracted from every chunk's value; larger gives shorter segments "
        "(0.05: 20-50 chunks, 0.2: 4-10, 0.4: 1-3).",
    )
    decay_rate: float = Field(
        default=30.0, gt=0, description="Rank decay: value = exp(-rank / decay_rate) * relevance."
    )
    chunk_length_adjustment: bool = Field(
        default=True,
        description="Scale values by max(length, reference_length) / reference_length.",
    )
    reference_length: int = Field(
        default=700, gt=0, description="Reference chunk length in characters."
    )
    top_k_for_document_selection: int = Field(
        default=10, ge=1, description="Only the documents of the best this many chunks compete."
    )
    relevance: RelevanceSource = Field(
        default="auto",
        description="Where relevance comes from. auto: the reranker if given, else the "
        "incoming scores if every node has one, else the embedding model's cosine.",
    )
    beta_a: Optional[float] = Field(
        default=None, gt=0, description="Beta CDF a; None: the source's calibrated value."
    )
    beta_b: Optional[float] = Field(
        default=None, gt=0, description="Beta CDF b; None: the source's calibrated value."
    )
    score_range: Optional[Tuple[float, float]] = Field(
        default=None,
        description="Raw scores (low, high) mapped linearly to [0, 1] before the Beta CDF; "
        "None: the source's calibrated range.",
    )
    reranker: Optional[SerializeAsAny[BaseNodePostprocessor]] = Field(
        default=None,
        description="Any LlamaIndex reranker postprocessor to score the chunks (CohereRerank, "
        "SentenceTransformerRerank, LLMRerank, ...).",
    )
    fallback_on_reranker_error: bool = Field(
        default=True,
        description="On a reranker failure, log and use the incoming scores (or the "
        "embedding cosine) instead of raising RerankerError.",
    )
    embed_model: Optional[BaseEmbedding] = Field(
        default=None, exclude=True, description="For the embedding relevance; None: defaults."
    )
    docstore: Optional[BaseDocumentStore] = Field(
        default=None, exclude=True, description="Where unretrieved chunks inside a segment come from."
    )
    chunk_separator: str = Field(
        default="\n\n", description="Joins consecutive chunks whose source spans do not touch."
    )
    min_overlap_chars: int = Field(
        default=16,
        description="Without character spans, a suffix/prefix repeat at least this long "
        "between consecutive chunks is taken as splitter overlap and kept once.",
    )

    _lookup: Optional[Dict[Tuple[str, int], Tuple[str, int]]] = PrivateAttr(default=None)

    def __init__(self, preset: Optional[str] = None, **kwargs: Any) -> None:
        if preset is not None:
            if preset not in PRESETS:
                raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
            kwargs = {**PRESETS[preset], **kwargs}
        super().__init__(preset=preset, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "SegmentIntegrationPostprocessor"

    @classmethod
    def from_preset(cls, preset: str, **kwargs: Any) -> "SegmentIntegrationPostprocessor":
        """A postprocessor with one of dsRAG's presets.

        Args:
            preset: ``balanced``, ``precision`` or ``find_all``.
            **kwargs: Settings that override the preset's.

        Returns:
            The postprocessor.
        """
        return cls(preset=preset, **kwargs)

    @classmethod
    def from_index(cls, index: Any, **kwargs: Any) -> "SegmentIntegrationPostprocessor":
        """A postprocessor that fills segments with the chunks that were not retrieved.

        They are read from the index's docstore or, over a store that keeps the text (Chroma,
        Qdrant, pgvector, ...), from the nodes listed from the vector store
        (`llama_index_hiqa.storage.vector_store_access`).

        Args:
            index: A LlamaIndex ``VectorStoreIndex`` (or anything with a docstore).
            **kwargs: Settings, as for the constructor.

        Returns:
            The postprocessor.
        """
        _nodes, docstore = index_nodes(index, "SegmentIntegrationPostprocessor")
        return cls(docstore=docstore, **kwargs)

    def reset_docstore_lookup(self) -> None:
        """Forget the (document, position) lookup; call after adding nodes to the docstore."""
        self._lookup = None

    # -- relevance ------------------------------------------------------------------

    def _source(self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle]) -> str:
        if self.relevance != "auto":
            if self.relevance in ("reranker", "embedding") and query_bundle is None:
                raise ValueError(f"relevance={self.relevance!r} needs a query")
            return self.relevance
        has_scores = all(n.score is not None for n in nodes)
        if query_bundle is not None and self.reranker is not None:
            return "reranker"
        if has_scores or query_bundle is None:
            return "scores"
        return "embedding"

    def _raw_scores(
        self, source: str, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle]
    ) -> Tuple[str, List[Optional[float]]]:
        if source == "reranker":
            copies = [NodeWithScore(node=n.node, score=n.score) for n in nodes]
            return call_llm(
                lambda: (source, reranked_scores(nodes, self.reranker.postprocess_nodes(copies, query_bundle))),
                **self._reranker_call(source, nodes, query_bundle),
            )
        if source == "embedding":
            return source, self._embedding_scores(nodes, query_bundle)
        return source, [n.score for n in nodes]

    async def _araw_scores(
        self, source: str, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle]
    ) -> Tuple[str, List[Optional[float]]]:
        if source == "reranker":
            copies = [NodeWithScore(node=n.node, score=n.score) for n in nodes]

            async def rerank() -> Tuple[str, List[Optional[float]]]:
                reranked = await self.reranker.apostprocess_nodes(copies, query_bundle)
                return source, reranked_scores(nodes, reranked)

            return await acall_llm(rerank, **self._reranker_call(source, nodes, query_bundle))
        if source == "embedding":
            return source, await self._aembedding_scores(nodes, query_bundle)
        return source, [n.score for n in nodes]

    def _reranker_call(
        self, source: str, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle]
    ) -> Dict[str, Any]:
        """How the reranker is called: a reranker is a remote service or a model of the
        user's (network, quota, parse errors of any type), so a failure ranks by the incoming
        scores (or the embedding cosine) and loses no chunk, unless the user asked for
        [`RerankerError`][llama_index_hiqa.errors.RerankerError]."""

        def incoming_scores(_error: BaseException) -> Tuple[str, List[Optional[float]]]:
            if all(n.score is not None for n in nodes):
                return f"scores (fallback from {source})", [n.score for n in nodes]
            return f"embedding (fallback from {source})", self._embedding_scores(nodes, query_bundle)

        def typed_error(error: BaseException) -> BaseException:
            return error if isinstance(error, RerankerError) else RerankerError(source, str(error))

        return dict(
            what=f"{source} reranking",
            instead="using the incoming scores instead",
            fallback=incoming_scores if self.fallback_on_reranker_error else None,
            error_type=typed_error,
        )

    def _embed(self) -> BaseEmbedding:
        return resolve_embed_model(self.embed_model)

    def _embedding_scores(
        self, nodes: List[NodeWithScore], query_bundle: QueryBundle
    ) -> List[Optional[float]]:
        model = self._embed()
        query = query_bundle.embedding or model.get_query_embedding(query_bundle.query_str)
        missing = [n.node for n in nodes if n.node.embedding is None]
        vectors = model.get_text_embedding_batch([m.get_content(MetadataMode.EMBED) for m in missing])
        return _cosines(query, nodes, dict(zip((m.node_id for m in missing), vectors)))

    async def _aembedding_scores(
        self, nodes: List[NodeWithScore], query_bundle: QueryBundle
    ) -> List[Optional[float]]:
        model = self._embed()
        query = query_bundle.embedding or await model.aget_query_embedding(query_bundle.query_str)
        missing = [n.node for n in nodes if n.node.embedding is None]
        vectors = await model.aget_text_embedding_batch(
            [m.get_content(MetadataMode.EMBED) for m in missing]
        )
        return _cosines(query, nodes, dict(zip((m.node_id for m in missing), vectors)))

    # -- meta-document ----------------------------------------------------------------

    def _docstore_lookup(self) -> Dict[Tuple[str, int], Tuple[str, int]]:
        """(document id, position) -> (node id, length), built once from the docstore."""
        if self._lookup is None:
            self._lookup = docstore_lookup(self.docstore)
        return self._lookup

    # -- segments -> nodes ------------------------------------------------------------

    def _fetch(self, chunk: LayoutChunk) -> BaseNode:
        if chunk.node is not None:
            return chunk.node
        try:
            return self.docstore.get_node(chunk.node_id)
        except (ValueError, KeyError) as exc:
            raise UnknownNodeError(
                f"docstore no longer holds node {chunk.node_id!r} (document "
                f"{chunk.document_id!r}, position {chunk.position}); call reset_docstore_lookup()"
            ) from exc

    def _segment_node(self, chunks: List[LayoutChunk], value: float, source: str, filled: bool) -> NodeWithScore:
        members = [self._fetch(c) for c in chunks]
        return segment_node(
            chunks, members, value, source, filled, self.chunk_separator, self.min_overlap_chars
        )

    # -- the pipeline -----------------------------------------------------------------

    def _segments(
        self, nodes: List[NodeWithScore], source: str, raw: List[Optional[float]]
    ) -> List[NodeWithScore]:
        score_range, (a, b) = calibration(source.split(" ")[0], self)
        relevance = relevance_of(raw, score_range, a, b)
        # Rank by reranked relevance (stable: ties keep retrieval order); unscored chunks
        # (dropped by the reranker) rank after all, as dsRAG's rank 1000.
        order = sorted(range(len(nodes)), key=lambda i: (raw[i] is None, -relevance[i]))
        ranks = np.empty(len(nodes))
        for rank, i in enumerate(order):
            ranks[i] = rank if raw[i] is not None else UNRETRIEVED_RANK
        lengths = [len(chunk_text(n.node)) for n in nodes] if self.chunk_length_adjustment else None
        values = chunk_values(
            ranks, relevance, self.irrelevant_chunk_penalty, self.decay_rate,
            lengths, self.reference_length,
        )
        ordered = [nodes[i] for i in order]
        lookup = self._docstore_lookup() if self.docstore is not None else {}
        layout, run_ids = meta_document(ordered, values[order], self, lookup)
        chosen = select_segments(
            [c.value for c in layout], run_ids, self.max_length, self.overall_max_length,
            self.minimum_value,
        )
        filled = self.docstore is not None
        return [self._segment_node(layout[s:e], value, source, filled) for s, e, value in chosen]

    def _postprocess_nodes(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        nodes = best_per_node(nodes)
        if not nodes:
            return []
        source, raw = self._raw_scores(self._source(nodes, query_bundle), nodes, query_bundle)
        return self._segments(nodes, source, raw)

    async def _apostprocess_nodes(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        nodes = best_per_node(nodes)
        if not nodes:
            return []
        source, raw = await self._araw_scores(self._source(nodes, query_bundle), nodes, query_bundle)
        # The docstore lookup may scan a large store once: keep it off the event loop.
        return await asyncio.to_thread(self._segments, nodes, source, raw)


# --- small helpers ---------------------------------------------------------------------


def calibration(source: str, settings: Any) -> Tuple[Optional[Tuple[float, float]], Tuple[float, float]]:
    """The score range and Beta CDF parameters of a relevance source.

    Args:
        source: ``reranker``, ``scores`` or ``embedding``.
        settings: The postprocessor (its ``reranker``, ``score_range``, ``beta_a``, ``beta_b``
            override the calibrated values).

    Returns:
        ``(score_range or None, (a, b))``; a reranker is looked up by its class name
            in [`CALIBRATION`][llama_index_hiqa.postprocessors.segment_integration.CALIBRATION].
    """
    key = source
    if source == "reranker" and settings.reranker is not None:
        key = settings.reranker.class_name()
        if key not in CALIBRATION:
            key = type(settings.reranker).__name__
    score_range, (a, b) = CALIBRATION.get(key, CALIBRATION.get(source, (None, (1.0, 1.0))))
    if settings.score_range is not None:
        score_range = tuple(settings.score_range)
    return score_range, (settings.beta_a or a, settings.beta_b or b)


def relevance_of(
    raw: Sequence[Optional[float]],
    score_range: Optional[Tuple[float, float]],
    a: float,
    b: float,
) -> np.ndarray:
    """Raw scores -> [0, 1] (``score_range``, else relative to the best) -> Beta CDF.

    Args:
        raw: The scores; ``None`` or not finite counts as 0.
        score_range: (low, high) mapped linearly to [0, 1]; ``None``: a scale of no known
            range, read relative to the best score (min-max when any is negative).
        a: Beta CDF a.
        b: Beta CDF b.

    Returns:
        The relevance of each score in [0, 1].
    """
    known = [s for s in raw if s is not None and math.isfinite(s)]
    if score_range is None:
        # Unknown scale: only relative relevance can be had; the ratio to the best keeps
        # "half as good" at 0.5.
        if not known:
            score_range = (0.0, 1.0)
        elif min(known) >= 0.0:
            score_range = (0.0, max(known))
        else:
            score_range = (min(known), max(known))
    low, high = score_range
    span = (high - low) or 1.0
    scaled = [0.0 if s is None or not math.isfinite(s) else (float(s) - low) / span for s in raw]
    return beta_transform(scaled, a, b)


def reranked_scores(nodes: List[NodeWithScore], reranked: List[NodeWithScore]) -> List[Optional[float]]:
    """The reranker's score of each node; rerankers may cut to their own top_n, so the chunks
    they dropped get ``None`` (relevance 0).

    Args:
        nodes: The nodes given to the reranker.
        reranked: What it returned.

    Returns:
        One score (or ``None``) per node of ``nodes``.

    Raises:
        RerankerError: When it scored none of them (e.g. ``LLMRerank`` given an answer it
            cannot parse returns nothing at all).
    """
    by_id = {n.node.node_id: n.score for n in reranked if n.score is not None}
    if not by_id:
        raise RerankerError("reranker", "it scored none of the chunks")
    return [by_id.get(n.node.node_id) for n in nodes]


def best_per_node(nodes: List[NodeWithScore]) -> List[NodeWithScore]:
    """Drop duplicate node ids (fused retrievers repeat nodes), keeping the best score.

    Args:
        nodes: The retrieved nodes.

    Returns:
        One per node id, in first-seen order.
    """
    best: Dict[str, NodeWithScore] = {}
    for n in nodes:
        held = best.get(n.node.node_id)
        if held is None or (n.score or float("-inf")) > (held.score or float("-inf")):
            best[n.node.node_id] = n
    return list(best.values())


def _cosines(
    query: Sequence[float], nodes: List[NodeWithScore], fresh: Dict[str, List[float]]
) -> List[Optional[float]]:
    q = np.asarray(query, dtype=float)
    q = q / (np.linalg.norm(q) or 1.0)
    scores: List[Optional[float]] = []
    for n in nodes:
        vector = n.node.embedding if n.node.embedding is not None else fresh[n.node.node_id]
        v = np.asarray(vector, dtype=float)
        scores.append(float(v @ q / (np.linalg.norm(v) or 1.0)))
    return scores


__all__ = (
    "SegmentIntegrationPostprocessor",
    "PRESETS",
    "CALIBRATION",
)
