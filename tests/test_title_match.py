"""Matching a question to document titles: name abbreviations and the latest of several years."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.schema import TextNode

from llama_index_hiqa import MultiRouteRetriever, schema
from llama_index_hiqa.retrievers.title_match import (
    CONNECTORS,
    abbreviates,
    holds_name,
    document_names,
    latest_year_only,
    name_words,
    names_in_question,
)
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

AMEX = "American Express Company, Form 10-K, fiscal year ended December 31, 2022"
JNJ = "Johnson & Johnson, Form 10-K, fiscal year ended January 1, 2023"
BESTBUY = "Best Buy Co., Inc., Form 10-K, fiscal year ended January 28, 2023"
JNJ_FILE = "JOHNSON_JOHNSON_2022Q4_EARNINGS"
NAMES = document_names(
    {
        JNJ_FILE: ["johnsonjohnson", "earnings"],
        AMEX: ["americanexpress", "10k", "2022"],
        JNJ: ["johnsonjohnson", "johnson", "10k"],
        BESTBUY: ["bestbuy"],
    }
)


def test_name_words_spell_a_keyword_from_the_title():
    assert name_words(AMEX, "americanexpress") == ("american", "express")
    assert name_words(JNJ, "johnsonjohnson") == ("johnson", "&", "johnson")
    assert name_words("3M_2018_10K", "3m") is None  # one word is not a name to abbreviate
    assert name_words(JNJ, "johnson") is None
    assert name_words(AMEX, "americanairlines") is None


def test_document_names_keep_every_spelling_of_multi_word_names_without_digits():
    assert NAMES == {
        "americanexpress": (("american", "express"),),
        # a file name spells it without "&", the 10-K's cover with it: "JnJ" needs the second
        "johnsonjohnson": (("johnson", "johnson"), ("johnson", "&", "johnson")),
        "bestbuy": (("best", "buy"),),
    }


def test_names_in_question_finds_abbreviations_and_names_written_apart():
    assert names_in_question("Does AMEX have an improving operating margin?", NAMES) == ["americanexpress"]
    assert names_in_question("What drove gross margin change as of FY2022 for JnJ?", NAMES) == ["johnsonjohnson"]
    assert names_in_question("Are Best Buy's gross margins consistent?", NAMES) == ["bestbuy"]
    assert names_in_question("P&G sales", document_names({"Procter & Gamble Co": ["proctergamble"]})) == [
        "proctergamble"
    ]


def test_names_in_question_leaves_ordinary_words_alone():
    assert names_in_question("How did US sales compare to EU sales?", NAMES) == []
    assert names_in_question("the amex figures", NAMES) == []  # no capitals: a word, not a name
    assert names_in_question("Does AMERICANEXPRESS report?", NAMES) == []  # the keyword itself: NER's job
    assert names_in_question("What is the best way to buy?", NAMES) == []  # words apart, not together
    assert names_in_question("", NAMES) == [] and names_in_question("AMEX", {}) == []


def _spellings(words):
    """Every string ``abbreviates`` accepts for ``words``: the brute-force reference."""
    options = [CONNECTORS[w] if w in CONNECTORS else [w[:k] for k in range(1, len(w) + 1)] for w in words]
    return {"".join(parts) for parts in itertools.product(*options)}


_WORDS = st.lists(
    st.one_of(st.sampled_from(sorted(CONNECTORS)), st.text(alphabet="abn", min_size=1, max_size=4)),
    min_size=1,
    max_size=4,
).map(tuple)


@settings(max_examples=300, deadline=None)
@given(words=_WORDS, token=st.text(alphabet="abn&", max_size=7))
def test_abbreviates_agrees_with_enumerating_every_spelling(words, token):
    assert abbreviates(token, words) == (token in _spellings(words))


@settings(max_examples=100, deadline=None)
@given(words=_WORDS)
def test_every_enumerated_spelling_is_accepted(words):
    assert all(abbreviates(s, words) for s in _spellings(words))


def test_latest_year_only():
    assert latest_year_only(["pepsico", "2021", "2022"]) == frozenset({"pepsico", "2022"})
    assert latest_year_only(["pepsico", "2022"]) == frozenset({"pepsico", "2022"})
    assert latest_year_only(["q22023", "2022", "1999"]) == frozenset({"q22023", "2022"})
    assert latest_year_only([]) == frozenset()


# --- in the keyword route ------------------------------------------------------------------------
def _filings():
    texts = {
        ("AMERICANEXPRESS_2022_10K", AMEX): "Operating margin improved as card member spending grew.",
        ("BOEING_2022_10K", "The Boeing Company, Form 10-K, fiscal year ended December 31, 2022"): (
            "Operating margin of commercial airplanes improved in 2022."
        ),
        ("PEPSICO_2021_10K", "PepsiCo, Inc., Form 10-K, fiscal year ended December 25, 2021"): (
            "Legal proceedings of 2021 and 2020 are described here."
        ),
        ("PEPSICO_2022_10K", "PepsiCo, Inc., Form 10-K, fiscal year ended December 31, 2022"): (
            "Legal proceedings are described here."
        ),
    }
    nodes = []
    for (doc_id, title), text in texts.items():
        node = TextNode(text=text, id_=doc_id)
        schema.set_segment_facts(node, document_id=doc_id, document_title=title, position=0)
        nodes.append(node)
    return nodes


def _keyword_scores(question, **settings):
    extractor = CriticalKeywordExtractor(use_ner=False, expert_keywords=["American Express", "Boeing", "PepsiCo"])
    retriever = MultiRouteRetriever(nodes=_filings(), keyword_extractor=extractor, beta=2.0, **settings)
    results = retriever.retrieve(question)
    return [r.node.node_id for r in results], {
        r.node.node_id: r.node.metadata[schema.ROUTE_SCORES]["keywords"] for r in results
    }


def test_an_abbreviated_name_counts_as_the_title_keyword():
    question = "Does AMEX have an improving operating margin profile as of 2022?"
    ranked, scores = _keyword_scores(question)
    assert ranked[0] == "AMERICANEXPRESS_2022_10K"
    assert scores["AMERICANEXPRESS_2022_10K"] == 4.0  # americanexpress and 2022, both in the title (weight 2)
    assert scores["BOEING_2022_10K"] == 2.0  # 2022 only
    ranked, scores = _keyword_scores(question, match_name_abbreviations=False)
    assert ranked[0] == "BOEING_2022_10K"  # the text says "operating margin ... 2022" too
    assert scores["AMERICANEXPRESS_2022_10K"] == 2.0


def test_of_several_years_only_the_latest_is_matched_against_titles():
    question = "Has PepsiCo reported any ongoing legal battles from FY2022 and FY2021?"
    ranked, scores = _keyword_scores(question)
    assert ranked[0] == "PEPSICO_2022_10K"
    assert scores["PEPSICO_2022_10K"] == 4.0  # pepsico and 2022 in its title
    assert scores["PEPSICO_2021_10K"] == 3.0  # pepsico in its title; 2021 in its text, counted once
    _, scores = _keyword_scores(question, latest_year_in_titles=False)
    assert scores["PEPSICO_2021_10K"] == scores["PEPSICO_2022_10K"] == 4.0


def test_a_title_names_a_company_by_the_first_words_of_a_longer_name():
    titles = {
        "Adobe Systems Incorporated, Form 10-K, fiscal year ended December 1, 2017": {"adobesystems", "10k", "2017"},
        "Adobe Inc., Form 10-K, fiscal year ended December 2, 2022": {"adobe", "10k", "2022"},
        "American Express Company, Form 10-K, 2022": {"americanexpress", "10k", "2022"},
    }
    spellings = document_names(titles)
    older, newer, amex = (set(k) for k in titles.values())
    assert holds_name("adobe", older, spellings) and holds_name("adobe", newer, spellings)
    assert holds_name("adobesystems", older, spellings)
    # The longer name is not in the shorter one, nor a name in another's letters but not its words.
    assert not holds_name("adobesystems", newer, spellings)
    assert not holds_name("american", amex - {"americanexpress"}, spellings)
    assert holds_name("american", amex, spellings)
    assert not holds_name("ado", older, spellings)
