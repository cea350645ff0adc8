"""How many first places tables may take: the question's figure demand and the spread of
table parts over pages (pure functions), and where the retrievers apply them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import QueryBundle, TextNode

from llama_index_hiqa import schema
from llama_index_hiqa.retrievers.document_focus import DocumentFocusRetriever
from llama_index_hiqa.retrievers.multi_route import MultiRouteRetriever
from llama_index_hiqa.retrievers.table_places import asks_for_figures, figure_demand, spread_table_parts
from llama_index_hiqa.storage.vector_store import MatrixVectorStore
from llama_index_hiqa.testing import HashingEmbedding


# -- figure_demand ---------------------------------------------------------------------------
@pytest.mark.parametrize("question", [
    "What is the FY2018 capital expenditure amount (in USD millions) for 3M?",
    "How much did Block generate in cash flow from operating activities in FY2020?",
    "What is Lockheed Martin's 2 year total revenue CAGR from FY2020 to FY2022?",
    "What was the largest liability in American Express's Balance Sheet in 2022?",
    "Calculate the inventory turnover ratio for FY2022.",
    "What is the NX-2041's supply current in mA?",
])
def test_questions_that_ask_for_a_figure(question):
    assert figure_demand(question) == 1.0 and asks_for_figures(question)


@pytest.mark.parametrize("question, demand", [
    ("Does Adobe have an improving operating margin profile as of FY2022?", 0.5),  # names a measure
    ("What drove operating margin change as of FY2022 for 3M?", 0.5),  # a measure of a period, asked why
    ("Why did the gross margin fall?", 0.25),  # names a measure, asks why
    ("Is Boeing's business subject to cyclicality?", 0.0),
    ("What are the geographies that Pepsico primarily operates in as of FY2022?", 0.0),
    ("", 0.0),
])
def test_questions_that_do_not_ask_for_a_figure(question, demand):
    assert figure_demand(question) == demand and not asks_for_figures(question)


# -- spread_table_parts ------------------------------------------------------------------------
def test_a_second_part_of_a_page_waits_after_the_first_places():
    ranked = [("t1", 0.9), ("t2", 0.8), ("p1", 0.7), ("t3", 0.6), ("p2", 0.5), ("p3", 0.4), ("p4", 0.3)]
    page = {"t1": ("a", 3), "t2": ("a", 3), "t3": ("a", 4)}
    out = spread_table_parts(ranked, page, {"t1", "t2", "t3"}, places=4)
    assert [i for i, _ in out] == ["t1", "p1", "t3", "p2", "t2", "p3", "p4"]
    assert dict(out)["t2"] == 0.5  # at most the score of the last first place: scores still fall
    assert [s for _, s in out] == sorted((s for _, s in out), reverse=True)


def test_no_places_or_a_page_with_one_part_changes_nothing():
    ranked = [("t1", 0.9), ("t2", 0.8), ("p1", 0.7)]
    assert spread_table_parts(ranked, {"t1": 1, "t2": 1}, {"t1", "t2"}, places=0) == ranked
    assert spread_table_parts(ranked, {"t1": 1, "t2": 2}, {"t1", "t2"}, places=3) == ranked
    assert spread_table_parts(ranked, {"t1": None, "t2": None}, {"t1", "t2"}, places=3) == ranked  # no page
    with pytest.raises(ValueError, match="places"):
        spread_table_parts(ranked, {}, set(), places=-1)


_ids = st.lists(st.sampled_from([f"n{i}" for i in range(30)]), unique=True, max_size=30)


@settings(max_examples=100, deadline=None)
@given(ids=_ids, data=st.data())
def test_spread_keeps_every_pair_and_its_order_and_limits_the_first_places(ids, data):
    scores = sorted(data.draw(st.lists(st.floats(0, 1), min_size=len(ids), max_size=len(ids))), reverse=True)
    ranked = list(zip(ids, scores))
    tables = set(data.draw(st.lists(st.sampled_from(ids), unique=True)) if ids else [])
    page_of = {i: data.draw(st.sampled_from([None, 1, 2, 3])) for i in ids}
    places, per_page = data.draw(st.integers(0, 8)), data.draw(st.integers(1, 2))
    out = spread_table_parts(ranked, page_of, tables, places, per_page)
    assert sorted(i for i, _ in out) == sorted(ids)  # every id once
    assert [s for _, s in out] == sorted((s for _, s in out), reverse=True)  # scores still fall
    # The limit holds over as many first places as there are nodes it lets in.
    let_in = sum(1 for i in ids if i not in tables or page_of[i] is None) + sum(
        min(per_page, sum(1 for i in ids if i in tables and page_of[i] == page)) for page in (1, 2, 3))
    head = out[: min(places, let_in)]
    for page in {1, 2, 3}:
        in_head = [i for i, _ in head if i in tables and page_of[i] == page]
        assert len(in_head) <= per_page
    # Passed-over parts and the rest keep their order; the head is the original order filtered.
    position = {i: n for n, (i, _) in enumerate(ranked)}
    assert [position[i] for i, _ in head] == sorted(position[i] for i, _ in head)
    others = [i for i, _ in out if i not in tables]
    assert others == [i for i, _ in ranked if i not in tables]  # only table parts move down
    assert all(n <= position[i] for n, (i, _) in enumerate(out) if i not in tables)  # others only move up


# -- where the retrievers apply them ---------------------------------------------------------
def _filing():
    nodes = []
    for n, (text, page, kind) in enumerate([
        ("| Net sales | 32,765 | 31,657 |\n| Cost of sales | 16,682 | 16,055 |", 3, schema.KIND_TABLE),
        ("| Net income | 5,349 | 4,858 |\n| Net sales growth | 3 % | 5 % |", 3, schema.KIND_TABLE),
        ("| Net sales by region | 10,000 | 9,000 |", 3, schema.KIND_TABLE),
        ("Net sales grew because demand for industrial products rose in every region.", 7, schema.KIND_TEXT),
        ("Risk factors: the business is cyclical and net sales follow industrial demand.", 9, schema.KIND_TEXT),
    ]):
        node = TextNode(text=text, id_=f"n{n}")
        schema.set_segment_facts(node, document_id="acme", document_title="Acme 10-K 2018", position=n,
                                 heading_path=[], kind=kind)
        node.metadata[schema.PAGE_START] = node.metadata[schema.PAGE_END] = page
        nodes.append(node)
    return nodes


def _multi(nodes, **settings):
    embed = HashingEmbedding(dim=64)
    index = VectorStoreIndex(nodes, embed_model=embed, storage_context=StorageContext.from_defaults(vector_store=MatrixVectorStore()))
    return MultiRouteRetriever.from_index(index, keyword_extractor=None, **settings), embed


def test_multi_route_spreads_a_pages_table_parts_unless_the_question_asks_for_figures():
    nodes = _filing()
    multi, _ = _multi(nodes, similarity_top_k=5)
    prose = "net sales net sales net sales region"
    fused = [(n.node_id, 1.0 - 0.1 * k) for k, n in enumerate(nodes)]
    spread = [i for i, _ in multi.spread_tables(prose, fused)]
    assert spread[:3] == ["n0", "n3", "n4"]  # one table part of page 3 among the first places
    assert multi.spread_tables("How much were net sales in FY2018?", fused) == fused
    assert multi.with_settings(table_places=0).spread_tables(prose, fused) == fused
    # retrieve and full_ranking both give the spread order
    tables = {"n0", "n1", "n2"}
    for ranked in (multi.full_ranking(prose), [hit.node.node_id for hit in multi.retrieve(prose)]):
        assert sum(i in tables for i in ranked[:3]) == 1 and set(ranked[3:]) <= tables, ranked
    figures = multi.full_ranking("How much were net sales in FY2018?")
    assert sum(i in tables for i in figures[:3]) >= 2  # a question for figures: no limit


def test_focus_table_bonus_follows_the_questions_figure_demand():
    multi, embed = _multi(_filing())
    focus = DocumentFocusRetriever(multi, embed_model=embed, table_weight=0.4)
    assert focus.question_table_weight("What were net sales in FY2018?") == pytest.approx(0.4)
    assert focus.question_table_weight("Does Acme have an improving margin profile?") == pytest.approx(0.2)
    assert focus.question_table_weight("Is the business cyclical?") == 0.0
    by_kind = DocumentFocusRetriever(multi, embed_model=embed, table_weight=0.4, table_weight_by_question=False)
    assert by_kind.question_table_weight("Is the business cyclical?") == pytest.approx(0.4)
    # Inside the filing, a prose question's first node is prose once the bonus is gone.
    question = QueryBundle("Is the business cyclical?", embedding=embed.get_query_embedding("Is the business cyclical?"))
    rows = focus.rank_document(question, ["acme"])
    with_bonus = by_kind.rank_document(question, ["acme"])
    score = {i: s for i, s, _ in rows}
    score_bonus = {i: s for i, s, _ in with_bonus}
    assert all(score_bonus[i] - score[i] == pytest.approx(0.4) for i in ("n0", "n1", "n2"))
    assert all(score_bonus[i] == pytest.approx(score[i]) for i in ("n3", "n4"))



def test_the_pack_embeds_tables_by_their_rows_when_it_reads_statements_as_tables():
    from llama_index_hiqa.pack.config import HiQAPackSettings, build_parser
    from llama_index_hiqa.pack.workers import ingestion_stages

    assert HiQAPackSettings().tables_embedded_by == "labels"
    assert HiQAPackSettings(detect_unruled_tables=True).tables_embedded_by == "rows"
    assert HiQAPackSettings(detect_unruled_tables=True, table_view="labels").tables_embedded_by == "labels"
    config = HiQAPackSettings(table_view="rows", max_segment_tokens=None, keywords={"use_ner": False})
    assert build_parser(config, None, None).table_view == "labels"  # no window: nothing is cut by it
    cascade = [s.inner for s in ingestion_stages(config, None, None, None) if s.stage == "cascade"]
    assert cascade[0].table_view == "rows"
