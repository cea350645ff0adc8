"""Segments bounded by the embedding model's token window (split long, merge small siblings)."""

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
    from llama_index_hiqa.defaults import embedding_tokenizer

    tokenizer, window = embedding_tokenizer(_FakeCached())
    assert window == 96 and tokenizer("a b") == ["[CLS]", "a", "b", "[SEP]"]
    assert embedding_tokenizer(object()) is None  # a remote model: character limits only
    assert embedding_tokenizer(None) is None


def test_pack_parser_uses_the_embedding_window_unless_disabled():
    from llama_index_hiqa.pack_config import HiQAPackConfig, build_parser as _parser

    auto = _parser(HiQAPackConfig(), None, _FakeCached())
    assert auto.max_segment_tokens == 96 and auto._tokenizer is not None
    capped = _parser(HiQAPackConfig(max_segment_tokens=64), None, _FakeCached())
    assert capped.max_segment_tokens == 64
    off = _parser(HiQAPackConfig(max_segment_tokens=None), None, _FakeCached())
    assert off.max_segment_tokens is None and off._tokenizer is None
