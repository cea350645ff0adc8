"""How many documents a question is about, and how they share the first k nodes.

HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA", §3.3) finds a
question's document by the keywords it shares with the document titles; the document focus
then ranks that document's pages. Some questions are about several documents at once:

* **the question names several of them.** "Compare 3M's capital expenditure in FY2018 and
  FY2022", "3M or Boeing in 2022", "which of the NX-2041 and NX-2044 ...": the question's
  keywords that are also title keywords, or title names it writes with a capital
  ([`names_written`][llama_index_hiqa.retrievers.focus_share.names_written]; its *facets*), hold two values of one kind — two names,
  or two periods. [`named_documents`][llama_index_hiqa.retrievers.focus_share.named_documents] adds, for each value the best document does not
  cover, the best document whose title holds that value and everything else the best
  document's title matched (the same company for a second year, the same year for a second
  company). A period counts as covered when at least half of the best document's nodes among the
  multi-route top k hold it too: a yearly report carries the previous years as comparatives
  in its statements, so "between FY2022 and FY2021" is one report, "FY2018 and FY2022" two
  (a five-year table that mentions 2018 once does not make it one). A name is covered by a title alone: a document that
  mentions another product is not about it.
* **the question does not tell the documents apart.** When another document is among the
  multi-route ranking's top k and its title matches every facet the best document's title
  matches ([`tied_documents`][llama_index_hiqa.retrievers.focus_share.tied_documents]), the routes chose between them by text alone — for
  look-alike documents, noise. Those documents are focused too (the retriever leaves out a
  document seen only at the lowest score of a full top k: the cut through a tie is arbitrary).

The first k nodes are then shared ([`slot_pattern`][llama_index_hiqa.retrievers.focus_share.slot_pattern], [`share_slots`][llama_index_hiqa.retrievers.focus_share.share_slots]): documents the
question names take turns (each is asked about); a tied document gets one place, the place of
its first node in the multi-route ranking, and the best document keeps the others (the
runner-up's best evidence is shown once; a document the routes ranked below the top k, or a
question whose title evidence has one winner, ranks as with one focused document). After the
top k the focused documents take turns. Pure functions over ids and keyword sets, so each
rule is checked on its own.
"""

from __future__ import annotations

import re
from typing import AbstractSet, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from llama_index_hiqa.indexes.keyword_index import normalize_keyword

_QUESTION_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9&]*(?:['’][A-Za-z]+)?")
_PERIOD = re.compile(r"^(?:(?:19|20)\d{2}|q[1-4](?:19|20)\d{2}|[1-4]q(?:19|20)\d{2})$")

PERIOD, NAME = "period", "name"


def facet_kind(keyword: str) -> str:
    """``"period"`` for a year or a fiscal quarter keyword (``2022``, ``q22023``), else
    ``"name"`` (a company, a product, a form type).

    Args:
        keyword: a normalised keyword.

    Returns:
        ``"period"`` or ``"name"``.
    """
    return PERIOD if _PERIOD.match(keyword) else NAME


def title_words(title_keywords: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """Every keyword of some document title: what [`names_written`][llama_index_hiqa.retrievers.focus_share.names_written]
    and [`question_facets`][llama_index_hiqa.retrievers.focus_share.question_facets] look a question's words up in
    (built once for a collection, not once per question).

    Args:
        title_keywords: document id -> its title's keywords.

    Returns:
        Their union.
    """
    return frozenset().union(*title_keywords.values()) if title_keywords else frozenset()


def names_written(question: str, words: AbstractSet[str], max_words: int = 4) -> List[str]:
    """Title keywords the question writes as a name: a run of up to ``max_words`` of its words,
    the first one capitalised or a number, whose normalised form is the keyword ("Boeing's",
    "NIKE", "Best Buy", "3M"). The entity recogniser can miss a name or swallow it into a longer
    span ("Business of Boeing"); a lower-case run ("square feet") is not a name.

    Args:
        question: the question text.
        words: every title keyword ([`title_words`][llama_index_hiqa.retrievers.focus_share.title_words]).
        max_words: the longest run of words tried.

    Returns:
        The keywords found, in the question's order, each once.
    """
    names = {k for k in words if facet_kind(k) != PERIOD}
    tokens = _QUESTION_WORD.findall(question or "")
    found: Dict[str, None] = {}
    for start, word in enumerate(tokens):
        if not (word[0].isupper() or word[0].isdigit()):
            continue
        for end in range(start + 1, min(start + max_words, len(tokens)) + 1):
            keyword = normalize_keyword(" ".join(tokens[start:end]))
            if keyword in names:
                found[keyword] = None
    return list(found)


def question_facets(question_keywords: Iterable[str], words: AbstractSet[str]) -> List[str]:
    """The question's (normalised) keywords that are keywords of some document title, in the
    question's order, each once.

    Args:
        question_keywords: the question's keywords, normalised.
        words: every title keyword ([`title_words`][llama_index_hiqa.retrievers.focus_share.title_words]).

    Returns:
        The facets (a keyword contained in another one found is left out).
    """
    found = [k for k in dict.fromkeys(question_keywords) if k in words]
    # A keyword inside another one names the same thing: "2023" of "q22023" (Q2 of FY2023),
    # "2041" of "nx2041".
    return [k for k in found if not any(k != other and k in other for other in found)]


def named_documents(
    first: str,
    facets: Sequence[str],
    title_keywords: Mapping[str, frozenset[str]],
    first_nodes_keywords: Sequence[Iterable[str]],
    order: Sequence[str],
) -> List[str]:
    """The documents besides ``first`` that the question names (see the module docstring).

    ``facets``: [`question_facets`][llama_index_hiqa.retrievers.focus_share.question_facets]; ``title_keywords``: document id -> its title's
    keywords (every document of the collection); ``first_nodes_keywords``: the keywords of
    each of ``first``'s nodes among the multi-route top k (its best evidence; a period at
    least half of them hold counts as covered); ``order``: document ids best first (the multi-route ranking's
    documents; a document it does not list ranks after them by the number of facets its
    title holds, then by id). Only a kind with two or more values in ``facets`` adds
    documents; each value adds at most one.

    Args:
        first: the best document's id.
        facets: the question's facets.
        title_keywords: document id -> its title's keywords.
        first_nodes_keywords: the keywords of each of ``first``'s nodes in the top k.
        order: document ids, best first.

    Returns:
        The named documents, best first.
    """
    by_kind: Dict[str, List[str]] = {}
    for facet in facets:
        by_kind.setdefault(facet_kind(facet), []).append(facet)
    first_title = title_keywords.get(first, frozenset())
    node_sets = [frozenset(keywords) for keywords in first_nodes_keywords]
    # A period the best document's evidence reports in most of its top nodes: its comparatives.
    reported = frozenset(
        k for k in frozenset().union(*node_sets) if 2 * sum(k in n for n in node_sets) >= len(node_sets)
    ) if node_sets else frozenset()
    position = {doc: i for i, doc in enumerate(order)}
    added: List[str] = []
    for kind, values in by_kind.items():
        if len(values) < 2:
            continue
        # What the best document's title matched of the kinds the question names once: a
        # second document must match it too (the same company for a second year, the same
        # year for a second name).
        shared = frozenset(
            f for f in facets if facet_kind(f) != kind and len(by_kind[facet_kind(f)]) == 1 and f in first_title
        )
        covered = first_title | (reported if kind == PERIOD else frozenset())
        for value in values:
            if value in covered or any(value in title_keywords.get(doc, ()) for doc in added):
                continue
            candidates = [
                doc for doc, title in title_keywords.items()
                if doc != first and doc not in added and value in title and shared <= title
            ]
            if candidates:
                added.append(min(candidates, key=lambda doc: _rank_key(doc, position, facets, title_keywords)))
    return added


def _rank_key(
    doc: str, position: Mapping[str, int], facets: Sequence[str], title_keywords: Mapping[str, frozenset[str]]
) -> Tuple[int, int, str]:
    held = sum(1 for f in facets if f in title_keywords.get(doc, ()))
    return (position.get(doc, len(position)), -held, doc)


def tied_documents(
    first: str, facets: Sequence[str], title_keywords: Mapping[str, frozenset[str]], head_documents: Sequence[str]
) -> List[str]:
    """The documents of ``head_documents`` (the multi-route top k's documents, best first)
    whose title matches every facet that ``first``'s title matches.

    Args:
        first: the best document's id.
        facets: the question's facets.
        title_keywords: document id -> its title's keywords.
        head_documents: the top k's documents, best first.

    Returns:
        The tied documents, ``first`` left out.
    """
    wanted = frozenset(f for f in facets if f in title_keywords.get(first, frozenset()))
    tied = []
    for doc in dict.fromkeys(head_documents):
        if doc != first and wanted <= title_keywords.get(doc, frozenset()):
            tied.append(doc)
    return tied


def choose_documents(
    first: str,
    named: Sequence[str],
    tied: Sequence[str],
    cap: Optional[int] = None,
) -> List[str]:
    """The focused documents, best first: ``first``, then the named ones; when the question
    names none, the tied ones. ``cap`` keeps at most that many.

    Args:
        first: the best document's id.
        named: the documents the question names.
        tied: the documents tied with ``first``.
        cap: the most documents kept (``None``: all).

    Returns:
        The focused documents.
    """
    extra = list(named) if named else list(tied)
    chosen = list(dict.fromkeys([first, *extra]))
    return chosen if cap is None else chosen[:cap]


def slot_pattern(documents: Sequence[str], head_documents: Sequence[str], named: bool) -> List[str]:
    """Which document each of the first ``len(head_documents)`` places goes to.

    ``named``: the documents take turns (best first). Otherwise every place goes to the best
    document except one per other document: the place of that document's first node in the
    multi-route ranking (its best evidence is shown once, where the routes ranked it; the
    best document keeps its other places).

    Args:
        documents: the focused documents, best first.
        head_documents: the document of each of the multi-route top k's places.
        named: the question names several documents.

    Returns:
        The document of each place (``[]`` without documents).
    """
    if not documents:
        return []
    if named:
        return [documents[i % len(documents)] for i in range(max(len(head_documents), len(documents)))]
    others, seen = set(documents[1:]), set()
    pattern = []
    for doc in head_documents:
        first_place = doc in others and doc not in seen
        seen.add(doc)
        pattern.append(doc if first_place else documents[0])
    return pattern


def share_slots(rankings: Mapping[str, Sequence[str]], pattern: Sequence[str], documents: Sequence[str]) -> List[str]:
    """The focused documents' nodes in one list: place i gets the next node of ``pattern[i]``'s
    ranking; after the pattern (or when a document runs out) the documents take turns in the
    order of ``documents``. Every node of ``rankings`` appears once.

    Args:
        rankings: document id -> its node ids, best first.
        pattern: the document of each of the first places ([`slot_pattern`][llama_index_hiqa.retrievers.focus_share.slot_pattern]).
        documents: the focused documents, best first.

    Returns:
        The node ids.
    """
    queues = {doc: list(rankings.get(doc, ())) for doc in documents}
    taken = {doc: 0 for doc in documents}
    out: List[str] = []

    def take(doc: str) -> bool:
        if doc in queues and taken[doc] < len(queues[doc]):
            out.append(queues[doc][taken[doc]])
            taken[doc] += 1
            return True
        return False

    for doc in pattern:
        if not take(doc):
            for other in documents:  # this document ran out: the next one with nodes left
                if take(other):
                    break
    while any(taken[doc] < len(queues[doc]) for doc in documents):
        for doc in documents:
            take(doc)
    return out
