import json
import re

import numpy as np
import pytest

from llama_index_hiqa import schema
from llama_index_hiqa.errors import EvaluationInputError
from llama_index_hiqa.evaluation.corpus import Corpus, document, documents_from_pages, folder_corpus
from llama_index_hiqa.evaluation.datasets import EvalQuestion, GoldEvidence, load_documents_folder
from llama_index_hiqa.evaluation.report import STATUS_MISSING, STATUS_OK
from llama_index_hiqa.evaluation.runner import AblationRunner
from llama_index_hiqa.evaluation.units import _heading_walk, _split_segments, fixed_chunks, markdown_segments
from llama_index_hiqa.evaluation.variants import VARIANTS, _multi_route, _Workspace, list_first_scores, rrf_scores
from llama_index_hiqa.retrievers.bm25_route import bm25_score_matrix
from llama_index_hiqa.testing import HashingEmbedding as _Hashing


def HashingEmbedding() -> _Hashing:
    return _Hashing(dim=64, token_pattern=r"\w+", signed=False)


PRODUCTS = {
    "NX-2040": ("3.3 V", "12 mA", "QFN-32"),
    "NX-3050": ("5.0 V", "30 mA", "TSSOP-20"),
    "NX-4100": ("1.8 V", "4 mA", "BGA-64"),
}


def _datasheet(name, volt, amps, pkg):
    return (
        f"# {name} Datasheet\n\nThe {name} is a motor controller of the NX family.\n\n"
        f"## 1 Features\n\nLow noise operation, thermal shutdown, SPI interface.\n\n"
        f"## 2 Electrical Characteristics\n\nSupply voltage {volt}. Supply current {amps} in active mode.\n\n"
        f"## 3 Package\n\nThe device ships in a {pkg} package.\n"
    )


@pytest.fixture()
def demo_folder(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, facts in PRODUCTS.items():
        (docs / f"{name}.md").write_text(_datasheet(name, *facts))
    questions = tmp_path / "questions.jsonl"
    rows = []
    for i, (name, (volt, amps, pkg)) in enumerate(PRODUCTS.items()):
        rows.append({"id": f"v{i}", "question": f"What supply voltage does the {name} need?",
                     "gold": [{"document_id": name, "section": "2 Electrical Characteristics"}]})
        rows.append({"id": f"p{i}", "question": f"Which package does the {name} ship in?",
                     "gold": [{"document_id": name, "text": f"ships in a {pkg} package"}]})
    questions.write_text("\n".join(json.dumps(r) for r in rows))
    return docs, questions


def test_folder_loader_keeps_ids_and_rejects_empty(tmp_path, demo_folder):
    docs, _ = demo_folder
    loaded = load_documents_folder(docs)
    assert sorted(d.metadata[schema.DOCUMENT_ID] for d in loaded) == sorted(PRODUCTS)
    with pytest.raises(EvaluationInputError):
        load_documents_folder(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EvaluationInputError):
        load_documents_folder(tmp_path / "empty")


def test_markdown_segments_keep_heading_path_document_and_pages():
    doc = documents_from_pages([
        {"doc_name": "NX-2040", "page": 0, "text": _datasheet("NX-2040", "3.3 V", "12 mA", "QFN-32")[:120]},
        {"doc_name": "NX-2040", "page": 1, "text": _datasheet("NX-2040", "3.3 V", "12 mA", "QFN-32")[120:]},
    ])
    nodes = markdown_segments(doc)
    labels = [[h.label() for h in schema.get_heading_path(n)] for n in nodes]
    assert ["NX-2040 Datasheet", "2 Electrical Characteristics"] in labels
    elec = nodes[labels.index(["NX-2040 Datasheet", "2 Electrical Characteristics"])]
    assert "Supply voltage" in elec.text and schema.get_page_range(elec) == (1, 1)
    # no text lost, every unit belongs to its document, metadata is not embedded
    assert all(schema.get_document_id(n) == "NX-2040" for n in nodes)
    assert "Supply current 12 mA" in " ".join(n.text for n in nodes)
    assert all(n.get_content("embed") == n.text for n in nodes)


def test_heading_walk_strips_markup_and_splits_numbers():
    _offsets, paths = _heading_walk("### **Item 1A.  Risk Factors**\n## 2.3 Timing\n# **<u>General</u>**")
    assert [p[-1] for p in paths] == [["Item 1A", "Risk Factors", 3], ["2.3", "Timing", 2], ["", "General", 1]]


def test_runner_end_to_end_on_a_demo_corpus(tmp_path, demo_folder):
    docs, questions = demo_folder
    corpus = folder_corpus(docs, questions, name="demo")
    embed = HashingEmbedding()
    runner = AblationRunner(embed_model=embed, show_progress=False, ks=(1, 3))
    result = runner.run(corpus)
    names = [v.name for v in result.variants]
    assert names == AblationRunner.variant_names()
    ok = {v.name: v for v in result.variants if v.status == STATUS_OK}
    assert {"vector_only", "fixed_bm25", "fixed_rrf", "original"} <= set(ok)
    for v in ok.values():
        assert 0.0 <= v.metrics["log_rank"] <= 1.0 and v.n_units > 0
        assert len(v.per_query) == len(corpus.questions)
        assert v.log_rank_stats["min"] <= v.log_rank_stats["mean"] <= v.log_rank_stats["max"]
    # components not importable are reported, never faked
    import llama_index_hiqa

    for v in result.variants:
        spec = next(s for s in VARIANTS if s.name == v.name)
        if any(name not in llama_index_hiqa._EXPORTS for name in spec.requires):
            assert v.status == STATUS_MISSING and "needs" in v.notes
        else:  # every landed component is wired in and runs on the demo corpus
            assert v.status == STATUS_OK, (v.name, v.status, v.notes)
    # BM25 finds the named product: every question's gold document is in the top 3
    assert ok["fixed_bm25"].metrics["doc_hit@3"] == 1.0
    md = result.to_markdown()
    assert "| Fixed chunks + vector only (vanilla LlamaIndex) |" in md
    written = result.save(tmp_path / "out")
    assert {p.suffix for p in written} == {".json", ".md", ".png"}
    data = json.loads((tmp_path / "out" / "ablation_demo.json").read_text())
    assert data["n_questions"] == 6 and len(data["variants"]) == len(names)
    # matplotlib is a dev extra: without it the results are written and the plots skipped
    import sys

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "matplotlib", None)
        written = result.save(tmp_path / "no_plots")
    assert {p.suffix for p in written} == {".json", ".md"}


def test_rerun_uses_the_disk_cache(tmp_path, demo_folder):
    from llama_index_hiqa.models.embedding_cache import CachedEmbedding

    docs, questions = demo_folder
    inner = HashingEmbedding()
    cached = CachedEmbedding(inner, cache_path=str(tmp_path / "c.sqlite"))
    corpus = folder_corpus(docs, questions, name="demo")
    runner = AblationRunner(embed_model=cached, show_progress=False, ks=(1, 3))
    first = runner.run(corpus, variants=["vector_only", "original"])
    calls = inner.calls
    second = runner.run(corpus, variants=["vector_only", "original"])
    assert inner.calls == calls  # nothing embedded twice
    assert first.variant("original").metrics == second.variant("original").metrics
    # the budget check reports a variant instead of embedding it
    other = Corpus("x", [document(corpus.documents[0].text + " new words", "NX-2040", "NX-2040")], corpus.questions)
    budget = AblationRunner(embed_model=cached, show_progress=False, max_new_embeddings=0).run(other, ["original"])
    assert budget.variants[0].status.startswith("skipped")


def test_unknown_variant_and_empty_corpus_are_typed_errors(demo_folder):
    docs, questions = demo_folder
    corpus = folder_corpus(docs, questions)
    with pytest.raises(EvaluationInputError):
        AblationRunner(embed_model=HashingEmbedding(), show_progress=False).run(corpus, ["nope"])
    with pytest.raises(EvaluationInputError):
        Corpus("x", corpus.documents, [])


def test_rrf_and_list_first_scores():
    a = np.array([[3.0, 2.0, 1.0]])
    b = np.array([[1.0, 2.0, 3.0]])
    fused = rrf_scores(a, b, k=60)
    assert fused[0, 1] == pytest.approx(2 / 62) and fused[0, 0] == pytest.approx(1 / 61 + 1 / 63)
    scores = list_first_scores(np.array([0.9, 0.1, 0.5, 0.3]), ["d", "b"], ["a", "b", "c", "d"])
    assert [ "abcd"[i] for i in np.argsort(-scores)] == ["d", "b", "a", "c"]


def test_bm25_scores_cover_every_unit():
    from llama_index.core.schema import TextNode

    nodes = [TextNode(text=t) for t in ["supply voltage 3.3 V", "package QFN", "thermal shutdown"]]
    scores = bm25_score_matrix(nodes, ["what supply voltage", "zzz"])
    assert scores.shape == (2, 3) and scores[0].argmax() == 0 and not scores[1].any()


def test_cli_eval_writes_results(tmp_path, demo_folder, monkeypatch, capsys):
    from llama_index.core import Settings

    from llama_index_hiqa import cli

    docs, questions = demo_folder
    monkeypatch.setenv("HIQA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(Settings, "_embed_model", HashingEmbedding())
    code = cli.main(["eval", "--docs", str(docs), "--questions", str(questions), "--out", str(tmp_path / "o"),
                     "--variants", "vector_only", "original", "--k", "1", "3", "--quiet", "--no-plots"])
    out = capsys.readouterr().out
    assert code == 0 and "Segments, no metadata" in out
    assert (tmp_path / "o" / "ablation_docs.json").exists()
    assert cli.main(["eval", "--docs", str(tmp_path / "missing"), "--questions", str(questions)]) == 2


def test_cli_eval_without_matplotlib_writes_results_and_says_so(tmp_path, demo_folder, monkeypatch, capsys):
    import sys

    from llama_index.core import Settings

    from llama_index_hiqa import cli

    docs, questions = demo_folder
    monkeypatch.setenv("HIQA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(Settings, "_embed_model", HashingEmbedding())
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    code = cli.main(["eval", "--docs", str(docs), "--questions", str(questions), "--out", str(tmp_path / "o"),
                     "--variants", "vector_only", "--k", "1", "3", "--quiet"])
    captured = capsys.readouterr()
    assert code == 0 and "matplotlib is not installed" in captured.err
    assert sorted(p.suffix for p in (tmp_path / "o").iterdir()) == [".json", ".md"]


def test_cli_eval_without_ner_uses_rules_and_expert_keywords(tmp_path, demo_folder, monkeypatch, capsys):
    from llama_index.core import Settings

    from llama_index_hiqa import cli
    from llama_index_hiqa.transforms import critical_keywords

    def no_ner():
        raise AssertionError("NER was loaded")

    monkeypatch.setattr(critical_keywords, "load_ner_model", no_ner)
    monkeypatch.setenv("HIQA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(Settings, "_embed_model", HashingEmbedding())
    docs, questions = demo_folder
    code = cli.main(["eval", "--docs", str(docs), "--questions", str(questions), "--out", str(tmp_path / "o"),
                     "--variants", "fixed_multi_route", "--no-ner", "--expert-keywords", "motor controller",
                     "--k", "1", "3", "--quiet", "--no-plots"])
    out = capsys.readouterr().out
    assert code == 0 and "| Fixed chunks + multi-route |" in out and "failed" not in out


def test_fixed_chunks_record_the_open_section_for_section_gold(demo_folder):
    docs, questions = demo_folder
    corpus = folder_corpus(docs, questions)
    chunks = fixed_chunks(corpus)
    assert chunks and all(n.get_content("embed") == n.text for n in chunks)  # nothing embedded extra
    long_doc = document("# Doc\n\n## 1 Intro\n\n" + "word " * 400 + "\n\n## 2 Specs\n\n" + "volt " * 400, "D", "D")
    nodes = fixed_chunks(Corpus("x", [long_doc], corpus.questions))
    paths = [[h.label() for h in schema.get_heading_path(n)] for n in nodes]
    assert paths[0] == ["Doc"] and paths[1] == ["Doc", "1 Intro"] and paths[-1] == ["Doc", "2 Specs"]


def test_split_segments_keeps_spans_pages_and_whole_tables():
    from llama_index.core.schema import TextNode

    text = "## 1 Intro\n\n" + "alpha beta. " * 300
    doc = document(text + "\n\n| a | b |\n|---|---|\n| 1 | 2 |", "D", "D", [[0, 0, len(text) // 2], [1, len(text) // 2, len(text) + 40]])
    seg = TextNode(text=text)
    schema.set_segment_facts(seg, document_id="D", document_title="D", position=0, char_span=(0, len(text)),
                             heading_path=[["1", "Intro", 1]], page_range=(0, 1))
    table = TextNode(text="| a | b |\n|---|---|\n| 1 | 2 |")
    schema.set_segment_facts(table, document_id="D", document_title="D", position=1, kind="table")
    out = _split_segments([seg, table], [doc])
    assert len(out) > 2 and schema.get_segment_kind(out[-1]) == "table"
    assert [schema.get_position(n) for n in out] == list(range(len(out)))
    assert schema.get_page_range(out[0]) == (0, 0) and schema.get_page_range(out[-2]) == (1, 1)
    assert all(schema.get_heading_path(n)[0].title == "Intro" for n in out[:-1])
    for n in out[:-1]:
        start, end = schema.get_char_span(n)
        assert doc.text[start:end] == n.text


def test_runner_uses_the_given_keyword_extractor(demo_folder):
    """A rules-only extractor (what the FinanceBench run passes) reaches the multi-route and
    chunk-graph variants: it tags the units and reads every question."""
    from llama_index_hiqa import CriticalKeywordExtractor, normalize_keyword

    asked = []

    class Recording(CriticalKeywordExtractor):
        def extract_query(self, question):
            asked.append(question)
            return super().extract_query(question)

    docs, questions = demo_folder
    corpus = folder_corpus(docs, questions, name="demo")
    extractor = Recording(use_ner=False, expert_keywords=["thermal shutdown"])
    runner = AblationRunner(embed_model=HashingEmbedding(), keyword_extractor=extractor, show_progress=False, ks=(1, 3))
    result = runner.run(corpus, variants=["fixed_multi_route", "hca_chunk_graph"])
    assert [v.status for v in result.variants] == [STATUS_OK, STATUS_OK]
    texts = [q.question for q in corpus.questions]
    # once per question for each multi-route unit set, and again for the chunk graph
    assert asked.count(texts[0]) >= 3 and set(texts) <= set(asked)
    # the multi-route retriever keeps this extractor, which tags the units with the expert
    # keyword (NER would not find it)
    ws = _Workspace(runner, corpus)
    assert _multi_route(ws, "fixed").keyword_extractor is extractor
    tagged = [n for n in ws.unit_set("fixed") if "thermal shutdown" in n.text]
    assert tagged and all(
        normalize_keyword("thermal shutdown") in schema.get_critical_keywords(n) for n in tagged
    )
