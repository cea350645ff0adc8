"""Helpers shared by the pack, CLI and notebook tests: a cheap deterministic embedding.

The real MiniLM costs ~10 s to load and embed the demo corpus; the hashing embedding below
is a bag of words (signed feature hashing over lower-cased tokens), so the vector route still
ranks by word overlap and two processes compute identical vectors.
"""

from __future__ import annotations

import hashlib
import re
from typing import List

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding

DIM = 256
_TOKEN = re.compile(r"[a-z0-9][a-z0-9\-\.]*")


def _vector(text: str) -> List[float]:
    vec = np.zeros(DIM, dtype=np.float32)
    for token in _TOKEN.findall(text.lower()):
        digest = hashlib.md5(token.encode("utf-8")).digest()
        vec[int.from_bytes(digest[:4], "little") % DIM] += 1.0 if digest[4] % 2 else -1.0
    norm = float(np.linalg.norm(vec))
    return (vec / norm if norm else vec).tolist()


class HashEmbedding(BaseEmbedding):
    model_name: str = "hash-bow-256"

    @classmethod
    def class_name(cls) -> str:
        return "HashEmbedding"

    def _get_query_embedding(self, query: str) -> List[float]:
        return _vector(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return _vector(query)

    def _get_text_embedding(self, text: str) -> List[float]:
        return _vector(text)
