"""The pack's ingestion: documents in batches through the stages into its store backend.

[`PackIngestion`][llama_index_hiqa.pack.ingest.PackIngestion] holds the methods of [`HiQAPack`][llama_index_hiqa.pack.hiqa_pack.HiQAPack] that fill and
update it (read → parse → cascade → keywords → embed → index, upserts by document hash, files
left unread when their size and time are unchanged); each batch is written by the pack's store
backend as one unit (``StoreBackend.write_batch``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Sized, Tuple, Union

from llama_index.core.schema import BaseNode, Document

from llama_index_hiqa import schema
from llama_index_hiqa.errors import EmptyCorpusError, UnknownNodeError
from llama_index_hiqa.pack.ingestion import (
    Checkpointer, IngestionReport, batched, file_stat, in_shard, timed_iter, upsert_plan,
)
from llama_index_hiqa.pack.workers import batch_runner
from llama_index_hiqa.pack.arguments import checked_documents
from llama_index_hiqa.progress import status
from llama_index_hiqa.readers.source_files import read_source_files


class PackIngestion:
    """The ingestion half of [`HiQAPack`][llama_index_hiqa.pack.hiqa_pack.HiQAPack] (which inherits it): every
    method here reads and writes through ``self.backend``."""

    backend: Any
    config: Any
    llm: Any
    embed_model: Any
    read_failures: List[Any]
    file_stats: Dict[str, List[int]]
    node_count: int
    _invalidate: Callable[[], None]  # drops the pack's cached retriever and post-processors
    _keyword_extractor: Callable[[], Any]  # the pack's, for its settings

    def _reader(self, recursive: bool) -> Any:
        from llama_index_hiqa.readers.pdf import PDFLayoutReader

        return PDFLayoutReader(
            recursive=recursive, show_progress=self.config.show_progress,
            detect_unruled_tables=self.config.detect_unruled_tables,
        )

    def ingest(
        self,
        documents: Iterable[Document],
        batch_size: Optional[int] = None,
        checkpoint: Optional[Callable[[], Any]] = None,
        checkpoint_seconds: Optional[float] = None,
        progress: Optional[Callable[[IngestionReport], Any]] = None,
        report: Optional[IngestionReport] = None,
    ) -> IngestionReport:
        """Index ``documents`` a batch at a time (read → parse → cascade → keywords → embed →
        index); returns what was added, replaced or left unchanged and the time per stage.

        A document whose id (``Document.doc_id``; the reader's is stable per file) is already
        indexed with the same hash is skipped; with another hash its old nodes are replaced.
        ``checkpoint`` (e.g. ``lambda: pack.persist(store)``) is called every
        ``checkpoint_seconds`` so an interrupted run resumes where it was; ``progress`` gets
        the running report after every batch; ``report`` (filled and returned) lets a caller
        watch the running stage (``report.running_line()``) inside a long batch.

        Args:
            documents: LlamaIndex Documents, a list or a generator.
            batch_size: Documents a batch (``ingest_batch_size`` when ``None``).
            checkpoint: Called every ``checkpoint_seconds`` (e.g. ``lambda: pack.persist(store)``).
            checkpoint_seconds: The interval between checkpoints.
            progress: Called with the running report after every batch.
            report: The report to fill (a new one when ``None``).

        Returns:
            What was added, replaced or left unchanged, and the time per stage.
        """
        report = report if report is not None else IngestionReport()
        saver = Checkpointer(checkpoint, checkpoint_seconds)
        planned = self._planned_batches(checked_documents(documents), batch_size, report)
        runner = batch_runner(
            self.config.ingest_workers, self.config, self.llm, self.embed_model, report,
            keywords=self._keyword_extractor(),
        )
        from tqdm.auto import tqdm

        # One bar over the whole run (the per-batch bars of LlamaIndex's stages restart each
        # batch): documents indexed or found unchanged, with the run's ETA.
        total = report.documents_planned
        if total is None and isinstance(documents, Sized):  # a list of documents; a generator has no total
            total = len(documents)
        bar = tqdm(total=total, desc="indexing", unit="doc", disable=not self.config.show_progress)
        with self.backend.bulk_writes(), runner, bar:  # PostgreSQL: HNSW built once after a load
            for fresh, nodes in runner(planned):
                if fresh:
                    # Decided at write time: with workers, a document read twice may still be
                    # in flight when its first version's batch was planned.
                    replaced = [doc.doc_id for doc in fresh if self.backend.document_hash(doc.doc_id) is not None]
                    with report.running("index", len(nodes)):
                        report.nodes_removed += self._write_batch(fresh, replaced, nodes)
                    report.documents_added += len(fresh) - len(replaced)
                    report.documents_replaced += len(replaced)
                    report.nodes_added += len(nodes)
                    report.node_ids += [n.node_id for n in nodes]
                    self._invalidate()
                del fresh, nodes  # the batch's documents and layout facts go here
                bar.update(report.documents_seen - bar.n)
                if progress is not None:
                    progress(report)
                saver.maybe_save()
        return report

    def _planned_batches(
        self, documents: Iterable[Document], batch_size: Optional[int], report: IngestionReport
    ) -> Iterator[List[Document]]:
        """The new and changed documents of each batch read (an empty list for a batch with
        none), the unchanged ones counted and left out."""
        for batch in batched(timed_iter(documents, report), batch_size or self.config.ingest_batch_size):
            # Another reader's documents (SimpleDirectoryReader's pages) are planned as the files
            # the segment parsers will read, under the files' stable ids: added again, they
            # are unchanged rather than a second copy under new random ids.
            batch = read_source_files(batch).documents
            new, changed, unchanged = upsert_plan(batch, self.backend.document_hash)
            report.documents_unchanged += unchanged
            report.empty_documents += [
                str(d.metadata.get(schema.FILE_NAME) or d.doc_id) for d in batch if not d.text.strip()
            ]
            for doc in batch:
                stat = file_stat(doc.metadata.get(schema.FILE_PATH))
                if stat is not None:
                    self.file_stats[doc.doc_id] = stat
            yield new + changed

    def _write_batch(self, documents: Sequence[Document], replaced: Sequence[str], nodes: Sequence[BaseNode]) -> int:
        """Index one batch's ``nodes`` in place of the documents ``replaced`` (ids of earlier
        versions), one unit of the store; returns the number of nodes removed."""
        return self.backend.write_batch(documents, replaced, nodes)

    def add_documents(self, documents: Iterable[Document]) -> List[BaseNode]:
        """Index ``documents`` (replacing earlier versions of the same ids); returns the new
        nodes. The BM25, keyword and graph indexes follow on the next question.

        Args:
            documents: LlamaIndex Documents.

        Returns:
            The new nodes.
        """
        report = self.ingest(documents)
        return list(self.index.docstore.get_nodes(report.node_ids)) if report.node_ids else []

    def add_directory(
        self, path: Union[str, Path], recursive: bool = False, shard: Optional[Tuple[int, int]] = None,
        **ingest_kwargs: Any,
    ) -> IngestionReport:
        """[`ingest`][llama_index_hiqa.pack.ingest.PackIngestion.ingest] every readable file of a folder. A file whose size and modification
        time are those it had when it was indexed is not even read; another with an unchanged
        document hash is read but costs no parsing or embedding. ``shard=(i, n)`` ingests only
        the i-th of n shards of the folder's files (split by a hash of each file's path, so
        several machines writing one database can share a folder).

        Args:
            path: The folder.
            recursive: Read its subfolders too.
            shard: ``(i, n)``: only the i-th of n shards of the files.
            **ingest_kwargs: [`ingest`][llama_index_hiqa.pack.ingest.PackIngestion.ingest]'s options.

        Returns:
            The ingestion report.

        Raises:
            EmptyCorpusError: Nothing in the folder is readable.
        """
        from llama_index_hiqa.readers._collection import plan_folder
        from llama_index_hiqa.readers.pdf import SUPPORTED_SUFFIXES

        reader = self._reader(recursive)
        root = Path(path)
        resolved_root = root.resolve()  # once: every file's shard is its path below the folder
        report = ingest_kwargs.pop("report", None) or IngestionReport()
        if root.is_dir():  # else the reader raises its typed error for the path
            # The reader lists the folder again as it reads; a listing costs little next to reading.
            files = plan_folder(root, SUPPORTED_SUFFIXES, recursive, reader.follow_symlinks).files
            status(f"reading {len(files)} file(s) from {root}" + (f" (shard {shard[0]}/{shard[1]})" if shard else ""))
            if report.documents_planned is None and shard is None:
                report.documents_planned = len(files)

        def unchanged(document_id: str, file: Path) -> bool:
            if shard is not None and not in_shard(Path(os.path.relpath(Path(file).resolve(), resolved_root)).as_posix(), shard):
                return True  # another shard's file: not read, not counted
            same = (
                self.file_stats.get(document_id) == file_stat(file)
                and self.backend.document_hash(document_id) is not None
            )
            if same:  # counted as it is passed, so the progress lines and bar include it
                report.documents_unchanged += 1
            return same

        self.ingest(reader.lazy_load_data(root, skip=unchanged), report=report, **ingest_kwargs)
        self.read_failures = list(reader.failures)
        # A shard may hold no file of a small folder; the folder is empty only if it has no shard.
        if not self.node_count and (shard is None or reader.failures):
            raise EmptyCorpusError(path, reader.failures)
        return report

    def delete_document(self, document_id: str) -> int:
        """Remove a document (its ``schema.DOCUMENT_ID``, e.g. the file stem, or its
        ``Document.doc_id``) from every index.

        Args:
            document_id: The document's id or ref doc id.

        Returns:
            The number of nodes removed.

        Raises:
            UnknownNodeError: No indexed document has that id.
        """
        documents = self._documents()
        ref_ids = list(dict.fromkeys(ref for doc_id, ref in documents.items() if document_id in (doc_id, ref)))
        if not ref_ids:
            raise UnknownNodeError(f"no indexed document {document_id!r}; known: {sorted(documents)[:10]}")
        removed = sum(self.backend.remove_document(ref_id) for ref_id in ref_ids)
        self._invalidate()
        return removed


__all__ = ["PackIngestion"]
