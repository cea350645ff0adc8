"""The document-count rule and the sharing of the first places (retrievers/focus_share.py)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_hiqa.retrievers.focus_share import (
    NAME,
    PERIOD,
    choose_documents,
    facet_kind,
    named_documents,
    names_written,
    question_facets,
    share_slots,
    slot_pattern,
    tied_documents,
    title_words,
)

FILINGS = {
    "3M_2018": frozenset({"3m", "2018", "10k"}),
    "3M_2022": frozenset({"3m", "2022", "10k"}),
    "BOEING_2018": frozenset({"boeing", "2018", "10k"}),
    "BOEING_2022": frozenset({"boeing", "2022", "10k"}),
    "PEPSICO_2021": frozenset({"pepsico", "2021", "10k"}),
    "PEPSICO_2022": frozenset({"pepsico", "2022", "10k"}),
}


def test_facet_kinds():
    assert [facet_kind(k) for k in ("2018", "q22023", "4q2023", "3m", "10k", "nx2041")] == [
        PERIOD, PERIOD, PERIOD, NAME, NAME, NAME
    ]


def test_names_written_with_a_capital_are_title_names():
    titles = {"a": frozenset({"bestbuy", "2023"}), "b": frozenset({"square", "2020"}), "c": frozenset({"boeing", "3m"})}
    question = "Compare the Business of Boeing's units, 3M and Best Buy in FY2023; square feet of NIKE"
    assert names_written(question, title_words(titles)) == ["boeing", "3m", "bestbuy"]
    assert names_written("What is Square's revenue in 2020?", title_words(titles)) == ["square"]  # periods are not names
    assert names_written("", title_words(titles)) == []


def test_question_facets_keep_title_keywords_and_drop_one_inside_another():
    titles = {"a": frozenset({"nx2041", "2041"}), "b": frozenset({"amcor", "q22023", "2023"})}
    assert question_facets(["nx2041", "2041", "dropout"], title_words(titles)) == ["nx2041"]
    assert question_facets(["amcor", "q22023", "2023", "fy2023"], title_words(titles)) == ["amcor", "q22023"]
    assert question_facets(["x"], title_words({})) == []


@pytest.mark.parametrize(
    "first, facets, node_keywords, expected",
    [
        # one company, two years far apart: the other year's filing of the same company
        ("3M_2022", ["3m", "2018", "2022"], [["2022", "2021"]], ["3M_2018"]),
        # the comparatives of the best filing's top nodes cover the earlier year: one filing
        ("PEPSICO_2022", ["pepsico", "2022", "2021"], [["2022", "2021"], ["2021"], []], []),
        # a year one of three top nodes mentions (a five-year table) is not covered
        ("3M_2022", ["3m", "2018", "2022"], [["2022", "2018"], ["2022"], ["2022"]], ["3M_2018"]),
        # two companies, one year: the second company's filing of that year
        ("3M_2022", ["3m", "boeing", "2022"], [], ["BOEING_2022"]),
        # a name is covered by a title only, never by a node that mentions it
        ("3M_2022", ["3m", "boeing", "2022"], [["boeing"]], ["BOEING_2022"]),
        # one value per kind: a single-document question
        ("3M_2018", ["3m", "2018"], [], []),
        # a value no title holds together with what the question names once adds nothing
        ("PEPSICO_2022", ["pepsico", "2022", "2018"], [], []),
    ],
)
def test_named_documents_hand_examples(first, facets, node_keywords, expected):
    order = [first]
    assert named_documents(first, facets, FILINGS, node_keywords, order) == expected


def test_named_documents_prefer_the_ranking_then_the_titles_that_hold_more_facets():
    titles = {**FILINGS, "3M_2018_Q": frozenset({"3m", "2018", "10q"})}
    facets = ["3m", "2018", "2022"]
    assert named_documents("3M_2022", facets, titles, [], ["3M_2022", "3M_2018_Q"]) == ["3M_2018_Q"]
    assert named_documents("3M_2022", facets, titles, [], ["3M_2022"]) == ["3M_2018"]  # id breaks the tie


def test_a_list_of_products_names_each_datasheet():
    sheets = {f"NX-{n}": frozenset({f"nx{n}"}) for n in (2040, 2041, 2044, 2049)}
    facets = ["nx2041", "nx2044", "nx2049"]
    assert named_documents("NX-2044", facets, sheets, [["nx2041"]], ["NX-2044"]) == ["NX-2041", "NX-2049"]


# -- properties against the definitions ---------------------------------------------------

_KEYS = ["a", "b", "c", "2018", "2020", "2022"]
_titles = st.dictionaries(
    st.sampled_from([f"d{i}" for i in range(6)]), st.frozensets(st.sampled_from(_KEYS), min_size=1), min_size=1
)


@settings(max_examples=200, deadline=None)
@given(
    _titles, st.lists(st.sampled_from(_KEYS), unique=True), st.lists(st.frozensets(st.sampled_from(_KEYS)), max_size=4),
    st.data(),
)
def test_named_documents_properties(titles, facets, node_keywords, data):
    first = data.draw(st.sampled_from(sorted(titles)))
    order = data.draw(st.permutations(sorted(titles)))
    added = named_documents(first, facets, titles, node_keywords, order)
    kinds = {}
    for f in facets:
        kinds.setdefault(facet_kind(f), []).append(f)
    multi = {k: v for k, v in kinds.items() if len(v) >= 2}
    assert first not in added and len(added) == len(set(added))
    assert len(added) <= sum(len(v) for v in multi.values())
    if not multi:
        assert added == []
    covered = set(titles[first]) | set().union(*(titles[d] for d in added))
    for kind, values in multi.items():
        once = {f for f in facets if facet_kind(f) != kind and len(kinds[facet_kind(f)]) == 1 and f in titles[first]}
        reported = {k for k in _KEYS if node_keywords and 2 * sum(k in n for n in node_keywords) >= len(node_keywords)}
        own = set(titles[first]) | (reported if kind == PERIOD else set())
        for value in values:
            if value in own or value in covered:
                continue
            # Nothing could have covered it: no other title holds it with what the question names once.
            assert not [d for d in titles if d != first and value in titles[d] and once <= titles[d]]
    for doc in added:  # every added document holds a value of a kind named twice
        assert any(v in titles[doc] for values in multi.values() for v in values)


@given(_titles, st.lists(st.sampled_from(_KEYS), unique=True), st.data())
def test_tied_documents_match_their_definition(titles, facets, data):
    first = data.draw(st.sampled_from(sorted(titles)))
    head = data.draw(st.lists(st.sampled_from(sorted(titles)), max_size=10))
    wanted = {f for f in facets if f in titles[first]}
    expected = [d for d in dict.fromkeys(head) if d != first and wanted <= titles[d]]
    assert tied_documents(first, facets, titles, head) == expected


def test_choose_documents_prefers_named_over_tied_and_caps():
    assert choose_documents("a", ["b"], ["c"]) == ["a", "b"]
    assert choose_documents("a", [], ["c", "d"]) == ["a", "c", "d"]
    assert choose_documents("a", [], ["c", "d"], cap=2) == ["a", "c"]
    assert choose_documents("a", ["b"], [], cap=1) == ["a"]


# -- sharing the first places --------------------------------------------------------------


def test_named_documents_take_turns_and_tied_ones_take_the_heads_places():
    assert slot_pattern(["a", "b"], ["a", "a", "a", "x"], named=True) == ["a", "b", "a", "b"]
    assert slot_pattern(["a", "b", "c"], ["a"], named=True) == ["a", "b", "c"]
    # x is not focused: its place goes to the best document; b gets the place of its first node, once
    assert slot_pattern(["a", "b"], ["a", "x", "a", "b"], named=False) == ["a", "a", "a", "b"]
    assert slot_pattern(["a", "b", "c"], ["a", "b", "b", "c", "a", "c"], named=False) == ["a", "b", "a", "c", "a", "a"]
    assert slot_pattern([], ["a"], named=False) == []


def test_share_slots_hand_example():
    rankings = {"a": ["a1", "a2", "a3"], "b": ["b1", "b2"]}
    assert share_slots(rankings, ["a", "b", "b", "b", "a"], ["a", "b"]) == ["a1", "b1", "b2", "a2", "a3"]
    # a single document: its own ranking, unchanged
    assert share_slots({"a": ["a1", "a2"]}, ["a"] * 5, ["a"]) == ["a1", "a2"]


def _share_reference(rankings, pattern, documents):
    """Place by place: the pattern's document if it has nodes left, else the first document
    (in ``documents`` order) that has; after the pattern, round robin."""
    left = {d: list(rankings[d]) for d in documents}
    out = []
    for doc in pattern:
        pick = doc if left.get(doc) else next((d for d in documents if left[d]), None)
        if pick is not None:
            out.append(left[pick].pop(0))
    while any(left.values()):
        for d in documents:
            if left[d]:
                out.append(left[d].pop(0))
    return out


@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=3, unique=True).flatmap(
        lambda sizes: st.tuples(
            st.just({f"d{i}": [f"d{i}n{j}" for j in range(n)] for i, n in enumerate(sizes)}),
            st.lists(st.sampled_from([f"d{i}" for i in range(len(sizes))] + ["other"]), max_size=12),
        )
    )
)
def test_share_slots_matches_the_reference_and_keeps_every_node_once(case):
    rankings, pattern = case
    documents = list(rankings)
    out = share_slots(rankings, pattern, documents)
    assert out == _share_reference(rankings, pattern, documents)
    assert sorted(out) == sorted(n for nodes in rankings.values() for n in nodes)
    for doc, nodes in rankings.items():  # each document's own order is kept
        assert [n for n in out if n in set(nodes)] == nodes
