"""Which filing among look-alikes: the period and form a title names and a question implies,
and the document focus's preference for it."""

import datetime

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import QueryBundle

from llama_index_hiqa import DocumentFocusRetriever, MultiRouteRetriever, schema
from llama_index_hiqa.retrievers.document_period import (
    ANNUAL,
    QUARTERLY,
    RELEASE,
    DocumentPeriod,
    QuestionPeriod,
    document_period,
    implied_documents,
    implied_period_first,
    preferred_document,
    question_period,
)
from llama_index_hiqa.retrievers.title_match import document_names
from llama_index_hiqa.storage.vector_store import MatrixVectorStore
from llama_index_hiqa.testing import HashingEmbedding
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor
from tests.test_document_focus import _node

D = datetime.date


# --- what a title names ---------------------------------------------------------------


@pytest.mark.parametrize(
    "title, form, end, years",
    [
        ("3M Company, Form 10-K, fiscal year ended December 31, 2018", ANNUAL, D(2018, 12, 31), {2018}),
        ("PepsiCo, Inc., Form 8-K, report dated May 26, 2023 (PEPSICO 2023 8K dated-2023-05-30)", RELEASE,
         D(2023, 5, 26), {2023}),
        ("Amcor PLC, Form 10-Q, quarter ended December 31, 2022 (AMCOR 2023Q2 10Q)", QUARTERLY, D(2022, 12, 31), {2022}),
        ("Amcor 4Q 2023 Exhibit 99.1 - June 30, 2023 (AMCOR 2023Q4 EARNINGS)", RELEASE, D(2023, 6, 30), {2023}),
        ("Ulta Beauty Announces Fourth Quarter Fiscal 2022 Results (ULTABEAUTY 2023Q4 EARNINGS)", RELEASE, None, {2022}),
        ("JOHNSON JOHNSON 2022Q4 EARNINGS", RELEASE, None, set()),  # "2022Q4" names a quarter, not a year
        ("AMAZON 2019 10K", ANNUAL, None, {2019}),
        ("NX-2043 Precision Voltage Regulator", "", None, set()),  # a part number, not a year
        ("", "", None, set()),
    ],
)
def test_document_period_reads_form_date_and_years_from_the_title(title, form, end, years):
    period = document_period(title)
    assert (period.form, period.end, set(period.years)) == (form, end, years)


@pytest.mark.parametrize(
    "text, quarters",
    [
        ("Amcor 4Q 2023 Exhibit 99.1 (AMCOR 2023Q4 EARNINGS)", {(2023, 4)}),
        ("Ulta Beauty Announces Fourth Quarter Fiscal 2022 Results", {(2022, 4)}),
        ("PepsiCo Reports First-Quarter 2023 Results", {(2023, 1)}),
        ("JOHNSON JOHNSON 2022Q4 EARNINGS", {(2022, 4)}),
        ("3M Company, Form 10-K, fiscal year ended December 31, 2018", set()),
    ],
)
def test_document_period_reads_the_fiscal_quarters_a_title_names(text, quarters):
    assert set(document_period(text).quarters) == quarters


def test_question_period_reads_quarters_as_questions_write_them():
    assert question_period("liability as oF Q2 of FY2023 close?").quarters == ((2023, 2),)
    assert question_period("Q2 of FY2023 compared to Q2 of FY2022").quarters == ((2023, 2), (2022, 2))
    assert question_period("sales in the third quarter of 2021").quarters == ((2021, 3),)
    assert question_period("What Was AMCOR's Adjusted Non GAAP EBITDA for FY 2023").release  # a release's measure


def test_an_impossible_date_in_a_title_is_no_date():
    assert document_period("Acme, Form 8-K, report dated February 30, 2023").end is None
    assert document_period("ACME 8K dated-2023-02-30").end is None


# --- what a question implies ------------------------------------------------------------


@pytest.mark.parametrize(
    "question, years, dates, tense, release",
    [
        ("Does 3M have a healthy quick ratio?", (), (), "present", False),
        ("Has AMCOR's quick ratio improved or declined between FY2023 and FY2022?", (2023, 2022), (), "present", False),
        ("What was the gain, as of August 30, 2023?", (2023,), (D(2023, 8, 30),), "past", False),
        ("What drove the reduction in SG&A in FY2023?", (2023,), (), "", False),
        ("Did Amcor raise its guidance?", (), (), "past", True),
        ("What is the Q2 revenue in the earnings release?", (), (), "present", True),
        ("Revenue of the second quarter", (), (), "", True),
    ],
)
def test_question_period(question, years, dates, tense, release):
    assert question_period(question) == QuestionPeriod(years, dates, tense, release)


# --- the preference among look-alikes ------------------------------------------------------

PERIODS = {
    "k2018": DocumentPeriod(ANNUAL, D(2018, 12, 31), frozenset({2018})),
    "k2022": DocumentPeriod(ANNUAL, D(2022, 12, 31), frozenset({2022})),
    "q2023": DocumentPeriod(QUARTERLY, D(2023, 6, 30), frozenset({2023})),
    "release2022": DocumentPeriod(RELEASE, D(2023, 1, 31), frozenset({2022, 2023})),
    "k8_2023": DocumentPeriod(RELEASE, D(2023, 8, 30), frozenset({2023})),
}
ALL = list(PERIODS)


@pytest.mark.parametrize(
    "first, question, expected",
    [
        # a named year: the annual report of that year, not the release that also writes it
        ("k2018", "What is the gross margin as of FY2022?", "k2022"),
        ("release2022", "What is the gross margin as of FY2022?", "k2022"),
        # the release's words: the release of that year
        ("k2022", "What did the FY2022 earnings release report?", "release2022"),
        # a date: the document of that date, whatever its form
        ("k2022", "What is the gain as of August 30, 2023?", "k8_2023"),
        # present tense, no year: the latest annual report; with a quarter's words the latest 10-Q or release
        ("k2018", "Does the company have a healthy quick ratio?", "k2022"),
        ("k2018", "Is the second quarter margin healthy?", "k8_2023"),
        # past tense without a year: the routes' choice stands
        ("k2018", "Did the company pay a dividend?", "k2018"),
        # first fits: kept, even when another candidate fits as well
        ("k2022", "Does the company have a healthy quick ratio?", "k2022"),
        # nothing fits the year: the form still decides, first kept when it fits that
        ("k2018", "What was revenue in FY2015?", "k2018"),
    ],
)
def test_preferred_document(first, question, expected):
    assert preferred_document(first, ALL, PERIODS, question_period(question)) == expected


def test_a_named_quarter_picks_that_quarters_filing_and_a_title_without_a_year_is_of_any_year():
    periods = {
        "k2023": DocumentPeriod(ANNUAL, D(2023, 6, 30), frozenset({2023})),
        "q2": DocumentPeriod(QUARTERLY, D(2022, 12, 31), frozenset({2022}), frozenset({(2023, 2)})),
        "q4release": DocumentPeriod(RELEASE, D(2023, 6, 30), frozenset({2023}), frozenset({(2023, 4)})),
        "undated": DocumentPeriod(RELEASE, None, frozenset(), frozenset({(2022, 4)})),
    }
    docs = list(periods)
    # "Q2 of FY2023" is the 10-Q of that quarter, though its period ended in December 2022
    assert preferred_document("q4release", docs, periods, question_period("Amcor's restructuring liability as of Q2 of FY2023?")) == "q2"
    # a release titled without a year may be the FY2023 one: kept when the question asks for a release
    assert preferred_document("undated", docs, periods, question_period("Is adjusted EPS expected to grow in FY2023?")) == "undated"
    assert preferred_document("undated", docs, periods, question_period("What was the FY2023 capital expenditure?")) == "k2023"


def test_preferred_document_keeps_first_without_look_alikes_or_periods():
    wanted = question_period("Does the company have a healthy quick ratio?")
    assert preferred_document("k2018", ["k2018"], PERIODS, wanted) == "k2018"
    assert preferred_document("unknown", ALL, PERIODS, wanted) == "unknown"
    # titles naming no form (articles, datasheets): no period to prefer, whatever their years
    articles = {"cup": DocumentPeriod("", None, frozenset()), "cup2010": DocumentPeriod("", None, frozenset({2010}))}
    assert preferred_document("cup", ["cup", "cup2010"], articles, wanted) == "cup"
    assert preferred_document("k2018", ["k2018", "cup2010"], {**PERIODS, **articles}, wanted) == "k2018"
    # candidates best first: of two that fit alike, the better ranked
    tied = {"a": DocumentPeriod(ANNUAL, D(2022, 1, 1), frozenset({2022})), "b": DocumentPeriod(ANNUAL, D(2022, 1, 1), frozenset({2022})),
            "c": DocumentPeriod(RELEASE, None, frozenset({2022}))}
    assert preferred_document("c", ["c", "b", "a"], tied, question_period("Revenue in FY2022?")) == "b"


def test_implied_documents_are_what_the_preference_chooses_from():
    # present tense: the latest annual report alone
    assert implied_documents("k2018", ALL, PERIODS, question_period("Does the company have a healthy quick ratio?")) == ["k2022"]
    # a year and a release's words: that year's releases
    assert implied_documents("k2022", ALL, PERIODS, question_period("What did the FY2022 earnings release report?")) == ["release2022"]
    # past tense without a year: nothing is implied, every look-alike stays
    assert implied_documents("k2018", ALL, PERIODS, question_period("Did the company pay a dividend?")) == ALL


def test_implied_period_first_says_which_look_alikes_the_question_rules_out():
    titles = {"k2018": "Acme, Form 10-K, fiscal year ended December 31, 2018",
              "k2022": "Acme, Form 10-K, fiscal year ended December 31, 2022",
              "q2023": "Acme, Form 10-Q, quarter ended June 30, 2023",
              "globex": "Globex, Form 10-K, fiscal year ended December 31, 2022"}
    keywords = {"k2018": frozenset({"acme", "2018"}), "k2022": frozenset({"acme", "2022"}),
                "q2023": frozenset({"acme", "2023"}), "globex": frozenset({"globex", "2022"})}
    head = ["k2018", "q2023", "k2018", "k2022"]
    choice = implied_period_first("Does Acme have a healthy quick ratio?", "k2018", head, ["acme"], keywords, titles)
    assert choice.first == "k2022" and choice.head_documents == ["k2022", "q2023", "k2022", "k2018"]
    assert choice.ruled_out == {"k2018", "q2023"}  # another company's filing is no look-alike
    past = implied_period_first("Did Acme pay a dividend?", "k2018", head, ["acme"], keywords, titles)
    assert past == (("k2018", head, frozenset()))
    assert implied_period_first("Does it have a healthy quick ratio?", "k2018", head, [], keywords, titles).ruled_out == frozenset()


def test_a_company_renamed_between_its_filings_is_still_a_look_alike():
    """2017's cover reads "Adobe Systems Incorporated" (keyword ``adobesystems``), 2022's
    "Adobe Inc." (``adobe``): a question about FY2017 that the routes put on 2022 moves to 2017."""
    titles = {"a2017": "Adobe Systems Incorporated, Form 10-K, fiscal year ended December 1, 2017",
              "a2022": "Adobe Inc., Form 10-K, fiscal year ended December 2, 2022"}
    keywords = {"a2017": frozenset({"adobesystems", "10k", "2017"}), "a2022": frozenset({"adobe", "10k", "2022"})}
    spellings = document_names({titles[d]: keywords[d] for d in titles})
    question = "What is the FY2017 operating cash flow ratio for Adobe?"
    moved = implied_period_first(question, "a2022", ["a2022", "a2017"], ["adobe", "2017"], keywords, titles, spellings)
    assert moved.first == "a2017" and moved.head_documents == ["a2017", "a2022"]
    # Without the titles' spellings a name is only ever the same keyword: nothing looks alike.
    assert implied_period_first(question, "a2022", ["a2022", "a2017"], ["adobe", "2017"], keywords, titles).first == "a2022"


# --- inside the document focus --------------------------------------------------------------

TITLES = {
    "acme2018": "Acme Corporation, Form 10-K, fiscal year ended December 31, 2018",
    "acme2022": "Acme Corporation, Form 10-K, fiscal year ended December 31, 2022",
    "acme8k": "Acme Corporation, Form 8-K, report dated March 3, 2023",
    "globex2022": "Globex Corporation, Form 10-K, fiscal year ended December 31, 2022",
}


@pytest.fixture(scope="module")
def extractor():
    return CriticalKeywordExtractor()  # with NER: a company's name is a title keyword


def _filings(extractor, **focus):
    nodes = []
    for doc, title in TITLES.items():
        # The 2018 report writes the question's words most: the routes put it first.
        extra = " acme improving gross margin profile acme gross margin profile" if doc == "acme2018" else ""
        nodes += [
            _node(f"{doc}-mdna", doc, 10, f"gross margin discussion{extra}", "Management discussion", title=title),
            _node(f"{doc}-risk", doc, 4, "risks include supply chain disruption", "Risk factors", title=title),
        ]
    embed = HashingEmbedding(dim=64)
    index = VectorStoreIndex(nodes, embed_model=embed, storage_context=StorageContext.from_defaults(vector_store=MatrixVectorStore()))
    multi = MultiRouteRetriever.from_index(index, similarity_top_k=4, keyword_extractor=extractor)
    return multi, DocumentFocusRetriever(multi, embed_model=embed, **focus)


@pytest.mark.parametrize(
    "question, expected",
    [
        ("Does Acme have an improving gross margin profile?", "acme2022"),  # now: the latest 10-K
        ("Does Acme have an improving gross margin profile as of FY2022?", "acme2022"),
        ("Did Acme report an improving gross margin profile on March 3, 2023?", "acme8k"),  # its date
        ("What did Acme say about gross margin in FY2018?", "acme2018"),  # the year named: kept
        ("Did Acme report a gross margin profile?", "acme2018"),  # past, no year: the routes' choice
    ],
)
def test_the_focus_puts_the_implied_look_alike_first(extractor, question, expected):
    multi, focus = _filings(extractor)
    results = focus.retrieve(question)
    assert schema.get_document_id(results[0].node) == expected
    assert focus.full_ranking(question)[0] == results[0].node.node_id
    choice = focus.choose(focus._embedded(QueryBundle(question)), multi.retrieve(question))
    assert choice.documents[0] == expected


def test_a_tied_look_alike_the_question_rules_out_gets_no_first_place(extractor):
    multi, focus = _filings(extractor)
    question = "Does Acme have an improving gross margin profile?"  # present tense: the latest 10-K
    head = multi.retrieve(question)
    assert {schema.get_document_id(hit.node) for hit in head[:2]} == {"acme2018", "acme2022"}  # above the cut
    choice = focus.choose(focus._embedded(QueryBundle(question)), head)
    # the routes' first (the 2018 report) is still focused, but every first place is the 2022 report's
    assert choice.documents == ["acme2022", "acme2018"]
    assert choice.pattern == ["acme2022"] * len(head)
    ranked = [schema.get_document_id(hit.node) for hit in focus.retrieve(question)]
    assert ranked[:2] == ["acme2022", "acme2022"]  # the 2022 report has two nodes; then the 2018 report's
    assert "acme2018" in ranked


@pytest.mark.parametrize("question", ["Does Acme have an improving gross margin profile?", "Is the gross margin profile improving?"])
def test_the_routes_choice_stands_with_the_preference_off_or_no_company_named(extractor, question):
    multi, off = _filings(extractor, prefer_implied_period=False)
    assert schema.get_document_id(multi.retrieve(question)[0].node) == "acme2018"  # the routes' choice
    assert schema.get_document_id(off.retrieve(question)[0].node) == "acme2018"
    # present tense but no name: the look-alikes would be every filing; nothing is moved
    _, on = _filings(extractor)
    moved = schema.get_document_id(on.retrieve(question)[0].node)
    assert moved == ("acme2022" if "Acme" in question else "acme2018")
