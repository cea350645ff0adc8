"""The README's "Drop one component into your app" table works as written, row by row.

The section's code block is a bare LlamaIndex app. Each row of its table is applied to that
code as the row says ("`X` instead of `Y`" puts X where Y was, "append `X` to
`transformations=[...]`" appends X to the list, any other row runs X after the app) and the
result runs in a fresh namespace, in a folder whose ``manuals/`` holds the ten demo datasheets,
with the row's names imported from ``llama_index_hiqa``. So README and test cannot drift: a
changed row runs as changed, and a row without a check below fails. Each check asserts what the
row promises on the demo questions (``demo_data/questions.jsonl``): the gold datasheet is
retrieved, nodes carry heading paths, segments are whole.

The embedding is the README's own line (the packaged MiniLM, one vector cache for the module);
``llm`` is a :class:`~llama_index_hiqa.testing.ScriptedLLM` playing the part each row asks of
it, and ``Settings.llm`` LlamaIndex's offline ``MockLLM`` (the components take their no-LLM
paths). ``SimpleDirectoryReader`` reads PDFs
page by page as with ``llama-index-readers-file`` (that package pins an older pandas than the
pack's dependencies allow, so :class:`~llama_index_hiqa.testing.PDFPageReader` takes its
place); the segment parsers are also run on the raw bytes it reads without that package.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest
from llama_index.core import Settings, SimpleDirectoryReader
from llama_index.core.llms import MockLLM
from llama_index.core.schema import BaseNode, MetadataMode

import llama_index_hiqa
from llama_index_hiqa import LayoutMarkdownParser, PDFLayoutReader, demo_data_dir, schema
from llama_index_hiqa.parsers.markdown_formatter import window_from_prompt
from llama_index_hiqa.testing import PDFPageReader, ScriptedLLM

pytestmark = pytest.mark.slow  # the packaged MiniLM embeds the demo datasheets

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Drop one component into your app"
STATEMENT = re.compile(r"^\w+ = ")
PART = re.compile(r"NX-\d{4}")


# --- the README's section --------------------------------------------------------------


def section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(SECTION)
    return text[start : text.index("\n## ", start + 1)]


def app_code() -> str:
    """The bare app: the section's one Python block."""
    blocks = re.findall(r"```python\n(.*?)```", section(), re.S)
    assert len(blocks) == 1, "the drop-in section holds one app"
    return blocks[0]


def table_rows() -> Dict[str, str]:
    """``{you want: the one-line change}`` of the table, in order."""
    rows = {}
    for line in section().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 2 and cells[0] not in ("you want", "---"):
            rows[cells[0]] = cells[1]
    return rows


def apply_row(code: str, change: str) -> Tuple[str, Optional[str]]:
    """The app's code with the row's change, and the code the row runs after the app."""
    spans = re.findall(r"`([^`]+)`", change)
    new = spans[0]
    if " instead of " in change:
        old = spans[1]
        lines = code.splitlines()
        for i, line in enumerate(lines):
            if old in line and not line.startswith(("from ", "import ")):
                lines[i] = new if STATEMENT.match(new) else line.replace(old, new)
                return "\n".join(lines) + "\n", None
        raise AssertionError(f"the app has no {old!r} for the row {change!r}")
    if change.startswith("append "):
        code, count = re.subn(r"(transformations=\[[^\]]*)\]", lambda m: f"{m.group(1)}, {new}]", code)
        assert count == 1, "the app has one transformations list"
        return code, None
    return code, new


def run(code: str, after: Optional[str] = None, **names: Any) -> Dict[str, Any]:
    """Run an app (and a row's code after it) as a user's script: the names it uses of
    ``llama_index_hiqa`` imported, ``names`` given; ``result`` holds an expression row's value."""
    used = set(re.findall(r"[A-Za-z_]\w*", code + (after or "")))
    namespace: Dict[str, Any] = {n: getattr(llama_index_hiqa, n) for n in used & set(llama_index_hiqa.__all__)}
    namespace.update(names)
    exec(compile(code, "README.md (drop-in app)", "exec"), namespace)
    if after is not None:
        if STATEMENT.match(after):
            exec(compile(after, "README.md (drop-in row)", "exec"), namespace)
        else:
            namespace["result"] = eval(compile(after, "README.md (drop-in row)", "eval"), namespace)
    return namespace


# --- scripted LLMs ---------------------------------------------------------------------


def sections_at_headings(prompt: str) -> str:
    """LineNumberSegmentParser's LLM: a section at every Markdown heading line of the excerpt."""
    lines = re.findall(r"(?m)^\[(\d+)\] ?(.*)$", prompt.split("DOCUMENT EXCERPT", 1)[1])
    starts = [(int(n), text) for n, text in lines if text.startswith("#")]
    first, last = int(lines[0][0]), int(lines[-1][0])
    if not starts or starts[0][0] != first:
        starts.insert(0, (first, "Preamble"))
    sections = [
        {"title": title.lstrip("#").strip(), "start_index": start,
         "end_index": (starts[i + 1][0] - 1) if i + 1 < len(starts) else last}
        for i, (start, title) in enumerate(starts)
    ]
    return json.dumps({"sections": sections})


def context_headers(prompt: str) -> str:
    """ContextHeaderTransform's LLM: titles and summaries naming the datasheet's part."""
    part = (PART.findall(prompt) or ["the device"])[0]
    if "title of the document" in prompt:
        return f"{part} datasheet"
    if "summarize the content of the document" in prompt:
        return f"This document is about: the {part} voltage regulator."
    return f"This section is about: a part of the {part} datasheet."


# --- the module's app ------------------------------------------------------------------


class Dropin:
    """What the rows share: the folder, the vector cache, the questions, the reference nodes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cache = folder / "vectors"
        lines = (demo_data_dir() / "questions.jsonl").read_text(encoding="utf-8").splitlines()
        self.questions = [(q["question"], q["gold"][0]["document_id"]) for q in map(json.loads, filter(None, lines))]
        self.bare: Dict[str, Any] = {}
        self.reference = node_facts(LayoutMarkdownParser().get_nodes_from_documents(
            PDFLayoutReader().load_data(folder / "manuals")))

    def row(self, want: str, **names: Any) -> Dict[str, Any]:
        """Run the app with the README row ``want``."""
        code, after = apply_row(app_code(), table_rows()[want])
        return run(code, after, **names)


@pytest.fixture(scope="module")
def dropin(tmp_path_factory) -> Dropin:
    folder = tmp_path_factory.mktemp("dropin")
    (folder / "manuals").mkdir()
    for pdf in demo_data_dir().glob("*.pdf"):
        shutil.copy(pdf, folder / "manuals" / pdf.name)
    return Dropin(folder)


@pytest.fixture(autouse=True)
def bare_app(dropin, monkeypatch) -> Dropin:
    """Each test in the module's folder and vector cache, with ``llama-index-readers-file``'s
    PDF pages; the bare app is built once."""
    monkeypatch.chdir(dropin.folder)
    monkeypatch.setenv("HIQA_CACHE_DIR", str(dropin.cache))
    monkeypatch.setattr(Settings, "_embed_model", None)
    monkeypatch.setattr(Settings, "_llm", MockLLM())  # LlamaIndex's offline stand-in: no LLM paths
    monkeypatch.setattr(SimpleDirectoryReader, "supported_suffix_fn", lambda: {".pdf": PDFPageReader})
    if not dropin.bare:
        dropin.bare = run(app_code())
    return dropin


# --- what the checks measure -------------------------------------------------------------


def datasheet(node: BaseNode, known: Dict[str, str]) -> str:
    """The datasheet a node comes from: its file name, else its document's."""
    name = node.metadata.get(schema.FILE_NAME)
    if name:
        return Path(str(name)).stem
    return known.get(node.metadata.get(schema.DOCUMENT_ID) or node.ref_doc_id or "", "")


def doc_hits(ask: Callable[[str], Sequence], index, questions, k: int) -> float:
    """Share of questions whose gold datasheet is among the first ``k`` nodes ``ask`` returns."""
    known = {n.ref_doc_id: Path(str(n.metadata.get(schema.FILE_NAME, ""))).stem for n in index.docstore.docs.values()}
    found = 0
    for question, gold in questions:
        found += gold in [datasheet(n.node, known) for n in ask(question)][:k]
    return found / len(questions)


def vector_hits(index, questions, k: int = 5) -> float:
    return doc_hits(index.as_retriever(similarity_top_k=k).retrieve, index, questions, k)


def stored_nodes(namespace: Dict[str, Any]) -> List[BaseNode]:
    nodes = list(namespace["index"].docstore.docs.values())
    return sorted(nodes, key=lambda n: (schema.get_document_id(n), schema.get_position(n) or 0))


def node_facts(nodes: Sequence[BaseNode]) -> List[Tuple]:
    """What two segmentations must share: document, text, heading path, pages, kind."""
    return sorted(
        (schema.get_document_id(n), schema.get_position(n), n.get_content(MetadataMode.NONE),
         tuple(schema.get_heading_path(n)), schema.get_page_range(n), schema.get_segment_kind(n))
        for n in nodes
    )


# --- one check per row ---------------------------------------------------------------------


def check_reader(dropin: Dropin, want: str) -> None:
    ns = dropin.row(want)
    documents = ns["documents"]
    assert sorted(d.doc_id for d in documents) == [f"NX-20{i}" for i in range(40, 50)]
    for doc in documents:
        assert schema.page_spans_of(doc.metadata) and schema.layout_headings_of(doc.metadata)
        assert "| --- |" in doc.text or "|---|" in doc.text  # the specification tables
    assert {schema.get_document_id(n) for n in stored_nodes(ns)} == {d.doc_id for d in documents}


def check_layout_parser(dropin: Dropin, want: str) -> None:
    ns = dropin.row(want)
    nodes = stored_nodes(ns)
    # SimpleDirectoryReader's pages are read again from their PDFs: the nodes PDFLayoutReader's
    # documents give, with its document ids, each file once.
    assert node_facts(nodes) == dropin.reference
    assert sum(schema.has_heading_path(n) for n in nodes) >= 0.9 * len(nodes)
    assert vector_hits(ns["index"], dropin.questions) >= vector_hits(dropin.bare["index"], dropin.questions) + 0.08


def check_layout_parser_on_raw_bytes(dropin: Dropin, want: str, monkeypatch) -> None:
    monkeypatch.setattr(SimpleDirectoryReader, "supported_suffix_fn", lambda: {})  # no readers-file
    ns = dropin.row(want)
    assert ns["documents"][0].text.startswith("%PDF")
    assert node_facts(stored_nodes(ns)) == dropin.reference


def check_formatter(dropin: Dropin, want: str) -> None:
    llm = ScriptedLLM(window_from_prompt)  # a model that gives its window back as it is
    ns = dropin.row(want, llm=llm)
    nodes = stored_nodes(ns)
    assert llm.calls >= 10
    assert {n.metadata[schema.PARSE_PATH] for n in nodes} == {"llm"}
    assert {schema.get_document_id(n) for n in nodes} == {f"NX-20{i}" for i in range(40, 50)}
    paths = {h.label() for n in nodes for h in schema.get_heading_path(n)}
    assert {"4 Specifications", "4.2 Electrical characteristics"} <= paths
    assert vector_hits(ns["index"], dropin.questions) >= vector_hits(dropin.bare["index"], dropin.questions) + 0.08


def check_line_numbers(dropin: Dropin, want: str) -> None:
    llm = ScriptedLLM(sections_at_headings)
    ns = dropin.row(want, llm=llm)
    nodes = stored_nodes(ns)
    assert llm.calls >= 10
    assert {schema.get_document_id(n) for n in nodes} == {f"NX-20{i}" for i in range(40, 50)}
    titled = [
        n for n in nodes
        if schema.get_segment_kind(n) == schema.KIND_TEXT and schema.get_heading_path(n)[-1].title != "Preamble"
    ]
    assert len(titled) >= 30
    for node in titled:  # every section is whole: its heading line and its text in one node
        lines = [line.lstrip("#").strip() for line in node.get_content(MetadataMode.NONE).splitlines()]
        assert schema.get_heading_path(node)[-1].title in lines


def check_cascade(dropin: Dropin, want: str, caplog) -> None:
    # On SentenceSplitter chunks there is no heading: the transform says so, once.
    with caplog.at_level(logging.WARNING, logger="llama_index_hiqa.transforms.cascading_metadata"):
        ns = dropin.row(want)
    warnings = [r for r in caplog.records if "no heading path" in r.getMessage() or "none of the" in r.getMessage()]
    assert len(warnings) == 1 and "LayoutMarkdownParser()" in warnings[0].getMessage()
    assert all(n.metadata[schema.HEADING_CASCADE].endswith(".pdf") for n in stored_nodes(ns))
    # After the segment parser: every node embeds its datasheet's title and its chapter.
    code, _ = apply_row(app_code(), table_rows()["chapter segments without an LLM"])
    code, _ = apply_row(code, table_rows()[want])
    ns = run(code)
    nodes = [n for n in stored_nodes(ns) if schema.get_heading_path(n)]
    assert len(nodes) >= 100
    for node in nodes:
        embedded = node.get_content(MetadataMode.EMBED)
        assert node.metadata[schema.DOCUMENT_TITLE] in embedded.splitlines()[0]
        assert PART.search(embedded.splitlines()[0]).group() == schema.get_document_id(node)
    assert vector_hits(ns["index"], dropin.questions) >= vector_hits(dropin.bare["index"], dropin.questions)


def check_context_header(dropin: Dropin, want: str) -> None:
    llm = ScriptedLLM(context_headers)
    ns = dropin.row(want, llm=llm)
    assert llm.calls >= 10
    for node in stored_nodes(ns):
        part = Path(node.metadata[schema.FILE_NAME]).stem
        assert f"This document is about: the {part} voltage regulator." in node.get_content(MetadataMode.EMBED)


def check_multi_route(dropin: Dropin, want: str) -> None:
    ns = dropin.row(want)
    retriever, index = ns["retriever"], ns["index"]
    assert type(retriever).__name__ == "MultiRouteRetriever"
    assert doc_hits(retriever.retrieve, index, dropin.questions, 1) >= 0.9
    assert doc_hits(retriever.retrieve, index, dropin.questions, 1) > vector_hits(index, dropin.questions, 1)


def check_chunk_graph(dropin: Dropin, want: str) -> None:
    code, after = apply_row(app_code(), table_rows()[want])
    assert code == app_code()  # the row adds a retriever to the app as it is
    ns = run("", after, **dropin.bare)
    index = ns["index"]
    assert doc_hits(ns["retriever"].retrieve, index, dropin.questions, 5) >= 0.9


def check_segments(dropin: Dropin, want: str, monkeypatch) -> None:
    # The user's LLM writes the answer (MockLLM's 3,900-token window is too small for the segments).
    monkeypatch.setattr(Settings, "_llm", ScriptedLLM(lambda p: "The answer."))
    code, after = apply_row(app_code(), table_rows()[want])
    assert code == app_code()
    ns = run("", after, **dropin.bare)
    engine, index = ns["result"], ns["index"]
    answers = {q: engine.query(q) for q, _ in dropin.questions}
    for response in answers.values():
        for segment in response.source_nodes:
            ids = segment.node.metadata[schema.SEGMENT_NODE_IDS]
            chunks = [index.docstore.get_node(i) for i in ids]
            assert len({c.ref_doc_id for c in chunks}) == 1  # one page's consecutive chunks
            assert [c.start_char_idx for c in chunks] == sorted(c.start_char_idx for c in chunks)
            assert all(c.get_content(MetadataMode.NONE)[:40] in segment.node.get_content(MetadataMode.NONE) for c in chunks)
    default = index.as_query_engine()
    segments = doc_hits(lambda q: answers[q].source_nodes, index, dropin.questions, 5)
    assert segments > doc_hits(lambda q: default.query(q).source_nodes, index, dropin.questions, 5)


def check_faithfulness(dropin: Dropin, want: str) -> None:
    code, after = apply_row(app_code(), table_rows()[want])
    assert code == app_code()
    q = dropin.questions[3][0]
    index = dropin.bare["index"]
    context = index.as_retriever().retrieve(q)[0].node.get_content(MetadataMode.NONE)
    faithful = index.as_query_engine(llm=ScriptedLLM(lambda p: context[:400])).query(q)
    made_up = index.as_query_engine(llm=ScriptedLLM(lambda p: "Bananas ripen faster in a paper bag.")).query(q)
    grounded = run("", after, q=q, response=faithful, **dropin.bare)["result"]
    invented = run("", after, q=q, response=made_up, **dropin.bare)["result"]
    assert grounded.score > invented.score + 0.3


CHECKS: Dict[str, Callable[..., None]] = {
    "pages, headings, tables of PDFs": check_reader,
    "chapter segments without an LLM": check_layout_parser,
    "chapter segments written by an LLM": check_formatter,
    "sections of unstructured text": check_line_numbers,
    "the heading path in every embedding": check_cascade,
    "LLM document/section summaries in the embedding": check_context_header,
    "vector + BM25 + keywords": check_multi_route,
    "multi-hop evidence chains": check_chunk_graph,
    "whole segments instead of scattered chunks": check_segments,
    "a reference-free faithfulness score": check_faithfulness,
}


def test_every_row_has_a_check():
    assert list(table_rows()) == list(CHECKS)


@pytest.mark.parametrize("want", list(CHECKS))
def test_row_works_in_a_bare_app(want, bare_app, request):
    check = CHECKS[want]
    fixtures = list(inspect.signature(check).parameters)[2:]  # caplog, monkeypatch where asked
    check(bare_app, want, **{name: request.getfixturevalue(name) for name in fixtures})


def test_layout_parser_row_on_raw_pdf_bytes(bare_app, monkeypatch):
    check_layout_parser_on_raw_bytes(bare_app, "chapter segments without an LLM", monkeypatch)


def test_bare_app_runs_as_written(bare_app):
    """The app itself, offline: the README's embedding line, PDF pages, LlamaIndex's top-k of 2."""
    ns = bare_app.bare
    assert type(ns["index"]._embed_model).__name__ == "CachedEmbedding"
    assert len(ns["documents"]) == 20 and ns["documents"][0].metadata["page_label"] == "1"
    assert len(ns["retriever"].retrieve(bare_app.questions[0][0])) == 2
