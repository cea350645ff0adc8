"""Which filing among look-alikes: the period and form a question implies.

A collection of filings holds one company's 10-Ks of several years, its 10-Qs, its 8-Ks and
earnings releases; their text is near-identical, so the routes of HiQA's multi-route retriever
("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA", §3.3) pick among
them by small differences of wording. The question usually says which one it means, not by
the filing's name but by its period and kind:

* a **year or a date** it names ("as of FY2022", "as of August 30, 2023"): the filing whose
  title holds that year (the latest one named, as the keyword route matches titles) or that date;
* its **tense** when it names neither: "Does 3M have a healthy quick ratio?" asks about now,
  the company's latest filing; a question in the past tense without a year says nothing and
  keeps the routes' choice;
* its **words for a release**: "earnings release", "press release", "guidance", "quarter",
  "Q2" ask for an earnings release, an 8-K or a 10-Q; without them a question about a year is
  about its annual report (a release of the same period repeats part of it).

What a document covers is read from its title as the reader wrote it from the document's own
cover ([`document_title`][llama_index_hiqa.readers.titles.document_title]: "Form 10-K, fiscal
year ended December 31, 2022", "Form 8-K, report dated August 30, 2023", a release's headline,
the file name appended), never from a dataset's labels. Pure functions of strings, so each
rule is tested on its own; the document focus applies
[`preferred_document`][llama_index_hiqa.retrievers.document_period.preferred_document] to the
documents that share the best document's names (the same company).
"""

from __future__ import annotations

import datetime
import logging
import re
from typing import Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from llama_index_hiqa.readers.titles import DATE_TEXT
from llama_index_hiqa.retrievers import focus_share, title_match

__all__ = [
    "ANNUAL", "QUARTERLY", "RELEASE", "DocumentPeriod", "PeriodChoice", "QuestionPeriod", "document_period",
    "implied_documents", "implied_period_first", "preferred_document", "question_period",
]

logger = logging.getLogger(__name__)

ANNUAL, QUARTERLY, RELEASE = "annual", "quarterly", "release"
PRESENT, PAST = "present", "past"

# A year on its own ("2022", "FY2022", "4Q 2023", "dated-2023-08-30"), not the year of a
# file name's "2023Q2", which names a fiscal quarter (title_match.py reads it so too), nor the
# number of a part ("NX-2043").
_YEAR = re.compile(r"(?<!\d)(?<![A-Z]-)((?:19|20)\d{2})(?![\dQq])")
_DATE = re.compile(DATE_TEXT, re.I)
_ISO_DATE = re.compile(r"(?<!\d)((?:19|20)\d{2})-(\d{2})-(\d{2})(?!\d)")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
# A fiscal quarter, written as questions ("Q2 of FY2023"), file names ("2023Q2") and earnings
# releases ("4Q 2023", "Fourth Quarter Fiscal 2022", "First-Quarter 2023") write it.
_Y = r"((?:19|20)\d{2})"
_ORDINALS = ("first", "second", "third", "fourth")
_QUARTERS = (
    (re.compile(rf"(?<![A-Za-z0-9])Q([1-4])(?:\s+of)?\s*(?:FY|fiscal(?:\s+year)?)?\s*'?{_Y}(?!\d)", re.I), 1, 2),
    (re.compile(rf"(?<![A-Za-z0-9])([1-4])Q\s*(?:FY)?\s*{_Y}(?!\d)", re.I), 1, 2),
    (re.compile(rf"(?<!\d){_Y}\s*Q([1-4])(?![A-Za-z0-9])", re.I), 2, 1),
    (re.compile(rf"\b({'|'.join(_ORDINALS)})[\s-]+quarter(?:\s+of)?(?:\s+(?:fiscal|FY))?(?:\s+year)?\s*{_Y}(?!\d)", re.I), 1, 2),
)
# The form a title names: the cover's "Form 10-K", a file name's "10K", a release's headline.
_ANNUAL_FORM = re.compile(r"\b(?:form\s+)?10-?k(?:405)?\b|\bannual report\b|\bfiscal year ended\b", re.I)
_RELEASE_FORM = re.compile(
    r"\b(?:form\s+)?8-?k\b|\bearnings\b|\bpress release\b|\bresults\b|\bexhibit 99|\breports\b|\bannounces\b", re.I,
)
_QUARTERLY_FORM = re.compile(r"\b(?:form\s+)?10-?q\b|\bquarter(?:ly period)? ended\b", re.I)
# The words that ask for a release or a quarter rather than the annual report.
_RELEASE_WORDS = re.compile(
    r"\b(?:earnings|press release|release|guidance|outlook|quarter|quarterly|8-?k|10-?q|q[1-4]|[1-4]q"
    r"|non[- ]?gaap|adjusted)\b", re.I,
)
# Auxiliaries and copulas whose tense is the question's: the first one found decides.
_TENSE_WORDS = {
    "is": PRESENT, "are": PRESENT, "does": PRESENT, "do": PRESENT, "has": PRESENT, "have": PRESENT,
    "was": PAST, "were": PAST, "did": PAST, "had": PAST,
}
_WORD = re.compile(r"[a-z]+")


class DocumentPeriod(NamedTuple):
    """What a document's title says about the period and kind of filing it is."""

    form: str  # ANNUAL, QUARTERLY, RELEASE, or "" when the title names none
    end: Optional[datetime.date]  # the first date the title writes (period end, report date)
    years: frozenset[int]  # the years the title writes
    quarters: frozenset[Tuple[int, int]] = frozenset()  # the fiscal quarters it names, (year, quarter)

    def latest(self) -> Tuple[int, datetime.date]:
        """A key to order documents by period: its date, else its latest year's end."""
        if self.end is not None:
            return (1, self.end)
        return (0, datetime.date(max(self.years), 12, 31)) if self.years else (0, datetime.date.min)


class QuestionPeriod(NamedTuple):
    """What a question says about the period and kind of filing it asks about."""

    years: Tuple[int, ...]  # the years it names, in its order
    dates: Tuple[datetime.date, ...]  # the dates it writes ("August 30, 2023")
    tense: str  # PRESENT, PAST, or "" when it has no auxiliary that says
    release: bool  # it names a release, guidance, a quarter or a non-GAAP ("adjusted") measure
    quarters: Tuple[Tuple[int, int], ...] = ()  # the fiscal quarters it names, (year, quarter)


def _written_date(text: str) -> Optional[datetime.date]:
    month, day, year = re.sub(r"[.,]", " ", text).split()[:3]
    try:
        return datetime.date(int(year), _MONTHS.index(month[:3].lower()) + 1, int(day))
    except ValueError:  # "February 30, 2023": not a date
        return None


def _dates(text: str) -> Tuple[datetime.date, ...]:
    written = [_written_date(m.group(1)) for m in _DATE.finditer(text)]
    iso = []
    for m in _ISO_DATE.finditer(text):
        try:
            iso.append(datetime.date(int(m.group(1)), int(m.group(2)), int(m.group(3))))
        except ValueError:
            continue
    return tuple(d for d in [*written, *iso] if d is not None)


def _quarters(text: str) -> Tuple[Tuple[int, int], ...]:
    found: Dict[Tuple[int, int], None] = {}
    for pattern, quarter_group, year_group in _QUARTERS:
        for m in pattern.finditer(text):
            quarter = m.group(quarter_group)
            number = _ORDINALS.index(quarter.lower()) + 1 if quarter.lower() in _ORDINALS else int(quarter)
            found[(int(m.group(year_group)), number)] = None
    return tuple(found)


def document_period(title: str) -> DocumentPeriod:
    """The period and form a document title names.

    Args:
        title: the document's title (``schema.DOCUMENT_TITLE``), e.g. ``"PepsiCo, Inc., Form
            8-K, report dated May 26, 2023 (PEPSICO 2023 8K dated-2023-05-30)"``.

    Returns:
        The [`DocumentPeriod`][llama_index_hiqa.retrievers.document_period.DocumentPeriod]; a
            10-K is ``ANNUAL``, an 8-K or an earnings release ``RELEASE``, a 10-Q ``QUARTERLY``.
    """
    title = title or ""
    form = (ANNUAL if _ANNUAL_FORM.search(title) else RELEASE if _RELEASE_FORM.search(title)
            else QUARTERLY if _QUARTERLY_FORM.search(title) else "")
    dates = _dates(title)
    return DocumentPeriod(
        form, dates[0] if dates else None, frozenset(int(y) for y in _YEAR.findall(title)), frozenset(_quarters(title)),
    )


def question_period(question: str) -> QuestionPeriod:
    """The period and form a question implies.

    Args:
        question: the question.

    Returns:
        The [`QuestionPeriod`][llama_index_hiqa.retrievers.document_period.QuestionPeriod]:
            the years and dates it names, its tense (the first of "is/are/does/do/has/have" or
            "was/were/did/had" in it) and whether it names a release's words.
    """
    question = question or ""
    tense = next((_TENSE_WORDS[w] for w in _WORD.findall(question.lower()) if w in _TENSE_WORDS), "")
    return QuestionPeriod(
        tuple(int(y) for y in _YEAR.findall(question)), _dates(question), tense, bool(_RELEASE_WORDS.search(question)),
        _quarters(question),
    )


def implied_documents(first: str, candidates: Sequence[str], periods: Mapping[str, DocumentPeriod],
                      wanted: QuestionPeriod) -> List[str]:
    """The documents among look-alikes whose period and form the question implies, best first
    (what [`preferred_document`][llama_index_hiqa.retrievers.document_period.preferred_document]
    chooses from).

    Args:
        first: the best document of the routes.
        candidates: the look-alikes, best first.
        periods: document id -> its [`document_period`][llama_index_hiqa.retrievers.document_period.document_period].
        wanted: the question's [`question_period`][llama_index_hiqa.retrievers.document_period.question_period].

    Returns:
        The documents left; ``[first]`` and every candidate when the question implies nothing
            (a question in the past tense without a year or date) or ``first`` takes no part.
    """
    everyone = list(dict.fromkeys([first, *candidates]))
    # Only filings take part: a title naming no form (a datasheet, an encyclopedia article)
    # has no period a question's tense could pick.
    pool = [d for d in everyone if d in periods and periods[d].form]
    if first not in pool or len(pool) < 2:
        return everyone

    def narrowed(keep: Callable[[DocumentPeriod], bool]) -> None:
        nonlocal pool
        left = [d for d in pool if keep(periods[d])]
        pool = left or pool

    if wanted.dates:
        narrowed(lambda p: p.end in wanted.dates)
    elif wanted.quarters:
        narrowed(lambda p: max(wanted.quarters) in p.quarters)
    elif wanted.years:  # a title that writes no year may be of any (a release named "2022Q4")
        narrowed(lambda p: max(wanted.years) in p.years or not p.years)
    elif wanted.tense != PRESENT:
        return everyone
    forms = (RELEASE, QUARTERLY) if wanted.release else (ANNUAL,)
    narrowed(lambda p: p.form in forms)
    if not wanted.dates and not wanted.years:  # now: the latest of what is left
        latest = max(periods[d].latest() for d in pool)
        narrowed(lambda p: p.latest() == latest)
    return pool


def preferred_document(first: str, candidates: Sequence[str], periods: Mapping[str, DocumentPeriod],
                       wanted: QuestionPeriod) -> str:
    """The document among look-alikes whose period and form the question implies.

    ``candidates`` are the look-alikes (the documents sharing ``first``'s names), best first,
    ``first`` among them; only those whose title names a form (a filing) take part, and
    nothing changes when ``first``'s names none. Narrowed in turn: to those whose title writes a date the question
    writes; else to those whose title holds the latest year it names; else, for a question in
    the present tense, to the latest period; then to the forms it asks for (a release or a
    10-Q with a release's words, else the annual report), each step only when some candidate
    is left. ``first`` is kept when it is left, else the best candidate left is returned; a
    question in the past tense without a year or date keeps ``first``.

    Args:
        first: the routes' best document, kept whenever it is left.
        candidates: its look-alikes, best first (the first left wins otherwise).
        periods: each look-alike's period and form, read from its title.
        wanted: what the question says of the period and form it asks about.

    Returns:
        The preferred document's id.
    """
    pool = implied_documents(first, candidates, periods, wanted)
    return first if first in pool else pool[0]


class PeriodChoice(NamedTuple):
    """What [`implied_period_first`][llama_index_hiqa.retrievers.document_period.implied_period_first] decided."""

    first: str  # the best document
    head_documents: List[str]  # the document of each first place
    ruled_out: frozenset[str]  # look-alikes whose period or form the question rules out


def implied_period_first(
    question: str, first: str, head_documents: Sequence[str], facets: Sequence[str],
    title_keywords: Mapping[str, frozenset[str]], titles: Mapping[str, str],
    spellings: Optional[Mapping[str, Tuple[Tuple[str, ...], ...]]] = None,
) -> PeriodChoice:
    """The best document and the document of each first place, with the look-alike whose
    period and form ``question`` implies in ``first``'s stead, and the look-alikes it rules
    out: the look-alikes are the documents whose titles hold every name (not period) of the
    question that ``first``'s title holds, as a keyword or as the first words of a longer name
    (a company renamed between its filings: `title_match.holds_name`)
    ([`implied_documents`][llama_index_hiqa.retrievers.document_period.implied_documents]
    keeps those of the period and form it implies,
    [`preferred_document`][llama_index_hiqa.retrievers.document_period.preferred_document]
    chooses among them); the two swap places, so the shares of the first places stay.

    Args:
        question: the question.
        first: the best document of the routes.
        head_documents: the document of each of the routes' first places.
        facets: the question's facets ([`question_facets`][llama_index_hiqa.retrievers.focus_share.question_facets]).
        title_keywords: document id -> its title's keywords.
        titles: document id -> its title.
        spellings: name keyword -> the words that spell it in the titles
            (`title_match.document_names`);
            ``None``: a name is only ever the same keyword.

    Returns:
        The [`PeriodChoice`][llama_index_hiqa.retrievers.document_period.PeriodChoice]; as
            given, nothing ruled out, when the question names no name of ``first``'s title or
            nothing looks alike.
    """
    unchanged = PeriodChoice(first, list(head_documents), frozenset())

    def named(name: str, doc: str) -> bool:
        return title_match.holds_name(name, title_keywords.get(doc, frozenset()), spellings or {})

    names = [f for f in facets if focus_share.facet_kind(f) == focus_share.NAME and named(f, first)]
    if not names:  # the question names no company or product of first's title: nothing to tell apart
        return unchanged
    candidates = [
        d for d in dict.fromkeys([*head_documents, *sorted(title_keywords)])
        if d and all(named(n, d) for n in names)
    ]
    if len(candidates) < 2:
        return unchanged
    periods = {d: document_period(titles.get(d) or "") for d in candidates}
    wanted = question_period(question)
    implied = implied_documents(first, candidates, periods, wanted)
    preferred = first if first in implied else implied[0]
    ruled_out = frozenset(candidates) - frozenset(implied)
    if preferred == first:
        return PeriodChoice(first, list(head_documents), ruled_out)
    logger.debug("focus: %s instead of %s (the question implies %s)", preferred, first, wanted)
    swapped = {first: preferred, preferred: first}
    return PeriodChoice(preferred, [swapped.get(d, d) for d in head_documents], ruled_out)
