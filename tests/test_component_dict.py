"""``to_dict`` / ``from_dict`` of every public LlamaIndex component of the package.

Settings round-trip: ``type(c).from_dict(c.to_dict())`` has the same settings (and, checked on
nodes, the same behaviour). Parts that are not settings (an LLM, an embedding model, a
reranker, a tokenizer) are recorded by class name only: ``from_dict`` takes them back as
keyword arguments, and without them fails with ``UnserializedPartError`` naming the part.
"""

from __future__ import annotations

import json

import pytest
from llama_index.core import Settings
from llama_index.core.postprocessor import SimilarityPostprocessor
from llama_index.core.schema import TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore

import llama_index_hiqa as hiqa
from llama_index_hiqa import schema
from llama_index_hiqa.errors import UnserializedPartError
from llama_index_hiqa.testing import HashingEmbedding, ScriptedLLM


def settings_only(data: dict) -> dict:
    return json.loads(json.dumps(data, default=str))


# Each public component with settings away from their defaults, and its parts.
COMPONENTS = {
    "CachedEmbedding": (lambda tmp, parts: hiqa.CachedEmbedding(parts["inner"], cache_path=str(tmp / "e.sqlite")),
                        {"inner": HashingEmbedding(dim=8)}),
    "CascadingMetadataTransform": (lambda tmp, parts: hiqa.CascadingMetadataTransform(
        include_document_title=False, multimodal_llm=parts["multimodal_llm"]), {"multimodal_llm": ScriptedLLM([])}),
    "ContextHeaderTransform": (lambda tmp, parts: hiqa.ContextHeaderTransform(
        llm=parts["llm"], max_section_chars=1234, cache_dir=str(tmp)), {"llm": ScriptedLLM([])}),
    "CriticalKeywordExtractor": (lambda tmp, parts: hiqa.CriticalKeywordExtractor(
        use_ner=False, expert_keywords=["NX-2043"], llm=parts["llm"]), {"llm": ScriptedLLM([])}),
    "LayoutMarkdownParser": (lambda tmp, parts: hiqa.LayoutMarkdownParser(
        max_segment_tokens=100, tokenizer=parts["tokenizer"]), {"tokenizer": str.split}),
    "LineNumberSegmentParser": (lambda tmp, parts: hiqa.LineNumberSegmentParser(
        llm=parts["llm"], window_lines=50), {"llm": ScriptedLLM([])}),
    "MarkdownFormatterParser": (lambda tmp, parts: hiqa.MarkdownFormatterParser(
        llm=parts["llm"], max_segment_chars=999), {"llm": ScriptedLLM([])}),
    "SegmentIntegrationPostprocessor": (lambda tmp, parts: hiqa.SegmentIntegrationPostprocessor(
        preset="precision", max_length=3, **parts),
        {"reranker": SimilarityPostprocessor(), "embed_model": HashingEmbedding(dim=8), "docstore": SimpleDocumentStore()}),
    "DocumentChain": (lambda tmp, parts: hiqa.DocumentChain(**parts),
                      {"transformations": [hiqa.LayoutMarkdownParser(max_segment_tokens=100), hiqa.CascadingMetadataTransform()]}),
    "MatrixVectorStore": (lambda tmp, parts: hiqa.MatrixVectorStore(), {}),
    "PDFLayoutReader": (lambda tmp, parts: hiqa.PDFLayoutReader(), {}),
}


@pytest.mark.parametrize("name", sorted(COMPONENTS))
def test_settings_round_trip_and_parts_are_passed_back(name, tmp_path):
    make, parts = COMPONENTS[name]
    component = make(tmp_path, parts)
    data = component.to_dict()
    json.dumps(data)  # JSON-ready: no LLM client or model inside
    back = type(component).from_dict(data, **parts)
    assert type(back) is type(component)
    assert settings_only(back.to_dict()) == settings_only(data)
    if parts:
        assert back.held_parts() == component.held_parts()
    assert type(component).from_json(component.to_json(), **parts).to_dict() == back.to_dict()
    for part in parts:
        with pytest.raises(UnserializedPartError, match=f"'{part}'") as caught:
            type(component).from_dict(data, **{k: v for k, v in parts.items() if k != part})
        assert caught.value.component == name and caught.value.part == part


def test_every_public_component_with_settings_is_covered():
    from llama_index.core.schema import BaseComponent

    components = {
        name for name in hiqa.__all__
        if isinstance(getattr(hiqa, name), type) and issubclass(getattr(hiqa, name), BaseComponent)
    }
    # Nodes and the embedded store are data, not components with settings: their to_dict is
    # LlamaIndex's node serialisation / a folder's; ONNXEmbedding is checked with its model below.
    assert components - set(COMPONENTS) == {"HCATableNode", "MemmapVectorStore", "ONNXEmbedding"}


def test_unset_parts_round_trip_as_unset_and_settings_llm_is_not_a_part():
    transform = hiqa.ContextHeaderTransform()
    assert transform.to_dict()["llm"] is None
    assert hiqa.ContextHeaderTransform.from_dict(transform.to_dict()).llm is None
    llm = ScriptedLLM([])
    previous = Settings._llm
    Settings.llm = llm
    try:
        parser = hiqa.MarkdownFormatterParser()  # resolves Settings.llm at construction
        assert parser.llm is llm and parser.to_dict()["llm"] is None
        assert hiqa.MarkdownFormatterParser.from_dict(parser.to_dict()).llm is llm
    finally:
        Settings._llm = previous


def test_a_custom_id_func_is_a_part():
    parser = hiqa.LayoutMarkdownParser(id_func=lambda i, doc: f"{doc.doc_id}-{i}")
    with pytest.raises(UnserializedPartError, match="id_func"):
        hiqa.LayoutMarkdownParser.from_dict(parser.to_dict())
    assert hiqa.LayoutMarkdownParser.from_dict(parser.to_dict(), id_func=parser.id_func).id_func is parser.id_func


def test_a_round_tripped_component_behaves_the_same():
    def nodes():
        node = TextNode(text="The output current is 2 A.", id_="n1")
        schema.set_segment_facts(node, document_id="NX-2043", document_title="NX-2043 Datasheet", position=0,
                                 heading_path=[("4", "Specifications", 1), ("4.2", "Electrical", 2)])
        return [node]

    cascade = hiqa.CascadingMetadataTransform(include_document_title=False)
    again = hiqa.CascadingMetadataTransform.from_dict(cascade.to_dict())
    assert [n.metadata for n in again(nodes())] == [n.metadata for n in cascade(nodes())]
    keywords = hiqa.CriticalKeywordExtractor(use_ner=False, expert_keywords=["output current"])
    again = hiqa.CriticalKeywordExtractor.from_dict(keywords.to_dict())
    assert again.extract_query("What is the output current of the NX-2043?") == \
        keywords.extract_query("What is the output current of the NX-2043?")
