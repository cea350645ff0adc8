"""HiQAPack end to end on the demo corpus: no LLM, a scripted LLM, persistence across
processes, incremental add/delete, chat, and the optional graph / segment stages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from llama_index.core.schema import Document

from llama_index_hiqa import schema
from llama_index_hiqa.demo import DEMO_DATA_DIR, load_demo_documents
from llama_index_hiqa.errors import EmptyCorpusError, PackStoreError, UnknownNodeError
from llama_index_hiqa.pack.answers import NO_LLM_NOTICE, format_citation
from llama_index_hiqa.pack.config import HiQAPackSettings
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from llama_index_hiqa.testing import ScriptedLLM
from tests.pack_helpers import HashEmbedding

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "What is the maximum output current of the NX-2043?"
# Rules-only critical keywords (part numbers, periods): no spaCy model in the fast tests; the
# notebooks (slow) run the NER default.
FAST = {"keywords": {"use_ner": False}}


@pytest.fixture(scope="module")
def documents():
    return load_demo_documents()


@pytest.fixture(scope="module")
def pack(documents):
    return HiQAPack.from_documents(documents, embed_model=HashEmbedding(), **FAST)


def _doc_ids(nodes):
    return [schema.get_document_id(n.node) for n in nodes]


def test_no_llm_answer_is_cited_evidence_with_a_notice(pack):
    response = pack.run(QUESTION)
    text = str(response)
    assert text.startswith(NO_LLM_NOTICE)
    assert len(response.source_nodes) == pack.config.similarity_top_k
    # the part number routes the question to its own datasheet, not a look-alike
    assert _doc_ids(response.source_nodes)[0] == "NX-2043"
    first = response.source_nodes[0].node
    assert f"[1] {format_citation(first)}" in text
    assert "NX-2043 Precision Voltage Regulator" in format_citation(first)
    assert "p." in format_citation(first)


def test_gold_datasheet_found_for_most_demo_questions(pack):
    from llama_index_hiqa.evaluation.datasets import load_questions_jsonl

    questions = load_questions_jsonl(DEMO_DATA_DIR / "questions.jsonl")
    hits = sum(
        bool(set(_doc_ids(pack.retrieve(q.question))) & set(q.gold_documents)) for q in questions
    )
    assert hits >= 0.8 * len(questions)


def test_nodes_carry_cascade_and_keywords_and_no_text_is_rewritten(pack, documents):
    nodes = pack.nodes
    assert {schema.get_document_id(n) for n in nodes} == {d.metadata[schema.DOCUMENT_ID] for d in documents}
    assert all(n.metadata.get(schema.CRITICAL_KEYWORDS) is not None for n in nodes)
    assert any("nx2043" in schema.get_critical_keywords(n) for n in nodes)  # part numbers by rule
    cascaded = [n for n in nodes if n.metadata.get(schema.HEADING_CASCADE)]
    assert len(cascaded) > len(nodes) / 2
    by_doc = {d.metadata[schema.DOCUMENT_ID]: d.text for d in documents}
    for node in nodes:  # node.text is a slice of its document, never rewritten
        span = schema.get_char_span(node)
        if span is not None and schema.get_segment_kind(node) == schema.KIND_TEXT:
            assert node.text.strip() in by_doc[schema.get_document_id(node)]


def test_scripted_llm_synthesises_from_the_evidence(pack):
    llm = ScriptedLLM(default_response="The NX-2043 delivers up to 800 mA.")
    response = pack.as_query_engine(llm=llm).query(QUESTION)
    assert str(response) == "The NX-2043 delivers up to 800 mA."
    assert llm.calls >= 1
    assert "800" in llm.prompts[-1] and QUESTION in llm.prompts[-1]
    assert _doc_ids(response.source_nodes)[0] == "NX-2043"


def test_chat_engine_without_and_with_llm(pack):
    chat = pack.as_chat_engine()
    reply = chat.chat(QUESTION)
    assert str(reply).startswith(NO_LLM_NOTICE) and reply.source_nodes
    assert len(chat.chat_history) == 2
    chat.reset()
    assert chat.chat_history == []
    llm = ScriptedLLM(default_response="800 mA.")
    assert str(pack.as_chat_engine(llm=llm).chat(QUESTION)) == "800 mA."


def test_get_modules_exposes_llamaindex_objects(pack):
    modules = pack.get_modules()
    from llama_index.core import VectorStoreIndex

    assert isinstance(modules["index"], VectorStoreIndex)
    assert modules["llm"] is None
    assert modules["retriever"].retrieve(QUESTION)


def test_llm_formatter_used_when_llm_set_and_falls_back_on_malformed_output():
    doc = Document(
        text="# Widget W-1\n\n## 1 Power\n\nThe W-1 draws 3 mA from 5 V.\n\n## 2 Timing\n\nStartup takes 40 ms.\n",
        metadata={schema.DOCUMENT_ID: "W-1", schema.DOCUMENT_TITLE: "Widget W-1"},
    )
    llm = ScriptedLLM(default_response="```\n{not markdown at all\n```")
    pack = HiQAPack.from_documents([doc], llm=llm, embed_model=HashEmbedding(), **FAST)
    assert llm.calls >= 1  # the formatter asked the LLM
    joined = " ".join(n.text for n in pack.nodes)
    assert "3 mA" in joined and "40 ms" in joined  # the fallback lost no text
    llm_answer = ScriptedLLM(default_response="40 ms")
    assert str(pack.as_query_engine(llm=llm_answer).query("W-1 startup time?")) == "40 ms"


def test_persist_then_load_in_a_new_process_answers_the_same(pack, tmp_path):
    store = tmp_path / "store"
    pack.persist(store)
    expected = [n.node.node_id for n in pack.retrieve(QUESTION)]
    code = (
        "import json, sys\n"
        "from tests.pack_helpers import HashEmbedding\n"
        "from llama_index_hiqa.pack.hiqa_pack import HiQAPack\n"
        f"pack = HiQAPack.load({str(store)!r}, embed_model=HashEmbedding())\n"
        f"r = pack.run({QUESTION!r})\n"
        "print(json.dumps({'ids': [n.node.node_id for n in r.source_nodes], 'text': str(r)}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    payload = json.loads(out.stdout.strip().splitlines()[-1])
    assert payload["ids"] == expected
    assert payload["text"] == str(pack.run(QUESTION))


def test_add_and_delete_documents_keep_every_index_consistent(documents, tmp_path):
    docs = [d for d in documents if d.metadata[schema.DOCUMENT_ID] != "NX-2043"]
    extra = next(d for d in documents if d.metadata[schema.DOCUMENT_ID] == "NX-2043")
    pack = HiQAPack.from_documents(docs, embed_model=HashEmbedding(), use_chunk_graph=True, **FAST)
    assert "NX-2043" not in pack.document_ids
    assert "NX-2043" not in _doc_ids(pack.retrieve(QUESTION))

    added = pack.add_documents([extra])
    assert added and "NX-2043" in pack.document_ids
    assert _doc_ids(pack.retrieve(QUESTION))[0] == "NX-2043"
    assert all(n.node_id in pack.graph.graph for n in added)

    removed = pack.delete_document("NX-2043")
    assert removed == len(added)
    assert "NX-2043" not in pack.document_ids
    ids = {n.node_id for n in added}
    assert not ids & set(pack.index.docstore.docs)
    assert not ids & set(pack.index.vector_store.node_ids)
    assert not ids & set(pack.multi_route.keyword_index.node_ids)
    assert not ids & set(pack.graph.graph.node_ids)
    assert "NX-2043" not in _doc_ids(pack.retrieve(QUESTION))

    pack.persist(tmp_path / "s")
    loaded = HiQAPack.load(tmp_path / "s", embed_model=HashEmbedding())
    assert loaded.document_ids == pack.document_ids
    assert loaded.graph is not None and len(loaded.graph.graph) == len(pack.graph.graph)
    with pytest.raises(UnknownNodeError):
        pack.delete_document("NX-9999")


def test_segment_integration_returns_merged_segments(documents):
    pack = HiQAPack.from_documents(
        documents[:3], embed_model=HashEmbedding(), use_segment_integration=True, **FAST
    )
    question = "What is the maximum output current of the NX-2041?"
    response = pack.run(question)
    assert response.source_nodes
    assert all(n.node.metadata.get(schema.SEGMENT_NODE_IDS) for n in response.source_nodes)
    assert str(response).startswith(NO_LLM_NOTICE)


def test_bad_input_gets_typed_errors(tmp_path):
    with pytest.raises(EmptyCorpusError):
        HiQAPack.from_directory(tmp_path)  # empty folder
    with pytest.raises(EmptyCorpusError):
        HiQAPack.from_documents([], embed_model=HashEmbedding())
    with pytest.raises(EmptyCorpusError):
        HiQAPack.from_documents([Document(text="   ")], embed_model=HashEmbedding())
    with pytest.raises(PackStoreError):
        HiQAPack.load(tmp_path / "missing")
    (tmp_path / "bad.pdf").write_bytes(b"%PDF-1.4 broken")
    with pytest.raises(EmptyCorpusError) as info:
        HiQAPack.from_directory(tmp_path)
    assert info.value.failures  # names the file that failed


def test_config_round_trips_and_validates():
    config = HiQAPackSettings(similarity_top_k=3, use_chunk_graph=True)
    assert HiQAPackSettings(**json.loads(config.model_dump_json())) == config
    with pytest.raises(ValueError):
        HiQAPackSettings(similarity_top_k=0)
    with pytest.raises(ValueError):
        HiQAPack.from_documents([Document(text="x")], similarity_topk=3)  # typo is an error


@pytest.mark.parametrize(
    "settings, named",
    [
        ({"segment_preset": "short"}, "segment_preset"),
        ({"chunk_graph": {"max_hop": 3}}, "max_hop"),
        ({"chunk_graph": {"max_nodes": -4}}, "max_nodes"),
        ({"multi_route": {"alpah": 0.5}}, "alpah"),
        ({"multi_route": {"alpha": 7}}, "alpha"),
        ({"keywords": {"use_nerr": False}}, "use_nerr"),
        ({"fusion_mode": "rrff"}, "fusion_mode"),
    ],
)
def test_every_nested_setting_is_checked_when_the_config_is_built(settings, named):
    with pytest.raises(ValueError, match=named):
        HiQAPackSettings(**settings)


def test_documented_presets_are_accepted():
    for preset in ("balanced", "precision", "find_all"):
        assert HiQAPackSettings(segment_preset=preset, use_segment_integration=True).segment_preset == preset


def test_the_pack_runs_ner_over_titles_and_questions_not_node_text_whatever_the_batch():
    from llama_index_hiqa.pack.config import keyword_extractor as _keyword_extractor

    assert _keyword_extractor(HiQAPackSettings())._ner_on_text(1) is False
    assert _keyword_extractor(HiQAPackSettings(keywords={"ner_max_nodes": None}))._ner_on_text(10**6) is True


def test_the_unruled_table_setting_reaches_the_reader():
    pack = HiQAPack.empty(embed_model=HashEmbedding(), detect_unruled_tables=True)
    assert pack._reader(recursive=False).detect_unruled_tables is True
    assert HiQAPack.empty(embed_model=HashEmbedding())._reader(recursive=False).detect_unruled_tables is False
