import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index_hiqa.errors import InvalidSettingError
from llama_index.core.schema import QueryBundle, TextNode

from llama_index_hiqa import DocumentFocusRetriever, HiQAPack, MultiRouteRetriever, schema
from llama_index_hiqa.retrievers.document_focus import (
    content_words,
    focus_scores,
    heading_text,
    heading_word_share,
    min_max,
    numeric_share,
    one_per_page_first,
)
from llama_index_hiqa.storage.vector_store import MatrixVectorStore
from llama_index_hiqa.testing import HashingEmbedding


# --- pure functions ---------------------------------------------------------------------


def _one_per_page_reference(ranked, page_of):
    """Brute force: a node is 'first' when no earlier node of the ranking has its page."""
    key = lambda i: (i,) if page_of.get(i) is None else page_of[i]  # noqa: E731
    firsts = [i for n, i in enumerate(ranked) if all(key(j) != key(i) for j in ranked[:n])]
    return firsts + [i for i in ranked if i not in firsts]


@given(
    st.lists(st.integers(0, 30), unique=True, max_size=25).flatmap(
        lambda ids: st.tuples(st.just([f"n{i}" for i in ids]), st.lists(st.one_of(st.none(), st.integers(0, 4)), min_size=len(ids), max_size=len(ids)))
    )
)
def test_one_per_page_first_matches_the_brute_force_reference(case):
    ranked, pages = case
    page_of = dict(zip(ranked, pages))
    out = one_per_page_first(ranked, page_of)
    assert out == _one_per_page_reference(ranked, page_of)
    assert sorted(out) == sorted(ranked)


def test_one_per_page_first_hand_example():
    page_of = {"a": 1, "b": 1, "c": 2, "d": None, "e": 2}
    assert one_per_page_first(["a", "b", "c", "d", "e"], page_of) == ["a", "c", "d", "b", "e"]


def test_numeric_share_counts_money_percent_and_bracketed_numbers():
    assert numeric_share("Net sales $ 14,694 (11,969) 7.5% 2023") == pytest.approx(4 / 7)
    assert numeric_share("Purchases of property, plant and equipment") == 0.0
    assert numeric_share("") == 0.0


def test_numeric_share_reads_numbers_in_markdown_emphasis():
    # a statement's current-year column as the reader writes it: bold
    assert numeric_share("Accounts payable **408** 24 148 **(6,701)** _12.5%_") == pytest.approx(5 / 7)
    assert numeric_share("**Total** **$**") == 0.0  # emphasis alone is not a number


def test_min_max_counts_a_missing_id_as_the_lowest_and_flat_scores_as_zero():
    assert min_max({"a": 2.0, "b": 4.0}, ["a", "b", "c"]) == {"a": 0.0, "b": 1.0, "c": 0.0}
    assert min_max({"a": 3.0, "b": 3.0}, ["a", "b"]) == {"a": 0.0, "b": 0.0}
    assert min_max({}, ["a"]) == {"a": 0.0}


def test_content_words_are_stemmed_without_stop_words():
    assert content_words(["Consolidated Statements of Cash Flows", "the balance sheet", ""]) == [
        frozenset({"consolid", "statement", "cash", "flow"}), frozenset({"balanc", "sheet"}), frozenset()
    ]


def test_heading_word_share_is_the_best_levels_share_of_named_words():
    question = frozenset({"balanc", "sheet", "work", "capit"})
    levels = [frozenset({"item", "financi", "statement"}), frozenset({"consolid", "balanc", "sheet"})]
    assert heading_word_share(question, levels) == pytest.approx(2 / 3)
    assert heading_word_share(question, []) == 0.0
    assert heading_word_share(question, [frozenset()]) == 0.0


@given(
    st.frozensets(st.sampled_from("abcdef")),
    st.lists(st.frozensets(st.sampled_from("abcdef")), max_size=4),
)
def test_heading_word_share_matches_its_definition(question, levels):
    shares = [sum(1 for w in level if w in question) / len(level) for level in levels if level]
    assert heading_word_share(question, levels) == pytest.approx(max(shares, default=0.0))
    assert 0.0 <= heading_word_share(question, levels) <= 1.0


def test_focus_scores_hand_computed():
    ids = ["a", "b", "c"]
    out = focus_scores(
        ids, vector={"a": 0.8, "b": 0.6, "c": 0.4}, bm25={"b": 6.0, "c": 2.0},
        heading={"a": 0.1, "c": 0.5}, table={"c": 1.0}, alpha=0.7, heading_weight=0.2, table_weight=0.3,
    )
    assert out["a"] == pytest.approx(0.7 * 1.0 + 0.3 * 0.0 + 0.2 * 0.0)
    assert out["b"] == pytest.approx(0.7 * 0.5 + 0.3 * 1.0 + 0.2 * 0.0)
    assert out["c"] == pytest.approx(0.7 * 0.0 + 0.3 * 0.0 + 0.2 * 1.0 + 0.3)
    named = focus_scores(
        ids, vector={"a": 0.8, "b": 0.6, "c": 0.4}, bm25={"b": 6.0, "c": 2.0}, heading={}, table={},
        alpha=0.7, heading_weight=0.2, table_weight=0.3, heading_words={"b": 0.5}, heading_words_weight=0.4,
    )
    assert named["b"] == pytest.approx(0.7 * 0.5 + 0.3 * 1.0 + 0.4 * 0.5)  # not normalised
    assert named["a"] == pytest.approx(0.7)


# --- the retriever ----------------------------------------------------------------------


def _node(node_id, document, page, text, heading=None, title=None):
    node = TextNode(id_=node_id, text=text)
    node.metadata[schema.DOCUMENT_ID] = document
    node.metadata[schema.DOCUMENT_TITLE] = title or f"{document} annual report"
    node.metadata[schema.PAGE_START] = node.metadata[schema.PAGE_END] = page
    if heading:
        schema.set_heading_path(node, [["", heading, 1]])
    # The routes read the text alone, so the heading similarity is a signal of its own here.
    node.excluded_embed_metadata_keys = list(node.metadata)
    return node


def _collection():
    nodes = []
    for doc in ("acme", "globex"):
        nodes += [
            _node(f"{doc}-mdna-1", doc, 10, f"{doc} capital spending grew as the company invested in plants", "Management discussion"),
            _node(f"{doc}-mdna-2", doc, 10, f"{doc} capital spending outlook for next year remains strong", "Management discussion"),
            _node(f"{doc}-risk", doc, 4, f"{doc} risks include supply chain disruption", "Risk factors"),
            _node(f"{doc}-cash", doc, 30, "Purchases of property 1,234 (567) 890 2018 2017 45 67", "Consolidated statement of cash flows"),
            _node(f"{doc}-notes", doc, 40, f"{doc} leases and commitments", "Notes"),
        ]
    return nodes


def _retrievers(top_k=4, **focus):
    embed = HashingEmbedding(dim=64)
    nodes = _collection()
    index = VectorStoreIndex(nodes, embed_model=embed, storage_context=StorageContext.from_defaults(vector_store=MatrixVectorStore()))
    multi = MultiRouteRetriever.from_index(index, similarity_top_k=top_k, keyword_extractor=None)
    return multi, DocumentFocusRetriever(multi, embed_model=embed, **focus), nodes


def test_the_best_documents_nodes_come_first_ranked_inside_it():
    multi, focus, _ = _retrievers(focus_documents=1)
    question = "acme capital spending cash flows statement"
    head = multi.retrieve(question)
    results = focus.retrieve(question)
    top_document = schema.get_document_id(head[0].node)
    assert len(results) == 4
    assert [schema.get_document_id(r.node) for r in results] == [top_document] * 4
    scores = [r.node.metadata[schema.ROUTE_SCORES] for r in results]
    assert {"vector", "bm25", "heading", "heading_words", "table", "focus"} <= set(scores[0])
    # One node per page first: the two nodes of page 10 are not both ahead of another page.
    pages = [r.node.metadata[schema.PAGE_START] for r in results]
    assert pages.count(10) == 1 or pages.index(10) < 3 and pages[1:3].count(10) <= 1


def test_documents_the_question_does_not_tell_apart_share_the_places_the_routes_gave_them():
    multi, focus, _ = _retrievers(top_k=20)  # the head is not full: no top-k cut decides
    question = "capital spending outlook"  # names neither company: the titles tie
    head = multi.retrieve(question)
    choice = focus.choose(QueryBundle(question), head)
    assert choice.facets == [] and not choice.named
    assert sorted(choice.documents) == ["acme", "globex"]
    by_score = sorted(head, key=lambda h: (-round(h.score, 9), schema.get_document_id(h.node)))
    head_documents = [schema.get_document_id(h.node) for h in by_score]
    other = choice.documents[1]
    assert choice.pattern.count(other) == 1 and choice.pattern.index(other) == head_documents.index(other)
    results = focus.retrieve(question)
    assert {schema.get_document_id(r.node) for r in results} == {"acme", "globex"}
    assert all(r.node.metadata[schema.ROUTE_SCORES]["focus_documents"] == 2 for r in results)


def test_several_documents_rank_as_each_alone_with_the_routes_asked_once():
    multi, focus, _ = _retrievers(top_k=20)
    query = focus._embedded(QueryBundle("capital spending outlook cash flows"))
    asked = []
    scores_within = multi.scores_within
    multi.scores_within = lambda q, ids, *rest: asked.append(list(ids)) or scores_within(q, ids, *rest)
    together = focus.rank_documents(query, ["acme", "globex", "initech"])  # initech has no nodes
    assert len(asked) == 1 and len(asked[0]) == 10
    alone = {doc: focus.rank_document(query, [doc]) for doc in ("acme", "globex")}
    assert together == alone
    assert together["acme"][0][2]["focus"] == pytest.approx(max(r[1] for r in alone["acme"]))


def test_a_document_seen_only_where_a_full_head_is_cut_is_not_focused():
    from llama_index.core.schema import NodeWithScore

    _, focus, _ = _retrievers(top_k=4)
    head = [NodeWithScore(node=_node(f"n{i}", doc, 1, "t"), score=score)
            for i, (doc, score) in enumerate([("acme", 2.0), ("globex", 1.5), ("acme", 1.0), ("initech", 1.0)])]
    # initech is only at the lowest score of a full head (4 = top k): the cut decided it
    assert focus._above_the_cut(head) == ["acme", "globex"]
    assert focus._above_the_cut(head[1:]) == ["globex", "acme", "initech"]  # 3 < top k: nothing was cut
    full = head[1:] + [NodeWithScore(node=_node("n9", "hooli", 1, "t"), score=0.5)]  # hooli is cut now
    # two documents, the second seen once above the lowest score: it stays
    pair = [NodeWithScore(node=_node(f"p{i}", doc, 1, "t"), score=score)
            for i, (doc, score) in enumerate([("acme", 2.0), ("globex", 1.9), ("acme", 1.2), ("acme", 1.1)])]
    assert focus._above_the_cut(pair) == ["acme", "globex"]
    assert focus._above_the_cut(full) == ["globex", "acme", "initech"]


@pytest.mark.parametrize(
    "question, signal",
    [
        ("acme consolidated statement of cash flows", "heading_weight"),
        ("how much was acme capital spending", "table_weight"),  # a question for a figure: the whole bonus
        ("acme capital spending in the statement of cash flows", "heading_words_weight"),
    ],
)
def test_each_heading_signal_and_the_table_bonus_lift_the_statement(question, signal):
    off = {"table_weight": 0.0, "heading_weight": 0.0, "heading_words_weight": 0.0}
    _, plain, _ = _retrievers(**off)
    _, lifted, _ = _retrievers(**{**off, signal: 2.0})
    assert plain.retrieve(question)[0].node.node_id != "acme-cash"
    best = lifted.retrieve(question)[0]
    assert best.node.node_id == "acme-cash"
    row = best.node.metadata[schema.ROUTE_SCORES]
    assert row["table"] == 1.0
    # Heading vectors and heading words are computed only when their weight is not zero.
    assert (row["heading"] is not None and row["heading"] > 0) == (signal == "heading_weight")
    if signal == "heading_words_weight":
        assert row["heading_words"] == pytest.approx(3 / 4)  # statement, cash, flow of 4 words
    else:
        assert row["heading_words"] is None


def test_focus_off_returns_the_multi_route_ranking_unchanged():
    multi, focus, _ = _retrievers(focus_documents=0)
    question = "globex risks supply chain"
    assert [r.node.node_id for r in focus.retrieve(question)] == [r.node.node_id for r in multi.retrieve(question)]


def test_async_retrieve_and_full_ranking_agree_with_retrieve():
    _, focus, nodes = _retrievers()
    question = "globex capital spending outlook"
    ids = [r.node.node_id for r in focus.retrieve(question)]
    assert [r.node.node_id for r in asyncio.run(focus.aretrieve(question))] == ids
    ranking = focus.full_ranking(question)
    assert ranking[: len(ids)] == ids
    assert sorted(ranking) == sorted(n.node_id for n in nodes)


def test_an_empty_question_returns_nothing():
    _, focus, _ = _retrievers()
    assert focus.retrieve("   ") == []


@pytest.mark.parametrize(
    "settings, name",
    [({"focus_documents": -1}, "focus_documents"), ({"table_number_share": 0}, "table_number_share"), ({"bogus": 1}, "bogus")],
)
def test_bad_settings_fail_at_construction_naming_the_setting(settings, name):
    multi, _, _ = _retrievers()
    with pytest.raises(InvalidSettingError, match=name):
        DocumentFocusRetriever(multi, **settings)
    with pytest.raises(InvalidSettingError, match=name):
        HiQAPack.empty(embed_model=HashingEmbedding(dim=16), document_focus=settings)


def test_heading_text_leaves_the_document_title_out():
    node = _node("x", "acme", 1, "text", "Consolidated balance sheet")
    assert heading_text(node) == "Consolidated balance sheet"
    assert heading_text(_node("y", "acme", 1, "text")) == ""


def test_the_pack_answers_through_the_document_focus_unless_it_is_off():
    documents = [
        Document(text=n.text, metadata={schema.DOCUMENT_ID: n.metadata[schema.DOCUMENT_ID]}) for n in _collection()[:5]
    ]
    on = HiQAPack.from_documents(documents, embed_model=HashingEmbedding(dim=32), keywords={"use_ner": False})
    off = HiQAPack.from_documents(
        documents, embed_model=HashingEmbedding(dim=32), keywords={"use_ner": False}, document_focus={"focus_documents": 0}
    )
    assert isinstance(on.as_retriever(), DocumentFocusRetriever)
    assert isinstance(off.as_retriever(), MultiRouteRetriever)


# --- several documents (the focus follows the question) -------------------------------------


@pytest.fixture(scope="module")
def demo_pack():
    from llama_index_hiqa.demo import load_demo_documents
    from tests.pack_helpers import HashEmbedding

    return HiQAPack.from_documents(load_demo_documents(), embed_model=HashEmbedding(), keywords={"use_ner": False})


def _first_documents(retriever, question, k=5):
    return [schema.get_document_id(hit.node) for hit in retriever.retrieve(question)[:k]]


def test_a_two_datasheet_question_gets_both_datasheets_in_the_first_places(demo_pack):
    question = "Compare the typical dropout voltage of the NX-2041 and the NX-2044."
    focus = demo_pack.as_retriever()
    choice = focus.choose(focus._embedded(QueryBundle(question)), demo_pack.multi_route.retrieve(question))
    assert sorted(choice.documents) == ["NX-2041", "NX-2044"] and choice.named
    first = _first_documents(focus, question)
    assert set(first) == {"NX-2041", "NX-2044"}
    assert first[0] != first[1]  # the named datasheets take turns
    fixed = DocumentFocusRetriever(demo_pack.multi_route, embed_model=demo_pack.embed_model, focus_documents=1)
    assert len(set(_first_documents(fixed, question))) == 1  # the previous behaviour: one datasheet
    ranking = focus.full_ranking(question)
    assert [schema.get_document_id(n) for n in demo_pack.multi_route.nodes_by_id(ranking[:5]).values()]


def test_a_single_datasheet_question_keeps_its_datasheet_alone(demo_pack):
    question = "What is the typical dropout voltage of the NX-2044?"
    focus = demo_pack.as_retriever()
    assert set(_first_documents(focus, question)) == {"NX-2044"}
    fixed = DocumentFocusRetriever(demo_pack.multi_route, embed_model=demo_pack.embed_model, focus_documents=1)
    assert [h.node.node_id for h in focus.retrieve(question)] == [h.node.node_id for h in fixed.retrieve(question)]


def test_three_named_datasheets_each_reach_the_first_places(demo_pack):
    question = "Which of the NX-2040, NX-2045 and NX-2049 has the lowest quiescent current?"
    first = _first_documents(demo_pack.as_retriever(), question)
    assert {"NX-2040", "NX-2045", "NX-2049"} <= set(first)
    capped = DocumentFocusRetriever(demo_pack.multi_route, embed_model=demo_pack.embed_model, focus_documents=2)
    assert len(set(_first_documents(capped, question))) == 2


def test_generated_cross_document_questions_on_the_demo(demo_pack):
    from llama_index_hiqa.evaluation.cross_document import cross_document_questions

    titles = demo_pack.multi_route.document_title_keywords()
    questions = cross_document_questions(demo_pack.nodes, titles, per_rule=6)
    again = cross_document_questions(demo_pack.nodes, titles, per_rule=6)
    assert [q.question for q in questions] == [q.question for q in again]  # seeded
    assert {q.rule for q in questions} == {"two_names_one_period", "list_of_names"}  # datasheets have no year
    for q in questions:
        assert len(set(q.document_ids)) == (3 if q.rule == "list_of_names" else 2)
        assert all(q.node_ids[doc] for doc in q.document_ids)  # the heading is in every document
        assert all(doc in q.question for doc in q.document_ids)  # named as the title writes it
    focus = demo_pack.as_retriever()
    found = sum(set(q.document_ids) <= set(_first_documents(focus, q.question)) for q in questions)
    assert found >= 0.9 * len(questions)
