import math
from typing import Dict, List

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.response.schema import Response
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_hiqa.errors import EvaluationInputError
from llama_index_hiqa.evaluation.faithfulness import (
    BAND_BORDERLINE,
    BAND_GROUNDED,
    BAND_RISK,
    FaithfulnessScoreEvaluator,
    faithfulness_band,
)


class TableEmbedding(BaseEmbedding):
    """Returns the vector the test assigned to each text (2-D, exact cosines)."""

    _table: Dict[str, List[float]] = PrivateAttr()

    def __init__(self, table, **kwargs):
        super().__init__(model_name="table", **kwargs)
        self._table = table

    def _get_query_embedding(self, query):
        return self._table[query]

    async def _aget_query_embedding(self, query):
        return self._table[query]

    def _get_text_embedding(self, text):
        return self._table[text]


def _at(cos):
    return [cos, math.sqrt(max(0.0, 1 - cos * cos))]


def _evaluator(table):
    return FaithfulnessScoreEvaluator(embed_model=TableEmbedding(table))


@pytest.mark.parametrize(
    "cos,band,passing",
    [(0.9, BAND_GROUNDED, True), (0.55, BAND_BORDERLINE, False), (0.2, BAND_RISK, False)],
)
def test_score_is_the_cosine_and_bands_follow_the_paper(cos, band, passing):
    result = _evaluator({"answer": _at(cos), "context": [1.0, 0.0]}).evaluate(
        response="answer", contexts=["context"]
    )
    assert result.score == pytest.approx(cos)
    assert result.band == band and result.passing is passing
    assert band in result.feedback


def test_band_edges():
    assert faithfulness_band(0.7) == BAND_BORDERLINE  # > 0.7 is needed for grounded
    assert faithfulness_band(0.4) == BAND_BORDERLINE
    assert faithfulness_band(0.39) == BAND_RISK
    assert faithfulness_band(0.71) == BAND_GROUNDED


def test_context_vector_covers_every_chunk_and_companion_scores():
    table = {
        "answer": [1.0, 0.0],
        "aaaa": [1.0, 0.0],  # same length chunks: mean of (1,0) and (0,1)
        "bbbb": [0.0, 1.0],
        "q": _at(0.5),
        "reference": [0.0, 1.0],
    }
    result = _evaluator(table).evaluate(query="q", response="answer", contexts=["aaaa", "bbbb", " "], reference="reference")
    assert result.score == pytest.approx(math.sqrt(0.5))  # cos to the normalised mean
    assert result.answer_faithfulness == pytest.approx(1.0)
    assert result.answer_relevancy == pytest.approx(0.5)
    # cos(q, aaaa) = 0.5 ≥ 0.35, cos(q, bbbb) = 0.866 ≥ 0.35
    assert result.context_precision == pytest.approx(1.0)
    assert result.context_recall == pytest.approx(math.sqrt(0.5))
    assert result.contexts == ["aaaa", "bbbb"]  # the blank chunk is ignored


def test_context_precision_uses_tau():
    table = {"answer": [1.0, 0.0], "c1": [1.0, 0.0], "c2": [0.0, 1.0], "q": [1.0, 0.0]}
    result = _evaluator(table).evaluate(query="q", response="answer", contexts=["c1", "c2"])
    assert result.context_precision == pytest.approx(0.5)
    assert result.context_recall is None  # no reference given


def test_works_from_a_query_engine_response():
    table = {"answer": [1.0, 0.0], "ctx": [1.0, 0.0]}
    response = Response("answer", source_nodes=[NodeWithScore(node=TextNode(text="ctx"), score=1.0)])
    result = _evaluator(table).evaluate_response(response=response)
    assert result.score == pytest.approx(1.0) and result.passing


def test_empty_inputs_raise_typed_errors():
    evaluator = _evaluator({})
    with pytest.raises(EvaluationInputError):
        evaluator.evaluate(response="", contexts=["x"])
    with pytest.raises(EvaluationInputError):
        evaluator.evaluate(response="answer", contexts=["", "  "])
    with pytest.raises(ValueError):
        FaithfulnessScoreEvaluator(embed_model=TableEmbedding({}), risk_threshold=0.9)


def test_thresholds_are_settings():
    evaluator = FaithfulnessScoreEvaluator(embed_model=TableEmbedding({"a": _at(0.65), "c": [1.0, 0.0]}), grounded_threshold=0.6)
    assert evaluator.evaluate(response="a", contexts=["c"]).band == BAND_GROUNDED


@pytest.mark.slow
def test_real_model_separates_grounded_from_unrelated_answers():
    evaluator = FaithfulnessScoreEvaluator()
    context = ["The NX-2040 controller operates from 3.0 V to 5.5 V and draws 12 mA in active mode."]
    grounded = evaluator.evaluate(response="The NX-2040 runs on 3.0 to 5.5 V and draws 12 mA when active.", contexts=context)
    unrelated = evaluator.evaluate(response="Our cafeteria serves pasta on Fridays.", contexts=context)
    assert grounded.score > 0.7 and unrelated.score < 0.4
