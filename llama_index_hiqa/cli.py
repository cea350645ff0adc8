"""The ``hiqa`` command line.

``hiqa demo`` runs the pack on the bundled demo datasheets. Later commands (``ingest``,
``ask``, ``eval``) are added as their components land.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def _cmd_demo(args: argparse.Namespace) -> int:
    from llama_index_hiqa.demo import run_demo

    return run_demo(top_k=args.top_k)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hiqa", description="Question answering over many similar documents (LlamaIndex)."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="index the demo datasheets offline and answer the demo questions")
    demo.add_argument("--top-k", type=int, default=3, help="evidence shown per question")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
