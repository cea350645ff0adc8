"""The demo corpus, its gold labels, and ``hiqa demo`` end to end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llama_index_hiqa import schema
from llama_index_hiqa.demo import DEMO_DATA_DIR, build_nodes, load_demo_documents
from llama_index_hiqa.evaluation.datasets import load_questions_jsonl
from llama_index_hiqa.page_geometry import pages_for_span


@pytest.fixture(scope="module")
def documents():
    return {d.metadata[schema.DOCUMENT_ID]: d for d in load_demo_documents()}


@pytest.fixture(scope="module")
def questions():
    return load_questions_jsonl(DEMO_DATA_DIR / "questions.jsonl")


def _page_text(document, page):
    for number, start, end in schema.page_spans_of(document.metadata):
        if number == page:
            return document.text[start:end]
    raise AssertionError(f"no page {page}")


def test_corpus_is_ten_look_alike_datasheets(documents):
    assert sorted(documents) == [f"NX-204{i}" for i in range(10)]
    chapters = None
    for doc in documents.values():
        assert 2 <= doc.metadata[schema.PAGE_COUNT] <= 3
        headings = [doc.text[s:e].lstrip("# ") for s, e, _, _ in schema.layout_headings_of(doc.metadata)][1:]
        chapters = chapters or headings
        assert headings == chapters  # identical structure: only the values differ
        assert "|Maximum output current|IOUT|" in doc.text
        assert schema.images_of(doc.metadata)[0]["caption"].startswith("Figure 1.")
        assert "Datasheet Rev. C" not in doc.text  # running header removed
    assert "4.2 Electrical characteristics" in chapters and "6 Ordering information" in chapters


def test_gold_labels_match_what_the_reader_sees(documents, questions):
    assert 20 <= len(questions) <= 30
    for q in questions:
        (gold,) = q.gold
        doc = documents[gold.document_id]
        assert gold.section in doc.text
        # The answer's key token is printed on the gold page of the gold datasheet.
        token = q.answer.split()[0]
        assert token in _page_text(doc, gold.page), (q.id, token, gold.page)


def test_nodes_know_document_pages_and_section(documents):
    nodes = build_nodes(list(documents.values()))
    assert len(nodes) >= len(documents)
    for node in nodes:
        doc = documents[schema.get_document_id(node)]
        start, end = schema.get_char_span(node)
        assert doc.text[start:end] == node.text
        first, last = schema.get_page_range(node)
        assert pages_for_span(schema.page_spans_of(doc.metadata), start, end) == (first, last)
        # The section shown is the last heading at or before the chunk's start.
        section = node.metadata.get(schema.SECTION_TITLE)
        assert section and section in doc.text[: start + len(section) + 8]
    positions = [schema.get_position(n) for n in nodes if schema.get_document_id(n) == "NX-2040"]
    assert positions == list(range(len(positions)))


@pytest.mark.slow
def test_hiqa_demo_end_to_end(capsys, questions):
    from llama_index_hiqa.cli import main

    assert main(["demo", "--top-k", "3"]) == 0
    out = capsys.readouterr().out
    for q in questions:
        assert q.question in out
    found = re.search(r"gold document in top 3: (\d+)/(\d+)", out)
    assert found and int(found.group(2)) == len(questions)
    hits = int(found.group(1))
    assert out.count("-> gold document at rank") == hits
    assert out.count("-> gold document NOT found") == len(questions) - hits
    assert hits > 0  # real retrieval, not a stub
    assert re.search(r"NX-204\d p\.\d", out)  # evidence with document and page
    assert re.search(r"gold section in top 3: \d+/%d" % len(questions), out)
    # the figure question finds the datasheet's figure, with page, section, caption and file
    assert re.search(r"✓ figure of NX-2043 found: p\.1 · 3 Description · Figure 1\. Typical application "
                     r"circuit of the NX-2043 \(image [0-9a-f]{32}\.png\)", out)


def test_answers_rank_the_first_gold_document_and_check_page_and_section():
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_hiqa.demo import answer_questions
    from llama_index_hiqa.evaluation.datasets import EvalQuestion, GoldEvidence

    def node(doc, page, section):
        n = TextNode(text=f"{doc} {section}")
        schema.set_segment_facts(n, document_id=doc, document_title=doc, position=0,
                                 page_range=(page, page), heading_path=[section.split(" ", 1) + [1]])
        return n

    class Fixed(BaseRetriever):
        def _retrieve(self, query_bundle):
            return [NodeWithScore(node=node("NX-2041", 1, "4.2 Electrical characteristics"), score=0.9),
                    NodeWithScore(node=node("NX-2043", 0, "3 Description"), score=0.8),
                    NodeWithScore(node=TextNode(text="tail of 3\n\n## 4 Specifications\n\nmore",
                                                metadata={schema.DOCUMENT_ID: "NX-2045",
                                                          schema.SECTION_TITLE: "3 Description"}), score=0.7)]

    gold = lambda doc, page, section: EvalQuestion("q", "?", [GoldEvidence(doc, page=page, section=section)])  # noqa: E731
    hit_wrong_page, miss, exact, spans_into = answer_questions(
        [gold("NX-2043", 1, "4.2 Electrical characteristics"), gold("NX-2049", 1, "1 Features"),
         gold("NX-2041", 1, "4.2 Electrical characteristics"), gold("NX-2045", 0, "4 Specifications")],
        Fixed(),
    )
    assert (spans_into.gold_rank, spans_into.section_hit) == (3, True)  # heading inside the chunk
    assert (hit_wrong_page.gold_rank, hit_wrong_page.page_hit, hit_wrong_page.section_hit) == (2, False, False)
    assert (miss.gold_rank, miss.page_hit, miss.section_hit) == (None, False, False)
    assert (exact.gold_rank, exact.page_hit, exact.section_hit) == (1, True, True)


def test_committed_corpus_is_what_the_script_generates(tmp_path):
    import importlib.util

    script = Path(__file__).resolve().parents[1] / "examples" / "make_demo_corpus.py"
    spec = importlib.util.spec_from_file_location("make_demo_corpus", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path)
    generated = sorted(p.name for p in tmp_path.iterdir())
    assert generated == sorted(p.name for p in DEMO_DATA_DIR.iterdir())
    for name in generated:
        assert (tmp_path / name).read_bytes() == (DEMO_DATA_DIR / name).read_bytes(), name
    assert max((tmp_path / n).stat().st_size for n in generated) < 10_000  # a few KB each
