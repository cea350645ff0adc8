"""Batch ingestion for [`HiQAPack`][llama_index_hiqa.pack.hiqa_pack.HiQAPack]: documents stream through the
pipeline a batch at a time, so memory depends on the batch and the index, not the collection.

Each batch goes read → parse → cascade → keywords → embed → index, and is then dropped: only
the index (docstore, vectors, keyword postings) grows. Re-ingestion is an upsert keyed by
LlamaIndex's document hashes in the docstore (``set_document_hash``/``get_document_hash``): an
unchanged document costs no parsing or embedding, a changed one replaces its old nodes.

We keep LlamaIndex's ``IngestionPipeline`` for the transformations but do the upsert
bookkeeping here: the pipeline's own ``UPSERTS`` strategy deletes from the vector store and
the docstore behind the ``VectorStoreIndex``'s back, leaving stale ids in its index struct;
``VectorStoreIndex.delete_ref_doc`` keeps all three consistent.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import BaseNode, Document, TransformComponent

from llama_index_hiqa.errors import InvalidSettingError

STAGES = ("read", "parse", "cascade", "keywords", "embed", "index", "routes", "persist")


@dataclass
class IngestionReport:
    """What one ingestion did, and where its time went (seconds per stage)."""

    documents_added: int = 0
    documents_replaced: int = 0
    documents_unchanged: int = 0
    nodes_added: int = 0
    nodes_removed: int = 0
    seconds: Dict[str, float] = field(default_factory=lambda: {s: 0.0 for s in STAGES})
    node_ids: List[str] = field(default_factory=list)
    empty_documents: List[str] = field(default_factory=list)
    # How many documents the run will see, when known before it starts (a folder's files):
    # the total of the "indexing" progress bar.
    documents_planned: Optional[int] = None

    # The stage running now (None between stages), its input size and start (time.monotonic()),
    # so a progress line can show a long stage moving inside one batch.
    stage: Optional[str] = None
    stage_items: int = 0
    stage_started: float = 0.0

    def add_time(self, stage: str, seconds: float) -> None:
        """Add ``seconds`` to the time booked under ``stage``.

        Args:
            stage: the stage name (one of ``STAGES`` or a new one).
            seconds: the wall time to add.
        """
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds

    @contextlib.contextmanager
    def running(self, stage: str, items: int) -> Iterator[None]:
        """Book the block's wall time under ``stage`` and show it as the running stage.

        Args:
            stage: the stage name.
            items: how many items the stage works on (shown by the progress line).

        Yields:
            ``None``, while the block runs.
        """
        self.stage, self.stage_items, self.stage_started = stage, items, time.monotonic()
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add_time(stage, time.perf_counter() - start)
            self.stage = None

    def running_line(self) -> Optional[str]:
        """``"embed of 4,196 node(s) running for 31 s"``, None between stages."""
        stage = self.stage
        if stage is None:
            return None
        return f"{stage} of {self.stage_items:,} node(s) running for {time.monotonic() - self.stage_started:.0f} s"

    @property
    def documents_seen(self) -> int:
        return self.documents_added + self.documents_replaced + self.documents_unchanged

    def summary(self) -> str:
        """``"3 added, 1 replaced, 40 unchanged; 212 nodes in, 57 out; parse 1.2s, ..."``."""
        stages = ", ".join(f"{s} {t:.1f}s" for s, t in self.seconds.items() if t >= 0.05)
        return (
            f"{self.documents_added} added, {self.documents_replaced} replaced, "
            f"{self.documents_unchanged} unchanged; {self.nodes_added} nodes in, "
            f"{self.nodes_removed} out" + (f"; {stages}" if stages else "")
        )


class TimedTransform(TransformComponent):
    """A transformation that adds its wall time to an [`IngestionReport`][llama_index_hiqa.pack.ingestion.IngestionReport] stage."""

    stage: str = Field(description="Stage name the time is booked under.")
    inner: TransformComponent = Field(description="The transformation that does the work.")
    show_progress: bool = Field(
        default=False,
        description="Call the inner transformation with show_progress=True (its LlamaIndex bar, e.g. "
        "'Generating embeddings'); the pipeline does not pass its own flag on.",
    )

    _report: Optional[IngestionReport] = PrivateAttr(default=None)

    def bind(self, report: IngestionReport) -> "TimedTransform":
        """Book this transformation's time in ``report`` from now on.

        Args:
            report: the report of the running ingestion.

        Returns:
            This transformation.
        """
        self._report = report
        return self

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        if self.show_progress:
            kwargs.setdefault("show_progress", True)
        if self._report is None:
            return self.inner(nodes, **kwargs)
        with self._report.running(self.stage, len(nodes)):
            return self.inner(nodes, **kwargs)

    async def acall(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        """Run the inner transformation asynchronously, booking its wall time under ``stage``.

        Args:
            nodes: the nodes to transform.
            **kwargs: passed on to the inner transformation.

        Returns:
            The inner transformation's nodes.
        """
        if self.show_progress:
            kwargs.setdefault("show_progress", True)
        start = time.perf_counter()
        try:
            return await self.inner.acall(nodes, **kwargs)
        finally:
            if self._report is not None:
                self._report.add_time(self.stage, time.perf_counter() - start)


def timed_iter(items: Iterable[Document], report: IngestionReport, stage: str = "read") -> Iterator[Document]:
    """``items`` with the time spent producing each (reading a file) booked under ``stage``.

    Args:
        items: the documents, produced lazily (a reader's generator).
        report: the report the time is booked in.
        stage: the stage name.

    Yields:
        Each item of ``items``, in order.
    """
    iterator = iter(items)
    while True:
        start = time.perf_counter()
        try:
            item = next(iterator)
        except StopIteration:
            report.add_time(stage, time.perf_counter() - start)
            return
        report.add_time(stage, time.perf_counter() - start)
        yield item


def batched(items: Iterable[Document], size: int) -> Iterator[List[Document]]:
    """``items`` in lists of ``size`` (the last one shorter).

    Args:
        items: the documents, a list or a generator.
        size: the batch size.

    Yields:
        Each batch, in order.
    """
    iterator = iter(items)
    while True:
        batch = list(itertools.islice(iterator, size))
        if not batch:
            return
        yield batch


def upsert_plan(
    documents: Sequence[Document], stored_hash: Callable[[str], Optional[str]]
) -> Tuple[List[Document], List[Document], int]:
    """Split a batch into ``(new, changed, unchanged count)`` by document id and hash.

    Empty documents are left out (nothing to index); a document id twice in one batch keeps
    its last version.

    Args:
        documents: the batch.
        stored_hash: the stored hash of a document id, ``None`` for a document not stored.

    Returns:
        ``(new documents, changed documents, number of unchanged documents)``.
    """
    latest: Dict[str, Document] = {}
    for doc in documents:
        if doc.text.strip():
            latest[doc.doc_id] = doc
    new: List[Document] = []
    changed: List[Document] = []
    unchanged = 0
    for doc_id, doc in latest.items():
        previous = stored_hash(doc_id)
        if previous is None:
            new.append(doc)
        elif previous != doc.hash:
            changed.append(doc)
        else:
            unchanged += 1
    return new, changed, unchanged


class Checkpointer:
    """Calls ``save`` when at least ``every_seconds`` have passed since the last save (never
    when ``every_seconds`` is None), so an interrupted ingestion resumes from there."""

    def __init__(self, save: Optional[Callable[[], Any]], every_seconds: Optional[float]) -> None:
        self._save, self._every = save, every_seconds
        self._last = time.monotonic()

    def maybe_save(self) -> bool:
        if self._save is None or self._every is None or time.monotonic() - self._last < self._every:
            return False
        self._save()
        self._last = time.monotonic()
        return True


def parse_shard(text: str) -> Tuple[int, int]:
    """``"2/3"`` -> ``(2, 3)``: the second of three shards (numbered from 1).

    Args:
        text: ``"I/N"``.

    Returns:
        ``(I, N)``.

    Raises:
        InvalidSettingError: when ``text`` is not ``I/N`` with ``1 <= I <= N``.
    """
    index, _, count = str(text).partition("/")
    if not (index.strip().isdigit() and count.strip().isdigit()) or not 1 <= int(index) <= int(count):
        raise InvalidSettingError("shard", f"{text!r} is not I/N with 1 <= I <= N (e.g. 2/3: the second of three)")
    return int(index), int(count)


def in_shard(relative_path: str, shard: Tuple[int, int]) -> bool:
    """Whether the file at ``relative_path`` (below the ingested folder, '/'-separated) belongs
    to ``shard`` ``(i, n)``. A hash of the path, not of the listing's order: every machine
    splits the same folder the same way, and a file keeps its shard when others come or go.

    Args:
        relative_path: the file's path below the ingested folder, '/'-separated.
        shard: ``(i, n)``, the i-th of n shards (numbered from 1).

    Returns:
        True when the file belongs to the shard.
    """
    index, count = shard
    digest = hashlib.sha256(relative_path.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % count == index - 1


def file_stat(path: Any) -> Optional[List[int]]:
    """``[size, mtime_ns]`` of a file, ``None`` when there is no such file: what a folder
    re-ingestion compares to leave an unchanged file unread.

    Args:
        path: the file's path.

    Returns:
        ``[size, mtime_ns]``, or ``None``.
    """
    try:
        stat = Path(path).stat() if path else None
    except OSError:
        return None
    return None if stat is None else [int(stat.st_size), int(stat.st_mtime_ns)]
