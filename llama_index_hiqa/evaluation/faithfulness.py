"""A reference-free faithfulness score that needs no LLM, and its embedding-based companions.

Hybrid-RAG faithfulness paper, §III.E (formula 7) and §IV (formulas 8-10): the groundedness of
an answer A in its retrieved context C is the cosine of their embeddings,

    F = cos(embed(A), embed(C))        > 0.7 grounded, 0.4-0.7 borderline, < 0.4 hallucination risk

and, with the same small embedding model (all-MiniLM-L6-v2, as in the paper), the RAGAS-style
scores of §IV: context precision CP = (1/n) Σ 1[cos(q, c_i) ≥ τ] (τ = 0.35), answer
faithfulness AF = max_i cos(a, c_i), answer relevancy AR = cos(q, a), and context recall.

Choices where the paper is silent or lossy:

* embed(C): MiniLM reads only the first 256 word pieces, so embedding the joined context would
  score the answer against the first chunk alone. C's vector is the length-weighted mean of
  the per-chunk vectors (each chunk embedded on its own), which covers every chunk.
* Context recall: the formula did not survive in the paper's text; we use the same form as F
  with the reference answer: CR = cos(embed(reference), embed(C)). It needs ``reference``.
* ``passing`` is ``True`` only in the grounded band (F > 0.7); the band is in ``band``.

>>> from llama_index_hiqa import FaithfulnessScoreEvaluator
>>> evaluator = FaithfulnessScoreEvaluator()          # offline MiniLM, no LLM
>>> result = evaluator.evaluate_response(query=q, response=query_engine.query(q))
>>> result.score, result.band
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import BaseModel, Field
from llama_index.core.evaluation import BaseEvaluator, EvaluationResult
from llama_index.core.prompts.mixin import PromptDictType

from llama_index_hiqa.errors import EvaluationInputError
from llama_index_hiqa.models.embedding_cache import CachedEmbedding

BAND_GROUNDED = "grounded"
BAND_BORDERLINE = "borderline"
BAND_RISK = "hallucination_risk"


class FaithfulnessSettings(BaseModel):
    """The thresholds of the paper (§III.E bands, §IV τ)."""

    grounded_threshold: float = Field(
        default=0.7, description="F above this is 'grounded' (paper: > 0.7 high grounding)."
    )
    risk_threshold: float = Field(
        default=0.4, description="F below this is 'hallucination_risk' (paper: < 0.4)."
    )
    context_precision_tau: float = Field(
        default=0.35, description="τ of context precision: a chunk counts when cos(q, c) ≥ τ."
    )


class FaithfulnessResult(EvaluationResult):
    """An ``EvaluationResult`` (``score`` = F) with the band and the §IV companion scores."""

    band: Optional[str] = Field(default=None, description="grounded / borderline / hallucination_risk")
    answer_faithfulness: Optional[float] = Field(default=None, description="AF = max_i cos(a, c_i)")
    context_precision: Optional[float] = Field(default=None, description="CP (needs the query)")
    answer_relevancy: Optional[float] = Field(default=None, description="AR = cos(q, a) (needs the query)")
    context_recall: Optional[float] = Field(default=None, description="CR (needs a reference answer)")


def faithfulness_band(score: float, settings: Optional[FaithfulnessSettings] = None) -> str:
    """The paper's band for a faithfulness score F (Hybrid-RAG faithfulness paper, §III.E).

    Args:
        score: F, the cosine of the answer's and the context's embeddings (-1 to 1).
        settings: the thresholds; ``None``: the paper's (0.7 and 0.4).

    Returns:
        ``"grounded"`` above the grounded threshold, ``"hallucination_risk"`` below the risk
            threshold, else ``"borderline"``.
    """
    settings = settings or FaithfulnessSettings()
    if score > settings.grounded_threshold:
        return BAND_GROUNDED
    if score < settings.risk_threshold:
        return BAND_RISK
    return BAND_BORDERLINE


def _unit(vectors: Sequence[Sequence[float]]) -> np.ndarray:
    matrix = np.atleast_2d(np.asarray(vectors, dtype=np.float64))
    return matrix / (np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12)


def _context_vector(chunk_vectors: np.ndarray, chunks: Sequence[str]) -> np.ndarray:
    # Length-weighted mean of unit chunk vectors: a long chunk says more of the context.
    weights = np.asarray([max(len(c), 1) for c in chunks], dtype=np.float64)
    mean = (chunk_vectors * weights[:, None]).sum(axis=0) / weights.sum()
    return mean / (np.linalg.norm(mean) + 1e-12)


class FaithfulnessScoreEvaluator(BaseEvaluator):
    """F = cos(embed(answer), embed(context)) with the paper's bands; no LLM involved.

    Args:
        embed_model: any LlamaIndex embedding (default: ``Settings.embed_model`` if set, else
            the packaged all-MiniLM-L6-v2 behind the on-disk cache).

    Settings come as a `FaithfulnessSettings` or as keyword overrides of its fields.
    """

    def __init__(
        self,
        embed_model: Optional[BaseEmbedding] = None,
        settings: Optional[FaithfulnessSettings] = None,
        **overrides: Any,
    ) -> None:
        self._embed_model = embed_model
        self.settings = (settings or FaithfulnessSettings()).model_copy(update=overrides)
        if not self.settings.risk_threshold <= self.settings.grounded_threshold:
            raise ValueError("risk_threshold must not exceed grounded_threshold")

    @property
    def embed_model(self) -> BaseEmbedding:
        if self._embed_model is None:  # resolved lazily: importing stays light

            self._embed_model = CachedEmbedding.from_defaults()
        return self._embed_model

    def _get_prompts(self) -> PromptDictType:
        return {}

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        pass

    async def aevaluate(
        self,
        query: Optional[str] = None,
        response: Optional[str] = None,
        contexts: Optional[Sequence[str]] = None,
        reference: Optional[str] = None,
        **kwargs: Any,
    ) -> FaithfulnessResult:
        """Score ``response`` against ``contexts``; ``query`` adds CP and AR, ``reference`` CR.

        Args:
            query: the question; ``None`` leaves context precision and answer relevancy out.
            response: the answer to score.
            contexts: the retrieved texts the answer should rest on.
            reference: a reference answer; ``None`` leaves context recall out.
            **kwargs: ignored (``BaseEvaluator``'s signature).

        Returns:
            A `FaithfulnessResult`: ``score`` = F, its ``band``, ``passing`` only when
                grounded, and the §IV companion scores.

        Raises:
            EvaluationInputError: an empty response or no non-empty context (a score of an empty
                string would be meaningless).
        """
        if not response or not response.strip():
            raise EvaluationInputError("faithfulness needs a non-empty response")
        chunks = [c for c in (contexts or []) if c and c.strip()]
        if not chunks:
            raise EvaluationInputError("faithfulness needs at least one non-empty context")
        model = self.embed_model
        texts: List[str] = [response, *chunks] + ([reference] if reference else [])
        vectors = _unit(await model.aget_text_embedding_batch(texts))
        answer, chunk_vectors = vectors[0], vectors[1 : 1 + len(chunks)]
        context = _context_vector(chunk_vectors, chunks)
        score = float(answer @ context)
        band = faithfulness_band(score, self.settings)
        result = FaithfulnessResult(
            query=query,
            contexts=list(chunks),
            response=response,
            score=score,
            passing=band == BAND_GROUNDED,
            band=band,
            answer_faithfulness=float((chunk_vectors @ answer).max()),
        )
        if query:
            q = _unit([await model.aget_query_embedding(query)])[0]
            result.context_precision = float(np.mean(chunk_vectors @ q >= self.settings.context_precision_tau))
            result.answer_relevancy = float(answer @ q)
        if reference:
            result.context_recall = float(vectors[-1] @ context)
        result.feedback = _feedback(result)
        return result


def _feedback(result: FaithfulnessResult) -> str:
    parts = [f"F={result.score:.3f} ({result.band})", f"AF={result.answer_faithfulness:.3f}"]
    for name, value in (
        ("CP", result.context_precision),
        ("AR", result.answer_relevancy),
        ("CR", result.context_recall),
    ):
        if value is not None:
            parts.append(f"{name}={value:.3f}")
    return ", ".join(parts)
