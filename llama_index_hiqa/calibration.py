"""Self-calibration of the multi-route fusion from the collection itself, with no labels.

HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA", §Multi-Route
Retrieval, formula 2) mixes the vector and BM25 scores with α and adds β·log(1 + |C|) for the
critical keywords a chunk shares with the question; the paper sets α and β by hand per
collection and says in which direction to move them. A user has no labelled questions for
their collection, but the collection says what its sections are: every section has a
document title and a heading. ``calibration_questions`` turns sections into questions ("What
does <document title> say about <heading>?", answered by that section's nodes), and
``calibrate`` picks the fusion settings (α, β, the document-title keyword weight) under
which those questions find their sections best.

What it can and cannot tell: the generated questions name the document and the section the
way the store names them, so they reward the routes that match names (BM25, keywords) more
than real questions do; the defaults are kept unless another setting is better by
``min_gain``. Route scores are computed once per question and re-fused for every setting
(pure fusion, :mod:`llama_index_hiqa.retrievers.fusion`), so a grid costs one retrieval per
question and title weight.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections import defaultdict
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field
from llama_index.core.schema import BaseNode

from llama_index_hiqa import schema

# The settings a calibration may change, and the values it tries by default.
DEFAULT_GRID: Dict[str, List[Any]] = {
    "alpha": [0.5, 0.7, 0.9],
    "beta": [0.5, 1.0, 2.0, "auto"],
    "document_keyword_weight": [1.0, 2.0, 3.0],
}
# Sections whose heading says nothing a question would ask about.
_GENERIC_HEADINGS = {"", "table of contents", "index", "signatures", "exhibits", "none"}


class CalibrationQuestion(BaseModel):
    """A question generated from one section, answered by that section's nodes."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(description="The generated question.")
    document_id: str = Field(description="schema.DOCUMENT_ID of the section's document.")
    node_ids: List[str] = Field(description="The section's nodes: any of them answers it.")


class CalibrationResult(BaseModel):
    """One setting of the grid and how the generated questions fared under it."""

    model_config = ConfigDict(extra="forbid")

    settings: Dict[str, Any]
    mrr: float = Field(description="Mean reciprocal rank of the first node of the right section.")
    document_hit_at_1: float = Field(description="Share of questions whose first node is in the right document.")


class CalibrationReport(BaseModel):
    """What ``calibrate`` tried, what it chose and why (saved with the pack)."""

    model_config = ConfigDict(extra="forbid")

    questions: int = Field(description="Generated questions scored.")
    baseline: CalibrationResult = Field(description="The retriever's settings before calibration.")
    best: CalibrationResult = Field(description="The best setting of the grid.")
    chosen: Dict[str, Any] = Field(description="Settings applied ({} when the baseline was kept).")
    min_gain: float = Field(description="MRR gain the best setting needed over the baseline.")
    results: List[CalibrationResult] = Field(default_factory=list, description="Every setting tried.")

    def summary(self) -> str:
        """One paragraph for a log or the command line."""
        kept = "kept the current settings" if not self.chosen else f"chose {self.chosen}"
        return (
            f"calibration on {self.questions} questions generated from the collection's headings: "
            f"{kept} (MRR {self.baseline.mrr:.3f} -> {self.best.mrr:.3f}, right document first "
            f"{self.baseline.document_hit_at_1:.3f} -> {self.best.document_hit_at_1:.3f}; "
            f"{len(self.results)} settings tried)"
        )


def calibration_questions(nodes: Iterable[BaseNode], limit: int = 120, seed: int = 0) -> List[CalibrationQuestion]:
    """Up to ``limit`` questions, one per section, spread evenly over the documents.

    A section is the nodes of one document under one heading path; its question names the
    document by its title and the section by its deepest heading. Sections with a generic
    heading (or none) give no question. Deterministic for a given ``seed``.
    """
    sections: Dict[tuple, List[str]] = defaultdict(list)
    titles: Dict[str, str] = {}
    for node in nodes:
        if schema.get_segment_kind(node) == schema.KIND_IMAGE:
            continue
        path = schema.get_heading_path(node)
        document_id = schema.get_document_id(node) or ""
        if not path or not document_id:
            continue
        heading = path[-1].title.strip() or path[-1].label()
        if heading.lower() in _GENERIC_HEADINGS or len(heading) < 4:
            continue
        titles.setdefault(document_id, schema.get_document_title(node) or document_id)
        sections[(document_id, tuple(h.label() for h in path), heading)].append(node.node_id)
    by_document: Dict[str, List[tuple]] = defaultdict(list)
    for key in sections:
        by_document[key[0]].append(key)
    rng = random.Random(seed)
    queues = []
    for document_id in sorted(by_document):
        keys = sorted(by_document[document_id])
        rng.shuffle(keys)
        queues.append(keys)
    picked: List[tuple] = []
    while len(picked) < limit and any(queues):
        for queue in queues:  # round robin: every document is asked about equally often
            if queue and len(picked) < limit:
                picked.append(queue.pop())
    return [
        CalibrationQuestion(
            question=f"What does {titles[document_id]} say about {heading}?",
            document_id=document_id,
            node_ids=sections[(document_id, path, heading)],
        )
        for document_id, path, heading in picked
    ]


def _score(ranking: Sequence[str], question: CalibrationQuestion, document_of: Callable[[str], Optional[str]]) -> tuple:
    """(reciprocal rank of the section's first node, 1.0 when the first node is in its document)."""
    answers = set(question.node_ids)
    reciprocal = next((1.0 / rank for rank, node_id in enumerate(ranking, 1) if node_id in answers), 0.0)
    first_document = document_of(ranking[0]) if ranking else None
    return reciprocal, float(first_document == question.document_id)


def calibrate(
    retriever: Any,
    questions: Sequence[CalibrationQuestion],
    grid: Optional[Dict[str, Sequence[Any]]] = None,
    min_gain: float = 0.01,
) -> CalibrationReport:
    """Score every combination of ``grid`` (default :data:`DEFAULT_GRID`) on ``questions``
    with a :class:`~llama_index_hiqa.MultiRouteRetriever` and report the best.

    ``chosen`` is empty unless the best setting's MRR beats the retriever's own settings by
    ``min_gain``: a calibration never moves the settings on noise.
    """
    if not questions:
        from llama_index_hiqa.errors import EvaluationInputError

        raise EvaluationInputError(
            "calibrate needs at least one question and none could be generated (the collection has "
            "no headed sections to ask about); the store keeps its fusion settings"
        )
    grid = {**DEFAULT_GRID} if grid is None else {k: list(v) for k, v in grid.items()}
    unknown = sorted(set(grid) - set(DEFAULT_GRID))
    if unknown:
        raise ValueError(f"calibrate: unknown grid setting(s) {unknown}; known: {sorted(DEFAULT_GRID)}")
    # The title weight changes the keyword route's |C|: route scores once per weight.
    weights = grid.get("document_keyword_weight", [retriever.config.document_keyword_weight])
    fusion_keys = [k for k in grid if k != "document_keyword_weight"]
    current = {k: getattr(retriever.config, k) for k in DEFAULT_GRID}
    results: List[CalibrationResult] = []
    baseline: Optional[CalibrationResult] = None
    # Node id -> node, read lazily from the docstore (only the first node of each ranking).
    nodes = retriever._nodes

    @functools.lru_cache(maxsize=None)
    def document_of(node_id: str) -> Optional[str]:
        node = nodes.get(node_id)
        return schema.get_document_id(node) if node is not None else None

    combos = list(itertools.product(*(grid[k] for k in fusion_keys)))
    current_combo = tuple(current[k] for k in fusion_keys)
    for weight in dict.fromkeys([*weights, current["document_keyword_weight"]]):
        weighted = retriever.with_settings(document_keyword_weight=weight)
        scored = [weighted.route_scores(q.question) for q in questions]
        is_current_weight = weight == current["document_keyword_weight"]
        # The current settings are scored too (the baseline), also when the grid leaves them out.
        for combo in dict.fromkeys([*combos, current_combo] if is_current_weight else combos):
            settings = {**dict(zip(fusion_keys, combo)), "document_keyword_weight": weight}
            variant = weighted.with_settings(**dict(zip(fusion_keys, combo)))
            totals = [_score(variant.fuse(s), q, document_of) for s, q in zip(scored, questions)]
            result = CalibrationResult(
                settings=settings,
                mrr=sum(t[0] for t in totals) / len(totals),
                document_hit_at_1=sum(t[1] for t in totals) / len(totals),
            )
            if is_current_weight and combo == current_combo:
                baseline = result
            if weight in weights and combo in combos:
                results.append(result)
    assert baseline is not None  # the current settings are always scored
    best = max(results, key=lambda r: (r.mrr, r.document_hit_at_1))
    chosen = {} if best.mrr < baseline.mrr + min_gain else {
        k: v for k, v in best.settings.items() if v != current[k]
    }
    return CalibrationReport(
        questions=len(questions), baseline=baseline, best=best, chosen=chosen, min_gain=min_gain, results=results
    )

