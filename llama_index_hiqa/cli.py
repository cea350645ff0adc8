"""The ``hiqa`` command line.

``hiqa demo`` runs the pack on the bundled demo datasheets. ``hiqa eval`` runs the HiQA
ablation (every variant the installed pack can build, every ranking metric) on a folder of
documents and a questions JSONL. Later commands (``ingest``, ``ask``) are added as their
components land.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def _cmd_demo(args: argparse.Namespace) -> int:
    from llama_index_hiqa.demo import run_demo

    return run_demo(top_k=args.top_k)


def _cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from llama_index_hiqa.errors import HiQAError
    from llama_index_hiqa.evaluation.runner import AblationRunner, folder_corpus

    try:
        corpus = folder_corpus(Path(args.docs), Path(args.questions), name=args.name)
        runner = AblationRunner(
            gamma=args.gamma,
            ks=tuple(args.k),
            max_new_embeddings=args.max_new_embeddings,
            show_progress=not args.quiet,
        )
        result = runner.run(corpus, variants=args.variants)
    except (HiQAError, FileNotFoundError, ValueError) as exc:
        print(f"hiqa eval: {exc}", file=sys.stderr)
        return 2
    print(result.to_markdown())
    for path in result.save(Path(args.out), plots=not args.no_plots):
        print(f"wrote {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hiqa", description="Question answering over many similar documents (LlamaIndex)."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="index the demo datasheets offline and answer the demo questions")
    demo.add_argument("--top-k", type=int, default=3, help="evidence shown per question")
    demo.set_defaults(func=_cmd_demo)

    from llama_index_hiqa.evaluation.runner import VARIANTS

    ev = sub.add_parser(
        "eval",
        help="run the HiQA ablation (Log-Rank Index, Recall/Precision/MRR/nDCG/hit@k) on your documents",
        description="Variants: " + "; ".join(f"{v.name} = {v.label}" for v in VARIANTS),
    )
    ev.add_argument("--docs", required=True, help="folder of .pdf/.md/.txt documents")
    ev.add_argument("--questions", required=True, help="questions JSONL with gold evidence")
    ev.add_argument("--variants", nargs="+", choices=[v.name for v in VARIANTS], help="default: all")
    ev.add_argument("--out", default="hiqa_eval", help="folder for the JSON, Markdown and PNG results")
    ev.add_argument("--name", help="dataset name in the results (default: the folder name)")
    ev.add_argument("--gamma", type=float, default=1.0, help="γ of the Log-Rank Index")
    ev.add_argument("--k", type=int, nargs="+", default=[1, 5, 10, 20], help="cut-offs for @k metrics")
    ev.add_argument("--max-new-embeddings", type=int, help="skip variants needing more uncached vectors")
    ev.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    ev.add_argument("--quiet", action="store_true", help="no progress bars")
    ev.set_defaults(func=_cmd_eval)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
