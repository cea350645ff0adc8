"""HTML and DOCX files: the same Markdown, metadata vocabulary and segments as a PDF's."""

from __future__ import annotations

import base64
import hashlib
import sys
from pathlib import Path

import docx
import pymupdf
import pytest
from llama_index.core.schema import MetadataMode

from llama_index_hiqa import schema
from llama_index_hiqa.pack.answers import citation, format_citation
from llama_index_hiqa.errors import MissingExtraError
from llama_index_hiqa.figures import figure_bytes, save_figures
from llama_index_hiqa.testing.openai_server import OpenAICompatibleServer
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from llama_index_hiqa.parsers.layout_markdown import LayoutMarkdownParser
from llama_index_hiqa.readers.pdf import PDFLayoutReader
from llama_index_hiqa.transforms.cascading_metadata import CascadingMetadataTransform
from tests.pack_helpers import HashEmbedding

DESCRIPTION = "A bar chart of revenue by segment for 2022 and 2023."


def _png(path: Path, rgb=(30, 120, 200), size=(160, 90)) -> bytes:
    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, *size), False)
    pix.set_rect(pix.irect, rgb)
    data = pix.tobytes("png")
    path.write_bytes(data)
    return data


def sec_filing_html(folder: Path) -> Path:
    """A 10-K as EDGAR publishes it: cover, hidden inline-XBRL facts, chapters marked by bold
    type only, a statement on a grid of spacer columns with "$" cells, a captioned chart."""
    _png(folder / "segments.png")
    html = """<!DOCTYPE html><html><head><title>acme-20231231</title>
<style>td {padding: 0}</style><script>window.x = "script text";</script></head><body>
<div style="display: none"><ix:header>dei:EntityCentralIndexKey 0000999999</ix:header></div>
<p style="text-align:center"><b>UNITED STATES SECURITIES AND EXCHANGE COMMISSION</b></p>
<p style="text-align:center"><span style="font-weight:700;font-size:14pt">FORM 10-K</span></p>
<p>For the fiscal year ended December 31, 2023</p>
<p style="text-align:center"><span style="font-weight:bold;font-size:18pt">ACME WIDGETS, INC.</span></p>
<p>(Exact name of registrant as specified in its charter)</p>
<p style="font-weight:bold">PART II</p>
<p><span style="font-weight:700">Item 7. Management&#8217;s Discussion and Analysis of Financial Condition</span></p>
<p>Revenue grew by <b>12%</b> because industrial demand recovered in the second half.</p>
<p><font><b>Item 8. Financial Statements and Supplementary Data</b></font></p>
<p style="text-align:center"><b>CONSOLIDATED BALANCE SHEETS</b></p>
<table>
<tr><td></td><td colspan="3"><b>December 31,</b></td></tr>
<tr><td></td><td></td><td>2023</td><td></td><td></td><td>2022</td></tr>
<tr><td>Accounts payable</td><td>$</td><td>1,234</td><td></td><td>$</td><td>1,100</td></tr>
<tr><td>Accumulated depreciation</td><td></td><td>(5,678</td><td>)</td><td></td><td>(5,001</td><td>)</td></tr>
</table>
<figure><img src="segments.png" alt="chart"><figcaption>Figure 1. Revenue by segment</figcaption></figure>
<table><tr><td><p>Layout box text, not a table.</p></td></tr></table>
<h2>Signatures</h2><ul><li>Jane Doe, Chief Executive Officer</li></ul>
</body></html>"""
    path = folder / "acme-10k.html"
    path.write_text(html, encoding="utf-8")
    return path


def guide_docx(folder: Path, picture: Path) -> Path:
    """A clinical guide: Title, heading styles 1-2, a dosing table with a merged cell, a
    captioned picture and a list."""
    document = docx.Document()
    document.core_properties.title = "Adult Dosing Guide"
    document.add_paragraph("Adult Dosing Guide", style="Title")
    document.add_heading("1 Introduction", level=1)
    document.add_paragraph("This guide covers oral antibiotics for adults.")
    document.add_heading("1.1 Dosing table", level=2)
    table = document.add_table(rows=3, cols=3)
    for r, row in enumerate([["Drug", "Dose", "Maximum per day"], ["Amoxicillin", "500 mg", "3 g"],
                             ["Doxycycline", "100 mg", "200 mg"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_heading("2 Monitoring", level=1)
    document.add_picture(str(picture))
    document.add_paragraph("Figure 1. Serum level after the first dose", style="Caption")
    document.add_paragraph("Check renal function weekly", style="List Bullet")
    path = folder / "dosing-guide.docx"
    document.save(path)
    return path


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    sec_filing_html(folder)
    guide_docx(folder, folder / "segments.png")
    return folder


def _by_id(documents):
    return {d.metadata[schema.DOCUMENT_ID]: d for d in documents}


def test_sec_filing_html_keeps_chapters_statement_table_and_figure(corpus):
    doc = PDFLayoutReader().load_data(corpus / "acme-10k.html")[0]
    text = doc.text
    assert doc.metadata[schema.SOURCE_FORMAT] == schema.FORMAT_HTML
    assert doc.metadata[schema.DOCUMENT_TITLE].startswith("Acme Widgets")
    assert "script text" not in text and "EntityCentralIndexKey" not in text and "td {" not in text
    # The statement: spacer columns compacted, "$" and ")" joined to their values, the stacked
    # "December 31," header carried into each year's column.
    assert "||December 31, 2023|December 31, 2022|" in text
    assert "|Accounts payable|$1,234|$1,100|" in text
    assert "|Accumulated depreciation|(5,678)|(5,001)|" in text
    assert "Layout box text, not a table." in text and "|Layout box" not in text
    assert "## Signatures" in text and "- Jane Doe, Chief Executive Officer" in text
    [image] = schema.images_of(doc.metadata)
    assert image["caption"] == "Figure 1. Revenue by segment" and image["source"] == "segments.png"

    nodes = LayoutMarkdownParser().get_nodes_from_documents([doc])
    table = next(n for n in nodes if schema.get_segment_kind(n) == schema.KIND_TABLE)
    labels = [h.label() for h in schema.get_heading_path(table)]
    assert labels[:2] == ["Part II", "Item 8 Financial Statements and Supplementary Data"]
    assert schema.get_table_labels(table)[1][:2] == ["Accounts payable", "Accumulated depreciation"]
    mdna = next(n for n in nodes if "industrial demand" in n.text)
    assert [h.number for h in schema.get_heading_path(mdna)] == ["Part II", "Item 7"]
    # No pages: the citation is the section path, never a page number.
    assert citation(mdna)["pages"] is None
    assert format_citation(mdna).endswith("Item 7 Management’s Discussion and Analysis of Financial Condition")
    assert " p." not in format_citation(mdna)
    figure = next(n for n in nodes if schema.get_segment_kind(n) == schema.KIND_IMAGE)
    assert figure.metadata[schema.IMAGE_SOURCE] == "segments.png"


def test_docx_heading_styles_table_and_picture(corpus, tmp_path):
    doc = PDFLayoutReader().load_data(corpus / "dosing-guide.docx")[0]
    assert doc.metadata[schema.SOURCE_FORMAT] == schema.FORMAT_DOCX
    assert doc.metadata[schema.DOCUMENT_TITLE] == "Adult Dosing Guide"
    assert doc.metadata[schema.PAGE_COUNT] == 0
    assert "# 1 Introduction" in doc.text and "## 1.1 Dosing table" in doc.text
    assert "|Drug|Dose|Maximum per day|\n|---|---|---|\n|Amoxicillin|500 mg|3 g|" in doc.text
    assert "- Check renal function weekly" in doc.text
    [image] = schema.images_of(doc.metadata)
    assert image["caption"] == "Figure 1. Serum level after the first dose"
    assert image["source"].startswith("/word/media/")

    nodes = LayoutMarkdownParser().get_nodes_from_documents([doc])
    assert {n.metadata[schema.PARSE_PATH] for n in nodes} == {"markdown"}
    table = next(n for n in nodes if schema.get_segment_kind(n) == schema.KIND_TABLE)
    assert [h.label() for h in schema.get_heading_path(table)] == ["1 Introduction", "1.1 Dosing table"]
    assert schema.get_table_labels(table)[0] == ["Drug", "Dose", "Maximum per day"]
    figure = next(n for n in nodes if schema.get_segment_kind(n) == schema.KIND_IMAGE)
    assert [h.label() for h in schema.get_heading_path(figure)] == ["2 Monitoring"]
    # The picture's bytes are read back from the DOCX package, for the store and for a VLM.
    picture = (corpus / "segments.png").read_bytes()
    assert figure_bytes(figure) == picture
    report = save_figures(nodes, tmp_path / "images")
    assert report.missing == [] and (tmp_path / "images" / figure.metadata[schema.IMAGE_FILE]).read_bytes() == picture


def test_merged_docx_cells_appear_once(tmp_path):
    document = docx.Document()
    document.add_heading("Limits", level=1)
    table = document.add_table(rows=3, cols=3)
    table.cell(0, 1).merge(table.cell(0, 2)).text = "Range"
    table.cell(0, 0).text = "Parameter"
    for c, value in enumerate(["Voltage", "3.0 V", "5.5 V"]):
        table.cell(1, c).text = value
    for c, value in enumerate(["Current", "0 A", "2 A"]):
        table.cell(2, c).text = value
    document.save(tmp_path / "limits.docx")
    text = PDFLayoutReader().load_data(tmp_path / "limits.docx")[0].text
    assert "|Parameter|Range||" in text and text.count("Range") == 1


def test_folder_and_pack_take_html_docx_and_pdf(corpus):
    pdf = pymupdf.open()
    page = pdf.new_page()
    page.insert_text((72, 72), "1 Overview", fontsize=16)
    page.insert_text((72, 100), "The NX-9 regulator holds its output within 1 percent.", fontsize=10)
    pdf.save(corpus / "nx9.pdf")
    reader = PDFLayoutReader()
    docs = _by_id(reader.load_data(corpus))
    assert set(docs) == {"acme-10k", "dosing-guide", "nx9"} and reader.failures == []
    assert docs["nx9"].metadata[schema.SOURCE_FORMAT] == schema.FORMAT_PDF

    pack = HiQAPack.from_directory(corpus, embed_model=HashEmbedding(), keywords={"use_ner": False})
    hits = pack.retrieve("What is the maximum daily dose of doxycycline?")
    top = hits[0].node
    assert schema.get_document_id(top) == "dosing-guide"
    assert "1.1 Dosing table" in format_citation(top) and " p." not in format_citation(top)


def test_missing_extra_is_a_typed_error_naming_it(corpus, monkeypatch):
    monkeypatch.setitem(sys.modules, "bs4", None)  # import bs4 -> ImportError
    with pytest.raises(MissingExtraError) as info:
        PDFLayoutReader().load_data(corpus / "acme-10k.html")
    assert info.value.extra == "html" and "llama-index-hiqa[html]" in str(info.value)
    reader = PDFLayoutReader(log_skipped=False)
    assert [d.metadata[schema.DOCUMENT_ID] for d in reader.load_data(corpus)] == ["dosing-guide"]
    assert [type(e) for e in reader.failures] == [MissingExtraError]


def test_figures_go_to_the_multimodal_llm_as_image_parts_once_per_image(corpus):
    docs = PDFLayoutReader().load_data(corpus)
    nodes = LayoutMarkdownParser().get_nodes_from_documents(docs)
    figures = [n for n in nodes if schema.get_segment_kind(n) == schema.KIND_IMAGE]
    assert len(figures) == 2  # the same chart in the filing and the guide
    picture = (corpus / "segments.png").read_bytes()
    with OpenAICompatibleServer(default_response=DESCRIPTION) as server:
        transform = CascadingMetadataTransform(multimodal_llm=server.llm())
        out = transform(nodes)
        assert server.stats.completions == 1  # one image hash, one call
        [url] = server.stats.image_urls
        assert base64.b64decode(url.split(",", 1)[1]) == picture
        transform(nodes)
        assert server.stats.completions == 1  # cached by image hash
    for node in out:
        if schema.get_segment_kind(node) == schema.KIND_IMAGE:
            embed = node.get_content(MetadataMode.EMBED)
            assert DESCRIPTION in embed
            # embedded with its own cascade: the document title and the figure's section
            assert embed.splitlines()[0].startswith(node.metadata[schema.DOCUMENT_TITLE])
    assert hashlib.md5(picture).hexdigest() in figures[0].metadata[schema.IMAGE_FILE]


def test_pack_describes_pdf_figures_with_its_llm(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    pdf = pymupdf.open()
    page = pdf.new_page(width=595, height=842)
    page.insert_text((72, 70), "Widget datasheet", fontsize=20)
    page.insert_text((72, 150), "1 Circuit overview", fontsize=16)
    page.insert_text((72, 175), "Body text about the circuit of the widget.", fontsize=10)
    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 40, 20), 0)
    pix.set_rect(pix.irect, (10, 120, 200))
    page.insert_image(pymupdf.Rect(100, 190, 300, 290), pixmap=pix)
    page.insert_text((100, 305), "Figure 1. Block diagram of the widget", fontsize=9)
    pdf.save(folder / "widget.pdf")
    with OpenAICompatibleServer(default_response="A block diagram: regulator, filter, load.") as server:
        pack = HiQAPack.from_directory(
            folder, llm=server.llm(), embed_model=HashEmbedding(), keywords={"use_ner": False},
            use_llm_formatter=False, describe_figures=True,
        )
        assert len(server.stats.image_urls) == 1
        assert server.stats.image_urls[0].startswith("data:image/png;base64,")
    figures = [n for n in pack.index.docstore.docs.values() if schema.get_segment_kind(n) == schema.KIND_IMAGE]
    assert len(figures) == 1
    assert "regulator, filter, load" in figures[0].get_content(MetadataMode.EMBED)


def test_describe_figures_without_an_llm_says_so(corpus, caplog):
    with caplog.at_level("WARNING", logger="llama_index_hiqa.pack.hiqa_pack"):
        pack = HiQAPack.from_directory(corpus, embed_model=HashEmbedding(), keywords={"use_ner": False},
                                       describe_figures=True)
    assert "describe_figures is set but the pack has no LLM" in caplog.text
    figure = next(n for n in pack.index.docstore.docs.values() if schema.get_segment_kind(n) == schema.KIND_IMAGE)
    assert "Figure 1." in figure.get_content(MetadataMode.EMBED)  # caption and context still embedded
