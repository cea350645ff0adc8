"""Training the evidence-chain scorer of [`ChunkGraphRetriever`][llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever].

"Leveraging Inter-Chunk Interactions for Enhanced Retrieval in Large Language Model-Based
Question Answering" (IIER, Guo et al.) §3.2 trains the scorer that picks each hop with
shortest-path supervision: for a question and its gold chunks, the graph path between gold
chunks is walked step by step, and at each step the next node on the path is a positive, the
other neighbours negatives. [`chain_training_examples`][llama_index_hiqa.retrievers.chain_training.chain_training_examples] builds those feature rows with
the retriever's own seeds and feature function, [`fit_chain_scorer`][llama_index_hiqa.retrievers.chain_training.fit_chain_scorer] fits a
[`TrainedChainScorer`][llama_index_hiqa.retrievers.chain_scorers.TrainedChainScorer] on them and hands it to
the retriever.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.schema import QueryBundle

from llama_index_hiqa.retrievers.chain_scorers import TrainedChainScorer
from llama_index_hiqa.retrievers.chunk_graph import ChunkGraphRetriever


def chain_training_examples(
    retriever: ChunkGraphRetriever,
    questions: Sequence[str],
    gold_evidence: Sequence[Sequence[str]],
    max_negatives: int = 30,
    seed: int = 0,
) -> Tuple[np.ndarray, np.ndarray]:
    """Feature rows and labels from IIER's shortest-path supervision (§3.2).

    For each question, from each gold chunk (the paper) and from each seed the retriever
    would pick (our addition: the walk starts from seeds, not from gold), the shortest graph
    path to every other gold chunk is walked step by step; at each step the next node on the
    path and any gold chunk are positives, the other neighbours negatives (at most
    ``max_negatives`` sampled). At a reached gold chunk that ends the path every non-gold
    neighbour is a negative, which teaches the scorer when to stop.

    Args:
        retriever: the chain retriever (its graph and seeds).
        questions: the questions.
        gold_evidence: each question's gold chunk ids.
        max_negatives: the most negatives sampled at a step.
        seed: the sampling seed.

    Returns:
        ``(features, labels)``: an ``(n, N_FEATURES)`` array and ``n`` 0/1 labels.

    Raises:
        ValueError: when ``questions`` and ``gold_evidence`` differ in length, or no example
            was found.
    """
    if len(questions) != len(gold_evidence):
        raise ValueError("questions and gold_evidence must have the same length")
    graph, rng = retriever.graph, np.random.default_rng(seed)
    max_hops = retriever.settings.max_hops
    feats: List[np.ndarray] = []
    labels: List[np.ndarray] = []
    for question, gold in zip(questions, gold_evidence):
        golds = [graph.index_of(x) for x in gold if x in graph]
        if not golds:
            continue
        q_vec = retriever.query_vector(QueryBundle(question))
        q_kw = retriever.question_keywords(question)
        starts = list(dict.fromkeys(golds + retriever.select_seeds(q_vec, q_kw)))
        gold_set = set(golds)
        for s in starts:
            for t in golds:
                if t == s:
                    continue
                path = graph.shortest_path_rows(s, t)
                if path is None or len(path) - 1 > max_hops:
                    continue
                for step in range(len(path)):
                    prefix = path[: step + 1]
                    cands = [c for c in graph.neighbours(prefix[-1]) if c not in prefix]
                    if not cands:
                        continue
                    nxt = path[step + 1] if step + 1 < len(path) else None
                    y = np.array([1.0 if (c == nxt or c in gold_set) else 0.0 for c in cands])
                    neg = np.flatnonzero(y == 0)
                    if len(neg) > max_negatives:
                        keep = np.concatenate([np.flatnonzero(y > 0), rng.choice(neg, max_negatives, replace=False)])
                        cands = [cands[i] for i in keep]
                        y = y[keep]
                    feats.append(retriever.features(q_vec, q_kw, prefix, cands, step + 1))
                    labels.append(y)
    if not feats:
        raise ValueError("no training examples: gold chunks are missing from the graph or unconnected")
    return np.vstack(feats), np.concatenate(labels)


def fit_chain_scorer(
    retriever: ChunkGraphRetriever,
    questions: Sequence[str],
    gold_evidence: Sequence[Sequence[str]],
    scorer: Optional[TrainedChainScorer] = None,
) -> TrainedChainScorer:
    """Fit a [`TrainedChainScorer`][llama_index_hiqa.retrievers.chain_scorers.TrainedChainScorer] on questions and their gold chunk ids and set it as
    the retriever's scorer.

    Args:
        retriever: the chain retriever.
        questions: the questions.
        gold_evidence: each question's gold chunk ids.
        scorer: the scorer to fit (``None``: a new one with default settings).

    Returns:
        The fitted scorer.

    Raises:
        ValueError: when no training example was found ([`chain_training_examples`][llama_index_hiqa.retrievers.chain_training.chain_training_examples]).
    """
    x, y = chain_training_examples(retriever, questions, gold_evidence)
    fitted = (scorer or TrainedChainScorer()).fit(x, y)
    retriever.scorer = fitted
    return fitted
