"""Documents of other readers read again from their files, with the layout facts the parsers use.

HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA" (Chen et al.),
§Markdown Formatter) cuts a document into chapter segments from its visible structure.
LlamaIndex's ``SimpleDirectoryReader`` keeps none of it: a PDF becomes one ``Document`` per page
(with ``llama-index-readers-file``) or, without that package, the file's bytes decoded as text,
and neither has page spans or heading layout facts (``schema.PAGE_SPANS``,
``schema.LAYOUT_HEADINGS``). Both name their file (``schema.FILE_PATH``), so the segment parsers
read that file again with `PDFLayoutReader`, once per file
however many documents name it, and cut the segments, with the document ids, that
``PDFLayoutReader``'s own documents give.

>>> reading = read_source_files(SimpleDirectoryReader("manuals/").load_data())
>>> reading.documents      # one PDFLayoutReader document per file, the rest as given
>>> reading.unread         # documents without layout facts that could not be read again
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from llama_index.core.schema import Document

from llama_index_hiqa import schema
from llama_index_hiqa.errors import DocumentReadError
from llama_index_hiqa.readers.pdf import SUPPORTED_SUFFIXES, PDFLayoutReader

if TYPE_CHECKING:
    from llama_index_hiqa.readers.pdf import PDFLayoutReader

# Written per page by LlamaIndex's PDF readers: not a fact of the whole file.
PER_PAGE_KEYS = ("page_label",)


@dataclass
class SourceReading:
    """What `read_source_files` made of a list of documents."""

    documents: List[Document]
    """In the input's order: each file read again in place of its first document (its other
    documents dropped), every other document as given."""
    unread: List[Document] = field(default_factory=list)
    """Documents without layout facts left as given, in order."""
    reasons: Dict[str, str] = field(default_factory=dict)
    """Why each unread document was not read again, by document id."""


def has_layout_facts(document: Document) -> bool:
    """Whether a document carries the page spans a pack reader writes.

    Args:
        document: the document.

    Returns:
        ``True`` when ``schema.PAGE_SPANS`` is set (every document of the pack's readers).
    """
    return schema.PAGE_SPANS in document.metadata


def read_source_files(documents: Sequence[Document], reader: Optional["PDFLayoutReader"] = None) -> SourceReading:
    """Read again, with ``PDFLayoutReader``, the files that documents without layout facts name.

    Documents of one file (``SimpleDirectoryReader``'s pages) give one document, read once, with
    the id ``PDFLayoutReader`` gives it in a folder load (the file stem unless two files share
    it). The metadata every document of the file shares and the reader does not write (the
    file's size and dates, a ``file_metadata`` of the user) is kept, hidden from the views where
    it was hidden.

    Args:
        documents: the documents, in order.
        reader: the ``PDFLayoutReader`` to read with; ``None``: one with the default settings.

    Returns:
        The documents to parse, and those without layout facts that stay as given (no
            ``file_path``, a file that is gone, a type the reader does not read, a read error).
    """
    groups: Dict[Path, List[int]] = {}
    reasons: Dict[str, str] = {}
    for index, doc in enumerate(documents):
        if has_layout_facts(doc):
            continue
        named = doc.metadata.get(schema.FILE_PATH)
        if not named:
            reasons[doc.doc_id] = "no file_path metadata"
            continue
        path = Path(str(named))
        if path.suffix.lower() not in SUPPORTED_SUFFIXES:
            reasons[doc.doc_id] = f"{path.name}: a type PDFLayoutReader does not read"
        elif not path.is_file():
            reasons[doc.doc_id] = f"{path}: no such file"
        else:
            groups.setdefault(path.resolve(), []).append(index)
    read: Dict[Path, Document] = {}
    if groups:
        reader = reader if reader is not None else PDFLayoutReader(log_skipped=False)
        for doc in reader.load_data(list(groups)):
            read[Path(doc.metadata[schema.FILE_PATH]).resolve()] = doc
        failed: Dict[Path, DocumentReadError] = {Path(e.path).resolve(): e for e in reader.failures}
        for path, indices in groups.items():
            if path not in read:
                error = failed.get(path)
                for i in indices:
                    reasons[documents[i].doc_id] = str(error) if error else f"{path}: not read"
    replaced_at: Dict[int, Document] = {}
    dropped = set()
    for path, indices in groups.items():
        if path in read:
            replaced_at[indices[0]] = _with_shared_metadata(read[path], [documents[i] for i in indices])
            dropped.update(indices[1:])
    out = [replaced_at.get(i, doc) for i, doc in enumerate(documents) if i not in dropped]
    unread = [doc for doc in documents if doc.doc_id in reasons]
    return SourceReading(out, unread, reasons)


def _with_shared_metadata(document: Document, originals: Sequence[Document]) -> Document:
    """``document`` with the metadata all ``originals`` share that the reader did not write,
    each key hidden from the views the originals hid it from."""
    first = originals[0]
    for key, value in first.metadata.items():
        if key in document.metadata or key in PER_PAGE_KEYS:
            continue
        if all(other.metadata.get(key) == value for other in originals[1:]):
            document.metadata[key] = value
            for source, target in (
                (first.excluded_embed_metadata_keys, document.excluded_embed_metadata_keys),
                (first.excluded_llm_metadata_keys, document.excluded_llm_metadata_keys),
            ):
                if key in source and key not in target:
                    target.append(key)
    return document
