"""The multi-route retriever's BM25 route: node ids and BM25 scores, nothing else.

HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA", §Multi-Route
Retriever) ranks by BM25 over the embedding view, where the heading cascade is searchable.
"""

from __future__ import annotations

import asyncio
import json
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union, overload

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode, QueryBundle

if TYPE_CHECKING:  # imported where used: bm25s and the BM25 retriever cost 0.7 s and 0.6 s (measured)
    from llama_index.retrievers.bm25 import BM25Retriever

# bm25s and LlamaIndex's BM25Retriever are imported inside the functions that build, load or
# tokenize: together about 1.3 s (measured), which opening a pack without a question must not pay.


class _IdCorpus(Sequence[Dict[str, str]]):
    """``[{"node_id": id}, ...]`` as bm25s and ``BM25Retriever`` expect a corpus, made on
    demand from the id list (a million dicts held for nothing would cost about 200 MB)."""

    def __init__(self, node_ids: List[str]) -> None:
        self._ids = node_ids

    @overload
    def __getitem__(self, index: int) -> Dict[str, str]: ...

    @overload
    def __getitem__(self, index: slice) -> List[Dict[str, str]]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[Dict[str, str], List[Dict[str, str]]]:
        if isinstance(index, slice):
            return [{"node_id": i} for i in self._ids[index]]
        return {"node_id": self._ids[index]}

    def __len__(self) -> int:
        return len(self._ids)


class BM25Route:
    """The BM25 route: LlamaIndex's ``BM25Retriever`` (default) or bm25s with a custom tokenizer.

    We score through the underlying ``bm25s.BM25`` rather than ``BM25Retriever.retrieve``:
    the latter rebuilds every node from its stored JSON on each call and pads its top-k with
    zero-score nodes; we need only ids and real scores (and, for the full ranking, all of them).
    """

    def __init__(
        self, retriever: "BM25Retriever", node_ids: List[str], tokenizer: Optional[Callable[[str], List[str]]]
    ) -> None:
        self.retriever = retriever
        self.node_ids = node_ids
        self.tokenizer = tokenizer
        self._rows: Optional[Dict[str, int]] = None  # node id -> score row, at first use
        # The last question's scores: the head ranking and the document focus ask the same
        # question again (once per focused document), and scoring is a pass over the index.
        self._last_scores: Optional[Tuple[str, np.ndarray]] = None

    @classmethod
    def build(
        cls,
        nodes: Sequence[BaseNode],
        tokenizer: Optional[Callable[[str], List[str]]] = None,
        language: str = "en",
    ) -> "BM25Route":
        """Index ``nodes``' embedding views with BM25 (LlamaIndex's ``BM25Retriever`` with its
        stemmer and stop words, or bm25s over ``tokenizer``'s tokens).

        Args:
            nodes: the nodes.
            tokenizer: text -> tokens (``None``: ``BM25Retriever``'s own, in ``language``).
            language: the stemmer's and stop words' language.

        Returns:
            The route.
        """
        from llama_index.retrievers.bm25 import BM25Retriever

        node_ids = [n.node_id for n in nodes]
        if tokenizer is None:
            retriever = BM25Retriever(nodes=list(nodes), language=language, similarity_top_k=1)
            # BM25Retriever keeps (and persists as corpus.jsonl) a dict of every node; we
            # score by position and map to ids ourselves, so the ids are all it needs.
            retriever.corpus = [{"node_id": i} for i in node_ids]
            retriever.bm25.corpus = retriever.corpus
        else:
            import bm25s

            bm25 = bm25s.BM25()
            tokens = [tokenizer(n.get_content(metadata_mode=MetadataMode.EMBED)) or [""] for n in nodes]
            bm25.index(tokens, show_progress=False)
            bm25.corpus = [{"node_id": i} for i in node_ids]
            retriever = BM25Retriever(existing_bm25=bm25, similarity_top_k=1)
        return cls(retriever, node_ids, tokenizer)

    @classmethod
    def build_from_chunks(cls, chunks: Iterable[Sequence[BaseNode]], language: str = "en") -> "BM25Route":
        """What [`build`][llama_index_hiqa.retrievers.bm25_route.BM25Route.build] builds (the default tokenizer), from nodes given a chunk at a
        time: only the token ids of every node are held at once, never every node or text.
        The scores are those of ``build`` over the same nodes in the same order (the same
        tokens, stemmer and statistics; only the numbering of the vocabulary may differ, which
        no score depends on).

        Args:
            chunks: the nodes, a chunk at a time.
            language: the stemmer's and stop words' language.

        Returns:
            The route.
        """
        import bm25s
        from bm25s.tokenization import Tokenized
        from llama_index.retrievers.bm25 import BM25Retriever

        tokenize = corpus_tokenizer(language)
        vocab: Dict[str, int] = {}
        corpus: List["array[int]"] = []
        node_ids: List[str] = []
        for nodes in chunks:
            node_ids += [n.node_id for n in nodes]
            corpus += [array("i", [vocab.setdefault(t, len(vocab)) for t in doc]) for doc in tokenize(nodes)]
        bm25 = bm25s.BM25()
        bm25.index(Tokenized(ids=corpus, vocab=vocab), show_progress=False)
        bm25.corpus = [{"node_id": i} for i in node_ids]
        return cls(BM25Retriever(existing_bm25=bm25, similarity_top_k=1), node_ids, None)

    def _query_tokens(self, query: str) -> List[str]:
        if self.tokenizer is not None:
            return list(self.tokenizer(query))
        import bm25s

        retriever = self.retriever
        tokens = bm25s.tokenize(
            [query],
            stemmer=None if retriever.skip_stemming else retriever.stemmer,
            token_pattern=retriever.token_pattern,
            return_ids=False,
            show_progress=False,
        )
        return list(tokens[0]) if tokens else []

    def all_scores(self, query: str) -> np.ndarray:
        """BM25 score of every indexed node (in ``node_ids`` order).

        Args:
            query: the question text.

        Returns:
            A read-only float32 array of ``len(node_ids)`` scores (zeros when the question
                has no terms).
        """
        last = self._last_scores
        if last is not None and last[0] == query:
            return last[1]
        bm25 = self.retriever.bm25
        ids = bm25.get_tokens_ids(self._query_tokens(query))
        if ids:
            scores = np.array(bm25.get_scores_from_ids(ids), dtype=np.float32)
        else:
            scores = np.zeros(len(self.node_ids), dtype=np.float32)
        scores.setflags(write=False)
        self._last_scores = (query, scores)
        return scores

    def scores_of(self, query: str, node_ids: Sequence[str]) -> Dict[str, float]:
        """The positive BM25 scores of ``node_ids`` (collection-wide statistics).

        Args:
            query: the question text.
            node_ids: the nodes to score.

        Returns:
            Node id -> score, for the nodes with a positive score.
        """
        if self._rows is None:
            self._rows = {node_id: row for row, node_id in enumerate(self.node_ids)}
        scores = self.all_scores(query)
        out = {}
        for node_id in node_ids:
            row = self._rows.get(node_id)
            if row is not None and scores[row] > 0:
                out[node_id] = float(scores[row])
        return out

    def top(self, query: str, n: int) -> Dict[str, float]:
        """The best ``n`` nodes with a positive score (the zero-score padding dropped).

        Args:
            query: the question text.
            n: how many nodes.

        Returns:
            Node id -> score.
        """
        scores = self.all_scores(query)
        n = min(n, len(scores))
        if n <= 0:
            return {}
        best = np.argpartition(-scores, n - 1)[:n] if n < len(scores) else np.arange(len(scores))
        best = best[np.argsort(-scores[best], kind="stable")]
        return {self.node_ids[i]: float(scores[i]) for i in best if scores[i] > 0}

    # -- the Route interface (retrievers/routes.py) -------------------------------------------
    name = "bm25"

    def scores(self, query: QueryBundle, n: int) -> Dict[str, float]:
        """The route's best ``n`` for ``query`` ([`top`][llama_index_hiqa.retrievers.bm25_route.BM25Route.top]).

        Args:
            query: the question.
            n: how many nodes at most.

        Returns:
            ``{node id: BM25 score}``, positive scores only.
        """
        return self.top(query.query_str, n)

    async def ascores(self, query: QueryBundle, n: int) -> Dict[str, float]:
        """[`scores`][llama_index_hiqa.retrievers.bm25_route.BM25Route.scores] in a worker thread.

        Args:
            query: the question.
            n: how many nodes.

        Returns:
            Node id -> score.
        """
        return await asyncio.to_thread(self.scores, query, n)

    def scores_within(self, query: QueryBundle, node_ids: Sequence[str]) -> Dict[str, float]:
        """The positive BM25 scores of ``node_ids`` ([`scores_of`][llama_index_hiqa.retrievers.bm25_route.BM25Route.scores_of]).

        Args:
            query: the question.
            node_ids: the nodes to score.

        Returns:
            Node id -> score.
        """
        return self.scores_of(query.query_str or "", node_ids)

    # -- persistence ----------------------------------------------------------------------------
    def persist(self, path: Path) -> None:
        """Write the BM25 index (scores and vocabulary) and the node ids to the folder ``path``.

        Args:
            path: the folder (created when missing).
        """
        path.mkdir(parents=True, exist_ok=True)
        # The scores and vocabulary only: the ids go to node_ids.json, the nodes live in the
        # docstore (BM25Retriever.persist would write a corpus file of them besides).
        bm25 = self.retriever.bm25
        corpus, bm25.corpus = bm25.corpus, None  # save() falls back to the attribute
        try:
            bm25.save(str(path))
        finally:
            bm25.corpus = corpus
        (path / "node_ids.json").write_text(json.dumps(self.node_ids), encoding="utf-8")

    @classmethod
    def load(cls, path: Path, tokenizer: Optional[Callable[[str], List[str]]] = None, mmap: bool = False) -> "BM25Route":
        """What [`persist`][llama_index_hiqa.retrievers.bm25_route.BM25Route.persist] wrote; ``mmap``: the score arrays mapped from disk, not read
        into memory (bm25s's own option).

        Args:
            path: the folder [`persist`][llama_index_hiqa.retrievers.bm25_route.BM25Route.persist] wrote.
            tokenizer: the tokenizer the route was built with (``None``: the default).
            mmap: map the score arrays from disk.

        Returns:
            The route.
        """
        import bm25s
        from llama_index.retrievers.bm25 import BM25Retriever

        # The corpus file holds only the ids again (node_ids.json); not loading it also
        # spares a progress bar per load.
        bm25 = bm25s.BM25.load(str(path), load_corpus=False, mmap=mmap)
        node_ids = json.loads((path / "node_ids.json").read_text(encoding="utf-8"))
        bm25.corpus = _IdCorpus(node_ids)
        retriever = BM25Retriever(existing_bm25=bm25, similarity_top_k=1)
        return cls(retriever, node_ids, tokenizer)


def corpus_tokenizer(language: str = "en") -> Callable[[Sequence[BaseNode]], List[List[str]]]:
    """``nodes -> token lists`` as ``BM25Retriever`` tokenizes its corpus (its stemmer, stop
    words and token pattern) over the embedding view.

    Args:
        language: the stop words' language.

    Returns:
        The tokenizer.
    """
    import bm25s
    import Stemmer

    # BM25Retriever's defaults (its constructor needs a built index to read them from).
    stemmer, pattern = Stemmer.Stemmer("english"), r"(?u)\b\w\w+\b"

    def tokenize(nodes: Sequence[BaseNode]) -> List[List[str]]:
        if not nodes:
            return []
        tokens: List[List[str]] = bm25s.tokenize(
            [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes],
            stopwords=language, stemmer=stemmer, token_pattern=pattern, return_ids=False, show_progress=False,
        )
        return tokens

    return tokenize


def bm25_score_matrix(
    nodes: Sequence[BaseNode], questions: Sequence[str], language: str = "en"
) -> np.ndarray:
    """BM25 score of every node for every question (one row a question), scored by the
    multi-route retriever's BM25 route: LlamaIndex's ``BM25Retriever`` index over the
    embedding view, whose ``retrieve`` returns only a top k where a full ranking is needed
    (the Log-Rank Index ranks every unit).

    Args:
        nodes: the nodes.
        questions: the questions.
        language: the stemmer's and stop words' language.

    Returns:
        A ``(len(questions), len(nodes))`` array of scores.
    """
    route = BM25Route.build(nodes, None, language)
    out = np.zeros((len(questions), len(route.node_ids)), dtype=np.float32)
    for i, question in enumerate(questions):
        out[i] = route.all_scores(question)
    return out
