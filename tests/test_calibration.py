"""Self-calibration: questions generated from the collection's headings pick the fusion
settings; what was chosen is applied without re-indexing and saved with the store."""

from __future__ import annotations

import pytest

from llama_index_hiqa import schema
from llama_index_hiqa.calibration import DEFAULT_GRID, calibrate, calibration_questions
from llama_index_hiqa.demo import load_demo_documents
from llama_index_hiqa.pack import HiQAPack
from tests.pack_helpers import HashEmbedding

FAST = {"keywords": {"use_ner": False}}


@pytest.fixture(scope="module")
def pack():
    return HiQAPack.from_documents(load_demo_documents(), embed_model=HashEmbedding(), **FAST)


def test_questions_name_the_document_and_section_and_spread_over_documents(pack):
    nodes = list(pack.index.docstore.docs.values())
    questions = calibration_questions(nodes, limit=30, seed=1)
    assert len(questions) == 30
    assert questions == calibration_questions(nodes, limit=30, seed=1)  # deterministic
    by_id = {n.node_id: n for n in nodes}
    documents = [q.document_id for q in questions]
    # round robin over the demo's 10 datasheets: each asked about 3 times
    assert {documents.count(d) for d in set(documents)} == {3}
    for q in questions:
        answers = [by_id[i] for i in q.node_ids]
        assert {schema.get_document_id(n) for n in answers} == {q.document_id}
        heading = schema.get_heading_path(answers[0])[-1].title
        assert heading in q.question and schema.get_document_title(answers[0]) in q.question
        # one section: every answer node has the same heading path
        assert len({tuple(schema.get_heading_path(n)) for n in answers}) == 1


def test_calibrate_scores_every_setting_like_a_fresh_retriever_would(pack):
    """Re-fusing the cached route scores gives the ranking a retriever built with those
    settings returns (checked against retrieve() for a few settings)."""
    retriever = pack.multi_route
    questions = calibration_questions(pack.index.docstore.docs.values(), limit=12)
    grid = {"alpha": [0.3, 0.9], "beta": [0.5, 2.0], "document_keyword_weight": [1.0, 3.0]}
    report = calibrate(retriever, questions, grid=grid, min_gain=0.0)
    assert len(report.results) == 8
    for result in report.results[::3]:
        variant = retriever.with_settings(**result.settings, similarity_top_k=200)
        total = 0.0
        for q in questions:
            ranking = [n.node.node_id for n in variant.retrieve(q.question)]
            total += next((1 / r for r, i in enumerate(ranking, 1) if i in set(q.node_ids)), 0.0)
        assert result.mrr == pytest.approx(total / len(questions))
    assert report.best.mrr == max(r.mrr for r in report.results)
    assert report.chosen == {k: v for k, v in report.best.settings.items() if v != getattr(retriever.config, k)}


def test_the_current_settings_are_kept_unless_beaten_by_min_gain(pack):
    questions = calibration_questions(pack.index.docstore.docs.values(), limit=12)
    report = calibrate(pack.multi_route, questions, min_gain=10.0)  # nothing can gain 10 MRR
    assert report.chosen == {} and "kept the current settings" in report.summary()
    assert len(report.results) == len(list(__import__("itertools").product(*DEFAULT_GRID.values())))


def test_bad_grid_and_no_questions_fail_naming_the_problem(pack):
    with pytest.raises(ValueError, match="gamma"):
        calibrate(pack.multi_route, calibration_questions(pack.nodes, limit=2), grid={"gamma": [1]})
    with pytest.raises(ValueError, match="at least one question"):
        calibrate(pack.multi_route, [])


def test_pack_calibrate_applies_and_persists_the_choice(tmp_path):
    pack = HiQAPack.from_documents(load_demo_documents()[:4], embed_model=HashEmbedding(), **FAST)
    grid = {"alpha": [0.0], "beta": [0.0], "document_keyword_weight": [1.0]}  # BM25 alone
    report = pack.calibrate(questions=20, grid=grid, min_gain=-1.0)  # always apply the grid's best
    assert report.chosen == {"alpha": 0.0, "beta": 0.0, "document_keyword_weight": 1.0}
    assert pack.multi_route.config.alpha == 0.0 and pack.config.multi_route["beta"] == 0.0
    store = pack.persist(tmp_path / "store")
    loaded = HiQAPack.load(store, embed_model=HashEmbedding())
    assert loaded.multi_route.config.alpha == 0.0 and loaded.multi_route.config.document_keyword_weight == 1.0
    assert loaded.calibration["chosen"] == report.chosen
