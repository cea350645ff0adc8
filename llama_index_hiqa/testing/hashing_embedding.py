"""``HashingEmbedding``: a deterministic, model-free embedding for tests and notebooks."""

from __future__ import annotations

import hashlib
import math
import re
from typing import List

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field


class HashingEmbedding(BaseEmbedding):
    """A deterministic offline embedding for tests and notebooks: a bag of words hashed into
    ``dim`` dimensions (feature hashing, md5 of each lower-cased token), so texts sharing
    words are similar, nothing is downloaded, and two processes compute identical vectors.

    ``signed`` adds each token with a hash-chosen sign (collisions cancel instead of piling
    up); ``token_pattern`` decides what a word is (``[a-z]+``: blind to part numbers, for a
    vector route that must be confused by look-alike products). A text without a token gets
    the uniform unit vector (never a zero vector, whose cosine is undefined). ``calls`` counts
    the texts embedded (not the queries).

    >>> from llama_index_hiqa.testing import HashingEmbedding
    >>> model = HashingEmbedding(dim=8)
    >>> model.get_text_embedding("supply voltage") == model.get_query_embedding("Supply voltage")
    True
    """

    model_name: str = "hashing-bow"
    dim: int = Field(default=256, gt=0, description="Vector size.")
    token_pattern: str = Field(default=r"[a-z0-9][a-z0-9\-\.]*", description="Regex of a token (lower case).")
    signed: bool = Field(default=True, description="Add each token with a hash-chosen sign.")
    calls: int = Field(default=0, description="Texts embedded so far.")

    @classmethod
    def class_name(cls) -> str:
        return "HashingEmbedding"

    def vector(self, text: str) -> List[float]:
        vec = np.zeros(self.dim, dtype=np.float32)
        for token in re.findall(self.token_pattern, text.lower()):
            digest = hashlib.md5(token.encode("utf-8")).digest()
            sign = (1.0 if digest[4] % 2 else -1.0) if self.signed else 1.0
            vec[int.from_bytes(digest[:4], "little") % self.dim] += sign
        norm = float(np.linalg.norm(vec))
        if not norm:
            return [1.0 / math.sqrt(self.dim)] * self.dim
        return (vec / norm).tolist()

    def _get_query_embedding(self, query: str) -> List[float]:
        return self.vector(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self.vector(query)

    def _get_text_embedding(self, text: str) -> List[float]:
        self.calls += 1
        return self.vector(text)
