"""Question sets with gold evidence: one format for every benchmark and ``hiqa eval``.

A dataset is a list of :class:`EvalQuestion`, each naming its gold evidence as
:class:`GoldEvidence` items: a document and, where known, a page (from 0), a passage id,
a section heading, or an evidence text. Loaders read the public benchmarks of
``../shared/data`` (FinanceBench; MuSiQue and HotpotQA from HippoRAG) and the pack's own
JSONL format (``examples/data/questions.jsonl``)::

    {"id": "q1", "question": "...", "answer": "...",
     "gold": [{"document_id": "NX-2040", "section": "4 Specifications", "page": 1}]}

The files themselves are never copied into the project: :func:`shared_data_dir` finds them
(``$HIQA_DATA_DIR``, else ``../shared/data`` beside the project) and returns ``None`` when
they are absent, so benchmarks can skip with a clear message.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.schema import Document

DATA_DIR_ENV = "HIQA_DATA_DIR"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


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


def shared_data_dir() -> Optional[Path]:
    """The public benchmark data: ``$HIQA_DATA_DIR`` or ``../shared/data``; ``None`` if absent."""
    candidates = [os.environ.get(DATA_DIR_ENV), PROJECT_ROOT.parent / "shared" / "data"]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


def read_jsonl(path: Path) -> Iterator[Dict[str, Any]]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def load_questions_jsonl(path: Path) -> List[EvalQuestion]:
    """The pack's own format (see the module docstring)."""
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
    with open(path, "w", encoding="utf-8") as handle:
        for q in questions:
            handle.write(json.dumps(q.to_json(), ensure_ascii=False) + "\n")


# --- FinanceBench ---------------------------------------------------------------------


def financebench_dir(root: Optional[Path] = None) -> Optional[Path]:
    root = root or shared_data_dir()
    path = root / "financebench" if root else None
    return path if path and path.is_dir() else None


def load_financebench_questions(root: Optional[Path] = None) -> List[EvalQuestion]:
    """The questions whose evidence filings are all available (86 of 95); gold = (filing, page)."""
    folder = financebench_dir(root)
    if folder is None:
        raise FileNotFoundError("FinanceBench data not found (set HIQA_DATA_DIR)")
    questions = []
    for row in read_jsonl(folder / "questions.jsonl"):
        if not row.get("all_evidence_docs_available"):
            continue
        gold = [
            GoldEvidence(document_id=e["doc_name"], page=int(e["page"]), text=e.get("evidence_text"))
            for e in row["gold_evidence"]
        ]
        questions.append(
            EvalQuestion(
                id=row["financebench_id"],
                question=row["question"],
                gold=gold,
                answer=row.get("answer"),
                meta={
                    "company": row.get("company"),
                    "doc_name": row.get("doc_name"),
                    "doc_type": row.get("doc_type"),
                    "doc_period": row.get("doc_period"),
                    "question_type": row.get("question_type"),
                },
            )
        )
    return questions


def load_financebench_documents(root: Optional[Path] = None) -> List[Dict[str, Any]]:
    """Rows of ``documents.jsonl`` for the filings whose PDF is present."""
    folder = financebench_dir(root)
    if folder is None:
        raise FileNotFoundError("FinanceBench data not found (set HIQA_DATA_DIR)")
    return [row for row in read_jsonl(folder / "documents.jsonl") if row.get("available")]


_FILING_TYPE_LABEL = {"10k": "10-K", "10q": "10-Q", "8k": "8-K", "earnings": "Earnings"}
# Other names the FinanceBench questions use for a company: what a user of their own corpus
# would give CriticalKeywordExtractor as keyword_aliases.
FINANCEBENCH_COMPANY_ALIASES = {"AMEX": "American Express", "JnJ": "Johnson & Johnson", "J&J": "Johnson & Johnson"}


def financebench_filing_titles(root: Optional[Path] = None) -> Dict[str, str]:
    """Readable title per filing, ``"3M_2018_10K"`` -> ``"3M 2018 10-K"`` (with the quarter
    of earnings releases: ``"Amcor Q4 2023 Earnings"``), from ``documents.jsonl``."""
    titles = {}
    for row in load_financebench_documents(root):
        match = re.search(r"_(\d{4})(Q[1-4])?_", row["doc_name"] + "_")
        year = match.group(1) if match else str(row["doc_period"])
        quarter = f"{match.group(2)} " if match and match.group(2) else ""
        label = _FILING_TYPE_LABEL.get(str(row["doc_type"]).lower(), str(row["doc_type"]))
        titles[row["doc_name"]] = f"{row['company']} {quarter}{year} {label}"
    return titles


def financebench_companies(root: Optional[Path] = None) -> List[str]:
    """The companies of the available filings, sorted (expert keywords for the benchmarks)."""
    return sorted({row["company"] for row in load_financebench_documents(root)})


def load_financebench_pages(root: Optional[Path] = None, markdown: bool = False) -> List[Dict[str, Any]]:
    """``{doc_name, page, text}`` per page (``markdown=True``: pymupdf4llm Markdown as ``text``)."""
    folder = financebench_dir(root)
    if folder is None:
        raise FileNotFoundError("FinanceBench data not found (set HIQA_DATA_DIR)")
    name = "pages_markdown.jsonl.gz" if markdown else "pages_text.jsonl.gz"
    pages = []
    for row in read_jsonl(folder / name):
        text = row.get("markdown") if markdown else row.get("text")
        pages.append({"doc_name": row["doc_name"], "page": int(row["page"]), "text": text or ""})
    return pages


# --- MuSiQue / HotpotQA (HippoRAG's closed corpora) -------------------------------------


def multihop_dir(root: Optional[Path] = None) -> Optional[Path]:
    root = root or shared_data_dir()
    path = root / "multihop_wiki" if root else None
    return path if path and path.is_dir() else None


def load_multihop_corpus(name: str, root: Optional[Path] = None) -> List[Dict[str, Any]]:
    """``{id, title, text}`` passages of ``musique`` or ``hotpotqa``."""
    folder = multihop_dir(root)
    if folder is None:
        raise FileNotFoundError("multi-hop data not found (set HIQA_DATA_DIR)")
    return list(read_jsonl(folder / f"{name}_corpus.jsonl"))


def load_multihop_questions(name: str, root: Optional[Path] = None) -> List[EvalQuestion]:
    """Questions with their gold passages; ``document_id`` of the gold is the passage id."""
    folder = multihop_dir(root)
    if folder is None:
        raise FileNotFoundError("multi-hop data not found (set HIQA_DATA_DIR)")
    questions = []
    for row in read_jsonl(folder / f"{name}_questions.jsonl"):
        gold = [GoldEvidence(document_id=pid, passage_id=pid) for pid in row["gold_passage_ids"]]
        meta = {k: row[k] for k in ("n_hops", "type", "level", "gold_titles") if k in row}
        questions.append(EvalQuestion(row["id"], row["question"], gold, row.get("answer"), meta))
    return questions


# --- a folder of documents (``hiqa eval --docs DIR``) -----------------------------------

TEXT_SUFFIXES = (".md", ".markdown", ".txt")
PDF_SUFFIXES = (".pdf",)


def load_documents_folder(folder: Path) -> List["Document"]:
    """One LlamaIndex ``Document`` per PDF/Markdown/text file of ``folder`` (recursively).

    ``README*`` files are skipped. ``DOCUMENT_ID`` is the file name without suffix (what gold ``document_id`` names).
    PDFs are read with the pack's ``PDFLayoutReader`` when it is available, else page by page
    with pymupdf4llm (Markdown headings and tables), keeping ``PAGE_SPANS`` so page gold
    works. Unreadable files raise ``DocumentReadError`` naming the file.
    """
    from llama_index.core.schema import Document

    from llama_index_hiqa import schema
    from llama_index_hiqa.errors import DocumentReadError, EvaluationInputError

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
            reader_docs = _read_pdf_with_pack(path)
            if reader_docs is not None:
                documents.extend(reader_docs)
                continue
            try:
                import pymupdf4llm

                pages = pymupdf4llm.to_markdown(str(path), page_chunks=True, show_progress=False)
            except Exception as exc:  # pymupdf raises several types for bad files
                raise DocumentReadError(path, f"cannot read PDF: {exc}") from exc
            parts, spans, offset = [], [], 0
            for i, page in enumerate(pages):
                body = page.get("text") or ""
                spans.append([i, offset, offset + len(body)])
                parts.append(body)
                offset += len(body) + 2
            text = "\n\n".join(parts)
            meta[schema.PAGE_SPANS] = spans
        if not text.strip():
            raise DocumentReadError(path, "no text")
        doc = Document(text=text, id_=path.stem, metadata=meta)
        schema.hide_from_views(doc)
        documents.append(doc)
    return documents


def _read_pdf_with_pack(path: Path):
    """Documents from ``PDFLayoutReader`` when that component has landed, else ``None``."""
    try:
        import llama_index_hiqa

        reader_cls = getattr(llama_index_hiqa, "PDFLayoutReader")
    except (AttributeError, ImportError):
        return None
    return reader_cls().load_data(path)
