"""``hiqa demo``: retrieval over ten look-alike datasheets, offline, in a few seconds.

The HiQA scenario in miniature ("HiQA: A Hierarchical Contextual Augmentation RAG for
Multi-Documents QA" (Chen et al.), §Introduction: "RAG degradation in
indistinguishable multi-documents"): the package's ``demo_data`` (``examples/data`` in a
checkout) holds ten datasheets of one fictional
regulator family with identical chapters and sentences, and ``questions.jsonl`` asks about
one part at a time. The demo reads them with [`PDFLayoutReader`][llama_index_hiqa.readers.pdf.PDFLayoutReader],
chunks, indexes with the offline embedding model, retrieves for every question and prints the
evidence with document, page and section and whether the gold datasheet was found.

The pipeline is three small functions so that later components swap in one at a time:
[`build_nodes`][llama_index_hiqa.demo.build_nodes] (chunking: today ``SentenceSplitter``; later the layout parser and the
cascading metadata), [`build_retriever`][llama_index_hiqa.demo.build_retriever] (today vector top-k; later the multi-route
retriever) and [`load_demo_documents`][llama_index_hiqa.demo.load_demo_documents].
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence

from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import BaseNode, Document, NodeWithScore, TextNode

from llama_index_hiqa import schema
from llama_index_hiqa.evaluation.datasets import EvalQuestion, load_questions_jsonl
from llama_index_hiqa.models.defaults import resolve_embed_model
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from llama_index_hiqa.page_geometry import pages_for_span
from llama_index_hiqa.readers.pdf import PDFLayoutReader

# Package data, so `hiqa demo` works from an installed wheel (examples/data links here).
DEMO_DATA_DIR = Path(__file__).resolve().parent / "demo_data"


def demo_data_dir() -> Path:
    """The folder of the ten demo datasheets and their questions, inside the installed package
    (``HiQAPack.from_directory(demo_data_dir())`` works from a wheel as from a checkout)."""
    return DEMO_DATA_DIR


CHUNK_SIZE = 256  # tokens, the same baseline as the benchmarks (benchmarks/_common.py)
CHUNK_OVERLAP = 32
SNIPPET_CHARS = 90
# Every datasheet has one figure (Figure 1, the typical application circuit, in chapter 3):
# asking for it must retrieve that datasheet's image node (HiQA's answers show images).
FIGURE_QUESTION = ("Show the typical application circuit of the NX-2043", "NX-2043")
_HEADING_LINE = re.compile(r"^#{1,6} +(.+?)\s*$", re.M)


@dataclass
class DemoAnswer:
    """One question's retrieval result: the ranked evidence and where the gold document ranked."""

    question: EvalQuestion
    evidence: List[NodeWithScore]
    gold_rank: Optional[int]  # 1-based rank of the first node from a gold document, None = missed
    page_hit: bool = False  # a top-k node lies on a gold page of a gold document
    section_hit: bool = False  # a top-k node of a gold document overlaps the gold section


@dataclass
class DemoReport:
    answers: List[DemoAnswer] = field(default_factory=list)
    documents: int = 0
    nodes: int = 0
    seconds: float = 0.0
    figure: Optional[NodeWithScore] = None  # the gold datasheet's figure, when retrieved

    @property
    def hit_rate(self) -> float:
        """Share of questions whose gold document is among the retrieved evidence."""
        return sum(a.gold_rank is not None for a in self.answers) / max(1, len(self.answers))

    @property
    def top1_rate(self) -> float:
        return sum(a.gold_rank == 1 for a in self.answers) / max(1, len(self.answers))


def load_demo_documents(data_dir: Path = DEMO_DATA_DIR) -> List[Document]:
    """The demo datasheets as Documents (one per PDF).

    Args:
        data_dir: the folder of demo PDFs; by default the packaged demo corpus.

    Returns:
        One Document a PDF, in file-name order.

    Raises:
        RuntimeError: a PDF of the corpus cannot be read (the corpus is ours: a bug).
    """
    reader = PDFLayoutReader()
    documents = reader.load_data(sorted(Path(data_dir).glob("*.pdf")))
    if reader.failures:  # the corpus is ours: a failure here is a bug worth shouting about
        raise RuntimeError(f"demo corpus unreadable: {reader.failures}")
    return documents


def build_nodes(documents: Sequence[Document]) -> List[TextNode]:
    """Chunk documents into nodes carrying the shared segment facts (swap point for parsers).

    Today: ``SentenceSplitter(256, 32)``, what a LlamaIndex user has; every node gets its
    document, position, character span, pages and the heading it falls under (read from the
    reader's layout facts), so the demo can print where its evidence comes from.

    Args:
        documents: the demo documents.

    Returns:
        The chunks of every document, in order.
    """
    splitter = SentenceSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    nodes: List[TextNode] = []
    for document in documents:
        meta = document.metadata
        spans = schema.page_spans_of(meta) or [schema.PageSpan(0, 0, len(document.text))]
        headings = schema.layout_headings_of(meta)
        # SentenceSplitter makes TextNodes (the check says so to the type checker).
        chunks = [n for n in splitter.get_nodes_from_documents([document]) if isinstance(n, TextNode)]
        for position, node in enumerate(chunks):
            start = node.start_char_idx if node.start_char_idx is not None else 0
            end = node.end_char_idx if node.end_char_idx is not None else start + len(node.text)
            schema.set_segment_facts(
                node,
                document_id=meta[schema.DOCUMENT_ID],
                document_title=meta.get(schema.DOCUMENT_TITLE, meta[schema.DOCUMENT_ID]),
                position=position,
                char_span=(start, end),
                heading_path=_heading_at(document.text, headings, start, node.text),
                page_range=pages_for_span(spans, start, end),
                parse_path="text",
            )
            nodes.append(node)
    return nodes


def build_retriever(
    nodes: Sequence[TextNode], embed_model: BaseEmbedding, top_k: int
) -> BaseRetriever:
    """HiQAPack's retriever over the datasheets the nodes come from.

    The pack parses the files by their layout (LayoutMarkdownParser), prepends the heading
    cascade (CascadingMetadataTransform) and retrieves by vector + BM25 + critical keywords
    (MultiRouteRetriever); the given chunks only name the files. Nodes without a file behind
    them (hand-made in tests) get the plain vector top-k.

    Args:
        nodes: the chunks (their ``schema.FILE_PATH`` names the PDFs).
        embed_model: the embedding model.
        top_k: nodes retrieved a question.

    Returns:
        The pack's retriever, or a vector retriever over ``nodes``.
    """
    paths = sorted({n.metadata[schema.FILE_PATH] for n in nodes if n.metadata.get(schema.FILE_PATH)})
    if paths:
        documents = PDFLayoutReader().load_data(paths)
        if documents:
            pack = HiQAPack.from_documents(documents, embed_model=embed_model, similarity_top_k=top_k)
            return pack.as_retriever()
    index = VectorStoreIndex(list(nodes), embed_model=embed_model, show_progress=False)
    return index.as_retriever(similarity_top_k=top_k)


def answer_questions(
    questions: Sequence[EvalQuestion], retriever: BaseRetriever
) -> List[DemoAnswer]:
    """Retrieve for every question and where the gold datasheet, page and section ranked.

    Args:
        questions: the demo questions with their gold evidence.
        retriever: the retriever to ask.

    Returns:
        One [`DemoAnswer`][llama_index_hiqa.demo.DemoAnswer] a question, in order.
    """
    answers = []
    for question in questions:
        evidence = retriever.retrieve(question.question)
        gold_docs = set(question.gold_documents)
        gold_pages = {(g.document_id, g.page) for g in question.gold if g.page is not None}
        rank = next(
            (i + 1 for i, n in enumerate(evidence) if schema.get_document_id(n.node) in gold_docs),
            None,
        )
        page_hit = any(
            (schema.get_document_id(n.node), page) in gold_pages
            for n in evidence
            for page in _pages(n.node)
        )
        gold_sections = {(g.document_id, g.section) for g in question.gold if g.section}
        section_hit = any(
            (schema.get_document_id(n.node), section) in gold_sections
            for n in evidence
            for section in _sections(n.node)
        )
        answers.append(DemoAnswer(question, evidence, rank, page_hit, section_hit))
    return answers


def demo_report(
    top_k: int = 3,
    data_dir: Path = DEMO_DATA_DIR,
    embed_model: Optional[BaseEmbedding] = None,
) -> DemoReport:
    """Read, chunk, index and retrieve for every demo question; no printing.

    Args:
        top_k: nodes retrieved a question.
        data_dir: the folder of demo PDFs; by default the packaged corpus.
        embed_model: the embedding model; ``None``: the packaged default.

    Returns:
        A [`DemoReport`][llama_index_hiqa.demo.DemoReport]: the answers, counts of documents and nodes, seconds taken
            and the gold datasheet's figure when retrieved.
    """
    started = time.perf_counter()
    documents = load_demo_documents(data_dir)
    nodes = build_nodes(documents)
    retriever = build_retriever(nodes, resolve_embed_model(embed_model), top_k)
    questions = load_questions_jsonl(Path(data_dir) / "questions.jsonl")
    answers = answer_questions(questions, retriever)
    question, document = FIGURE_QUESTION
    figure = next(
        (hit for hit in retriever.retrieve(question)
         if schema.get_segment_kind(hit.node) == schema.KIND_IMAGE and schema.get_document_id(hit.node) == document),
        None,
    )
    return DemoReport(answers, len(documents), len(nodes), time.perf_counter() - started, figure)


def run_demo(
    top_k: int = 3,
    data_dir: Path = DEMO_DATA_DIR,
    embed_model: Optional[BaseEmbedding] = None,
    echo: Callable[[str], None] = print,
) -> int:
    """Print every question with its top evidence and whether the gold datasheet was found.

    Args:
        top_k: nodes retrieved a question.
        data_dir: the folder of demo PDFs; by default the packaged corpus.
        embed_model: the embedding model; ``None``: the packaged default.
        echo: where each output line goes.

    Returns:
        The exit status, 0.
    """
    echo(f"hiqa demo: {Path(data_dir)} (pages shown from 1)")
    report = demo_report(top_k, data_dir, embed_model)
    echo(
        f"indexed {report.documents} datasheets with HiQAPack (layout parser + heading cascade + "
        "vector/BM25/critical-keyword routes, offline MiniLM)\n"
    )
    total = len(report.answers)
    for i, answer in enumerate(report.answers, 1):
        q = answer.question
        gold = q.gold[0]
        echo(f"[{i:2d}/{total}] {q.question}")
        echo(f"        gold: {gold.document_id} · {gold.section or '-'} · p.{_human_page(gold.page)}")
        for rank, hit in enumerate(answer.evidence, 1):
            node = hit.node
            mark = "✓" if schema.get_document_id(node) in q.gold_documents else " "
            sections = _sections(node)
            section = sections[0] + (f" … {sections[-1]}" if len(sections) > 1 else "") if sections else "-"
            echo(
                f"   {mark} {rank}. {schema.get_document_id(node)} p.{_page_label(node)} · {section}"
                f" ({hit.score or 0:.2f})  {_snippet(node.get_content())}"
            )
        found = f"gold document at rank {answer.gold_rank}" if answer.gold_rank else "gold document NOT found"
        extras = [x for x, ok in (("gold page", answer.page_hit), ("gold section", answer.section_hit)) if ok]
        echo(f"        -> {found}{' (' + ', '.join(extras) + ' retrieved)' if extras else ''}\n")
    question, document = FIGURE_QUESTION
    echo(f"[figure] {question}")
    if report.figure is not None:
        node = report.figure.node
        echo(f"   ✓ figure of {document} found: p.{_page_label(node)} · "
             f"{node.metadata.get(schema.SECTION_TITLE, '-')} · {node.metadata.get(schema.IMAGE_CAPTION)}"
             f" (image {node.metadata.get(schema.IMAGE_FILE)})\n")
    else:
        echo(f"   figure of {document} NOT found in the top {top_k}\n")
    hits = sum(a.gold_rank is not None for a in report.answers)
    top1 = sum(a.gold_rank == 1 for a in report.answers)
    pages = sum(a.page_hit for a in report.answers)
    section_hits = sum(a.section_hit for a in report.answers)
    echo(
        f"gold document in top {top_k}: {hits}/{total} ({report.hit_rate:.0%}); at rank 1: "
        f"{top1}/{total} ({report.top1_rate:.0%}); gold page in top {top_k}: {pages}/{total}; "
        f"gold section in top {top_k}: {section_hits}/{total}; "
        f"{report.seconds:.1f} s"
    )
    return 0


# --- helpers ----------------------------------------------------------------------------


def _heading_at(text: str, headings: Sequence[Sequence[Any]], start: int, chunk: str) -> List[List[Any]]:
    """The nearest layout heading at or before the chunk's first line that is not its title.

    A chunk that starts with its own heading belongs to it; one that starts mid-section
    belongs to the last heading above it. Returned as a one-level heading path
    ``[[number, title, level]]`` (the layout parser of a later issue builds full paths).
    """
    current = None
    for h_start, h_end, _size, _bold in headings:
        if h_start > start + max(0, len(chunk) - len(chunk.lstrip())) + 1:
            break
        current = text[h_start:h_end]
    if current is None:
        return []
    label = current.lstrip("#").strip().strip("*").strip()
    number, _, title = label.partition(" ")
    if number and number[0].isdigit():
        return [[number, title, number.count(".") + 1]]
    return [["", label, 1]]


def _sections(node: BaseNode) -> List[str]:
    """Sections a chunk overlaps: the one it starts in, then every heading inside it."""
    first = node.metadata.get(schema.SECTION_TITLE)
    inside = [m.strip().strip("*").strip() for m in _HEADING_LINE.findall(node.get_content())]
    return list(dict.fromkeys(([first] if first else []) + inside))


def _pages(node: BaseNode) -> List[int]:
    page_range = schema.get_page_range(node)
    return list(range(page_range[0], page_range[1] + 1)) if page_range else []


def _page_label(node: BaseNode) -> str:
    page_range = schema.get_page_range(node)
    if not page_range:
        return "?"
    first, last = page_range
    return f"{first + 1}" if first == last else f"{first + 1}-{last + 1}"


def _human_page(page: Optional[int]) -> str:
    return "?" if page is None else str(page + 1)


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return f'"{flat[:SNIPPET_CHARS]}…"' if len(flat) > SNIPPET_CHARS else f'"{flat}"'
