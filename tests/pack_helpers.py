"""Helpers shared by the pack, CLI and notebook tests: a cheap deterministic embedding.

The real MiniLM costs ~10 s to load and embed the demo corpus; the pack tests use the
package's hashing embedding (:class:`llama_index_hiqa.testing.HashingEmbedding`, a signed bag
of words in 256 dimensions), so the vector route still ranks by word overlap and two
processes compute identical vectors.
"""

from __future__ import annotations

from llama_index_hiqa.testing import HashingEmbedding


class HashEmbedding(HashingEmbedding):
    """The pack tests' embedding under the name their stores record ("HashEmbedding:hash-bow-256")."""

    model_name: str = "hash-bow-256"

    @classmethod
    def class_name(cls) -> str:
        return "HashEmbedding"
