"""Scanned pages: read offline by the bundled OCR, alone or mixed with digital pages."""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path

import pymupdf
import pytest

from llama_index_hiqa import schema
from llama_index_hiqa.demo import DEMO_DATA_DIR
from llama_index_hiqa.errors import EmptyDocumentError, MissingExtraError
from llama_index_hiqa.evaluation.metrics import character_error_rate
from llama_index_hiqa.parsers.layout_markdown import LayoutMarkdownParser
from llama_index_hiqa.readers import ocr
from llama_index_hiqa.readers.pdf import PDFLayoutReader

DATASHEET = Path(DEMO_DATA_DIR) / "NX-2043.pdf"


def scanned_copy(source: Path, target: Path, pages=None, dpi: int = 200) -> Path:
    """``source`` with the given pages (all by default) replaced by a grey image of
    themselves: no text layer, as a scanner produces."""
    src = pymupdf.open(source)
    out = pymupdf.open()
    for number, page in enumerate(src):
        if pages is not None and number not in pages:
            out.insert_pdf(src, from_page=number, to_page=number)
            continue
        image = page.get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY).tobytes("png")
        new = out.new_page(width=page.rect.width, height=page.rect.height)
        new.insert_image(new.rect, stream=image)
    out.save(target)
    return target


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test: the OCR models must come from the wheel."""

    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_mixed_pdf_reads_the_scanned_page_by_ocr(tmp_path, no_network):
    mixed = scanned_copy(DATASHEET, tmp_path / "NX-2043-mixed.pdf", pages={1})
    doc = PDFLayoutReader().load_data(mixed)[0]
    assert schema.ocr_pages_of(doc.metadata) == [1]
    spans = schema.get_page_spans(doc)
    page2 = doc.text[spans[1].start:spans[1].end]
    for expected in ("Dropout voltage VDO 210 273 mV", "Pin configuration", "Ordering information"):
        assert expected in page2
    # The page's own scan is not a figure; the digital page's figure still is.
    assert [image["page"] for image in schema.images_of(doc.metadata)] == [0]
    # Page 1 is the digital text layer, word for word (its running header line aside: OCR
    # reads page 2's copy with other spacing, so it no longer repeats; heading marks aside:
    # the OCR page's sizes join the ranking of sizes).
    digital = PDFLayoutReader().load_data(DATASHEET)[0]
    words = _plain(digital.text[: schema.get_page_spans(digital)[0].end]).split()
    mixed_words = _plain(doc.text[: spans[0].end]).split()
    assert mixed_words[-len(words):] == words and len(mixed_words) - len(words) <= 12

    nodes = LayoutMarkdownParser().get_nodes_from_documents([doc])
    pin = next(n for n in nodes if "Input supply" in n.text)
    assert schema.get_page_range(pin) == (1, 1)
    assert [h.label() for h in schema.get_heading_path(pin)] == ["5 Pin configuration"]
    # The scanned page's node is located by the OCR boxes: they cover the original's words.
    from tests.test_page_boxes import gold_passage_words

    rects = schema.get_page_boxes(pin)[1]
    centres = [((w[0] + w[2]) / 2, (w[1] + w[3]) / 2) for w in gold_passage_words("NX-2043", "5 Pin configuration", 1)]
    inside = [c for c in centres if any(r[0] - 3 <= c[0] <= r[2] + 3 and r[1] - 3 <= c[1] <= r[3] + 3 for r in rects)]
    assert len(inside) >= 0.9 * len(centres)


def test_fully_scanned_datasheet_is_read_with_low_character_error_rate(tmp_path, no_network):
    scanned = scanned_copy(DATASHEET, tmp_path / "NX-2043-scan.pdf")
    doc = PDFLayoutReader().load_data(scanned)[0]
    assert schema.ocr_pages_of(doc.metadata) == [0, 1]
    digital = PDFLayoutReader().load_data(DATASHEET)[0]
    # Same reader, same rendering: only what OCR read differs (heading marks aside, which
    # OCR ranks by numbering rather than type size).
    reference, recognised = (_plain(d.text) for d in (digital, doc))
    assert character_error_rate(reference, recognised) < 0.05  # measured: 0.020
    assert "Output current up to 800 mA" in doc.text
    headings = [h.label() for n in LayoutMarkdownParser().get_nodes_from_documents([doc]) for h in schema.get_heading_path(n)]
    assert {"1 Features", "4 Specifications", "4.1 Absolute maximum ratings", "6 Ordering information"} <= set(headings)


def _plain(text: str) -> str:
    """Text without Markdown marks: heading #, bold **, table pipes and rule rows (OCR
    pages carry no ruled-table grid, so their tables are rows of text)."""
    return re.sub(r"[#*|]|---", " ", text)


def test_character_error_rate():
    assert character_error_rate("abc def", "abc  def") == 0.0
    assert character_error_rate("abcd", "abxd") == 0.25
    assert character_error_rate("abcd", "") == 1.0


def test_missing_ocr_extra_is_a_typed_error_naming_it(tmp_path, monkeypatch):
    scanned = scanned_copy(DATASHEET, tmp_path / "scan.pdf", pages={1})
    monkeypatch.setattr(ocr, "_ENGINE", None)
    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)
    with pytest.raises(MissingExtraError) as info:
        PDFLayoutReader().load_data(scanned)
    assert info.value.extra == "ocr" and "llama-index-hiqa[ocr]" in str(info.value)
    assert info.value.path == str(scanned)


def test_ocr_off_keeps_scans_empty(tmp_path):
    scanned = scanned_copy(DATASHEET, tmp_path / "scan.pdf")
    with pytest.raises(EmptyDocumentError, match="ocr='auto'"):
        PDFLayoutReader(ocr="off").load_data(scanned)
    mixed = scanned_copy(DATASHEET, tmp_path / "mixed.pdf", pages={1})
    doc = PDFLayoutReader(ocr="off").load_data(mixed)[0]
    assert "Ordering information" not in doc.text and not schema.ocr_pages_of(doc.metadata)


def test_ocr_dpi_is_validated():
    with pytest.raises(ValueError):
        PDFLayoutReader(ocr_dpi=10)
    with pytest.raises(ValueError):
        PDFLayoutReader(ocr="tesseract")
