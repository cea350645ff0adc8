"""A document title a person would write, read from the document itself.

The title is what the heading cascade starts with (HiQA §Hierarchical Contextual Augmentor),
what BM25 sees first in every node and where the keyword route's title weight looks; in a
collection of look-alike documents it is the one place that says *which* document a node
belongs to. The PDF's metadata title and the first heading are often useless for that: SEC
filings carry their accession number ("0001018724-18-000005") or an editor's file name as
metadata title, and their first heading is "UNITED STATES SECURITIES AND EXCHANGE COMMISSION".

[`document_title`][llama_index_hiqa.readers.titles.document_title] reads, in order of trust:

1. **the cover facts of a filing**: the registrant's name (the line above "(Exact name of
   registrant as specified in its charter)"), the form ("FORM 10-K") and the period ("For the
   fiscal year ended December 31, 2018"), e.g. ``"3M Company, Form 10-K, fiscal year ended
   December 31, 2018"``;
2. an **informative metadata title** (not an accession number, "Document", "Microsoft Word -
   …", a bare code);
3. the **largest text of the cover** page that is not boilerplate (a datasheet's
   "NX-2043 Precision Voltage Regulator", a press release's headline);
4. the **file name** when it is informative (``AMAZON_2019_10K.pdf`` → ``"AMAZON 2019
   10K"``; never a hash, a scanner's counter or "document").

The file name is also appended, in parentheses, when it names something the title does not
(``"Square, Inc., Form 10-K, … (BLOCK 2020 10K)"``): people name files after what they look
for. Everything here is a pure function of the lines, so it is tested without PDFs.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

__all__ = ["CoverLine", "CoverFacts", "cover_facts", "document_title", "file_name_title", "informative_metadata_title"]

MAX_TITLE_CHARS = 160


@dataclass(frozen=True)
class CoverLine:
    """One text line of a document's first pages, with its dominant font size and weight."""

    text: str
    size: float = 0.0
    bold: bool = False
    page: int = 0


@dataclass(frozen=True)
class CoverFacts:
    """What a filing's cover page says about it (empty strings where it says nothing)."""

    name: str = ""
    form: str = ""
    period: str = ""


# Lines that are on every filing's cover and name none of them.
_BOILERPLATE = re.compile(
    r"^(united states( of america)?|securities and exchange commission|washington,? d\.? ?c\.?( \d{5})?"
    r"|table of contents|contents|\(?mark one\)?|for immediate release|or|and|page \d+( of \d+)?"
    r"|(annual|quarterly|transition|current) report( pursuant.*)?|pursuant to .*|commission file.*"
    r"|securities registered pursuant.*|indicate by check mark.*|exhibit \d+(\.\d+)?|news release"
    r"|press release|confidential|draft|for the (transition period|fiscal year|quarterly period).*"
    r"|(large |non-)?accelerated filer.*|smaller reporting company.*|emerging growth company.*)$",
    re.I,
)
_FORM = re.compile(r"\bform\s+(10-?k(?:405)?|10-?q|8-?k|20-?f|40-?f|6-?k|11-?k|s-1|def ?14a)\b", re.I)
# A written date ("December 31, 2022"): what a cover says, and what the document focus reads
# back from a title (retrievers/document_period.py).
MONTH_TEXT = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
DATE_TEXT = rf"({MONTH_TEXT}\s+\d{{1,2}},?\s+(?:19|20)\d{{2}})"
_PERIODS = (
    (re.compile(rf"fiscal\s+year\s+ended\s*:?\s*{DATE_TEXT}", re.I), "fiscal year ended {}"),
    (re.compile(rf"quarterly\s+period\s+ended\s*:?\s*{DATE_TEXT}", re.I), "quarter ended {}"),
    (re.compile(rf"date\s+of\s+report[^:]*:\s*{DATE_TEXT}", re.I), "report dated {}"),
)
_EXACT_NAME = re.compile(r"^\(?\s*exact name of (the )?registrant", re.I)
_ACCESSION = re.compile(r"^\d{10}-\d{2}-\d{6}$")
_HEX = re.compile(r"^[0-9a-f]{16,}$|^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$", re.I)
_PRODUCER = re.compile(r"^(microsoft (word|excel|powerpoint)\b|untitled\b|document\s*\d*$|doc\s*\d*$|pdf\b|slide \d)", re.I)
# Words that say nothing about which document it is.
_GENERIC_WORDS = {
    "doc", "docs", "document", "documents", "file", "files", "scan", "scanned", "untitled", "download",
    "copy", "final", "draft", "new", "pdf", "img", "image", "page", "pages", "report", "exhibit",
    "exhibits", "form", "filed", "and", "the", "of", "for", "v", "rev", "version", "print", "output",
}
# Upper-case company-form and country abbreviations kept as written by _display_case.
_ACRONYMS = {"PLC", "LLC", "LP", "L.P.", "AG", "SE", "N.V.", "S.A.", "NV", "SA", "USA", "US", "UK", "LTD."}


def _clean(text: str) -> str:
    """One line's visible text: spaces normalised, check boxes and private-use glyphs dropped."""
    text = unicodedata.normalize("NFKC", text or "")
    text = "".join(" " if unicodedata.category(c) in ("Co", "Cc", "So") else c for c in text)
    text = re.sub(r"^[xoý¨þ]\s+(?=[A-Z])", "", text.strip())  # check-box letters of old covers
    text = re.sub(r"\s+([.,;:])", r"\1", re.sub(r"\s+", " ", text))
    return text.strip(" _-–—|")


def _words(text: str) -> List[str]:
    return re.findall(r"[a-z0-9]+", text.lower().replace("-", ""))


def _is_boilerplate(text: str) -> bool:
    if not text or _BOILERPLATE.match(text) or _ACCESSION.match(text):
        return True
    letters = sum(c.isalpha() for c in text)
    digits = sum(c.isdigit() for c in text)
    # Addresses, phone numbers, I.R.S. numbers, zip codes: mostly digits or no words.
    return letters < 2 or digits > letters or text.startswith("(")


def _display_case(name: str) -> str:
    """``"BEST BUY CO., INC."`` -> ``"Best Buy Co., Inc."``; mixed-case names are kept."""
    if not name.isupper():
        return name
    words = []
    for word in name.split(" "):
        if any(c.isdigit() for c in word) or word.rstrip(",") in _ACRONYMS:
            words.append(word)  # 3M, PLC stay as written
        else:
            words.append(word.capitalize())
    return " ".join(words)


def cover_facts(lines: Sequence[CoverLine]) -> CoverFacts:
    """Registrant name, form and period of an SEC-style cover page.

    Args:
        lines: the first pages' lines.

    Returns:
        A ``CoverFacts`` ``(name, form, period)``, ``""`` where absent.
    """
    # The cover is the first page with the registrant line (a designed title page may come
    # first), else the first page; a form named in a later page's running text is a reference.
    pages = sorted({line.page for line in lines})
    cover = next((p for p in pages if any(_EXACT_NAME.match(_clean(ln.text)) for ln in lines if ln.page == p)), None)
    cover = pages[0] if cover is None and pages else cover
    cleaned = [(_clean(line.text), line) for line in lines if line.page == cover]
    cleaned = [(text, line) for text, line in cleaned if text]
    joined = "\n".join(text for text, _ in cleaned)
    form_match = next((m for m in (_FORM.fullmatch(text) for text, _ in cleaned) if m), None)
    form = ""
    if form_match:
        code = form_match.group(1).upper().replace(" ", "")
        code = re.sub(r"^(10|8|20|40|6|11)-?([KQF])", r"\1-\2", code)
        form = f"Form {code}"
    period = ""
    for pattern, template in _PERIODS:
        match = pattern.search(joined)
        if match:
            date = re.sub(r"\s+", " ", match.group(1)).strip()
            month, rest = date.split(" ", 1)
            period = template.format(f"{month.capitalize()} {rest}")
            break
    name = ""
    for i, (text, _) in enumerate(cleaned):
        if _EXACT_NAME.match(text):
            for previous, _line in reversed(cleaned[max(0, i - 3) : i]):
                if not _is_boilerplate(previous) and not _FORM.search(previous):
                    name = _display_case(previous)
                    break
            break
    return CoverFacts(name=name, form=form, period=period)


def largest_cover_line(lines: Sequence[CoverLine]) -> str:
    """The largest text of the first page that is not boilerplate, when it stands out.

    It must stand out from the page's body text (a datasheet's part number and name, a
    release's headline).

    Args:
        lines: the first pages' lines.

    Returns:
        The line in display case; ``""`` when none stands out.
    """
    first_page = [line for line in lines if line.page == min((ln.page for ln in lines), default=0)]
    if not first_page:
        return ""
    weights: Dict[float, int] = {}
    for line in first_page:
        weights[line.size] = weights.get(line.size, 0) + len(line.text.strip())
    body = max(weights, key=weights.get)
    best: Optional[CoverLine] = None
    for line in first_page:
        text = _clean(line.text)
        if line.size <= body or _is_boilerplate(text) or _FORM.fullmatch(text) or len(text) > 120:
            continue
        if not (text[:1].isupper() or text[:1].isdigit()) or len(text.split()) > 15:
            continue  # a sentence's tail in a larger font, not a name or a headline
        if best is None or line.size > best.size:
            best = line
    return _display_case(_clean(best.text)) if best else ""


def informative_metadata_title(title: str) -> str:
    """The PDF's metadata title when it names something.

    Not an accession number, a producer's placeholder ("Microsoft Word - …", "Document") or a
    bare code.

    Args:
        title: the metadata title.

    Returns:
        The cleaned title, or ``""``.
    """
    text = _clean(title)
    if not text or _ACCESSION.match(text) or _HEX.match(text) or _PRODUCER.match(text) or _BOILERPLATE.match(text):
        return ""
    telling = [w for w in re.findall(r"[A-Za-z][A-Za-z&.']{2,}", text) if w.lower() not in _GENERIC_WORDS]
    return text if telling else ""


def file_name_title(stem: str) -> str:
    """A readable title from a file name when it is informative.

    ``AMAZON_2019_10K`` -> ``"AMAZON 2019 10K"``; hashes, accession numbers, ``scan0001``,
    ``document`` are not.

    Args:
        stem: the file name without suffix.

    Returns:
        The title, or ``""``.
    """
    text = re.sub(r"[_\s]+", " ", stem or "").strip(" .-")
    if not text or _ACCESSION.match(text) or _HEX.match(text.replace(" ", "")):
        return ""
    telling = [
        token for token in re.split(r"[\s\-.()]+", text)
        if re.search(r"[A-Za-z]", token) and re.sub(r"\d+", "", token).lower() not in _GENERIC_WORDS
    ]
    return text if telling else ""


def _adds_words(extra: str, title: str) -> bool:
    have = set(_words(title))
    return any(w not in have for w in _words(extra))


def document_title(lines: Sequence[CoverLine], metadata_title: str = "", file_stem: str = "") -> str:
    """The title a person would write for a document.

    From its first pages' lines, its metadata title and its file name (see the module
    docstring for the order).

    Args:
        lines: the first pages' lines with their sizes.
        metadata_title: the PDF's metadata title (``""`` for none).
        file_stem: the file name without suffix (``""`` for none).

    Returns:
        The title, at most `MAX_TITLE_CHARS` characters.
    """
    facts = cover_facts(lines)
    from_file = file_name_title(file_stem)
    if facts.form or facts.period:
        # A filing cover: its largest remaining line is the registrant (3M's cover has no
        # "exact name" caption); when the name is an image, the metadata or file name.
        name = facts.name or largest_cover_line(lines) or informative_metadata_title(metadata_title) or from_file
    else:
        name = informative_metadata_title(metadata_title) or largest_cover_line(lines)
    title = name
    for part in (facts.form, facts.period):
        if part and _adds_words(part, title):
            title = f"{title}, {part}" if title else part
    if not title:
        return from_file or (file_stem or "").strip()
    if from_file and _adds_words(from_file, title):
        title = f"{title} ({from_file})"
    return title[:MAX_TITLE_CHARS].rstrip()
