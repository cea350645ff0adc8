import math

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_hiqa import schema
from llama_index_hiqa.evaluation import metrics as m
from llama_index_hiqa.evaluation.datasets import GoldEvidence


def _node(text, doc, node_id=None, pages=None, path=None):
    node = TextNode(text=text, id_=node_id) if node_id else TextNode(text=text)
    schema.set_segment_facts(
        node, document_id=doc, document_title=doc, position=0, page_range=pages, heading_path=path
    )
    return node


# --- Log-Rank Index ----------------------------------------------------------------------


def test_log_rank_is_one_at_rank_one_and_zero_at_rank_n():
    for gamma in (0.1, 1.0, 10.0):
        assert m.log_rank_score([1], 100, gamma)[0] == pytest.approx(1.0)
        assert m.log_rank_score([100], 100, gamma)[0] == pytest.approx(0.0)


def test_log_rank_matches_formula_by_hand():
    # N = 11, γ = 1, r = 3: 1 - log(3)/log(11)
    assert m.log_rank_score([3], 11, 1.0)[0] == pytest.approx(1 - math.log(3) / math.log(11))
    # γ = 2, r = 2: 1 - log(3)/log(21)
    assert m.log_rank_score([2], 11, 2.0)[0] == pytest.approx(1 - math.log(3) / math.log(21))


def test_log_rank_decreases_and_larger_gamma_drops_faster_near_the_top():
    ranks = np.arange(1, 101)
    low, high = m.log_rank_score(ranks, 100, 0.05), m.log_rank_score(ranks, 100, 20.0)
    assert np.all(np.diff(low) < 0) and np.all(np.diff(high) < 0)
    assert high[1] < low[1]  # rank 2 loses more with a larger γ
    assert high[9] < low[9]


def test_log_rank_index_averages_over_gold_items():
    got = m.log_rank_index([1, 10], 10, 1.0)
    assert got == pytest.approx(0.5)


def test_log_rank_rejects_bad_parameters():
    with pytest.raises(ValueError):
        m.log_rank_score([1], 10, 0.0)
    with pytest.raises(ValueError):
        m.log_rank_index([], 10)
    assert m.log_rank_score([1], 1)[0] == 1.0


# --- ranking metrics -------------------------------------------------------------------


def test_ranking_metrics_on_a_hand_computed_case():
    gold_ranks = [2, None, 7]  # three gold items; one never matched
    relevant = [2, 3, 7]  # two units of the first gold item, one of the third
    assert m.recall_at_k(gold_ranks, 5) == pytest.approx(1 / 3)
    assert m.recall_at_k(gold_ranks, 10) == pytest.approx(2 / 3)
    assert m.hit_at_k(gold_ranks, 1) == 0.0 and m.hit_at_k(gold_ranks, 2) == 1.0
    assert m.all_gold_at_k(gold_ranks, 100) == 0.0
    assert m.precision_at_k(relevant, 5) == pytest.approx(2 / 5)
    assert m.reciprocal_rank(relevant) == pytest.approx(0.5)
    assert m.reciprocal_rank([]) == 0.0
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert m.ndcg_at_k(gold_ranks, 10) == pytest.approx((1 / math.log2(3) + 1 / math.log2(8)) / ideal)
    assert m.ndcg_at_k([1, 2], 10) == pytest.approx(1.0)


def test_ranks_from_scores_and_score_ranking():
    scores = np.array([0.1, 0.9, 0.5, 0.3])
    assert m.ranks_from_scores(scores).tolist() == [4, 1, 2, 3]
    units = [m.UnitView.from_node(_node(f"text {i}", "A", node_id=f"n{i}")) for i in range(4)]
    got = m.score_ranking(scores, units, [GoldEvidence("A", passage_id="n2")], ks=(1, 2))
    assert got["mrr"] == pytest.approx(0.5)
    assert got["recall@1"] == 0.0 and got["recall@2"] == 1.0
    assert got["log_rank"] == pytest.approx(1 - math.log(2) / math.log(4))


def test_unmatched_gold_counts_as_rank_n_for_log_rank():
    units = [m.UnitView.from_node(_node("x", "A", node_id=f"n{i}")) for i in range(5)]
    got = m.score_ranking(np.arange(5.0), units, [GoldEvidence("B", passage_id="missing")], ks=(1,))
    assert got["log_rank"] == 0.0 and got["mrr"] == 0.0 and got["recall@1"] == 0.0


# --- gold matching rules ----------------------------------------------------------------


def test_page_rule_uses_inclusive_page_range_and_document():
    unit = m.UnitView.from_node(_node("t", "3M_2018", pages=(4, 6)))
    assert m.matches(unit, GoldEvidence("3M_2018", page=4))
    assert m.matches(unit, GoldEvidence("3M_2018", page=6))
    assert not m.matches(unit, GoldEvidence("3M_2018", page=7))
    assert not m.matches(unit, GoldEvidence("3M_2022", page=5))  # same page, other filing
    no_pages = m.UnitView.from_node(_node("t", "3M_2018"))
    assert not m.matches(no_pages, GoldEvidence("3M_2018", page=5))


def test_id_rule_matches_node_id_or_source_passage():
    chunk = m.UnitView.from_node(_node("t", "passage-7", node_id="passage-7:chunk-2"))
    assert m.matches(chunk, GoldEvidence("passage-7", passage_id="passage-7"))
    assert m.matches(chunk, GoldEvidence("x", passage_id="passage-7:chunk-2"))
    assert not m.matches(chunk, GoldEvidence("passage-8", passage_id="passage-8"))


def test_section_rule_matches_any_level_by_label_or_title():
    path = [["4", "Specifications", 1], ["4.2", "Electrical Ratings", 2]]
    unit = m.UnitView.from_node(_node("t", "NX-2040", path=path))
    assert m.matches(unit, GoldEvidence("NX-2040", section="4 Specifications"))
    assert m.matches(unit, GoldEvidence("NX-2040", section="electrical ratings"))
    assert m.matches(unit, GoldEvidence("NX-2040", section="4.2  Electrical Ratings."))
    assert not m.matches(unit, GoldEvidence("NX-2040", section="5 Ordering"))
    assert not m.matches(unit, GoldEvidence("NX-3000", section="4 Specifications"))


def test_text_rule_substring_or_enough_ngrams():
    body = "Revenue for fiscal 2018 was $32.8 billion, up 5.1 percent; operating margin was 21 percent."
    unit = m.UnitView.from_node(_node(body, "3M_2018"))
    assert m.matches(unit, GoldEvidence("3M_2018", text="REVENUE for fiscal 2018 was $32.8 billion"))
    # half of the evidence lies in the unit (cut by segmentation): still relevant at 0.5
    evidence = "operating margin was 21 percent. Net income attributable to 3M was $5.3 billion in total"
    assert 0.0 < m.text_overlap(evidence, unit) < 1.0
    assert not m.matches(unit, GoldEvidence("3M_2018", text="net income attributable to 3M was 5.3 billion"))
    assert not m.matches(unit, GoldEvidence("3M_2018", text="dividends"))
    assert not m.matches(unit, GoldEvidence("Other", text="Revenue for fiscal 2018"))


def test_partial_evidence_threshold():
    unit = m.UnitView.from_node(_node("a b c d e f g h", "D"))
    evidence = "a b c d e f g h i j k l"  # 8 five-grams, 4 inside the unit
    assert m.text_overlap(evidence, unit) == pytest.approx(4 / 8)
    assert m.matches(unit, GoldEvidence("D", text=evidence), min_text_overlap=0.5)
    assert not m.matches(unit, GoldEvidence("D", text=evidence), min_text_overlap=0.6)


def test_rule_precedence_page_over_text():
    unit = m.UnitView.from_node(_node("unrelated words only", "D", pages=(2, 2)))
    assert m.gold_rule(GoldEvidence("D", page=2, text="not here")) == "page"
    assert m.matches(unit, GoldEvidence("D", page=2, text="not here"))


def test_gold_rank_is_best_unit_and_doc_hit_is_reported():
    nodes = [_node("p", "A", pages=(1, 1)) for _ in range(3)] + [_node("q", "B", pages=(1, 1))]
    units = [m.UnitView.from_node(n) for n in nodes]
    scores = np.array([0.2, 0.8, 0.1, 0.9])  # B first, then A's page-1 chunk
    got = m.score_ranking(scores, units, [GoldEvidence("A", page=1)], ks=(1, 2))
    assert got["recall@1"] == 0.0 and got["recall@2"] == 1.0
    assert got["doc_hit@1"] == 0.0 and got["doc_hit@2"] == 1.0
    assert got["precision@2"] == pytest.approx(0.5)
    assert got["log_rank"] == pytest.approx(1 - math.log(2) / math.log(4))


def test_mean_metrics():
    assert m.mean_metrics([{"a": 1.0}, {"a": 0.0}]) == {"a": 0.5}
    assert m.mean_metrics([]) == {}


def test_section_rule_text_fallback_needs_two_words():
    unit = m.UnitView.from_node(_node("... end of intro.\n\n## 2 Electrical Characteristics\n\nSupply 3.3 V", "NX"))
    assert m.matches(unit, GoldEvidence("NX", section="2 Electrical Characteristics"))
    assert not m.matches(unit, GoldEvidence("NX", section="Supply"))
