"""Every setting is bounded and typed at construction, naming itself; no setting within its
declared range can make ingestion hang (a property test over the declared ranges)."""

from __future__ import annotations

import time
import typing
from typing import Any, List

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from llama_index.core.schema import Document
from pydantic import ValidationError

from llama_index_hiqa.pack import hiqa_pack as pack_module
from llama_index_hiqa.errors import InvalidSettingError
from llama_index_hiqa.pack.config import HiQAPackSettings
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from llama_index_hiqa.parsers._markdown_segments import _split_table, _sub_split
from llama_index_hiqa.parsers.layout_markdown import LayoutMarkdownParser
from llama_index_hiqa.retrievers.chain_augmented import ChainBudget
from llama_index_hiqa.retrievers.chunk_graph import ChainSearchSettings, ChunkInteractionGraph
from llama_index_hiqa.settings import updated
from tests.pack_helpers import HashEmbedding


class WindowedHashEmbedding(HashEmbedding):
    """The hashing embedding with a token window, so max_segment_tokens is exercised."""

    max_length: int = 64

    def token_ids(self, text: str) -> List[str]:
        return text.split()


@pytest.fixture(autouse=True)
def _rules_only(monkeypatch):
    real = pack_module.keyword_extractor
    monkeypatch.setattr(
        pack_module, "keyword_extractor", lambda c: real(updated(c, keywords=updated(c.keywords, use_ner=False)))
    )


@pytest.mark.parametrize(
    "settings, named",
    [
        ({"max_segment_chars": -10}, "max_segment_chars"),
        ({"max_segment_chars": 0}, "max_segment_chars"),
        ({"max_segment_tokens": 0}, "max_segment_tokens"),
        ({"max_segment_tokens": -1}, "max_segment_tokens"),
        ({"keywords": {"expert_keywords": "NX"}}, "keywords.expert_keywords"),
        ({"keywords": {"min_length": 0}}, "keywords.min_length"),
        ({"chunk_graph": {"keyword_threshold": "sometimes"}}, "chunk_graph.graph.keyword_threshold"),
        ({"chunk_graph": {"keyword_threshold": 0}}, "chunk_graph.graph.keyword_threshold"),
        ({"chunk_graph": {"semantic_top_k": -1}}, "chunk_graph.graph.semantic_top_k"),
        ({"similarity_top_k": 0}, "similarity_top_k"),
        ({"ingest_batch_size": 0}, "ingest_batch_size"),
    ],
)
def test_out_of_range_settings_fail_at_construction_naming_themselves(settings, named):
    with pytest.raises(InvalidSettingError) as caught:
        HiQAPackSettings(**settings)
    assert caught.value.setting == named


@pytest.mark.parametrize(
    "arguments, named",
    [
        ({"llm": "gpt-4"}, "llm"),
        ({"vector_store": "x"}, "vector_store"),
        ({"store": 123}, "store"),
        ({"embed_model": "minilm"}, "embed_model"),
    ],
)
def test_objects_of_the_wrong_type_fail_at_construction(arguments, named):
    with pytest.raises(InvalidSettingError) as caught:
        HiQAPack.empty(**{"embed_model": HashEmbedding(), **arguments})
    assert caught.value.setting == named and str(caught.value).startswith(f"{named}: expected")


def test_a_model_name_for_llm_points_to_llm_from_spec():
    with pytest.raises(InvalidSettingError, match=r"llm_from_spec\('openai:gpt-4'\)"):
        HiQAPack.empty(llm="gpt-4", embed_model=HashEmbedding())


def test_documents_must_be_documents_and_nothing_is_indexed_before_the_check():
    pack = HiQAPack.empty(embed_model=HashEmbedding())
    with pytest.raises(InvalidSettingError, match=r"documents\[1\]: .*Document\(text=\.\.\.\)"):
        pack.add_documents([Document(text="fine", id_="a"), "text"])
    with pytest.raises(InvalidSettingError, match="^documents: "):
        pack.add_documents("a string is not a list of documents")
    assert pack.node_count == 0


def test_a_caller_setting_at_load_is_blamed_on_the_caller_not_the_store(tmp_path):
    store = tmp_path / "s"
    pack = HiQAPack.from_documents([Document(text="# A\n\nsome text", id_="a")], embed_model=HashEmbedding())
    pack.persist(store)
    with pytest.raises(InvalidSettingError, match="similarity_top_k") as caught:
        HiQAPack.load(store, embed_model=HashEmbedding(), similarity_top_k=0)
    assert "hiqa_pack.json" not in str(caught.value)


@pytest.mark.parametrize("max_chars", [0, -1, -10])
def test_splitters_refuse_a_limit_that_cannot_move_forward(max_chars):
    with pytest.raises(ValueError, match="at least 1"):
        _sub_split("x" * 50, 0, 50, [], max_chars)
    with pytest.raises(ValueError, match="at least 1"):
        _split_table("|a|\n" * 20, 0, 80, [], "t", ["a"], max_chars)
    with pytest.raises(ValidationError):
        LayoutMarkdownParser(max_segment_chars=max_chars)


# --- property: any configuration within the declared ranges ingests promptly ---------------
def _bounds(info: Any) -> dict:
    found = {}
    for meta in info.metadata:
        for name in ("ge", "gt", "le", "lt"):
            if getattr(meta, name, None) is not None:
                found[name] = getattr(meta, name)
    return found


def _strategy(annotation: Any, bounds: dict) -> st.SearchStrategy:
    """Values of ``annotation`` within ``bounds`` (the declared ranges; small upper ends keep
    the examples quick: the lower ends are where hangs and tiny nodes were)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *metas = typing.get_args(annotation)
        metas = [c for m in metas for c in (getattr(m, "metadata", None) or [m])]  # a Field(...) holds its own
        inner = {k: getattr(m, k) for m in metas for k in ("ge", "gt", "le", "lt") if getattr(m, k, None) is not None}
        return _strategy(base, {**bounds, **inner})
    if origin is typing.Union:
        return st.one_of([_strategy(arg, bounds) for arg in typing.get_args(annotation)])
    if origin is typing.Literal:
        return st.sampled_from(typing.get_args(annotation))
    if annotation is type(None):
        return st.none()
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        low = bounds.get("ge", bounds.get("gt", -1) + 1 if "gt" in bounds else 0)
        return st.integers(low, bounds.get("le", low + 3 * max(low, 10)))
    if annotation is float:
        low = float(bounds.get("ge", bounds.get("gt", 0.0)))
        return st.floats(low, float(bounds.get("le", low + 4.0)), exclude_min="gt" in bounds)
    raise AssertionError(f"no strategy for {annotation}")


def _field_strategy(model: Any, name: str) -> st.SearchStrategy:
    info = model.model_fields[name]
    return _strategy(info.annotation, _bounds(info))


# The pack's value settings that shape ingestion, and the chunk graph's, from their declarations.
_PACK_FIELDS = ["similarity_top_k", "use_cascade", "max_segment_chars", "max_segment_tokens", "ingest_batch_size",
                "use_chunk_graph", "use_segment_integration", "fusion_mode"]
_GRAPH_FIELDS = [(ChunkInteractionGraph, "keyword_threshold"), (ChunkInteractionGraph, "semantic_top_k"),
                 (ChainSearchSettings, "max_hops"), (ChainSearchSettings, "max_nodes"), (ChainBudget, "head_share")]

configs = st.fixed_dictionaries(
    {name: _field_strategy(HiQAPackSettings, name) for name in _PACK_FIELDS},
    optional={"chunk_graph": st.fixed_dictionaries({}, optional={
        name: _field_strategy(model, name) for model, name in _GRAPH_FIELDS
    })},
)

_TABLE = "\n".join(["| Part | Volts | Amps |", "|---|---|---|"] + [f"| NX-{i} | {i % 9}.5 | {i} |" for i in range(60)])
_DOCUMENT = (
    "# NX-2040 Regulator\n\n## Electrical\n\n"
    + " ".join(f"The output stage {i} holds its voltage within one percent under load." for i in range(120))
    + "\n\n## Table 1\n\n" + _TABLE + "\n\n## Notes\n\nShort note.\n"
)


@hsettings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs)
def test_any_configuration_within_the_declared_ranges_ingests_promptly(config):
    started = time.monotonic()
    pack = HiQAPack.from_documents(
        [Document(text=_DOCUMENT, id_="nx")], embed_model=WindowedHashEmbedding(), **config
    )
    answer = pack.retrieve("NX-2040 output voltage")
    elapsed = time.monotonic() - started
    assert pack.node_count >= 1 and answer
    assert elapsed < 30, f"{config} took {elapsed:.1f}s"
