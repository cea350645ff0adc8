from llama_index.core.schema import MetadataMode, TextNode

from llama_index_hiqa import schema


def test_segment_facts_round_trip_and_hidden_from_views():
    node = TextNode(text="Body of the timing chapter.")
    node.metadata[schema.PAGE_SPANS] = [[0, 0, 10]]
    schema.set_segment_facts(
        node,
        document_id="nx2040",
        document_title="NX-2040 Datasheet",
        position=3,
        char_span=(120, 147),
        heading_path=[("2", "Features", 1), ("2.3", "Timing", 2)],
        page_range=(1, 2),
        kind=schema.KIND_TEXT,
        parse_path="layout",
    )
    assert schema.get_heading_path(node) == [
        schema.Heading("2", "Features", 1),
        schema.Heading("2.3", "Timing", 2),
    ]
    assert schema.get_heading_path(node)[-1].label() == "2.3 Timing"
    assert node.metadata[schema.SECTION_TITLE] == "2.3 Timing"
    assert schema.get_position(node) == 3
    assert schema.get_char_span(node) == (120, 147)
    assert schema.get_page_range(node) == (1, 2)
    assert schema.get_document_id(node) == "nx2040"
    assert schema.PAGE_SPANS not in node.metadata  # document-only facts are not copied
    # bookkeeping is invisible to both views: only the text is embedded / read
    assert node.get_content(MetadataMode.EMBED) == "Body of the timing chapter."
    assert node.get_content(MetadataMode.LLM) == "Body of the timing chapter."


def test_view_keys_are_shown():
    node = TextNode(text="x")
    schema.hide_from_views(node)
    node.metadata[schema.HEADING_CASCADE] = "Doc > 1 Intro"
    assert "Doc > 1 Intro" in node.get_content(MetadataMode.EMBED)


def test_invalid_kind_is_rejected():
    import pytest

    with pytest.raises(ValueError, match="segment kind"):
        schema.set_segment_facts(
            TextNode(text="x"), document_id="d", document_title="D", position=0, kind="chart"
        )


def test_pages_for_span():
    spans = [[0, 0, 100], [1, 100, 250], [2, 250, 400]]
    assert schema.pages_for_span(spans, 10, 20) == (0, 0)
    assert schema.pages_for_span(spans, 90, 260) == (0, 2)
    assert schema.pages_for_span(spans, 100, 100) == (1, 1)  # empty span: its page
    assert schema.pages_for_span(spans, 500, 600) is None


def test_unnumbered_heading_label():
    assert schema.Heading("", "Overview", 1).label() == "Overview"


def test_document_title_falls_back_to_file_name_then_ref_doc():
    node = TextNode(text="x", metadata={schema.FILE_NAME: "a.pdf"})
    assert schema.get_document_title(node) == "a.pdf"
