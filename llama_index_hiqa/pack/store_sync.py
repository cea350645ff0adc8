"""The store follows the folder: documents whose files left it are removed (``hiqa ingest --sync``).

``hiqa ingest --add`` adds new files and replaces changed ones but cannot see a deleted file;
its document stayed searchable and answers kept citing it. [`prune_missing`][llama_index_hiqa.pack.store_sync.prune_missing] lists the
folder the way the reader does (same document ids) and removes every indexed document that
is not among them. A file still in the folder but unreadable this time keeps its indexed
version: it was not removed, only not read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List, Set

from llama_index_hiqa.errors import EmptyCorpusError, PathAccessError
from llama_index_hiqa.readers._collection import plan_folder
from llama_index_hiqa.readers.pdf import SUPPORTED_SUFFIXES, PDFLayoutReader

if TYPE_CHECKING:
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack


def folder_document_ids(folder: Path, recursive: bool = False) -> Set[str]:
    """The document ids the reader gives the files of ``folder`` (read or not).

    A folder (or, with ``recursive``, a subfolder) that cannot be listed is a
    [`PathAccessError`][llama_index_hiqa.errors.PathAccessError]: its files are unknown, not gone, and
    taking them for gone would remove their documents.

    Args:
        folder: the folder.
        recursive: include its subfolders.

    Returns:
        The document ids.

    Raises:
        PathAccessError: when a folder cannot be listed.
    """
    follow = bool(PDFLayoutReader.model_fields["follow_symlinks"].default)
    plan = plan_folder(Path(folder), SUPPORTED_SUFFIXES, recursive, follow)
    for skipped in plan.skipped:
        if Path(skipped.path).is_dir() or "cannot list" in skipped.reason:
            raise PathAccessError(skipped.path, f"{skipped.reason}; nothing was removed (--sync needs to list every file)")
    return {planned.document_id for planned in plan.files}


def prune_missing(pack: HiQAPack, folder: Path, recursive: bool = False) -> List[str]:
    """Remove from ``pack`` every document whose file is not in ``folder``; returns their ids.
    A folder that lists no document at all removes nothing (an
    [`EmptyCorpusError`][llama_index_hiqa.errors.EmptyCorpusError]): emptying a store is ``--rebuild`` or
    ``hiqa delete``, never the side effect of an unmounted or mistyped folder.

    Args:
        pack: the pack.
        folder: the folder the pack was ingested from.
        recursive: include its subfolders.

    Returns:
        The removed document ids.

    Raises:
        EmptyCorpusError: when the folder lists no document (nothing is removed).
        PathAccessError: when a folder cannot be listed (nothing is removed).
    """
    present = folder_document_ids(folder, recursive)
    if not present:
        raise EmptyCorpusError(folder, [f"{folder}: --sync would remove all {len(pack.document_ids)} documents; nothing was removed"])
    gone = [document_id for document_id in pack.document_ids if document_id not in present]
    for document_id in gone:
        pack.delete_document(document_id)
    return gone
