"""How many of the first places tables may take: pure functions over a question and a ranking.

A filing of financial statements cut into table parts (every statement and note a table, a
long one split by rows to fit the embedding window) holds 30 to 100 of them. Their vectors
sit close to any question about a financial line, so without a limit they fill the first
places of a ranking, a statement's parts side by side, and push out the prose a question
about reasons or events needs. Two measures, both by how much the question asks for figures:

* [`figure_demand`][llama_index_hiqa.retrievers.table_places.figure_demand] grades a question:
  1 when it asks for a number ("how much", "what was the capital expenditure in FY2018",
  "calculate the ratio", a unit), 0.5 when it only names a financial measure, halved when it
  asks why or asks for a description; the document focus scales its table bonus by it;
* [`spread_table_parts`][llama_index_hiqa.retrievers.table_places.spread_table_parts] keeps at
  most one table part of a page in the first places of a ranking (the multi-route retriever's
  final order) unless the question asks for figures: the other parts of that page follow
  right after those places.

Both are pure (no node, no store): the retrievers give them the facts they read.
"""

from __future__ import annotations

import re
from typing import Collection, Dict, Hashable, List, Mapping, Optional, Sequence, Tuple

__all__ = ["FIGURE_QUESTION", "asks_for_figures", "figure_demand", "spread_table_parts"]

# A question that asks for a figure outright: an amount, a count, a computation, a unit.
_ASKS = re.compile(
    r"\bhow (?:much|many|large|big|high|low|long)\b|\bcalculat|\bcompute|\bround(?:ed)? to\b"
    r"|\bin (?:units of )?(?:usd|\$|millions|billions|thousands|percent|[mkµ]?[vaw]|m?hz|°c|ohms?)\b",
    re.IGNORECASE,
)
_UNIT = re.compile(r"[$%€£]|\busd\b|\bmillions?\b|\bbillions?\b|\bbasis points\b", re.IGNORECASE)
# The words of a measure (financial statements' and datasheets'): a question that names one
# may want its value.
_MEASURE = re.compile(
    r"\b(?:amount|ratio|margin|rate|percentage|percent|total|value|number|figure|balance|yield|change|growth"
    r"|revenues?|sales|income|earnings|profit|loss|cash|capex|capital expenditures?|expenditures?|expenses?|costs?"
    r"|debt|assets?|liabilit(?:y|ies)|equity|dividends?|eps|ebitda|ebit|turnover|inventor(?:y|ies)|receivables?"
    r"|payables?|cagr|working capital|shares?|per share|days|price"
    r"|voltage|current|temperature|frequency|resistance|capacitance|power|dissipation|capacity|weight|dimensions?"
    r"|size|range|speed|rating|maximum|minimum|typical|tolerance|accuracy|efficiency)\b",
    re.IGNORECASE,
)
# "What is/was the <measure> ...", or a measure of a period ("... FY2018", "in 2022", "Q2").
_WHAT_IS = re.compile(r"\bwhat (?:is|was|were|are)\b", re.IGNORECASE)
_PERIOD = re.compile(r"\bwhat\b[^?]*?\b(?:fy\s?\d{2,4}|fiscal (?:year )?\d{2,4}|q[1-4]|(?:19|20)\d\d)\b", re.IGNORECASE)
# A question about reasons, events or a description: its evidence is prose.
_PROSE = re.compile(
    r"^\s*(?:why|explain|describe|discuss|summari[sz]e|list|name)\b|\bwhat (?:drove|drives|caused|causes|explains)\b"
    r"|\bwhat (?:are|were|is|was) (?:the )?(?:main |key |primary |major )?(?:drivers?|reasons?|risks?|factors?|causes?"
    r"|nature|purpose|meaning|definition|agenda|outcome)\b|\breasons? for\b",
    re.IGNORECASE,
)
FIGURE_QUESTION = 1.0  # figure_demand of a question that asks for a figure


def figure_demand(question: str) -> float:
    """How much ``question`` asks for figures, in 0..1.

    1 when it asks for a number (an amount, a count, a computation, a unit, what a measure is,
    or a measure of a period: "what was the capital expenditure in FY2018", "what is the
    supply current"), 0.5 when it only names a measure ("does 3M have an improving margin
    profile"), 0 otherwise; halved when it asks for reasons or a description ("what drove the
    margin change", "what is the nature of").

    Args:
        question: the question's text.

    Returns:
        The demand: 0, 0.25, 0.5 or 1.
    """
    text = question or ""
    measure = _MEASURE.search(text) is not None
    if _ASKS.search(text) or _UNIT.search(text) or (measure and (_WHAT_IS.search(text) or _PERIOD.search(text))):
        demand = FIGURE_QUESTION
    elif measure:
        demand = 0.5
    else:
        return 0.0
    return demand / 2.0 if _PROSE.search(text) else demand


def asks_for_figures(question: str, demand: Optional[float] = None) -> bool:
    """Whether ``question`` asks for a figure ([`figure_demand`][llama_index_hiqa.retrievers.table_places.figure_demand] is 1).

    Args:
        question: the question's text.
        demand: its ``figure_demand`` when already graded (``None``: graded here).

    Returns:
        True for "how much", "what was the X in FY2018", a ratio to compute, a unit named.
    """
    return (figure_demand(question) if demand is None else demand) >= FIGURE_QUESTION


def spread_table_parts(
    ranked: Sequence[Tuple[str, float]],
    page_of: Mapping[str, Optional[Hashable]],
    tables: Collection[str],
    places: int,
    per_page: int = 1,
) -> List[Tuple[str, float]]:
    """``ranked`` with at most ``per_page`` table parts of any page in its first ``places``.

    The first ``places`` are filled in order, passing over a table part whose page already
    has ``per_page`` table parts there; the parts passed over come right after those places,
    in their order, then the rest as it was. A part passed over takes at most the score of the
    last of the first places, so the scores still fall along the list (a consumer that sorts
    by score keeps the order). Ids without a page (or missing from ``page_of``) are never
    passed over.

    Args:
        ranked: ``(id, score)`` pairs, best first.
        page_of: id -> its page (any hashable: ``(document, page)``); ``None``: none.
        tables: the ids that are table parts.
        places: how many first places the limit holds for (0: ``ranked`` as it is).
        per_page: the most table parts of one page among them.

    Returns:
        The reordered pairs (every pair of ``ranked`` once).

    Raises:
        ValueError: ``places`` or ``per_page`` is negative.
    """
    if places < 0 or per_page < 0:
        raise ValueError(f"places and per_page must be at least 0, not {places} and {per_page}")
    if not places:
        return list(ranked)
    head: List[Tuple[str, float]] = []
    passed: List[Tuple[str, float]] = []
    taken: Dict[Hashable, int] = {}
    index = 0
    while index < len(ranked) and len(head) < places:
        node_id, score = ranked[index]
        index += 1
        page = page_of.get(node_id)
        if node_id in tables and page is not None:
            if taken.get(page, 0) >= per_page:
                passed.append((node_id, score))
                continue
            taken[page] = taken.get(page, 0) + 1
        head.append((node_id, score))
    if not passed:
        return list(ranked)
    floor = head[-1][1] if head else float("inf")
    return head + [(i, min(s, floor)) for i, s in passed] + list(ranked[index:])
