"""HiQAPackSettings is one tree of typed settings: every part is a model, a bad key or value
fails at construction named by its path, the mappings of earlier releases (flat chunk-graph
settings, saved settings JSON) still load, and each knob has one default."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from llama_index.core.schema import Document, TextNode
from llama_index_hiqa.errors import InvalidSettingError

import llama_index_hiqa
from llama_index_hiqa import (
    ChainBudget,
    ChainSearchSettings,
    ChunkGraphSettings,
    DocumentFocusSettings,
    HiQAPackSettings,
    InteractionGraphSettings,
    MultiRouteSettings,
    MultiRouteRetriever,
    RouteFusionSettings,
    PackKeywordSettings,
    updated,
)
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from llama_index_hiqa.pack.config import inapplicable_settings, keyword_extractor
from llama_index_hiqa.retrievers.settings import DEFAULT_SIMILARITY_TOP_K
from llama_index_hiqa.testing import ScriptedLLM
from tests.pack_helpers import HashEmbedding

# Written by the previous release (HiQAPackSettings().model_dump(), then one with every nested
# dict set), as hiqa_pack.json / the PostgreSQL and embedded stores hold them.
OLD_DEFAULTS = {
    "similarity_top_k": 5, "use_llm_formatter": True, "use_cascade": True, "describe_figures": False,
    "detect_unruled_tables": False, "keywords": {}, "fusion_mode": "hiqa", "multi_route": {},
    "use_chunk_graph": False, "chunk_graph": {"max_nodes": 5}, "document_focus": {},
    "use_segment_integration": False, "segment_preset": None, "max_segment_chars": None,
    "max_segment_tokens": "auto", "show_progress": False, "ingest_batch_size": 8, "ingest_workers": 1,
    "embed_backend": "onnx", "store_format": "folder",
}
OLD_NESTED = {
    **OLD_DEFAULTS,
    "keywords": {"use_ner": False, "expert_keywords": ["NX-2040"]},
    "multi_route": {"alpha": 0.5, "similarity_top_k": 8},
    "use_chunk_graph": True,
    "chunk_graph": {"max_hops": 3, "keyword_threshold": 2, "head_share": 0.4},
    "document_focus": {"focus_documents": 1},
}


# --- every part is typed ---------------------------------------------------------------------
def test_every_part_is_a_model_and_no_setting_is_a_free_form_dict():
    config = HiQAPackSettings()
    assert isinstance(config.keywords, PackKeywordSettings)
    assert isinstance(config.multi_route, RouteFusionSettings)
    assert isinstance(config.document_focus, DocumentFocusSettings)
    assert isinstance(config.chunk_graph, ChunkGraphSettings)
    assert isinstance(config.chunk_graph.graph, InteractionGraphSettings)
    assert isinstance(config.chunk_graph.search, ChainSearchSettings)
    assert isinstance(config.chunk_graph.budget, ChainBudget)
    untyped = [name for name, field in HiQAPackSettings.model_fields.items() if "Dict" in str(field.annotation)]
    assert untyped == []


@pytest.mark.parametrize(
    "settings, path",
    [
        ({"multi_route": {"alpha": 7}}, "multi_route.alpha"),
        ({"multi_route": {"alpah": 0.5}}, "multi_route.alpah"),
        ({"document_focus": {"focus_documents": -1}}, "document_focus.focus_documents"),
        ({"document_focus": {"focus_document": 1}}, "document_focus.focus_document"),
        ({"keywords": {"min_length": 0}}, "keywords.min_length"),
        ({"keywords": {"use_nerr": False}}, "keywords.use_nerr"),
        ({"chunk_graph": {"max_hops": 0}}, "chunk_graph.search.max_hops"),
        ({"chunk_graph": {"max_hop": 3}}, "chunk_graph.max_hop"),
        ({"chunk_graph": {"head_share": 2}}, "chunk_graph.budget.head_share"),
        ({"chunk_graph": {"search": {"max_nodez": 3}}}, "chunk_graph.search.max_nodez"),
        ({"chunk_graph": {"graph": {"semantic_top_k": -1}}}, "chunk_graph.graph.semantic_top_k"),
    ],
)
def test_a_bad_nested_setting_fails_at_construction_named_by_its_path(settings, path):
    with pytest.raises(InvalidSettingError) as caught:
        HiQAPackSettings(**settings)
    assert caught.value.setting == path
    with pytest.raises(InvalidSettingError, match=path.replace(".", r"\.")):
        HiQAPack.empty(embed_model=HashEmbedding(), **settings)


# --- what users pass today -------------------------------------------------------------------
def test_nested_settings_are_accepted_as_mappings():
    config = HiQAPackSettings(
        multi_route={"alpha": 0.5}, keywords={"use_ner": False}, document_focus={"focus_documents": 1},
        chunk_graph={"max_hops": 3},
    )
    assert config.multi_route.alpha == 0.5 and config.multi_route.beta == RouteFusionSettings().beta
    assert config.keywords.use_ner is False
    assert config.document_focus.focus_documents == 1
    assert config.chunk_graph.search.max_hops == 3
    assert config.chunk_graph.search.max_nodes == DEFAULT_SIMILARITY_TOP_K


def test_flat_chunk_graph_keys_go_to_the_part_that_declares_them_and_mix_with_parts():
    flat = HiQAPackSettings(chunk_graph={"keyword_threshold": 2, "max_hops": 3, "head_share": 0.4}).chunk_graph
    assert (flat.graph.keyword_threshold, flat.search.max_hops, flat.budget.head_share) == (2, 3, 0.4)
    mixed = HiQAPackSettings(chunk_graph={"search": {"max_nodes": 7}, "max_hops": 3}).chunk_graph
    assert (mixed.search.max_nodes, mixed.search.max_hops) == (7, 3)


def test_the_pack_builds_its_components_from_the_typed_parts():
    from llama_index_hiqa.demo import load_demo_documents

    pack = HiQAPack.from_documents(
        load_demo_documents()[:2], embed_model=HashEmbedding(), keywords={"use_ner": False},
        multi_route={"alpha": 0.4, "candidates_per_route": 30}, similarity_top_k=4, fusion_mode="rrf",
        document_focus={"focus_documents": 1, "table_weight": 0.3},
    )
    assert (pack.multi_route.config.alpha, pack.multi_route.config.candidates_per_route) == (0.4, 30)
    assert (pack.multi_route.config.similarity_top_k, pack.multi_route.config.mode) == (4, "rrf")
    focus = pack.as_retriever()
    assert focus.config == DocumentFocusSettings(focus_documents=1, table_weight=0.3)
    assert len(focus.retrieve("What is the maximum output current of the NX-2040?")) == 4


# --- saved settings of earlier releases --------------------------------------------------------
def test_the_previous_release_default_settings_load_as_the_defaults():
    assert HiQAPackSettings(**OLD_DEFAULTS) == HiQAPackSettings(embed_backend="onnx", store_format="folder")


def test_the_previous_release_nested_settings_load_with_their_meaning():
    with pytest.warns(UserWarning, match=r"multi_route\.similarity_top_k=8 overrides similarity_top_k=5"):
        config = HiQAPackSettings(**OLD_NESTED)
    assert config.similarity_top_k == 8  # the previous release's precedence: multi_route's won
    assert config.route_config().similarity_top_k == 8 and config.multi_route.alpha == 0.5
    assert config.keywords.expert_keywords == ["NX-2040"] and config.keywords.use_ner is False
    assert config.chunk_graph.graph.keyword_threshold == 2
    assert config.chunk_graph.search == ChainSearchSettings(max_hops=3)
    assert config.chunk_graph.budget.head_share == 0.4
    assert config.document_focus.focus_documents == 1
    # and what it saves now reads back to the same tree, without the warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert HiQAPackSettings(**json.loads(config.model_dump_json())) == config


def test_a_store_saved_with_the_previous_release_settings_loads(tmp_path):
    store = tmp_path / "store"
    docs = [Document(text="# NX-2040\n\n## Output\n\nThe output current is 150 mA.", id_="a")]
    # the previous release wrote folder stores
    HiQAPack.from_documents(docs, embed_model=HashEmbedding(), keywords={"use_ner": False}, store_format="folder").persist(store)
    config_file = next(store.rglob("hiqa_pack.json"))
    payload = json.loads(config_file.read_text())
    payload["config"] = {**OLD_DEFAULTS, "keywords": {"use_ner": False}, "multi_route": {"alpha": 0.5}}
    config_file.write_text(json.dumps(payload))
    loaded = HiQAPack.load(store, embed_model=HashEmbedding())
    assert loaded.config.multi_route.alpha == 0.5 and loaded.multi_route.config.alpha == 0.5
    assert loaded.config.chunk_graph == ChunkGraphSettings()
    assert loaded.retrieve("output current")[0].node.ref_doc_id == "a"


# --- one default, one precedence ----------------------------------------------------------------
def test_similarity_top_k_has_one_default():
    assert HiQAPackSettings().similarity_top_k == DEFAULT_SIMILARITY_TOP_K
    assert MultiRouteSettings().similarity_top_k == DEFAULT_SIMILARITY_TOP_K
    assert ChainSearchSettings().max_nodes == DEFAULT_SIMILARITY_TOP_K
    assert "similarity_top_k" not in RouteFusionSettings.model_fields  # the pack's lives at its top
    assert HiQAPackSettings(similarity_top_k=3).route_config().similarity_top_k == 3


def test_a_conflicting_top_k_in_multi_route_is_not_silent():
    with pytest.warns(UserWarning, match=r"multi_route\.similarity_top_k=8 overrides similarity_top_k=3"):
        config = HiQAPackSettings(similarity_top_k=3, multi_route={"similarity_top_k": 8})
    assert config.similarity_top_k == 8
    with pytest.warns(UserWarning, match=r"multi_route\.mode='rrf' overrides fusion_mode='hiqa'"):
        assert HiQAPackSettings(fusion_mode="hiqa", multi_route={"mode": "rrf"}).fusion_mode == "rrf"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same value twice, or the old spelling alone, is no conflict
        assert HiQAPackSettings(multi_route={"similarity_top_k": 8}).similarity_top_k == 8


def test_the_keyword_extractor_follows_the_chunk_graph_unless_ner_max_nodes_is_set():
    assert keyword_extractor(HiQAPackSettings()).ner_max_nodes == 0
    assert keyword_extractor(HiQAPackSettings(use_chunk_graph=True)).ner_max_nodes is None
    assert keyword_extractor(HiQAPackSettings(keywords={"ner_max_nodes": 100})).ner_max_nodes == 100


# --- settings that cannot apply ----------------------------------------------------------------
def test_max_segment_tokens_with_the_llm_formatter_is_explained_when_the_pack_is_built():
    config = HiQAPackSettings(max_segment_tokens=128)
    assert inapplicable_settings(config, None) == []
    assert inapplicable_settings(HiQAPackSettings(), ScriptedLLM()) == []  # the default "auto" says nothing
    (message,) = inapplicable_settings(config, ScriptedLLM())
    assert message.startswith("max_segment_tokens=128 has no effect")
    assert inapplicable_settings(HiQAPackSettings(max_segment_tokens=128, use_llm_formatter=False), ScriptedLLM()) == []
    with pytest.warns(UserWarning, match="max_segment_tokens=128 has no effect"):
        HiQAPack.empty(llm=ScriptedLLM(), embed_model=HashEmbedding(), max_segment_tokens=128)


@pytest.mark.parametrize(
    "settings, named",
    [
        ({"use_chunk_graph": True, "document_focus": {"focus_documents": 1}}, "document_focus"),
        ({"chunk_graph": {"max_hops": 2}}, "chunk_graph"),
        ({"segment_preset": "precision"}, "segment_preset"),
    ],
)
def test_other_settings_without_effect_are_named(settings, named):
    (message,) = inapplicable_settings(HiQAPackSettings(**settings), None)
    assert message.startswith(f"{named} has no effect")


# --- the one way to change settings --------------------------------------------------------------
def test_updated_validates_and_leaves_the_original_alone():
    base = MultiRouteSettings(alpha=0.6)
    changed = updated(base, similarity_top_k=3)
    assert (changed.alpha, changed.similarity_top_k, base.similarity_top_k) == (0.6, 3, DEFAULT_SIMILARITY_TOP_K)
    with pytest.raises(InvalidSettingError, match="alpah"):
        updated(base, alpah=0.5)
    assert updated(None, {"alpha": 0.2}, model_class=MultiRouteSettings).alpha == 0.2
    nodes = [TextNode(text="NX-2040 output current 150 mA", id_="n")]
    retriever = MultiRouteRetriever(nodes=nodes, use_bm25=False, use_keywords=False, config=base, similarity_top_k=2)
    assert (retriever.config.alpha, retriever.config.similarity_top_k) == (0.6, 2)


# M(**{**(config or M()).model_dump(), **settings}): a model rebuilt from another's dump.
MERGE_IDIOM = re.compile(r"\w\(\*\*\{\*\*[^{}]*\.model_dump\(\), \*\*")


def test_settings_given_for_a_stored_pack_override_only_the_fields_set():
    stored = HiQAPackSettings(similarity_top_k=9, fusion_mode="rrf", multi_route={"alpha": 0.3}).model_dump()
    given = HiQAPackSettings(similarity_top_k=3)  # the other fields are defaults, not given
    applied = given.applied_to(stored)
    assert (applied.similarity_top_k, applied.fusion_mode, applied.multi_route.alpha) == (3, "rrf", 0.3)
    assert HiQAPackSettings().applied_to(stored) == HiQAPackSettings(**stored)
    # a part given replaces the stored part whole; the store decides what it fixes
    replaced = HiQAPackSettings(multi_route={"beta": 0.2}, store_format="folder").applied_to(stored, store_format="embedded")
    assert (replaced.multi_route.alpha, replaced.multi_route.beta, replaced.store_format) == (
        RouteFusionSettings().alpha, 0.2, "embedded")
    # a whole settings object given (HiQAPack.empty(config=...)) sets every field
    whole = updated(HiQAPackSettings(), {}).applied_to(stored)
    assert whole == HiQAPackSettings()


def test_the_merge_idiom_is_gone_from_the_package():
    assert MERGE_IDIOM.search("self.config = MultiRouteSettings(**{**(config or MultiRouteSettings()).model_dump(), **settings})")
    assert MERGE_IDIOM.search("clone.config = MultiRouteSettings(**{**self.config.model_dump(), **settings})")
    root = Path(llama_index_hiqa.__file__).parent
    idiom = [str(p.relative_to(root)) for p in root.rglob("*.py") if MERGE_IDIOM.search(p.read_text(encoding="utf-8"))]
    assert idiom == []


def test_the_pack_configuration_stays_light_to_import():
    code = (
        "import sys, llama_index_hiqa.pack.config as c; c.HiQAPackSettings(use_chunk_graph=True);"
        "print(sorted(m for m in ('torch', 'spacy', 'networkx', 'bm25s', 'fitz') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_bm25_languages_are_those_bm25s_accepts():
    """The import-free list of stop-word languages is bm25s's own: every name its
    ``_infer_stopwords`` compares against (read from its source, so a language bm25s adds or
    drops fails here), and each one tokenizes."""
    import ast
    import inspect

    import bm25s
    from bm25s import tokenization

    from llama_index_hiqa.retrievers.settings import BM25_STOPWORD_LANGUAGES

    tree = ast.parse(inspect.getsource(tokenization._infer_stopwords))
    theirs = {
        element.value
        for compare in ast.walk(tree) if isinstance(compare, ast.Compare) and isinstance(compare.ops[0], ast.In)
        for listed in compare.comparators if isinstance(listed, (ast.List, ast.Tuple))
        for element in listed.elts if isinstance(element, ast.Constant) and isinstance(element.value, str)
    }
    assert len(theirs) > 20 and sorted(BM25_STOPWORD_LANGUAGES) == sorted(theirs)
    for name in BM25_STOPWORD_LANGUAGES:
        bm25s.tokenize(["probe"], stopwords=name, show_progress=False)


@pytest.mark.parametrize("language", ["en", "german", "ko"])
def test_a_bm25_language_is_checked_without_importing_bm25s(language):
    code = (
        "import sys; from llama_index_hiqa.retrievers.settings import MultiRouteSettings;"
        f"MultiRouteSettings(bm25_language={language!r}); print('bm25s' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    with pytest.raises(InvalidSettingError, match="german"):
        MultiRouteSettings(bm25_language="klingon")
