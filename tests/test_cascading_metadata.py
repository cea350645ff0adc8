"""CascadingMetadataTransform (HiQA HCA): cascade, views, tables, images, variants, caching."""

from __future__ import annotations

import base64
import logging
from typing import List

import pytest
from llama_index.core import Document
from llama_index.core.ingestion import IngestionCache, IngestionPipeline
from llama_index.core.node_parser import MarkdownNodeParser, SentenceSplitter
from llama_index.core.schema import ImageNode, MetadataMode, TextNode

from llama_index_hiqa import schema
from llama_index_hiqa.errors import InvalidMetadataError
from llama_index_hiqa.testing import HashingEmbedding, ScriptedLLM
from llama_index_hiqa.transforms.cascading_metadata import CascadingMetadataTransform, shorten_cascade
from llama_index_hiqa.transforms.table_view import HCATableNode, parse_markdown_table

DATASHEET = """# NX-2040 Datasheet
The NX-2040 is a buck converter.
## 4 Specifications
General conditions apply.
### 4.2 Electrical characteristics
Supply voltage is 3.3 V at 25 C.
### 4.3 Pin functions
Table 4-1 Pin functions
| Pin | Name | Voltage (V) |
|---|---|---|
| 1 | VCC | 3.3 |
| 2 | GND | 0.0 |
| 3 | EN | 5.5 |
# Appendix
#### A.1 Ordering
Order code NX-2040-TR.
"""


def _md_nodes(text: str = DATASHEET, **meta) -> List[TextNode]:
    return MarkdownNodeParser()([Document(text=text, metadata=meta)])


def _by_cascade_suffix(nodes, needle):
    return next(n for n in nodes if needle in n.get_content(MetadataMode.NONE))


def _segment(text, path, title="NX-2040 Datasheet", position=0, kind="text", doc="nx2040"):
    node = TextNode(text=text)
    schema.set_segment_facts(
        node, document_id=doc, document_title=title, position=position,
        heading_path=path, kind=kind,
    )
    return node


# --- the cascade -----------------------------------------------------------------------


def test_cascade_from_schema_heading_path_nested_and_numbered():
    node = _segment(
        "Supply voltage is 3.3 V.",
        [["4", "Specifications", 1], ["4.2", "Electrical characteristics", 2]],
    )
    (out,) = CascadingMetadataTransform()([node])
    assert out.metadata[schema.HEADING_CASCADE] == (
        "NX-2040 Datasheet > 4 Specifications > 4.2 Electrical characteristics"
    )
    embed = out.get_content(MetadataMode.EMBED)
    assert embed.startswith("NX-2040 Datasheet > 4 Specifications > 4.2 Electrical")
    assert embed.endswith("Supply voltage is 3.3 V.")
    # bookkeeping never leaks into the views
    assert "document_id" not in embed and "position" not in embed


def test_cascade_from_markdown_node_parser_header_path():
    out = CascadingMetadataTransform()(_md_nodes(file_name="nx2040.md"))
    electrical = _by_cascade_suffix(out, "Supply voltage")
    # the own heading is in the text, so the cascade stops at its parent (no double heading)
    assert electrical.metadata[schema.HEADING_CASCADE] == "NX-2040 Datasheet > 4 Specifications"
    assert schema.get_heading_path(electrical)[-1] == ("4.2", "Electrical characteristics", 3)
    embed = electrical.get_content(MetadataMode.EMBED)
    assert embed.count("4.2 Electrical characteristics") == 1
    assert embed.count("4 Specifications") == 1
    # LlamaIndex's own header_path is hidden: the cascade says it better
    assert "header_path" not in embed and "/NX-2040" not in embed


def test_skipped_levels_h1_then_h3_nest_under_the_h1():
    out = CascadingMetadataTransform()(_md_nodes(file_name="nx2040.md"))
    ordering = _by_cascade_suffix(out, "Order code")
    path = schema.get_heading_path(ordering)
    assert [h.label() for h in path] == ["Appendix", "A.1 Ordering"]
    assert ordering.metadata[schema.HEADING_CASCADE] == "NX-2040 Datasheet > Appendix"


def test_heading_with_a_slash_is_one_level():
    text = "# Board\n## 3 Input/Output\nPins.\n### 3.1 GPIO\nEight pins."
    out = CascadingMetadataTransform()(_md_nodes(text))
    gpio = _by_cascade_suffix(out, "Eight pins")
    assert [h.label() for h in schema.get_heading_path(gpio)] == ["Board", "3 Input/Output", "3.1 GPIO"]
    assert gpio.metadata[schema.HEADING_CASCADE] == "Board > 3 Input/Output"


def test_algorithm2_walk_over_plain_chunks_gives_continuations_their_section():
    # SentenceSplitter chunks carry no header_path: the walk over the document in order
    # must close H3s on the next H2/H1 and hand the path to chunks without a heading line.
    texts = [
        "# Guide\nIntro.",
        "## 2 Install\nStep one.",
        "#### 2.1.1 Linux\nUse apt.",
        "More Linux detail without a heading.",
        "## 3 Usage\nRun it.",
    ]
    doc = Document(text="x", id_="guide")
    nodes = []
    for i, text in enumerate(texts):
        node = TextNode(text=text)
        node.relationships = {}
        node.metadata[schema.DOCUMENT_ID] = "guide"
        node.metadata[schema.POSITION] = i
        nodes.append(node)
    del doc
    out = CascadingMetadataTransform()(list(reversed(nodes)))  # order restored by POSITION
    by_text = {n.text: n for n in out}
    assert [h.label() for h in schema.get_heading_path(by_text[texts[3]])] == [
        "Guide", "2 Install", "2.1.1 Linux"
    ]
    assert by_text[texts[3]].metadata[schema.HEADING_CASCADE] == "Guide > 2 Install > 2.1.1 Linux"
    assert [h.label() for h in schema.get_heading_path(by_text[texts[4]])] == ["Guide", "3 Usage"]


def test_split_sections_keep_their_own_heading_in_every_chunk():
    long_body = " ".join(f"Sentence {i} about the regulator loop." for i in range(120))
    text = f"# Manual\n## 5 Control loop\n{long_body}\n## 6 Layout\nKeep traces short."
    nodes = SentenceSplitter(chunk_size=128, chunk_overlap=0)(_md_nodes(text))
    out = CascadingMetadataTransform()(nodes)
    loop_chunks = [n for n in out if "regulator loop" in n.text]
    assert len(loop_chunks) > 2
    for chunk in loop_chunks:
        embed = chunk.get_content(MetadataMode.EMBED)
        assert "5 Control loop" in embed, embed[:200]
        assert embed.count("5 Control loop") == 1


def test_budget_shortens_middle_levels_never_title_or_own_heading():
    levels = [
        "NX-2040 Datasheet",
        "4 Specifications and operating conditions of the device family",
        "4.2 Electrical characteristics over the full temperature range",
        "4.2.1 Supply current",
    ]
    full = " > ".join(levels)
    assert shorten_cascade(levels, " > ", len(full)) == full
    short = shorten_cascade(levels, " > ", 60)
    assert short.startswith("NX-2040 Datasheet > ") and short.endswith(" > 4.2.1 Supply current")
    assert short == "NX-2040 Datasheet > 4 > 4.2 > 4.2.1 Supply current"
    tiny = shorten_cascade(levels, " > ", 45)
    assert tiny.startswith("NX-2040 Datasheet") and tiny.endswith("4.2.1 Supply current")
    assert "…" in tiny and len(tiny) <= 45


def test_budget_applies_in_the_transform():
    node = _segment("Body.", [["4", "A very long chapter title " * 5, 1], ["4.1", "Own", 2]])
    (out,) = CascadingMetadataTransform(max_cascade_chars=40)([node])
    assert out.metadata[schema.HEADING_CASCADE] == "NX-2040 Datasheet > 4 > 4.1 Own"


# --- views -----------------------------------------------------------------------------


def test_embed_versus_llm_view_and_text_untouched():
    node = _segment("Body text.", [["1", "Intro", 1]])
    text_before = node.text
    (out,) = CascadingMetadataTransform(cascade_in_llm_view=False)([node])
    assert out.text == text_before
    assert "NX-2040 Datasheet > 1 Intro" in out.get_content(MetadataMode.EMBED)
    assert out.get_content(MetadataMode.LLM) == "Body text."
    (out,) = CascadingMetadataTransform(cascade_in_llm_view=True)([out])
    assert out.get_content(MetadataMode.LLM).startswith("NX-2040 Datasheet > 1 Intro")
    assert out.get_content(MetadataMode.NONE) == "Body text."


def test_cascade_comes_first_then_summaries():
    node = _segment("Body.", [["1", "Intro", 1]])
    node.metadata[schema.DOCUMENT_SUMMARY] = "A datasheet of a buck converter."
    (out,) = CascadingMetadataTransform()([node])
    lines = out.get_content(MetadataMode.EMBED).splitlines()
    assert lines[0] == "NX-2040 Datasheet > 1 Intro"
    assert lines[1] == "A datasheet of a buck converter."


def test_document_title_is_not_repeated_when_it_is_the_h1():
    out = CascadingMetadataTransform()(_md_nodes(file_name="nx2040.md"))
    first = out[0]
    assert first.get_content(MetadataMode.EMBED).count("NX-2040 Datasheet") == 1
    assert all(n.metadata[schema.DOCUMENT_TITLE] == "NX-2040 Datasheet" for n in out)


# --- tables ----------------------------------------------------------------------------


def test_table_embed_view_has_labels_not_cells_and_llm_view_has_everything():
    out = CascadingMetadataTransform(table_view="labels")(_md_nodes(file_name="nx2040.md"))
    table = _by_cascade_suffix(out, "| Pin |")
    assert isinstance(table, HCATableNode)
    assert table.metadata[schema.SEGMENT_KIND] == schema.KIND_TABLE
    embed = table.get_content(MetadataMode.EMBED)
    assert embed.splitlines()[0] == "NX-2040 Datasheet > 4 Specifications > 4.3 Pin functions"
    assert "Table 4-1 Pin functions" in embed
    assert "Columns: Pin; Name; Voltage (V)" in embed
    assert "Rows: VCC; GND; EN" in embed  # first worded column names the rows
    for cell in ("3.3", "0.0", "5.5", "|"):
        assert cell not in embed
    llm = table.get_content(MetadataMode.LLM)
    assert "| 3 | EN | 5.5 |" in llm and llm.startswith("NX-2040 Datasheet > 4 Specifications")
    assert "| 3 | EN | 5.5 |" in table.text


def test_table_facts_from_the_parser_win_and_text_is_kept():
    node = _segment(
        "Battery\n| Item | Value |\n|---|---|\n| Capacity | 13,000 mAh |",
        [["3", "Power", 1]], kind=schema.KIND_TABLE,
    )
    schema.set_table_facts(node, title="Battery specification", columns=["Item", "Value"], rows=["Capacity"])
    (out,) = CascadingMetadataTransform(table_view="labels")([node])
    embed = out.get_content(MetadataMode.EMBED)
    assert "Battery specification" in embed and "Capacity" in embed
    assert "13,000" not in embed
    assert "13,000 mAh" in out.get_content(MetadataMode.LLM)


def test_table_rows_view_embeds_the_figures_and_reads_back_the_same_from_a_store():
    out = CascadingMetadataTransform(table_view="rows")(_md_nodes(file_name="nx2040.md"))
    table = _by_cascade_suffix(out, "| Pin |")
    assert type(table) is TextNode and table.metadata[schema.SEGMENT_KIND] == schema.KIND_TABLE
    embed = table.get_content(MetadataMode.EMBED)
    assert embed.splitlines()[0] == "NX-2040 Datasheet > 4 Specifications > 4.3 Pin functions"
    assert "| 3 | EN | 5.5 |" in embed and "Table 4-1 Pin functions" in embed
    assert schema.TABLE_LEAD not in table.metadata  # its text holds its title and header
    # What a store gives back (a plain node from its JSON) renders the same view: BM25 and the
    # vector read one text.
    again = TextNode.model_validate_json(table.model_dump_json())
    assert again.get_content(MetadataMode.EMBED) == embed


def test_a_later_part_of_a_table_shows_its_title_and_header_before_its_rows():
    node = _segment("| Net sales | 32,765 | 31,657 |\n| Cost of sales | 16,682 | 16,055 |",
                    [["8", "Consolidated Statement of Income", 2]], kind=schema.KIND_TABLE, title="3M 10-K 2018")
    schema.set_table_facts(node, title="Years ended December 31", columns=["(Millions)", "2018", "2017"],
                           rows=["Net sales", "Cost of sales"], header="| (Millions) | 2018 | 2017 |\n|---|---|---|")
    (out,) = CascadingMetadataTransform(table_view="rows")([node])
    embed = out.get_content(MetadataMode.EMBED)
    assert embed.splitlines() == [
        "3M 10-K 2018 > 8 Consolidated Statement of Income", "Years ended December 31",
        "| (Millions) | 2018 | 2017 |", "|---|---|---|", "", "| Net sales | 32,765 | 31,657 |",
        "| Cost of sales | 16,682 | 16,055 |",
    ]
    assert out.get_content(MetadataMode.LLM).count("| (Millions) | 2018 | 2017 |") == 1
    assert TextNode.model_validate_json(out.model_dump_json()).get_content(MetadataMode.EMBED) == embed
    # Run again (a node read back from a store goes through the transform again): one lead.
    (twice,) = CascadingMetadataTransform(table_view="rows")([TextNode.model_validate_json(out.model_dump_json())])
    assert twice.get_content(MetadataMode.EMBED) == embed
    # The labels view leaves the lead out (HCATableNode repeats the header in its LLM view).
    (labels,) = CascadingMetadataTransform(table_view="labels")([TextNode.model_validate_json(out.model_dump_json())])
    assert schema.TABLE_LEAD not in labels.metadata and "32,765" not in labels.get_content(MetadataMode.EMBED)
    assert labels.get_content(MetadataMode.LLM).count("| (Millions) | 2018 | 2017 |") == 1


def test_table_lead_leaves_out_what_the_text_or_the_cascade_already_shows():
    from llama_index_hiqa.transforms.table_view import table_lead

    header = "| Item | 2018 |\n|---|---|"
    assert table_lead("**Balance Sheet**\n\n| Item | 2018 |\n|---|---|\n| Cash | 1 |", "Balance Sheet", header) == ""
    assert table_lead("| Cash | 1 |", "Balance Sheet", header) == "Balance Sheet\n| Item | 2018 |\n|---|---|"
    assert table_lead("| Cash | 1 |", "Balance Sheet", header, own_heading="Balance sheet") == header
    assert table_lead("| Cash | 1 |", "", "") == ""


def test_text_with_prose_around_a_table_is_not_treated_as_a_table():
    text = "## 5 Results\nRevenue grew.\n| Year | Revenue |\n|---|---|\n| 2022 | 10 |\nMore prose after."
    assert parse_markdown_table(text) is None
    out = CascadingMetadataTransform()(_md_nodes(text))
    assert not any(isinstance(n, HCATableNode) for n in out)
    assert "| 2022 | 10 |" in out[0].get_content(MetadataMode.EMBED)


def test_augment_tables_off_embeds_the_whole_table():
    out = CascadingMetadataTransform(augment_tables=False)(_md_nodes())
    table = _by_cascade_suffix(out, "| Pin |")
    assert type(table) is TextNode
    assert "| 3 | EN | 5.5 |" in table.get_content(MetadataMode.EMBED)


# --- images ----------------------------------------------------------------------------

PNG = base64.b64encode(b"\x89PNG fake image bytes").decode()


def _image_nodes():
    before = TextNode(text="The regulator topology is shown below.")
    image = ImageNode(image=PNG, text="![Figure 3](fig3.png)")
    image.metadata[schema.IMAGE_CAPTION] = "Figure 3: Simplified block diagram"
    same = ImageNode(image=PNG, text="![Figure 3 again](fig3.png)")
    after = TextNode(text="The feedback pin sets the output voltage.")
    nodes = [before, image, same, after]
    for i, node in enumerate(nodes):
        node.metadata[schema.DOCUMENT_ID] = "nx2040"
        node.metadata[schema.DOCUMENT_TITLE] = "NX-2040 Datasheet"
        node.metadata[schema.POSITION] = i
        schema.set_heading_path(node, [["2", "Block diagram", 1]])
    return nodes


def test_image_view_caption_description_context_and_hash_cache():
    llm = ScriptedLLM(responses=["A block diagram with VIN, SW and FB pins."])
    out = CascadingMetadataTransform(multimodal_llm=llm)(_image_nodes())
    assert llm.calls == 1  # two nodes, one image hash, one call
    image = out[1]
    embed = image.get_content(MetadataMode.EMBED)
    assert embed.startswith("NX-2040 Datasheet > 2 Block diagram")
    assert "Figure 3: Simplified block diagram" in embed
    assert "VIN, SW and FB" in embed
    assert "regulator topology" in embed and "feedback pin" in embed
    assert "VIN, SW and FB" in image.get_content(MetadataMode.LLM)
    assert "VIN, SW and FB" in out[2].get_content(MetadataMode.EMBED)


async def test_image_descriptions_async_and_llm_failure_falls_back():
    llm = ScriptedLLM(responses=[TimeoutError("vision model timed out")])
    out = await CascadingMetadataTransform(multimodal_llm=llm).acall(_image_nodes())
    embed = out[1].get_content(MetadataMode.EMBED)
    assert "Figure 3: Simplified block diagram" in embed and "feedback pin" in embed
    assert out[1].text == "![Figure 3](fig3.png)"

    llm = ScriptedLLM(responses=["Schematic of the buck stage."])
    out = await CascadingMetadataTransform(multimodal_llm=llm).acall(_image_nodes())
    assert llm.calls == 1
    assert "Schematic of the buck stage." in out[1].get_content(MetadataMode.EMBED)


def test_image_without_llm_embeds_caption_and_context():
    out = CascadingMetadataTransform()(_image_nodes())
    view = out[1].metadata[schema.IMAGE_DESCRIPTION]
    assert view.splitlines()[0] == "Figure 3: Simplified block diagram"
    assert "regulator topology" in view


# --- ablation variants -----------------------------------------------------------------


def test_variants_own_heading_and_none():
    node = _segment("Body.", [["4", "Specifications", 1], ["4.2", "Electrical", 2]])
    (own,) = CascadingMetadataTransform(variant="own_heading")([node.model_copy(deep=True)])
    assert own.metadata[schema.HEADING_CASCADE] == "4.2 Electrical"
    (none,) = CascadingMetadataTransform(variant="none")([node.model_copy(deep=True)])
    assert schema.HEADING_CASCADE not in none.metadata
    assert none.get_content(MetadataMode.EMBED) == "Body."

    tables = CascadingMetadataTransform(variant="none")(_md_nodes())
    table = _by_cascade_suffix(tables, "| Pin |")
    assert type(table) is TextNode and "5.5" in table.get_content(MetadataMode.EMBED)
    # switching a cascaded node back to 'none' removes the cascade and the table view
    cascaded = CascadingMetadataTransform()(_md_nodes())
    back = CascadingMetadataTransform(variant="none")(cascaded)
    assert [n.get_content(MetadataMode.EMBED) for n in back] == [
        n.get_content(MetadataMode.EMBED) for n in tables
    ]


# --- robustness ------------------------------------------------------------------------


def test_idempotent():
    transform = CascadingMetadataTransform()
    once = transform(_md_nodes(file_name="nx2040.md") + _image_nodes())
    snapshot = [(type(n), n.metadata.copy(), n.get_content(MetadataMode.EMBED),
                 n.get_content(MetadataMode.LLM), list(n.excluded_embed_metadata_keys),
                 list(n.excluded_llm_metadata_keys)) for n in once]
    twice = transform([n.model_copy(deep=True) for n in once])
    assert [(type(n), n.metadata, n.get_content(MetadataMode.EMBED),
             n.get_content(MetadataMode.LLM), n.excluded_embed_metadata_keys,
             n.excluded_llm_metadata_keys) for n in twice] == snapshot


def test_malformed_heading_path_is_a_typed_error():
    node = TextNode(text="x", metadata={schema.HEADING_PATH: [["1", "Intro"]]})
    with pytest.raises(InvalidMetadataError) as info:
        CascadingMetadataTransform()([node])
    assert info.value.node_id == node.node_id and info.value.key == schema.HEADING_PATH


def test_empty_input_and_node_without_any_structure():
    assert CascadingMetadataTransform()([]) == []
    (out,) = CascadingMetadataTransform()([TextNode(text="plain text")])
    assert out.get_content(MetadataMode.EMBED) == "plain text"


def test_pipeline_cache_hit_on_second_run(monkeypatch):
    calls = []
    original = CascadingMetadataTransform._apply

    def counting(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CascadingMetadataTransform, "_apply", counting)
    cache = IngestionCache()
    docs = [Document(text=DATASHEET, id_="nx2040", metadata={"file_name": "nx2040.md"})]

    def run():
        pipeline = IngestionPipeline(
            transformations=[MarkdownNodeParser(), CascadingMetadataTransform(), HashingEmbedding()],
            cache=cache,
        )
        return pipeline.run(documents=[d.model_copy(deep=True) for d in docs])

    first = run()
    second = run()
    assert len(calls) == 1
    assert [n.embedding for n in second] == [n.embedding for n in first]
    assert [n.get_content(MetadataMode.LLM) for n in second] == [
        n.get_content(MetadataMode.LLM) for n in first
    ]
    # the table was embedded from its labels, not its cells, in both runs
    table = next(n for n in first if "| Pin |" in n.text)
    assert table.embedding == HashingEmbedding().vector(table.get_content(MetadataMode.EMBED))


def test_bm25_tells_near_identical_documents_apart_only_with_the_cascade():
    from llama_index.retrievers.bm25 import BM25Retriever

    def corpus():
        nodes = []
        for name in ("NX-2040", "NX-3050", "NX-4060"):
            nodes += _md_nodes(DATASHEET.replace("NX-2040", "PART"), document_title=f"{name} Datasheet")
        for node in nodes:
            node.metadata[schema.DOCUMENT_ID] = node.metadata[schema.DOCUMENT_TITLE]
        return nodes

    def top_title(nodes):
        retriever = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=1)
        hit = retriever.retrieve("NX-3050 supply voltage electrical characteristics")[0]
        return hit.node.metadata[schema.DOCUMENT_TITLE]

    assert top_title(CascadingMetadataTransform()(corpus())) == "NX-3050 Datasheet"
    plain = CascadingMetadataTransform(variant="none")(corpus())
    texts = {n.get_content(MetadataMode.EMBED) for n in plain if "Supply voltage" in n.text}
    assert len(texts) == 1  # without the cascade the three sections are indistinguishable


def test_combined_header_with_context_header_transform_in_either_order():
    from llama_index_hiqa.transforms.context_header import ContextHeaderTransform

    summary = "This document is about: the NX-2040 buck converter."

    def answer(prompt):
        if "summarize the content of the document" in prompt:
            return summary
        raise AssertionError(f"unexpected prompt: {prompt[:80]}")

    def header_lines(order):
        context = ContextHeaderTransform(
            llm=ScriptedLLM(answer), generate_title=False, section_summaries=False,
            use_cache=False,
        )
        steps = [CascadingMetadataTransform(), context]
        nodes = _md_nodes(file_name="nx2040.md")
        for step in steps if order == "cascade first" else reversed(steps):
            nodes = step(nodes)
        node = _by_cascade_suffix(nodes, "Supply voltage")
        return node.get_content(MetadataMode.EMBED).split("\n\n")[0].splitlines(), node

    for order in ("cascade first", "context first"):
        lines, node = header_lines(order)
        assert lines == ["NX-2040 Datasheet > 4 Specifications", summary], order
        assert node.text.startswith("### 4.2 Electrical characteristics")


def test_nodes_without_any_heading_warn_once_naming_the_fix(caplog):
    """SentenceSplitter chunks of SimpleDirectoryReader pages: the cascade is the file name alone."""
    pages = [Document(text=f"Page {i}. The regulator delivers 150 mA. " * 30, metadata={"file_name": "NX-2040.pdf"})
             for i in range(2)]
    chunks = SentenceSplitter(chunk_size=128, chunk_overlap=0).get_nodes_from_documents(pages)
    assert len(chunks) > 2
    transform = CascadingMetadataTransform()
    log = "llama_index_hiqa.transforms.cascading_metadata"
    with caplog.at_level(logging.WARNING, logger=log):
        out = transform(chunks)
        transform(chunks)
    warnings = [r for r in caplog.records if r.name == log]
    assert len(warnings) == 1  # once per transform, not per node or call
    assert f"none of the {len(chunks)} nodes has a heading path" in warnings[0].getMessage()
    assert "LayoutMarkdownParser()" in warnings[0].getMessage()
    assert {n.metadata[schema.HEADING_CASCADE] for n in out} == {"NX-2040.pdf"}


def test_no_heading_warning_when_a_node_has_a_path_or_a_segment_parser_looked(caplog):
    with_path = TextNode(text="# 1 Intro\n\nText.", metadata={"file_name": "a.md"})
    without = TextNode(text="Plain text.", metadata={"file_name": "b.txt"})
    segment = TextNode(text="A passage.", metadata={schema.PARSE_PATH: "text"})  # a pack parser's
    log = "llama_index_hiqa.transforms.cascading_metadata"
    with caplog.at_level(logging.WARNING, logger=log):
        CascadingMetadataTransform()([with_path, without])
        CascadingMetadataTransform()([segment])
        CascadingMetadataTransform(variant="none")([TextNode(text="Plain text.")])
    assert not [r for r in caplog.records if r.name == log]
