"""ContextHeaderTransform: headers in the embedding view, once; caching; fallbacks."""

import json
import re

import pytest
from llama_index.core.extractors import DocumentContextExtractor
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.schema import Document, MetadataMode, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore

from llama_index_hiqa import ContextHeaderTransform, LineNumberSegmentParser, schema
from llama_index_hiqa.testing import ScriptedLLM

TITLE = "ACME Corp 2023 Annual Report"
DOC_SUMMARY = "This document is about: the 2023 results and operations of ACME Corp."


def _llm(title=TITLE, doc_summary=DOC_SUMMARY, **kw):
    """A realistic LLM for all four prompts (title, summaries, sectioning)."""

    def answer(prompt):
        if "Please provide the title of the document" in prompt:
            return title
        if "summarize the content of the document" in prompt:
            return doc_summary
        if "situate" in prompt:  # LlamaIndex's DocumentContextExtractor
            return "This chunk reports ACME's sales by region."
        if "summarize the content of the following section" in prompt:
            section = re.search(r"SECTION TITLE: (.*)", prompt).group(1)
            return f"This section is about: {section.lower()}."
        excerpt = prompt.split("DOCUMENT EXCERPT", 1)[1]
        nums = [int(x) for x in re.findall(r"^\[(\d+)\]", excerpt, re.M)]
        secs = [{"title": f"Topic {s}", "start_index": s} for s in range(nums[0], nums[-1] + 1, 12)]
        return json.dumps({"sections": secs})

    return ScriptedLLM(answer, **kw)


def _doc(paragraphs=30, **meta):
    text = "\n\n".join(
        f"Paragraph {i}. ACME sold {i * 7} widgets in region {i % 4}; margins moved by {i}%." * 3
        for i in range(paragraphs)
    )
    return Document(text=text, metadata=meta)


def _section_nodes(llm, doc, chunk_chars=400):
    parser = LineNumberSegmentParser(llm=llm, chunk_chars=chunk_chars, retry_backoff_seconds=0.0)
    return parser.get_nodes_from_documents([doc])


def _prompts(llm, marker):
    return [p for p in llm.prompts if marker in p]


def test_header_appears_once_in_embed_view_and_text_is_untouched():
    llm = _llm()
    nodes = _section_nodes(llm, _doc())
    texts = [n.text for n in nodes]
    transform = ContextHeaderTransform(llm=llm, section_summaries=True)
    nodes = transform(nodes)
    nodes = transform(nodes)  # twice: still one header
    for node, text in zip(nodes, texts):
        assert node.text == text
        embed = node.get_content(MetadataMode.EMBED)
        assert embed.count(DOC_SUMMARY) == 1
        assert embed.count("This section is about: ") == 1
        assert embed.startswith(DOC_SUMMARY + "\nThis section is about: ")
        assert embed.endswith(text.strip())
        assert "document_summary" not in embed  # value-only lines, the shared format
        assert DOC_SUMMARY in node.get_content(MetadataMode.LLM)
        assert DOC_SUMMARY not in node.get_content(MetadataMode.NONE)


def test_llm_title_only_when_the_document_has_none():
    llm = _llm()
    nodes = ContextHeaderTransform(llm=llm)(_section_nodes(llm, _doc()))
    assert len(_prompts(llm, "Please provide the title")) == 1
    assert {n.metadata[schema.DOCUMENT_TITLE] for n in nodes} == {TITLE}
    assert TITLE in _prompts(llm, "summarize the content of the document")[0]
    assert TITLE not in nodes[0].get_content(MetadataMode.EMBED)  # the cascade renders it

    llm2 = _llm()
    titled = ContextHeaderTransform(llm=llm2)(
        _section_nodes(llm2, _doc(**{schema.DOCUMENT_TITLE: "Given title"}))
    )
    assert _prompts(llm2, "Please provide the title") == []
    assert {n.metadata[schema.DOCUMENT_TITLE] for n in titled} == {"Given title"}


def test_second_run_makes_zero_llm_calls_even_in_a_new_transform():
    doc = _doc()
    llm = _llm()
    nodes = _section_nodes(llm, doc)
    ContextHeaderTransform(llm=llm, section_summaries=True)(nodes)
    header_calls = len(_prompts(llm, "INSTRUCTIONS"))
    assert header_calls >= 3

    llm2 = _llm()
    fresh = _section_nodes(ScriptedLLM(_llm()._script), doc)  # re-ingest from scratch
    again = ContextHeaderTransform(llm=llm2, section_summaries=True)(fresh)
    assert llm2.calls == 0
    assert [n.get_content(MetadataMode.EMBED) for n in again] == [
        n.get_content(MetadataMode.EMBED) for n in nodes
    ]


def test_changed_document_is_not_served_from_cache():
    llm = _llm()
    ContextHeaderTransform(llm=llm)(_section_nodes(llm, _doc(paragraphs=30)))
    llm2 = _llm()
    ContextHeaderTransform(llm=llm2)(_section_nodes(llm2, _doc(paragraphs=31)))
    assert len(_prompts(llm2, "summarize the content of the document")) == 1


def test_one_summary_per_section_not_per_chunk_and_sections_run_concurrently():
    llm = _llm(latency_seconds=0.0)
    nodes = _section_nodes(llm, _doc(), chunk_chars=300)
    sections = {schema.get_heading_path(n)[0].title for n in nodes}
    assert len(nodes) > len(sections) > 1
    slow = _llm(latency_seconds=0.1)
    ContextHeaderTransform(llm=slow, section_summaries=True, num_workers=8, use_cache=False)(nodes)
    assert len(_prompts(slow, "following section")) == len(sections)
    for n in nodes:
        title = schema.get_heading_path(n)[0].title
        assert n.metadata[schema.SECTION_SUMMARY] == f"This section is about: {title.lower()}."


def test_summary_without_prefix_gets_it_and_prefix_on_its_own_line_is_joined():
    llm = _llm(doc_summary="The results of ACME.")
    nodes = ContextHeaderTransform(llm=llm)(
        [TextNode(text="ACME results", metadata={schema.DOCUMENT_TITLE: "t"})]
    )
    assert nodes[0].metadata[schema.DOCUMENT_SUMMARY] == "This document is about: The results of ACME."
    llm = _llm(doc_summary='This document is about:\n"widgets"')
    nodes = ContextHeaderTransform(llm=llm)(
        [TextNode(text="ACME widgets", metadata={schema.DOCUMENT_TITLE: "t"})]
    )
    assert nodes[0].metadata[schema.DOCUMENT_SUMMARY] == 'This document is about: "widgets"'


def test_failing_llm_is_retried_then_the_header_is_left_out():
    flaky = ScriptedLLM([TimeoutError("slow"), "   ", DOC_SUMMARY])
    node = TextNode(text="ACME widgets", metadata={schema.DOCUMENT_TITLE: "t"})
    out = ContextHeaderTransform(llm=flaky, retry_backoff_seconds=0.0)([node])
    assert flaky.calls == 3 and out[0].metadata[schema.DOCUMENT_SUMMARY] == DOC_SUMMARY

    broken = ScriptedLLM(lambda p: RuntimeError("500"))
    node = TextNode(text="other widgets", metadata={schema.DOCUMENT_TITLE: "t"})
    transform = ContextHeaderTransform(llm=broken, retry_backoff_seconds=0.0, max_retries=1)
    out = transform([node])
    assert broken.calls == 2 and transform.failures == 1
    assert schema.DOCUMENT_SUMMARY not in out[0].metadata
    assert "This document is about" not in out[0].get_content(MetadataMode.EMBED)


def test_without_llm_nodes_pass_unchanged():
    node = TextNode(text="plain")
    assert ContextHeaderTransform()([node])[0].metadata == {}


def test_documents_are_grouped_by_document_id():
    llm = _llm()
    a = [TextNode(text=f"a{i} ", metadata={schema.DOCUMENT_ID: "a", schema.POSITION: i, schema.DOCUMENT_TITLE: "A"}) for i in range(3)]
    b = [TextNode(text=f"b{i} ", metadata={schema.DOCUMENT_ID: "b", schema.POSITION: i, schema.DOCUMENT_TITLE: "B"}) for i in range(2)]
    ContextHeaderTransform(llm=llm)(list(reversed(a)) + b)
    prompts = _prompts(llm, "summarize the content of the document")
    assert len(prompts) == 2
    assert any("a0 a1 a2" in p for p in prompts) and any("b0 b1" in p for p in prompts)


def test_usable_with_llamaindex_document_context_extractor_in_one_pipeline():
    llm = _llm()
    doc = _doc(paragraphs=12, **{schema.DOCUMENT_TITLE: "ACME"})
    docstore = SimpleDocumentStore()
    docstore.add_documents([doc])
    extractor = DocumentContextExtractor(docstore=docstore, llm=llm, max_context_length=100_000)
    pipeline = IngestionPipeline(
        transformations=[
            LineNumberSegmentParser(llm=llm, chunk_chars=None),
            ContextHeaderTransform(llm=llm),
            extractor,
        ]
    )
    nodes = pipeline.run(documents=[doc])
    for n in nodes:
        embed = n.get_content(MetadataMode.EMBED)
        assert embed.count(DOC_SUMMARY) == 1
        assert n.metadata[extractor.key] == "This chunk reports ACME's sales by region."
        assert n.metadata[extractor.key] in embed


async def test_sync_call_and_acall_inside_a_running_event_loop():
    node = TextNode(text="ACME widgets", metadata={schema.DOCUMENT_TITLE: "t"})
    ContextHeaderTransform(llm=_llm(), use_cache=False)([node])
    assert node.metadata[schema.DOCUMENT_SUMMARY] == DOC_SUMMARY
    other = TextNode(text="ACME gadgets", metadata={schema.DOCUMENT_TITLE: "t"})
    await ContextHeaderTransform(llm=_llm(), use_cache=False).acall([other])
    assert other.metadata[schema.DOCUMENT_SUMMARY] == DOC_SUMMARY
