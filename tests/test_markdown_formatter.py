"""MarkdownFormatterParser: sliding-window LLM formatting (HiQA Algorithm 1), offline."""

from __future__ import annotations

import math
import re
import warnings

import pytest
from llama_index.core import Settings
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.schema import Document, NodeRelationship

from llama_index_hiqa import LLMOutputError, MarkdownFormatterParser, schema
from llama_index_hiqa.parsers.markdown_formatter import (
    MarkdownCoverageWarning,
    check_window,
    window_from_prompt,
)
from llama_index_hiqa.testing import ScriptedLLM

_HEADING_LINE = re.compile(r"(?m)^(\d+(?:\.\d+)*) ([A-Z][\w ]+)$")


def words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def good_markdown(window: str) -> str:
    """What a well-behaved model answers: numbered chapter lines become '# n title'."""
    return _HEADING_LINE.sub(r"# \1 \2", window)


def good(prompt: str) -> str:
    return good_markdown(window_from_prompt(prompt))


def _doc(text, doc_id="d1", **meta):
    return Document(
        text=text,
        metadata={schema.DOCUMENT_ID: doc_id, schema.DOCUMENT_TITLE: f"Title {doc_id}", **meta},
        id_=f"doc-{doc_id}",
    )


def datasheet_text() -> str:
    return (
        "ACM1234 datasheet\n\n1 Features\n\n" + words("feat", 70) + "\n\n"
        "2 Specifications\n\n" + words("spec", 30) + "\n\n2.1 Ratings\n\n" + words("rate", 50)
        + "\n\nTable 1. Ratings\n| Parameter | Max |\n| --- | --- |\n"
        + "\n".join(f"| param{i} | {i} |" for i in range(12))
        + "\n\n" + words("after", 40) + "\n\n3 Layout\n\n" + words("lay", 90)
    )


def _source_words(text):
    return re.findall(r"[A-Za-z0-9]+", text)


def _assert_nothing_lost(doc, nodes):
    joined = " ".join(n.text for n in nodes)
    missing = [w for w in _source_words(doc.text) if w not in joined]
    assert not missing, missing[:10]


def _assert_consecutive(doc, nodes):
    assert [schema.get_position(n) for n in nodes] == list(range(len(nodes)))
    spans = [schema.get_char_span(n) for n in nodes]
    assert spans[0][0] == 0 and spans[-1][1] == len(doc.text)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


# --- windows -------------------------------------------------------------------------


def test_windows_follow_algorithm_1():
    text = datasheet_text()
    parser = MarkdownFormatterParser(llm=ScriptedLLM(good), window_words=60, padding_words=10)
    windows = parser.windows(text)
    n_words = len(text.split())
    assert len(windows) == math.ceil(n_words / 60)
    assert windows[0].start == 0 and windows[-1].end == len(text)
    for a, b in zip(windows, windows[1:]):
        assert a.end == b.start and text[b.start - 1].isspace()
        assert len(b.before.split()) == 10 and text[: b.start].endswith(b.before)
        assert len(a.after.split()) == min(10, len(text[a.end :].split()))
        assert text[a.end :].startswith(a.after)
    assert windows[0].before == "" and windows[-1].after == ""


def test_window_borders_move_to_line_breaks():
    text = "\n".join(words(f"l{i}x", 7) for i in range(40))
    parser = MarkdownFormatterParser(llm=ScriptedLLM(good), window_words=50, padding_words=10)
    windows = parser.windows(text)
    assert len(windows) == math.ceil(280 / 50)
    assert all(text[w.start - 1] == "\n" for w in windows[1:])  # a seam never cuts a line


def test_prompt_carries_previous_window_and_padding():
    text = datasheet_text()
    llm = ScriptedLLM(good)
    parser = MarkdownFormatterParser(llm=llm, window_words=60, padding_words=10)
    parser.get_nodes_from_documents([_doc(text)])
    windows = parser.windows(text)
    assert llm.calls == len(windows)
    second = llm.prompts[1]
    first_input = text[windows[0].start : windows[0].end]
    assert first_input in second  # window t-1's input ...
    assert good_markdown(first_input) in second  # ... and its output
    assert window_from_prompt(second) == text[windows[1].start : windows[1].end]
    assert windows[1].before in second and windows[1].after in second
    assert "first window" in llm.prompts[0]
    for rule in ("heading", "chapter number", "Markdown tables", "title"):
        assert rule in llm.prompts[0]


# --- good answers, seams ------------------------------------------------------------


def test_segments_heading_paths_tables_and_positions():
    text = datasheet_text()
    doc = _doc(text, **{schema.PAGE_SPANS: [[0, 0, len(text) // 2], [1, len(text) // 2, len(text)]]})
    llm = ScriptedLLM(good)
    nodes = MarkdownFormatterParser(llm=llm, window_words=60, padding_words=10).get_nodes_from_documents([doc])
    _assert_consecutive(doc, nodes)
    _assert_nothing_lost(doc, nodes)
    paths = [[h.label() for h in schema.get_heading_path(n)] for n in nodes]
    assert paths[0] == []  # "ACM1234 datasheet" before the first chapter
    assert ["2 Specifications", "2.1 Ratings"] in paths and ["3 Layout"] in paths
    assert all(n.metadata[schema.PARSE_PATH] == "llm" for n in nodes)
    assert all(n.metadata[schema.COVERAGE] == 1.0 for n in nodes)
    assert not set(schema.DOCUMENT_ONLY_KEYS) & set(nodes[0].metadata)
    # node text is the model's Markdown; the span points at the same chapter in the source
    layout = next(n for n in nodes if [h.label() for h in schema.get_heading_path(n)] == ["3 Layout"])
    assert layout.text.startswith("# 3 Layout")
    start, end = schema.get_char_span(layout)
    assert text[start:end].startswith("3 Layout") and text[start:end].rstrip().endswith("lay89")
    assert schema.get_page_range(layout) == (1, 1)
    assert layout.ref_doc_id == doc.doc_id
    assert nodes[2].relationships[NodeRelationship.PREVIOUS].node_id == nodes[1].node_id


def test_table_split_across_the_seam_stays_one_table():
    text = datasheet_text()
    parser = MarkdownFormatterParser(llm=ScriptedLLM(lambda p: ""), window_words=60, padding_words=10)
    windows = parser.windows(text)
    table_start = text.index("| Parameter")
    table_end = text.index("| param11 | 11 |") + len("| param11 | 11 |")
    assert any(table_start < w.end < table_end for w in windows), "the seam must fall in the table"

    def answer(prompt):
        window = window_from_prompt(prompt)
        md = good_markdown(window)
        if window.lstrip().startswith("| param"):  # continuing a table: model repeats the header
            md = "| Parameter | Max |\n| --- | --- |\n" + md.lstrip("\n")
        return md

    nodes = MarkdownFormatterParser(llm=ScriptedLLM(answer), window_words=60, padding_words=10)(
        [_doc(text)]
    )
    tables = [n for n in nodes if schema.get_segment_kind(n) == schema.KIND_TABLE]
    assert len(tables) == 1
    table = tables[0]
    assert table.text.count("| Parameter | Max |") == 1
    assert schema.get_table_labels(table)[1] == [f"param{i}" for i in range(12)]
    assert table.metadata[schema.TABLE_TITLE] == "Table 1. Ratings"
    assert [h.label() for h in schema.get_heading_path(table)] == ["2 Specifications", "2.1 Ratings"]


def test_chapter_split_across_windows_continues_and_repeats_are_removed():
    text = "1 Intro\n\n" + words("a", 30) + "\n\n2 Body\n\n" + "\n".join(words(f"b{i}x", 10) for i in range(12))
    last_answer = {}

    def answer(prompt):
        md = good_markdown(window_from_prompt(prompt))
        prev = last_answer.get("md")
        last_answer["md"] = md
        if prev:  # the model repeats the last line of its previous answer
            md = prev.rstrip().split("\n")[-1] + "\n" + md
        return md

    doc = _doc(text)
    nodes = MarkdownFormatterParser(
        llm=ScriptedLLM(answer), window_words=40, padding_words=5, max_segment_chars=None
    )([doc])
    assert [[h.label() for h in schema.get_heading_path(n)] for n in nodes] == [["1 Intro"], ["2 Body"]]
    body = nodes[1].text
    for i in range(12):
        assert body.count(words(f"b{i}x", 10)) == 1
    _assert_consecutive(doc, nodes)


# --- bad answers ----------------------------------------------------------------------


def test_check_window_detects_bad_answers():
    source = "\n".join(words(f"w{i}x", 8) for i in range(10))
    kw = dict(min_coverage=0.85, max_novelty=0.15)
    assert check_window(source, source, **kw).ok
    assert check_window(source, "", **kw).reason == "empty answer"
    truncated = check_window(source, source[: len(source) // 2], **kw)
    assert not truncated.ok and 0.4 < truncated.coverage < 0.6
    hallucinated = check_window(source, source + "\n" + words("invented", 40), **kw)
    assert not hallucinated.ok and hallucinated.coverage == 1.0 and hallucinated.novelty > 0.3
    assert "JSON" in check_window(source, '{"markdown": "%s"}' % source.replace("\n", " "), **kw).reason
    assert "flattened" in check_window(source, source.replace("\n", " "), **kw).reason
    tail_cut = "\n".join(source.split("\n")[:-1])  # 90% kept, but the end is gone
    assert "truncated" in check_window(source, tail_cut, min_coverage=0.8, max_novelty=0.15).reason


def test_invented_chapter_numbers_are_rejected():
    source = "2.3 Timing\n\n" + "\n".join(words(f"t{i}x", 8) for i in range(8))
    kw = dict(min_coverage=0.85, max_novelty=0.15)
    assert check_window(source, "# 2.3 Timing\n\n" + source.split("\n\n", 1)[1], **kw).ok
    renumbered = check_window(source, "# 3.1 Timing\n\n" + source.split("\n\n", 1)[1], **kw)
    assert not renumbered.ok and "3.1" in renumbered.reason
    spaced = "PART I V\n\n" + source.split("\n\n", 1)[1]
    assert check_window(spaced, "# Part IV\n\n" + source.split("\n\n", 1)[1], **kw).ok
    # a number written in the padding or the previous window is the document's own
    assert check_window(source, "# 3.1 Timing\n\n" + source, context="see 3.1 Timing", **kw).ok


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "I'm sorry, I cannot help with that document.",
        '{"markdown": "# 1 Intro"}',
        "# 1 Intro\n\n" + words("made", 80),
    ],
    ids=["empty", "refusal", "json", "hallucinated"],
)
def test_bad_answer_is_retried_then_accepted(bad):
    text = "1 Intro\n\n" + words("a", 50)
    llm = ScriptedLLM([bad, "# 1 Intro\n\n" + words("a", 50)])
    nodes = MarkdownFormatterParser(llm=llm, retry_backoff_seconds=0)([_doc(text)])
    assert llm.calls == 2
    assert "rejected" in llm.prompts[1]  # the retry tells the model why
    assert all(n.metadata[schema.PARSE_PATH] == "llm" for n in nodes)
    assert nodes[0].text.startswith("# 1 Intro")


def test_window_falls_back_to_layout_after_retries_and_loses_nothing():
    text = (
        "## 1 Intro\n\n" + words("a", 50) + "\n\n## 2 Middle\n\n" + words("m", 50)
        + "\n\n## 3 End\n\n" + words("z", 50)
    )

    def answer(prompt):
        window = window_from_prompt(prompt)
        if "m0" in window:
            return window[: len(window) // 3]  # truncated, every time
        return good_markdown(window)

    llm = ScriptedLLM(answer)
    parser = MarkdownFormatterParser(llm=llm, window_words=55, padding_words=5, retry_backoff_seconds=0)
    doc = _doc(text)
    nodes = parser([doc])
    _assert_nothing_lost(doc, nodes)
    _assert_consecutive(doc, nodes)
    paths = {n.metadata[schema.PARSE_PATH] for n in nodes}
    assert paths == {"llm", "layout_fallback"}
    middle = next(n for n in nodes if "m0" in n.text)
    assert middle.metadata[schema.PARSE_PATH] == "layout_fallback"
    assert [h.label() for h in schema.get_heading_path(middle)] == ["2 Middle"]
    assert llm.calls == len(parser.windows(text)) + parser.max_retries
    assert nodes[0].metadata[schema.COVERAGE] == 1.0


def test_llm_errors_and_timeouts_are_retried_with_backoff():
    text = "1 Intro\n\n" + words("a", 30)
    llm = ScriptedLLM([ConnectionError("reset"), TimeoutError("slow"), good_markdown(text)])
    nodes = MarkdownFormatterParser(llm=llm, retry_backoff_seconds=0.01)([_doc(text)])
    assert llm.calls == 3 and nodes[0].metadata[schema.PARSE_PATH] == "llm"

    slow = ScriptedLLM(good, latency_seconds=0.5)
    nodes = MarkdownFormatterParser(
        llm=slow, timeout_seconds=0.05, max_retries=1, retry_backoff_seconds=0
    )([_doc(text)])
    assert nodes[0].metadata[schema.PARSE_PATH] == "layout_fallback"
    _assert_nothing_lost(_doc(text), nodes)


def test_no_fallback_raises_a_typed_error():
    parser = MarkdownFormatterParser(
        llm=ScriptedLLM(lambda p: ""), fallback_to_layout=False, retry_backoff_seconds=0
    )
    with pytest.raises(LLMOutputError, match="empty answer"):
        parser([_doc("1 Intro\n\n" + words("a", 30))])


def test_low_document_coverage_warns():
    text = "1 Intro\n\n" + "\n".join(words(f"a{i}x", 10) for i in range(6))

    def half(prompt):
        lines = window_from_prompt(prompt).split("\n")
        return "\n".join(lines[:3] + lines[-1:])  # the end is kept, the middle dropped

    parser = MarkdownFormatterParser(
        llm=ScriptedLLM(half), min_window_coverage=0.0, max_window_novelty=1.0
    )
    with pytest.warns(MarkdownCoverageWarning, match="keeps only"):
        nodes = parser([_doc(text)])
    assert nodes[0].metadata[schema.COVERAGE] < 0.9


def test_fenced_answer_is_unwrapped():
    text = "1 Intro\n\n" + words("a", 30)
    llm = ScriptedLLM(["```markdown\n" + good_markdown(text) + "\n```"])
    nodes = MarkdownFormatterParser(llm=llm)([_doc(text)])
    assert nodes[0].text.startswith("# 1 Intro") and "```" not in nodes[0].text


# --- no LLM, async, pipeline ------------------------------------------------------------


def test_without_llm_the_layout_parser_does_the_job(monkeypatch):
    monkeypatch.setattr(Settings, "_llm", None)
    parser = MarkdownFormatterParser()
    assert parser.llm is None
    doc = _doc("## 1 Intro\n\n" + words("a", 30) + "\n\n## 2 End\n\n" + words("b", 10))
    nodes = parser.get_nodes_from_documents([doc])
    assert [n.metadata[schema.PARSE_PATH] for n in nodes] == ["layout", "layout"]
    assert [[h.label() for h in schema.get_heading_path(n)] for n in nodes] == [["1 Intro"], ["2 End"]]


def test_settings_llm_is_used_when_none_given(monkeypatch):
    llm = ScriptedLLM(good)
    monkeypatch.setattr(Settings, "_llm", llm)
    assert MarkdownFormatterParser().llm is llm


async def test_documents_run_concurrently_windows_sequentially():
    docs = [_doc(f"1 Doc{k}\n\n" + "\n".join(words(f"d{k}w{i}x", 10) for i in range(9)), doc_id=f"d{k}")
            for k in range(3)]
    llm = ScriptedLLM(good, latency_seconds=0.01)
    parser = MarkdownFormatterParser(llm=llm, window_words=30, padding_words=3, num_workers=3)
    nodes = await parser.aget_nodes_from_documents(docs, show_progress=True)
    order = [re.search(r"d(\d)w(\d)x\d", window_from_prompt(p)).group(1, 2) for p in llm.prompts]
    assert {o[0] for o in order[:3]} == {"0", "1", "2"}  # the three documents start together
    for k in "012":
        windows = [int(w) for d, w in order if d == k]
        assert windows == sorted(windows)  # one document's windows in order
    by_doc = {}
    for n in nodes:
        by_doc.setdefault(schema.get_document_id(n), []).append(schema.get_position(n))
    assert all(pos == list(range(len(pos))) for pos in by_doc.values())


def test_works_in_ingestion_pipeline_and_serialises():
    llm = ScriptedLLM(good)
    parser = MarkdownFormatterParser(llm=llm, window_words=50)
    data = parser.to_dict()
    # The LLM client is recorded by class name only (component_dict): no key, no client.
    assert data["window_words"] == 50 and data["llm"] == {"class_name": "ScriptedLLM", "not_serialised": True}
    assert "_llm" not in data
    parser.to_json()  # serialisable
    pipeline = IngestionPipeline(transformations=[parser])
    nodes = pipeline.run(documents=[_doc(datasheet_text())])
    assert nodes and all(n.metadata[schema.PARSE_PATH] == "llm" for n in nodes)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MarkdownCoverageWarning)
        parser([_doc(datasheet_text(), doc_id="again")])


# --- property: whatever the model answers, no source text is lost ----------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_ANSWERS = st.one_of(
    st.just(""),
    st.just("Sorry, I cannot do that."),
    st.just('{"markdown": "x"}'),
    st.just("GOOD"),
    st.just("HALF"),
    st.text(alphabet="# |-abc\n12.", max_size=60),
)


@settings(max_examples=25, deadline=None)
@given(answers=st.lists(_ANSWERS, min_size=1, max_size=12))
def test_no_text_is_lost_for_any_answers(answers):
    text = datasheet_text()
    script = iter(answers)

    def answer(prompt):
        choice = next(script, "GOOD")
        window = window_from_prompt(prompt)
        if choice == "GOOD":
            return good_markdown(window)
        if choice == "HALF":
            return good_markdown(window)[: len(window) // 2]
        return choice

    doc = _doc(text)
    parser = MarkdownFormatterParser(
        llm=ScriptedLLM(answer), window_words=60, padding_words=10, retry_backoff_seconds=0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", MarkdownCoverageWarning)  # coverage never drops
        nodes = parser([doc])
    _assert_nothing_lost(doc, nodes)
    _assert_consecutive(doc, nodes)


# --- a generated PDF through the reader's Document contract -----------------------------


@pytest.fixture(scope="module")
def pdf_document(tmp_path_factory):
    from test_layout_markdown import make_datasheet_pdf, pdf_to_document

    path = tmp_path_factory.mktemp("pdf") / "ACM5678.pdf"
    make_datasheet_pdf(path, "ACM5678 Current Sensor")
    return pdf_to_document(path)


def test_generated_pdf_through_the_llm_path(pdf_document):
    from test_layout_markdown import CHAPTERS

    def model(prompt):  # a model that writes '# n title' for pymupdf4llm's bold headings
        window = window_from_prompt(prompt)
        return re.sub(r"(?m)^#+ \*\*(\d+(?:\.\d+)*) ([^*]+)\*\*\s*$", r"# \1 \2", window)

    llm = ScriptedLLM(model)
    parser = MarkdownFormatterParser(llm=llm, window_words=150, padding_words=20)
    nodes = parser([pdf_document])
    assert llm.calls == math.ceil(len(pdf_document.text.split()) / 150)
    found = {h.number: (h.title, h.level) for n in nodes for h in schema.get_heading_path(n) if h.number}
    assert found == {num: (title, num.count(".") + 1) for num, title, _, _ in CHAPTERS}
    assert {n.metadata[schema.PARSE_PATH] for n in nodes} == {"llm"}
    _assert_nothing_lost(pdf_document, nodes)
    _assert_consecutive(pdf_document, nodes)
    last_page = pdf_document.metadata[schema.PAGE_COUNT] - 1
    assert schema.get_page_range(nodes[-1])[1] == last_page
    layout_5 = next(n for n in nodes if schema.get_heading_path(n)
                    and schema.get_heading_path(n)[-1].number == "5")
    start, _ = schema.get_char_span(layout_5)
    assert "5 Layout" in pdf_document.text[start : start + 40]
