"""LineNumberSegmentParser: the partition property, windows and seams, retries, nodes."""

import json
import re
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.schema import Document, MetadataMode

from llama_index_hiqa import LineNumberSegmentParser, schema
from llama_index_hiqa.parsers.line_number_segment import (
    SectionAnswer,
    merge_short_sections,
    repair_sections,
    split_lines,
)
from llama_index_hiqa.testing import ScriptedLLM


def _doc_text(paragraphs=40, words=30):
    topics = ["revenue", "staff", "climate", "legal", "outlook"]
    paras = []
    for i in range(paragraphs):
        topic = topics[(i // 8) % len(topics)]
        paras.append(f"Paragraph {i} on {topic}. " + " ".join(f"{topic}{j}" for j in range(words)) + ".")
    return "\n\n".join(paras)


def _line_numbers(prompt):
    excerpt = prompt.split("DOCUMENT EXCERPT", 1)[1]
    return [int(x) for x in re.findall(r"^\[(\d+)\]", excerpt, re.M)]


def _sections_every(step, continues=False, title="Part {s}"):
    """A realistic LLM: sections every ``step`` lines of the window it was shown."""

    def answer(prompt):
        nums = _line_numbers(prompt)
        lo, hi = nums[0], nums[-1]
        secs = [
            {"title": title.format(s=s), "start_index": s, "end_index": min(s + step - 1, hi)}
            for s in range(lo, hi + 1, step)
        ]
        return "```json\n" + json.dumps({"continues_previous": continues and lo > 0, "sections": secs}) + "\n```"

    return answer


def _parser(llm, **kw):
    kw.setdefault("min_chars_for_llm", 0)
    kw.setdefault("retry_backoff_seconds", 0.0)
    return LineNumberSegmentParser(llm=llm, **kw)


def _assert_partition(nodes, text):
    assert "".join(n.text for n in nodes) == text
    assert [schema.get_position(n) for n in nodes] == list(range(len(nodes)))
    cursor = 0
    for n in nodes:
        start, end = schema.get_char_span(n)
        assert start == cursor and text[start:end] == n.text
        assert (n.start_char_idx, n.end_char_idx) == (start, end)
        cursor = end
    assert cursor == len(text)


# --- lines ---------------------------------------------------------------------------------


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=600), st.integers(2, 80))
def test_split_lines_partitions_text_and_wraps_long_lines(text, limit):
    spans = split_lines(text, limit)
    assert "".join(text[s:e] for s, e in spans) == text
    assert all(e - s <= limit for s, e in spans)
    assert all(e > s for s, e in spans)


def test_long_lines_wrap_at_whitespace():
    text = "word " * 100
    spans = split_lines(text, 200)
    assert len(spans) == 3
    assert all(text[e - 1] == " " for s, e in spans)


# --- the partition property over arbitrary LLM answers -------------------------------------

_section = st.fixed_dictionaries(
    {"title": st.one_of(st.text(max_size=20), st.none()), "start_index": st.integers(-30, 400)},
    optional={"end_index": st.integers(-30, 400), "summary": st.text(max_size=20)},
)
_answer = st.one_of(
    st.builds(
        lambda secs, cont: json.dumps({"continues_previous": cont, "sections": secs}),
        st.lists(_section, max_size=12),
        st.booleans(),
    ),
    st.builds(lambda secs: json.dumps({"sections": secs})[:-3], st.lists(_section, max_size=5)),  # truncated
    st.text(max_size=40),  # not JSON at all
    st.just('{"sections": "many"}'),
    st.just('{"sections": [{"title": "x", "start_index": 2.5}]}'),
    st.sampled_from([TimeoutError("slow"), RuntimeError("500 server error"), ValueError("bad")]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.text(alphabet="abc xyz\n.\r\t", min_size=1, max_size=1500),
    answers=st.lists(_answer, min_size=1, max_size=8),
    window_chars=st.integers(60, 600),
    min_section_chars=st.integers(0, 120),
    workers=st.integers(1, 4),
    chunk_chars=st.one_of(st.none(), st.integers(20, 300)),
)
def test_sections_partition_the_document_for_any_llm_answer(
    text, answers, window_chars, min_section_chars, workers, chunk_chars
):
    lock = threading.Lock()
    calls = iter(range(10**6))

    def script(prompt):
        with lock:
            return answers[next(calls) % len(answers)]

    llm = ScriptedLLM(script)
    parser = _parser(
        llm,
        window_chars=window_chars,
        max_line_chars=40,
        min_section_chars=min_section_chars,
        num_workers=workers,
        max_retries=1,
        chunk_chars=chunk_chars,
    )
    nodes = parser.get_nodes_from_documents([Document(text=text)])
    _assert_partition(nodes, text)
    for n in nodes:
        assert schema.get_heading_path(n)[0].level == 1
        assert n.metadata[schema.PARSE_PATH] in ("llm", "text")


def test_repair_sorts_dedupes_clamps_and_fills():
    answers = [
        SectionAnswer(title="C", start_index=70, end_index=20),
        SectionAnswer(title="A", start_index=-5),
        SectionAnswer(title="B", start_index=30, end_index=90),
        SectionAnswer(title="B again", start_index=30),
        SectionAnswer(title="", start_index=500),
    ]
    secs = repair_sections(answers, 10, 60)
    assert [(s.start, s.end, s.title) for s in secs] == [
        (10, 30, "A"), (30, 59, "B"), (59, 60, "C"),
    ]


def test_over_sectioning_guard_merges_tiny_sections():
    text = "\n".join(f"line {i} " + "x" * 30 for i in range(20))
    spans = split_lines(text)
    secs = repair_sections([SectionAnswer(title=f"S{i}", start_index=i) for i in range(20)], 0, 20)
    merged = merge_short_sections(secs, spans, min_chars=150)
    assert merged[0].start == 0 and merged[-1].end == 20
    assert all(spans[s.end - 1][1] - spans[s.start][0] >= 150 for s in merged)
    assert 1 < len(merged) < 20


# --- windows, seams, retries --------------------------------------------------------------


def test_windows_use_global_line_numbers_and_show_preceding_context():
    text = _doc_text()
    llm = ScriptedLLM(_sections_every(6))
    parser = _parser(llm, window_chars=2500, chunk_chars=None, min_section_chars=0)
    nodes = parser.get_nodes_from_documents([Document(text=text)])
    assert llm.calls >= 3
    firsts = sorted(_line_numbers(p)[0] for p in llm.prompts)
    assert firsts[0] == 0 and all(b > a for a, b in zip(firsts, firsts[1:]))
    later = [p for p in llm.prompts if _line_numbers(p)[0] > 0]
    assert all("(none:" not in p.split("DOCUMENT EXCERPT")[0] for p in later)
    _assert_partition(nodes, text)


def test_seam_is_joined_when_the_next_window_continues_the_previous():
    text = _doc_text()
    kw = dict(window_chars=2500, chunk_chars=None, min_section_chars=0, num_workers=1)
    cut = _parser(ScriptedLLM(_sections_every(1000)), **kw).get_nodes_from_documents([Document(text=text)])
    joined_llm = ScriptedLLM(_sections_every(1000, continues=True))
    joined = _parser(joined_llm, **kw).get_nodes_from_documents([Document(text=text)])
    # one section per window when cut at the edges; one section for the whole text when joined
    assert len(cut) == joined_llm.calls > 1
    assert len(joined) == 1
    _assert_partition(joined, text)


def test_seam_is_joined_when_both_sides_have_the_same_title():
    text = _doc_text()
    llm = ScriptedLLM(_sections_every(1000, title="Company outlook"))
    nodes = _parser(llm, window_chars=2500, chunk_chars=None, min_section_chars=0).get_nodes_from_documents(
        [Document(text=text)]
    )
    assert llm.calls > 1 and len(nodes) == 1


def test_failing_window_is_retried_then_succeeds():
    text = _doc_text(paragraphs=10)
    good = _sections_every(5)
    answers = [TimeoutError("slow"), "I cannot help with that.", None]

    def script(prompt):
        answer = answers.pop(0) if answers else None
        return good(prompt) if answer is None else answer

    llm = ScriptedLLM(script)
    parser = _parser(llm, max_retries=2, chunk_chars=None, min_section_chars=0)
    nodes = parser.get_nodes_from_documents([Document(text=text)])
    assert llm.calls == 3
    assert parser.failed_windows == 0
    assert {n.metadata[schema.PARSE_PATH] for n in nodes} == {"llm"}
    assert len(nodes) > 1


def test_window_that_never_validates_becomes_one_section_titled_by_its_lines():
    text = _doc_text(paragraphs=10)
    llm = ScriptedLLM(lambda p: '{"sections": []}')
    parser = _parser(llm, max_retries=2, chunk_chars=None)
    nodes = parser.get_nodes_from_documents([Document(text=text)])
    n_lines = len(split_lines(text))
    assert llm.calls == 3 and parser.failed_windows == 1
    assert len(nodes) == 1 and nodes[0].text == text
    assert nodes[0].metadata[schema.SECTION_TITLE] == f"Lines 0-{n_lines - 1}"
    assert nodes[0].metadata[schema.PARSE_PATH] == "text"


def test_llm_timeout_falls_back_without_losing_text():
    text = _doc_text(paragraphs=10)
    llm = ScriptedLLM(_sections_every(5), latency_seconds=0.3)
    parser = _parser(llm, max_retries=0, timeout_seconds=0.02)
    nodes = parser.get_nodes_from_documents([Document(text=text)])
    assert parser.failed_windows == 1
    _assert_partition(nodes, text)


# --- nodes ---------------------------------------------------------------------------------


def test_short_document_is_one_section_without_llm_call():
    llm = ScriptedLLM([])
    text = "A short note.\nTwo lines."
    parser = LineNumberSegmentParser(llm=llm)
    nodes = parser.get_nodes_from_documents([Document(text=text, metadata={schema.DOCUMENT_TITLE: "Note"})])
    assert llm.calls == 0
    assert len(nodes) == 1 and nodes[0].text == text
    assert nodes[0].metadata[schema.PARSE_PATH] == "text"
    assert schema.get_heading_path(nodes[0])[0].title == "Note"


def test_empty_document_gives_no_nodes():
    assert LineNumberSegmentParser(llm=ScriptedLLM([])).get_nodes_from_documents([Document(text="")]) == []


def test_nodes_carry_schema_facts_pages_and_chunks_keep_their_section():
    text = _doc_text(paragraphs=30)
    half = len(text) // 2
    doc = Document(
        text=text,
        metadata={
            schema.DOCUMENT_ID: "acme-2023",
            schema.DOCUMENT_TITLE: "ACME annual report",
            schema.PAGE_SPANS: [[0, 0, half], [1, half, len(text)]],
        },
    )
    llm = ScriptedLLM(_sections_every(15))
    nodes = _parser(llm, chunk_chars=500, min_section_chars=0).get_nodes_from_documents([doc])
    _assert_partition(nodes, text)
    assert len(nodes) > len({schema.get_heading_path(n)[0].title for n in nodes}) > 1
    for n in nodes:
        assert n.metadata[schema.DOCUMENT_ID] == "acme-2023"
        assert schema.PAGE_SPANS not in n.metadata
        start, end = schema.get_char_span(n)
        expected_pages = (0 if start < half else 1, 0 if end <= half else 1)
        assert schema.get_page_range(n) == expected_pages
        assert len(n.text) <= 500 + 200
        assert n.ref_doc_id == doc.doc_id
        embed = n.get_content(MetadataMode.EMBED)
        assert "acme-2023" not in embed and "char_start" not in embed
    # chunks of one section are consecutive: a title never comes back after another one
    titles = [schema.get_heading_path(n)[0].title for n in nodes]
    runs = [t for i, t in enumerate(titles) if i == 0 or titles[i - 1] != t]
    assert len(runs) == len(set(runs))


def test_works_in_an_ingestion_pipeline_and_async():
    text = _doc_text(paragraphs=12)
    llm = ScriptedLLM(_sections_every(8))
    pipeline = IngestionPipeline(transformations=[_parser(llm)])
    nodes = pipeline.run(documents=[Document(text=text)])
    _assert_partition(nodes, text)


async def test_async_entry_point():
    text = _doc_text(paragraphs=12)
    llm = ScriptedLLM(_sections_every(8))
    nodes = await _parser(llm, window_chars=1500).aget_nodes_from_documents(
        [Document(text=text), Document(text=text + "\nmore")]
    )
    assert "".join(n.text for n in nodes) == text + text + "\nmore"
    assert {schema.get_position(n) for n in nodes if n.metadata[schema.POSITION] == 0} == {0}


def test_without_llm_every_document_is_one_section():
    text = _doc_text(paragraphs=12)
    nodes = LineNumberSegmentParser(chunk_chars=None).get_nodes_from_documents([Document(text=text)])
    assert len(nodes) == 1 and nodes[0].metadata[schema.PARSE_PATH] == "text"


def test_llm_section_summaries_can_be_kept_in_the_embedding_view():
    text = _doc_text(paragraphs=12)

    def answer(prompt):
        lo = _line_numbers(prompt)[0]
        return json.dumps({"sections": [{"title": "All", "start_index": lo, "summary": "revenue by topic"}]})

    nodes = _parser(ScriptedLLM(answer), keep_section_summaries=True).get_nodes_from_documents(
        [Document(text=text)]
    )
    for n in nodes:
        embed = n.get_content(MetadataMode.EMBED)
        assert embed.startswith("This section is about: revenue by topic\n\n")
        assert embed.count("This section is about") == 1
    plain = _parser(ScriptedLLM(answer)).get_nodes_from_documents([Document(text=text)])
    assert all(schema.SECTION_SUMMARY not in n.metadata for n in plain)


async def test_sync_call_works_inside_a_running_event_loop_like_a_notebook():
    text = _doc_text(paragraphs=12)
    nodes = _parser(ScriptedLLM(_sections_every(8))).get_nodes_from_documents([Document(text=text)])
    _assert_partition(nodes, text)


def test_line_numbers_echoed_as_labels_or_strings_are_read():
    answer = SectionAnswer.model_validate_json('{"title": "t", "start_index": "[12]", "end_index": " 30 "}')
    assert (answer.start_index, answer.end_index) == (12, 30)
    with pytest.raises(ValueError):
        SectionAnswer.model_validate_json('{"title": "t", "start_index": "line twelve"}')
