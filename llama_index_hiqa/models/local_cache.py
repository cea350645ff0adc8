"""Where the pack's on-disk caches live and how their keys are made.

A leaf module (it imports nothing of the package), so the model loaders, the embedding cache
and the LLM-output caches can all name the same folder and the same key function without
importing one another.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

CACHE_DIR_ENV = "HIQA_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$HIQA_CACHE_DIR``, else ``~/.cache/llama_index_hiqa``."""
    root = os.environ.get(CACHE_DIR_ENV)
    return Path(root) if root else Path.home() / ".cache" / "llama_index_hiqa"


def content_hash(*parts: str) -> str:
    """sha256 over ``parts``, each terminated by a NUL byte.

    So ``("ab", "c")`` and ``("a", "bc")`` differ; lone surrogates are hashed as they are,
    never refused.

    Args:
        *parts: the strings to hash, in order.

    Returns:
        The hex digest (64 characters).
    """
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()
