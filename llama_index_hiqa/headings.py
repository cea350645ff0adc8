"""Headings: how a line is recognised as a heading and how its number and title are read.

Every component that reads headings asks this module, so that "ITEM 7A", "A.1 Scope" and
"Appendix B Tables" mean the same number and title to the parsers, to the cascade of
[`CascadingMetadataTransform`][llama_index_hiqa.transforms.cascading_metadata.CascadingMetadataTransform] and to the evaluation's baselines
("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA" (Chen et al.),
§"Markdown Formatter" and §"Hierarchical Contextual Augmentor": a section is known by its
number and title, and the path of those from the document title down is the cascade).

What it knows:

* **Markdown headings**: a line of one to six ``#`` then a space (CommonMark ATX headings:
  up to three spaces of indent, an optional closing run of ``#`` after a space), outside
  fenced code, the same rule as LlamaIndex's ``MarkdownNodeParser``; the ``#`` count is the
  level.
* **Heading numbers**: SEC filings' ``Part II`` / ``Item 7A`` (8-K ``Item 2.02``),
  ``Chapter 3`` / ``Section 4`` / ``Appendix B`` / ``Annex IV`` / ``Article 5``, and decimal
  numbers ``1``, ``1.2.3``, ``A.1`` (a lone capital only when followed by a dot, so the
  word "A" is not a number). The family word is written capitalised (``ITEM 7A`` ->
  ``Item 7A``) so that one section has one spelling whatever the typesetting; a decimal
  number of three or more digits is a year or a quantity, not a section number.
* **Report headings without a number**: annual and quarterly reports set the titles of their
  financial statements ("Consolidated Statements of Cash Flows") and notes ("NOTE 9.
  Supplemental Cash Flow Information") in bold body type with no Item or decimal number; a
  parser that trusts only numbered or larger-type lines folds every statement into one long
  "Item 8" section, and a question about "the cash flow statement" cannot find its rows
  ([`is_report_heading`][llama_index_hiqa.headings.is_report_heading]; only emphasised or larger-type lines are candidates, since a
  statement's row labels are bold too).
* **Inline markup** around heading text (``**Item 1. Busines** **<u>s.</u>**``, as
  pymupdf4llm writes a heading set in two styles) is removed first, re-joining a word cut
  by a style change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

from llama_index_hiqa.schema import Heading

__all__ = [
    "HeadingNumber",
    "clean_inline",
    "heading_from_text",
    "heading_key",
    "is_report_heading",
    "is_strong_sec_heading",
    "iter_lines",
    "join_split_letters",
    "markdown_heading",
    "markdown_headings",
    "parse_heading_number",
]

# SEC filings: "PART II", "Part II." and "Item 7.", "ITEM 7A", "Item 2.02" (8-K items).
# pymupdf sometimes spaces the letters of a numeral ("PART I V"): rejoined in the number.
_PART_RE = re.compile(r"^(part)\s+([IVX]+(?:\s[IVX]+)*|\d+)\b[.:\-–—]?\s*(.*)$", re.I)
_ITEM_RE = re.compile(r"^(item)\s+(\d{1,2}(?:\.\d{2})?[A-Z]?)\b[.:\-–—]?\s*(.*)$", re.I)
_CHAPTER_RE = re.compile(
    r"^(chapter|section|appendix|annex|article)\s+(\d+|[A-Z]|[IVX]+)\b[.:\-–—]?\s*(.*)$", re.I
)
# "1", "1.", "1.2", "1.2.3", "A.1", "A.1.2" followed by a title that starts with a letter.
_DECIMAL_RE = re.compile(r"^((?:\d{1,2}|[A-Z])(?:\.\d{1,2})*)(\.?)\s+(?=[^\d\s])(.*)$")

# CommonMark ATX heading: 0-3 spaces, 1-6 '#', a space, the text, an optional closing run.
_MD_HEADING_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE_RE = re.compile(r"^\s*(```|~~~)")

_RUN_JOIN_RE = re.compile(r"(?<=[’'])\*\*\s+\*\*|\*\*\s+\*\*(?=(?:<[^>]+>)*[a-z](?![a-z]))")
_HTML_RE = re.compile(r"</?(u|b|i|em|strong|sup|sub|span)[^>]*>", re.I)
_EMPH_RE = re.compile(r"[*_`]{1,3}")
_ESCAPE_RE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|])")
_SPACES_RE = re.compile(r"\s+")
_MARKUP_CHARS = frozenset("*_`<\\")
_KEY_RE = re.compile(r"[^0-9a-z]+")


@dataclass(frozen=True)
class HeadingNumber:
    """What a heading's numbering says: the number as written, the title after it, the depth
    it implies (``None`` when the number says nothing about depth) and its family."""

    number: str
    title: str
    level: Optional[int]
    family: str  # "part", "item", "chapter", "decimal", "none"


def clean_inline(text: str) -> str:
    """Heading (or table cell) text without Markdown/HTML emphasis and extra spaces.

    pymupdf4llm splits a heading set in two styles into runs (``**Item 1. Busines**
    **<u>s.</u>**``); the runs are re-joined without a space when the next one starts with
    a single lower-case letter or follows an apostrophe (a word cut by a style change),
    else with one.

    Args:
        text: one line of Markdown (a heading or a table cell).

    Returns:
        The plain text, runs of white space collapsed to one space.
    """
    if not _MARKUP_CHARS.intersection(text):  # most table cells and body lines: no markup
        return " ".join(text.split())
    text = _RUN_JOIN_RE.sub("", text)
    text = _HTML_RE.sub("", text)
    text = _EMPH_RE.sub(" ", text)
    text = _ESCAPE_RE.sub(r"\1", text)
    return _SPACES_RE.sub(" ", text).strip()


def parse_heading_number(text: str) -> HeadingNumber:
    """Split a heading into number, title and implied level.

    ``"2.3 Timing"`` -> ``("2.3", "Timing", 2)``; ``"ITEM 7A. Market Risk"`` ->
    ``("Item 7A", "Market Risk", None)`` (SEC items take their level from the parts around
    them); ``"A.1 Scope"`` -> ``("A.1", "Scope", 2)``; ``"Appendix B Tables"`` ->
    ``("Appendix B", "Tables", None)``; ``"Revision History"`` -> ``("", ..., None)``.

    Args:
        text: the heading's text (markup allowed).

    Returns:
        A ``HeadingNumber`` ``(number, title, level, family)``: ``number`` is ``""`` for an
            unnumbered heading, ``level`` ``None`` when the number implies none.
    """
    # Punctuation around the whole heading is not part of it (".0 A" reads as "0 A"): strip
    # it first, so that reading a heading's own label again gives the same heading.
    text = _clean_title(clean_inline(text))
    for regex, family in ((_PART_RE, "part"), (_ITEM_RE, "item"), (_CHAPTER_RE, "chapter")):
        match = regex.match(text)
        if match and (family != "part" or match.group(2)):
            word, num, title = match.group(1), match.group(2), match.group(3)
            if family == "part":
                num = num.replace(" ", "")
            number = f"{word.capitalize()} {num.upper()}"
            return HeadingNumber(number, _clean_title(title), None, family)
    match = _DECIMAL_RE.match(text)
    if match:
        number, title = match.group(1), _clean_title(match.group(3))
        level = number.count(".") + 1
        # A lone capital letter is only a number when dotted ("A.1") or followed by a dot, which
        # it keeps ("A. Scope" -> "A."; "A Scope" is a title); a title must start with a word
        # ("2 .5" is not section 2 titled "5").
        if re.fullmatch(r"[A-Z]", number):
            number = number + match.group(2) if match.group(2) else ""
        if number and title and not title[0].isdigit():
            return HeadingNumber(number, title, level, "decimal")
    return HeadingNumber("", _clean_title(text), None, "none")


def _clean_title(title: str) -> str:
    return title.strip().strip(".:;–—- ").strip()


def heading_from_text(text: str, level: int) -> Heading:
    """The [`Heading`][llama_index_hiqa.schema.Heading] of a heading's text at a known depth.

    ``("4.2 Electrical", 2)`` -> ``Heading("4.2", "Electrical", 2)``. The depth given wins over
    the one the number implies: it is where the document put the heading.

    Args:
        text: the heading's text.
        level: its depth (a Markdown heading's ``#`` count), 1 = top level.

    Returns:
        The heading with its number and title split.
    """
    parsed = parse_heading_number(text)
    return Heading(parsed.number, parsed.title, level)


def heading_key(text: str) -> str:
    """A comparison key of heading text: no markup, case or punctuation.

    ``"**4.2** Electrical:"`` and ``"4.2 electrical"`` compare equal.

    Args:
        text: the heading's text.

    Returns:
        The lower-case words and numbers, separated by single spaces.
    """
    return _KEY_RE.sub(" ", clean_inline(text).lower()).strip()


def is_strong_sec_heading(text: str) -> bool:
    """Whether a plain line is an SEC ``Item``/``Part`` heading even without emphasis.

    It must be short, start the line, and have the item number followed by a title or nothing.

    Args:
        text: one line (markup allowed).

    Returns:
        ``True`` for a line such as ``"Item 7. Management's Discussion"``.
    """
    text = clean_inline(text)
    if len(text.split()) > 16 or text.endswith((",", ";")):
        return False
    part = _PART_RE.match(text)
    if part and part.group(2):
        rest = part.group(3)
        return len(rest.split()) <= 10 and (not rest or rest[:1].isupper())
    item = _ITEM_RE.match(text)
    return bool(item) and (not item.group(3) or item.group(3)[:1].isupper())


def markdown_heading(line: str) -> Optional[Tuple[int, str]]:
    """The level and text of a Markdown ``#`` heading line.

    Args:
        line: one line of Markdown.

    Returns:
        ``(level, heading text)`` when ``line`` is a ``#`` heading with some text (markup
            left in: callers that need the title clean it), else ``None``.
    """
    match = _MD_HEADING_RE.match(line)
    if not match or not match.group(2) or not clean_inline(match.group(2)):
        return None
    return len(match.group(1)), match.group(2)


def iter_lines(text: str) -> List[Tuple[int, int, str]]:
    r"""Every line of ``text`` with its character offsets.

    Args:
        text: the text, lines separated by ``"\n"``.

    Returns:
        ``(start, end, line)`` a line; ``end`` excludes the newline.
    """
    out, pos = [], 0
    for line in text.split("\n"):
        out.append((pos, pos + len(line), line))
        pos += len(line) + 1
    return out


def markdown_headings(text: str) -> List[Tuple[int, int, int, str]]:
    """The ``#`` heading lines of ``text`` outside fenced code, with character offsets.

    LlamaIndex's ``MarkdownNodeParser`` does not keep the offsets.

    Args:
        text: a Markdown document.

    Returns:
        ``(start, end, level, heading_text)`` a heading, in document order.
    """
    out, in_code = [], False
    for start, end, line in iter_lines(text):
        if _FENCE_RE.match(line):
            in_code = not in_code
            continue
        if in_code:
            continue
        found = markdown_heading(line)
        if found:
            out.append((start, end, found[0], found[1]))
    return out


# --- financial statement and note titles ------------------------------------------

# "Consolidated Statements of Cash Flows", "Condensed Consolidated Balance Sheets
# (Unaudited)", "Consolidated Statement of Changes in Shareholders' Equity", "Statements of
# Financial Position". Text extraction sometimes splits a word ("Cash Flow s").
_STATEMENT_RE = re.compile(
    r"^(?:(?:condensed|consolidated|combined|unaudited|interim|group)\s+)*"
    r"(?:"
    r"statements?\s+of\s+(?:consolidated\s+)?(?:"
    r"(?:comprehensive\s+)?(?:income|loss|earnings|operations)(?:\s+\(loss\))?"
    r"|(?:income|operations|earnings)\s+and\s+comprehensive\s+(?:income|loss|earnings)"
    r"|cash\s+flow\s*s?"
    r"|financial\s+(?:position|condition)"
    r"|(?:changes\s+in\s+)?(?:share|stock)\s*(?:holders|owners)[’'`]?\s+equity"
    r"|(?:changes\s+in\s+)?(?:equity|net\s+assets|retained\s+earnings)"
    r")"
    r"|balance\s+sheets?"
    r")"
    r"(?:\s*\((?:continued|unaudited)\))*\s*$",
    re.I,
)
# "NOTE 9. Supplemental Cash Flow Information", "Note 3: Revenue", "NOTE 12 — INCOME TAXES".
_NOTE_RE = re.compile(r"^note\s+(\d{1,2}|[A-Z])\s*[.:—–-]?\s+(\S.{1,120})$", re.I)


# PDF text extraction splits the last letters off words set in some fonts ("Consolidated
# Balance Shee t", "Statement of Incom e"): a lone lower-case letter after a word joins it.
_SPLIT_LETTER_RE = re.compile(r"(?<=[a-z]) (?=[a-z](?:\s|$|[)’']))")


def join_split_letters(text: str) -> str:
    """Re-join a word whose last letter a PDF set apart.

    ``"Consolidated Balance Shee t"`` -> ``"Consolidated Balance Sheet"``.

    Args:
        text: one line.

    Returns:
        The line with white space collapsed and split letters joined.
    """
    return _SPLIT_LETTER_RE.sub("", " ".join(text.split()))


def is_report_heading(text: str) -> bool:
    """Whether a line (markup removed) is a financial statement or note title.

    Args:
        text: one line.

    Returns:
        ``True`` for a statement title (``"Consolidated Balance Sheets"``) or a note title
            (``"Note 3: Revenue"``), not a sentence or a figure.
    """
    text = join_split_letters(text)
    if not text or len(text) > 140 or text.endswith((",", ";", ".")):
        return False
    if _STATEMENT_RE.match(text):
        return True
    note = _NOTE_RE.match(text)
    # A note title is words, not a sentence or a figure: "Note 3: Revenue", not "Note 3 to
    # the financial statements describes ..." (lower-case first word) or "Note 9 $ 1,250".
    return bool(note) and note.group(2)[0].isupper() and sum(c.isdigit() for c in note.group(2)) <= 4
