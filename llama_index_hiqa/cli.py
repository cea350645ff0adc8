"""The ``hiqa`` command line.

``hiqa demo`` runs the pack on the bundled demo datasheets. ``hiqa eval`` runs the HiQA
ablation (every variant the installed pack can build, every ranking metric) on a folder of
documents and a questions JSONL. ``hiqa ingest DIR --store PATH`` builds a
[`HiQAPack`][llama_index_hiqa.pack.hiqa_pack.HiQAPack] over a folder and persists it; ``hiqa ask "question"
--store PATH`` loads it in a new process and answers with citations (``--json`` for scripts).
On an existing store ``hiqa ingest`` needs ``--add`` (new and changed files replace
their old versions, unchanged ones are skipped), ``--sync`` (as ``--add``, and the documents
whose files left the folder are removed and listed) or ``--rebuild``; it never overwrites
silently. ``hiqa delete DOC --store PATH`` removes documents. A new store is the embedded store (SQLite
and memory-mapped vectors) unless ``--store-format folder`` (or ``--graph``) asks for the folder
store; ``hiqa migrate OLD NEW`` copies a store into the other format. Writers of one store are
serialised: each holds the store's lock from loading it to saving it.
``hiqa serve --store PATH`` keeps the store loaded behind a local web app and JSON API
([`serve.app`][llama_index_hiqa.serve.app]; the ``serve`` extra).
``--store postgresql://USER@HOST/DB`` keeps the pack in PostgreSQL instead (each batch commits as
it is indexed; ``hiqa ask`` in any process on any machine answers from it).
``--llm openai:gpt-4o-mini`` selects an OpenAI model, ``--llm openai-compatible:MODEL
--llm-base-url http://host:8000/v1`` any OpenAI-compatible server (vLLM, Ollama, LM Studio,
llama.cpp server), the key read from the environment (``OPENAI_API_KEY``); without ``--llm``
(or ``Settings.llm``) answers are the cited evidence. ``hiqa ask --stream`` prints the answer
as it is generated, then its sources and the figures on the cited pages. Errors a user can fix
(missing store, empty folder, missing key, a server that refuses or lacks the model, a
read-only or full disk, a bad setting) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Dict, Iterator, List, Optional, Sequence

if TYPE_CHECKING:
    from llama_index_hiqa.pack.config import HiQAPackSettings

# The package's modules are imported inside the commands that use them: they import LlamaIndex
# (`hiqa --help` takes 0.6 s, importing the pack several seconds, measured), and `hiqa ingest`
# says what it does before the first slow import.


def _cmd_demo(args: argparse.Namespace) -> int:
    from llama_index_hiqa.demo import run_demo

    return run_demo(top_k=args.top_k)


def _cmd_eval(args: argparse.Namespace) -> int:
    from llama_index_hiqa.errors import HiQAError
    from llama_index_hiqa.evaluation.corpus import folder_corpus
    from llama_index_hiqa.evaluation.runner import AblationRunner
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
    plots = not args.no_plots
    if plots:
        try:
            import matplotlib  # noqa: F401 - a dev extra, not a dependency of the pack
        except ImportError:
            print("hiqa eval: no plots (matplotlib is not installed: pip install matplotlib); "
                  "the JSON and Markdown results are written", file=sys.stderr)
            plots = False
    for path in result.save(Path(args.out), plots=plots):
        print(f"wrote {path}")
    return 0


class CLIError(Exception):
    """A problem the user can fix: printed as one line, exit code 2."""


def llm_from_spec(spec: Optional[str], **settings: Any) -> Any:
    """``openai:MODEL`` / ``openai-compatible:MODEL`` -> a LlamaIndex LLM; ``None``/"none" -> None
    (see [`llama_index_hiqa.models.llm_spec.llm_from_spec`][llama_index_hiqa.models.llm_spec.llm_from_spec] for ``base_url``, ``context_window``).

    Args:
        spec: the ``--llm`` value.
        **settings: passed on to [`llama_index_hiqa.models.llm_spec.llm_from_spec`][llama_index_hiqa.models.llm_spec.llm_from_spec].

    Returns:
        The LLM, or ``None``.
    """
    from llama_index_hiqa.models.llm_spec import llm_from_spec as build

    return build(spec, **settings)


def _llm(args: argparse.Namespace) -> Any:
    """The LLM the command line names, checked against its server once before any work."""
    from llama_index_hiqa.models.llm_spec import check_llm

    settings = {k: v for k, v in (("base_url", args.llm_base_url), ("context_window", args.llm_context_window),
                                  ("timeout_seconds", args.llm_timeout)) if v is not None}
    llm = llm_from_spec(args.llm, **settings)
    if llm is not None:
        check_llm(llm, args.llm)
    return llm


def _say(message: str) -> None:
    print(f"hiqa: {message}", file=sys.stderr, flush=True)


def _store_writer(store: Any, settings: Optional["HiQAPackSettings"] = None) -> ContextManager[None]:
    """Hold the store's writer lock from loading it to saving it (``store_writer``), so a second
    writer waits and then loads what this one saved; ``settings`` are a new store's."""
    from llama_index_hiqa.pack.config import HiQAPackSettings
    from llama_index_hiqa.storage.backends import store_writer

    return store_writer(store, settings or HiQAPackSettings(), on_wait=_say)


# A stage that runs longer than this is shown moving (one huge document is one batch, and
# the per-batch progress line would otherwise stay silent for its whole ingestion).
STAGE_TICK_SECONDS = 10.0


@contextlib.contextmanager
def _stage_ticker(report: Any, started: float, quiet: bool, every: Optional[float] = None) -> Iterator[None]:
    """Print the running stage every ``every`` seconds while a stage runs that long."""
    every = STAGE_TICK_SECONDS if every is None else every
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(every):
            line = report.running_line()
            if line is not None and time.monotonic() - report.stage_started >= every:
                print(f"[{time.monotonic() - started:7.1f}s] {line}", file=sys.stderr, flush=True)

    thread = None if quiet else threading.Thread(target=tick, name="hiqa-progress", daemon=True)
    if thread is not None:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=every)


def _cmd_ingest(args: argparse.Namespace) -> int:
    folder = Path(args.dir)
    if not folder.is_dir():
        raise CLIError(f"{folder}: no such folder" if not folder.exists() else f"{folder}: is a file, not a folder")
    if args.quiet:
        from llama_index_hiqa.progress import quiet

        with quiet():
            return _ingest_folder(args, folder)
    print(f"hiqa ingest: {folder}: loading the pack and its models ...", file=sys.stderr, flush=True)  # before any slow import
    return _ingest_folder(args, folder)


def _ingest_folder(args: argparse.Namespace, folder: Path) -> int:
    from llama_index_hiqa.pack.ingestion import parse_shard

    args.shard_range = parse_shard(args.shard) if args.shard else None  # a bad I/N fails before any work
    llm = _llm(args)
    if args.shard and args.sync:
        raise CLIError("--sync removes the documents whose files are gone, which a shard cannot tell apart from "
                       "another shard's: run the shards with --add, then --sync once without --shard")
    from llama_index_hiqa.pack.config import HiQAPackSettings

    store = args.store
    fields: Dict[str, Any] = {
        "use_chunk_graph": args.graph, "use_segment_integration": args.segments, "ingest_workers": args.workers,
    }
    if args.embed_backend:
        fields["embed_backend"] = args.embed_backend
    if args.store_format:
        fields["store_format"] = args.store_format
    settings = HiQAPackSettings(**fields)  # a bad value fails here, before the lock is taken
    with _store_writer(store, settings):
        return _ingest(args, llm, folder, store, settings)


def _ingest(args: argparse.Namespace, llm: Any, folder: Path, store: Any, settings: "HiQAPackSettings") -> int:
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack
    from llama_index_hiqa.settings import updated
    from llama_index_hiqa.storage.backends import check_replaceable, store_exists
    from llama_index_hiqa.storage.pg_connection import mask_url

    exists = store_exists(store)
    if exists and not (args.add or args.rebuild or args.sync):
        raise CLIError(
            f"{mask_url(store)} already holds a store: pass --add to add new and changed files to it "
            f"(unchanged files are skipped), --sync to also remove the documents whose files are gone, "
            f"or --rebuild to replace it"
        )
    if exists and args.rebuild:
        check_replaceable(store)
    if exists and (args.add or args.sync):
        pack = HiQAPack.load(store, llm=llm)
        if args.embed_backend and args.embed_backend != pack.config.embed_backend:
            raise CLIError(
                f"{mask_url(store)} was embedded with --embed-backend {pack.config.embed_backend}; adding "
                f"{args.embed_backend} vectors would mix two models (use --rebuild to change it)"
            )
        # Workers are this run's choice (this machine's cores), not the store's.
        pack.config = updated(pack.config, ingest_workers=args.workers)
        mode = "synced" if args.sync else "added to"
    else:  # a new store (a rebuilt folder store is switched to when it is saved, whole)
        pack = HiQAPack.empty(llm=llm, store=str(store), config=settings)
        mode = "rebuilt" if exists else "built"
    started = time.monotonic()

    def progress(report: Any) -> None:
        if not args.quiet:
            print(f"[{time.monotonic() - started:7.1f}s] {report.documents_seen} file(s): {report.summary()}",
                  file=sys.stderr, flush=True)

    # Checkpoints make an interrupted run resumable with --add, where batches are not committed
    # as they go; a rebuild keeps the old store until it is complete, so it checkpoints only
    # into a new store.
    checkpoint = None if pack.backend.commits_batches or (exists and args.rebuild) else pack.persist
    # The command prints each skipped file once below; the reader's own warning would repeat it.
    reader_log = logging.getLogger("llama_index_hiqa.readers")
    level = reader_log.level
    reader_log.setLevel(logging.ERROR)
    from llama_index_hiqa.pack.ingestion import IngestionReport

    running = IngestionReport()
    try:
        with _stage_ticker(running, started, quiet=args.quiet):
            report = pack.add_directory(
                folder, recursive=args.recursive, progress=progress, report=running,
                shard=args.shard_range, executor=_ray_executor(args),
                checkpoint=checkpoint, checkpoint_seconds=args.checkpoint_minutes * 60,
            )
    finally:
        reader_log.setLevel(level)
    for failure in pack.read_failures:
        print(f"skipped {failure}", file=sys.stderr)
    removed: List[str] = []
    if args.sync and exists:
        from llama_index_hiqa.pack.store_sync import prune_missing

        removed = prune_missing(pack, folder, recursive=args.recursive)
        for document_id in removed:
            print(f"removed {document_id} (its file is no longer in {folder})", file=sys.stderr)
    start = time.perf_counter()
    pack.persist()
    report.add_time("persist", time.perf_counter() - start)
    gone = f", {len(removed)} removed" if args.sync and exists else ""
    print(
        f"{mode} {mask_url(store)}: {len(pack.document_ids)} document(s), {pack.node_count} nodes "
        f"({report.summary()}{gone})"
    )
    return 0


def _ray_executor(args: argparse.Namespace) -> Any:
    """``--ray [ADDRESS]``: the cluster the files are read, parsed and embedded on (None without --ray)."""
    if args.ray is None:
        return None
    from llama_index_hiqa.pack.ray_ingestion import RayExecutor, import_ray

    import_ray()  # the [ray] extra missing fails here, before any file is listed
    return RayExecutor(address=args.ray or None, workers=args.workers if args.workers > 1 else None)


def _cmd_delete(args: argparse.Namespace) -> int:
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack
    from llama_index_hiqa.storage.pg_connection import mask_url

    store = _existing_store(args.store)
    with _store_writer(store):
        pack = HiQAPack.load(store)
        known = set(pack.document_ids)
        missing = [d for d in args.documents if d not in known]
        if missing:
            shown = ", ".join(sorted(known)[:10]) + (" ..." if len(known) > 10 else "")
            raise CLIError(f"{mask_url(store)} holds no document {', '.join(map(repr, missing))}; it holds: {shown}")
        nodes = sum(pack.delete_document(d) for d in args.documents)
        pack.persist()
    print(
        f"removed {', '.join(args.documents)} from {mask_url(store)} ({nodes} nodes); "
        f"{len(pack.document_ids)} document(s) left"
    )
    return 0


def _cmd_migrate(args: argparse.Namespace) -> int:
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack
    from llama_index_hiqa.storage.pg_connection import mask_url

    source = _existing_store(args.old)
    target = Path(args.new)
    pack = HiQAPack.load(source)
    copied = pack.copy_to(target, store_format=args.store_format)
    print(
        f"migrated {mask_url(source)} ({pack.config.store_format or 'folder'}) to {target} "
        f"({copied.config.store_format}): {len(copied.document_ids)} document(s), {copied.node_count} nodes"
    )
    return 0


def _existing_store(path: str) -> str:
    from llama_index_hiqa.storage.backends import location_exists

    if not location_exists(path):  # a database is checked when it is opened
        raise CLIError(f"{path}: no such store; build one with `hiqa ingest DIR --store {path}`")
    return path


def _cmd_ask(args: argparse.Namespace) -> int:
    from llama_index.core.base.response.schema import StreamingResponse

    from llama_index_hiqa.figures import format_figure
    from llama_index_hiqa.pack.answers import citation, format_citation
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack
    from llama_index_hiqa.questions import question_text

    args.question = question_text(args.question)  # a stray byte of the shell: U+FFFD; too long: one line
    llm = _llm(args)
    store = _existing_store(args.store)
    settings = {"similarity_top_k": args.top_k} if args.top_k is not None else {}
    pack = HiQAPack.load(store, llm=llm, **settings)
    stream = args.stream and not args.json and pack.llm is not None
    response = pack.run(args.question, streaming=stream) if stream else pack.run(args.question)
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
            "figures": pack.figures(sources),
        }
        print(json.dumps(payload, indent=2, ensure_ascii=False))
        return 0
    if isinstance(response, StreamingResponse):  # asked for with stream
        for token in response.response_gen:  # tokens as the server sends them
            print(token, end="", flush=True)
        print()
    else:
        print(str(response))
    if pack.llm is not None and sources:
        print("\nSources:")
        for i, n in enumerate(sources, 1):
            print(f"[{i}] {format_citation(n.node)}")
    figures = pack.figures(sources)
    if figures:
        print("\nFigures:")
        for record in figures:
            print(f"- {format_figure(record)}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        import starlette  # noqa: F401  (the extra's web stack)
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise CLIError(f"serving needs the 'serve' extra ({exc.name} is not installed): pip install 'llama-index-hiqa[serve]'") from exc
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack
    from llama_index_hiqa.serve.app import serve

    llm = _llm(args)
    store = _existing_store(args.store)
    settings = {"similarity_top_k": args.top_k} if args.top_k is not None else {}
    pack = HiQAPack.load(store, llm=llm, **settings)
    pack.retrieve("warm-up")  # the routes load now, not on the first visitor's question
    import pymupdf  # noqa: F401  (the page renderer's, ~1.5 s: now rather than on the first page)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"hiqa serve: http://{shown}:{args.port}/ ({len(pack.document_ids)} documents; Ctrl+C stops)", flush=True)
    serve(pack, host=args.host, port=args.port)
    return 0


def _llm_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--llm-base-url", help="OpenAI-compatible server, e.g. http://gpu-box:8000/v1 (default: $OPENAI_BASE_URL)"
    )
    command.add_argument(
        "--llm-context-window", type=int, help="context window of an openai-compatible model, in tokens (default 32768)"
    )
    command.add_argument("--llm-timeout", type=float, help="seconds per LLM request (default 120)")


def _positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (argparse prints the message, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


class _LazyChoices:
    """An argparse ``choices`` read when first needed: the modules that define the choices
    import LlamaIndex (seconds), which parsing ``hiqa ingest DIR`` must not wait for. Give the
    argument a ``metavar`` (argparse lists the choices in the usage line otherwise) and
    ``%(choices)s`` in its help.

    Args:
        load: returns the choices.
    """

    def __init__(self, load: Callable[[], Sequence[str]]) -> None:
        self._load = load

    def __contains__(self, value: object) -> bool:
        return value in self._load()

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())


class _CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose ``description`` may be a function, called when the help is shown."""

    def format_help(self) -> str:
        if callable(self.description):
            self.description = self.description()
        return super().format_help()


def _embed_backends() -> Sequence[str]:
    from llama_index_hiqa.models.embedding_backends import EMBED_BACKENDS

    return EMBED_BACKENDS


def build_parser() -> argparse.ArgumentParser:
    parser = _CommandParser(
        prog="hiqa", description="Question answering over many similar documents (LlamaIndex)."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_demo, _add_eval, _add_ingest, _add_delete, _add_migrate, _add_ask, _add_serve):
        add(sub)
    return parser


def _add_demo(sub: Any) -> None:
    demo = sub.add_parser("demo", help="index the demo datasheets offline and answer the demo questions")
    demo.add_argument("--top-k", type=_positive_int, default=3, help="evidence shown per question")
    demo.set_defaults(func=_cmd_demo)


def _variants() -> Any:
    from llama_index_hiqa.evaluation.variants import VARIANTS

    return VARIANTS


def _add_eval(sub: Any) -> None:
    ev = sub.add_parser(
        "eval",
        help="run the HiQA ablation (Log-Rank Index, Recall/Precision/MRR/nDCG/hit@k) on your documents",
        description=lambda: "Variants: " + "; ".join(f"{v.name} = {v.label}" for v in _variants()),
    )
    ev.add_argument("--docs", required=True, help="folder of .pdf/.html/.docx/.md/.txt documents")
    ev.add_argument("--questions", required=True, help="questions JSONL with gold evidence")
    ev.add_argument("--variants", nargs="+", choices=_LazyChoices(lambda: [v.name for v in _variants()]),
                    metavar="VARIANT", help="any of %(choices)s (default: all)")
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


def _add_ingest(sub: Any) -> None:
    ing = sub.add_parser("ingest", help="read, parse, augment and index a folder; save the store")
    ing.add_argument("dir", help="folder of .pdf/.html/.docx/.md/.txt documents")
    ing.add_argument("--store", required=True, help="folder the index is saved to, or postgresql://USER@HOST/DB")
    ing.add_argument("--llm", help="openai:MODEL or openai-compatible:MODEL (LLM Markdown formatter)")
    _llm_options(ing)
    ing.add_argument("--recursive", action="store_true", help="include subfolders")
    ing.add_argument("--graph", action="store_true", help="also build the IIER chunk graph (multi-hop)")
    ing.add_argument("--segments", action="store_true", help="answer with merged segments (TextRAG RSE)")
    ing.add_argument("--quiet", action="store_true", help="no progress lines")
    existing = ing.add_mutually_exclusive_group()
    existing.add_argument(
        "--add", action="store_true",
        help="the store exists: add new files and replace changed ones (unchanged files cost nothing)",
    )
    existing.add_argument("--rebuild", action="store_true", help="the store exists: replace it with a new one")
    existing.add_argument(
        "--sync", action="store_true",
        help="as --add, and remove the documents whose files are no longer in the folder (listed as removed)",
    )
    ing.add_argument(
        "--checkpoint-minutes", type=float, default=5.0,
        help="save progress this often, so an interrupted run resumes with --add (default 5)",
    )
    ing.add_argument(
        "--shard", metavar="I/N",
        help="ingest only the I-th of N shards of the folder's files (split by a hash of each path): "
        "N machines writing one PostgreSQL database each run one shard",
    )
    ing.add_argument(
        "--workers", type=_positive_int, default=1,
        help="processes that parse, augment and embed at once (default 1; at most the cores there are helps)",
    )
    ing.add_argument(
        "--ray", nargs="?", const="", default=None, metavar="ADDRESS",
        help="read, parse, augment and embed on a Ray cluster (the [ray] extra; the folder at the same path on "
        "every machine), writing here: ADDRESS (ray://head:10001 or head:6379) joins that cluster; without it "
        "the one RAY_ADDRESS or `ray start` names, else one started on this machine. --workers N: N Ray workers",
    )
    ing.add_argument("--embed-backend", choices=_LazyChoices(_embed_backends), metavar="BACKEND",
                     help="how the packaged embedding model runs: %(choices)s (default: the pack's measured default)")
    ing.add_argument(
        "--store-format", choices=("folder", "embedded"), default=None,
        help="a new store's format: embedded (the default: SQLite and memory-mapped vectors, each batch commits, "
        "a loaded store reads only what a question needs) or folder (snapshots, loaded into memory; the default "
        "with --graph)",
    )
    ing.set_defaults(func=_cmd_ingest)


def _add_delete(sub: Any) -> None:
    rm = sub.add_parser("delete", help="remove documents (by document id, e.g. the file name without .pdf) from a store")
    rm.add_argument("documents", nargs="+", metavar="DOC", help="document id(s) as `hiqa ingest` listed them")
    rm.add_argument("--store", required=True, help="folder or postgresql://USER@HOST/DB URL written by `hiqa ingest`")
    rm.set_defaults(func=_cmd_delete)


def _add_migrate(sub: Any) -> None:
    mig = sub.add_parser(
        "migrate", help="copy a store into a new folder in the other format (its nodes and vectors as they are: "
        "the same rankings, nothing parsed or embedded again)",
    )
    mig.add_argument("old", help="the store: a folder (either format) or postgresql://USER@HOST/DB")
    mig.add_argument("new", help="the new store's folder (missing or empty)")
    mig.add_argument(
        "--store-format", choices=("folder", "embedded"), default=None,
        help="the new store's format (default: embedded, or folder for an embedded store)",
    )
    mig.set_defaults(func=_cmd_migrate)


def _add_ask(sub: Any) -> None:
    ask = sub.add_parser("ask", help="answer a question from a saved store, with citations")
    ask.add_argument("question")
    ask.add_argument("--store", required=True, help="folder or postgresql:// URL written by `hiqa ingest`")
    ask.add_argument("--llm", help="openai:MODEL or openai-compatible:MODEL; default: cited evidence only")
    _llm_options(ask)
    ask.add_argument("--top-k", type=_positive_int, help="evidence nodes (default: the store's setting, 5)")
    ask.add_argument("--json", action="store_true", help="print the answer, sources and figures as JSON")
    ask.add_argument(
        "--stream", action="store_true",
        help="print the LLM's answer token by token as it arrives, then the sources and figures",
    )
    ask.set_defaults(func=_cmd_ask)


def _add_serve(sub: Any) -> None:
    srv = sub.add_parser("serve", help="a local web app and JSON API that keeps a saved store loaded")
    srv.add_argument("--store", required=True, help="folder or postgresql:// URL written by `hiqa ingest`")
    srv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    srv.add_argument("--port", type=_positive_int, default=8000, help="port (default 8000)")
    srv.add_argument("--llm", help="openai:MODEL or openai-compatible:MODEL; default: cited evidence only")
    _llm_options(srv)
    srv.add_argument("--top-k", type=_positive_int, help="evidence nodes (default: the store's setting, 5)")
    srv.set_defaults(func=_cmd_serve)


def main(argv: Optional[List[str]] = None) -> int:
    """The ``hiqa`` command: run one subcommand; a user error (a typed error, a refused path, an
    LLM client's failure) is printed as one line, not a traceback.

    Args:
        argv: the arguments (``None``: ``sys.argv[1:]``).

    Returns:
        The exit status: the subcommand's (0 by default), 2 after a user error.
    """
    from llama_index_hiqa.errors import HiQAError
    from llama_index_hiqa.models.llm_spec import describe_llm_error, is_llm_client_error

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (CLIError, HiQAError) as exc:
        print(f"hiqa {args.command}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the system refused a path (read-only, full disk, not a folder): one line
        from llama_index_hiqa.storage.os_boundary import as_path_error  # imports LlamaIndex: only when needed

        print(f"hiqa {args.command}: {as_path_error(exc)}", file=sys.stderr)
        return 2
    # Only the LLM client's errors are handled (printed as one line); anything else re-raises.
    except Exception as exc:
        if not is_llm_client_error(exc):
            raise
        # The server failed mid-run (after the retries): one line, not a traceback.
        print(f"hiqa {args.command}: --llm {args.llm}: {describe_llm_error(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
