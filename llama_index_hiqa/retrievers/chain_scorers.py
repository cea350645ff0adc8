"""Scorers for the IIER evidence-chain walk (IIER paper §3.2, eq. 1-4).

At every hop the [`ChunkGraphRetriever`][llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever] scores
each neighbour of the current chain node and extends the chain with the best one. The paper
scores with a fine-tuned RoBERTa encoder of (query, path, neighbour) plus a 2-layer MLP over
the edge weights ``(W_struc, W_sim, W_keyword)``. On a CPU in minutes we cannot fine-tune an
encoder, so both scorers here read the same small vector of features computed from the frozen
embedding model (question, path and neighbour embeddings) and the edge weights:

=====  ===============================================================================
index  feature
=====  ===============================================================================
0      cosine(question, neighbour)
1      cosine(mean of the path so far, neighbour)  (the paper encodes the concatenated path)
2      cosine(current node, neighbour)
3      structural edge weight (1 when the two chunks are consecutive in one document)
4      semantic edge weight (cosine of the top-k edge, 0 when there is none)
5      keyword edge weight, ``log(1 + shared keywords)``
6      share of the question's keywords the neighbour covers that the path does not yet
7      share of the question's keywords the neighbour covers
8      hop index / max hops
=====  ===============================================================================

* [`DefaultChainScorer`][llama_index_hiqa.retrievers.chain_scorers.DefaultChainScorer] — training-free: a documented weighted sum of the features.
* [`TrainedChainScorer`][llama_index_hiqa.retrievers.chain_scorers.TrainedChainScorer] — a 2-layer MLP (numpy, no extra dependency) over the same
  features, fitted with IIER's shortest-path labels (see ``ChunkGraphRetriever.fit``),
  saved to and loaded from JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field

FEATURE_NAMES: List[str] = [
    "sim_question",
    "sim_path",
    "sim_current",
    "structural",
    "semantic",
    "keyword",
    "new_question_keywords",
    "question_keywords",
    "hop",
]
N_FEATURES = len(FEATURE_NAMES)


class ChainScorer(BaseModel):
    """Scores candidate neighbours from their feature rows (see the module docstring)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    threshold: float = Field(
        default=0.0,
        description="A chain stops early when no neighbour scores above this value.",
    )

    def score(self, features: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        """One score per row of ``features`` (shape ``(n, N_FEATURES)``).

        Args:
            features: the feature rows.

        Returns:
            A float32 array of ``n`` scores.
        """
        raise NotImplementedError


class DefaultChainScorer(ChainScorer):
    """Training-free scorer: ``score = Σ weight_i · feature_i``.

    The weights favour neighbours close to the question (the answer chunk usually shares its
    topic), then chunks that cover question keywords the path has not covered yet and chunks
    linked by shared keywords (the bridge to the next piece of evidence, IIER's keyword
    interaction), then the path and the other edge weights as tie-breakers. With
    all-MiniLM-L6-v2 a related chunk has a question cosine of about 0.4-0.7 and an unrelated
    one about 0-0.2, hence the default stopping threshold.
    """

    sim_question: float = Field(default=0.6, description="Weight of cosine(question, neighbour).")
    sim_path: float = Field(default=0.2, description="Weight of cosine(path mean, neighbour).")
    sim_current: float = Field(default=0.0, description="Weight of cosine(current node, neighbour).")
    structural: float = Field(default=0.05, description="Weight of the structural edge (0/1).")
    semantic: float = Field(default=0.05, description="Weight of the semantic edge's cosine.")
    keyword: float = Field(
        default=0.25,
        description="Weight of log(1 + shared keywords) (chosen on held-out questions: 0.2-0.4 "
        "all within noise, 0.05 clearly worse).",
    )
    new_question_keywords: float = Field(
        default=0.3, description="Weight of the share of still uncovered question keywords covered."
    )
    question_keywords: float = Field(
        default=0.0, description="Weight of the share of question keywords covered."
    )
    hop: float = Field(default=0.0, description="Weight of hop / max hops (negative: prefer short chains).")
    threshold: float = Field(
        default=0.3, description="A chain stops early when no neighbour scores above this value."
    )

    def weights(self) -> np.ndarray:
        return np.array([getattr(self, name) for name in FEATURE_NAMES], dtype=np.float32)

    def score(self, features: np.ndarray) -> np.ndarray:
        """One score per row of ``features``: its weighted sum.

        Args:
            features: the feature rows, shape ``(n, N_FEATURES)``.

        Returns:
            A float32 array of ``n`` scores.
        """
        scores: np.ndarray = np.asarray(features, dtype=np.float32) @ self.weights()
        return scores


def _sigmoid(x: np.ndarray) -> np.ndarray:
    y: np.ndarray = 1.0 / (1.0 + np.exp(-np.clip(x, -30, 30)))
    return y


class TrainedChainScorer(ChainScorer):
    """A 2-layer MLP over the chain features, giving the probability that a neighbour lies on
    the shortest path to the next piece of gold evidence (IIER's training labels).

    Trained with full-batch Adam on binary cross-entropy, positives re-weighted to balance the
    classes; features are standardised with the training mean/std stored with the weights.
    """

    hidden: int = Field(default=16, description="Hidden units of the MLP.")
    epochs: int = Field(default=400, description="Full-batch Adam steps.")
    learning_rate: float = Field(default=0.01, description="Adam learning rate.")
    l2: float = Field(default=1e-4, description="L2 penalty on the weights.")
    seed: int = Field(default=0, description="Random seed of the weight initialisation.")
    threshold: float = Field(
        default=0.5,
        description="A chain stops early when no neighbour's probability exceeds this value.",
    )
    params: Optional[Dict[str, Any]] = Field(default=None, description="Fitted weights (None before fit).")

    @property
    def is_fitted(self) -> bool:
        return self.params is not None

    def _forward(self, x: np.ndarray, p: Dict[str, np.ndarray]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        h_pre = x @ p["w1"] + p["b1"]
        h = np.maximum(h_pre, 0.0)
        logit = h @ p["w2"] + p["b2"]
        return h_pre, h, logit.ravel()

    def fit(self, features: np.ndarray, labels: Union[Sequence[float], np.ndarray]) -> "TrainedChainScorer":
        """Fit on feature rows and 0/1 labels; returns ``self``.

        Args:
            features: the feature rows, shape ``(n, N_FEATURES)``.
            labels: one 0/1 label per row.

        Returns:
            This scorer.

        Raises:
            ValueError: when the matrix is empty or the labels do not match its rows, or the labels
                are all positive or all negative.
        """
        x = np.asarray(features, dtype=np.float64)
        y = np.asarray(labels, dtype=np.float64).ravel()
        if x.ndim != 2 or x.shape[0] != y.shape[0] or x.shape[0] == 0:
            raise ValueError("fit needs a non-empty (n, features) matrix and n labels")
        if y.min() == y.max():
            raise ValueError("fit needs both positive and negative examples")
        mean, std = x.mean(axis=0), x.std(axis=0) + 1e-6
        x = (x - mean) / std
        rng = np.random.default_rng(self.seed)
        d = x.shape[1]
        p = {
            "w1": rng.normal(0, np.sqrt(2.0 / d), (d, self.hidden)),
            "b1": np.zeros(self.hidden),
            "w2": rng.normal(0, np.sqrt(1.0 / self.hidden), (self.hidden, 1)),
            "b2": np.zeros(1),
        }
        # Positives are rare (one or two per hop among all neighbours): weight them up so the
        # MLP does not learn "always no".
        pos_weight = (len(y) - y.sum()) / max(y.sum(), 1.0)
        sample_w = np.where(y > 0.5, pos_weight, 1.0)
        sample_w /= sample_w.sum()
        m = {k: np.zeros_like(v) for k, v in p.items()}
        v = {k: np.zeros_like(val) for k, val in p.items()}
        b1, b2, eps = 0.9, 0.999, 1e-8
        for step in range(1, self.epochs + 1):
            h_pre, h, logit = self._forward(x, p)
            grad_logit = (_sigmoid(logit) - y) * sample_w
            grads = {
                "w2": h.T @ grad_logit[:, None] + self.l2 * p["w2"],
                "b2": np.array([grad_logit.sum()]),
            }
            grad_h = grad_logit[:, None] @ p["w2"].T * (h_pre > 0)
            grads["w1"] = x.T @ grad_h + self.l2 * p["w1"]
            grads["b1"] = grad_h.sum(axis=0)
            for key in p:
                m[key] = b1 * m[key] + (1 - b1) * grads[key]
                v[key] = b2 * v[key] + (1 - b2) * grads[key] ** 2
                m_hat = m[key] / (1 - b1**step)
                v_hat = v[key] / (1 - b2**step)
                p[key] = p[key] - self.learning_rate * m_hat / (np.sqrt(v_hat) + eps)
        self.params = {
            "mean": mean.tolist(),
            "std": std.tolist(),
            **{k: val.tolist() for k, val in p.items()},
        }
        return self

    def score(self, features: np.ndarray) -> np.ndarray:
        """One score per row of ``features``: the trained model's probability.

        Args:
            features: the feature rows, shape ``(n, N_FEATURES)``.

        Returns:
            A float32 array of ``n`` scores in (0, 1).

        Raises:
            RuntimeError: when the scorer is not fitted.
        """
        if self.params is None:
            raise RuntimeError("TrainedChainScorer is not fitted: call fit() or load() first")
        p = {k: np.asarray(val, dtype=np.float64) for k, val in self.params.items()}
        x = (np.asarray(features, dtype=np.float64) - p["mean"]) / p["std"]
        return _sigmoid(self._forward(x, p)[2]).astype(np.float32)

    def save(self, path: Union[str, Path]) -> None:
        """Write settings and weights as JSON.

        Args:
            path: the JSON file.
        """
        Path(path).write_text(json.dumps(self.model_dump()), encoding="utf-8")

    @classmethod
    def load(cls, path: Union[str, Path]) -> "TrainedChainScorer":
        """A scorer [`save`][llama_index_hiqa.retrievers.chain_scorers.TrainedChainScorer.save] wrote.

        Args:
            path: the JSON file.

        Returns:
            The fitted scorer.
        """
        return cls(**json.loads(Path(path).read_text(encoding="utf-8")))
