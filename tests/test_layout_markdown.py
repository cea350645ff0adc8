"""LayoutMarkdownParser: chapter segments from layout Markdown, with no LLM."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core.schema import Document, NodeRelationship

from llama_index_hiqa import LayoutMarkdownParser, schema

LOREM = (
    "The device operates from a single supply and measures current and voltage with low "
    "drift over the full temperature range. "
)


def _doc(pages, doc_id="ds1", title="ACM1234 Current Sensor", file_name="ds1.pdf", **meta):
    """A Document as PDFLayoutReader builds it: page Markdown joined with blank lines."""
    text, spans = "", []
    for i, page in enumerate(pages):
        if text:
            text += "\n\n"
        start = len(text)
        text += page
        spans.append([i, start, len(text)])
    metadata = {
        schema.DOCUMENT_ID: doc_id,
        schema.DOCUMENT_TITLE: title,
        schema.FILE_NAME: file_name,
        schema.PAGE_SPANS: spans,
        schema.PAGE_COUNT: len(pages),
        schema.LAYOUT_HEADINGS: [],
        **meta,
    }
    return Document(text=text, metadata=metadata, id_=f"doc-{doc_id}")


def _assert_tiles(doc, nodes):
    """Positions 0..n-1; text spans consecutive, covering the document; text = source span.
    Figures are image nodes between them: an empty span inside the segment before them."""
    assert [schema.get_position(n) for n in nodes] == list(range(len(nodes)))
    host = None
    for node in nodes:
        if schema.get_segment_kind(node) != schema.KIND_IMAGE:
            host = node
            continue
        start, end = schema.get_char_span(node)
        lo, hi = schema.get_char_span(host)
        assert start == end and lo <= start <= hi
    nodes = [n for n in nodes if schema.get_segment_kind(n) != schema.KIND_IMAGE]
    spans = [schema.get_char_span(n) for n in nodes]
    assert spans[0][0] == 0 and spans[-1][1] == len(doc.text)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end == start
    for node, (start, end) in zip(nodes, spans):
        assert node.text == doc.text[start:end]


def _datasheet_doc():
    page1 = (
        "ACME Corp Confidential\n\n# **ACM1234 Current Sensor**\n\n## **1 Features**\n\n"
        + LOREM * 2
        + "\n\n## **2 Specifications**\n\n"
        + LOREM
        + "\n\n### **2.1 Absolute Maximum Ratings**\n\n"
        + LOREM
        + "\n\n**Table 1. Absolute Maximum Ratings**\n\n"
        "|**Parameter**|**Min**|**Max**|\n|---|---|---|\n|Supply voltage|-0.3|6|\n"
        "|Temperature|-40|125|\n\n"
        + LOREM
        + "\n\nwww.acme.example Page 1"
    )
    # A level-2 number set in the biggest type: the number, not the font, sets the level.
    page2 = (
        "ACME Corp Confidential\n\n# **2.2 Electrical Characteristics**\n\n"
        + LOREM
        + "\n\n```\n# not a heading, code\n```\n\n## **3 Detailed Description**\n\n"
        + LOREM
        + "\n\n#### **Revision History**\n\n"
        + LOREM
        + "\n\nwww.acme.example Page 2"
    )
    page3 = "ACME Corp Confidential\n\n## **4 Layout**\n\n" + LOREM + "\n\nwww.acme.example Page 3"
    return _doc([page1, page2, page3])


@pytest.mark.parametrize("parser_name", ["layout", "line_number"])
def test_no_node_or_relationship_carries_document_only_facts(parser_name):
    """A 10-K's layout facts run to hundreds of kilobytes; a copy per node (in SOURCE,
    PREVIOUS/NEXT relationships or metadata) made a few dozen filings outgrow memory."""
    from llama_index_hiqa import LineNumberSegmentParser
    from llama_index_hiqa.testing import ScriptedLLM

    bulky = [["1", "x" * 200, 1, 0]] * 500  # ~100 KB of layout facts
    doc = _datasheet_doc()
    doc.metadata[schema.LAYOUT_HEADINGS] = bulky
    doc.metadata[schema.IMAGES] = [{"caption": "y" * 1000}] * 20
    if parser_name == "layout":
        parser = LayoutMarkdownParser()
    else:
        parser = LineNumberSegmentParser(llm=ScriptedLLM(default_response="not json"))
    nodes = parser.get_nodes_from_documents([doc])
    assert len(nodes) >= 3
    for node in nodes:
        assert not set(schema.DOCUMENT_ONLY_KEYS) & set(node.metadata)
        for rel in node.relationships.values():
            assert not set(schema.DOCUMENT_ONLY_KEYS) & set(rel.metadata or {})
        assert len(node.to_json()) < len(doc.text) + 20_000
    assert nodes[0].relationships[NodeRelationship.SOURCE].node_id == doc.doc_id
    assert NodeRelationship.NEXT in nodes[0].relationships
    assert doc.metadata[schema.LAYOUT_HEADINGS] is bulky  # the document keeps its facts


def test_datasheet_segments_heading_paths_and_tiling():
    doc = _datasheet_doc()
    nodes = LayoutMarkdownParser().get_nodes_from_documents([doc])
    _assert_tiles(doc, nodes)
    paths = [[h.label() for h in schema.get_heading_path(n)] for n in nodes]
    assert ["2 Specifications", "2.1 Absolute Maximum Ratings"] in paths
    assert ["2 Specifications", "2.2 Electrical Characteristics"] in paths
    assert ["3 Detailed Description", "Revision History"] in paths
    assert ["4 Layout"] in paths
    # running header/footer and the fenced code line never become headings
    labels = {h.title for n in nodes for h in schema.get_heading_path(n)}
    assert not any("Confidential" in t or "acme.example" in t or "not a heading" in t for t in labels)
    # the title heading is the document title, not a chapter: its segment has no path
    assert nodes[0].text.startswith("ACME Corp Confidential\n\n# **ACM1234")
    assert schema.get_heading_path(nodes[0]) == []
    levels = {h.label(): h.level for n in nodes for h in schema.get_heading_path(n)}
    assert levels["2.2 Electrical Characteristics"] == 2 and levels["4 Layout"] == 1
    for node in nodes:
        meta = node.metadata
        assert meta[schema.DOCUMENT_ID] == "ds1" and meta[schema.DOCUMENT_TITLE] == "ACM1234 Current Sensor"
        assert meta[schema.PARSE_PATH] == "layout"
        assert node.ref_doc_id == doc.doc_id
        assert not set(schema.DOCUMENT_ONLY_KEYS) & set(meta)
        assert schema.POSITION in node.excluded_embed_metadata_keys
    # pages from the reader's page spans
    by_label = {tuple(h.label() for h in schema.get_heading_path(n)): n for n in nodes}
    assert schema.get_page_range(by_label[("4 Layout",)]) == (2, 2)
    assert schema.get_page_range(by_label[("1 Features",)]) == (0, 0)
    # PREVIOUS/NEXT as LlamaIndex sets them
    assert nodes[1].relationships[NodeRelationship.PREVIOUS].node_id == nodes[0].node_id
    assert nodes[0].relationships[NodeRelationship.NEXT].node_id == nodes[1].node_id


def test_table_is_its_own_node_inside_its_chapter():
    doc = _datasheet_doc()
    nodes = LayoutMarkdownParser().get_nodes_from_documents([doc])
    tables = [n for n in nodes if schema.get_segment_kind(n) == schema.KIND_TABLE]
    assert len(tables) == 1
    table = tables[0]
    assert table.metadata[schema.TABLE_TITLE] == "Table 1. Absolute Maximum Ratings"
    assert schema.get_table_labels(table)[0] == ["Parameter", "Min", "Max"]
    assert schema.get_table_labels(table)[1] == ["Supply voltage", "Temperature"]
    assert [h.label() for h in schema.get_heading_path(table)] == [
        "2 Specifications", "2.1 Absolute Maximum Ratings"
    ]
    assert "|Supply voltage|-0.3|6|" in table.text
    # the text after the table stays in the same chapter, as a text node
    after = nodes[nodes.index(table) + 1]
    assert schema.get_heading_path(after) == schema.get_heading_path(table)
    assert schema.get_segment_kind(after) == schema.KIND_TEXT

    whole = LayoutMarkdownParser(tables_as_nodes=False).get_nodes_from_documents([doc])
    assert all(schema.get_segment_kind(n) == schema.KIND_TEXT for n in whole)
    assert len(whole) == len(nodes) - 2


def _filing_doc():
    cover = "# **UNITED STATES SECURITIES AND EXCHANGE COMMISSION**\n\n# **FORM 10-K**\n\n" + LOREM
    toc = (
        "### **TABLE OF CONTENTS**\n\n|PART I|||\n|---|---|---|\n|ITEM 1|Business|4|\n"
        "|ITEM 1A|Risk Factors|10|\n|PART II|||\n|ITEM 7|Management’s Discussion and Analysis|15|\n"
        "|ITEM 7A|Quantitative and Qualitative Disclosures About Market Risk|51|\n"
        "|ITEM 8|Financial Statements and Supplementary Data|52|"
    )
    pages = [
        cover,
        toc,
        "ACME INC 2023 Form 10-K\n\n### **PART I**\n\n### **Item 1. Busines** **<u>s.</u>**\n\n" + LOREM
        + "\n\n### **General**\n\n" + LOREM + "\n\n3",
        "ACME INC 2023 Form 10-K\n\nItem 1A. Risk Factors\n\n" + LOREM + "\n\n4",
        "ACME INC 2023 Form 10-K\n\n### **PART II**\n\n### **Item 7. Management’s Discussion and Analysis**\n\n"
        + LOREM + " As discussed in Item 8, revenue grew.\n\n### **OVERVIEW**\n\n" + LOREM + "\n\n5",
        "ACME INC 2023 Form 10-K\n\n### **Item 7A. Quantitative** **<u>and Qualitative Disclosures About Market Risk.</u>**\n\n"
        + LOREM + "\n\n### **Item 8. Financial Statements and Supplementary Data**\n\n" + LOREM + "\n\n6",
    ]
    return _doc(pages, doc_id="ACME_2023_10K", title="ACME 2023 10-K", file_name="ACME_2023_10K.pdf")


def test_stacked_statement_title_lines_are_one_heading_over_their_table():
    """pymupdf4llm writes a statement's title lines as separate same-level headings."""
    page = (
        "### **Item 8. Financial Statements**\n\n### **Overview**\n\n" + LOREM + "\n\n"
        "#### **ADOBE INC.**\n\n#### **CONSOLIDATED STATEMENTS OF CASH FLOWS**\n\n#### **(In millions)**\n\n"
        "|**Years Ended**|**2022**|**2021**|\n|---|---|---|\n|Net income|4,756|4,822|\n|Capital expenditures|(442)|(348)|\n\n"
        "#### **Notes**\n\n#### **1. Basis of Presentation**\n\n" + LOREM
    )
    doc = _doc([page], doc_id="ADOBE_2022_10K", title="Adobe 2022 10-K")
    nodes = LayoutMarkdownParser().get_nodes_from_documents([doc])
    table = next(n for n in nodes if schema.get_segment_kind(n) == schema.KIND_TABLE)
    labels = [h.label() for h in schema.get_heading_path(table)]
    assert labels[-1] == "ADOBE INC CONSOLIDATED STATEMENTS OF CASH FLOWS (In millions)"
    # the three title lines make one segment, not three heading-only ones
    titles = [n for n in nodes if "CASH FLOWS" in n.text and schema.get_segment_kind(n) == schema.KIND_TEXT]
    assert len(titles) == 1 and "(In millions)" in titles[0].text
    # numbered headings are never merged, before or after
    basis = next(n for n in nodes if "Basis of Presentation" in n.text)
    assert [h.label() for h in schema.get_heading_path(basis)][-1] == "1 Basis of Presentation"
    item = next(n for n in nodes if "Item 8." in n.text)
    assert [h.label() for h in schema.get_heading_path(item)][-1] == "Item 8 Financial Statements"
    assert "".join(n.text for n in nodes) == doc.text  # nothing lost, nothing doubled


def test_sec_filing_parts_items_toc_and_running_headers():
    doc = _filing_doc()
    parser = LayoutMarkdownParser()
    marks = parser.detect_headings(doc.text, doc.metadata)
    numbered = [(m.number, m.level) for m in marks if m.number]
    assert numbered == [
        ("Part I", 1), ("Item 1", 2), ("Item 1A", 2), ("Part II", 1),
        ("Item 7", 2), ("Item 7A", 2), ("Item 8", 2),
    ]  # the ToC rows on page 1 are not headings; "Item 1A." is found without emphasis
    titles = {m.number: m.title for m in marks}
    assert titles["Item 1"] == "Business"
    assert titles["Item 7A"] == "Quantitative and Qualitative Disclosures About Market Risk"
    assert not any("Form 10-K" in m.title and "ACME" in m.title for m in marks)
    nodes = parser.get_nodes_from_documents([doc])
    _assert_tiles(doc, nodes)
    overview = next(n for n in nodes if schema.get_heading_path(n)[-1:]
                    and schema.get_heading_path(n)[-1].title == "OVERVIEW")
    assert [h.label() for h in schema.get_heading_path(overview)] == [
        "Part II", "Item 7 Management’s Discussion and Analysis", "OVERVIEW"
    ]


def test_long_segments_are_sub_split_keeping_metadata():
    body = "\n\n".join(LOREM * 3 for _ in range(12))
    doc = _doc(["# 1 Intro\n\n" + LOREM, "# 2 Long Chapter\n\n" + body, "# 3 End\n\n" + LOREM])
    nodes = LayoutMarkdownParser(max_segment_chars=800).get_nodes_from_documents([doc])
    _assert_tiles(doc, nodes)
    long_parts = [n for n in nodes if schema.get_heading_path(n)[0].number == "2"]
    assert len(long_parts) >= 5
    assert all(len(n.text) <= 800 for n in long_parts)
    assert all(n.text.rstrip().endswith(".") for n in long_parts)  # cut at paragraph/sentence ends
    whole = LayoutMarkdownParser(max_segment_chars=None).get_nodes_from_documents([doc])
    assert len(whole) == 3


def test_long_tables_are_cut_between_rows_keeping_labels():
    rows = "\n".join(f"|Revenue line {i}|{i * 10}|{i * 11}|" for i in range(60))
    page = "# 8 Financial Statements\n\nTable 5. Income\n|Item|2022|2023|\n|---|---|---|\n" + rows + "\n\nAfter."
    doc = _doc([page])
    nodes = LayoutMarkdownParser(max_segment_chars=500).get_nodes_from_documents([doc])
    _assert_tiles(doc, nodes)
    tables = [n for n in nodes if schema.get_segment_kind(n) == schema.KIND_TABLE]
    assert len(tables) >= 4 and all(len(t.text) <= 500 for t in tables)
    assert all(t.metadata[schema.TABLE_TITLE] == "Table 5. Income" for t in tables)
    assert all(schema.get_table_labels(t)[0] == ["Item", "2022", "2023"] for t in tables)
    all_rows = [r for t in tables for r in schema.get_table_labels(t)[1]]
    assert all_rows == [f"Revenue line {i}" for i in range(60)]
    assert all(t.text.endswith("\n") or t is tables[-1] for t in tables)  # cut between rows


def test_markdown_file_is_parsed_by_its_headings():
    text = "Intro line.\n\n# Guide\n\n## 1 Install\n\npip install x\n\n## 2 Use\n\n### 2.1 Query\n\nask\n"
    doc = Document(text=text, metadata={schema.FILE_NAME: "guide.md"}, id_="g")
    nodes = LayoutMarkdownParser().get_nodes_from_documents([doc])
    _assert_tiles(doc, nodes)
    assert nodes[0].text.startswith("Intro line") and schema.get_heading_path(nodes[0]) == []
    # numbers set the depth: "1 Install" is a top chapter beside the unnumbered "# Guide"
    assert [h.label() for h in schema.get_heading_path(nodes[-1])] == ["2 Use", "2.1 Query"]
    assert [h.label() for h in schema.get_heading_path(nodes[1])] == ["Guide"]
    assert all(n.metadata[schema.PARSE_PATH] == "markdown" for n in nodes)
    assert all(schema.get_page_range(n) == (0, 0) for n in nodes)
    assert nodes[0].metadata[schema.DOCUMENT_ID] == "g"


def test_layout_heading_facts_promote_numbered_plain_lines():
    text = "Body first.\n\n1 Overview\n\n" + LOREM + "\n\n1.1 Scope\n\n" + LOREM
    start = text.index("1 Overview")
    start2 = text.index("1.1 Scope")
    meta = {schema.LAYOUT_HEADINGS: [[start, start + 10, 16.0, True], [start2, start2 + 9, 12.0, True]]}
    marks = LayoutMarkdownParser().detect_headings(text, meta)
    assert [(m.number, m.level) for m in marks] == [("1", 1), ("1.1", 2)]
    # without the layout facts, plain numbered lines are body text
    assert LayoutMarkdownParser().detect_headings(text, {}) == []


def test_empty_document_gives_no_nodes():
    assert LayoutMarkdownParser().get_nodes_from_documents([Document(text="  \n", id_="e")]) == []


# --- real PDFs ------------------------------------------------------------------------

CHAPTERS = [
    ("1", "Features", 2, None),
    ("2", "Applications", 1, None),
    ("3", "Specifications", 1, None),
    ("3.1", "Absolute Maximum Ratings", 1, ("Table 1. Absolute Maximum Ratings",
                                             [["Parameter", "Min", "Max"], ["Supply voltage", "-0.3", "6"]])),
    ("3.2", "Electrical Characteristics", 8, None),
    ("4", "Detailed Description", 8, None),
    ("4.1", "Overview", 8, None),
    ("4.2", "Functional Block Diagram", 8, None),
    ("5", "Layout", 6, None),
]


def make_datasheet_pdf(path: Path, title: str, chapters=CHAPTERS) -> None:
    """A small datasheet: title, numbered chapters in bold, a ruled table, running
    header and footer on every page."""
    import pymupdf

    doc = pymupdf.open()

    def new_page(n):
        page = doc.new_page(width=595, height=842)
        page.insert_text((50, 30), "ACME Corp Confidential", fontsize=8)
        page.insert_text((50, 820), f"www.acme.example   Page {n}", fontsize=8)
        return page

    pno, page, y = 1, new_page(1), 80
    page.insert_text((50, y), title, fontsize=22, fontname="hebo")
    y += 40
    for num, head, paras, table in chapters:
        if y > 680 or (num in ("3", "4", "5")):  # a few chapters start a new page
            pno += 1
            page, y = new_page(pno), 80
        page.insert_text((50, y), f"{num} {head}", fontsize=16 if "." not in num else 13, fontname="hebo")
        y += 26
        words, line = (LOREM * paras).split(), []
        for w in words + [None]:
            if w is not None:
                line.append(w)
            if line and (w is None or len(" ".join(line)) > 85):
                page.insert_text((50, y), " ".join(line), fontsize=10)
                y, line = y + 14, []
                if y > 780:
                    pno += 1
                    page, y = new_page(pno), 80
        y += 10
        if table:
            caption, rows = table
            page.insert_text((50, y), caption, fontsize=10, fontname="hebo")
            y += 8
            for r, row in enumerate(rows):
                for c, cell in enumerate(row):
                    rect = pymupdf.Rect(50 + c * 120, y + r * 16, 170 + c * 120, y + (r + 1) * 16)
                    page.draw_rect(rect, color=(0, 0, 0), width=0.5)
                    page.insert_text((rect.x0 + 3, rect.y1 - 4), cell, fontsize=9)
            y += 16 * len(rows) + 20
    doc.save(str(path))


def pdf_to_document(path: Path) -> Document:
    """The reader's Document contract, built here with pymupdf4llm (per-page Markdown
    joined with blank lines, page spans)."""
    import pymupdf4llm

    pages = pymupdf4llm.to_markdown(str(path), page_chunks=True, show_progress=False)
    doc = _doc([p["text"] for p in pages], doc_id=path.stem, title=path.stem, file_name=path.name)
    return doc


@pytest.fixture(scope="module")
def datasheet_pdf(tmp_path_factory):
    path = tmp_path_factory.mktemp("pdf") / "ACM1234.pdf"
    make_datasheet_pdf(path, "ACM1234 Current Sensor")
    return path


def test_generated_pdf_recovers_every_chapter(datasheet_pdf):
    doc = pdf_to_document(datasheet_pdf)
    assert doc.metadata[schema.PAGE_COUNT] >= 3  # running lines need three pages
    nodes = LayoutMarkdownParser().get_nodes_from_documents([doc])
    _assert_tiles(doc, nodes)
    found = {}
    for node in nodes:
        for h in schema.get_heading_path(node):
            if h.number:
                found[h.number] = (h.title, h.level)
    expected = {num: (title, num.count(".") + 1) for num, title, _, _ in CHAPTERS}
    assert found == expected
    assert not any("Confidential" in h.title or "acme.example" in h.title
                   for n in nodes for h in schema.get_heading_path(n))
    table = next(n for n in nodes if schema.get_segment_kind(n) == schema.KIND_TABLE)
    assert table.metadata[schema.TABLE_TITLE] == "Table 1. Absolute Maximum Ratings"
    assert schema.get_table_labels(table)[1] == ["Supply voltage"]
    last = nodes[-1]
    assert schema.get_page_range(last)[1] == doc.metadata[schema.PAGE_COUNT] - 1


# --- the demo corpus (examples/data, from the reader's issue) ---------------------------

DEMO = Path(__file__).resolve().parents[1] / "examples" / "data"


# The demo corpus's known structure (examples/make_demo_corpus.py draws these headings).
DEMO_CHAPTERS = {
    "1": ("Features", 1), "2": ("Applications", 1), "3": ("Description", 1),
    "4": ("Specifications", 1), "4.1": ("Absolute maximum ratings", 2),
    "4.2": ("Electrical characteristics", 2), "5": ("Pin configuration", 1),
    "6": ("Ordering information", 1),
}


@pytest.mark.skipif(not list(DEMO.glob("*.pdf")), reason="demo corpus not present")
def test_demo_corpus_every_datasheet_chapter_heading_is_recovered():
    reader_module = pytest.importorskip("llama_index_hiqa.readers.pdf")
    pdfs = sorted(DEMO.glob("*.pdf"))
    for pdf in pdfs:
        doc = reader_module.PDFLayoutReader().load_data(pdf)[0]
        nodes = LayoutMarkdownParser().get_nodes_from_documents([doc])
        _assert_tiles(doc, nodes)
        found = {h.number: (h.title, h.level) for n in nodes
                 for h in schema.get_heading_path(n) if h.number}
        assert found == DEMO_CHAPTERS, pdf.name


# --- property: nothing is ever lost ---------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_LINES = st.sampled_from([
    "# 1 Intro", "## 1.1 Scope", "### **2.3 Timing**", "Item 7. Management", "PART II",
    "**Table 2. Pins**", "|a|b|", "|---|---|", "|1|2|", "", "", "plain text line.",
    "```", "# inside code?", "Revision History", "#### Notes", "   ", "A.1 Pins",
])


@settings(max_examples=40, deadline=None)
@given(pages=st.lists(st.lists(_LINES, max_size=12).map("\n".join), min_size=1, max_size=4),
       max_chars=st.sampled_from([None, 20, 200]))
def test_any_markdown_is_tiled_without_loss(pages, max_chars):
    doc = _doc(pages)
    nodes = LayoutMarkdownParser(max_segment_chars=max_chars).get_nodes_from_documents([doc])
    if not doc.text.strip():
        assert nodes == []
        return
    _assert_tiles(doc, nodes)
    assert "".join(n.text for n in nodes) == doc.text
    for node in nodes:
        levels = [h.level for h in schema.get_heading_path(node)]
        assert levels == sorted(set(levels))  # a path goes strictly deeper


def test_plausible_heading_rejects_sentence_lines_and_bare_numbers():
    from llama_index_hiqa.parsers.layout_markdown import plausible_heading

    for heading in ("Item 7. Management's Discussion", "PART II", "4.2 Electrical characteristics",
                    "CONSOLIDATED STATEMENTS OF INCOME", "Results of Operations", "Item 9B."):
        assert plausible_heading(heading), heading
    for line in ("2.6 %", "22.0 %", "contributions resumed after the pay period ending on January 3,",
                 "Participant following his or her rehire date as if the rehire date were",
                 "Revenue by segment,"):
        assert not plausible_heading(line), line


@pytest.mark.parametrize(
    "line, expected",
    [
        ("Consolidated Balance Sheets", True),
        ("Consolidated Balance Shee t", True),  # a word split by text extraction
        ("Consolidated Statement of Incom e", True),
        ("CONDENSED CONSOLIDATED STATEMENTS OF EARNINGS (Unaudited)", True),
        ("Consolidated Statements of Shareholders’ Equity", True),
        ("Consolidated Statements of Comprehensive Income", True),
        ("Statements of Financial Position", True),
        ("NOTE 9. Supplemental Cash Flow Information", True),
        ("Note 3 - Revenue", True),
        ("Cash Flows from Operating Activities", False),  # a bold row label of the statement
        ("Total current assets", False),
        ("Notes to Consolidated Financial Statements", False),
        ("Note 3 to the statements describes the leases", False),
        ("The Consolidated Balance Sheets show the assets.", False),
    ],
)
def test_report_heading_recognises_statement_and_note_titles_only(line, expected):
    from llama_index_hiqa.headings import is_report_heading

    assert is_report_heading(line) is expected


def test_bold_statement_and_note_titles_head_their_rows_in_the_cascade():
    """A statement's rows carry the statement's title (and a note's text its note) in their
    heading path, under the Item the statement sits in; bold row labels stay text."""
    page = (
        "**Item 8. Financial Statements**\n\n" + LOREM + "\n\n"
        "**3M Company and Subsidiaries**\n\n**Consolidated Balance Shee t**\n\n"
        "**Current assets**\n\nCash and cash equivalents $ 2,853 $ 3,053 Inventories 4,366 4,034\n\n"
        "**Consolidated Statement of Cash Flow s**\n\n**Cash Flows from Operating Activities**\n\n"
        "Net income 5,363 4,869 Purchases of property, plant and equipment (1,577) (1,373)\n\n"
        "**NOTE 9. Supplemental Cash Flow Information**\n\n" + LOREM
    )
    doc = _doc([page], doc_id="MMM_2018_10K", title="3M Company, Form 10-K, 2018")
    nodes = LayoutMarkdownParser(max_segment_chars=120).get_nodes_from_documents([doc])
    _assert_tiles(doc, nodes)

    def path_of(fragment):
        node = next(n for n in nodes if fragment in n.text)
        return [h.label() for h in schema.get_heading_path(node)]

    assert path_of("Inventories 4,366") == ["Item 8 Financial Statements", "Consolidated Balance Sheet"]
    assert path_of("Purchases of property") == ["Item 8 Financial Statements", "Consolidated Statement of Cash Flows"]
    assert path_of(LOREM.strip()[-20:])[:1] == ["Item 8 Financial Statements"]
    marks = LayoutMarkdownParser().detect_headings(doc.text, doc.metadata)
    titles = [m.title for m in marks]
    assert "Cash Flows from Operating Activities" not in titles and "Current assets" not in titles
    assert "NOTE 9. Supplemental Cash Flow Information" in titles or any("Supplemental Cash Flow" in t for t in titles)
