"""Ingestion on a Ray cluster: ``HiQAPack.add_directory(..., executor=RayExecutor(...))`` /
``hiqa ingest DIR --ray [ADDRESS]`` (the ``[ray]`` extra).

The driver (the process that called ``add_directory``) lists the folder and leaves out the files
it already holds unchanged, as without Ray; the other files go to Ray Data in batches of
``ingest_batch_size`` files. Each batch is read, parsed, augmented, keyword-tagged and embedded
on a Ray worker (the files must be at a path every worker sees: a shared folder), by the pack's
own stages ([`ingestion_stages`][llama_index_hiqa.pack.workers.ingestion_stages]), built once
per worker actor. The results stream back to the driver *in reading order* (Ray Data's
``preserve_order``), where the pack writes them as it writes its own batches: one writer, the
store's lock, transactions and crash safety unchanged. The store therefore ends with the nodes
one process writes, in the same order.

A worker that dies is restarted by Ray and its batch run again (Ray Data's actor pools restart
actors and retry their tasks); nothing is written until a batch's result reaches the driver,
so a batch is written once, never half. We use Ray Data directly rather than LlamaIndex's
``RayIngestionPipeline``: its ``run`` collects every node of the run in the driver
(``take_all``) before anything is written, takes documents read by the driver, and its upsert
strategy deletes from the vector store behind the index's back (see ``pack/ingestion.py``);
the pack's transformations themselves run inside ``RayIngestionPipeline`` too (docs/ray.md).

Ray is never imported by ``import llama_index_hiqa``; only running a ``RayExecutor`` imports it.
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, Document

from llama_index_hiqa import schema
from llama_index_hiqa.errors import DocumentReadError, ExtraNotInstalledError, UnserializableComponentError
from llama_index_hiqa.models.embedding_backends import EMBED_THREADS_ENV
from llama_index_hiqa.pack.config import HiQAPackSettings
from llama_index_hiqa.pack.ingestion import IngestionReport, file_stat, upsert_plan
from llama_index_hiqa.progress import STATUS_LOGGER, status
from llama_index_hiqa.readers.pdf import PDFLayoutReader
from llama_index_hiqa.settings import SettingsModel

logger = logging.getLogger(__name__)

# One file of a batch: its path (as every worker sees it), its document id and the hash of its
# stored version (None: not stored), so the worker skips a file whose text did not change.
FileJob = Tuple[str, str, Optional[str]]


def import_ray() -> Any:
    """The ``ray`` module, imported now.

    Returns:
        The module.

    Raises:
        ExtraNotInstalledError: Ray is not installed (the ``[ray]`` extra).
    """
    try:
        import ray
        import ray.data  # noqa: F401 - Ray Data is the part we run on
    except ImportError as exc:
        raise ExtraNotInstalledError("ingestion on a Ray cluster", "ray", "ray[data]") from exc
    return ray


def _cloudpickle() -> Any:
    """Ray's cloudpickle (what Ray sends arguments with): functions and classes of a script by value."""
    return importlib.import_module("ray.cloudpickle")


def checked_for_workers(name: str, component: Any) -> bytes:
    """``component`` pickled as Ray sends it to a worker (cloudpickle), checked to come back whole.

    LlamaIndex components pickle by their fields and rebuild the rest in ``__init__``; a part
    that does not pickle is dropped with a warning. A component that changes type or loses a
    field on the way would run differently on the worker, so it is refused here, by name.

    Args:
        name: what the component is to the pack (``"llm"``, ``"embed_model"``).
        component: the component.

    Returns:
        The pickled bytes.

    Raises:
        UnserializableComponentError: it does not pickle, or comes back as something else.
    """
    cloudpickle = _cloudpickle()
    try:
        blob: bytes = cloudpickle.dumps(component)
        back = cloudpickle.loads(blob)
    except Exception as exc:  # noqa: BLE001 - any pickling error names the component
        raise UnserializableComponentError(f"{name} ({type(component).__name__})", f"{type(exc).__name__}: {exc}") from exc
    if type(back) is not type(component):
        raise UnserializableComponentError(f"{name} ({type(component).__name__})", f"it unpickles as {type(back).__name__}")
    dump = getattr(component, "model_dump", None)
    if dump is not None and back.model_dump() != dump():
        lost = sorted(k for k, v in dump().items() if back.model_dump().get(k) != v)
        raise UnserializableComponentError(f"{name} ({type(component).__name__})", f"its fields {lost} do not survive pickling")
    return blob


@dataclass
class BatchResult:
    """What a worker returns for one batch of files."""

    documents: List[Document]  # new and changed documents, in file order
    nodes: List[BaseNode]
    read_ids: List[str] = field(default_factory=list)  # every document read (unchanged ones too)
    unchanged: int = 0
    empty: List[str] = field(default_factory=list)
    failures: List[DocumentReadError] = field(default_factory=list)
    seconds: Dict[str, float] = field(default_factory=dict)
    worker_pid: int = 0


class IngestionActor:
    """One Ray worker's pipeline: the pack's stages and reader, built once per actor."""

    def __init__(self, setup: bytes) -> None:
        config, llm, embed_model, threads = pickle.loads(setup)
        # The driver said what loads; N workers would say it N times again.
        logging.getLogger(STATUS_LOGGER).setLevel(logging.WARNING)
        os.environ[EMBED_THREADS_ENV] = str(threads)  # before any embedding session is built
        from llama_index_hiqa.pack.workers import ingestion_stages

        self._stages = ingestion_stages(config, llm, embed_model)
        self._reader = PDFLayoutReader(detect_unruled_tables=config.detect_unruled_tables, log_skipped=False)

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        results = [pickle.dumps(self._process(pickle.loads(job))) for job in batch["job"]]
        return {"seq": batch["seq"], "result": results}

    def _process(self, jobs: Sequence[FileJob]) -> BatchResult:
        from llama_index_hiqa.pack.workers import run_stages

        report = IngestionReport()
        documents: List[Document] = []
        failures: List[DocumentReadError] = []
        hashes: Dict[str, Optional[str]] = {}
        for path, document_id, stored_hash in jobs:
            start = time.perf_counter()
            try:
                documents.append(self._reader.read_file(path, document_id=document_id))
            except DocumentReadError as exc:  # this file only, named; the others are read
                failures.append(exc)
            report.add_time("read", time.perf_counter() - start)
            hashes[document_id] = stored_hash
        new, changed, unchanged = upsert_plan(documents, hashes.get)
        fresh = new + changed
        nodes = run_stages(self._stages, fresh, report) if fresh else []
        return BatchResult(
            documents=fresh, nodes=nodes, read_ids=[d.doc_id for d in documents], unchanged=unchanged,
            empty=[str(d.metadata.get(schema.FILE_NAME) or d.doc_id) for d in documents if not d.text.strip()],
            failures=failures,
            seconds={s: t for s, t in report.seconds.items() if t}, worker_pid=os.getpid(),
        )


class RayExecutor(SettingsModel):
    """Where and how wide an ingestion runs on Ray. ``address=None`` joins the cluster Ray
    finds (``RAY_ADDRESS``, or one started by ``ray start`` on this machine) or starts one here;
    ``"ray://head:10001"`` or ``"head:6379"`` joins that cluster. A cluster this executor starts
    is stopped when the ingestion ends; one it joined is left running."""

    address: Optional[str] = Field(default=None, description="The Ray cluster (None: found or started here).")
    workers: Optional[int] = Field(
        default=None, ge=1, le=4096,
        description="Worker actors, each running a batch at a time (None: one per CPU of the cluster).",
    )
    cpus_per_worker: float = Field(
        default=1.0, gt=0, le=256,
        description="CPUs Ray reserves for each worker; also the embedding's threads in it.",
    )
    num_cpus: Optional[int] = Field(
        default=None, ge=1,
        description="CPUs of a cluster started here (None: all of this machine's).",
    )

    def _connect(self, ray: Any) -> bool:
        """Join or start the cluster; True when this call started it (and must stop it)."""
        if ray.is_initialized():
            return False
        kwargs: Dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING, "configure_logging": False}
        if self.address is None and not os.environ.get("RAY_ADDRESS"):
            kwargs["num_cpus"] = self.num_cpus
        ray.init(address=self.address, **kwargs)
        return True

    def run_batches(
        self, batches: Sequence[Sequence[FileJob]], config: HiQAPackSettings, llm: Optional[LLM],
        embed_model: BaseEmbedding,
    ) -> Iterator[BatchResult]:
        """Each batch of files read, parsed, augmented and embedded on the cluster, in order.

        Args:
            batches: the batches of ``(path, document id, stored hash)``.
            config: the pack's settings.
            llm: the LLM of the parser and the cascade (``None`` for the no-LLM paths).
            embed_model: the embedding model.

        Yields:
            One ``BatchResult`` per batch, in the order of ``batches``.

        Raises:
            ExtraNotInstalledError: Ray is not installed.
            UnserializableComponentError: the LLM or the embedding model cannot be sent to a worker.
        """
        if not batches:
            return
        ray = import_ray()
        cloudpickle = _cloudpickle()
        checked_for_workers("llm", llm)
        checked_for_workers("embed_model", embed_model)
        threads = max(1, int(self.cpus_per_worker))
        setup = cloudpickle.dumps((config, llm, embed_model, threads))
        started = self._connect(ray)
        try:
            yield from self._stream(ray, batches, setup)
        finally:
            if started:
                ray.shutdown()

    def written_batches(
        self, files: Sequence[Tuple[Path, str]], pack: Any, report: IngestionReport,
        failures: List[DocumentReadError], batch_size: Optional[int] = None,
    ) -> Iterator[Tuple[List[Document], List[BaseNode]]]:
        """The ``(new and changed documents, their nodes)`` of each batch of ``files``, in
        reading order, for the pack to write; the batch's read failures, unchanged and empty
        documents, file stats and stage times booked as the pack's own batches book them.

        Args:
            files: ``(path, document id)`` of each file to read, in reading order.
            pack: the [`HiQAPack`][llama_index_hiqa.pack.hiqa_pack.HiQAPack] (its settings,
                LLM, embedding model, stored hashes and file stats).
            report: the running ingestion report.
            failures: the list read failures are added to.
            batch_size: files a batch (``ingest_batch_size`` when ``None``).

        Yields:
            ``(documents, nodes)`` per batch, in order.
        """
        jobs = [(str(path), document_id, pack.backend.document_hash(document_id)) for path, document_id in files]
        size = batch_size or pack.config.ingest_batch_size
        batches = [jobs[i:i + size] for i in range(0, len(jobs), size)]
        results = self.run_batches(batches, pack.config, pack.llm, pack.embed_model)
        for batch, result in zip(batches, results):
            failures.extend(result.failures)
            report.documents_unchanged += result.unchanged
            report.empty_documents += result.empty
            for stage, seconds in result.seconds.items():
                report.add_time(stage, seconds)
            read = set(result.read_ids)
            for path, document_id, _ in batch:
                stat = file_stat(path) if document_id in read else None
                if stat is not None:
                    pack.file_stats[document_id] = stat
            yield result.documents, result.nodes

    def _stream(self, ray: Any, batches: Sequence[Sequence[FileJob]], setup: bytes) -> Iterator[BatchResult]:
        from ray.data import DataContext

        workers = self.workers or max(1, int(ray.cluster_resources().get("CPU", 1) // self.cpus_per_worker))
        workers = min(workers, len(batches))
        status(f"ingesting {len(batches)} batch(es) on Ray with {workers} worker(s)")
        context = DataContext.get_current()
        saved = (context.execution_options.preserve_order, context.enable_progress_bars)
        # In reading order: the store gets the nodes one process writes, in the same order.
        context.execution_options.preserve_order = True
        context.enable_progress_bars = False  # the pack's own bar counts documents written
        try:
            rows = [{"seq": i, "job": pickle.dumps(list(batch))} for i, batch in enumerate(batches)]
            # One batch in flight per actor: Ray Data's default queues more on each actor, and a
            # killed actor's queue waits for its restart (a new process loading the models)
            # while the others idle; with one, a free actor takes the next batch, and a death
            # costs only the batch it was running. A batch is tens of seconds of work, so the
            # round trip before the next one is noise.
            dataset = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
                IngestionActor, fn_constructor_kwargs={"setup": setup}, batch_size=1, batch_format="numpy",
                compute=ray.data.ActorPoolStrategy(size=workers, max_tasks_in_flight_per_actor=1),
                num_cpus=self.cpus_per_worker,
            )
            expected = 0
            for row in dataset.iter_rows():
                if int(row["seq"]) != expected:  # preserve_order broken: refuse to write out of order
                    raise RuntimeError(f"Ray returned batch {row['seq']} where {expected} was due")
                expected += 1
                yield pickle.loads(row["result"])
        finally:
            context.execution_options.preserve_order, context.enable_progress_bars = saved


__all__ = ["RayExecutor", "BatchResult", "IngestionActor", "checked_for_workers", "import_ray"]
