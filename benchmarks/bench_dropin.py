"""The README's "Drop one component into your app" table, measured row by row.

A bare LlamaIndex app over the ten demo datasheets (``demo_data_dir()``), set up as the README
says: ``Settings.embed_model = CachedEmbedding.from_defaults()`` (the packaged MiniLM, exact
cosine), ``SimpleDirectoryReader`` documents, ``VectorStoreIndex.from_documents(documents,
transformations=[SentenceSplitter()])``. For every row whose change touches retrieval, the 25
demo questions' hit@1 / hit@5 of the gold datasheet (``demo_data/questions.jsonl``) before and
after the row's one-line change, and nothing else changed.

``SimpleDirectoryReader`` reads PDFs page by page only with ``llama-index-readers-file``, which
pins an older pandas than the pack's dependencies allow; its place is taken by
``llama_index_hiqa.testing.PDFPageReader`` (one document per page, PyMuPDF's text rather than
pypdf's). Without it the bare app indexes the PDFs' raw bytes: that is the first line.

Rows that need an LLM (``MarkdownFormatterParser``, ``LineNumberSegmentParser``,
``ContextHeaderTransform``) and the faithfulness score, which ranks nothing, are listed with the
reason they are not measured.

    .venv/bin/python benchmarks/bench_dropin.py
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _common  # noqa: E402,F401  (offline environment, shared cache)
from benchmarks._results import markdown_table, write_section  # noqa: E402

from llama_index.core import Settings, SimpleDirectoryReader, VectorStoreIndex  # noqa: E402
from llama_index.core.node_parser import SentenceSplitter  # noqa: E402
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle  # noqa: E402

from llama_index_hiqa import (  # noqa: E402
    CachedEmbedding,
    CascadingMetadataTransform,
    ChunkGraphRetriever,
    LayoutMarkdownParser,
    MultiRouteRetriever,
    PDFLayoutReader,
    SegmentIntegrationPostprocessor,
    demo_data_dir,
    schema,
)
from llama_index_hiqa.testing import PDFPageReader  # noqa: E402

TOP_K = 5
Ranker = Callable[[str], List[NodeWithScore]]


def questions() -> List[Tuple[str, str, int]]:
    """``(question, gold document id, gold page from 0)`` of the demo questions."""
    lines = (demo_data_dir() / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [
        (q["question"], q["gold"][0]["document_id"], int(q["gold"][0]["page"]))
        for q in map(json.loads, filter(None, lines))
    ]


Where = Tuple[str, Optional[Set[int]]]


def page_of(metadata: Dict) -> Optional[Set[int]]:
    """The pages (from 0) a node lies on: the pack's page range, else the page reader's label."""
    if metadata.get(schema.PAGE_START) is not None:
        return set(range(int(metadata[schema.PAGE_START]), int(metadata.get(schema.PAGE_END, metadata[schema.PAGE_START])) + 1))
    if str(metadata.get("page_label", "")).isdigit():
        return {int(metadata["page_label"]) - 1}
    return None


def sources(index: VectorStoreIndex) -> Dict[str, Where]:
    """Every document id of an index (the ref_doc_id a segment names) -> its datasheet and page."""
    return {
        node.ref_doc_id: (Path(str(node.metadata.get(schema.FILE_NAME, ""))).stem, page_of(node.metadata))
        for node in index.docstore.docs.values()
        if node.ref_doc_id
    }


def where(node: BaseNode, known: Dict[str, Where]) -> Where:
    """The datasheet (file stem) and pages of a retrieved node, whatever made it."""
    meta = node.metadata
    if meta.get(schema.FILE_NAME):
        return Path(str(meta[schema.FILE_NAME])).stem, page_of(meta)
    doc, page = known.get(meta.get(schema.DOCUMENT_ID) or node.ref_doc_id or "", ("", None))
    return doc, page_of(meta) or page


def hits(rank: Ranker, index: VectorStoreIndex, qs: Sequence[Tuple[str, str, int]]) -> Tuple[float, float, Optional[float]]:
    """doc@1, doc@5 (the gold datasheet first, in the top 5) and page@5 (a node of the top 5 on
    its gold page; ``None`` when the nodes do not know their pages)."""
    known = sources(index)
    at1 = at5 = page5 = 0
    paged = False  # page@5 is None when no node knows its page
    for question, gold, gold_page in qs:
        found = [where(n.node, known) for n in rank(question)][:TOP_K]
        at1 += bool(found) and found[0][0] == gold
        at5 += any(doc == gold for doc, _ in found)
        page5 += any(doc == gold and pages is not None and gold_page in pages for doc, pages in found)
        paged = paged or any(pages is not None for _, pages in found)
    return at1 / len(qs), at5 / len(qs), (page5 / len(qs) if paged else None)


def _cells(figures: Sequence[Optional[float]]) -> str:
    return " / ".join("—" if v is None else f"{v:.2f}" for v in figures)


def index_of(documents, transformations) -> VectorStoreIndex:
    return VectorStoreIndex.from_documents(documents, transformations=transformations)


def vector(index: VectorStoreIndex) -> Ranker:
    retriever = index.as_retriever(similarity_top_k=TOP_K)
    return retriever.retrieve


def query_engine_context(index: VectorStoreIndex, **kwargs) -> Ranker:
    """What a query engine hands its LLM: the retrieved nodes after its postprocessors."""
    engine = index.as_query_engine(**kwargs)
    return lambda q: engine.retrieve(QueryBundle(q))


def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    Settings.embed_model = CachedEmbedding.from_defaults()
    Settings.llm = None  # LlamaIndex's MockLLM: the query engines here only retrieve
    folder = str(demo_data_dir())
    qs = questions()
    started = time.perf_counter()

    raw_docs = SimpleDirectoryReader(folder, required_exts=[".pdf"]).load_data()
    page_docs = SimpleDirectoryReader(folder, required_exts=[".pdf"], file_extractor={".pdf": PDFPageReader()}).load_data()
    layout_docs = PDFLayoutReader().load_data(folder)

    def measure(index: VectorStoreIndex, rank: Optional[Ranker] = None) -> Tuple[float, float, Optional[float]]:
        return hits(rank or vector(index), index, qs)

    bare_raw = index_of(raw_docs, [SentenceSplitter()])
    bare = index_of(page_docs, [SentenceSplitter()])
    layout = index_of(page_docs, [LayoutMarkdownParser()])
    cascade = index_of(page_docs, [LayoutMarkdownParser(), CascadingMetadataTransform()])
    figures = {name: measure(index) for name, index in (("raw", bare_raw), ("pages", bare), ("layout", layout), ("cascade", cascade))}
    rows: List[List] = []

    def row(want: str, change: str, app: str, before: Tuple[float, ...], after: Tuple[float, ...]) -> None:
        rows.append([want, change, app, _cells(before), _cells(after)])

    reader_after = measure(index_of(layout_docs, [SentenceSplitter()]))
    row("pages, headings, tables of PDFs", "`PDFLayoutReader().load_data(...)`", "raw bytes", figures["raw"], reader_after)
    row("pages, headings, tables of PDFs", "`PDFLayoutReader().load_data(...)`", "pages", figures["pages"], reader_after)
    row("chapter segments without an LLM", "`LayoutMarkdownParser()`", "raw bytes", figures["raw"],
        measure(index_of(raw_docs, [LayoutMarkdownParser()])))
    row("chapter segments without an LLM", "`LayoutMarkdownParser()`", "pages", figures["pages"], figures["layout"])
    row("the heading path in every embedding", "+ `CascadingMetadataTransform()`", "pages", figures["pages"],
        measure(index_of(page_docs, [SentenceSplitter(), CascadingMetadataTransform()])))
    row("the heading path in every embedding", "+ `CascadingMetadataTransform()`", "pages, segments",
        figures["layout"], figures["cascade"])
    for app, index, before in (("pages", bare, figures["pages"]), ("pages, segments + cascade", cascade, figures["cascade"])):
        row("vector + BM25 + keywords", "`MultiRouteRetriever.from_index(index)`", app, before,
            measure(index, MultiRouteRetriever.from_index(index, similarity_top_k=TOP_K).retrieve))
    for app, index, before in (("pages", bare, figures["pages"]), ("pages, segments + cascade", cascade, figures["cascade"])):
        row("multi-hop evidence chains", "`ChunkGraphRetriever.from_index(index)`", app, before,
            measure(index, ChunkGraphRetriever.from_index(index).retrieve))
    for app, index in (("pages", bare), ("pages, segments + cascade", cascade)):
        default_engine = measure(index, query_engine_context(index))
        for top_k in (None, 50):
            kwargs = {"similarity_top_k": top_k} if top_k else {}
            row("whole segments instead of scattered chunks",
                f"`SegmentIntegrationPostprocessor`, top-k {top_k or '2 (default)'}", app, default_engine,
                measure(index, query_engine_context(
                    index, node_postprocessors=[SegmentIntegrationPostprocessor.from_index(index)], **kwargs)))
    not_measured = [
        ["chapter segments written by an LLM", "`MarkdownFormatterParser(llm=llm)`", "needs an LLM"],
        ["sections of unstructured text", "`LineNumberSegmentParser(llm=llm)`", "needs an LLM"],
        ["LLM document/section summaries", "`ContextHeaderTransform(llm=llm)`", "needs an LLM"],
        ["a reference-free faithfulness score", "`FaithfulnessScoreEvaluator()`", "scores an answer, ranks nothing"],
    ]
    elapsed = time.perf_counter() - started
    body = (
        f"The README's drop-in rows on a bare LlamaIndex app over the 10 demo datasheets, "
        f"{len(qs)} demo questions, MiniLM through `CachedEmbedding.from_defaults()` (exact cosine), "
        "before and after the row's one change: doc@1 / doc@5 (the gold datasheet first / in the "
        "top 5) and page@5 (a node of the top 5 on the gold page of the gold datasheet; — when the "
        "nodes do not know their page: raw bytes, and `SentenceSplitter` chunks of a "
        "`PDFLayoutReader` document, which keeps its page spans for the segment parsers). App "
        "before: \"pages\" is `SimpleDirectoryReader` reading each PDF page by page "
        "(`testing.PDFPageReader` standing in for `llama-index-readers-file`, which cannot be "
        "installed beside pandas 3) + `SentenceSplitter()`; \"raw bytes\" is "
        "`SimpleDirectoryReader` without that package (it decodes the PDF file as text); "
        "\"segments\" adds `LayoutMarkdownParser()` in place of the splitter, \"cascade\" "
        "`CascadingMetadataTransform()` after it. Retrievers return their top 5; query-engine rows "
        "count what the engine hands its LLM (2 chunks at LlamaIndex's default top-k). "
        f"{elapsed:.0f} s.\n\n"
        + markdown_table(["you want", "change", "app before", "before doc@1 / doc@5 / page@5",
                          "after doc@1 / doc@5 / page@5"], rows)
        + "\n\nNot measured: "
        + "; ".join(f"{w} ({c}: {why})" for w, c, why in not_measured)
        + "."
    )
    print(body)
    write_section("dropin", "Drop-in table", body, command="python benchmarks/bench_dropin.py")


if __name__ == "__main__":
    main()
