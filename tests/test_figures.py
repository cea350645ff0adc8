"""Figures: image nodes from the reader's images, files saved by content hash, the figures of an
answer, and segments that do not repeat a figure's caption."""

from __future__ import annotations

from pathlib import Path

import pymupdf
import pytest
from llama_index.core.schema import Document, NodeWithScore, TextNode

from llama_index_hiqa import schema
from llama_index_hiqa.figures import figures_for, save_figures, with_figure_nodes
from llama_index_hiqa.parsers.layout_markdown import LayoutMarkdownParser
from llama_index_hiqa.readers.pdf import PDFLayoutReader


TITLES = ["Circuit overview", "Electrical limits", "Package drawing"]


def _figure_pdf(path: Path, logo_pages: int = 1, jpeg: bool = False) -> Path:
    """Page 1: a section with a captioned figure; every page: a small logo in the corner."""
    doc = pymupdf.open()
    for number in range(max(1, logo_pages)):
        page = doc.new_page(width=595, height=842)
        logo = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 8, 8), 0)
        logo.set_rect(logo.irect, (200, 0, 0))
        page.insert_image(pymupdf.Rect(520, 20, 560, 60), pixmap=logo)  # 40 pt: big enough, but on every page
        if number == 0:
            page.insert_text((72, 70), "Widget datasheet", fontname="hebo", fontsize=20)
        page.insert_text((72, 150), f"{number + 1} {TITLES[number]}", fontname="hebo", fontsize=16)
        page.insert_text((72, 175), f"Body text about the {TITLES[number].lower()} of the widget.", fontsize=10)
        if number == 0:
            pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 40, 20), 0)
            pix.set_rect(pix.irect, (10, 120, 200))
            if jpeg:
                page.insert_image(pymupdf.Rect(100, 190, 300, 290), stream=pix.tobytes("jpeg"))
            else:
                page.insert_image(pymupdf.Rect(100, 190, 300, 290), pixmap=pix)
            page.insert_text((100, 305), "Figure 1. Block diagram of the widget", fontsize=9)
            page.insert_text((72, 340), "Text after the figure closes the chapter.", fontsize=10)
            tiny = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 4, 4), 0)
            tiny.set_rect(tiny.irect, (0, 200, 0))
            page.insert_image(pymupdf.Rect(72, 360, 82, 370), pixmap=tiny)  # a 10 pt bullet: not a figure
    doc.save(path)
    return path


@pytest.fixture
def figure_doc(tmp_path):
    return PDFLayoutReader().load_data(_figure_pdf(tmp_path / "widget.pdf", logo_pages=3))[0]


def test_each_figure_is_one_image_node_in_its_section_and_text_still_tiles(figure_doc):
    nodes = LayoutMarkdownParser().get_nodes_from_documents([figure_doc])
    images = [n for n in nodes if schema.get_segment_kind(n) == schema.KIND_IMAGE]
    (figure,) = images  # the logo on all 3 pages and the 10 pt bullet are not figures
    assert figure.text == "Figure 1. Block diagram of the widget"
    assert figure.metadata[schema.IMAGE_CAPTION] == figure.text
    assert schema.get_page_range(figure) == (0, 0)
    assert schema.get_image_bbox(figure) == pytest.approx([100, 190, 300, 290], abs=1)
    assert figure.metadata[schema.SECTION_TITLE] == "1 Circuit overview"
    assert figure.metadata[schema.IMAGE_FILE].endswith(".png")
    assert [schema.get_position(n) for n in nodes] == list(range(len(nodes)))
    text_nodes = [n for n in nodes if n is not figure]
    assert "".join(n.text for n in text_nodes) == figure_doc.text
    host = nodes[schema.get_position(figure) - 1]
    start, end = schema.get_char_span(figure)
    assert start == end and schema.get_char_span(host)[0] <= start <= schema.get_char_span(host)[1]
    assert not set(schema.DOCUMENT_ONLY_KEYS) & set(figure.metadata)
    assert schema.IMAGE_FILE in figure.excluded_embed_metadata_keys  # bookkeeping, never embedded
    off = LayoutMarkdownParser(images_as_nodes=False).get_nodes_from_documents([figure_doc])
    assert len(off) == len(nodes) - 1


def test_figures_are_saved_once_by_content_hash_copied_or_reported_missing(figure_doc, tmp_path):
    nodes = LayoutMarkdownParser().get_nodes_from_documents([figure_doc])
    (figure,) = [n for n in nodes if schema.get_segment_kind(n) == schema.KIND_IMAGE]
    name = figure.metadata[schema.IMAGE_FILE]
    first = save_figures(nodes + [figure], tmp_path / "store1" / "images")
    assert first.written == [name] and not first.missing
    data = (tmp_path / "store1" / "images" / name).read_bytes()
    assert data.startswith(b"\x89PNG")
    assert pymupdf.Pixmap(data).width == 40  # the image itself, not a page render
    again = save_figures(nodes, tmp_path / "store1" / "images")
    assert again.present == [name] and not again.written
    # the source PDF is gone: a new store copies from the old one, or reports what it lacks
    Path(figure_doc.metadata[schema.FILE_PATH]).unlink()
    copied = save_figures(nodes, tmp_path / "store2" / "images", previous_dirs=[tmp_path / "store1" / "images"])
    assert copied.copied == [name] and (tmp_path / "store2" / "images" / name).read_bytes() == data
    lost = save_figures(nodes, tmp_path / "store3" / "images")
    assert lost.missing and lost.missing[0][0] == name and "gone" in lost.missing[0][1]
    # documents work as well as nodes
    assert save_figures([figure_doc], tmp_path / "store4" / "images").missing[0][0] == name


def test_jpeg_figures_keep_their_bytes(tmp_path):
    doc = PDFLayoutReader().load_data(_figure_pdf(tmp_path / "photo.pdf", logo_pages=3, jpeg=True))[0]
    (entry,) = [e for e in schema.images_of(doc.metadata) if e["caption"].startswith("Figure")]
    assert entry["file"].endswith(".jpg")
    report = save_figures([doc], tmp_path / "images")
    assert report.written == [entry["file"]]
    assert (tmp_path / "images" / entry["file"]).read_bytes()[:3] == b"\xff\xd8\xff"


def _node(doc_id, position, page, section, kind=schema.KIND_TEXT, text="t"):
    node = TextNode(text=text, id_=f"{doc_id}-{position}")
    schema.set_segment_facts(node, document_id=doc_id, document_title=doc_id.upper(), position=position,
                             page_range=(page, page), heading_path=[section.split(" ", 1) + [1]], kind=kind)
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo

    node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"ref-{doc_id}")
    if kind == schema.KIND_IMAGE:
        node.metadata[schema.IMAGE_CAPTION] = text
        node.metadata[schema.IMAGE_FILE] = f"{doc_id}{position}.png"
    return node


def test_an_answer_lists_the_figures_on_its_cited_pages_and_sections(tmp_path):
    from llama_index.core.storage.docstore import SimpleDocumentStore

    a_text, a_fig, a_far = _node("a", 0, 0, "3 Description"), _node("a", 1, 0, "3 Description", schema.KIND_IMAGE, "Fig A1"), \
        _node("a", 5, 4, "9 Package", schema.KIND_IMAGE, "Fig A9")
    a_other_section = _node("a", 2, 1, "3 Description", schema.KIND_IMAGE, "Fig A2 (next page, same section)")
    b_fig = _node("b", 1, 0, "3 Description", schema.KIND_IMAGE, "Fig B1")
    store = SimpleDocumentStore()
    store.add_documents([a_text, a_fig, a_far, a_other_section, b_fig])
    (tmp_path / "a1.png").write_bytes(b"png")
    records = figures_for([NodeWithScore(node=a_text, score=1.0)], store, tmp_path)
    assert [r["caption"] for r in records] == ["Fig A1", "Fig A2 (next page, same section)"]
    assert records[0] == {
        "document_id": "a", "document_title": "A", "page": 1, "section": "3 Description",
        "caption": "Fig A1", "bbox": None, "file": str(tmp_path / "a1.png"), "image_file": "a1.png",
        "node_id": "a-1",
    }
    assert records[1]["file"] is None  # not saved: said so, not invented
    # a retrieved figure is listed first; another document's figures never are
    assert [r["caption"] for r in figures_for([a_far], store)] == ["Fig A9"]
    assert figures_for([], store) == []


def test_merged_segments_do_not_repeat_a_figure_caption():
    from llama_index_hiqa import SegmentIntegrationPostprocessor

    text = "## 3 Description\n\nThe circuit is simple.\n\nFigure 1. Block diagram\n\n"
    doc = Document(text=text + "## 4 Specs\n\nVoltage 5 V.\n", id_="d",
                   metadata={schema.DOCUMENT_ID: "d", schema.IMAGES: [
                       {"page": 0, "bbox": [0, 0, 100, 100], "caption": "Figure 1. Block diagram",
                        "char_offset": text.index("Figure 1."), "xref": 0, "file": "f.png"}]})
    nodes = LayoutMarkdownParser().get_nodes_from_documents([doc])
    assert [schema.get_segment_kind(n) for n in nodes] == ["text", "image", "text"]
    post = SegmentIntegrationPostprocessor(preset="find_all")
    merged = post.postprocess_nodes([NodeWithScore(node=n, score=0.9) for n in nodes])
    joined = "".join(m.node.get_content() for m in merged)
    assert joined.count("Figure 1. Block diagram") == 1 and "Voltage 5 V." in joined
