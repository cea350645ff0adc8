"""Segments bounded by the embedding model's token window (split long, merge small siblings)."""

import pytest
from llama_index.core.schema import Document, MetadataMode

from llama_index_hiqa import LayoutMarkdownParser, schema
from llama_index_hiqa.parsers._markdown_segments import Piece
from llama_index_hiqa.parsers._token_budget import (
    cascade_header_counter,
    fit_pieces_to_window,
    token_counter,
)
from llama_index_hiqa.transforms.cascading_metadata import CascadingMetadataTransform


def words(text):  # a whitespace tokenizer with [CLS]/[SEP]-like overhead of 2
    return ["[CLS]"] + text.split() + ["[SEP]"]


COUNT = token_counter(words)
A = ("", "Alpha", 1)
A1, A2, B = ("1", "One", 2), ("2", "Two", 2), ("", "Beta", 1)


def _tile(text, pieces):
    assert pieces[0].start == 0 and pieces[-1].end == len(text)
    for left, right in zip(pieces, pieces[1:]):
        assert left.end == right.start
    assert "".join(text[p.start : p.end] for p in pieces) == text


def test_counter_drops_special_tokens():
    assert COUNT("") == 0 and COUNT("one two three") == 3


def test_long_piece_is_split_at_lines_within_budget_and_keeps_its_path():
    text = "\n".join(f"line {i} has five words" for i in range(40))  # 40 lines x 5 words
    header = lambda path: 4  # noqa: E731
    out = fit_pieces_to_window(text, [Piece(0, len(text), [A])], COUNT, 44, header)
    _tile(text, out)
    assert len(out) == 5  # 40 words per part: 8 lines
    for piece in out:
        assert COUNT(text[piece.start : piece.end]) + 4 <= 44
        assert piece.path == [A]
        assert text[piece.start : piece.end].startswith("line")  # cut at line starts


def test_one_long_line_is_split_at_words():
    text = " ".join(["word"] * 100)
    out = fit_pieces_to_window(text, [Piece(0, len(text), [])], COUNT, 40, lambda p: 0)
    _tile(text, out)
    assert all(COUNT(text[p.start : p.end]) <= 40 for p in out) and len(out) == 3


def test_small_siblings_merge_up_to_the_window_but_not_across_sections_or_tables():
    parts = ["# Alpha\n", "## 1 One\nshort text\n", "## 2 Two\nmore short text\n", "| a | b |\n", "# Beta\nend\n"]
    text = "".join(parts)
    bounds, pos = [], 0
    for part in parts:
        bounds.append((pos, pos + len(part)))
        pos += len(part)
    pieces = [
        Piece(*bounds[0], [A]), Piece(*bounds[1], [A, A1]), Piece(*bounds[2], [A, A2]),
        Piece(*bounds[3], [A, A2], kind=schema.KIND_TABLE), Piece(*bounds[4], [B]),
    ]
    out = fit_pieces_to_window(text, pieces, COUNT, 50, lambda p: len(p))
    _tile(text, out)
    assert [p.kind for p in out] == [schema.KIND_TEXT, schema.KIND_TABLE, schema.KIND_TEXT]
    assert out[0].path == [A]  # parent + both children: the common path
    assert out[2].path == [B]
    # A window too small for the pair keeps them apart.
    tight = fit_pieces_to_window(text, pieces, COUNT, 6, lambda p: len(p))
    assert len([p for p in tight if p.kind == schema.KIND_TEXT]) == 4


def test_header_counter_counts_title_and_labels():
    header = cascade_header_counter(COUNT, "3M Company, Form 10-K")
    assert header([A, A1]) == COUNT("3M Company, Form 10-K > Alpha > 1 One") + 1


def test_parser_nodes_fit_the_window_with_their_cascade():
    body = "\n".join(f"Revenue grew in quarter {i} because of strong demand in every region." for i in range(50))
    text = f"# Results\n\n{body}\n\n# Outlook\n\nShort.\n"
    doc = Document(text=text, metadata={schema.DOCUMENT_TITLE: "Acme Corp Annual Report 2023", schema.DOCUMENT_ID: "acme"})
    parser = LayoutMarkdownParser(max_segment_tokens=64, tokenizer=words)
    nodes = CascadingMetadataTransform()(parser.get_nodes_from_documents([doc]))
    assert "".join(n.get_content(MetadataMode.NONE) for n in nodes) == text  # tiling, no loss
    assert len(nodes) > 5
    for node in nodes:
        assert COUNT(node.get_content(MetadataMode.EMBED)) <= 64
        # every part of the long section repeats the cascade
        if "Revenue grew" in node.text:
            assert node.get_content(MetadataMode.EMBED).startswith("Acme Corp Annual Report 2023")
    plain = LayoutMarkdownParser().get_nodes_from_documents([doc])
    assert len(plain) == 2  # without a tokenizer: character limits only


class _FakeST:
    """What a sentence-transformers model exposes: a tokenizer and its window."""

    class tokenizer:  # noqa: N801 - mimics the attribute
        @staticmethod
        def encode(text):
            return words(text)

    max_seq_length = 128


class _FakeHFEmbedding:
    _model = _FakeST()
    max_length = 96


class _FakeCached:
    inner = _FakeHFEmbedding()


def test_embedding_tokenizer_reads_window_and_tokenizer_also_behind_the_cache():
    from llama_index_hiqa.models.defaults import embedding_tokenizer

    tokenizer, window = embedding_tokenizer(_FakeCached())
    assert window == 96 and tokenizer("a b") == ["[CLS]", "a", "b", "[SEP]"]
    assert embedding_tokenizer(object()) is None  # a remote model: character limits only
    assert embedding_tokenizer(None) is None


def test_pack_parser_uses_the_embedding_window_unless_disabled():
    from llama_index_hiqa.pack.config import HiQAPackSettings, build_parser as _parser

    auto = _parser(HiQAPackSettings(), None, _FakeCached())
    assert auto.max_segment_tokens == 96 and auto._tokenizer is not None
    capped = _parser(HiQAPackSettings(max_segment_tokens=64), None, _FakeCached())
    assert capped.max_segment_tokens == 64
    off = _parser(HiQAPackSettings(max_segment_tokens=None), None, _FakeCached())
    assert off.max_segment_tokens is None and off._tokenizer is None


# --- tables split by rows ---------------------------------------------------------------


def _statement(n_rows, label_words=3, caption="CONSOLIDATED BALANCE SHEETS"):
    header = "| (Millions) | 2018 | 2017 |\n|---|---|---|\n"
    rows = "".join(
        f"| {' '.join(f'item{i}w{w}' for w in range(label_words))} | {i},000 | ({i}) |\n" for i in range(n_rows)
    )
    return f"{caption}\n\n{header}{rows}"


def _table_piece(text, path=(A,)):
    from llama_index_hiqa.parsers._markdown_segments import find_tables

    # The parser's own reading of the table, in a chapter whose heading line comes first.
    (start, end, title, columns, rows), = find_tables("# A\n" + text, 0, len(text) + 4)
    assert (start, end) == (4, len(text) + 3)  # the span ends before the last newline
    return Piece(0, len(text), list(path), schema.KIND_TABLE, title, columns, rows)


HEADER = "| (Millions) | 2018 | 2017 |\n|---|---|---|"


def _rows_view_tokens(text, part, header=HEADER):
    """The most a part's rows view can hold: its title and header lines (its lead, or the
    caption and header its text opens with) and its text."""
    from llama_index_hiqa.parsers._token_budget import table_lead_tokens

    return table_lead_tokens(COUNT, part.table_title, header) + COUNT(text[part.start : part.end])


def _labels_view_tokens(text, part):
    from llama_index_hiqa.parsers._token_budget import table_view_tokens

    return table_view_tokens(COUNT, part.table_title, part.table_columns, part.table_rows)


@pytest.mark.parametrize("view, view_tokens", [("rows", _rows_view_tokens), ("labels", _labels_view_tokens)])
def test_long_table_is_split_by_rows_each_part_in_the_window_of_its_view(view, view_tokens):
    text = _statement(80)
    piece = _table_piece(text)
    assert piece.table_title == "CONSOLIDATED BALANCE SHEETS" and piece.table_columns == ["(Millions)", "2018", "2017"]
    header = lambda path: 5  # noqa: E731
    out = fit_pieces_to_window(text, [piece], COUNT, 120, header, table_view=view)
    _tile(text, out)
    assert len(out) > 2 and all(p.kind == schema.KIND_TABLE for p in out)
    for part in out:
        assert header(part.path) + view_tokens(text, part) <= 120
        assert part.table_title == piece.table_title and part.table_columns == piece.table_columns
        assert part.path == [A]
        # a part's own rows are exactly the labelled lines of its text
        own = [ln.split("|")[1].strip() for ln in text[part.start : part.end].splitlines() if ln.startswith("| item")]
        assert part.table_rows == own
    assert [r for p in out for r in p.table_rows] == piece.table_rows  # every row once, in order
    assert out[0].table_header == "" and text[out[0].start :].startswith("CONSOLIDATED")
    for part in out[1:]:
        assert part.table_header == "| (Millions) | 2018 | 2017 |\n|---|---|---|"
        assert text[part.start : part.end].startswith("| item")  # cut between rows


def test_a_table_that_fits_stays_whole():
    text = _statement(4)
    piece = _table_piece(text)
    assert fit_pieces_to_window(text, [piece], COUNT, 200, lambda p: 5) == [piece]


def test_table_parts_hold_at_most_the_labels_the_view_shows():
    from llama_index_hiqa.parsers._token_budget import MAX_TABLE_ROWS

    text = _statement(150, label_words=1)
    out = fit_pieces_to_window(text, [_table_piece(text)], COUNT, 10_000, lambda p: 0)
    _tile(text, out)
    assert [len(p.table_rows) for p in out] == [MAX_TABLE_ROWS, MAX_TABLE_ROWS, 150 - 2 * MAX_TABLE_ROWS]
    assert CascadingMetadataTransform().max_table_labels == MAX_TABLE_ROWS


def test_split_tables_property_every_part_fits_and_every_row_appears_once():
    import random

    from llama_index_hiqa.parsers._token_budget import MIN_TEXT_TOKENS, table_lead_tokens

    rng = random.Random(7)
    for trial in range(60):
        n_rows, words_per_label = rng.randint(1, 120), rng.randint(1, 9)
        window, head = rng.randint(40, 300), rng.randint(0, 20)
        rows = []
        for i in range(n_rows):
            label = " ".join(f"r{i}x{w}" for w in range(rng.randint(1, words_per_label)))
            rows.append(f"| {label} | {i} |" if rng.random() > 0.1 else f"|  | {i} |")  # some unlabelled
            if rng.random() < 0.05:
                rows.append("")  # a blank line inside the block ends nothing here
        text = "Title line\n\n| Item | 2023 |\n|---|---|\n" + "\n".join(rows) + "\n"
        text = text.replace("\n\n|", "\n|", 1) if rng.random() < 0.5 else text
        from llama_index_hiqa.parsers._markdown_segments import find_tables

        tables = find_tables(text, 0, len(text))
        start, end, title, columns, labels = tables[0]
        piece = Piece(start, end, [A], schema.KIND_TABLE, title, columns, labels)
        out = fit_pieces_to_window(text[: end], [piece], COUNT, window, lambda p: head, table_view="rows")
        assert out[0].start == start and out[-1].end == end
        for left, right in zip(out, out[1:]):
            assert left.end == right.start
        assert [r for p in out for r in p.table_rows] == labels, trial
        caption_chars = text.index("|---|", start) + len("|---|") - start
        caption = COUNT(text[start : start + caption_chars])
        fixed = head + table_lead_tokens(COUNT, title, "| Item | 2023 |\n|---|---|") + caption
        for part in out:
            rows = COUNT(text[part.start : part.end]) - (caption if part is out[0] else 0)
            fits = fixed + rows <= window
            # Over the window only when one row alone does not fit beside the title and header,
            # or when they leave less than MIN_TEXT_TOKENS for the rows (never squeezed below it).
            floor = rows <= MIN_TEXT_TOKENS
            own_lines = [ln for ln in text[max(part.start, start + caption_chars) : part.end].splitlines() if ln.strip()]
            assert fits or len(own_lines) == 1 or (window - fixed < MIN_TEXT_TOKENS + 1 and floor), trial
            assert len(part.table_rows) <= 60


def _shows_rows(node, embed):
    """The rows view: the statement, its years and its own rows with their figures, no other part's."""
    own = [ln for ln in node.text.splitlines() if ln.startswith("| item")]
    return "CONSOLIDATED BALANCE SHEETS" in embed and HEADER in embed and own and all(
        ln in embed for ln in own) and embed.count("| item") == len(own)


def _shows_labels(node, embed):
    """HiQA's labels view: title, column and row labels, no cell."""
    return "CONSOLIDATED BALANCE SHEETS" in embed and "Columns: (Millions); 2018; 2017" in embed and "000" not in embed


@pytest.mark.parametrize("view, shows", [("rows", _shows_rows), ("labels", _shows_labels)])
def test_split_table_nodes_fit_show_their_view_and_tile_the_document(view, shows):
    text = "# Item 8. Financial Statements\n\n" + _statement(80) + "\nAfter the table.\n"
    doc = Document(text=text, metadata={schema.DOCUMENT_TITLE: "Acme 10-K", schema.DOCUMENT_ID: "acme"})
    parser = LayoutMarkdownParser(max_segment_tokens=128, tokenizer=words, table_view=view)
    nodes = CascadingMetadataTransform(table_view=view)(parser.get_nodes_from_documents([doc]))
    assert "".join(n.get_content(MetadataMode.NONE) for n in nodes) == text  # tiling, no loss
    tables = [n for n in nodes if schema.get_segment_kind(n) == schema.KIND_TABLE]
    assert len(tables) > 2
    seen = []
    for node in tables:
        embed = node.get_content(MetadataMode.EMBED)
        assert COUNT(embed) <= 128
        assert embed.startswith("Acme 10-K > Item 8 Financial Statements")  # the cascade in every part
        assert shows(node, embed)
        llm = node.get_content(MetadataMode.LLM)
        assert HEADER in llm and node.text.strip() in llm and llm.count(HEADER) == 1
        columns, rows = schema.get_table_labels(node)
        assert columns == ["(Millions)", "2018", "2017"]
        seen += rows
    assert schema.get_table_header(tables[0]) == "" and schema.get_table_header(tables[1]) == HEADER
    assert seen == [f"item{i}w0 item{i}w1 item{i}w2" for i in range(80)]
