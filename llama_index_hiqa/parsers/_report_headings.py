"""Headings of financial reports that carry no section number: statement titles and notes.

Annual and quarterly reports set the titles of their financial statements ("Consolidated
Statements of Cash Flows", "Consolidated Balance Sheets") and of their notes ("NOTE 9.
Supplemental Cash Flow Information") in bold body type, with no Item or decimal number, so a
parser that trusts only numbered or larger-type lines folds every statement into one long
"Item 8" section. The statement's rows then carry no hint of which statement they belong to,
and a question about "the cash flow statement" cannot find them. HiQA ("HiQA: A Hierarchical
Contextual Augmentation RAG for Multi-Documents QA", §Hierarchical Contextual Augmentation)
puts each chunk's section path into its embedding for exactly this reason; these titles are
sections a reader of the report sees.

Only emphasised (bold) or larger-type lines are candidates: row labels of a statement are
bold too, so the title must read as a statement or note title, not merely be short.
"""

from __future__ import annotations

import re

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
    """``"Consolidated Balance Shee t"`` -> ``"Consolidated Balance Sheet"``."""
    return _SPLIT_LETTER_RE.sub("", " ".join(text.split()))


def is_report_heading(text: str) -> bool:
    """Whether a line (markup removed) is a financial statement or note title."""
    text = join_split_letters(text)
    if not text or len(text) > 140 or text.endswith((",", ";", ".")):
        return False
    if _STATEMENT_RE.match(text):
        return True
    note = _NOTE_RE.match(text)
    # A note title is words, not a sentence or a figure: "Note 3: Revenue", not "Note 3 to
    # the financial statements describes ..." (lower-case first word) or "Note 9 $ 1,250".
    return bool(note) and note.group(2)[0].isupper() and sum(c.isdigit() for c in note.group(2)) <= 4
