"""Nothing accepted that fails later: every setting of the HiQAPackSettings tree is bounded where
it is declared, and any value of any setting is either refused at construction (one
InvalidSettingError naming its path) or works at the first question on the demo store, under a
memory cap (a property test drawing values in and far out of every declared range)."""

from __future__ import annotations

import contextlib
import math
import resource
import typing
import warnings
from typing import Any, Dict, Iterator, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from llama_index.core.schema import Document
from pydantic import BaseModel

from llama_index_hiqa.demo import DEMO_DATA_DIR
from llama_index_hiqa.errors import InvalidSettingError, PackStoreError
from llama_index_hiqa.pack.config import HiQAPackSettings
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from llama_index_hiqa.retrievers.chunk_interaction_graph import ChunkInteractionGraph
from llama_index_hiqa.settings import SettingsModel
from tests.pack_helpers import HashEmbedding
from tests.test_settings_bounds import _strategy

QUESTION = "What is the dropout voltage of the NX-2047?"


# --- the tree of settings, read from the declarations ----------------------------------------
def _part(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, SettingsModel):
        return annotation
    return None


def leaves(model: Any = HiQAPackSettings, prefix: Tuple[str, ...] = ()) -> List[Tuple[Tuple[str, ...], Any]]:
    """Every setting of the tree: ``(path, FieldInfo)``."""
    found = []
    for name, info in model.model_fields.items():
        part = _part(info.annotation)
        found += leaves(part, prefix + (name,)) if part else [(prefix + (name,), info)]
    return found


LEAVES = leaves()


def _bounds(metadata: Any) -> Dict[str, Any]:
    return {k: getattr(m, k) for m in metadata for k in ("ge", "gt", "le", "lt") if getattr(m, k, None) is not None}


def _numbers(annotation: Any, bounds: Dict[str, Any]) -> List[Tuple[Any, Dict[str, Any]]]:
    """The int/float members of ``annotation`` with their bounds."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *metas = typing.get_args(annotation)
        inner = _bounds([c for m in metas for c in (getattr(m, "metadata", None) or [m])])
        return _numbers(base, {**bounds, **inner})
    if origin is typing.Union:
        return [n for arg in typing.get_args(annotation) for n in _numbers(arg, bounds)]
    if origin in (dict, list):
        return [n for arg in typing.get_args(annotation)[-1:] for n in _numbers(arg, {})]
    return [(annotation, bounds)] if annotation in (int, float) else []


def test_every_number_of_the_tree_is_bounded_below_and_above_where_it_is_declared():
    unbounded = []
    for path, info in LEAVES:
        for kind, bounds in _numbers(info.annotation, _bounds(info.metadata)):
            if not ({"ge", "gt"} & set(bounds) and {"le", "lt"} & set(bounds)):
                unbounded.append(".".join(path))
    assert unbounded == []


def _spelled(bound: Any) -> List[str]:
    whole = float(bound).is_integer()
    forms = [str(bound), f"{bound:,}"] + ([str(int(bound)), f"{int(bound):,}"] if whole else [])
    exponent = math.log10(bound) if bound > 0 else 0.5
    return forms + ([f"10^{int(exponent)}"] if float(exponent).is_integer() else [])


def test_every_upper_bound_is_stated_in_the_fields_description():
    silent = []
    for path, info in LEAVES:
        for kind, bounds in _numbers(info.annotation, _bounds(info.metadata)):
            upper = bounds.get("le", bounds.get("lt"))
            if upper is not None and upper != 1.0 and not any(f in (info.description or "") for f in _spelled(upper)):
                silent.append(f"{'.'.join(path)} <= {upper}")
    assert silent == []


# --- values to try: within, at and far beyond each declared range ----------------------------
ODD = [None, -1, 0, 10**9, 10**18, -(10**18), float("nan"), float("inf"), -0.5, 1.5, "", "auto", "klingon", [], {}, "7"]


def _edges(kind: Any, bounds: Dict[str, Any]) -> List[Any]:
    """The bounds of a number, one step beyond each, and the middle."""
    low, high = bounds.get("ge", bounds.get("gt")), bounds.get("le", bounds.get("lt"))
    edges = [low, high, low - 1, high + 1, (low + high) / 2]
    return [int(e) if kind is int else float(e) for e in edges]


def _values(annotation: Any, bounds: Dict[str, Any]) -> st.SearchStrategy:
    """Values within the declared range (``test_settings_bounds._strategy``) and at and beyond
    its edges; strings, lists and mappings from a few right and wrong ones."""
    origin = typing.get_origin(annotation)
    if annotation is str or annotation == typing.Optional[str]:
        words = ["en", "de", "german", "english", "klingon", "EN", "", "finance", "datasheets", "medicine.yaml"]
        text = st.one_of(st.sampled_from(words), st.text(max_size=4))
        return text if annotation is str else st.one_of(st.none(), text)
    if origin is list:
        return st.lists(st.one_of(st.sampled_from(["ORG", "ORGG", "NX-2047", "", "\x00"]), st.text(max_size=6)), max_size=3)
    if origin is dict:
        value = typing.get_args(annotation)[1]
        keys = st.sampled_from(["vector", "bm25", "keywords", "vectr", "JnJ", ""])
        values = st.text(max_size=6) if value is str else st.one_of(st.floats(-1, 200), st.just(float("nan")))
        return st.dictionaries(keys, values, max_size=3)
    edges = [e for kind, found in _numbers(annotation, bounds) for e in _edges(kind, found)]
    return st.one_of(_strategy(annotation, bounds), *([st.sampled_from(edges)] if edges else []))


@st.composite
def setting(draw: Any) -> Tuple[Tuple[str, ...], Any]:
    path, info = draw(st.sampled_from(LEAVES))
    value = draw(st.one_of(_values(info.annotation, _bounds(info.metadata)), st.sampled_from(ODD)))
    return path, value


def nested(path: Tuple[str, ...], value: Any) -> Dict[str, Any]:
    for key in reversed(path):
        value = {key: value}
    return value


# --- the demo store, built once ------------------------------------------------------------
def _pack(**settings: Any) -> HiQAPack:
    keywords = {"use_ner": False, **settings.pop("keywords", {})}
    return HiQAPack.from_directory(DEMO_DATA_DIR, embed_model=HashEmbedding(), keywords=keywords, **settings)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> Dict[str, Any]:
    root = tmp_path_factory.mktemp("demo")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _pack().persist(root / "plain")
        _pack(use_chunk_graph=True).persist(root / "graph")
    return {"plain": root / "plain", "graph": root / "graph"}


@contextlib.contextmanager
def memory_cap(extra: int = 2 << 30) -> Iterator[None]:
    """At most ``extra`` bytes of address space more than now: a setting that asks for more
    fails with MemoryError (counted as a failure) instead of exhausting the machine."""
    with open("/proc/self/status") as status:
        used = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = used + extra if hard == resource.RLIM_INFINITY else min(hard, used + extra)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


_SMALL = Document(
    text="# NX-2047 Regulator\n\n## Electrical\n\nThe dropout voltage of the NX-2047 is 180 mV at 1 A.\n\n"
    "## Table 1\n\n| Part | Volts |\n|---|---|\n| NX-2047 | 3.3 |\n",
    id_="NX-2047", metadata={"title": "NX-2047 Regulator"},
)
# What a loaded store cannot show: these shape ingestion, so they are tried on a new pack.
_INGESTION = {"use_llm_formatter", "use_cascade", "describe_figures", "detect_unruled_tables", "table_view", "use_chunk_graph",
              "max_segment_chars", "max_segment_tokens", "show_progress", "ingest_batch_size", "ingest_workers",
              "embed_backend", "store_format"}


def first_question(path: Tuple[str, ...], config: HiQAPackSettings, stores: Dict[str, Any], tmp: Any) -> list:
    """The first question under the accepted ``config`` (the setting at ``path`` changed)."""
    top = path[0]
    given = {top: getattr(config, top)}
    if top in _INGESTION:
        if top == "ingest_workers":
            given[top] = 1  # worker processes take seconds each to start: tests/test_ingestion_workers.py
        store = {"store": tmp / "new"} if top == "store_format" else {}
        keywords = {"keywords": {"use_ner": False}}
        return HiQAPack.from_documents([_SMALL], embed_model=HashEmbedding(), **keywords, **store, **given).retrieve(QUESTION)
    if top == "chunk_graph":
        pack = HiQAPack.load(stores["graph"], embed_model=HashEmbedding(), use_chunk_graph=True, **given)
        if path[1] == "graph":  # graph settings shape the build: build the demo's graph with them
            graph = ChunkInteractionGraph.from_nodes(pack.nodes, embed_model=HashEmbedding(), **config.chunk_graph.graph.model_dump())
            assert len(graph.node_ids) == len(pack.nodes)
        return pack.retrieve(QUESTION)
    return HiQAPack.load(stores["plain"], embed_model=HashEmbedding(), **given).retrieve(QUESTION)


@hsettings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(drawn=setting())
def test_any_value_of_any_setting_is_refused_where_given_or_works_at_the_first_question(drawn, stores, tmp_path_factory):
    path, value = drawn
    name = ".".join(path)
    try:
        config = HiQAPackSettings(**nested(path, value))
    except InvalidSettingError as exc:
        assert exc.setting.startswith(name) or exc.setting == path[0], (name, value, exc)
        return
    with warnings.catch_warnings(), memory_cap():
        warnings.simplefilter("ignore")
        nodes = first_question(path, config, stores, tmp_path_factory.mktemp("x"))
    assert isinstance(nodes, list) and nodes, (name, value)


@pytest.mark.parametrize(
    "settings, path, said",
    [
        ({"multi_route": {"beta": -5}}, "multi_route.beta", "must be >= 0.0 or 'auto' (got -5)"),
        ({"multi_route": {"bm25_language": "klingon"}}, "multi_route.bm25_language", "german"),
        ({"chunk_graph": {"semantic_top_k": 10**9}}, "chunk_graph.graph.semantic_top_k", "must be <= 100"),
        ({"multi_route": {"route_weights": {"vectr": 1.0}}}, "multi_route.route_weights['vectr']", "'vector', 'bm25' or 'keywords'"),
        ({"multi_route": {"alpha": float("nan")}}, "multi_route.alpha", "finite"),
        ({"keywords": {"ner_labels": ["ORGG"]}}, "keywords.ner_labels", "PRODUCT"),
        ({"document_focus": {"focus_dokuments": 1}}, "document_focus.focus_dokuments", "focus_documents"),
    ],
)
def test_the_settings_of_the_report_are_refused_where_written_with_their_path_and_range(settings, path, said):
    with pytest.raises(InvalidSettingError) as caught:
        HiQAPack.from_directory(DEMO_DATA_DIR, embed_model=HashEmbedding(), **settings)
    assert caught.value.setting == path and said in caught.value.reason


def test_on_the_real_path_a_bad_setting_is_refused_before_any_model_loads_and_the_bounds_work():
    """The default models (the packaged MiniLM and spaCy NER, no stand-in): ``from_directory``
    refuses ``beta=-5`` before reading a file, and a pack at the upper bounds answers."""
    with pytest.raises(InvalidSettingError, match=r"^multi_route\.beta: "):
        HiQAPack.from_directory(DEMO_DATA_DIR, multi_route={"beta": -5})
    with memory_cap(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pack = HiQAPack.from_documents(
            [_SMALL], similarity_top_k=1000, max_segment_chars=1_000_000, ingest_batch_size=10_000,
            multi_route={"beta": 100.0, "candidates_per_route": 100_000, "bm25_language": "german", "rrf_k": 1_000_000},
            keywords={"ner_max_nodes": 10**9, "min_length": 100},
        )
        nodes = pack.retrieve(QUESTION)
    assert nodes and nodes[0].node.metadata["route_scores"]["vector"] is not None


def test_settings_saved_in_a_store_are_checked_when_it_loads_naming_the_file_and_the_key(tmp_path):
    import json

    from llama_index_hiqa.storage.embedded import EmbeddedStore
    from llama_index_hiqa.storage.snapshots import current_snapshot

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folder = _pack(store_format="folder").persist(tmp_path / "folder")
        embedded = _pack().persist(tmp_path / "embedded")
    saved = current_snapshot(folder) / "hiqa_pack.json"
    payload = json.loads(saved.read_text())
    payload["config"]["multi_route"] = {"beta": -5}
    saved.write_text(json.dumps(payload))
    with pytest.raises(PackStoreError) as caught:
        HiQAPack.load(folder, embed_model=HashEmbedding())
    assert "hiqa_pack.json" in str(caught.value) and "multi_route.beta: must be >= 0.0" in str(caught.value)

    store = EmbeddedStore.open(embedded)
    record = json.loads(store.db.get_meta("pack"))
    record["config"]["multi_route"] = {"beta": -5}
    store.save_pack(record)
    store.close()
    with pytest.raises(PackStoreError) as caught:
        HiQAPack.load(embedded, embed_model=HashEmbedding())
    assert "multi_route.beta: must be >= 0.0" in str(caught.value)


def test_a_settings_model_used_alone_names_its_own_keys():
    from llama_index_hiqa import ChainSearchSettings, MultiRouteSettings

    with pytest.raises(InvalidSettingError, match=r"^max_hops: must be <= 1000 \(got 5000\)$"):
        ChainSearchSettings(max_hops=5000)
    with pytest.raises(InvalidSettingError, match=r"^mode: must be 'hiqa', 'rrf'"):
        MultiRouteSettings(mode="borda")
    assert isinstance(MultiRouteSettings(), BaseModel)
