"""Segment parsers on documents of another reader: the files they name are read again.

``SimpleDirectoryReader`` gives a PDF as one document per page (``llama-index-readers-file``,
here :class:`~llama_index_hiqa.testing.PDFPageReader`) or as its raw bytes; either way the
segment parsers must cut the nodes they cut from ``PDFLayoutReader``'s documents, and say so,
once, when a document without layout facts names no readable file.
"""

from __future__ import annotations

import logging
import shutil

import pytest
from llama_index.core import SimpleDirectoryReader
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.schema import Document, MetadataMode

from llama_index_hiqa import LayoutMarkdownParser, MarkdownFormatterParser, PDFLayoutReader, demo_data_dir, schema
from llama_index_hiqa.readers.source_files import read_source_files
from llama_index_hiqa.testing import PDFPageReader

PARSER_LOG = "llama_index_hiqa.parsers.layout_markdown"


@pytest.fixture(scope="module")
def manuals(tmp_path_factory):
    folder = tmp_path_factory.mktemp("manuals")
    for pdf in sorted(demo_data_dir().glob("*.pdf")):
        shutil.copy(pdf, folder / pdf.name)
    return folder


@pytest.fixture(scope="module")
def reference(manuals):
    """The nodes of PDFLayoutReader's own documents."""
    return facts(LayoutMarkdownParser().get_nodes_from_documents(PDFLayoutReader().load_data(manuals)))


def pages_of(folder):
    return SimpleDirectoryReader(str(folder), file_extractor={".pdf": PDFPageReader()}).load_data()


def facts(nodes):
    """Document, position, text, heading path, pages and kind of every node, in order."""
    return [
        (schema.get_document_id(n), schema.get_position(n), n.get_content(MetadataMode.NONE),
         tuple(schema.get_heading_path(n)), schema.get_page_range(n), schema.get_segment_kind(n))
        for n in nodes
    ]


def test_page_documents_give_the_nodes_of_pdf_layout_reader_documents(manuals, reference):
    pages = pages_of(manuals)
    assert len(pages) == 20 and all(schema.PAGE_SPANS not in d.metadata for d in pages)
    nodes = LayoutMarkdownParser().get_nodes_from_documents(pages)
    assert facts(nodes) == reference
    # ids: the file stems (stable across runs), not SimpleDirectoryReader's random ids
    assert {n.ref_doc_id for n in nodes} == {f"NX-20{i}" for i in range(40, 50)}
    assert facts(LayoutMarkdownParser().get_nodes_from_documents(pages_of(manuals))) == reference


def test_raw_pdf_bytes_give_the_same_nodes(manuals, reference):
    """Without llama-index-readers-file, SimpleDirectoryReader decodes the PDF file as text."""
    raw = SimpleDirectoryReader(str(manuals), file_extractor={}).load_data()
    if not raw[0].text.startswith("%PDF"):
        pytest.skip("llama-index-readers-file is installed: SimpleDirectoryReader reads PDF pages")
    assert facts(LayoutMarkdownParser().get_nodes_from_documents(raw)) == reference


def test_in_an_ingestion_pipeline_each_file_is_read_once(manuals, reference, monkeypatch):
    read = []
    original = PDFLayoutReader.read_file

    def counting(self, path, *args, **kwargs):
        read.append(path)
        return original(self, path, *args, **kwargs)

    monkeypatch.setattr(PDFLayoutReader, "read_file", counting)
    nodes = IngestionPipeline(transformations=[LayoutMarkdownParser()]).run(documents=pages_of(manuals))
    assert facts(nodes) == reference
    assert len(read) == len(set(read)) == 10


def test_the_file_metadata_all_pages_share_is_kept_and_stays_hidden(manuals):
    pages = pages_of(manuals)
    nodes = LayoutMarkdownParser().get_nodes_from_documents(pages)
    meta = nodes[0].metadata
    assert meta["file_size"] == pages[0].metadata["file_size"] and "page_label" not in meta
    assert meta[schema.DOCUMENT_TITLE] == "NX-2040 Precision Voltage Regulator"
    shown = nodes[0].get_content(MetadataMode.EMBED)
    assert "file_size" not in shown and "creation_date" not in shown


def test_the_formatter_without_an_llm_reads_the_files_too(manuals, reference):
    nodes = MarkdownFormatterParser(llm=None).get_nodes_from_documents(pages_of(manuals))
    assert facts(nodes) == reference


def test_documents_with_layout_facts_or_without_a_file_are_left_as_given(manuals):
    layout = PDFLayoutReader().load_data(manuals / "NX-2040.pdf")
    typed = Document(text="# A note\n\nTyped in.", id_="note")
    gone = Document(text="x", metadata={schema.FILE_PATH: str(manuals / "missing.pdf")}, id_="gone")
    csv = Document(text="a,b", metadata={schema.FILE_PATH: str(manuals / "t.csv")}, id_="csv")
    reading = read_source_files([*layout, typed, gone, csv])
    assert reading.documents == [*layout, typed, gone, csv]
    assert [d.doc_id for d in reading.unread] == ["note", "gone", "csv"]
    assert reading.reasons["note"] == "no file_path metadata"
    assert "no such file" in reading.reasons["gone"] and "does not read" in reading.reasons["csv"]


def test_an_unreadable_file_warns_once_naming_the_fix(tmp_path, caplog):
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7\nnot really a PDF")
    documents = [
        Document(text=f"page {i} of a PDF whose text has no heading at all. " * 40,
                 metadata={schema.FILE_PATH: str(broken), schema.FILE_NAME: broken.name})
        for i in range(3)
    ]
    parser = LayoutMarkdownParser()
    with caplog.at_level(logging.WARNING, logger=PARSER_LOG):
        first = parser.get_nodes_from_documents(documents)
        parser.get_nodes_from_documents(documents)
    warnings = [r for r in caplog.records if r.name == PARSER_LOG]
    assert len(warnings) == 1  # once per parser, not per node, document or call
    message = warnings[0].getMessage()
    assert "3 document(s) without layout facts" in message and "PDFLayoutReader" in message
    assert "broken.pdf" in message
    # the documented fallback: every document is cut from its own text, nothing lost
    assert "".join(n.text for n in first) == "".join(d.text for d in documents)


def test_no_warning_when_the_text_has_headings_or_the_file_is_read(manuals, caplog):
    with caplog.at_level(logging.WARNING, logger=PARSER_LOG):
        LayoutMarkdownParser().get_nodes_from_documents([Document(text="# 1 Intro\n\nText.\n\n# 2 Use\n\nMore.")])
        LayoutMarkdownParser().get_nodes_from_documents(pages_of(manuals)[:2])
    assert not [r for r in caplog.records if r.name == PARSER_LOG]


def test_read_source_files_false_cuts_the_text_as_given_and_warns(manuals, caplog):
    pages = pages_of(manuals)[:2]
    with caplog.at_level(logging.WARNING, logger=PARSER_LOG):
        nodes = LayoutMarkdownParser(read_source_files=False).get_nodes_from_documents(pages)
    assert {n.ref_doc_id for n in nodes} == {d.doc_id for d in pages}
    assert "read_source_files=False" in caplog.records[-1].getMessage()


def test_the_pack_plans_page_documents_as_their_files(manuals):
    """Added twice, SimpleDirectoryReader's pages (new random ids each load) are one copy."""
    from llama_index_hiqa import HiQAPack
    from llama_index_hiqa.testing import HashingEmbedding

    pack = HiQAPack.from_documents(pages_of(manuals), embed_model=HashingEmbedding())
    assert sorted(pack.document_ids) == [f"NX-20{i}" for i in range(40, 50)]
    count = pack.node_count
    assert pack.add_documents(pages_of(manuals)) == []
    assert pack.node_count == count >= 100
