"""Ranking metrics for retrieval over many similar documents, with HiQA's Log-Rank Index.

HiQA (§Metric for RAG of MDQA, formula 3; appendix B.2) scores a ranking by the position of
every gold segment among *all* N candidate units, not only the top k, so that a retriever that
moves the right chunk from rank 900 to rank 40 gets credit even when both are outside the
context window::

    S(r) = 1 - log(1 + γ (r - 1)) / log(1 + γ (N - 1))          r = 1 .. N (rank from 1)

S(1) = 1, S(N) = 0; a larger γ makes the curve drop faster near the top. A query's score is
the mean of S over its gold items; the index is the mean over queries. Beside it: Recall@k,
Precision@k, MRR, nDCG@k, hit rate (= page-hit@k for page gold), all-gold@k and doc-hit@k.

Everything here is a pure function over numpy arrays: the caller gives, for one query, the
1-based rank of the best unit matching each gold item (``gold_ranks``), the ranks of every
relevant unit (``relevant_ranks``) and N. [`score_ranking`][llama_index_hiqa.evaluation.metrics.score_ranking] derives them from a full
score vector with the gold matching rules below.

Gold matching rules
-------------------
The variants being compared cut the same documents differently (256-token chunks, whole
chapters, merged segments), so gold is never "a node id of variant A"; a unit is relevant to
a [`GoldEvidence`][llama_index_hiqa.evaluation.datasets.GoldEvidence] item by the first rule that
applies, in this order:

1. **passage / node id** (``passage_id`` set): the unit's node id equals it, or the unit's
   document id (``schema.get_document_id``) equals it — a passage cut into several chunks
   has all of them relevant.
2. **(document, page)** (``page`` set): same document and the unit's page range
   (``PAGE_START``..``PAGE_END``, inclusive) covers the gold page.
3. **(document, section)** (``section`` set): same document and the gold heading label
   equals, after normalisation (case, spaces, punctuation), the label (``"2.3 Timing"``) or
   the bare title (``"Timing"``) of any level of the unit's heading path, so every unit
   under the gold section counts; a unit whose text holds the heading label (two words or
   more, e.g. a fixed chunk that straddles the start of the section) counts too.
4. **evidence text** (``text`` set): same document (when given) and the unit holds enough of
   the evidence: the normalised evidence is a substring of the normalised unit, or at least
   ``min_text_overlap`` (default 0.5) of the evidence's word 5-grams occur in the unit
   (short evidences, under 5 words, must appear whole).
5. only ``document_id``: the unit belongs to that document.

A gold item's rank is the rank of the *best* unit matching it (so splitting a page in three
chunks neither helps nor hurts); a gold item no unit matches gets rank N (worst) for the
Log-Rank Index and counts as missed for the other metrics.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np
from numpy.typing import ArrayLike
from llama_index.core.schema import BaseNode, MetadataMode

from llama_index_hiqa import schema
from llama_index_hiqa.evaluation.datasets import GoldEvidence

DEFAULT_GAMMA = 1.0  # γ of formula 3; the shared-data baselines use 1
DEFAULT_KS = (1, 5, 10, 20)
DEFAULT_MIN_TEXT_OVERLAP = 0.5
_NGRAM = 5


# --- the Log-Rank Index ---------------------------------------------------------------


def log_rank_score(ranks: ArrayLike, n_candidates: int, gamma: float = DEFAULT_GAMMA) -> np.ndarray:
    """S(r) = 1 − log(1+γ(r−1)) / log(1+γ(N−1)) for 1-based ranks ``r`` (HiQA formula 3).

    Ranks are clipped to [1, N]; with a single candidate every rank scores 1.

    Args:
        ranks (ArrayLike): 1-based ranks (a number or an array of them).
        n_candidates: N, the number of units ranked (at least 1).
        gamma: γ > 0; larger values punish ranks just below the top more.

    Returns:
        S for each rank, between 0 (rank N) and 1 (rank 1), shaped like ``ranks``.

    Raises:
        ValueError: ``gamma`` is not above 0 or ``n_candidates`` is below 1.
    """
    if gamma <= 0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    if n_candidates < 1:
        raise ValueError(f"n_candidates must be >= 1, got {n_candidates}")
    r = np.clip(np.asarray(ranks, dtype=np.float64), 1, n_candidates)
    if n_candidates == 1:
        return np.ones_like(r)
    return 1.0 - np.log1p(gamma * (r - 1)) / math.log1p(gamma * (n_candidates - 1))


def log_rank_index(gold_ranks: Sequence[float], n_candidates: int, gamma: float = DEFAULT_GAMMA) -> float:
    """One query's Log-Rank Index: the mean of S(r) over its gold items' ranks (HiQA formula 3).

    Args:
        gold_ranks: the best rank (from 1) of each gold item (at least one).
        n_candidates: N, the number of units ranked.
        gamma: γ > 0 of [`log_rank_score`][llama_index_hiqa.evaluation.metrics.log_rank_score].

    Returns:
        The index, between 0 and 1.

    Raises:
        ValueError: no gold rank, or a bad ``gamma`` / ``n_candidates``.
    """
    if len(gold_ranks) == 0:
        raise ValueError("a query needs at least one gold item")
    return float(log_rank_score(gold_ranks, n_candidates, gamma).mean())


# --- the usual ranking metrics (one query) --------------------------------------------


def recall_at_k(gold_ranks: Sequence[Optional[float]], k: int) -> float:
    """Share of gold items whose best matching unit is in the top k.

    Args:
        gold_ranks: the best rank (from 1) of each gold item's matching units; ``None`` when no unit matches.
        k: the cut-off rank.

    Returns:
        A share between 0 and 1.
    """
    ranks = _found(gold_ranks)
    return float(np.sum(ranks <= k) / max(len(gold_ranks), 1))


def all_gold_at_k(gold_ranks: Sequence[Optional[float]], k: int) -> float:
    """1 when every gold item is in the top k (multi-hop: all the evidence is there).

    Args:
        gold_ranks: the best rank (from 1) of each gold item's matching units; ``None`` when no unit matches.
        k: the cut-off rank.

    Returns:
        1.0 or 0.0.
    """
    return float(recall_at_k(gold_ranks, k) == 1.0)


def hit_at_k(gold_ranks: Sequence[Optional[float]], k: int) -> float:
    """1 when at least one gold item is in the top k (hit rate; page-hit@k for page gold).

    Args:
        gold_ranks: the best rank (from 1) of each gold item's matching units; ``None`` when no unit matches.
        k: the cut-off rank.

    Returns:
        1.0 or 0.0.
    """
    return float(np.any(_found(gold_ranks) <= k))


def precision_at_k(relevant_ranks: Sequence[float], k: int) -> float:
    """Share of the top k units that match some gold item.

    Args:
        relevant_ranks: the ranks (from 1) of every relevant unit.
        k: the cut-off rank (at least 1).

    Returns:
        A share between 0 and 1.
    """
    return float(np.sum(np.asarray(relevant_ranks, dtype=np.float64) <= k) / k)


def reciprocal_rank(relevant_ranks: Sequence[float]) -> float:
    """1 / rank of the first relevant unit (0 when none is relevant).

    Args:
        relevant_ranks: the ranks (from 1) of every relevant unit.

    Returns:
        The reciprocal rank, between 0 and 1.
    """
    ranks = np.asarray(relevant_ranks, dtype=np.float64)
    return float(1.0 / ranks.min()) if ranks.size else 0.0


def ndcg_at_k(gold_ranks: Sequence[Optional[float]], k: int) -> float:
    """nDCG@k with binary gain per *gold item*, at the rank of its best unit.

    DCG = Σ 1/log2(1+r) over gold items found at r ≤ k; the ideal puts the G gold items at
    ranks 1..min(G, k). Counting gold items rather than units keeps the score comparable
    between segmentations (three chunks of one gold page are one gain, not three).

    Args:
        gold_ranks: the best rank (from 1) of each gold item's matching units; ``None`` when no unit matches.
        k: the cut-off rank.

    Returns:
        nDCG between 0 and 1 (0 without gold items).
    """
    ranks = _found(gold_ranks)
    dcg = float(np.sum(1.0 / np.log2(1.0 + ranks[ranks <= k])))
    ideal = sum(1.0 / math.log2(1.0 + i) for i in range(1, min(len(gold_ranks), k) + 1))
    return dcg / ideal if ideal else 0.0


def _found(gold_ranks: Sequence[Optional[float]]) -> np.ndarray:
    return np.asarray([r for r in gold_ranks if r is not None], dtype=np.float64)


# --- gold matching -------------------------------------------------------------------


def normalise_text(text: str) -> str:
    """Lower case, accents folded, punctuation dropped, whitespace collapsed.

    Args:
        text: any text (``None`` gives ``""``).

    Returns:
        The words joined by single spaces.
    """
    text = unicodedata.normalize("NFKD", text or "")
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    return " ".join(re.findall(r"\w+", text))


def _ngrams(words: List[str], n: int = _NGRAM) -> Set[Tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


@dataclass
class UnitView:
    """What the matching rules need of one ranked unit (built once per node)."""

    node_id: str
    document_id: Optional[str]
    pages: Optional[Tuple[int, ...]]
    headings: FrozenSet[str]  # normalised labels and bare titles of every heading level
    text: str  # normalised text
    _grams: Optional[Set[Tuple[str, ...]]] = field(default=None, repr=False)

    @classmethod
    def from_node(cls, node: BaseNode) -> "UnitView":
        """The facts of a node that the matching rules compare.

        Args:
            node: a retrieval unit.

        Returns:
            The view: id, document, pages, normalised heading labels and normalised text.

        Raises:
            InvalidMetadataError: the node's heading path is not JSON.
        """
        labels = set()
        for heading in schema.get_heading_path(node):
            labels.add(normalise_text(heading.label()))
            labels.add(normalise_text(heading.title))
        if node.metadata.get(schema.SECTION_TITLE):
            labels.add(normalise_text(node.metadata[schema.SECTION_TITLE]))
        labels.discard("")
        return cls(
            node_id=node.node_id,
            document_id=schema.get_document_id(node),
            pages=schema.get_page_range(node),
            headings=frozenset(labels),
            text=normalise_text(node.get_content(MetadataMode.NONE)),
        )

    def grams(self) -> Set[Tuple[str, ...]]:
        if self._grams is None:
            self._grams = _ngrams(self.text.split())
        return self._grams


def gold_rule(gold: GoldEvidence) -> str:
    """Which matching rule applies to ``gold`` (see the module docstring).

    Args:
        gold: one gold evidence item.

    Returns:
        ``"id"``, ``"page"``, ``"section"``, ``"text"`` or ``"document"``, the first whose
            field is set.
    """
    if gold.passage_id is not None:
        return "id"
    if gold.page is not None:
        return "page"
    if gold.section:
        return "section"
    if gold.text:
        return "text"
    return "document"


def matches(unit: UnitView, gold: GoldEvidence, min_text_overlap: float = DEFAULT_MIN_TEXT_OVERLAP) -> bool:
    """Whether ``unit`` is relevant to ``gold`` under the rules of the module docstring.

    Args:
        unit: the unit's view.
        gold: one gold evidence item.
        min_text_overlap: for text gold, the share of the evidence's word 5-grams the unit
            must hold (0 to 1).

    Returns:
        ``True`` when the unit matches.
    """
    rule = gold_rule(gold)
    if rule == "id":
        return gold.passage_id in (unit.node_id, unit.document_id)
    same_doc = gold.document_id is None or gold.document_id == unit.document_id
    if not same_doc:
        return False
    if rule == "page":
        return unit.pages is not None and unit.pages[0] <= gold.page <= unit.pages[1]
    if rule == "section":
        label = normalise_text(gold.section)
        # A unit that holds the section's heading line (a fixed chunk straddling the start
        # of the section) is relevant too; one-word labels are too common to trust in text.
        return label in unit.headings or (len(label.split()) >= 2 and label in unit.text)
    if rule == "text":
        return text_overlap(gold.text, unit) >= min_text_overlap
    return True


def text_overlap(evidence: str, unit: UnitView) -> float:
    """How much of ``evidence`` the unit holds.

    Args:
        evidence: the gold evidence text.
        unit: the unit's view.

    Returns:
        1.0 when it is a substring, else the share of its word 5-grams found in the unit
            (0 for short evidences not found whole).
    """
    norm = normalise_text(evidence)
    if not norm:
        return 0.0
    if norm in unit.text:
        return 1.0
    grams = _ngrams(norm.split())
    if not grams:
        return 0.0
    return len(grams & unit.grams()) / len(grams)


def relevance_matrix(
    units: Sequence[UnitView], gold: Sequence[GoldEvidence], min_text_overlap: float = DEFAULT_MIN_TEXT_OVERLAP
) -> np.ndarray:
    """Which unit matches which gold item.

    Only units of the gold's document (or, for ids, that id) are compared: the costly text
    rule never runs on other documents, and a 20k-unit corpus stays fast.

    Args:
        units: the views of every ranked unit.
        gold: the query's gold evidence.
        min_text_overlap: for text gold, the share of word 5-grams a unit must hold.

    Returns:
        A boolean array of shape ``(len(gold), len(units))``.
    """
    by_doc: Dict[Optional[str], List[int]] = {}
    by_id: Dict[str, int] = {}
    for i, unit in enumerate(units):
        by_doc.setdefault(unit.document_id, []).append(i)
        by_id[unit.node_id] = i
    out = np.zeros((len(gold), len(units)), dtype=bool)
    for g, item in enumerate(gold):
        rule = gold_rule(item)
        candidates: Iterable[int]
        if rule == "id":
            own = [by_id[item.passage_id]] if item.passage_id in by_id else []
            candidates = own + by_doc.get(item.passage_id, [])
        elif item.document_id is None:
            candidates = range(len(units))
        else:
            candidates = by_doc.get(item.document_id, [])
        for i in candidates:
            out[g, i] = matches(units[i], item, min_text_overlap)
    return out


# --- one query, from a full score vector ----------------------------------------------


def ranks_from_scores(scores: np.ndarray) -> np.ndarray:
    """1-based rank of every unit for a full score vector (higher is better; stable ties).

    Args:
        scores: one score a unit.

    Returns:
        An int array of ranks, shaped like ``scores``.
    """
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[order] = np.arange(1, len(order) + 1)
    return ranks


@dataclass
class QueryRanking:
    """The facts every metric needs for one query."""

    gold_ranks: List[Optional[int]]  # best rank per gold item, None when no unit matches
    relevant_ranks: List[int]  # ranks of every relevant unit
    n_candidates: int
    doc_ranks: List[Optional[int]] = field(default_factory=list)  # best rank per gold document


def query_ranking(
    unit_ranks: np.ndarray,
    relevance: np.ndarray,
    unit_docs: Optional[Sequence[Optional[str]]] = None,
    gold_docs: Sequence[Optional[str]] = (),
) -> QueryRanking:
    """Combine per-unit ranks with the relevance matrix of [`relevance_matrix`][llama_index_hiqa.evaluation.metrics.relevance_matrix].

    Args:
        unit_ranks: the rank (from 1) of every unit.
        relevance: the ``(gold, units)`` boolean matrix.
        unit_docs: each unit's document id; ``None`` leaves document ranks out.
        gold_docs: the gold documents whose best unit ranks are wanted.

    Returns:
        A [`QueryRanking`][llama_index_hiqa.evaluation.metrics.QueryRanking]: best rank per gold item, ranks of every relevant unit, the
            number of units and best rank per gold document.
    """
    gold_ranks: List[Optional[int]] = []
    for row in relevance:
        hits = unit_ranks[row]
        gold_ranks.append(int(hits.min()) if hits.size else None)
    any_rel = relevance.any(axis=0) if relevance.size else np.zeros(len(unit_ranks), bool)
    doc_ranks: List[Optional[int]] = []
    if unit_docs is not None:
        docs = np.asarray([d if d is not None else "" for d in unit_docs], dtype=object)
        for doc in dict.fromkeys(gold_docs):
            hits = unit_ranks[docs == doc]
            doc_ranks.append(int(hits.min()) if hits.size else None)
    return QueryRanking(gold_ranks, sorted(int(r) for r in unit_ranks[any_rel]), len(unit_ranks), doc_ranks)


def query_metrics(
    ranking: QueryRanking, ks: Sequence[int] = DEFAULT_KS, gamma: float = DEFAULT_GAMMA
) -> Dict[str, float]:
    """Every metric of one query.

    ``log_rank``, ``mrr``, ``recall@k``, ``precision@k``, ``ndcg@k``, ``hit@k``,
    ``all_gold@k`` and, when documents are known, ``doc_hit@k``. A gold item no unit matches
    counts as ranked last in the Log-Rank Index.

    Args:
        ranking: the query's ranking facts.
        ks: the cut-off ranks.
        gamma: γ of the Log-Rank Index.

    Returns:
        Metric name -> value.
    """
    n = ranking.n_candidates
    unranked = [r if r is not None else n for r in ranking.gold_ranks]
    out = {"log_rank": log_rank_index(unranked, n, gamma), "mrr": reciprocal_rank(ranking.relevant_ranks)}
    for k in ks:
        out[f"recall@{k}"] = recall_at_k(ranking.gold_ranks, k)
        out[f"precision@{k}"] = precision_at_k(ranking.relevant_ranks, k)
        out[f"ndcg@{k}"] = ndcg_at_k(ranking.gold_ranks, k)
        out[f"hit@{k}"] = hit_at_k(ranking.gold_ranks, k)
        out[f"all_gold@{k}"] = all_gold_at_k(ranking.gold_ranks, k)
        if ranking.doc_ranks:
            out[f"doc_hit@{k}"] = hit_at_k(ranking.doc_ranks, k)
    return out


def mean_metrics(per_query: Sequence[Dict[str, float]]) -> Dict[str, float]:
    """Average each metric over queries (the dataset-level figure).

    Args:
        per_query: one [`query_metrics`][llama_index_hiqa.evaluation.metrics.query_metrics] dict a query, all with the same keys.

    Returns:
        Metric name -> mean; empty for no queries.
    """
    if not per_query:
        return {}
    keys = list(per_query[0])
    return {k: float(np.mean([q[k] for q in per_query])) for k in keys}


def score_ranking(
    scores: np.ndarray,
    units: Sequence[UnitView],
    gold: Sequence[GoldEvidence],
    ks: Sequence[int] = DEFAULT_KS,
    gamma: float = DEFAULT_GAMMA,
    min_text_overlap: float = DEFAULT_MIN_TEXT_OVERLAP,
) -> Dict[str, float]:
    """Every metric of one query from a full score vector over ``units`` (convenience).

    Args:
        scores: one score a unit (higher is better).
        units: the views of the units, in the order of ``scores``.
        gold: the query's gold evidence.
        ks: the cut-off ranks.
        gamma: γ of the Log-Rank Index.
        min_text_overlap: for text gold, the share of word 5-grams a unit must hold.

    Returns:
        Metric name -> value, as [`query_metrics`][llama_index_hiqa.evaluation.metrics.query_metrics].

    Raises:
        ValueError: ``scores`` and ``units`` differ in length.
    """
    if len(scores) != len(units):
        raise ValueError(f"{len(scores)} scores for {len(units)} units")
    ranks = ranks_from_scores(scores)
    rel = relevance_matrix(units, gold, min_text_overlap)
    docs = [g.document_id for g in gold if gold_rule(g) != "id"]
    ranking = query_ranking(ranks, rel, [u.document_id for u in units], docs)
    return query_metrics(ranking, ks, gamma)


def character_error_rate(reference: str, hypothesis: str) -> float:
    """The usual OCR character error rate.

    Levenshtein distance between the two texts (whitespace runs as one space, case kept) over
    the reference's length.

    Args:
        reference: the true text.
        hypothesis: the recognised text.

    Returns:
        0.0 for two empty texts; 1.0 for an empty reference and a non-empty hypothesis; it
            exceeds 1.0 when the hypothesis is much longer than the reference.
    """
    ref, hyp = " ".join(reference.split()), " ".join(hypothesis.split())
    if not ref:
        return float(bool(hyp))
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i]
        for j, h in enumerate(hyp, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1] / len(ref)
