"""Question sets with gold evidence: one format for ``hiqa eval`` and every benchmark.

A dataset is a list of `EvalQuestion`, each naming its gold evidence as
[`GoldEvidence`][llama_index_hiqa.evaluation.datasets.GoldEvidence] items: a document and, where known, a page (from 0), a passage id,
a section heading, or an evidence text. The pack reads its own JSONL format (the demo's
``questions.jsonl``) and a folder of documents ([`load_documents_folder`][llama_index_hiqa.evaluation.datasets.load_documents_folder])::

    {"id": "q1", "question": "...", "answer": "...",
     "gold": [{"document_id": "NX-2040", "section": "4 Specifications", "page": 1}]}

Loaders of public benchmarks (FinanceBench, MuSiQue, HotpotQA) live with the benchmarks that
use them, outside the package, and convert to these classes.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from llama_index.core.schema import Document

from llama_index_hiqa import schema
from llama_index_hiqa.errors import DocumentReadError, EvaluationInputError
from llama_index_hiqa.readers.pdf import PDFLayoutReader


@dataclass(frozen=True)
class GoldEvidence:
    document_id: str
    page: Optional[int] = None
    passage_id: Optional[str] = None
    section: Optional[str] = None
    text: Optional[str] = None


@dataclass
class EvalQuestion:
    id: str
    question: str
    gold: List[GoldEvidence]
    answer: Optional[str] = None
    meta: Dict[str, Any] = field(default_factory=dict)

    @property
    def gold_documents(self) -> List[str]:
        return list(dict.fromkeys(g.document_id for g in self.gold))

    def to_json(self) -> Dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "answer": self.answer,
            "gold": [{k: v for k, v in asdict(g).items() if v is not None} for g in self.gold],
            **({"meta": self.meta} if self.meta else {}),
        }


def read_jsonl(path: Path) -> Iterator[Dict[str, Any]]:
    """The rows of a JSON Lines file (gzip-compressed when its name ends in ``.gz``).

    Args:
        path: the file.

    Yields:
        One dict a non-blank line.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def load_questions_jsonl(path: Path) -> List[EvalQuestion]:
    """Questions in the pack's own format (see the module docstring).

    Args:
        path: the JSONL file (``.gz`` allowed).

    Returns:
        The questions, in file order.

    Raises:
        ValueError: a question has no gold evidence (names the file and the question).
    """
    questions = []
    for row in read_jsonl(Path(path)):
        gold = [GoldEvidence(**g) for g in row.get("gold", [])]
        if not gold:
            raise ValueError(f"{path}: question {row.get('id')!r} has no gold evidence")
        questions.append(
            EvalQuestion(str(row["id"]), row["question"], gold, row.get("answer"), row.get("meta", {}))
        )
    return questions


def write_questions_jsonl(questions: List[EvalQuestion], path: Path) -> None:
    """Write questions in the pack's own format, one JSON object a line.

    Args:
        questions: the questions.
        path: the file to write (replaced).
    """
    with open(path, "w", encoding="utf-8") as handle:
        for q in questions:
            handle.write(json.dumps(q.to_json(), ensure_ascii=False) + "\n")


# --- a folder of documents (``hiqa eval --docs DIR``) -----------------------------------

TEXT_SUFFIXES = (".md", ".markdown", ".txt")
PDF_SUFFIXES = (".pdf",)


def load_documents_folder(folder: Path) -> List[Document]:
    """One LlamaIndex ``Document`` per PDF/Markdown/text file of ``folder`` (recursively).

    ``README*`` files are skipped. ``DOCUMENT_ID`` is the file name without suffix (what gold
    ``document_id`` names). PDFs are read with the pack's ``PDFLayoutReader`` (page spans
    kept, so page gold works).

    Args:
        folder: the documents' folder.

    Returns:
        The documents, in file-name order.

    Raises:
        EvaluationInputError: the folder is missing or holds no .pdf/.md/.txt file.
        DocumentReadError: a file is unreadable or has no text (names the file).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise EvaluationInputError(f"documents folder not found: {folder}")
    # A folder's README describes the corpus; it is not one of its documents.
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.suffix.lower() in TEXT_SUFFIXES + PDF_SUFFIXES and not p.name.lower().startswith("readme")
    )
    if not files:
        raise EvaluationInputError(f"{folder}: no .pdf/.md/.txt files")
    documents: List[Document] = []
    for path in files:
        meta: Dict[str, Any] = {schema.DOCUMENT_ID: path.stem, schema.DOCUMENT_TITLE: path.stem}
        if path.suffix.lower() in TEXT_SUFFIXES:
            text = path.read_text(encoding="utf-8", errors="replace")
        else:
            documents.extend(PDFLayoutReader().load_data(path))  # raises DocumentReadError
            continue
        if not text.strip():
            raise DocumentReadError(path, "no text")
        doc = Document(text=text, id_=path.stem, metadata=meta)
        schema.hide_from_views(doc)
        documents.append(doc)
    return documents
