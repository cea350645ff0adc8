"""The critical-keyword route: ``|C|``, the question's keywords a node holds.

HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA" (Chen et al.),
§Multi-Route Retriever) adds ``β·log(1 + |C|)`` to a node's score, ``|C|`` the number of the
question's critical keywords the node holds. Here a keyword of the node's document title
counts ``document_keyword_weight`` times, and the question's keywords include the document
names it abbreviates ([`title_match`][llama_index_hiqa.retrievers.title_match]).

[`KeywordRoute`][llama_index_hiqa.retrievers.keyword_route.KeywordRoute] answers from a [`KeywordIndex`][llama_index_hiqa.indexes.keyword_index.KeywordIndex] in memory; the
embedded store's and PostgreSQL's subclasses answer the same counts from their databases.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Dict, Optional, Sequence, Tuple

from llama_index.core.schema import BaseNode, QueryBundle

from llama_index_hiqa import schema
from llama_index_hiqa.indexes.keyword_index import KeywordIndex
from llama_index_hiqa.retrievers import title_match
from llama_index_hiqa.retrievers.routes import QuestionKeywords, RouteScores
from llama_index_hiqa.retrievers.settings import KEYWORDS, RouteFusionSettings
from llama_index_hiqa.retrievers.title_match import Names
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor


class KeywordRoute:
    """The critical-keyword route over a [`KeywordIndex`][llama_index_hiqa.indexes.keyword_index.KeywordIndex].

    Args:
        extractor: extracts the question's keywords (and the titles').
        index: node id -> its critical keywords, inverted.
        config: the retriever's [`MultiRouteSettings`][llama_index_hiqa.retrievers.multi_route.MultiRouteSettings] (the title weight
            and the two title-matching rules are read from it).
        title_keywords: node id -> its document title's keywords (for the title weight).
        names: the collection's document names (``title_match.document_names``).
    """

    name = KEYWORDS

    def __init__(
        self,
        extractor: CriticalKeywordExtractor,
        index: KeywordIndex,
        config: RouteFusionSettings,
        title_keywords: Optional[Dict[str, frozenset[str]]] = None,
        names: Optional[Names] = None,
    ) -> None:
        self.extractor = extractor
        self.index = index
        self.config = config
        self.title_keywords: Dict[str, frozenset[str]] = title_keywords or {}
        self.names: Names = names or {}

    @classmethod
    def from_nodes(
        cls, nodes: Sequence[BaseNode], extractor: CriticalKeywordExtractor, index: KeywordIndex, config: RouteFusionSettings
    ) -> "KeywordRoute":
        """The route over ``index`` with the title facts of ``nodes``.

        Args:
            nodes: the indexed nodes (their document titles are read).
            extractor: the keyword extractor.
            index: the keyword index of ``nodes``.
            config: the retriever's settings.

        Returns:
            The route.
        """
        route = cls(extractor, index, config)
        route.title_keywords, route.names = route.title_facts(nodes)
        return route

    def reads_titles(self) -> bool:
        """Whether title keywords are on the nodes and the keyword route asks for them."""
        return self.config.use_keywords and self.extractor.include_document_keywords

    def title_facts(self, nodes: Sequence[BaseNode]) -> Tuple[Dict[str, frozenset[str]], Names]:
        """Node id -> its title's keywords (empty when the title weight is 1) and the
        collection's names, from one extraction over the titles of ``nodes``; both empty when
        the extractor does not copy title keywords onto nodes.

        Args:
            nodes: the indexed nodes.

        Returns:
            ``(per-node title keywords, document names)``.
        """
        if not self.reads_titles():
            return {}, {}
        titles = {n.node_id: schema.get_document_title(n) for n in nodes}
        return title_match.title_facts(self.extractor, titles, self.config.document_keyword_weight != 1.0)

    def with_config(self, config: RouteFusionSettings, nodes: Sequence[BaseNode], index: Optional[KeywordIndex] = None) -> "KeywordRoute":
        """This route under other settings; the title facts are read again from ``nodes`` only
        when the route or the title weight is switched on or off.

        Args:
            config: the new settings.
            nodes: the indexed nodes (read only when needed).
            index: a new keyword index (the route switched on), else this route's.

        Returns:
            The new route (this one is unchanged).
        """
        clone = copy.copy(self)
        clone.config = config
        if index is not None:
            clone.index = index
        old = (self.config.use_keywords, self.config.document_keyword_weight == 1.0)
        if index is not None or old != (config.use_keywords, config.document_keyword_weight == 1.0):
            clone.title_keywords, clone.names = clone.title_facts(nodes)
        return clone

    def document_names(self) -> Names:
        """The collection's document names a question may abbreviate."""
        return self.names

    def question_keywords(self, query: QueryBundle) -> QuestionKeywords:
        """The question's keywords (with the document names it abbreviates) and their
        normalised forms, once each.

        Args:
            query: the question.

        Returns:
            The keywords, extracted now.
        """
        return QuestionKeywords(*title_match.question_keywords(
            self.extractor, query.query_str, self.document_names(), self.config.match_name_abbreviations
        ))

    def title_wanted(self, wanted: Sequence[str]) -> frozenset[str]:
        """The normalised question keywords matched against document titles.

        Args:
            wanted: the question's normalised keywords.

        Returns:
            Those matched against titles.
        """
        return title_match.title_wanted(wanted, self.config.latest_year_in_titles)

    def counts(self, normalized: Sequence[str]) -> Dict[str, float]:
        """``|C|`` per node holding any of ``normalized``, a keyword of the node's document
        title counted ``document_keyword_weight`` times.

        Args:
            normalized: the question's normalised keywords.

        Returns:
            ``{node id: |C|}``.
        """
        counts: Dict[str, float] = dict(self.index.match_counts(normalized))
        extra = self.config.document_keyword_weight - 1.0
        if extra and self.title_keywords:
            wanted = self.title_wanted(normalized)
            in_title: Dict[frozenset[str], frozenset[str]] = {}  # one intersection per document title
            index = self.index
            for node_id in counts:
                title = self.title_keywords.get(node_id)
                if title is None:
                    continue
                if title not in in_title:
                    in_title[title] = wanted & title
                held = sum(1 for k in in_title[title] if index.holds(node_id, k))
                counts[node_id] += extra * held
        return counts

    def scores(self, query: QueryBundle, n: int = 0, keywords: Optional[QuestionKeywords] = None) -> RouteScores:
        """``|C|`` of every node holding a keyword of ``query`` (the fusion takes the best
        ``candidates_per_route``), the question's keywords in ``.keywords``.

        Args:
            query: the question.
            n: unused (every matching node is counted).
            keywords: the question's keywords when already extracted (``None``: extracted now).

        Returns:
            ``{node id: |C|}``.
        """
        if keywords is None:
            keywords = self.question_keywords(query)
        return RouteScores(self.counts(keywords.normalized), keywords=keywords)

    async def ascores(self, query: QueryBundle, n: int = 0, keywords: Optional[QuestionKeywords] = None) -> RouteScores:
        """[`scores`][llama_index_hiqa.retrievers.keyword_route.KeywordRoute.scores] in a worker thread.

        Args:
            query: the question.
            n: unused.
            keywords: the question's keywords when already extracted.

        Returns:
            ``{node id: |C|}``.
        """
        return await asyncio.to_thread(self.scores, query, n, keywords)

    def scores_within(
        self, query: QueryBundle, node_ids: Sequence[str], keywords: Optional[QuestionKeywords] = None
    ) -> Dict[str, float]:
        """``|C|`` of those of ``node_ids`` that hold a keyword of ``query``.

        Args:
            query: the question.
            node_ids: the nodes to score.
            keywords: the question's keywords when already extracted.

        Returns:
            ``{node id: |C|}``.
        """
        wanted = set(node_ids)
        return {node_id: count for node_id, count in self.scores(query, 0, keywords).items() if node_id in wanted}
