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


def test_unnumbered_heading_label():
    assert schema.Heading("", "Overview", 1).label() == "Overview"


def test_document_title_falls_back_to_file_name_then_ref_doc():
    node = TextNode(text="x", metadata={schema.FILE_NAME: "a.pdf"})
    assert schema.get_document_title(node) == "a.pdf"


# --- structured facts stored flat -------------------------------------------------------
import pytest  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from llama_index_hiqa.errors import InvalidMetadataError  # noqa: E402

headings = st.lists(st.tuples(st.text(max_size=8), st.text(max_size=30), st.integers(1, 6)), max_size=6)


@given(headings)
def test_a_heading_path_is_stored_as_a_json_string_and_read_back(path):
    node = TextNode(text="x")
    schema.set_heading_path(node, path)
    assert isinstance(node.metadata[schema.HEADING_PATH], str)
    assert schema.get_heading_path(node) == [schema.Heading(n, t, lvl) for n, t, lvl in path]
    assert schema.non_flat_keys(node.metadata) == []


def test_every_structured_fact_is_flat_and_decoded_by_its_accessor():
    node = TextNode(text="| a | b |")
    schema.set_table_facts(node, title="Limits", columns=["Min", "Max"], rows=["Vin"])
    schema.set_critical_keywords(node, ["nx2043", "2023"])
    schema.set_image_bbox(node, [1, 2, 3, 4])
    meta: dict = {}
    schema.set_page_spans(meta, [(0, 0, 10), (1, 10, 20)])
    schema.set_layout_headings(meta, [[0, 5, 14.0, True]])
    schema.set_images(meta, [{"page": 0, "bbox": [0, 0, 1, 1], "caption": "Figure 1"}])
    assert schema.non_flat_keys(node.metadata) == [] and schema.non_flat_keys(meta) == []
    assert schema.get_table_labels(node) == (["Min", "Max"], ["Vin"])
    assert schema.get_critical_keywords(node) == ["nx2043", "2023"]
    assert schema.get_image_bbox(node) == [1.0, 2.0, 3.0, 4.0]
    assert schema.page_spans_of(meta) == [(0, 0, 10), (1, 10, 20)]
    assert schema.layout_headings_of(meta) == [[0, 5, 14.0, True]]
    assert schema.images_of(meta)[0]["caption"] == "Figure 1"


def test_lists_written_before_the_flat_format_still_read():
    """Stores written before the facts were JSON strings hold plain lists."""
    node = TextNode(text="x", metadata={
        schema.HEADING_PATH: [["2", "Features", 1]], schema.CRITICAL_KEYWORDS: ["nx2040"],
        schema.TABLE_COLUMNS: ["Min"], schema.TABLE_ROWS: ["Vin"], schema.PAGE_SPANS: [[0, 0, 5]],
    })
    assert schema.get_heading_path(node) == [schema.Heading("2", "Features", 1)]
    assert schema.get_critical_keywords(node) == ["nx2040"]
    assert schema.get_table_labels(node) == (["Min"], ["Vin"])
    assert schema.get_page_spans(node) == [(0, 0, 5)]
    schema.flatten_metadata(node.metadata)
    assert schema.non_flat_keys(node.metadata) == []
    assert schema.get_heading_path(node) == [schema.Heading("2", "Features", 1)]


def test_a_structured_fact_that_is_not_json_names_the_node_and_key():
    node = TextNode(text="x", id_="n1", metadata={schema.HEADING_PATH: "[[broken"})
    with pytest.raises(InvalidMetadataError) as err:
        schema.get_heading_path(node)
    assert "n1" in str(err.value) and schema.HEADING_PATH in str(err.value)
