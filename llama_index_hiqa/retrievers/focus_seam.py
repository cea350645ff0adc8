"""The seam between the document focus and the ranking below it.

[`DocumentFocusRetriever`][llama_index_hiqa.retrievers.document_focus.DocumentFocusRetriever]
ranks again the nodes of the documents a multi-route ranking (HiQA, "HiQA: A Hierarchical
Contextual Augmentation RAG for Multi-Documents QA", §3.3) found first. What it needs of that
ranking, and of a store's heading vectors, is written down here as typed Protocols, so any
store's retriever (in memory, the embedded store, PostgreSQL) can sit under it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, Union, runtime_checkable

import numpy as np
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

from llama_index_hiqa.retrievers.multi_route import Ranking
from llama_index_hiqa.retrievers.routes import QuestionKeywords
from llama_index_hiqa.retrievers.settings import MultiRouteSettings

__all__ = ["MultiRouteRanking", "RankedRows", "StoredHeadings"]

RankedRows = List[Tuple[str, float, Dict[str, Any]]]  # (node id, score, route scores), best first


@runtime_checkable
class MultiRouteRanking(Protocol):
    """What [`DocumentFocusRetriever`][llama_index_hiqa.retrievers.document_focus.DocumentFocusRetriever]
    needs of the ranking below it: the ranking of a question with its keywords, one document's
    nodes and every route's scores of them, the titles' keywords and the results' node copies.
    [`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever] is one,
    over any store."""

    config: MultiRouteSettings
    callback_manager: CallbackManager

    def rank(self, query: QueryBundle, keywords: Optional[QuestionKeywords] = None) -> Ranking:
        """The fused results and the question's keywords (``MultiRouteRetriever.rank``).

        Args:
            query: the question.
            keywords: the question's keywords when already extracted.

        Returns:
            The ranking.
        """
        ...

    async def arank(self, query: QueryBundle, keywords: Optional[QuestionKeywords] = None) -> Ranking:
        """``rank`` without blocking the event loop.

        Args:
            query: the question.
            keywords: the question's keywords when already extracted.

        Returns:
            The ranking.
        """
        ...

    def full_ranking(self, query: Union[str, QueryBundle], keywords: Optional[QuestionKeywords] = None) -> List[str]:
        """Every node id, best first.

        Args:
            query: the question.
            keywords: the question's keywords when already extracted.

        Returns:
            The node ids.
        """
        ...

    def question_keywords(self, query: Union[str, QueryBundle]) -> QuestionKeywords:
        """The question's keywords, extracted now.

        Args:
            query: the question.

        Returns:
            The keywords.
        """
        ...

    def nodes_by_id(self, node_ids: Sequence[str]) -> Dict[str, BaseNode]:
        """The nodes of ``node_ids`` (unknown ids left out).

        Args:
            node_ids: the ids.

        Returns:
            ``{node id: node}``.
        """
        ...

    def document_node_ids(self, document_id: str) -> List[str]:
        """Every node id of a document.

        Args:
            document_id: the document.

        Returns:
            Its node ids.
        """
        ...

    def scores_within(
        self, query: Union[str, QueryBundle], node_ids: Sequence[str], skip: Sequence[str] = (),
        keywords: Optional[QuestionKeywords] = None,
    ) -> Dict[str, Dict[str, float]]:
        """Each route's scores of exactly ``node_ids``.

        Args:
            query: the question.
            node_ids: the nodes to score.
            skip: routes not to ask (they failed on this question).
            keywords: the question's keywords when already extracted.

        Returns:
            Route name -> ``{node id: score}``.
        """
        ...

    def document_titles(self) -> Dict[str, str]:
        """Document id -> its title, for every document listed."""
        ...

    def document_title_keywords(self) -> Dict[str, frozenset[str]]:
        """Document id -> its title's keywords, for every document listed."""
        ...

    def document_names(self) -> Mapping[str, Tuple[Tuple[str, ...], ...]]:
        """Name keyword -> the words that spell it in the titles."""
        ...

    def title_keywords_of(self, titles: Sequence[str]) -> Dict[str, frozenset[str]]:
        """Each title -> its keywords.

        Args:
            titles: document titles.

        Returns:
            ``{title: keywords}``.
        """
        ...

    def results_for(
        self, ranked: Sequence[Tuple[str, float]], route_scores: Mapping[str, Mapping[str, Any]],
        known_nodes: Optional[Mapping[str, BaseNode]] = None,
    ) -> List[NodeWithScore]:
        """Ranked ids as results carrying their route scores.

        Args:
            ranked: ``[(node id, score), ...]`` in result order.
            route_scores: node id -> its route scores.
            known_nodes: nodes already at hand.

        Returns:
            The results.
        """
        ...


class StoredHeadings(Protocol):
    """A store's heading vectors computed at ingestion (``heading_vectors``)."""

    def lookup(self, texts: Sequence[str]) -> Mapping[str, np.ndarray]:
        """Heading path -> its unit vector, for the paths stored.

        Args:
            texts: heading paths.

        Returns:
            ``{path: unit vector}`` for those stored.
        """
        ...
