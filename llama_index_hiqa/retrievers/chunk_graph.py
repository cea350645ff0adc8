"""IIER: a chunk-interaction graph and an evidence-chain retriever over it.

IIER paper ("Leveraging Inter-Chunk Interactions for Enhanced Retrieval
in Large Language Model-Based Question Answering" (IIER, Guo et al.)) §3.1 builds a Chunk-Interaction
Graph (CIG) whose nodes are the chunks of all documents and whose edges carry three weights:
structural (consecutive chunks of one document, weight 1), semantic (each chunk to its top-k
most similar chunks, weight = cosine; k = 5 in §4.3) and keyword (chunks sharing more than two
keywords, weight = size of the intersection; document titles are not keywords). §3.2 retrieves
by selecting seed chunks that greedily cover the question's keywords (prompt A.1) and walking
from each seed up to L = 5 hops, each hop moving to the neighbour a scorer rates best; the
chains are returned in traversal order so the LLM reads the reasoning path.

* [`ChunkInteractionGraph`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph] — the
  graph (its own module; importable from here too).
* [`ChunkGraphRetriever`][llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever] — a LlamaIndex ``BaseRetriever`` (drops into any query engine)
  with a training-free scorer by default; a trained one is fitted by
  [`fit_chain_scorer`][llama_index_hiqa.retrievers.chain_training.fit_chain_scorer], beside the scorers.

Keywords are read from ``schema.CRITICAL_KEYWORDS`` in node metadata (written by the
``CriticalKeywordExtractor`` transform); for nodes without them, and for the question when no
LLM is given, a keyword function extracts them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.indices.vector_store.base import VectorStoreIndex
from llama_index.core.llms import LLM
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.storage.docstore import BaseDocumentStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_hiqa import schema
from llama_index_hiqa.errors import GraphBuildError, LLMOutputError, UnknownNodeError
from llama_index_hiqa.models.defaults import resolve_embed_model, resolve_llm
from llama_index_hiqa.models.llm_calls import acall_llm, call_llm
from llama_index_hiqa.questions import CleanQuestions
from llama_index_hiqa.retrievers.chain_output import Chain, chain_results
from llama_index_hiqa.retrievers.chain_scorers import N_FEATURES, ChainScorer, DefaultChainScorer
from llama_index_hiqa.retrievers.chunk_interaction_graph import (
    ChunkInteractionGraph,
    KeywordFn,
    default_keyword_fn,
    normalised_keywords,
)
from llama_index_hiqa.retrievers.graph_edges import KEYWORD, SEMANTIC, STRUCTURAL
from llama_index_hiqa.retrievers.settings import ChainSearchSettings
from llama_index_hiqa.storage.vector_store_access import index_nodes, one_node_source
from llama_index_hiqa.transforms.critical_keywords import (
    QUERY_KEYWORD_PROMPT,
    CriticalKeywordExtractor,
    parse_keyword_list,
)

logger = logging.getLogger(__name__)


# --- the retriever -------------------------------------------------------------------


class ChunkGraphRetriever(CleanQuestions, BaseRetriever):
    """IIER evidence-chain retriever over a [`ChunkInteractionGraph`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph].

    >>> retriever = ChunkGraphRetriever.from_nodes(nodes, max_nodes=10)
    >>> query_engine = RetrieverQueryEngine.from_args(retriever)

    Output: the chains' nodes in traversal order (``schema.CHAIN_ID`` / ``schema.CHAIN_HOP`` in
    metadata), deduplicated across chains; the budget is filled hop by hop across chains
    (every seed first, then every chain's first hop, ...) so one long chain cannot crowd out
    the other seeds, then the nodes are listed chain by chain.
    """

    def __init__(
        self,
        graph: ChunkInteractionGraph,
        docstore: Optional[BaseDocumentStore] = None,
        nodes: Optional[Sequence[BaseNode]] = None,
        embed_model: Optional[BaseEmbedding] = None,
        llm: Optional[LLM] = None,
        keyword_fn: Optional[KeywordFn] = None,
        scorer: Optional[ChainScorer] = None,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        **settings: Any,
    ) -> None:
        if docstore is None and nodes is None:
            raise ValueError("ChunkGraphRetriever needs the docstore (or the nodes) holding the text")
        self.graph = graph
        self.docstore = docstore
        # Nodes given directly are looked up in a dict: building a SimpleDocumentStore
        # serialises every node (about a minute at 50k chunks) for nothing.
        self._nodes: Dict[str, BaseNode] = {n.node_id: n for n in nodes or ()} if docstore is None else {}
        self.settings = ChainSearchSettings(**settings)
        self.scorer: ChainScorer = scorer or DefaultChainScorer()
        self._embed_model = embed_model
        self._llm = resolve_llm(llm)
        self._keyword_fn = keyword_fn
        self._seed_keywords: Optional[List[Set[str]]] = None
        # The inverted index of the seed keywords, with the graph size it was built for.
        self._seed_index_cache: Optional[Tuple[int, Dict[str, Set[int]]]] = None
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_nodes(
        cls,
        nodes: Sequence[BaseNode],
        embed_model: Optional[BaseEmbedding] = None,
        keyword_fn: Optional[KeywordFn] = None,
        graph_settings: Optional[Dict[str, Any]] = None,
        show_progress: bool = False,
        **kwargs: Any,
    ) -> "ChunkGraphRetriever":
        """Build the graph over ``nodes`` and a retriever reading their text from them.

        Nodes without ``schema.CRITICAL_KEYWORDS`` get them first: from ``keyword_fn`` when
        given, else from a default ``CriticalKeywordExtractor`` run over them (as an ingestion
        pipeline would, writing the hidden metadata key).

        Args:
            nodes: the chunks.
            embed_model: the embedding model (chunks without ``node.embedding``, and questions).
            keyword_fn: text -> keywords (chunks and questions).
            graph_settings: [`ChunkInteractionGraph`][llama_index_hiqa.retrievers.chunk_interaction_graph.ChunkInteractionGraph] settings.
            show_progress: show progress bars.
            **kwargs: the retriever's other settings.

        Returns:
            The retriever.
        """
        if keyword_fn is None:
            missing = [n for n in nodes if schema.CRITICAL_KEYWORDS not in n.metadata]
            if missing:
                CriticalKeywordExtractor(show_progress=show_progress)(missing)
        graph = ChunkInteractionGraph.from_nodes(
            nodes, embed_model=embed_model, keyword_fn=keyword_fn, show_progress=show_progress,
            **(graph_settings or {}),
        )
        return cls(graph, nodes=nodes, embed_model=embed_model, keyword_fn=keyword_fn, **kwargs)

    @classmethod
    def from_index(cls, index: VectorStoreIndex, show_progress: bool = False, **kwargs: Any) -> "ChunkGraphRetriever":
        """Build over the nodes of a ``VectorStoreIndex``: text from its docstore or, over a
        store that keeps the text (Chroma, Qdrant, pgvector, ...), from the vector store
        (`llama_index_hiqa.storage.vector_store_access`); vectors from the vector store where it returns
        them, else the index's embed model recomputes them.

        Args:
            index: the ``VectorStoreIndex``.
            show_progress: show progress bars.
            **kwargs: passed on to [`from_nodes`][llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever.from_nodes].

        Returns:
            The retriever.

        Raises:
            GraphBuildError: when the index holds no nodes.
        """
        listed, docstore = index_nodes(index, "ChunkGraphRetriever")
        kwargs.setdefault("embed_model", getattr(index, "_embed_model", None))
        return cls._over_docstore(listed, docstore, index.vector_store, show_progress, **kwargs)

    @classmethod
    def from_defaults(
        cls,
        index: Optional[VectorStoreIndex] = None,
        nodes: Optional[Sequence[BaseNode]] = None,
        docstore: Optional[BaseDocumentStore] = None,
        similarity_top_k: Optional[int] = None,
        show_progress: bool = False,
        **kwargs: Any,
    ) -> "ChunkGraphRetriever":
        """LlamaIndex's ``from_defaults`` shape (as ``BM25Retriever.from_defaults``): exactly one
        of ``index`` ([`from_index`][llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever.from_index]), ``nodes`` ([`from_nodes`][llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever.from_nodes]) or ``docstore`` (the
        graph over its nodes, text read from it by id).

        Args:
            index: a ``VectorStoreIndex`` (any vector store).
            nodes: the chunks.
            docstore: a docstore holding the chunks.
            similarity_top_k: nodes returned per question (``max_nodes``, the chains' budget).
            show_progress: show progress bars.
            **kwargs: passed on to [`from_nodes`][llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever.from_nodes].

        Returns:
            The retriever.

        Raises:
            InvalidSettingError: not exactly one of ``index``, ``nodes``, ``docstore``.
            GraphBuildError: the index or docstore holds no nodes.
        """
        one_node_source("ChunkGraphRetriever.from_defaults", index, nodes, docstore)
        if similarity_top_k is not None:
            kwargs["max_nodes"] = similarity_top_k
        if index is not None:
            return cls.from_index(index, show_progress=show_progress, **kwargs)
        if docstore is not None:
            return cls._over_docstore(list(docstore.docs.values()), docstore, None, show_progress, **kwargs)
        return cls.from_nodes(nodes or [], show_progress=show_progress, **kwargs)

    @classmethod
    def _over_docstore(
        cls, listed: Sequence[BaseNode], docstore: BaseDocumentStore, vector_store: Optional[BasePydanticVectorStore],
        show_progress: bool, **kwargs: Any,
    ) -> "ChunkGraphRetriever":
        # Copies: the graph build writes vectors and keywords into the nodes it is given, and
        # the docstore's own nodes stay as they were stored.
        nodes = [n.model_copy() for n in listed]
        if not nodes:
            raise GraphBuildError("the index holds no nodes")
        # A vector by id is not part of LlamaIndex's vector store interface; the stores that
        # keep vectors (SimpleVectorStore, the pack's matrix store) answer ``get(node_id)``.
        vector_of = getattr(vector_store, "get", None)
        for node in nodes:
            if node.embedding is None and vector_of is not None:
                try:
                    node.embedding = vector_of(node.node_id)
                # Safe: a store without this id raises its own error type; the node's vector
                # is then computed by the embed model below, nothing is lost.
                except Exception as exc:  # noqa: BLE001
                    logger.debug("vector store gave no vector for %s (%s); embedding it", node.node_id, exc)
        retriever = cls.from_nodes(nodes, show_progress=show_progress, **kwargs)
        retriever.docstore, retriever._nodes = docstore, {}
        return retriever

    # --- question analysis ----------------------------------------------------------------
    @property
    def embed_model(self) -> BaseEmbedding:
        if self._embed_model is None:
            self._embed_model = resolve_embed_model()
        return self._embed_model

    @property
    def keyword_fn(self) -> KeywordFn:
        if self._keyword_fn is None:
            self._keyword_fn = default_keyword_fn()
        return self._keyword_fn

    def _keywords_from_llm_answer(self, question: str, answer: Optional[str]) -> Set[str]:
        if answer is not None:
            try:
                return normalised_keywords(parse_keyword_list(answer, strict=True))
            except LLMOutputError as exc:
                logger.warning("IIER keyword prompt: %s; using the keyword extractor", exc)
        return normalised_keywords(self.keyword_fn(question))

    def question_keywords(self, question: str) -> Set[str]:
        """The question's keywords: prompt A.1 when an LLM is set, else the keyword extractor.

        Args:
            question: The question.

        Returns:
            Its normalised keywords; on a bad answer or an LLM error (logged) the extractor's.
        """
        answer = None
        llm = self._llm
        if llm is not None:
            prompt = QUERY_KEYWORD_PROMPT.format(text=question)
            answer = call_llm(
                lambda: llm.complete(prompt).text,
                what="IIER keyword prompt", instead="using the keyword extractor", fallback=lambda _error: None,
            )
        return self._keywords_from_llm_answer(question, answer)

    async def aquestion_keywords(self, question: str) -> Set[str]:
        """As [`question_keywords`][llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever.question_keywords], with the LLM called asynchronously.

        Args:
            question: The question.

        Returns:
            Its normalised keywords.
        """
        answer = None
        llm = self._llm
        if llm is not None:
            prompt = QUERY_KEYWORD_PROMPT.format(text=question)

            async def ask() -> str:
                return (await llm.acomplete(prompt)).text

            answer = await acall_llm(ask, what="IIER keyword prompt", instead="using the keyword extractor", fallback=lambda _error: None)
        if answer is None:
            return normalised_keywords(await asyncio.to_thread(self.keyword_fn, question))
        return self._keywords_from_llm_answer(question, answer)

    def query_vector(self, query_bundle: QueryBundle) -> np.ndarray:
        """The question's unit vector (the given embedding, else the embed model's).

        Args:
            query_bundle: the question.

        Returns:
            Its unit vector.
        """
        vec = query_bundle.embedding
        if vec is None:
            vec = self.embed_model.get_query_embedding(query_bundle.query_str)
        return _unit(vec)

    async def aquery_vector(self, query_bundle: QueryBundle) -> np.ndarray:
        """The question's unit vector, embedding it asynchronously when it has no embedding.

        Args:
            query_bundle: the question.

        Returns:
            Its unit vector.
        """
        vec = query_bundle.embedding
        if vec is None:
            vec = await self.embed_model.aget_query_embedding(query_bundle.query_str)
        return _unit(vec)

    def use_graph(self, graph: ChunkInteractionGraph) -> None:
        """Walk ``graph`` from now on (e.g. a newer copy of a stored graph); what was derived
        from the old graph (the seed keywords and their index) is dropped.

        Args:
            graph: the graph.
        """
        self.graph = graph
        self._seed_keywords, self._seed_index_cache = None, None

    # --- seeds ----------------------------------------------------------------------------
    def _node_seed_keywords(self) -> List[Set[str]]:
        g = self.graph
        if self._seed_keywords is None or len(self._seed_keywords) != len(g):
            titles = g.row_title_keywords if self.settings.title_keywords_for_seeds else [set()] * len(g)
            self._seed_keywords = [kw | t for kw, t in zip(g.row_keywords, titles)]
        return self._seed_keywords

    def _seed_index(self) -> Dict[str, Set[int]]:
        """Inverted index of the seed keywords (edge keywords, plus titles when enabled)."""
        if self._seed_index_cache is None or self._seed_index_cache[0] != len(self.graph):
            index: Dict[str, Set[int]] = defaultdict(set)
            for i, words in enumerate(self._node_seed_keywords()):
                for w in words:
                    index[w].add(i)
            self._seed_index_cache = (len(self.graph), index)
        return self._seed_index_cache[1]

    def select_seeds(self, q_vec: np.ndarray, q_keywords: Set[str]) -> List[int]:
        """Greedy keyword cover (ties by similarity to the question), then vector seeds.

        IIER §3.2: repeatedly take the chunk covering the most still-uncovered question
        keywords, the most similar to the question among equals, until every keyword is
        covered or no chunk matches one; when none matches, the top vector hits seed.

        Args:
            q_vec: the question's unit vector.
            q_keywords: the question's keywords.

        Returns:
            The seed rows.
        """
        g, s = self.graph, self.settings
        seed_kw = self._node_seed_keywords()
        index = self._seed_index()
        sims = g.vectors @ q_vec
        candidates: Set[int] = set()
        cap = s.max_candidates_per_keyword
        for w in q_keywords:
            postings = index.get(w, set())
            if len(postings) > cap:
                # A keyword found in thousands of chunks: only its chunks most similar to the
                # question compete (bounds the greedy cover's cost; the rest would lose the
                # similarity tie-break anyway).
                arr = np.fromiter(postings, np.int64, len(postings))
                postings = set(arr[_top_indices(sims[arr], cap)].tolist())
            candidates |= postings
        uncovered = set(q_keywords)
        seeds: List[int] = []
        cand = np.array(sorted(candidates), dtype=np.int64)
        while uncovered and len(cand) and len(seeds) < s.max_seeds:
            gains = np.fromiter((len(seed_kw[i] & uncovered) for i in cand.tolist()), np.int64, len(cand))
            best = gains.max()
            if best == 0:
                break
            ties = cand[gains == best]
            pick = int(ties[np.argmax(sims[ties])])  # equal coverage: the most similar chunk
            seeds.append(pick)
            uncovered -= seed_kw[pick]
            cand = cand[cand != pick]
        n_vector = s.vector_seeds if seeds else max(s.vector_seeds, 1)
        for i in _top_indices(sims, n_vector + len(seeds)):
            if n_vector <= 0:
                break
            if int(i) not in seeds:
                seeds.append(int(i))
                n_vector -= 1
        return seeds

    # --- chain walk -----------------------------------------------------------------------
    def features(
        self,
        q_vec: np.ndarray,
        q_keywords: Set[str],
        path: List[int],
        candidates: List[int],
        hop: int,
    ) -> np.ndarray:
        """The scorer's feature rows (``chain_scorers.FEATURE_NAMES``) of moving from the
        end of ``path`` (graph rows, seed first) to each of ``candidates`` at hop ``hop``.

        Args:
            q_vec: the question's unit vector.
            q_keywords: the question's keywords.
            path: the chain so far, as graph rows.
            candidates: the rows it may move to (neighbours of its last row).
            hop: the hop number.

        Returns:
            A ``(len(candidates), N_FEATURES)`` float32 array.
        """
        g = self.graph
        vecs = g.vectors
        cand = vecs[candidates]
        path_vec = _unit(vecs[path].mean(axis=0))
        cur = path[-1]
        seed_kw = self._node_seed_keywords()
        covered: Set[str] = set().union(*(seed_kw[i] for i in path)) & q_keywords
        uncovered = q_keywords - covered
        nq = max(len(q_keywords), 1)
        out = np.zeros((len(candidates), N_FEATURES), dtype=np.float32)
        out[:, 0] = cand @ q_vec
        out[:, 1] = cand @ path_vec
        out[:, 2] = cand @ vecs[cur]
        adj = g.neighbours(cur)
        for r, c in enumerate(candidates):
            data = adj[c]
            out[r, 3] = data.get(STRUCTURAL, 0)
            out[r, 4] = data.get(SEMANTIC, 0)
            out[r, 5] = np.log1p(data.get(KEYWORD, 0))
            kw = seed_kw[c]
            out[r, 6] = len(kw & uncovered) / nq
            out[r, 7] = len(kw & q_keywords) / nq
        out[:, 8] = hop / max(self.settings.max_hops, 1)
        return out

    def _walk(self, seed: int, q_vec: np.ndarray, q_keywords: Set[str], taken: Set[int]) -> Chain:
        g = self.graph
        chain = [(seed, float(g.vectors[seed] @ q_vec))]
        path = [seed]
        for hop in range(1, self.settings.max_hops + 1):
            candidates = [i for i in g.neighbours(path[-1]) if i not in taken and i not in path]
            if not candidates:
                break
            scores = self.scorer.score(self.features(q_vec, q_keywords, path, candidates, hop))
            best = int(np.argmax(scores))
            if scores[best] <= self.scorer.threshold:
                break
            path.append(candidates[best])
            chain.append((candidates[best], float(scores[best])))
        return chain

    def search(self, q_vec: np.ndarray, q_keywords: Set[str]) -> List[Chain]:
        """Evidence chains as lists of (graph row, score), seed first.

        Args:
            q_vec: the question's unit vector.
            q_keywords: the question's keywords.

        Returns:
            The chains.
        """
        chains: List[Chain] = []
        taken: Set[int] = set()
        for seed in self.select_seeds(q_vec, q_keywords):
            if seed in taken:  # an earlier chain already walked through this seed
                continue
            chain = self._walk(seed, q_vec, q_keywords, taken | {seed})
            taken |= {i for i, _ in chain}
            chains.append(chain)
        if self.settings.fill_budget and len(taken) < self.settings.max_nodes:
            sims = self.graph.vectors @ q_vec
            for i in _top_indices(sims, self.settings.max_nodes + len(taken)):
                if len(taken) >= self.settings.max_nodes:
                    break
                if int(i) not in taken:
                    taken.add(int(i))
                    chains.append([(int(i), float(sims[i]))])
        return chains

    # --- output ---------------------------------------------------------------------------
    def _get_node(self, node_id: str) -> BaseNode:
        node = self._nodes.get(node_id) if self.docstore is None else self.docstore.get_node(node_id, raise_error=False)
        if node is None:
            raise UnknownNodeError(f"chunk graph node {node_id!r} is not in the docstore")
        return node

    def _to_output(self, chains: List[Chain]) -> List[NodeWithScore]:
        node_at = lambda row: self._get_node(self.graph.node_id_at(row))  # noqa: E731
        return chain_results(chains, self.settings.max_nodes, node_at, self.settings.merge_chains)

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        q_vec = self.query_vector(query_bundle)
        q_keywords = self.question_keywords(query_bundle.query_str)
        return self._to_output(self.search(q_vec, q_keywords))

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        q_vec, q_keywords = await asyncio.gather(
            self.aquery_vector(query_bundle), self.aquestion_keywords(query_bundle.query_str)
        )
        return self._to_output(self.search(q_vec, q_keywords))


def _top_indices(scores: np.ndarray, m: int) -> np.ndarray:
    """Indices of the m largest scores, best first (argpartition: O(n), not a full sort)."""
    if m <= 0:
        return np.zeros(0, dtype=np.int64)
    if m >= len(scores):
        return np.argsort(-scores, kind="stable")
    top = np.argpartition(-scores, m - 1)[:m]
    return top[np.argsort(-scores[top], kind="stable")]


def _unit(vec: Union[Sequence[float], np.ndarray]) -> np.ndarray:
    arr = np.asarray(vec, dtype=np.float32).ravel()
    return arr / (np.linalg.norm(arr) + 1e-12)
