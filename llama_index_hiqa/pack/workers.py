"""Ingestion over several processes: ``HiQAPackSettings.ingest_workers`` / ``hiqa ingest --workers N``.

Embedding is most of ingestion on a CPU, and parsing, the cascade and keyword extraction are
single-threaded Python, so one process leaves cores idle. With N workers the main process
still reads the files and stays the store's only writer (its lock, its transactions and its
crash safety are unchanged), while each batch is parsed, augmented, keyword-tagged and
embedded in one of N worker processes, with at most N batches in flight. Batches are written
in reading order, so the store ends with the same nodes in the same order as with one process.

Workers are *spawned* (a fresh interpreter), never forked from a process whose ONNX Runtime,
PyTorch or SQLite threads a fork would copy half-way. As with any Python multiprocessing, a
script that ingests with workers must start from an ``if __name__ == "__main__":`` block.

Each worker receives the pack's settings, its LLM and its embedding model by pickling: the
packaged MiniLM and the vector cache pickle as their settings and are rebuilt in the worker,
each with its share of the cores. An LLM or embedding model that cannot be pickled stays in
the main process: the LLM steps then run there (one process), and an unpicklable embedding
model embeds there what the workers parsed; either is logged once, never an error.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing
import os
import pickle
import sys
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Deque, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, Document

from llama_index_hiqa import schema
from llama_index_hiqa.models.embedding_backends import EMBED_THREADS_ENV
from llama_index_hiqa.errors import IngestionWorkerError
from llama_index_hiqa.pack.config import HiQAPackSettings, build_parser, keyword_extractor
from llama_index_hiqa.pack.ingestion import IngestionReport, TimedTransform
from llama_index_hiqa.progress import STATUS_LOGGER
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

logger = logging.getLogger(__name__)

Batch = List[Document]
# A batch processed in a worker: its nodes and the seconds each stage took.
BatchResult = Future[Tuple[List[BaseNode], Dict[str, float]]]


def ingestion_stages(
    config: HiQAPackSettings, llm: Optional[LLM], embed_model: Optional[BaseEmbedding],
    keywords: Optional[CriticalKeywordExtractor] = None,
) -> List[TimedTransform]:
    """The pack's ingestion stages: parse → cascade → keywords → embed, each timed under its name.

    One place for the pack's pipeline, in or out of process.

    Args:
        config: the pack's [`HiQAPackSettings`][llama_index_hiqa.pack.config.HiQAPackSettings].
        llm: the LLM of the parser and the cascade; ``None`` for the no-LLM paths.
        embed_model: the embedding model; ``None`` leaves the embed stage out.
        keywords: the pack's keyword extractor; ``None`` builds the configuration's.

    Returns:
        The stages in order, each a ``TimedTransform``.
    """
    # Imported here: the cascade costs 0.2 s over an import of the pack (measured), and only
    # ingestion runs the stages (a process that loads a store and answers never does).
    from llama_index_hiqa.transforms.cascading_metadata import CascadingMetadataTransform

    stages = [TimedTransform(stage="parse", inner=build_parser(config, llm, embed_model))]
    if config.use_cascade:
        multimodal = llm if config.describe_figures else None
        if config.describe_figures and llm is None:
            logger.warning("describe_figures is set but the pack has no LLM: figures are embedded by caption and context only")
        cascade = CascadingMetadataTransform(
            show_progress=config.show_progress, multimodal_llm=multimodal, table_view=config.tables_embedded_by)
        stages.append(TimedTransform(stage="cascade", inner=cascade))
    stages.append(TimedTransform(stage="keywords", inner=keywords if keywords is not None else keyword_extractor(config)))
    if embed_model is not None:
        stages.append(TimedTransform(stage="embed", inner=embed_model, show_progress=config.show_progress))
    return stages


def run_stages(stages: Sequence[TimedTransform], documents: Batch, report: IngestionReport) -> List[BaseNode]:
    """One batch through ``stages``, its time booked into ``report``.

    No transformation cache: it would keep a copy of every batch's nodes per stage.

    Args:
        stages: the stages from [`ingestion_stages`][llama_index_hiqa.pack.workers.ingestion_stages].
        documents: the batch's documents.
        report: the ingestion report each stage's time is added to.

    Returns:
        The batch's nodes, in order.
    """
    pipeline = IngestionPipeline(transformations=[s.bind(report) for s in stages], disable_cache=True)
    return list(pipeline.run(documents=documents, show_progress=False))


def picklable(value: Any) -> Optional[bytes]:
    """``pickle.dumps(value)``, or ``None`` when it cannot be pickled (a client holding a socket).

    Args:
        value: any object (an LLM, an embedding model).

    Returns:
        The pickled bytes, or ``None``.
    """
    try:
        return pickle.dumps(value)
    except Exception:  # noqa: BLE001 - any object's own pickling error means "stays here"
        return None


# -- the worker process -----------------------------------------------------------------
_WORKER: Dict[str, Any] = {}


def _start_worker(config: HiQAPackSettings, llm_blob: Optional[bytes], embed_blob: Optional[bytes], threads: int) -> None:
    # The main process said what loads; N workers would say it N times again.
    logging.getLogger(STATUS_LOGGER).setLevel(logging.WARNING)
    os.environ[EMBED_THREADS_ENV] = str(threads)  # before any embedding session is built
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    llm = pickle.loads(llm_blob) if llm_blob is not None else None
    embed_model = pickle.loads(embed_blob) if embed_blob is not None else None
    torch = sys.modules.get("torch")  # imported by a PyTorch model above; never imported for nothing
    if torch is not None:
        torch.set_num_threads(threads)
    _WORKER["stages"] = ingestion_stages(config, llm, embed_model)


def _process_batch(documents: Batch) -> Tuple[List[BaseNode], Dict[str, float]]:
    report = IngestionReport()
    nodes = run_stages(_WORKER["stages"], documents, report)
    return nodes, {stage: seconds for stage, seconds in report.seconds.items() if seconds}


# -- the main process -------------------------------------------------------------------
class InProcessBatches:
    """Each batch through the stages in this process (``ingest_workers=1``)."""

    def __init__(self, stages: Sequence[TimedTransform], report: IngestionReport) -> None:
        self._stages, self._report = stages, report

    def __enter__(self) -> "InProcessBatches":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __call__(self, planned: Iterable[Batch]) -> Iterator[Tuple[Batch, List[BaseNode]]]:
        for fresh in planned:
            yield fresh, (run_stages(self._stages, fresh, self._report) if fresh else [])


class WorkerBatches:
    """Batches through the stages in ``workers`` spawned processes, results in reading order.

    ``planned`` is consumed lazily: batch k + N is read while batches k .. k + N - 1 are in
    the workers, so reading overlaps the work and at most ``workers`` batches wait in memory.
    """

    def __init__(
        self, workers: int, config: HiQAPackSettings, llm: Optional[LLM], embed_model: BaseEmbedding,
        report: IngestionReport, keywords: Optional[CriticalKeywordExtractor] = None,
    ) -> None:
        self.workers, self._report = workers, report
        llm_blob = picklable(llm) if llm is not None else None
        if llm is not None and llm_blob is None:
            logger.warning(
                "ingest_workers=%d: the LLM %s cannot be sent to worker processes; ingesting in this process",
                workers, type(llm).__name__,
            )
            self.workers = 1
        embed_blob = picklable(embed_model) if self.workers > 1 else None
        # An embedding model that stays here embeds what the workers parsed, in this process.
        self._main_embed: Optional[BaseEmbedding] = embed_model if embed_blob is None else None
        if embed_blob is None and self.workers > 1:  # with one process left, nothing to say
            logger.warning(
                "ingest_workers=%d: the embedding model %s cannot be sent to worker processes; it embeds in this process",
                workers, type(embed_model).__name__,
            )
        self._fallback = (
            InProcessBatches(ingestion_stages(config, llm, embed_model, keywords), report) if self.workers == 1 else None
        )
        self._pool: Optional[ProcessPoolExecutor] = None
        self._start = (config, llm_blob, embed_blob, max(1, (os.cpu_count() or 1) // max(self.workers, 1)))

    def __enter__(self) -> "WorkerBatches":
        if self._fallback is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker, initargs=self._start,
            )
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __call__(self, planned: Iterable[Batch]) -> Iterator[Tuple[Batch, List[BaseNode]]]:
        if self._fallback is not None:
            yield from self._fallback(planned)
            return
        assert self._pool is not None, "use WorkerBatches as a context manager"
        pending: Deque[Tuple[Batch, Optional[BatchResult]]] = collections.deque()
        for fresh in planned:
            pending.append((fresh, self._pool.submit(_process_batch, fresh) if fresh else None))
            while len(pending) >= self.workers:
                yield self._finished(*pending.popleft())
        while pending:
            yield self._finished(*pending.popleft())

    def _finished(self, fresh: Batch, future: Optional[BatchResult]) -> Tuple[Batch, List[BaseNode]]:
        if future is None:
            return fresh, []
        try:
            nodes, seconds = future.result()
        except BrokenProcessPool as exc:  # a worker died (killed, out of memory): nothing was written
            raise IngestionWorkerError([str(d.metadata.get(schema.FILE_NAME) or d.doc_id) for d in fresh], str(exc)) from exc
        for stage, spent in seconds.items():
            self._report.add_time(stage, spent)
        if self._main_embed is not None and nodes:
            with self._report.running("embed", len(nodes)):
                nodes = list(self._main_embed(nodes))
        return fresh, nodes


def batch_runner(
    workers: int, config: HiQAPackSettings, llm: Optional[LLM], embed_model: BaseEmbedding, report: IngestionReport,
    keywords: Optional[CriticalKeywordExtractor] = None,
) -> Union[InProcessBatches, WorkerBatches]:
    """The context manager that turns planned batches into ``(batch, nodes)`` pairs in order.

    In this process for one worker (with the pack's ``keywords`` extractor), in spawned
    processes for more (each builds the configuration's).

    Args:
        workers: number of processes; 1 or less runs in this process.
        config: the pack's [`HiQAPackSettings`][llama_index_hiqa.pack.config.HiQAPackSettings].
        llm: the LLM of the parser and the cascade; ``None`` for the no-LLM paths.
        embed_model: the embedding model.
        report: the ingestion report stage times are added to.
        keywords: the pack's keyword extractor (used in this process only); ``None`` builds
            the configuration's.

    Returns:
        An ``InProcessBatches`` or a ``WorkerBatches`` context manager.
    """
    if workers <= 1:
        return InProcessBatches(ingestion_stages(config, llm, embed_model, keywords), report)
    return WorkerBatches(workers, config, llm, embed_model, report, keywords)


__all__ = ["batch_runner", "ingestion_stages", "run_stages", "InProcessBatches", "WorkerBatches"]
