"""PDFLayoutReader: PDFs drawn here with PyMuPDF, so every expected fact is known exactly."""

from __future__ import annotations

import inspect
import logging
import os
import random
from pathlib import Path

import pymupdf
import pytest
from llama_index.core.schema import MetadataMode

from llama_index_hiqa import schema
from llama_index_hiqa.errors import (
    CorruptDocumentError,
    DocumentReadError,
    EmptyDocumentError,
    EncryptedDocumentError,
    SkippedDocumentError,
    UndecodableTextError,
    UnsupportedDocumentError,
)
from llama_index_hiqa.page_geometry import pages_for_span
from llama_index_hiqa.readers.pdf import PDFLayoutReader

W, H = 595, 842
HEADER = "ACME Widget Manual | Confidential"


def _text(page, y, text, size=10, bold=False, x=56):
    page.insert_text((x, y), text, fontname="hebo" if bold else "helv", fontsize=size)


def _manual_pdf(path: Path, title: str = "") -> Path:
    """Three pages: a title, numbered bold headings, body text, running header and footer."""
    doc = pymupdf.open()
    for number in range(3):
        page = doc.new_page(width=W, height=H)
        _text(page, 40, HEADER, size=8)
        _text(page, 815, f"Page {number + 1} of 3", size=8, x=270)
        y = 100
        if number == 0:
            _text(page, y, "Widget Manual", size=20, bold=True)
            y += 40
        _text(page, y, f"{number + 1} Chapter {number + 1}", size=14, bold=True)
        y += 26
        for i in range(4):
            _text(page, y, f"Body sentence {i} of chapter {number + 1} explains the widget.")
            y += 14
        _text(page, y + 10, f"{number + 1}.1 Details {number + 1}", size=12, bold=True)
        _text(page, y + 34, f"Detail text for section {number + 1}.1 with value {number * 7}.")
    if title:
        doc.set_metadata({"title": title})
    doc.save(path)
    return path


def _table_pdf(path: Path) -> Path:
    doc = pymupdf.open()
    page = doc.new_page(width=W, height=H)
    _text(page, 80, "1 Specifications", size=14, bold=True)
    _text(page, 110, "Table 1. Limits of the widget")
    rows = [["Parameter", "Min", "Max"], ["Supply voltage", "2.7", "5.5"], ["Output current", "", "800"]]
    top, xs = 120, [56, 216, 276, 336]
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            _text(page, top + r * 16 + 11, cell, size=9, x=xs[c] + 4)
    for r in range(len(rows) + 1):
        page.draw_line((xs[0], top + r * 16), (xs[-1], top + r * 16))
    for x in xs:
        page.draw_line((x, top), (x, top + len(rows) * 16))
    _text(page, 200, "Text after the table stays after it.")
    doc.save(path)
    return path


def _image_pdf(path: Path) -> Path:
    doc = pymupdf.open()
    page = doc.new_page(width=W, height=H)
    _text(page, 80, "Text before the figure.")
    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 16, 8), 0)  # 2:1 like its box: drawn exactly there
    pix.set_rect(pix.irect, (10, 120, 200))
    page.insert_image(pymupdf.Rect(100, 100, 300, 200), pixmap=pix)
    _text(page, 215, "Figure 3. Block diagram of the widget", size=9, x=100)
    _text(page, 260, "Text after the figure.")
    doc.save(path)
    return path


def _two_column_pdf(path: Path) -> Path:
    doc = pymupdf.open()
    page = doc.new_page(width=W, height=H)
    _text(page, 60, "A full width title line that crosses the middle of the page", size=12)
    for i in range(6):
        _text(page, 100 + i * 14, f"Left column line {i}. It carries running text.", x=56)
        _text(page, 100 + i * 14, f"Right column line {i}. It carries running text.", x=320)
    doc.save(path)
    return path


def _label_figure_rows_pdf(path: Path) -> Path:
    """An unruled table: labels on the left, figures on the right half of the page."""
    doc = pymupdf.open()
    page = doc.new_page(width=W, height=H)
    for i, (label, value) in enumerate([("Net sales", "32,765"), ("Cost of sales", "16,682"), ("Operating income", "7,207")]):
        _text(page, 100 + i * 14, label, x=56)
        _text(page, 100 + i * 14, value, x=420)
    doc.save(path)
    return path


def _encrypted_pdf(path: Path) -> Path:
    doc = pymupdf.open()
    _text(doc.new_page(), 100, "secret")
    doc.save(path, encryption=pymupdf.PDF_ENCRYPT_AES_256, owner_pw="owner", user_pw="user")
    return path


@pytest.fixture
def reader() -> PDFLayoutReader:
    return PDFLayoutReader()


def test_page_spans_are_contiguous_cover_the_text_and_hold_each_pages_text(tmp_path, reader):
    doc = reader.load_data(_manual_pdf(tmp_path / "manual.pdf"))[0]
    spans = schema.page_spans_of(doc.metadata)
    assert [p for p, _, _ in spans] == [0, 1, 2]
    assert spans[0][1] == 0 and spans[-1][2] == len(doc.text)
    assert all(spans[i][2] == spans[i + 1][1] for i in range(len(spans) - 1))
    for page, start, end in spans:
        assert f"chapter {page + 1} explains" in doc.text[start:end]
        assert f"value {page * 7}." in doc.text[start:end]
    start = doc.text.index("with value 7.")
    assert pages_for_span(spans, start, start + 5) == (1, 1)
    assert doc.metadata[schema.PAGE_COUNT] == 3


def test_headings_carry_the_drawn_font_sizes_and_weight(tmp_path, reader):
    doc = reader.load_data(_manual_pdf(tmp_path / "manual.pdf"))[0]
    assert doc.metadata[schema.BODY_FONT_SIZE] == 10
    found = {doc.text[s:e].lstrip("#* ").rstrip("* "): (size, bold) for s, e, size, bold in schema.layout_headings_of(doc.metadata)}
    assert found["Widget Manual"] == (20, True)
    for n in (1, 2, 3):
        assert found[f"{n} Chapter {n}"] == (14, True)
        assert found[f"{n}.1 Details {n}"] == (12, True)
    assert len(found) == 7  # compact: headings only, no body line
    # Larger sizes become deeper-or-equal Markdown levels in size order.
    assert "\n# Widget Manual" in "\n" + doc.text
    assert "\n## 2 Chapter 2" in doc.text and "\n### 2.1 Details 2" in doc.text


def test_running_header_and_page_footer_are_removed(tmp_path, reader):
    doc = reader.load_data(_manual_pdf(tmp_path / "manual.pdf"))[0]
    assert "Confidential" not in doc.text
    assert "Page 1 of 3" not in doc.text and "Page 3 of 3" not in doc.text
    kept = PDFLayoutReader(remove_running_lines=False).load_data(tmp_path / "manual.pdf")[0]
    assert kept.text.count("Confidential") == 3


def test_title_id_and_views(tmp_path, reader):
    path = _manual_pdf(tmp_path / "manual.pdf")
    doc = reader.load_data(path)[0]
    meta = doc.metadata
    assert meta[schema.DOCUMENT_ID] == "manual"
    assert meta[schema.DOCUMENT_TITLE] == "Widget Manual"  # no PDF title: first top heading
    assert meta[schema.FILE_NAME] == "manual.pdf" and meta[schema.FILE_PATH] == str(path)
    assert doc.id_ == reader.load_data(path)[0].id_  # stable per path
    # Bookkeeping never reaches the embedding model or the LLM.
    assert doc.get_content(MetadataMode.EMBED) == doc.text
    assert doc.get_content(MetadataMode.LLM) == doc.text
    titled = reader.load_data(_manual_pdf(tmp_path / "titled.pdf", title="Official Title"))[0]
    # The metadata title wins over the cover's largest line; the file name is appended when
    # it names something the title does not.
    assert titled.metadata[schema.DOCUMENT_TITLE] == "Official Title (titled)"
    assert titled.id_ != doc.id_


def test_ruled_table_becomes_markdown_after_its_caption(tmp_path, reader):
    doc = reader.load_data(_table_pdf(tmp_path / "table.pdf"))[0]
    text = doc.text
    assert "|Parameter|Min|Max|" in text
    assert "|Supply voltage|2.7|5.5|" in text and "|Output current||800|" in text
    caption, table, after = (text.index(s) for s in ("Table 1. Limits", "|Parameter|", "Text after the table"))
    assert caption < table < after
    assert text.count("Supply voltage") == 1  # table words are not repeated as plain lines


def test_image_has_page_bbox_caption_and_offset(tmp_path, reader):
    doc = reader.load_data(_image_pdf(tmp_path / "figure.pdf"))[0]
    (image,) = schema.images_of(doc.metadata)
    assert image["page"] == 0
    assert image["bbox"] == pytest.approx([100, 100, 300, 200], abs=1)
    assert image["caption"] == "Figure 3. Block diagram of the widget"
    assert doc.text[image["char_offset"]:].startswith("Figure 3.")
    assert doc.text.index("Text before") < image["char_offset"] < doc.text.index("Text after")


def test_two_columns_are_read_column_by_column(tmp_path, reader):
    text = reader.load_data(_two_column_pdf(tmp_path / "columns.pdf"))[0].text
    last_left = max(text.index(f"Left column line {i}.") for i in range(6))
    first_right = min(text.index(f"Right column line {i}.") for i in range(6))
    assert text.index("A full width title") < last_left < first_right
    assert text.index("Left column line 0.") < text.index("Left column line 5.")


def test_unruled_table_rows_keep_label_and_figure_together(tmp_path, reader):
    text = reader.load_data(_label_figure_rows_pdf(tmp_path / "rows.pdf"))[0].text
    assert text.index("Net sales") < text.index("32,765") < text.index("Cost of sales") < text.index("16,682")


def test_encrypted_corrupt_empty_and_unsupported_files_raise_typed_errors(tmp_path, reader):
    encrypted = _encrypted_pdf(tmp_path / "locked.pdf")
    corrupt = tmp_path / "broken.pdf"
    corrupt.write_bytes(b"%PDF-1.7\nthis is not really a pdf\n")
    empty = tmp_path / "empty.pdf"
    empty.write_bytes(b"")
    blank = tmp_path / "blank.pdf"
    blank_doc = pymupdf.open()
    blank_doc.new_page()
    blank_doc.save(blank)
    unsupported = tmp_path / "notes.odt"
    unsupported.write_bytes(b"PK")
    broken_docx = tmp_path / "notes.docx"
    broken_docx.write_bytes(b"PK")
    cases = [
        (encrypted, EncryptedDocumentError),
        (corrupt, CorruptDocumentError),
        (broken_docx, CorruptDocumentError),
        (empty, EmptyDocumentError),
        (blank, EmptyDocumentError),
        (unsupported, UnsupportedDocumentError),
    ]
    cases.append((tmp_path / "missing.pdf", DocumentReadError))
    for path, error in cases:
        with pytest.raises(error) as info:
            reader.load_data(path)
        assert info.value.path == str(path) and str(path) in str(info.value)


def test_folder_goes_on_past_bad_files_and_records_them(tmp_path, reader, caplog):
    folder = tmp_path / "docs"
    folder.mkdir()
    _manual_pdf(folder / "a_manual.pdf")
    _encrypted_pdf(folder / "b_locked.pdf")
    (folder / "c_empty.txt").write_text("   \n")
    (folder / "d_notes.md").write_text("# Notes\n\nSome notes.\n")
    (folder / "ignored.csv").write_text("x,y\n")
    with caplog.at_level(logging.WARNING):
        docs = reader.load_data(folder)
    assert [d.metadata[schema.DOCUMENT_ID] for d in docs] == ["a_manual", "d_notes"]
    failures = {Path(f.path).name: type(f) for f in reader.failures}
    assert failures == {"b_locked.pdf": EncryptedDocumentError, "c_empty.txt": EmptyDocumentError}
    assert all(isinstance(f, DocumentReadError) for f in reader.failures)
    assert "b_locked.pdf" in caplog.text and "c_empty.txt" in caplog.text
    # A list of paths behaves like a folder; failures reset per call.
    docs = reader.load_data([folder / "a_manual.pdf", folder / "d_notes.md"])
    assert len(docs) == 2 and reader.failures == []


def test_markdown_and_text_files_are_kept_as_is(tmp_path, reader):
    md_text = "# Guide\n\nIntro.\n\n## 1 Setup\n\nStep one.\n"
    md = tmp_path / "guide.md"
    md.write_text(md_text, encoding="utf-8")
    txt = tmp_path / "plain.txt"
    txt.write_text("Just text, no headings.\nSecond line.", encoding="utf-8")
    md_doc, txt_doc = reader.load_data([md, txt])
    assert md_doc.text == md_text
    assert schema.page_spans_of(md_doc.metadata) == [(0, 0, len(md_text))]
    assert md_doc.metadata[schema.DOCUMENT_TITLE] == "Guide"
    headings = [md_text[s:e] for s, e, _, _ in schema.layout_headings_of(md_doc.metadata)]
    assert headings == ["# Guide", "## 1 Setup"]
    assert txt_doc.text == "Just text, no headings.\nSecond line."
    assert txt_doc.metadata[schema.DOCUMENT_TITLE] == "plain"
    assert txt_doc.metadata[schema.PAGE_COUNT] == 1


def test_non_utf8_text_loses_no_bytes(tmp_path, reader):
    path = tmp_path / "legacy.txt"
    path.write_bytes("Caf\xe9 cr\xe8me".encode("latin-1"))
    assert reader.load_data(path)[0].text == "Café crème"


def test_public_import_and_serialisable_settings():
    from llama_index_hiqa import PDFLayoutReader as Exported

    assert Exported is PDFLayoutReader
    reader = Exported(engine="pymupdf4llm", detect_tables=False)
    assert reader.to_dict()["engine"] == "pymupdf4llm"
    with pytest.raises(ValueError):
        Exported(engine="nonsense")


@pytest.mark.slow
def test_pymupdf4llm_engine_keeps_the_same_contract(tmp_path):
    path = _manual_pdf(tmp_path / "manual.pdf")
    doc = PDFLayoutReader(engine="pymupdf4llm").load_data(path)[0]
    spans = schema.page_spans_of(doc.metadata)
    assert spans[0][1] == 0 and spans[-1][2] == len(doc.text)
    assert "Confidential" not in doc.text
    lines = [doc.text[s:e] for s, e, _, _ in schema.layout_headings_of(doc.metadata)]
    assert any("2 Chapter 2" in line for line in lines)
    assert all("Body sentence" not in line for line in lines)


def test_drops_into_simple_directory_reader(tmp_path):
    from llama_index.core import SimpleDirectoryReader

    _manual_pdf(tmp_path / "manual.pdf")
    docs = SimpleDirectoryReader(str(tmp_path), file_extractor={".pdf": PDFLayoutReader()}).load_data()
    (doc,) = docs
    assert doc.metadata[schema.DOCUMENT_ID] == "manual"
    assert doc.metadata[schema.PAGE_COUNT] == 3 and "## 2 Chapter 2" in doc.text


# --- real collections: damaged files, binary text, symlinks, ids, streaming -----------------


@pytest.mark.parametrize("share", [0.2, 0.5, 0.6, 0.8, 0.95])
def test_truncated_pdf_is_corrupt_not_empty_nor_partly_indexed(tmp_path, reader, share):
    data = _manual_pdf(tmp_path / "full.pdf").read_bytes()
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(data[: int(len(data) * share)])
    with pytest.raises(CorruptDocumentError) as info:
        reader.load_data(cut)
    message = str(info.value)
    assert message.startswith(f"{cut}: damaged or truncated PDF")
    assert "%%EOF" in message and "OCR" not in message and "\n" not in message


def test_damage_is_told_apart_from_a_repair_that_lost_nothing_and_from_no_text_layer(tmp_path, reader):
    data = _manual_pdf(tmp_path / "full.pdf").read_bytes()
    # The middle of the file is gone but it still ends with its trailer and %%EOF marker:
    # MuPDF repairs it and gives back pages with part of their text.
    spliced = tmp_path / "spliced.pdf"
    spliced.write_bytes(data[: int(len(data) * 0.6)] + data[-300:])
    with pytest.raises(CorruptDocumentError, match=r"could not be read in full"):
        reader.load_data(spliced)
    # Bytes inserted after the header shift every offset: MuPDF repairs the cross-reference
    # table and every page reads in full, so the document is kept, identical to the original.
    shifted = tmp_path / "shifted.pdf"
    shifted.write_bytes(data[:9] + b"% inserted comment line\n" * 3 + data[9:])
    assert pymupdf.open(shifted).is_repaired
    assert reader.load_data(shifted)[0].text == reader.load_data(tmp_path / "full.pdf")[0].text
    # An intact PDF without a text layer keeps its own message.
    blank = tmp_path / "scan.pdf"
    blank_doc = pymupdf.open()
    blank_doc.new_page()
    blank_doc.save(blank)
    with pytest.raises(EmptyDocumentError, match="no extractable text"):
        reader.load_data(blank)


def _png_bytes() -> bytes:
    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 32, 32), 0)
    pix.set_rect(pix.irect, (200, 30, 30))
    return pix.tobytes("png")


@pytest.mark.parametrize(
    "name, data, why",
    [
        ("random.txt", random.Random(0).randbytes(4096), "NUL byte"),
        ("picture.txt", _png_bytes(), "PNG image"),
        ("nul.md", b"# Title\n\nText\x00\x00\x00 with NUL bytes.\n", "NUL byte"),
        ("controls.txt", bytes(random.Random(1).choice(b"\x01\x02\x03\x04\x05abcdefgh ") for _ in range(2000)), "control characters"),
        ("high.txt", bytes(random.Random(2).randrange(0xA0, 0x100) for _ in range(2000)), "non-ASCII"),
        ("cyrillic.md", "Годовой отчёт компании за 2023 год. Выручка выросла.".encode("cp1251"), "convert it to UTF-8"),
    ],
)
def test_binary_or_undecodable_text_file_is_rejected_with_a_typed_error(tmp_path, reader, name, data, why):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(UndecodableTextError) as info:
        reader.load_data(path)
    assert isinstance(info.value, UnsupportedDocumentError)
    assert info.value.path == str(path) and why in info.value.reason
    folder_docs = reader.load_data(tmp_path)  # in a folder: skipped and reported, never indexed
    assert folder_docs == [] and [f.path for f in reader.failures] == [str(path)]


@pytest.mark.parametrize(
    "data, text",
    [
        ("Prix: 12 € — café, naïve, 東京.\n".encode("utf-8"), "Prix: 12 € — café, naïve, 東京.\n"),
        ("\ufeffWith a byte-order mark.".encode("utf-8"), "With a byte-order mark."),
        ("Caf\xe9 cr\xe8me br\xfbl\xe9e, na\xefve fa\xe7ade.".encode("latin-1"), "Café crème brûlée, naïve façade."),
        ("\u201cQuoted\u201d \u2013 Windows text".encode("cp1252"), "\u201cQuoted\u201d \u2013 Windows text"),
        ("Unicode from Notepad: café".encode("utf-16"), "Unicode from Notepad: café"),
        # UTF-8 with one stray Windows-1252 byte: the UTF-8 stays UTF-8 (not "CafÃ© â€”").
        ("Café — naïve, then a stray ".encode("utf-8") + b"caf\xe9.", "Café — naïve, then a stray café."),
        (b"log line \x1b[31mred\x1b[0m\n\fnext page\n", "log line \x1b[31mred\x1b[0m\n\fnext page\n"),
    ],
)
def test_real_text_in_its_usual_encodings_still_loads(tmp_path, reader, data, text):
    path = tmp_path / "notes.txt"
    path.write_bytes(data)
    assert reader.load_data(path)[0].text == text


def _symlink(link: Path, target: Path) -> None:
    try:
        os.symlink(target, link, target_is_directory=target.is_dir())
    except (OSError, NotImplementedError):
        pytest.skip("symlinks are not available on this system")


def test_symlinks_out_of_the_folder_are_skipped_unless_asked_and_no_file_is_read_twice(tmp_path):
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "secret.md").write_text("# Secret\n\nNot part of the collection.\n")
    (outside / "deep" / "other.md").write_text("# Other\n\nAlso outside.\n")
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("# A\n\nInside.\n")
    (folder / "sub" / "b.md").write_text("# B\n\nInside too.\n")
    _symlink(folder / "link.md", outside / "secret.md")  # file out of the folder
    _symlink(folder / "outdir", outside / "deep")  # folder out of the folder
    _symlink(folder / "alias.md", folder / "a.md")  # a second path to a.md
    _symlink(folder / "sub" / "loop", folder)  # a cycle
    _symlink(folder / "gone.md", tmp_path / "missing.md")  # broken

    reader = PDFLayoutReader(recursive=True)
    docs = reader.load_data(folder)
    assert [d.metadata[schema.DOCUMENT_ID] for d in docs] == ["a", "b"]
    assert docs[0].metadata[schema.FILE_PATH] == str(folder / "a.md")  # the real path, not the alias
    failures = {Path(f.path).name: f for f in reader.failures}
    assert set(failures) == {"link.md", "outdir", "gone.md"}
    assert all(type(f) is SkippedDocumentError for f in failures.values())
    assert "outside the folder" in failures["link.md"].reason and "follow_symlinks=True" in failures["link.md"].reason
    assert "broken symlink" in failures["gone.md"].reason

    followed = PDFLayoutReader(recursive=True, follow_symlinks=True)
    ids = sorted(d.metadata[schema.DOCUMENT_ID] for d in followed.load_data(folder))
    assert ids == ["a", "b", "link", "other"]
    assert [Path(f.path).name for f in followed.failures] == ["gone.md"]


def test_each_skipped_file_is_reported_once_as_one_line(tmp_path, caplog):
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    _manual_pdf(folder / "good.pdf")
    bad = folder / "sub" / "bad.pdf"
    bad.write_bytes(b"%PDF-1.7\n" + b"1 0 obj\n<< /Type /Catalog >>\nendobj\n")
    _symlink(folder / "again", folder / "sub")  # the bad file is reachable by two paths
    reader = PDFLayoutReader(recursive=True)
    with caplog.at_level(logging.WARNING, logger="llama_index_hiqa.readers.pdf"):
        docs = reader.load_data(folder)
    assert [d.metadata[schema.DOCUMENT_ID] for d in docs] == ["good"]
    (failure,) = reader.failures
    assert failure.path == str(bad)
    line = str(failure)
    assert line.startswith(f"{bad}: ") and "\n" not in line
    assert caplog.text.count("bad.pdf") == 1
    # A list naming the same bad file twice, and a second load: still one entry each time.
    for _ in range(2):
        reader.load_data([bad, folder / "good.pdf", bad])
        assert [f.path for f in reader.failures] == [str(bad)]
    caplog.clear()
    quiet = PDFLayoutReader(recursive=True, log_skipped=False)
    with caplog.at_level(logging.WARNING, logger="llama_index_hiqa.readers.pdf"):
        quiet.load_data(folder)
    assert caplog.text == "" and len(quiet.failures) == 1


def test_colliding_stems_get_relative_path_ids_and_id_is_the_document_id(tmp_path):
    folder = tmp_path / "docs"
    (folder / "a").mkdir(parents=True)
    (folder / "b").mkdir()
    (folder / "x.md").write_text("# X markdown\n")
    (folder / "x.txt").write_text("X as text\n")
    (folder / "y.md").write_text("# Y\n")
    _manual_pdf(folder / "a" / "r.pdf")
    _manual_pdf(folder / "b" / "r.pdf")
    flat = PDFLayoutReader().load_data(folder)
    assert [d.metadata[schema.DOCUMENT_ID] for d in flat] == ["x.md", "x.txt", "y"]
    deep = PDFLayoutReader(recursive=True).load_data(folder)
    ids = [d.metadata[schema.DOCUMENT_ID] for d in deep]
    assert ids == ["a/r.pdf", "b/r.pdf", "x.md", "x.txt", "y"]
    assert [d.id_ for d in deep] == ids  # the ref_doc_id a docstore upserts by
    listed = PDFLayoutReader().load_data([folder / "a" / "r.pdf", folder / "b" / "r.pdf", folder / "y.md"])
    assert [d.id_ for d in listed] == ["a/r.pdf", "b/r.pdf", "y"]
    assert PDFLayoutReader().load_data(folder / "x.md")[0].id_ == "x"  # alone: its stem


def test_reingesting_a_folder_upserts_by_document_id(tmp_path):
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.ingestion import IngestionPipeline
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.storage.docstore import SimpleDocumentStore
    from llama_index.core.vector_stores import SimpleVectorStore

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "x.md").write_text("# X\n\nFirst version of x.\n")
    (folder / "x.txt").write_text("Plain x.\n")
    vectors = SimpleVectorStore()
    pipeline = IngestionPipeline(
        transformations=[SentenceSplitter(), MockEmbedding(embed_dim=4)],
        docstore=SimpleDocumentStore(),
        vector_store=vectors,
    )
    reader = PDFLayoutReader()
    assert len(pipeline.run(documents=reader.load_data(folder))) == 2
    assert pipeline.run(documents=reader.load_data(folder)) == []  # unchanged: nothing redone
    (folder / "x.md").write_text("# X\n\nSecond version of x.\n")
    (changed,) = pipeline.run(documents=reader.load_data(folder))
    assert changed.ref_doc_id == "x.md" and "Second version" in changed.text
    assert sorted(vectors.data.text_id_to_ref_doc_id.values()) == ["x.md", "x.txt"]  # the old node is gone


def test_lazy_load_data_reads_one_file_per_document_it_yields(tmp_path, monkeypatch):
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("a", "b", "c"):
        (folder / f"{name}.md").write_text(f"# {name}\n\nText of {name}.\n")
    (folder / "d.txt").write_bytes(b"\x00binary")
    reader = PDFLayoutReader()
    read = []
    original = PDFLayoutReader.read_file
    monkeypatch.setattr(
        PDFLayoutReader, "read_file", lambda self, path, *a, **k: read.append(Path(path).name) or original(self, path, *a, **k)
    )
    stream = reader.lazy_load_data(folder)
    assert inspect.isgenerator(stream)
    first = next(stream)
    assert first.metadata[schema.DOCUMENT_ID] == "a" and read == ["a.md"]
    rest = list(stream)
    assert [d.metadata[schema.DOCUMENT_ID] for d in rest] == ["b", "c"]
    assert [Path(f.path).name for f in reader.failures] == ["d.txt"]
    assert [d.text for d in reader.load_data(folder)] == [first.text] + [d.text for d in rest]


def test_small_bold_statement_title_is_a_layout_heading_but_small_bold_row_labels_are_not(tmp_path):
    """Statements are set smaller than the text with bold titles and bold row labels: the
    title is a heading candidate whatever its size, a row label is not."""
    doc = pymupdf.open()
    page = doc.new_page(width=W, height=H)
    y = 80
    for i in range(12):
        _text(page, y, f"Body sentence {i} of the annual report explains the results of the year.")
        y += 14
    _text(page, y + 10, "Consolidated Balance Shee t", size=8, bold=True)
    _text(page, y + 24, "Current assets", size=8, bold=True)
    _text(page, y + 38, "Cash and cash equivalents 2,853 3,053", size=8)
    path = tmp_path / "statement.pdf"
    doc.save(path)
    read = PDFLayoutReader().load_data(path)[0]
    headings = [read.text[s:e] for s, e, *_ in schema.layout_headings_of(read.metadata)]
    assert any("Consolidated Balance Shee t" in h for h in headings)
    assert not any("Current assets" in h for h in headings)


def _statement_pdf(path: Path) -> Path:
    """An unruled statement: a years header, "$" set apart from its figures, a label-only
    section row, a negative figure in parentheses; then running text with figures in it."""
    doc = pymupdf.open()
    page = doc.new_page(width=W, height=H)
    _text(page, 80, "CONSOLIDATED BALANCE SHEETS", bold=True)
    _text(page, 110, "(Millions)", size=9)
    for x, year in ((380, "2018"), (480, "2017")):
        _text(page, 110, year, size=9, x=x)
    rows = [("Current assets", None, None), ("Accounts payable", ("$", "2,266"), ("$", "1,945")),
            ("Accumulated depreciation", "(16,135)", "(16,048)"), ("Total other assets", ("$", "1,345"), ("$", "1,395"))]
    for i, (label, a, b) in enumerate(rows):
        y = 126 + i * 14
        _text(page, y, label, size=9)
        for x, value in ((380, a), (480, b)):
            if isinstance(value, tuple):
                _text(page, y, value[0], size=9, x=x - 25)
                value = value[1]
            if value:
                _text(page, y, value, size=9, x=x)
    _text(page, 220, "Revenue grew 12 percent to 32,765 million in 2018 from 31,657 million in 2017.")
    doc.save(path)
    return path


def test_unruled_statement_becomes_a_table_with_its_headers_when_asked(tmp_path):
    path = _statement_pdf(tmp_path / "statement.pdf")
    text = PDFLayoutReader(detect_unruled_tables=True).load_data(path)[0].text
    assert "|(Millions)|2018|2017|\n|---|---|---|" in text
    assert "|Current assets|||" in text
    assert "|Accounts payable|$2,266|$1,945|" in text
    assert "|Accumulated depreciation|(16,135)|(16,048)|" in text
    # The sentence with figures is text, after the table, not a row of it.
    assert "Revenue grew 12 percent to 32,765 million" in text and "|Revenue" not in text
    assert text.index("CONSOLIDATED BALANCE SHEETS") < text.index("|(Millions)|")
    # Off by default: the default reader keeps the rows as text lines.
    default = PDFLayoutReader().load_data(path)[0].text
    assert "|---|" not in default and "Accounts payable" in default
