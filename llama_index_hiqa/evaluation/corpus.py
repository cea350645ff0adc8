"""Evaluation corpora: documents plus questions with gold evidence.

A [`Corpus`][llama_index_hiqa.evaluation.corpus.Corpus] is what [`AblationRunner`][llama_index_hiqa.evaluation.runner.AblationRunner] scores;
[`folder_corpus`][llama_index_hiqa.evaluation.corpus.folder_corpus] builds one from a folder of PDF/Markdown/text files and a questions
JSONL (``hiqa eval --docs DIR --questions FILE``). Other corpora (the public benchmarks) are
built by their own loaders with [`document`][llama_index_hiqa.evaluation.corpus.document] and [`documents_from_pages`][llama_index_hiqa.evaluation.corpus.documents_from_pages].
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from llama_index.core.schema import BaseNode, Document

from llama_index_hiqa import schema
from llama_index_hiqa.errors import EvaluationInputError
from llama_index_hiqa.evaluation.datasets import EvalQuestion, load_documents_folder, load_questions_jsonl


@dataclass
class Corpus:
    """Documents plus questions with gold evidence.

    ``documents`` carry ``schema.DOCUMENT_ID`` / ``DOCUMENT_TITLE`` and, when pages are known,
    ``schema.PAGE_SPANS``; their text is Markdown where headings are known. ``fixed_chunks``
    overrides the fixed-chunk baseline (the FinanceBench benchmark passes the shared
    ``baseline_page_chunks`` so every benchmark scores the same baseline). ``passages``: each
    document is one short passage titled by ``DOCUMENT_TITLE`` (multi-hop Wikipedia sets).
    """

    name: str
    documents: List[Document]
    questions: List[EvalQuestion]
    fixed_chunks: Optional[List[BaseNode]] = None
    passages: bool = False

    def __post_init__(self) -> None:
        if not self.questions:
            raise EvaluationInputError(f"corpus {self.name!r} has no questions")
        if not self.documents:
            raise EvaluationInputError(f"corpus {self.name!r} has no documents")


def document(text: str, doc_id: str, title: str, page_spans: Optional[Sequence[Sequence[int]]] = None) -> Document:
    """A corpus document: id and title in the schema keys (hidden from the views).

    Args:
        text: the document's text.
        doc_id: its id (``schema.DOCUMENT_ID`` and the Document's id).
        title: its title.
        page_spans (Optional[Sequence]): ``[[page, char_start, char_end], ...]``; ``None`` when
            unknown.

    Returns:
        The Document.
    """
    meta: Dict[str, Any] = {schema.DOCUMENT_ID: doc_id, schema.DOCUMENT_TITLE: title}
    if page_spans:
        schema.set_page_spans(meta, page_spans)
    doc = Document(text=text, id_=doc_id, metadata=meta)
    schema.hide_from_views(doc)
    return doc


def documents_from_pages(pages: Sequence[Dict[str, Any]]) -> List[Document]:
    """One Document per ``doc_name`` from ``{doc_name, page, text}`` rows, with page spans.

    Args:
        pages: the rows, any order (pages are joined in page order, by a blank line).

    Returns:
        One Document a ``doc_name``, in first-seen order.
    """
    by_doc: Dict[str, List[Dict[str, Any]]] = {}
    for row in pages:
        by_doc.setdefault(row["doc_name"], []).append(row)
    documents = []
    for name, rows in by_doc.items():
        parts, spans, offset = [], [], 0
        for row in sorted(rows, key=lambda r: r["page"]):
            text = row["text"] or ""
            spans.append([int(row["page"]), offset, offset + len(text)])
            parts.append(text)
            offset += len(text) + 2
        documents.append(document("\n\n".join(parts), name, name, spans))
    return documents


def folder_corpus(docs_dir: Path, questions_file: Path, name: Optional[str] = None) -> Corpus:
    """A corpus from a folder of PDF/Markdown/text files and a questions JSONL.

    The JSONL format is described in [`datasets`][llama_index_hiqa.evaluation.datasets].

    Args:
        docs_dir: the documents' folder.
        questions_file: the questions' JSONL file.
        name: the corpus's name; ``None``: the folder's name.

    Returns:
        The [`Corpus`][llama_index_hiqa.evaluation.corpus.Corpus].

    Raises:
        EvaluationInputError: the folder is missing or has no documents.
        DocumentReadError: a file cannot be read (names it).
    """
    return Corpus(
        name or Path(docs_dir).name,
        load_documents_folder(docs_dir),
        load_questions_jsonl(questions_file),
    )
