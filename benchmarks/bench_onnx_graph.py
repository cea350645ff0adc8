"""The torch-free ONNX graph against the torch.onnx.export graph it replaced: same vectors?

The default embedding used to be exported with ``torch.onnx.export`` on first use; the wheel now
ships a graph written without PyTorch (llama_index_hiqa/models/minilm_onnx.py). Caches and stores hold
vectors of the old graph under the same model identity, so this measures, on FinanceBench
passages (the pieces ``bench_embedding.py`` embeds), the largest absolute difference between
the two graphs' vectors, each graph's cosine to PyTorch's (sentence-transformers) on a subset,
the int8 builds of both, and the demo questions' rankings (``hiqa demo``'s retriever, the pack)
with each graph. The old export is re-made here with PyTorch (the code the package had).

    python benchmarks/bench_onnx_graph.py --passages 2048
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import markdown_table, write_section  # noqa: E402
from benchmarks.bench_embedding import financebench_passages  # noqa: E402
from llama_index_hiqa.models import defaults  # noqa: E402
from llama_index_hiqa.models import embedding_backends as eb  # noqa: E402
from llama_index_hiqa.models.minilm_onnx import ONNX_OPSET, build_from_folder  # noqa: E402


def export_with_torch(model_path: Path, out_file: Path) -> None:
    """The float32 export the package made before (torch.onnx.export of the mean-pooled,
    normalised encoder)."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_path), attn_implementation="eager").eval()

    class MeanPooled(torch.nn.Module):
        def __init__(self, encoder: Any) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]])
    names = ["input_ids", "attention_mask", "token_type_ids"]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            MeanPooled(model), (ids, (ids != 0).long(), torch.zeros_like(ids)), str(out_file),
            input_names=names, output_names=["sentence_embedding"],
            dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names}, "sentence_embedding": {0: "batch"}},
            opset_version=ONNX_OPSET, dynamo=False,
        )


def embed(onnx_file: Path, tokenizer_dir: Path, texts: List[str], name: str) -> np.ndarray:
    model = eb.ONNXEmbedding(model_name=name, onnx_path=str(onnx_file), tokenizer_dir=str(tokenizer_dir),
                             embed_batch_size=32)
    return np.asarray(model.get_text_embedding_batch(texts), dtype=np.float32)


def demo_rankings(embed_model) -> List[List[str]]:
    """The nodes the demo's retriever (the pack) returns for each demo question, in order."""
    from llama_index_hiqa import demo
    from llama_index_hiqa.evaluation.datasets import load_questions_jsonl

    retriever = demo.build_retriever(demo.build_nodes(demo.load_demo_documents()), embed_model, top_k=5)
    questions = load_questions_jsonl(demo.DEMO_DATA_DIR / "questions.jsonl")
    # by content: node ids are new uuids in every build
    return [[n.node.get_content() for n in retriever.retrieve(q.question)] for q in questions]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=2048)
    parser.add_argument("--torch-passages", type=int, default=256, help="passages also embedded with PyTorch")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    weights = defaults.packaged_model_path()
    texts = financebench_passages(args.passages)
    with tempfile.TemporaryDirectory(prefix="hiqa-graphs-") as name:
        tmp = Path(name)
        old, new = tmp / "torch_export.onnx", tmp / "torch_free.onnx"
        export_with_torch(weights, old)
        build_from_folder(weights, new)
        start = time.perf_counter()
        v_old = embed(old, weights, texts, "old")
        v_new = embed(new, weights, texts, "new")
        seconds = time.perf_counter() - start
        config = eb.select_int8_config(eb.cpu_flags())
        q_old, q_new = tmp / "old_int8.onnx", tmp / "new_int8.onnx"
        eb._quantize(old, eb.INT8_CONFIGS[config], q_old)
        eb._quantize(new, eb.INT8_CONFIGS[config], q_new)
        int8 = texts[: args.torch_passages]
        i_old, i_new = embed(q_old, weights, int8, "old8"), embed(q_new, weights, int8, "new8")
        ranks = {}
        for label, path in (("torch.onnx.export", old), ("torch-free", new)):
            model = eb.ONNXEmbedding(model_name=defaults.PACKAGED_MODEL_NAME, onnx_path=str(path),
                                     tokenizer_dir=str(weights))
            ranks[label] = demo_rankings(model)
    ref = np.asarray(defaults.build_packaged_embed_model("torch").get_text_embedding_batch(texts[: args.torch_passages]))
    n_ref = len(ref)
    rows = [
        ["float32, torch-free vs torch.onnx.export", len(texts), f"{np.abs(v_new - v_old).max():.2e}",
         f"{(v_new * v_old).sum(1).min():.7f}", int((v_new == v_old).all(1).sum())],
        ["float32 torch-free vs PyTorch", n_ref, f"{np.abs(v_new[:n_ref] - ref).max():.2e}",
         f"{(v_new[:n_ref] * ref).sum(1).min():.7f}", int((v_new[:n_ref] == ref).all(1).sum())],
        ["float32 torch.onnx.export vs PyTorch", n_ref, f"{np.abs(v_old[:n_ref] - ref).max():.2e}",
         f"{(v_old[:n_ref] * ref).sum(1).min():.7f}", int((v_old[:n_ref] == ref).all(1).sum())],
        [f"int8 ({config}), torch-free vs torch.onnx.export", len(int8), f"{np.abs(i_new - i_old).max():.2e}",
         f"{(i_new * i_old).sum(1).min():.7f}", int((i_new == i_old).all(1).sum())],
    ]
    same = sum(a == b for a, b in zip(ranks["torch.onnx.export"], ranks["torch-free"]))
    print(rows, same, len(ranks["torch-free"]), flush=True)
    body = (
        f"FinanceBench passages (`bench_embedding.financebench_passages`: page text in pieces of up to 1,000 "
        f"characters, spread over all filings), embedded by both float32 graphs ({seconds:.0f} s for both); the "
        f"first {n_ref} also by PyTorch and by both int8 builds.\n\n"
        + markdown_table(["compared", "passages", "max abs difference", "min cosine", "identical vectors"], rows)
        + f"\n\nDemo questions (`hiqa demo`'s retriever, the pack, top 5): the ranked nodes are identical for "
        f"{same} of {len(ranks['torch-free'])} questions with the two float32 graphs."
    )
    if not args.no_write:
        write_section("onnx-graph", "Torch-free ONNX graph: the same vectors", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
