"""Loaders of the public benchmark data in ../shared/data (FinanceBench; MuSiQue and HotpotQA
from HippoRAG), for the benchmarks of this folder. They are not part of the package: they read
files only this project's benchmark machines have, and convert them to the package's own
question format (:mod:`llama_index_hiqa.evaluation.datasets`) and evaluation corpora
(:class:`llama_index_hiqa.evaluation.corpus.Corpus`).

The files are never copied into the project: :func:`shared_data_dir` finds them
(``$HIQA_DATA_DIR``, else ``../shared/data`` beside the project) and returns ``None`` when they
are absent, so benchmarks can skip with a clear message.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

from llama_index.core.schema import BaseNode

from llama_index_hiqa import schema
from llama_index_hiqa.evaluation.corpus import Corpus, document, documents_from_pages
from llama_index_hiqa.evaluation.datasets import (  # noqa: F401 (one import for the benchmarks)
    EvalQuestion,
    GoldEvidence,
    load_documents_folder,
    load_questions_jsonl,
    read_jsonl,
    write_questions_jsonl,
)

DATA_DIR_ENV = "HIQA_DATA_DIR"
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Optional[Path]:
    """The public benchmark data: ``$HIQA_DATA_DIR`` or ``../shared/data``; ``None`` if absent."""
    candidates = [os.environ.get(DATA_DIR_ENV), PROJECT_ROOT.parent / "shared" / "data"]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


# --- FinanceBench ---------------------------------------------------------------------


def financebench_dir(root: Optional[Path] = None) -> Optional[Path]:
    root = root or shared_data_dir()
    path = root / "financebench" if root else None
    return path if path and path.is_dir() else None


def first_financebench_pdfs(count: int, root: Optional[Path] = None) -> Optional[List[Path]]:
    """The first ``count`` FinanceBench PDFs by file name, None without the data (printed as SKIP)."""
    folder = financebench_dir(root)
    if folder is None:
        print("SKIP: FinanceBench not found (set HIQA_DATA_DIR)")
        return None
    return sorted((folder / "pdfs").glob("*.pdf"))[:count]


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


# --- evaluation corpora ------------------------------------------------------------------


def financebench_corpus(root: Optional[Path] = None, fixed_chunks: Optional[List[BaseNode]] = None) -> Corpus:
    """FinanceBench: one Markdown document per filing (pymupdf4llm pages), page gold.

    Every filing, and every given fixed chunk, is titled the way a person names it
    (``"3M 2018 10-K"``, :func:`financebench_filing_titles`): the title is what the
    HCA cascade starts with and where the keyword route finds company, year and filing type.
    On fixed chunks the title stays hidden bookkeeping, so their embedded text is unchanged.
    """
    titles = financebench_filing_titles(root)
    documents = documents_from_pages(load_financebench_pages(root, markdown=True))
    for node in [*documents, *(fixed_chunks or [])]:
        doc_id = node.metadata[schema.DOCUMENT_ID]
        node.metadata[schema.DOCUMENT_TITLE] = titles.get(doc_id, doc_id)
    return Corpus("financebench", documents, load_financebench_questions(root), fixed_chunks=fixed_chunks)


def multihop_corpus(name: str, root: Optional[Path] = None) -> Corpus:
    """MuSiQue or HotpotQA: every passage a document titled by its Wikipedia title."""
    docs = [
        document(row["text"], row["id"], row["title"])
        for row in load_multihop_corpus(name, root)
    ]
    return Corpus(name, docs, load_multihop_questions(name, root), passages=True)
