"""The HiQA ablation on your own documents: every variant, every ranking metric, one table.

HiQA §Ablation (Table 2) compares the full method with variants that drop one piece at a
time; [`AblationRunner`][llama_index_hiqa.evaluation.runner.AblationRunner] builds those variants from the pack's components on any corpus
(a folder of documents plus a questions file, or any [`Corpus`][llama_index_hiqa.evaluation.corpus.Corpus]) and scores each
with [`llama_index_hiqa.evaluation.metrics`][llama_index_hiqa.evaluation.metrics] (Log-Rank Index over *all* N units, Recall@k,
Precision@k, MRR, nDCG@k, hit rate, doc-hit):

==========================  ==================================================================
``vector_only``             fixed chunks (SentenceSplitter 256/32) + exact cosine: vanilla LlamaIndex
``fixed_bm25``              fixed chunks + ``BM25Retriever`` (what a user has today)
``fixed_rrf``               fixed chunks + RRF(vector, BM25), k=60 (``QueryFusionRetriever``'s
                            reciprocal rerank, over full rankings)
``fixed_multi_route``       fixed chunks + ``MultiRouteRetriever``
``original``                segments (chapter cuts), no metadata in the embedding, vector only
``no_hierarchy``            segments + own heading only (``CascadingMetadataTransform`` switch)
``hca``                     segments + heading cascade (HCA), vector only
``hca_multi_route``         HCA + ``MultiRouteRetriever`` (HiQA as published)
``hca_chunk_graph``         HCA + multi-route + ``ChunkGraphRetriever`` evidence chains
``hca_segment_integration`` HCA + multi-route + ``SegmentIntegrationPostprocessor``
==========================  ==================================================================

A variant whose component is not importable from ``llama_index_hiqa`` is reported as
"not yet available", never approximated. Segments come from ``LayoutMarkdownParser`` when it
is available, else from LlamaIndex's ``MarkdownNodeParser`` (the result says which); long
segments are cut into 256-token chunks *inside* the segment so that every variant embeds
the same amount of text per vector (MiniLM reads 256 word pieces) and the comparison is
about boundaries and metadata, not truncation.

The Log-Rank Index needs the rank of every gold unit among all N units, so every variant
yields a full score vector per question: exact cosine over all unit vectors, BM25 scores of
every unit, RRF over the two full rankings; retrievers that return a short list (chunk
graph, segment integration) rank their units first, in their order, and the remaining units
follow in the order of the variant they extend.

Re-runs are fast: vectors come from the shared on-disk cache ([`CachedEmbedding`][llama_index_hiqa.models.embedding_cache.CachedEmbedding]), so
only text no run has embedded before costs CPU; ``max_new_embeddings`` skips (and reports) a
variant that would embed more than that budget.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode
from tqdm import tqdm

from llama_index_hiqa.errors import EvaluationInputError
from llama_index_hiqa.evaluation import metrics as M
from llama_index_hiqa.evaluation.corpus import Corpus
from llama_index_hiqa.evaluation.report import STATUS_MISSING, STATUS_OK, AblationResult, VariantResult
from llama_index_hiqa.evaluation.units import _split_segments, fixed_chunks, markdown_segments, passage_segments
from llama_index_hiqa.evaluation.variants import (
    VARIANTS,
    BudgetExceeded,
    VariantSpec,
    _available,
    _component,
    _make_cascade,
    _unit_rows,
    _Workspace,
)
from llama_index_hiqa.models.embedding_cache import CachedEmbedding, content_hash

logger = logging.getLogger(__name__)


class AblationRunner(BaseModel):
    """Build every ablation variant on a corpus and score it with every ranking metric.

    >>> from llama_index_hiqa import AblationRunner
    >>> from llama_index_hiqa.evaluation.corpus import folder_corpus
    >>> result = AblationRunner().run(folder_corpus("docs/", "questions.jsonl"))
    >>> print(result.to_markdown()); result.save("eval_out/")
    """

    gamma: float = Field(default=M.DEFAULT_GAMMA, description="γ of the Log-Rank Index (HiQA formula 3).")
    ks: Tuple[int, ...] = Field(default=M.DEFAULT_KS, description="Cut-offs for Recall/Precision/nDCG/hit@k.")
    min_text_overlap: float = Field(
        default=M.DEFAULT_MIN_TEXT_OVERLAP, description="Evidence-text gold: share of evidence 5-grams a unit must hold."
    )
    max_new_embeddings: Optional[int] = Field(
        default=None, description="Skip (and report) a variant needing more uncached embeddings than this."
    )
    show_progress: bool = Field(default=True, description="Progress bars for variants and embedding.")
    embed_batch: int = Field(default=256, description="Texts per embedding call (each batch is cached).")

    _embed_model: Optional[BaseEmbedding] = PrivateAttr(default=None)
    _keyword_extractor: Any = PrivateAttr(default=None)

    def __init__(
        self,
        embed_model: Optional[BaseEmbedding] = None,
        keyword_extractor: Optional[Any] = None,
        **kwargs: Any,
    ) -> None:
        """``keyword_extractor``: the ``CriticalKeywordExtractor`` of the multi-route and
        chunk-graph variants (default: the retrievers' own, spaCy NER + rules). On a large
        corpus pass ``CriticalKeywordExtractor(use_ner=False, expert_keywords=[...])``:
        NER over tens of thousands of chunks takes hours on a laptop CPU."""
        super().__init__(**kwargs)
        self._embed_model = embed_model
        self._keyword_extractor = keyword_extractor

    @property
    def keyword_extractor(self) -> Any:
        """The keyword extractor given to the multi-route and chunk-graph variants (None: theirs)."""
        return self._keyword_extractor

    @property
    def embed_model(self) -> BaseEmbedding:
        if self._embed_model is None:
            self._embed_model = CachedEmbedding.from_defaults()
        return self._embed_model

    # -- variants -----------------------------------------------------------------------

    @staticmethod
    def variant_specs() -> List[VariantSpec]:
        return list(VARIANTS)

    @classmethod
    def variant_names(cls) -> List[str]:
        return [v.name for v in VARIANTS]

    def run(self, corpus: Corpus, variants: Optional[Sequence[str]] = None) -> AblationResult:
        """Score ``variants`` on ``corpus``; unavailable ones are reported, not raised.

        Args:
            corpus: the documents and questions.
            variants: the variant names to run; ``None`` runs all.

        Returns:
            An `AblationResult` with one result a variant.

        Raises:
            EvaluationInputError: ``variants`` names an unknown variant.
        """
        wanted = list(variants) if variants else self.variant_names()
        unknown = [v for v in wanted if v not in self.variant_names()]
        if unknown:
            raise EvaluationInputError(f"unknown variants {unknown}; choose from {self.variant_names()}")
        specs = [s for s in VARIANTS if s.name in wanted]
        workspace = _Workspace(self, corpus)
        results: List[VariantResult] = []
        for spec in self.progress(specs, "variants"):
            missing = [r for r in spec.requires if not _available(r)]
            if missing:
                results.append(VariantResult(spec.name, spec.label, STATUS_MISSING, notes="needs " + ", ".join(missing)))
                continue
            started = time.perf_counter()
            try:
                nodes, scores, notes = spec.build(self, workspace)
            except BudgetExceeded as exc:
                results.append(VariantResult(spec.name, spec.label, "skipped (embedding budget)", notes=str(exc)))
                continue
            # Safe: one variant failing (a component given settings it rejects, a corpus it
            # cannot handle) must not lose the other variants' results; it is logged with its
            # traceback and reported in the table as "failed: <error type>".
            except Exception as exc:  # noqa: BLE001
                logger.exception("ablation variant %s failed", spec.name)
                results.append(
                    VariantResult(spec.name, spec.label, f"failed: {type(exc).__name__}", notes=str(exc)[:300])
                )
                continue
            result = self._score(spec, corpus, nodes, scores, notes)
            result.seconds = time.perf_counter() - started
            results.append(result)
        return AblationResult(corpus.name, len(corpus.questions), self.gamma, tuple(self.ks), results)

    def _score(self, spec: VariantSpec, corpus: Corpus, nodes: Sequence[BaseNode], scores: np.ndarray, notes: str) -> VariantResult:
        units = [M.UnitView.from_node(n) for n in nodes]
        unit_docs = [u.document_id for u in units]
        per_query: List[Dict[str, Any]] = []
        for q, row in zip(corpus.questions, scores):
            ranks = M.ranks_from_scores(row)
            rel = M.relevance_matrix(units, q.gold, self.min_text_overlap)
            gold_docs = [g.document_id for g in q.gold if M.gold_rule(g) != "id"]
            ranking = M.query_ranking(ranks, rel, unit_docs, gold_docs)
            values = M.query_metrics(ranking, self.ks, self.gamma)
            per_query.append(
                {"id": q.id, "gold_ranks": [r if r is not None else len(units) for r in ranking.gold_ranks], **values}
            )
        means = M.mean_metrics([{k: v for k, v in q.items() if k not in ("id", "gold_ranks")} for q in per_query])
        lri = np.asarray([q["log_rank"] for q in per_query])
        stats = {"mean": float(lri.mean()), "max": float(lri.max()), "min": float(lri.min()), "std": float(lri.std())}
        return VariantResult(spec.name, spec.label, STATUS_OK, len(nodes), means, stats, per_query, notes)

    # -- building blocks ------------------------------------------------------------------

    def progress(self, items, desc: str):
        """``items`` with a progress bar when ``show_progress``.

        Args:
            items (Iterable): any iterable.
            desc: the bar's label.

        Returns:
            (Iterable): ``items`` itself, or a ``tqdm`` over it.
        """
        if not self.show_progress:
            return items

        return tqdm(items, desc=desc)

    def build_units(self, key: str, ws: _Workspace) -> List[BaseNode]:
        """The unit set ``key`` of the workspace's corpus.

        Args:
            key: ``"fixed"``, ``"segments"``, ``"no_hierarchy"`` or ``"hca"``.
            ws: the workspace (its corpus, unit sets already built, notes).

        Returns:
            The units, in corpus order.

        Raises:
            KeyError: ``key`` is not a unit set.
        """
        corpus = ws.corpus
        if key == "fixed":
            return fixed_chunks(corpus)
        if key == "segments":
            nodes, how = self._segments(corpus)
            ws.notes["segments"] = how
            return nodes
        if key in ("no_hierarchy", "hca"):
            return self._cascade(ws.unit_set("segments"), own_heading_only=key == "no_hierarchy")
        raise KeyError(key)

    def _segments(self, corpus: Corpus) -> Tuple[List[BaseNode], str]:
        if corpus.passages:
            return passage_segments(corpus.documents), "passages are the segments (title as heading)"
        if _available("LayoutMarkdownParser"):
            parser = _component("LayoutMarkdownParser")()
            segments = parser.get_nodes_from_documents(corpus.documents)
            return _split_segments(segments, corpus.documents), "segments from LayoutMarkdownParser"
        return markdown_segments(corpus.documents), "segments from MarkdownNodeParser (LayoutMarkdownParser not yet available)"

    def _cascade(self, segments: List[BaseNode], own_heading_only: bool) -> List[BaseNode]:
        cls = _component("CascadingMetadataTransform")
        copies = [n.model_copy(deep=True) for n in segments]
        transform = _make_cascade(cls, own_heading_only)
        return list(transform(copies))

    def embed_units(self, nodes: Sequence[BaseNode], key: str) -> np.ndarray:
        """Unit vectors (rows) of ``nodes``' embedding views, within the embedding budget.

        Args:
            nodes: the units.
            key: the unit set's name, shown on the progress bar.

        Returns:
            A ``(len(nodes), dimension)`` array.

        Raises:
            BudgetExceeded: more texts miss the embedding cache than ``max_new_embeddings``.
        """
        model = self.embed_model
        texts = [n.get_content(MetadataMode.EMBED) for n in nodes]
        if self.max_new_embeddings is not None:
            missing = _uncached_count(model, texts)
            if missing > self.max_new_embeddings:
                raise BudgetExceeded(
                    f"{missing:,} of {len(texts):,} unit texts are not in the embedding cache "
                    f"(budget {self.max_new_embeddings:,}); run with a larger budget"
                )
        vectors: List[List[float]] = []
        steps = range(0, len(texts), self.embed_batch)
        if self.show_progress:
            steps = tqdm(steps, desc=f"embedding {key} (cached)", unit="batch")
        for start in steps:
            vectors.extend(model.get_text_embedding_batch(texts[start : start + self.embed_batch]))
        return _unit_rows(vectors)


def _uncached_count(model: BaseEmbedding, texts: Sequence[str]) -> int:
    """How many texts the on-disk cache does not hold (0 check impossible: assume all)."""
    if not isinstance(model, CachedEmbedding):
        return len(texts)
    keys = [content_hash(model.model_id, "text", t) for t in dict.fromkeys(texts)]
    return len(keys) - len(model._lookup(keys))  # noqa: SLF001 - same package


