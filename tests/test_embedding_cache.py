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
