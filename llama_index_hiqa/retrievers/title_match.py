"""Matching a question to document titles where exact keywords fall short.

HiQA's critical-keyword route ("Multi-Route Retrieval") counts the question's keywords that a
node holds, the document title's keywords among them (``document_keyword_weight``). Two ways
a question names its document escape an exact match:

* **the name abbreviated or written apart.** A title's "American Express Company" gives the
  keyword ``americanexpress``; a question says "AMEX". "Johnson & Johnson" is asked about as
  "JnJ", and "Best Buy's" can escape the entity recogniser. [`names_in_question`][llama_index_hiqa.retrievers.title_match.names_in_question] finds
  a document name in a question when a capitalised token is made of prefixes of the name's
  words in order (``abbreviates``), or when the name's words stand together in it.
* **several periods.** A yearly report also reports the previous years as comparatives, so
  a question about "FY2022 and FY2021" is answered by the FY2022 report: only the latest of
  several years named is matched against titles ([`latest_year_only`][llama_index_hiqa.retrievers.title_match.latest_year_only]); every year still
  counts in the text.

Pure functions over strings, so each rule can be checked on its own.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import AbstractSet, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from llama_index_hiqa.indexes.keyword_index import normalize_keyword
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

_WORD = re.compile(r"[A-Za-z0-9]+|&")
# Words a name's abbreviation may skip or shorten to a letter ("JnJ", "P&G", "BofA").
CONNECTORS: Dict[str, Tuple[str, ...]] = {
    "&": ("", "n", "&"),
    "and": ("", "n", "a", "and"),
    "of": ("", "o", "of"),
    "the": ("", "t"),
}
# A token written with capitals, possibly with "&" inside ("AMEX", "JnJ", "P&G").
_TOKEN = re.compile(r"(?<![\w&])[A-Za-z][A-Za-z&]*(?![\w&])")
_YEAR = re.compile(r"^(?:19|20)\d{2}$")
MIN_ABBREVIATION = 3  # characters, "&" included: "US" and "EU" are not names, "P&G" is


def name_words(title: str, keyword: str) -> Optional[Tuple[str, ...]]:
    """The words of ``title`` (lower case) whose letters spell ``keyword`` — a normalised
    name such as ``americanexpress`` -> ``("american", "express")`` — when they are two or
    more and the name neither starts nor ends with a connector; else ``None``.

    Args:
        title: the document title.
        keyword: a normalised name keyword.

    Returns:
        The words, or ``None``.
    """
    words = [w.lower() for w in _WORD.findall(title.replace("_", " "))]
    for start in range(len(words)):
        spelled = ""
        for end in range(start, len(words)):
            spelled += "" if words[end] == "&" else words[end]
            if not keyword.startswith(spelled):
                break
            if spelled == keyword and end > start:
                found = tuple(words[start : end + 1])
                if found[0] in CONNECTORS or found[-1] in CONNECTORS:
                    return None
                return found
    return None


Names = Mapping[str, Tuple[Tuple[str, ...], ...]]  # name keyword -> each way titles spell it


def document_names(title_keywords: Mapping[str, Iterable[str]]) -> Dict[str, Tuple[Tuple[str, ...], ...]]:
    """``{title: its keywords}`` -> ``{name keyword: the words that spell it}`` for every
    keyword that is a name of two words or more in a title (keywords with digits, such as
    years, are not). Titles may spell one name differently ("Johnson & Johnson" on a 10-K's
    cover, "JOHNSON JOHNSON" in a file name): every spelling is kept.

    Args:
        title_keywords: title -> its keywords.

    Returns:
        Name keyword -> its spellings (each a tuple of words).
    """
    names: Dict[str, Dict[Tuple[str, ...], None]] = {}
    for title, keywords in title_keywords.items():
        for keyword in sorted(keywords):  # sets arrive too: one order on every run
            if not keyword or any(ch.isdigit() for ch in keyword):
                continue
            words = name_words(title, keyword)
            if words is not None:
                names.setdefault(keyword, {})[words] = None
    return {keyword: tuple(spellings) for keyword, spellings in names.items()}


def holds_name(name: str, title_keywords: AbstractSet[str], spellings: Mapping[str, Tuple[Tuple[str, ...], ...]]) -> bool:
    """Whether a title names ``name``: as one of its keywords, or as the first words of a
    longer name it holds. A company's filings of different years may write its name
    differently ("Adobe Systems Incorporated" on the 2017 cover, "Adobe Inc." on 2022's), so
    the keyword of one (``adobe``) starts the other's (``adobesystems``, spelled "Adobe Systems").

    Args:
        name: a name keyword (normalised).
        title_keywords: the title's keywords.
        spellings: name keyword -> the words that spell it
            ([`document_names`][llama_index_hiqa.retrievers.title_match.document_names]).

    Returns:
        True when the title names it.
    """
    if name in title_keywords:
        return True
    leads = spellings.get(name) or ((name,),)
    return any(
        len(words) > len(lead) and words[: len(lead)] == lead
        for keyword in title_keywords for words in spellings.get(keyword, ()) for lead in leads
    )


def abbreviates(token: str, words: Tuple[str, ...]) -> bool:
    """Whether ``token`` (lower case) is each of ``words`` in order cut to a non-empty
    prefix, a connector (``CONNECTORS``) cut to one of its short forms or left out.

    Args:
        token: the word of the question, lower case.
        words: the name's words.

    Returns:
        True when ``token`` abbreviates them.
    """

    @lru_cache(maxsize=None)
    def rest(i: int, j: int) -> bool:
        if j == len(words):
            return i == len(token)
        word = words[j]
        if word in CONNECTORS:
            return any(token.startswith(short, i) and rest(i + len(short), j + 1) for short in CONNECTORS[word])
        return any(
            token[i : i + k] == word[:k] and rest(i + k, j + 1) for k in range(1, min(len(word), len(token) - i) + 1)
        )

    return rest(0, 0)


def names_in_question(question: str, names: Names) -> List[str]:
    """The name keywords of ``names`` (see [`document_names`][llama_index_hiqa.retrievers.title_match.document_names]) that ``question`` refers
    to by an abbreviation written with at least two capitals ("AMEX", "JnJ") or by the
    name's words side by side in any case ("best buy's").

    Args:
        question: the question text.
        names: name keyword -> its spellings ([`document_names`][llama_index_hiqa.retrievers.title_match.document_names]).

    Returns:
        The name keywords, each once.
    """
    if not names or not question:
        return []
    found: Dict[str, None] = {}
    for match in _TOKEN.finditer(question):
        written = match.group(0)
        token = written.lower()
        if len(token) < MIN_ABBREVIATION or sum(ch.isupper() for ch in written) < 2:
            continue
        for keyword, spellings in names.items():
            if token.replace("&", "") != keyword and any(abbreviates(token, words) for words in spellings):
                found[keyword] = None
    spaced = " " + " ".join(w for w in _WORD.findall(question.lower())) + " "
    for keyword, spellings in names.items():
        if any(" " + " ".join(words) + " " in spaced for words in spellings):
            found[keyword] = None
    return list(found)


def latest_year_only(keywords: Iterable[str]) -> frozenset[str]:
    """``keywords`` with every year but the latest left out (unchanged with one year or none).

    Args:
        keywords: normalised keywords.

    Returns:
        The keywords kept.
    """
    keywords = frozenset(keywords)
    years = [k for k in keywords if _YEAR.match(k)]
    if len(years) < 2:
        return keywords
    latest = max(years)
    return frozenset(k for k in keywords if k == latest or not _YEAR.match(k))


# -- the keyword route's use of the titles (one extraction per title) -----------------------


def title_keyword_sets(extractor: CriticalKeywordExtractor, titles: Sequence[str]) -> Dict[str, frozenset[str]]:
    """Each title -> its normalised keywords, from one extraction over ``titles``.

    Args:
        extractor: the [`CriticalKeywordExtractor`][llama_index_hiqa.transforms.critical_keywords.CriticalKeywordExtractor] of the keyword route.
        titles: document titles (each once).

    Returns:
        ``{title: frozenset of normalised keywords}``.
    """
    keywords = extractor.title_keywords(titles)
    return {t: frozenset(normalize_keyword(k) for k in kws) for t, kws in zip(titles, keywords)}


def title_facts(
    extractor: CriticalKeywordExtractor, titles: Mapping[str, str], per_key: bool
) -> Tuple[Dict[str, frozenset[str]], Dict[str, Tuple[Tuple[str, ...], ...]]]:
    """From one extraction over the titles of ``titles`` (any key -> its document title, e.g.
    node id or ``ref_doc_id``): key -> its title's keywords, for ``document_keyword_weight``
    (only when ``per_key``; keys whose title has no keyword left out), and the collection's
    names ([`document_names`][llama_index_hiqa.retrievers.title_match.document_names]).

    Args:
        extractor: the keyword route's extractor.
        titles: key -> document title (empty titles are skipped).
        per_key: whether to return the per-key keywords (the title weight is not 1).

    Returns:
        ``(per-key title keywords, document names)``.
    """
    titles = {key: title for key, title in titles.items() if title}
    by_title = title_keyword_sets(extractor, list(dict.fromkeys(titles.values())))
    per = {key: by_title[t] for key, t in titles.items() if by_title[t]} if per_key else {}
    return per, document_names(by_title)


def question_keywords(
    extractor: CriticalKeywordExtractor, question: str, names: Names, match_abbreviations: bool
) -> Tuple[List[str], List[str]]:
    """The question's keywords, with the document names it abbreviates or spells apart
    ([`names_in_question`][llama_index_hiqa.retrievers.title_match.names_in_question]), and their normalised forms, once each.

    Args:
        extractor: the keyword route's extractor (``extract_query``).
        question: the question text.
        names: the collection's document names.
        match_abbreviations: whether to add the names the question abbreviates.

    Returns:
        ``(keywords, normalised keywords)``.
    """
    keywords = extractor.extract_query(question)
    if match_abbreviations:
        named = names_in_question(question, names)
        keywords = list(dict.fromkeys([*keywords, *named]))
    return keywords, [k for k in dict.fromkeys(normalize_keyword(k) for k in keywords) if k]


def title_wanted(keywords: Iterable[str], latest_year: bool) -> frozenset[str]:
    """The normalised question keywords matched against document titles: with
    ``latest_year``, every year but the latest left out ([`latest_year_only`][llama_index_hiqa.retrievers.title_match.latest_year_only]).

    Args:
        keywords: the question's normalised keywords.
        latest_year: keep only the latest year.

    Returns:
        The keywords.
    """
    return latest_year_only(keywords) if latest_year else frozenset(keywords)
