"""DocumentFocusRetriever: find the document first, then the pages inside it.

In a collection of look-alike documents a question names its document (company and year,
product and part number) and asks for a place inside it. HiQA's multi-route retriever
("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA", §3.3) finds the
document well: its keyword route counts the question's keywords in each node and in the node's
document title. Inside that document the keyword bonus is the same for every node, and the
fused ranking over the whole collection only ever saw the routes' top candidates, so the
pages of the right document are ranked by whatever of them happened to be among those.

This retriever takes the multi-route ranking's best document(s) and ranks *every* node of
them again with signals that separate pages of one document:

* the vector and BM25 scores of all its nodes (not only the collection-wide candidates),
  min-max normalised inside the document and weighted by the multi-route ``alpha``;
* the question's similarity to the node's heading path alone (HiQA's hierarchical
  metadata, §3.2): a question that names a section ("… shown in the cash flow statement")
  finds it even when the node's own embedding is dominated by rows of numbers;
* the share of a heading's words the question names (stemmed, stop words left out; the
  best of the node's heading levels): "balance sheet" names two of the three words of
  "Consolidated Balance Sheets", so a section the question names outranks the many sections
  its embedding is merely close to; with an expert vocabulary the words of the terms its
  concepts add count as named ("quick ratio" names the balance sheet, "legal battles" Legal
  Proceedings);
* a bonus for table-like nodes (a ``table`` segment, or text that is mostly numbers), as
  large as the question asks for figures ([`table_places`][llama_index_hiqa.retrievers.table_places]): values live in tables, reasons and
  events in prose;

then lists one node per page before a second node of any page, so the top k shows k places.

A question can be about several documents ("3M's capital expenditure in FY2018 and FY2022",
"which of the NX-2041 and NX-2044 ..."). How many documents are ranked this way, and how
they share the first places, is chosen per question from the question's title keywords and
the multi-route ranking ([`focus_share`][llama_index_hiqa.retrievers.focus_share]);
``focus_documents`` caps it. The focused documents' nodes come first, then the multi-route
ranking's other results.
"""

from __future__ import annotations

import asyncio
import re
from functools import lru_cache
from typing import Any, Dict, Hashable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import Stemmer
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.indices.vector_store.base import VectorStoreIndex
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.storage.docstore.types import BaseDocumentStore

from llama_index_hiqa import schema
from llama_index_hiqa.questions import CleanQuestions, question_bundle
from llama_index_hiqa.retrievers import document_period, focus_share, table_places
from llama_index_hiqa.retrievers.focus_seam import MultiRouteRanking, RankedRows, StoredHeadings
from llama_index_hiqa.retrievers.multi_route import VOCABULARY, MultiRouteRetriever, Ranking
from llama_index_hiqa.retrievers.question_rewrite import FocusRewrite, rewritten_question
from llama_index_hiqa.retrievers.routes import QuestionKeywords
from llama_index_hiqa.retrievers.settings import BM25, KEYWORDS, VECTOR, DocumentFocusSettings
from llama_index_hiqa.settings import updated
from llama_index_hiqa.vocabularies import VocabularyExpansion

# MultiRouteRanking and StoredHeadings (focus_seam) are listed here too: importable from where they were defined.
__all__ = ["DocumentFocusRetriever", "DocumentFocusSettings", "FocusChoice", "MultiRouteRanking", "StoredHeadings"]

HEADING, HEADING_WORDS, TABLE, FOCUS = "heading", "heading_words", "table", "focus"
FOCUS_DOCUMENTS = "focus_documents"  # route-score key: how many documents shared the places
# A number token, with the Markdown emphasis a reader writes around it: statements print the
# current year's column in bold ("**(6,701)**"), and a page of them is a table all the same.
_NUMBER = re.compile(r"^[*_]*[(\-–$€£]*[\d][\d,.]*[)%]*[*_]*$")
# The version of what `focus_facts` computes: facts a store wrote under another version (an
# older number share) are computed again from the node.
FACTS_VERSION = 2


# -- pure functions ----------------------------------------------------------------------
def numeric_share(text: str) -> float:
    """Share of whitespace-separated tokens of ``text`` that are numbers (with or without
    Markdown emphasis: ``**1,234**`` is a number).

    Args:
        text: the text.

    Returns:
        The share, in 0..1 (0 for an empty text).
    """
    tokens = text.split()
    if not tokens:
        return 0.0
    return sum(1 for token in tokens if _NUMBER.match(token)) / len(tokens)


def heading_labels(node: BaseNode) -> Tuple[str, ...]:
    """Each level's label of the node's heading path, outermost first, without the
    document title.

    Args:
        node: the node.

    Returns:
        The labels (empty without a heading path).
    """
    return tuple(h.label() for h in schema.get_heading_path(node) if h.label())


def heading_text(node: BaseNode) -> str:
    """The node's heading path as one line ("Item 8 Financial Statements > Consolidated
    Balance Sheet"), without the document title; "" when it has none.

    Args:
        node: the node.

    Returns:
        The labels joined with " > ".
    """
    return _joined(heading_labels(node))


def _joined(labels: Sequence[str]) -> str:
    return " > ".join(labels)


def focus_facts(node: BaseNode) -> List[Any]:
    """What the focus reads of a node, as stored at ingestion (JSON-able): its heading labels,
    whether it is a table segment, its share of number tokens, its document and first page,
    and the version of this computation (``FACTS_VERSION``).

    Args:
        node: the node.

    Returns:
        ``[heading labels, is table, number share, document id, first page or None, version]``.
    """
    pages = schema.get_page_range(node)
    return [
        list(heading_labels(node)), schema.get_segment_kind(node) == schema.KIND_TABLE,
        numeric_share(node.get_content()), schema.get_document_id(node), None if pages is None else pages[0],
        FACTS_VERSION,
    ]


def current_facts(facts: Sequence[Any]) -> bool:
    """Whether stored ``facts`` are what `focus_facts` computes now (a store written by an
    earlier release holds them without a version, or with another one).

    Args:
        facts: facts as a store returned them.

    Returns:
        True when they carry ``FACTS_VERSION``.
    """
    return len(facts) == 6 and facts[5] == FACTS_VERSION


def embed_headings(embed_model: BaseEmbedding, texts: Sequence[str]) -> np.ndarray:
    """``texts`` (heading paths) embedded as documents and scaled to unit length: what the
    heading similarity compares a question with, whether embedded at ingestion or here.

    Args:
        embed_model: the embedding model.
        texts: the heading paths.

    Returns:
        A ``(len(texts), dim)`` float32 array of unit rows.
    """
    vectors = np.asarray(embed_model.get_text_embedding_batch(list(texts)), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-12
    return vectors


@lru_cache(maxsize=1)
def _english_stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def content_words(texts: Sequence[str], language: str = "en") -> List[frozenset[str]]:
    """The stemmed words of each text, stop words left out: the default BM25 route's
    tokens (bm25s with the English Snowball stemmer).

    Args:
        texts: the texts.
        language: the stemmer's and stop words' language.

    Returns:
        One set of words per text.
    """
    import bm25s  # here, not at the top: 0.7 s (measured) that loading the pack without a question must not pay

    tokens = bm25s.tokenize(list(texts), stopwords=language, stemmer=_english_stemmer(),
                            return_ids=False, show_progress=False)
    return [frozenset(t) for t in tokens]


def heading_word_share(question_words: frozenset[str], heading_levels: Sequence[frozenset[str]]) -> float:
    """The largest share, over ``heading_levels`` (each level's words), of a level's words
    that are among ``question_words``; 0 without headings.

    Args:
        question_words: the question's content words.
        heading_levels: each heading level's content words.

    Returns:
        The share, in 0..1.
    """
    return max((len(level & question_words) / len(level) for level in heading_levels if level), default=0.0)


def min_max(scores: Mapping[str, float], ids: Sequence[str]) -> Dict[str, float]:
    """``scores`` over ``ids`` scaled to 0..1 (a missing id counts as the lowest score).

    Args:
        scores: id -> score (ids of ``ids`` may be missing).
        ids: the ids to scale over.

    Returns:
        id -> scaled score for each of ``ids`` (all 0 when the scores are equal; ``{}`` without ids).
    """
    if not ids:
        return {}
    values = np.array([scores.get(i, np.nan) for i in ids], dtype=float)
    present = values[~np.isnan(values)]
    if present.size == 0:
        return {i: 0.0 for i in ids}
    lo, hi = float(present.min()), float(present.max())
    values = np.where(np.isnan(values), lo, values)
    scaled = (values - lo) / (hi - lo) if hi > lo else np.zeros_like(values)
    return dict(zip(ids, scaled.tolist()))


def focus_scores(
    ids: Sequence[str],
    vector: Mapping[str, float],
    bm25: Mapping[str, float],
    heading: Mapping[str, float],
    table: Mapping[str, float],
    alpha: float,
    heading_weight: float,
    table_weight: float,
    heading_words: Optional[Mapping[str, float]] = None,
    heading_words_weight: float = 0.0,
) -> Dict[str, float]:
    """``α·v + (1−α)·b + heading_weight·h + table_weight·t + heading_words_weight·w`` for each
    of ``ids``, with v, b and h min-max normalised over ``ids``, t in {0, 1} and w (the share
    of a heading's words the question names) in 0..1 as it is.

    Args:
        ids: the node ids to score.
        vector: id -> vector similarity (v).
        bm25: id -> BM25 score (b).
        heading: id -> heading-path similarity with the question (h).
        table: id -> 1.0 for a table segment, else 0.0 (t).
        alpha: the vector share α, in 0..1.
        heading_weight: the weight of h.
        table_weight: the weight of t.
        heading_words: id -> share of the heading's words the question names (w); ``None``: none.
        heading_words_weight: the weight of w.

    Returns:
        id -> focus score for each of ``ids``.
    """
    v, b, h = min_max(vector, ids), min_max(bm25, ids), min_max(heading, ids)
    w = heading_words or {}
    return {
        i: alpha * v[i] + (1.0 - alpha) * b[i] + heading_weight * h[i] + table_weight * float(table.get(i, 0.0))
        + heading_words_weight * float(w.get(i, 0.0))
        for i in ids
    }


def one_per_page_first(ranked: Sequence[str], page_of: Mapping[str, Optional[Hashable]]) -> List[str]:
    """``ranked`` reordered so that each page's best node comes before any page's second
    node; the relative order inside both parts is kept. Ids without a page are each a page.

    Args:
        ranked: node ids, best first.
        page_of: id -> its page (any hashable; ``None`` or missing: no page).

    Returns:
        The reordered ids.
    """
    first: List[str] = []
    rest: List[str] = []
    seen: set[Hashable] = set()
    for node_id in ranked:
        page = page_of.get(node_id)
        key: Hashable = (node_id,) if page is None else page
        (rest if key in seen else first).append(node_id)
        seen.add(key)
    return first + rest


def failed_routes(results: Sequence[NodeWithScore]) -> List[str]:
    """The routes that failed on the question ``results`` answer (``ROUTE_SCORES["failed"]``).

    Args:
        results: a multi-route retriever's results.

    Returns:
        The route names, sorted; empty when every route answered.
    """
    return sorted({r for hit in results for r in hit.node.metadata.get(schema.ROUTE_SCORES, {}).get("failed", ())})


# -- retriever ---------------------------------------------------------------------------
class DocumentFocusRetriever(CleanQuestions, BaseRetriever):
    """A multi-route retriever's best document(s) ranked again node by node, listed first.

    Put it where the multi-route retriever was::

        retriever = DocumentFocusRetriever(multi_route, embed_model=embed_model)
        nodes = retriever.retrieve("What is the FY2018 capital expenditure of 3M?")

    ``multi_route`` is a [`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever], or anything
    [`MultiRouteRanking`][llama_index_hiqa.retrievers.focus_seam.MultiRouteRanking] describes (it answers which
    document and scores that document's nodes); ``embed_model`` embeds the question once for
    both and the heading paths (kept in memory after their first use; an embedding model with
    a content-hash cache keeps them across processes). ``heading_vectors`` (the pack passes
    its store's, `heading_vectors`) answers ``lookup(texts) ->
    {text: unit vector}`` with the heading vectors computed at ingestion, and, for a database
    store, ``node_facts(ids)`` with what `focus_facts` keeps of each node, so the first
    question about a document embeds none of its headings and reads none of its nodes. Settings are
    [`DocumentFocusSettings`][llama_index_hiqa.retrievers.settings.DocumentFocusSettings] fields, validated here. Each returned node carries the
    focus scores in ``metadata["route_scores"]`` next to the routes' own. ``llm`` (the pack
    passes its own) is asked only with ``question_rewrite={"enabled": True}``
    ([`question_rewrite`][llama_index_hiqa.retrievers.question_rewrite]); without one the
    questions are searched as they are.
    """

    def __init__(
        self,
        multi_route: MultiRouteRanking,
        embed_model: Optional[BaseEmbedding] = None,
        config: Optional[DocumentFocusSettings] = None,
        heading_vectors: Optional[StoredHeadings] = None,
        llm: Optional[LLM] = None,
        **settings: Any,
    ) -> None:
        self.config: DocumentFocusSettings = updated(config, settings, model_class=DocumentFocusSettings)
        self.multi_route = multi_route
        # The optional LLM question rewrite: off without an LLM whatever the setting says.
        self._rewrite = FocusRewrite(llm, self.config.question_rewrite)
        self._embed_model = embed_model
        self._stored_headings = heading_vectors
        self._heading_vectors: Dict[str, np.ndarray] = {}
        self._label_words: Dict[str, frozenset[str]] = {}  # heading label -> content_words
        # What the ranking needs of a node, read once: a database store then fetches a
        # document's nodes only the first time a question lands on it.
        self._facts: Dict[str, _NodeFacts] = {}
        # The listed documents' titles, read once (keyed by the listing they were read from),
        # and the keywords of titles seen only in a ranking's results (a store that cannot list them).
        self._listed_titles: Optional[Tuple[Mapping[str, frozenset[str]], "_Titles"]] = None
        self._unlisted_title_keywords: Dict[str, frozenset[str]] = {}
        super().__init__(callback_manager=multi_route.callback_manager)

    @classmethod
    def from_defaults(
        cls,
        index: Optional[VectorStoreIndex] = None,
        nodes: Optional[Sequence[BaseNode]] = None,
        docstore: Optional[BaseDocumentStore] = None,
        vector_retriever: Optional[BaseRetriever] = None,
        embed_model: Optional[BaseEmbedding] = None,
        similarity_top_k: Optional[int] = None,
        **settings: Any,
    ) -> "DocumentFocusRetriever":
        """LlamaIndex's ``from_defaults`` shape: a
        [`MultiRouteRetriever.from_defaults`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever.from_defaults]
        over exactly one of ``index``, ``nodes`` or ``docstore``, focused.

        Args:
            index: a ``VectorStoreIndex`` (any vector store); its embed model embeds the
                question and the heading paths unless ``embed_model`` is given.
            nodes: the nodes to retrieve from.
            docstore: a docstore holding them.
            vector_retriever: the vector route for ``nodes`` / ``docstore``.
            embed_model: embeds the question and the heading paths.
            similarity_top_k: nodes returned per query.
            **settings: [`DocumentFocusSettings`][llama_index_hiqa.retrievers.settings.DocumentFocusSettings] fields; the others go to the multi-route
                retriever.

        Returns:
            The retriever.

        Raises:
            InvalidSettingError: not exactly one of ``index``, ``nodes``, ``docstore``.
        """
        focus = {key: settings.pop(key) for key in list(settings) if key in DocumentFocusSettings.model_fields}
        multi_route = MultiRouteRetriever.from_defaults(
            index=index, nodes=nodes, docstore=docstore, vector_retriever=vector_retriever,
            similarity_top_k=similarity_top_k, **settings,
        )
        if embed_model is None and index is not None:
            embed_model = getattr(index, "_embed_model", None)
        return cls(multi_route, embed_model=embed_model, **focus)

    @property
    def similarity_top_k(self) -> int:
        """Nodes returned per question (the multi-route retriever's)."""
        return self.multi_route.config.similarity_top_k

    # -- the question's embedding, once ----------------------------------------------------
    def _embedded(self, query: QueryBundle) -> QueryBundle:
        if self._embed_model is None or query.embedding is not None:
            return query
        embedding = self._embed_model.get_agg_embedding_from_queries(query.embedding_strs)
        return QueryBundle(query.query_str, custom_embedding_strs=query.custom_embedding_strs, embedding=embedding)

    # -- scoring inside a document ---------------------------------------------------------
    def _node_facts(self, ids: Sequence[str]) -> Dict[str, "_NodeFacts"]:
        missing = [i for i in ids if i not in self._facts]
        stored = getattr(self._stored_headings, "node_facts", None)
        if missing and stored is not None:  # stored at ingestion: no node is read
            for node_id, facts in stored(missing).items():
                if current_facts(facts):  # else read from the node below
                    self._facts[node_id] = self._as_facts(facts)
            missing = [i for i in missing if i not in self._facts]
        if missing:
            for node_id, node in self.multi_route.nodes_by_id(missing).items():
                self._facts[node_id] = self._as_facts(focus_facts(node))
        return {i: self._facts[i] for i in ids if i in self._facts}

    def _as_facts(self, facts: Sequence[Any]) -> "_NodeFacts":
        labels, table_kind, share, document, page = facts[:5]
        table = bool(table_kind) or share >= self.config.table_number_share
        return _NodeFacts(tuple(labels), 1.0 if table else 0.0, None if page is None else (document, int(page)))

    def _heading_words(
        self, query: QueryBundle, facts: Mapping[str, "_NodeFacts"], expansion: Optional[VocabularyExpansion] = None
    ) -> Dict[str, float]:
        if not self.config.heading_words_weight:
            return {}
        language = self.multi_route.config.bm25_language
        missing = sorted({label for f in facts.values() for label in f.labels if label not in self._label_words})
        if missing:
            self._label_words.update(zip(missing, content_words(missing, language)))
        # The expert vocabulary's terms name sections too ("quick ratio" -> balance sheets).
        text = expansion.text() if expansion is not None else query.query_str or ""
        question, = content_words([text], language)
        return {
            node_id: heading_word_share(question, [self._label_words[label] for label in f.labels])
            for node_id, f in facts.items() if f.labels
        }

    def _heading_similarity(self, query: QueryBundle, facts: Mapping[str, "_NodeFacts"]) -> Dict[str, float]:
        if self._embed_model is None or query.embedding is None or not self.config.heading_weight:
            return {}
        missing = sorted({f.heading for f in facts.values() if f.heading and f.heading not in self._heading_vectors})
        if missing and self._stored_headings is not None:  # computed at ingestion
            dim = len(query.embedding)  # a store embedded with another model holds none of ours
            self._heading_vectors.update(
                (t, v) for t, v in self._stored_headings.lookup(missing).items() if v.shape == (dim,)
            )
            missing = [t for t in missing if t not in self._heading_vectors]
        if missing:  # a store built before they were stored: embedded once, kept in memory
            self._heading_vectors.update(zip(missing, embed_headings(self._embed_model, missing)))
        q = np.asarray(query.embedding, dtype=np.float32)
        q /= float(np.linalg.norm(q)) or 1.0
        return {node_id: float(self._heading_vectors[f.heading] @ q) for node_id, f in facts.items() if f.heading}

    def rank_document(
        self, query: QueryBundle, document_ids: Sequence[str], keywords: Optional[QuestionKeywords] = None,
        expansion: Optional[VocabularyExpansion] = None,
    ) -> RankedRows:
        """Every node of ``document_ids``, best first: ``(node_id, score, route scores)``.

        Args:
            query: the question, embedded.
            document_ids: the documents whose nodes are ranked together.
            keywords: the question's keywords when already extracted (``None``: extracted).
            expansion: what the expert vocabulary added to the question (``Ranking.expansion``).

        Returns:
            The ranking; ``[]`` when the documents have no nodes or more than ``max_document_nodes``.
        """
        ids: List[str] = []
        for document_id in document_ids:
            ids.extend(self.multi_route.document_node_ids(document_id))
        return self._rank_groups(query, {"": ids}, (), keywords, expansion).get("", [])

    def rank_documents(
        self, query: QueryBundle, document_ids: Sequence[str], failed: Sequence[str] = (),
        keywords: Optional[QuestionKeywords] = None, expansion: Optional[VocabularyExpansion] = None,
        demand: Optional[float] = None,
    ) -> Dict[str, RankedRows]:
        """Each document's nodes ranked on its own (as [`rank_document`][llama_index_hiqa.retrievers.document_focus.DocumentFocusRetriever.rank_document] ranks one), with
        every route, the stored facts and the heading vectors asked once for all of them.

        Args:
            query: the question, embedded.
            document_ids: the documents.
            failed: routes that failed on this question (not asked again).
            keywords: the question's keywords when already extracted (``None``: extracted).
            expansion: what the expert vocabulary added to the question (``Ranking.expansion``).
            demand: the question's ``figure_demand`` (``Ranking.figure_demand``; ``None``: graded here).

        Returns:
            Document id -> its ranking, for the documents with nodes and at most
                ``max_document_nodes`` of them.
        """
        groups = {d: self.multi_route.document_node_ids(d) for d in document_ids}
        return self._rank_groups(query, groups, failed, keywords, expansion, demand)

    def _rank_groups(
        self, query: QueryBundle, groups: Mapping[str, List[str]], failed: Sequence[str] = (),
        keywords: Optional[QuestionKeywords] = None, expansion: Optional[VocabularyExpansion] = None,
        demand: Optional[float] = None,
    ) -> Dict[str, RankedRows]:
        """Each group of node ids ranked on its own; the routes asked once over their union.
        A node's route scores do not depend on which other nodes are asked with it (collection-wide
        statistics), and the normalisation is per group, so a group ranks as if asked alone.
        The routes in ``failed`` (they failed on this question) are not asked again; ``demand``
        is the question's ``figure_demand`` when the ranking below graded it (``Ranking.figure_demand``)."""
        groups = {g: ids for g, ids in groups.items() if ids and len(ids) <= self.config.max_document_nodes}
        if not groups:
            return {}
        facts = self._node_facts([i for ids in groups.values() for i in ids])
        groups = {g: [i for i in ids if i in facts] for g, ids in groups.items()}
        union = list(dict.fromkeys(i for ids in groups.values() for i in ids))
        routes = self.multi_route.scores_within(query, union, failed, keywords)
        heading = self._heading_similarity(query, facts)
        named = self._heading_words(query, facts, expansion)
        if demand is None:
            demand = table_places.figure_demand(query.query_str or "")
        table_weight = self._table_weight(demand)
        return {g: self._ranked(ids, facts, routes, heading, named, table_weight) for g, ids in groups.items() if ids}

    def question_table_weight(self, question: str) -> float:
        """The table bonus for ``question``: ``table_weight`` scaled by how much the question
        asks for figures ([`figure_demand`][llama_index_hiqa.retrievers.table_places.figure_demand]),
        for table parts and numeric text alike; the whole bonus with ``table_weight_by_question`` off.

        Args:
            question: the question's text (as asked, not expanded).

        Returns:
            The weight of the table bonus t.
        """
        return self._table_weight(table_places.figure_demand(question))

    def _table_weight(self, demand: float) -> float:
        if not self.config.table_weight_by_question:
            return self.config.table_weight
        return self.config.table_weight * demand

    def _ranked(
        self, ids: Sequence[str], facts: Mapping[str, "_NodeFacts"], routes: Mapping[str, Mapping[str, float]],
        heading: Mapping[str, float], named: Mapping[str, float], table_weight: float,
    ) -> RankedRows:
        table = {i: facts[i].table for i in ids}
        alpha = self.multi_route.config.alpha
        fused = focus_scores(
            ids, routes[VECTOR], routes[BM25], heading, table, alpha, self.config.heading_weight, table_weight,
            named, self.config.heading_words_weight,
        )
        ranked = sorted(ids, key=lambda i: (-fused[i], i))
        if self.config.pages_first:
            ranked = one_per_page_first(ranked, {i: facts[i].page for i in ids})
        return [
            (i, fused[i], {VECTOR: routes[VECTOR].get(i), BM25: routes[BM25].get(i),
                           KEYWORDS: float(routes[KEYWORDS].get(i, 0.0)),
                           HEADING: heading.get(i), HEADING_WORDS: named.get(i), TABLE: table[i], FOCUS: fused[i]})
            for i in ranked
        ]

    def _best_document(self, head: Sequence[NodeWithScore]) -> Tuple[Optional[str], List[str]]:
        # Look-alike documents tie (identical pin tables); a tie is broken by document id, not
        # by the node ids the head's order falls back to, which differ between two builds.
        # The same order gives the head's documents place by place (the places tied documents
        # get), so two builds of one collection share the places alike.
        ordered = sorted(head, key=lambda hit: (-round(hit.score or 0.0, 9), schema.get_document_id(hit.node) or ""))
        documents = [schema.get_document_id(hit.node) or "" for hit in ordered]
        return next((d for d in documents if d), None), documents

    def _above_the_cut(self, head: Sequence[NodeWithScore]) -> List[str]:
        """The head's documents best first, without those seen only at its lowest score when
        the head is full: the top-k cut through a tie of look-alike documents is arbitrary
        (node ids decide it), so it must not decide which documents are focused."""
        best: Dict[str, float] = {}
        for hit in head:
            doc = schema.get_document_id(hit.node) or ""
            best[doc] = max(best.get(doc, float("-inf")), round(hit.score or 0.0, 9))
        full = len(head) >= self.similarity_top_k
        cut = min(round(hit.score or 0.0, 9) for hit in head) if full and head else float("-inf")
        return [doc for doc in sorted(best, key=lambda d: (-best[d], d)) if doc and best[doc] > cut]

    def _titles(self, head: Sequence[NodeWithScore]) -> "_Titles":
        """Every document's title and title keywords: those the multi-route retriever lists
        (read once), and the head's (a store that cannot list them all)."""
        listed = self.multi_route.document_title_keywords()
        if self._listed_titles is None or self._listed_titles[0] is not listed:
            titles = self.multi_route.document_titles()
            self._listed_titles = (listed, _Titles(titles, listed, focus_share.title_words(listed)))
        known = self._listed_titles[1]
        in_head = {schema.get_document_id(hit.node): schema.get_document_title(hit.node) for hit in head}
        missing = {doc: title for doc, title in in_head.items() if doc and doc not in listed and title}
        if not missing:
            return known
        new = [t for t in dict.fromkeys(missing.values()) if t not in self._unlisted_title_keywords]
        if new:
            self._unlisted_title_keywords.update(self.multi_route.title_keywords_of(new))
        keywords = {**listed, **{doc: self._unlisted_title_keywords[t] for doc, t in missing.items()}}
        titles = {**{d: t for d, t in in_head.items() if d and t}, **{d: t for d, t in known.titles.items() if t}}
        return _Titles(titles, keywords, focus_share.title_words(keywords))

    def choose(
        self, query: QueryBundle, head: Sequence[NodeWithScore], keywords: Optional[QuestionKeywords] = None
    ) -> "FocusChoice":
        """The documents this question is about and which document each of the first places
        goes to ([`focus_share`][llama_index_hiqa.retrievers.focus_share]).

        Args:
            query: the question, embedded.
            head: the multi-route retriever's first results.
            keywords: the question's keywords as the keyword route matched them (``None``: the
                route was off or failed; extracted here when needed).

        Returns:
            The [`FocusChoice`][llama_index_hiqa.retrievers.document_focus.FocusChoice].
        """
        first, head_documents = self._best_document(head)
        if first is None:
            return FocusChoice([], [], False, [])
        cap = self.config.focus_documents
        if cap == 1 and not self.config.prefer_implied_period:
            return FocusChoice([first], [first] * len(head), False, [])
        known = self._titles(head)
        titles = known.keywords
        if keywords is None:
            keywords = self.multi_route.question_keywords(query)
        written = focus_share.names_written(query.query_str or "", known.words)
        facets = focus_share.question_facets([*keywords.normalized, *written], known.words)
        ruled_out: frozenset[str] = frozenset()
        if self.config.prefer_implied_period:
            first, head_documents, ruled_out = document_period.implied_period_first(
                query.query_str or "", first, head_documents, facets, titles, known.titles,
                self.multi_route.document_names(),
            )
        if cap == 1:
            return FocusChoice([first], [first] * len(head), False, [])
        order = list(dict.fromkeys(d for d in head_documents if d))
        # The periods the best document's own top nodes report (a yearly report's comparatives).
        node_keywords = [schema.get_critical_keywords(hit.node) for hit in head if schema.get_document_id(hit.node) == first]
        named = focus_share.named_documents(first, facets, titles, node_keywords, order)
        tied = focus_share.tied_documents(first, facets, titles, self._above_the_cut(head))
        documents = focus_share.choose_documents(first, named, tied, cap)
        is_named = bool(named) and len(documents) > 1
        # A tied look-alike whose period or form the question rules out gets no first place;
        # its nodes still take turns after them (the question's tense is weak evidence).
        placed = documents if is_named else [d for d in documents if d not in ruled_out]
        pattern = focus_share.slot_pattern(placed, head_documents, is_named)
        return FocusChoice(documents, pattern, is_named, facets)

    def _focused(
        self, query: QueryBundle, head: Ranking, terms: Sequence[str] = ()
    ) -> Tuple[RankedRows, Optional[VocabularyExpansion]]:
        """The focused documents' nodes, sharing the first places: ``(node_id, score, route
        scores)``, best first (``[]`` when nothing can be ranked again), and what the vocabulary
        and the rewrite added to the question. The documents are chosen by the question's own
        words, their nodes ranked with the rewrite's ``terms``."""
        choice = self.choose(query, head.results, head.keywords)
        searched, expansion = rewritten_question(query, head.expansion, terms)
        rankings = self.rank_documents(
            searched, choice.documents, failed_routes(head.results), head.keywords, expansion, head.figure_demand,
        )
        if not rankings:
            return [], expansion
        documents = [d for d in choice.documents if d in rankings]
        rows = {row[0]: row for ranked in rankings.values() for row in ranked}
        ids = focus_share.share_slots({d: [r[0] for r in rankings[d]] for d in documents}, choice.pattern, documents)
        for row in (rows[i] for i in ids):
            row[2][FOCUS_DOCUMENTS] = len(documents)
        return [rows[i] for i in ids], expansion

    def _combine(
        self, query: QueryBundle, head: Ranking, limit: Optional[int], terms: Optional[Sequence[str]] = None,
    ) -> List[NodeWithScore]:
        if not self.config.enabled or not head.results:
            return head.results
        if terms is None:
            terms = self._rewrite.terms(query.query_str or "", head.results)
        ranked, expansion = self._focused(query, head, terms)
        if not ranked:
            return head.results
        keep = ranked if limit is None else ranked[:limit]
        failed = failed_routes(head.results)  # the focused nodes say which routes failed, as the head's do
        rows = {i: ({**r, "failed": failed} if failed else r) for i, _, r in keep}
        if expansion is not None:  # the focused nodes say what the vocabulary and the rewrite added, as the head's do
            rows = {i: {**r, VOCABULARY: expansion.explained()} for i, r in rows.items()}
        focused = self.multi_route.results_for([(i, s) for i, s, _ in keep], rows)
        seen = {hit.node.node_id for hit in focused}
        out = focused + [hit for hit in head.results if hit.node.node_id not in seen]
        return out if limit is None else out[:limit]

    # -- BaseRetriever -------------------------------------------------------------------
    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        if not (query_bundle.query_str or "").strip():
            return []
        query = self._embedded(query_bundle)
        return self._combine(query, self.multi_route.rank(query), self.similarity_top_k)

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        if not (query_bundle.query_str or "").strip():
            return []
        query = await asyncio.to_thread(self._embedded, query_bundle)
        head = await self.multi_route.arank(query)
        terms = await self._rewrite.aterms(query.query_str or "", head.results) if self.config.enabled else []
        return await asyncio.to_thread(self._combine, query, head, self.similarity_top_k, terms)

    def full_ranking(self, query: Union[str, QueryBundle]) -> List[str]:
        """Every node id, best first, as `retrieve` orders them: the focused
        document's nodes, then the multi-route retriever's full ranking of the others.

        Args:
            query: the question, a string or a ``QueryBundle``.

        Returns:
            Every node id, best first.
        """
        bundle = self._embedded(question_bundle(query))
        if not (bundle.query_str or "").strip() or not self.config.enabled:
            return self.multi_route.full_ranking(bundle)
        head = self.multi_route.rank(bundle)
        rest = self.multi_route.full_ranking(bundle, head.keywords)
        ranked = self._focused(bundle, head, self._rewrite.terms(bundle.query_str or "", head.results))[0] if head.results else []
        first = [i for i, _, _ in ranked]
        seen = set(first)
        return first + [i for i in rest if i not in seen]


class FocusChoice(NamedTuple):
    """What [`DocumentFocusRetriever.choose`][llama_index_hiqa.retrievers.document_focus.DocumentFocusRetriever.choose] decided for one question."""

    documents: List[str]  # focused documents, best first
    pattern: List[str]  # the document of each of the first places
    named: bool  # True: the question names several documents (they take turns)
    facets: List[str]  # the question's keywords found in document titles


class _Titles(NamedTuple):
    titles: Mapping[str, str]  # document id -> its title
    keywords: Mapping[str, frozenset[str]]  # document id -> its title's keywords
    words: frozenset[str]  # every title keyword (focus_share.title_words)


class _NodeFacts(NamedTuple):
    labels: Tuple[str, ...]  # heading_labels(node)
    table: float  # 1.0 for a table-like node
    page: Optional[Tuple[Optional[str], int]]  # (document, first page)

    @property
    def heading(self) -> str:
        """heading_text(node): the path as one line, what the heading similarity embeds."""
        return _joined(self.labels)
