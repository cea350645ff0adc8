"""The ``hiqa`` command line.

``hiqa demo`` runs the pack on the bundled demo datasheets. ``hiqa eval`` runs the HiQA
ablation (every variant the installed pack can build, every ranking metric) on a folder of
documents and a questions JSONL. ``hiqa ingest DIR --store PATH`` builds a
:class:`~llama_index_hiqa.HiQAPack` over a folder and persists it; ``hiqa ask "question"
--store PATH`` loads it in a new process and answers with citations (``--json`` for scripts).
``--llm openai:gpt-4o-mini`` selects an LLM, its key read from the environment
(``OPENAI_API_KEY``); without ``--llm`` (or ``Settings.llm``) answers are the cited evidence.
Errors a user can fix (missing store, empty folder, missing key) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, List, Optional


def _cmd_demo(args: argparse.Namespace) -> int:
    from llama_index_hiqa.demo import run_demo

    return run_demo(top_k=args.top_k)


def _cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from llama_index_hiqa.errors import HiQAError
    from llama_index_hiqa.evaluation.runner import AblationRunner, folder_corpus
    from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

    keywords = None
    if args.no_ner or args.expert_keywords:
        keywords = CriticalKeywordExtractor(use_ner=not args.no_ner, expert_keywords=args.expert_keywords or [])
    try:
        corpus = folder_corpus(Path(args.docs), Path(args.questions), name=args.name)
        runner = AblationRunner(
            keyword_extractor=keywords,
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


LLM_PROVIDERS = {"openai": "OPENAI_API_KEY"}


class CLIError(Exception):
    """A problem the user can fix: printed as one line, exit code 2."""


def llm_from_spec(spec: Optional[str]) -> Any:
    """``"openai:gpt-4o-mini"`` -> an OpenAI LLM (key from ``OPENAI_API_KEY``); ``None``/"none" -> None."""
    if not spec or spec.lower() == "none":
        return None
    provider, _, model = spec.partition(":")
    provider = provider.lower()
    if provider not in LLM_PROVIDERS or not model:
        raise CLIError(f"--llm {spec!r}: expected PROVIDER:MODEL with PROVIDER one of {sorted(LLM_PROVIDERS)}, "
                       f"e.g. openai:gpt-4o-mini")
    key_name = LLM_PROVIDERS[provider]
    key = os.environ.get(key_name)
    if not key:
        raise CLIError(f"--llm {spec}: the environment variable {key_name} is not set "
                       f"(export {key_name}=... or drop --llm for evidence-only answers)")
    try:
        from llama_index.llms.openai import OpenAI
    except ImportError as exc:  # pragma: no cover - a dependency of the pack
        raise CLIError(f"--llm {spec}: pip install llama-index-llms-openai ({exc})") from exc
    return OpenAI(model=model, api_key=key)


def _cmd_ingest(args: argparse.Namespace) -> int:
    from llama_index_hiqa.pack import HiQAPack

    llm = llm_from_spec(args.llm)
    folder = Path(args.dir)
    if not folder.is_dir():
        raise CLIError(f"{folder}: no such folder")
    pack = HiQAPack.from_directory(
        folder, recursive=args.recursive, llm=llm, show_progress=not args.quiet,
        use_chunk_graph=args.graph, use_segment_integration=args.segments,
        **({"embed_backend": args.embed_backend} if args.embed_backend else {}),
    )
    for failure in getattr(pack, "read_failures", []):
        print(f"skipped {failure}", file=sys.stderr)
    pack.persist(args.store)
    print(f"indexed {len(pack.document_ids)} document(s) as {len(pack.nodes)} nodes -> {args.store}")
    return 0


def _cmd_ask(args: argparse.Namespace) -> int:
    from llama_index_hiqa.pack import HiQAPack, citation, format_citation

    llm = llm_from_spec(args.llm)
    store = Path(args.store)
    if not store.exists():
        raise CLIError(f"{store}: no such store; build one with `hiqa ingest DIR --store {store}`")
    settings = {"similarity_top_k": args.top_k} if args.top_k else {}
    pack = HiQAPack.load(store, llm=llm, **settings)
    response = pack.run(args.question)
    sources = response.source_nodes or []
    if args.json:
        payload = {
            "question": args.question,
            "answer": str(response),
            "llm": None if pack.llm is None else args.llm,
            "sources": [
                {**citation(n.node), "score": n.score, "node_id": n.node.node_id, "text": n.node.get_content()}
                for n in sources
            ],
        }
        print(json.dumps(payload, indent=2, ensure_ascii=False))
        return 0
    print(str(response))
    if pack.llm is not None and sources:
        print("\nSources:")
        for i, n in enumerate(sources, 1):
            print(f"[{i}] {format_citation(n.node)}")
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
    ev.add_argument(
        "--no-ner", action="store_true",
        help="critical keywords by rules (and --expert-keywords) only, no spaCy NER: for tens of thousands of chunks",
    )
    ev.add_argument("--expert-keywords", nargs="+", help="keywords that tell your documents apart (company, product)")
    ev.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    ev.add_argument("--quiet", action="store_true", help="no progress bars")
    ev.set_defaults(func=_cmd_eval)

    ing = sub.add_parser("ingest", help="read, parse, augment and index a folder; save the store")
    ing.add_argument("dir", help="folder of .pdf/.md/.txt documents")
    ing.add_argument("--store", required=True, help="folder the index is saved to")
    ing.add_argument("--llm", help="PROVIDER:MODEL, e.g. openai:gpt-4o-mini (LLM Markdown formatter)")
    ing.add_argument("--recursive", action="store_true", help="include subfolders")
    ing.add_argument("--graph", action="store_true", help="also build the IIER chunk graph (multi-hop)")
    ing.add_argument("--segments", action="store_true", help="answer with merged segments (TextRAG RSE)")
    ing.add_argument("--quiet", action="store_true", help="no progress bars")
    from llama_index_hiqa.embedding_backends import EMBED_BACKENDS

    ing.add_argument("--embed-backend", choices=EMBED_BACKENDS,
                     help="how the packaged embedding model runs (default: the pack's measured default)")
    ing.set_defaults(func=_cmd_ingest)

    ask = sub.add_parser("ask", help="answer a question from a saved store, with citations")
    ask.add_argument("question")
    ask.add_argument("--store", required=True, help="folder written by `hiqa ingest`")
    ask.add_argument("--llm", help="PROVIDER:MODEL, e.g. openai:gpt-4o-mini; default: cited evidence only")
    ask.add_argument("--top-k", type=int, help="evidence nodes (default: the store's setting, 5)")
    ask.add_argument("--json", action="store_true", help="print the answer and sources as JSON")
    ask.set_defaults(func=_cmd_ask)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    from llama_index_hiqa.errors import EmptyCorpusError, PackStoreError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (CLIError, EmptyCorpusError, PackStoreError) as exc:
        print(f"hiqa {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
