"""Where a node lies on its page: the pages and rectangles a span covers (`page_geometry`),
the reader's text boxes, each node's own rectangles, and the gold passages of the demo
questions covered by their nodes' rectangles."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pymupdf
import pytest
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import MetadataMode, TextNode

from llama_index_hiqa import schema
from llama_index_hiqa.demo import DEMO_DATA_DIR, load_demo_documents
from llama_index_hiqa.errors import InvalidMetadataError
from llama_index_hiqa.page_geometry import TEXT_BLOCK, TEXT_LINE, TextBox, boxes_for_span, pages_for_span
from llama_index_hiqa.parsers.layout_markdown import LayoutMarkdownParser
from llama_index_hiqa.readers.html_reader import read_html
from llama_index_hiqa.readers.pdf import PDFLayoutReader

# A numbered section heading of the datasheets, found on the page by PyMuPDF alone.
SECTION_LINE = re.compile(r"^\d+(\.\d+)?\s+[A-Z][A-Za-z ]+$")
RUNNING_MARGIN = 0.12  # the reader's default: running footers there are not part of any node


@pytest.fixture(scope="module")
def documents():
    return load_demo_documents()


@pytest.fixture(scope="module")
def nodes(documents):
    return LayoutMarkdownParser().get_nodes_from_documents(documents)


def _covered(point, rects, tol=1.0):
    x, y = point
    return any(r[0] - tol <= x <= r[2] + tol and r[1] - tol <= y <= r[3] + tol for r in rects)


def gold_passage_words(document_id: str, section: str, page_number: int):
    """The words of ``section`` on the page, from PyMuPDF's words alone: below the section's
    heading line and above the next numbered heading, running margins left out."""
    page = pymupdf.open(Path(DEMO_DATA_DIR) / f"{document_id}.pdf")[page_number]
    lines = [
        (line["bbox"][1], "".join(s["text"] for s in line["spans"]).strip())
        for block in page.get_text("dict")["blocks"] for line in block.get("lines", [])
    ]
    heads = sorted((y, text) for y, text in lines if SECTION_LINE.match(text))
    top = next(y for y, text in heads if text == section)
    bottom = min([y for y, _ in heads if y > top + 1] + [page.rect.height * (1 - RUNNING_MARGIN)])
    return [w for w in page.get_text("words") if top - 1 <= (w[1] + w[3]) / 2 < bottom]


def test_gold_passages_lie_inside_their_nodes_rectangles(nodes):
    questions = [json.loads(line) for line in (Path(DEMO_DATA_DIR) / "questions.jsonl").read_text().splitlines()]
    assert len(questions) == 25
    covered = []
    for question in questions:
        gold = question["gold"][0]
        rects = [
            rect
            for node in nodes
            if schema.get_document_id(node) == gold["document_id"]
            and gold["section"] in [h.label() for h in schema.get_heading_path(node)]
            for rect in schema.get_page_boxes(node).get(gold["page"], [])
        ]
        words = gold_passage_words(gold["document_id"], gold["section"], gold["page"])
        assert words, question["id"]
        centres = [((w[0] + w[2]) / 2, (w[1] + w[3]) / 2) for w in words]
        covered.append(all(_covered(c, rects) for c in centres))
    assert sum(covered) >= 24, [q["id"] for q, ok in zip(questions, covered) if not ok]


def test_each_node_keeps_only_its_own_text_and_the_boxes_stay_out_of_both_views(documents, nodes):
    doc_nodes = [n for n in nodes if schema.get_document_id(n) == "NX-2040"]
    boxes = schema.text_boxes_of(documents[0].metadata)
    assert boxes and all(a.end <= b.start for a, b in zip(boxes, boxes[1:]))  # sorted, disjoint
    table = next(n for n in doc_nodes if schema.get_segment_kind(n) == schema.KIND_TABLE)
    text = next(n for n in doc_nodes if n.text.startswith("## 3 Description"))
    # Nodes on one page cover different places; a table node's box is its grid.
    table_rects = schema.get_page_boxes(table)[1]
    text_rects = schema.get_page_boxes(text)[0]
    assert all(r[3] - r[1] > 0 and r[2] - r[0] > 0 for r in table_rects + text_rects)
    for node in doc_nodes:
        value = node.metadata.get(schema.PAGE_BOXES)
        assert value is None or isinstance(value, str) and len(value) <= schema.PAGE_BOXES_MAX_CHARS
        assert schema.TEXT_BOXES not in node.metadata
        for mode in (MetadataMode.EMBED, MetadataMode.LLM):
            assert "page_boxes" not in node.get_content(mode) and not re.search(r"\d+:\d+,\d+,", node.get_content(mode))
        assert not schema.non_flat_keys(node.metadata)


def test_a_split_node_covers_only_its_own_characters(documents):
    document = documents[0]
    whole = TextNode(text=document.text[:1000], metadata=dict(document.metadata))
    schema.set_segment_facts(whole, document_id="NX-2040", document_title="t", position=0, char_span=(0, 1000))
    halves = []
    for i, span in enumerate([(0, 500), (500, 1000)]):
        half = TextNode(text=document.text[span[0]:span[1]], metadata=dict(document.metadata))
        schema.set_segment_facts(half, document_id="NX-2040", document_title="t", position=i, char_span=span)
        halves.append(schema.get_page_boxes(half)[0])
    area = lambda rects: sum((r[2] - r[0]) * (r[3] - r[1]) for r in rects)  # noqa: E731
    whole_rects = schema.get_page_boxes(whole)[0]
    # Each half lies inside the whole, and together they are about its size (not twice it).
    for rects in halves:
        assert all(_covered(((r[0] + r[2]) / 2, (r[1] + r[3]) / 2), whole_rects) for r in rects)
    assert 0.7 * area(whole_rects) <= area(halves[0]) + area(halves[1]) <= 1.3 * area(whole_rects)
    assert area(halves[0]) < area(whole_rects) and area(halves[1]) < area(whole_rects)


def test_pages_for_span():
    spans = [[0, 0, 100], [1, 100, 250], [2, 250, 400]]
    assert pages_for_span(spans, 10, 20) == (0, 0)
    assert pages_for_span(spans, 90, 260) == (0, 2)
    assert pages_for_span(spans, 100, 100) == (1, 1)  # empty span: its page
    assert pages_for_span(spans, 500, 600) is None


def test_a_line_cut_by_a_span_keeps_its_share_and_long_lists_become_one_box_a_page():
    line = TextBox(0, 100, 200, 10.0, 50.0, 110.0, 60.0, TEXT_LINE)
    table = TextBox(1, 200, 300, 10.0, 100.0, 210.0, 200.0, TEXT_BLOCK)
    assert boxes_for_span([line, table], 150, 250) == {
        0: [(60.0, 50.0, 110.0, 60.0)], 1: [(10.0, 100.0, 210.0, 150.0)]
    }
    assert boxes_for_span([line, table], 300, 400) == {}
    many = {0: [(float(i), 0.0, i + 1.0, 1.0) for i in range(0, 2000, 3)]}
    assert schema.encode_page_boxes(many) == "0:0,0,1999,1"
    node = TextNode(text="x", metadata={schema.PAGE_BOXES: "2:1,2,3,4;5,6,7,8 3:0,0,9,9"})
    assert schema.get_page_boxes(node) == {2: [(1, 2, 3, 4), (5, 6, 7, 8)], 3: [(0, 0, 9, 9)]}
    with pytest.raises(InvalidMetadataError, match="page_boxes"):
        schema.get_page_boxes(TextNode(text="x", metadata={schema.PAGE_BOXES: "2:1,2"}))


def test_sentence_splitter_chunks_get_their_own_boxes(documents):
    # The demo's SentenceSplitter path copies the document's metadata into each chunk.
    chunks = SentenceSplitter(chunk_size=128, chunk_overlap=0).get_nodes_from_documents(documents[:1])
    located = []
    for i, chunk in enumerate(chunks):
        schema.set_segment_facts(
            chunk, document_id="NX-2040", document_title="t", position=i,
            char_span=(chunk.start_char_idx, chunk.end_char_idx),
        )
        located.append(schema.get_page_boxes(chunk))
    assert all(located) and len({json.dumps(sorted(b.items())) for b in located}) == len(chunks)


def test_html_nodes_have_no_page_boxes_and_point_to_their_section(tmp_path):
    page = tmp_path / "a.html"
    page.write_text("<h1>Guide</h1><h2>Setup</h2><p>Install the unit first.</p>", encoding="utf-8")
    assert not read_html(page, 160).text_boxes
    doc = PDFLayoutReader().load_data(page)[0]
    node = LayoutMarkdownParser().get_nodes_from_documents([doc])[-1]
    assert schema.get_page_boxes(node) == {} and [h.label() for h in schema.get_heading_path(node)][-1] == "Setup"


def test_the_pymupdf4llm_engine_locates_its_lines_too():
    doc = PDFLayoutReader(engine="pymupdf4llm").load_data(Path(DEMO_DATA_DIR) / "NX-2040.pdf")[0]
    boxes = schema.text_boxes_of(doc.metadata)
    assert len(boxes) > 20 and all(doc.text[b.start:b.end].strip() for b in boxes)
    nodes = LayoutMarkdownParser().get_nodes_from_documents([doc])
    assert sum(bool(schema.get_page_boxes(n)) for n in nodes) >= 0.8 * len(nodes)
