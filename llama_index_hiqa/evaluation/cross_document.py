"""Questions about two documents at once, generated from a collection's own titles and headings.

A question that compares two filings, or asks which of two datasheets does something, is
answered only when the evidence of *both* documents reaches the first places of the ranking
("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA", §1: the
indistinguishable documents a collection of look-alike documents is made of). No labelled
data is needed to test that: the titles say which documents differ by one fact (the company,
the year, the part number), and a heading both documents have says what both can answer.

The rules, each applied to the titles' keywords (the keyword extractor of the pack, so the
same keywords the retriever matches; nothing from a dataset's metadata):

* **a title's facets.** A title keyword that is a year (``2018``) or a fiscal quarter
  (``q22023``) is a *period* (unless it is part of another keyword: ``2040`` of ``nx2040``);
  any other is a *name* when fewer than half of the titles spell it (a form type such as
  ``10k`` that most titles spell is not a name: it is the document's *kind*). A document takes part only when its title has at least one name and at most one
  period.
* **R1, one name, two periods** (``same_name_two_periods``): two documents whose titles hold
  the same names and the same kind keywords, and periods at least ``min_period_gap`` years
  apart (a yearly report carries two earlier years as comparatives, so nearer years are
  answered by the later report alone). "Compare the <heading> of <name> in FY<a> and FY<b>."
* **R2, two names, one period** (``two_names_one_period``): two documents whose titles share
  no name, hold the same period (or none) and the same kind keywords. "Compare the <heading>
  of <name a> and <name b> in FY<p>." (without a period: "... of <name a> and <name b>.")
* **R3, a list of names** (``list_of_names``): as R2 with three documents. "Which of <a>, <b>
  and <c> has the best <heading>?"
* **the heading.** Each question is built on a heading present in every one of its documents
  (the same stemmed content words of the deepest heading level, none of them a number, not a
  generic heading such as "Table of contents"), so it is answerable in principle from those
  sections; the section's nodes in each document are kept as its evidence.
* **the wording.** A name is written as the title writes it (the title's words whose letters
  spell the keyword: "American Express" for ``americanexpress``), a year as ``FY<year>``.

Questions are drawn per rule in a seeded order, at most ``per_rule`` each, spread over as many
document pairs as possible (one question per pair before a second one).
"""

from __future__ import annotations

import itertools
import random
import re
from collections import defaultdict
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field
from llama_index.core.schema import BaseNode

from llama_index_hiqa import schema
from llama_index_hiqa.evaluation.datasets import EvalQuestion, GoldEvidence
from llama_index_hiqa.indexes.keyword_index import normalize_keyword
from llama_index_hiqa.retrievers.document_focus import content_words
from llama_index_hiqa.retrievers.focus_share import PERIOD, facet_kind

RULES = ("same_name_two_periods", "two_names_one_period", "list_of_names")
_GENERIC_HEADINGS = {"", "table of contents", "index", "signatures", "exhibits", "none", "contents", "notes"}
_WORD = re.compile(r"[A-Za-z0-9&]+(?:[-.'][A-Za-z0-9]+)*")
_YEAR = re.compile(r"(?:19|20)\d{2}")


class CrossDocumentQuestion(BaseModel):
    """One generated question, answered by a section of each of its documents."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(description="The generated question.")
    rule: str = Field(description="The generator rule that made it (one of RULES).")
    document_ids: List[str] = Field(description="Every document the question needs (schema.DOCUMENT_ID).")
    heading: str = Field(description="The heading present in every one of the documents.")
    node_ids: Dict[str, List[str]] = Field(description="Each document's nodes under that heading.")

    def to_eval_question(self, question_id: str) -> EvalQuestion:
        """As an `EvalQuestion`.

        One gold document per document, the section as the heading.

        Args:
            question_id: the id the question gets.

        Returns:
            The question with its gold evidence and ``meta["rule"]``.
        """
        gold = [GoldEvidence(document_id=doc, section=self.heading) for doc in self.document_ids]
        return EvalQuestion(id=question_id, question=self.question, gold=gold, meta={"rule": self.rule})


class _Document:
    def __init__(self, document_id: str, title: str, keywords: FrozenSet[str], common: FrozenSet[str]) -> None:
        self.id = document_id
        self.title = title
        # A year inside an identifier ("2040" of "nx2040") is part of the name, not a period.
        self.periods = frozenset(
            k for k in keywords if facet_kind(k) == PERIOD and not any(k in other and k != other for other in keywords)
        )
        rest = keywords - self.periods - frozenset(k for k in keywords if facet_kind(k) == PERIOD)
        self.names = frozenset(k for k in rest if k not in common)
        self.kind = frozenset(k for k in rest if k in common)

    @property
    def usable(self) -> bool:
        return bool(self.names) and len(self.periods) <= 1 and self.name_text() is not None

    @property
    def year(self) -> Optional[int]:
        period = next(iter(self.periods), None)
        match = _YEAR.search(period or "")
        return int(match.group(0)) if match else None

    def name_text(self) -> Optional[str]:
        """The title's words that spell one of its names (the longest name first)."""
        for keyword in sorted(self.names, key=lambda k: (-len(k), k)):
            text = name_in_title(self.title, keyword)
            if text:
                return text
        return None


def name_in_title(title: str, keyword: str) -> Optional[str]:
    """The run of ``title``'s words that spells ``keyword`` letter for letter.

    "3M" for ``3m`` in "3M Company, Form 10-K"; the one with the most words first ("Best Buy"
    rather than the file name's "BESTBUY"; "Johnson & Johnson").

    Args:
        title: a document title.
        keyword: a normalised title keyword (lower case, no punctuation).

    Returns:
        The words as the title spells them, or ``None``.
    """
    words = _WORD.findall(title.replace("_", " "))
    for length in range(5, 0, -1):
        for start in range(0, len(words) - length + 1):
            run = words[start : start + length]
            if re.sub(r"[\W_]+", "", "".join(run).lower()) == keyword:
                return " ".join(run)
    return None


def heading_key(label: str) -> Optional[FrozenSet[str]]:
    """The stemmed content words of a heading: two documents' headings match when equal.

    Args:
        label: the heading's label (its number is left out).

    Returns:
        The words; ``None`` for a generic or empty heading, or one holding a number.
    """
    text = re.sub(r"^[\dA-Z]{1,3}(?:\.\d+)*[.)]?\s+", "", label.strip())  # "4.2 ", "Item 7. " stay out
    if text.lower().strip(" .:") in _GENERIC_HEADINGS or any(ch.isdigit() for ch in text):
        return None
    words, = content_words([text])
    return words if len(words) >= 1 else None


def _sections(nodes: Iterable[BaseNode]) -> Tuple[Dict[str, Dict[FrozenSet[str], Tuple[str, List[str]]]], Dict[str, str]]:
    """Document id -> {heading key: (heading text, node ids)}, and document id -> title."""
    sections: Dict[str, Dict[FrozenSet[str], Tuple[str, List[str]]]] = defaultdict(dict)
    titles: Dict[str, str] = {}
    for node in nodes:
        document_id = schema.get_document_id(node)
        if not document_id:
            continue
        titles.setdefault(document_id, schema.get_document_title(node) or document_id)
        path = schema.get_heading_path(node)
        if not path or schema.get_segment_kind(node) == schema.KIND_IMAGE:
            continue
        heading = (path[-1].title or path[-1].label()).strip()
        key = heading_key(heading)
        if key is None:
            continue
        text, ids = sections[document_id].setdefault(key, (heading, []))
        ids.append(node.node_id)
    return sections, titles


def _documents(titles: Mapping[str, str], title_keywords: Mapping[str, FrozenSet[str]]) -> Dict[str, _Document]:
    # A keyword that most titles spell (a form type, "Precision Voltage Regulator") says what
    # kind of document it is, not which one.
    spelled = [normalize_keyword(titles.get(doc, doc)) for doc in title_keywords]
    every = frozenset().union(*title_keywords.values()) if title_keywords else frozenset()
    common = frozenset(k for k in every if 2 * sum(k in text for text in spelled) >= max(len(spelled), 1))
    docs = {doc: _Document(doc, titles.get(doc, doc), kw, common) for doc, kw in title_keywords.items()}
    return {doc: d for doc, d in docs.items() if d.usable}


def _pairs(docs: Mapping[str, _Document], rule: str, min_period_gap: int) -> List[Tuple[str, ...]]:
    ids = sorted(docs)
    if rule == "same_name_two_periods":
        return [
            (a, b) for a, b in itertools.combinations(ids, 2)
            if docs[a].names == docs[b].names and docs[a].kind == docs[b].kind
            and docs[a].year is not None and docs[b].year is not None and abs(docs[a].year - docs[b].year) >= min_period_gap
        ]
    size = 2 if rule == "two_names_one_period" else 3
    return [
        group for group in itertools.combinations(ids, size)
        if all(docs[x].periods == docs[group[0]].periods and docs[x].kind == docs[group[0]].kind for x in group)
        and all(not (docs[x].names & docs[y].names) for x, y in itertools.combinations(group, 2))
    ]


def _question(rule: str, group: Sequence[_Document], heading: str) -> str:
    if rule == "same_name_two_periods":
        first, second = sorted(group, key=lambda d: d.year or 0)
        return f"Compare the {heading} of {first.name_text()} in FY{first.year} and FY{second.year}."
    names = [d.name_text() for d in group]
    period = f" in FY{group[0].year}" if group[0].year is not None else ""
    if rule == "two_names_one_period":
        return f"Compare the {heading} of {names[0]} and {names[1]}{period}."
    return f"Which of {', '.join(names[:-1])} and {names[-1]} has the best {heading}{period}?"


def cross_document_questions(
    nodes: Iterable[BaseNode],
    title_keywords: Mapping[str, FrozenSet[str]],
    per_rule: int = 40,
    seed: int = 0,
    min_period_gap: int = 3,
    rules: Sequence[str] = RULES,
) -> List[CrossDocumentQuestion]:
    """Up to ``per_rule`` questions for each of ``rules`` (module docstring) over ``nodes``.

    Deterministic for a given ``seed``.

    Args:
        nodes: the corpus's segment nodes.
        title_keywords: document id -> its title's normalised keywords, as the retriever
            matches them (``MultiRouteRetriever.document_title_keywords()``).
        per_rule: the most questions a rule makes.
        seed: seed of the random choice of documents and sections.
        min_period_gap: the fewest years between two filings of one company compared by a
            question.
        rules: the generator rules to run (a subset of `RULES`).

    Returns:
        The questions, rule by rule.

    Raises:
        ValueError: ``rules`` names an unknown rule.
    """
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        raise ValueError(f"unknown generator rule(s) {unknown}; known: {list(RULES)}")
    sections, titles = _sections(nodes)
    docs = _documents(titles, title_keywords)
    rng = random.Random(seed)
    out: List[CrossDocumentQuestion] = []
    for rule in rules:
        groups = [g for g in _pairs(docs, rule, min_period_gap) if all(x in sections for x in g)]
        rng.shuffle(groups)
        # One question per group first, then a second heading per group, ... (spread).
        options: List[List[FrozenSet[str]]] = []
        for group in groups:
            shared = sorted(set.intersection(*(set(sections[x]) for x in group)), key=sorted)
            rng.shuffle(shared)
            options.append(shared)
        made = 0
        for round_ in range(max((len(o) for o in options), default=0)):
            for group, shared in zip(groups, options):
                if made >= per_rule:
                    break
                if round_ >= len(shared):
                    continue
                key = shared[round_]
                heading = sections[group[0]][key][0]
                out.append(
                    CrossDocumentQuestion(
                        question=_question(rule, [docs[x] for x in group], heading),
                        rule=rule,
                        document_ids=list(group),
                        heading=heading,
                        node_ids={x: list(sections[x][key][1]) for x in group},
                    )
                )
                made += 1
            if made >= per_rule:
                break
    return out
