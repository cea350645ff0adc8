"""llama_index_hiqa.headings: the one reading of heading lines and heading numbers."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_hiqa.evaluation.units import _heading_walk
from llama_index_hiqa.headings import (
    clean_inline,
    heading_from_text,
    heading_key,
    markdown_heading,
    markdown_headings,
    parse_heading_number,
)
from llama_index_hiqa.schema import Heading
from llama_index_hiqa.transforms.cascading_metadata import shorten_cascade


# The three headings the old copies disagreed on, and what every reader now says.
@pytest.mark.parametrize(
    "text, number, title",
    [
        ("ITEM 7A", "Item 7A", ""),
        ("A.1 Scope", "A.1", "Scope"),
        ("Appendix B Tables", "Appendix B", "Tables"),
    ],
)
def test_the_headings_the_copies_disagreed_on(text, number, title):
    assert heading_from_text(text, 2) == Heading(number, title, 2)
    # the evaluation's heading walk and the cascade read them the same way
    offsets, paths = _heading_walk(f"# Doc\n\n## {text}\n\nbody")
    assert paths[-1][-1] == [number, title, 2]
    # a long middle level of the cascade shortens to its number
    assert shorten_cascade(["Doc", f"{text} " + "x" * 40, "Own"], " > ", 25) == f"Doc > {number} > Own"



@pytest.mark.parametrize(
    "text, number, title, level",
    [
        ("2.3 Timing Requirements", "2.3", "Timing Requirements", 2),
        ("1 Features", "1", "Features", 1),
        ("4.2.1. Fault Handling", "4.2.1", "Fault Handling", 3),
        ("A.1 Pin Functions", "A.1", "Pin Functions", 2),
        ("Chapter 3: Power Supply", "Chapter 3", "Power Supply", None),
        ("Item 7A. Quantitative and Qualitative Disclosures", "Item 7A",
         "Quantitative and Qualitative Disclosures", None),
        ("ITEM 2.02 Results of Operations", "Item 2.02", "Results of Operations", None),
        ("PART II", "Part II", "", None),
        ("PART I V", "Part IV", "", None),
        ("Revision History", "", "Revision History", None),
        ("A Note on Accuracy", "", "A Note on Accuracy", None),
    ],
)
def test_heading_numbers(text, number, title, level):
    parsed = parse_heading_number(text)
    assert (parsed.number, parsed.title, parsed.level) == (number, title, level)


def test_heading_runs_split_by_style_are_rejoined():
    assert clean_inline("**Item 1. Busines** **<u>s.</u>**") == "Item 1. Business."
    assert (
        clean_inline("**Item 7A. Quantitative** **<u>and Qualitative</u>**")
        == "Item 7A. Quantitative and Qualitative"
    )
    assert clean_inline("**Registrant’** **<u>s Common Equity</u>**") == "Registrant’s Common Equity"



@pytest.mark.parametrize(
    "text, number, title",
    [
        ("Article 5 Definitions", "Article 5", "Definitions"),
        ("2019 Annual Report", "", "2019 Annual Report"),  # a year, not a section number
        ("**Item 7A.** Quantitative Disclosures", "Item 7A", "Quantitative Disclosures"),
        ("2. Features", "2", "Features"),
    ],
)
def test_more_numbers(text, number, title):
    parsed = parse_heading_number(text)
    assert (parsed.number, parsed.title) == (number, title)


def test_markdown_heading_lines():
    assert markdown_heading("## 4.2 Electrical") == (2, "4.2 Electrical")
    assert markdown_heading("   # Indented up to three") == (1, "Indented up to three")
    assert markdown_heading("    # four spaces is code") is None
    assert markdown_heading("#hashtag") is None
    assert markdown_heading("####### seven") is None
    assert markdown_heading("# Closed #") == (1, "Closed")
    assert markdown_heading("# C#") == (1, "C#")
    assert markdown_heading("## ** **") is None  # markup only: no heading text


def test_markdown_headings_skip_fenced_code_and_keep_offsets():
    text = "# A\n```\n# not a heading\n```\n## B\n"
    found = markdown_headings(text)
    assert [(level, body) for _s, _e, level, body in found] == [(1, "A"), (2, "B")]
    assert all(text[s:e].lstrip("# ") == body for s, e, _l, body in found)


# --- properties --------------------------------------------------------------------------

_words = st.text(alphabet=string.ascii_letters, min_size=1, max_size=10)
_title = st.lists(_words, min_size=1, max_size=5).map(" ".join).filter(lambda t: t[0].isalpha())
_decimal = st.lists(st.integers(1, 99), min_size=1, max_size=4).map(lambda xs: ".".join(map(str, xs)))
_item = st.tuples(st.sampled_from(["item", "ITEM", "Item"]), st.integers(1, 99), st.sampled_from(["", "A", "b"]))
_chapter = st.tuples(
    st.sampled_from(["chapter", "Section", "APPENDIX", "annex", "Article"]),
    st.one_of(st.integers(1, 99).map(str), st.sampled_from(list("ABCDEFGH") + ["IV", "xii"])),
    st.just(""),
)


@settings(max_examples=200, deadline=None)
@given(number=_decimal, title=_title, level=st.integers(1, 6))
def test_decimal_numbers_split_exactly(number, title, level):
    heading = heading_from_text(f"{number} {title}", level)
    assert heading == Heading(number, title, level)
    assert parse_heading_number(f"{number} {title}").level == number.count(".") + 1


@settings(max_examples=200, deadline=None)
@given(family=st.one_of(_item, _chapter), title=_title)
def test_family_numbers_are_written_one_way(family, title):
    word, num, suffix = family
    num = f"{num}{suffix}"
    parsed = parse_heading_number(f"{word} {num}. {title}")
    assert parsed.number == f"{word.capitalize()} {num.upper()}"
    assert parsed.title == title.strip(".:;–—- ")


@settings(max_examples=1000, deadline=None)
@given(text=st.text(alphabet=string.ascii_letters + string.digits + " .:*_#-", max_size=40), level=st.integers(1, 6))
def test_normalisation_is_idempotent(text, level):
    """Reading a heading's own label again gives the same heading: the cascade, the gold
    matching and the parsers may re-read a label any number of times."""
    heading = heading_from_text(text, level)
    assert heading_from_text(heading.label(), level) == heading
    assert heading_key(heading.label()) == heading_key(heading_key(heading.label()))
    assert clean_inline(clean_inline(text)) == clean_inline(text)


@settings(max_examples=200, deadline=None)
@given(level=st.integers(1, 6), title=_title, indent=st.integers(0, 3))
def test_markdown_heading_round_trip(level, title, indent):
    assert markdown_heading(" " * indent + "#" * level + " " + title) == (level, title)
    assert markdown_heading(" " * indent + "#" * level + " " + title + " " + "#" * level) == (level, title)
