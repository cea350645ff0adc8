"""The HiQA ablation on your own documents: every variant, every ranking metric, one table.

HiQA §Ablation (Table 2) compares the full method with variants that drop one piece at a
time; :class:`AblationRunner` builds those variants from the pack's components on any corpus
(a folder of documents plus a questions file, FinanceBench, MuSiQue, HotpotQA) and scores each
with :mod:`llama_index_hiqa.evaluation.metrics` (Log-Rank Index over *all* N units, Recall@k,
Precision@k, MRR, nDCG@k, hit rate, doc-hit):

==========================  ==================================================================
``vector_only``             fixed chunks (SentenceSplitter 256/32) + exact cosine: vanilla LlamaIndex
``fixed_bm25``              fixed chunks + ``BM25Retriever`` (what a user has today)
``fixed_rrf``               fixed chunks + RRF(vector, BM25), k=60 (``QueryFusionRetriever``'s
                            reciprocal rerank, over full rankings)
``fixed_multi_route``       fixed chunks + ``MultiRouteRetriever``
``original``                segments (chapter cuts), no metadata in the embedding, vector only
``no_hierarchy``            segments + own heading only (``CascadingMetadataTransform`` switch)
``hca``                     segments + heading cascade (HCA), vector only
``hca_multi_route``         HCA + ``MultiRouteRetriever`` (HiQA as published)
``hca_chunk_graph``         HCA + multi-route + ``ChunkGraphRetriever`` evidence chains
``hca_segment_integration`` HCA + multi-route + ``SegmentIntegrationPostprocessor``
==========================  ==================================================================

A variant whose component is not importable from ``llama_index_hiqa`` is reported as
"not yet available", never approximated. Segments come from ``LayoutMarkdownParser`` when it
is available, else from LlamaIndex's ``MarkdownNodeParser`` (the result says which); long
segments are cut into 256-token chunks *inside* the segment so that every variant embeds
the same amount of text per vector (MiniLM reads 256 word pieces) and the comparison is
about boundaries and metadata, not truncation.

The Log-Rank Index needs the rank of every gold unit among all N units, so every variant
yields a full score vector per question: exact cosine over all unit vectors, BM25 scores of
every unit, RRF over the two full rankings; retrievers that return a short list (chunk
graph, segment integration) rank their units first, in their order, and the remaining units
follow in the order of the variant they extend.

Re-runs are fast: vectors come from the shared on-disk cache (:class:`CachedEmbedding`), so
only text no run has embedded before costs CPU; ``max_new_embeddings`` skips (and reports) a
variant that would embed more than that budget.
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr
from llama_index.core.node_parser import MarkdownNodeParser, SentenceSplitter
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import BaseNode, Document, MetadataMode, NodeWithScore, QueryBundle, TextNode

from llama_index_hiqa import schema
from llama_index_hiqa.errors import EvaluationInputError
from llama_index_hiqa.headings import heading_from_text, markdown_heading, markdown_headings
from llama_index_hiqa.retrievers import fusion
from llama_index_hiqa.retrievers.multi_route import bm25_score_matrix
from llama_index_hiqa.evaluation import datasets
from llama_index_hiqa.evaluation import metrics as M
from llama_index_hiqa.evaluation.datasets import EvalQuestion

CHUNK_SIZE = 256
CHUNK_OVERLAP = 32
logger = logging.getLogger(__name__)

SI_CANDIDATES = 30  # retrieved chunks handed to segment integration (dsRAG uses ~top 30)
STATUS_OK = "ok"
STATUS_MISSING = "not yet available"

# --- corpus ---------------------------------------------------------------------------


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


def _document(text: str, doc_id: str, title: str, page_spans=None) -> Document:
    meta: Dict[str, Any] = {schema.DOCUMENT_ID: doc_id, schema.DOCUMENT_TITLE: title}
    if page_spans:
        meta[schema.PAGE_SPANS] = page_spans
    doc = Document(text=text, id_=doc_id, metadata=meta)
    schema.hide_from_views(doc)
    return doc


def documents_from_pages(pages: Sequence[Dict[str, Any]]) -> List[Document]:
    """One Document per ``doc_name`` from ``{doc_name, page, text}`` rows, with page spans."""
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
        documents.append(_document("\n\n".join(parts), name, name, spans))
    return documents


def financebench_corpus(root: Optional[Path] = None, fixed_chunks: Optional[List[BaseNode]] = None) -> Corpus:
    """FinanceBench: one Markdown document per filing (pymupdf4llm pages), page gold.

    Every filing, and every given fixed chunk, is titled the way a person names it
    (``"3M 2018 10-K"``, :func:`datasets.financebench_filing_titles`): the title is what the
    HCA cascade starts with and where the keyword route finds company, year and filing type.
    On fixed chunks the title stays hidden bookkeeping, so their embedded text is unchanged.
    """
    titles = datasets.financebench_filing_titles(root)
    documents = documents_from_pages(datasets.load_financebench_pages(root, markdown=True))
    for node in [*documents, *(fixed_chunks or [])]:
        doc_id = node.metadata[schema.DOCUMENT_ID]
        node.metadata[schema.DOCUMENT_TITLE] = titles.get(doc_id, doc_id)
    return Corpus("financebench", documents, datasets.load_financebench_questions(root), fixed_chunks=fixed_chunks)


def multihop_corpus(name: str, root: Optional[Path] = None) -> Corpus:
    """MuSiQue or HotpotQA: every passage a document titled by its Wikipedia title."""
    docs = [
        _document(row["text"], row["id"], row["title"])
        for row in datasets.load_multihop_corpus(name, root)
    ]
    return Corpus(name, docs, datasets.load_multihop_questions(name, root), passages=True)


def folder_corpus(docs_dir: Path, questions_file: Path, name: Optional[str] = None) -> Corpus:
    """A folder of PDF/Markdown/text files and a questions JSONL (see ``datasets``)."""
    return Corpus(
        name or Path(docs_dir).name,
        datasets.load_documents_folder(docs_dir),
        datasets.load_questions_jsonl(questions_file),
    )


# --- building units -------------------------------------------------------------------

def _page_range(doc: Document, start: int, end: int) -> Optional[Tuple[int, int]]:
    spans = doc.metadata.get(schema.PAGE_SPANS)
    return schema.pages_for_span(spans, start, end) if spans else None


def _chunk_into_nodes(
    doc: Document,
    text: str,
    offset: int,
    heading_path: Optional[List[List[Any]]],
    position: int,
    splitter: SentenceSplitter,
    parse_path: str,
) -> List[TextNode]:
    """Cut one segment into ≤256-token chunks that keep the segment's facts."""
    doc_id = doc.metadata[schema.DOCUMENT_ID]
    nodes, cursor = [], 0
    for chunk in splitter.split_text(text) if text.strip() else []:
        found = text.find(chunk[:50], max(cursor - CHUNK_OVERLAP * 8, 0))
        local = found if found >= 0 else cursor
        start, end = offset + local, offset + local + len(chunk)
        cursor = local + len(chunk)
        node = TextNode(text=chunk, id_=f"{doc_id}:u{position + len(nodes)}")
        schema.set_segment_facts(
            node,
            document_id=doc_id,
            document_title=doc.metadata.get(schema.DOCUMENT_TITLE, doc_id),
            position=position + len(nodes),
            char_span=(start, end),
            heading_path=heading_path,
            page_range=_page_range(doc, start, end),
            parse_path=parse_path,
        )
        nodes.append(node)
    return nodes


def _heading_walk(text: str) -> Tuple[List[int], List[List[List[Any]]]]:
    """Offsets of the Markdown heading lines of ``text`` and the heading path open at each
    (a heading of level L closes every open heading of level >= L, HiQA Algorithm 2)."""
    offsets, paths, stack = [], [], []
    for start, _end, level, body in markdown_headings(text):
        stack = [h for h in stack if h[2] < level] + [list(heading_from_text(body, level))]
        offsets.append(start)
        paths.append([list(h) for h in stack])
    return offsets, paths


def fixed_chunks(corpus: Corpus) -> List[BaseNode]:
    """SentenceSplitter(256, 32) per page (page spans known) or per document.

    Each chunk records, as hidden bookkeeping, the heading path open where it starts (from
    the document's Markdown headings), so (document, section) gold can be matched on fixed
    chunks too; what is embedded is the chunk text alone.
    """
    import bisect

    if corpus.fixed_chunks is not None:
        return corpus.fixed_chunks
    splitter = SentenceSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    nodes: List[BaseNode] = []
    for doc in corpus.documents:
        spans = doc.metadata.get(schema.PAGE_SPANS) or [[None, 0, len(doc.text)]]
        offsets, paths = _heading_walk(doc.text)
        position = 0
        for _page, start, end in spans:
            made = _chunk_into_nodes(doc, doc.text[start:end], start, None, position, splitter, "text")
            for node in made:
                at = bisect.bisect_right(offsets, node.metadata[schema.CHAR_START]) - 1
                if at >= 0:
                    schema.set_heading_path(node, paths[at])
            position += len(made)
            nodes.extend(made)
    return nodes


def markdown_segments(documents: Sequence[Document]) -> List[BaseNode]:
    """Segments at Markdown headings (LlamaIndex ``MarkdownNodeParser``), heading path from
    its ``header_path``, each segment cut into 256-token chunks inside the segment."""
    parser = MarkdownNodeParser()
    splitter = SentenceSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    nodes: List[BaseNode] = []
    for doc in documents:
        # Parse a bare copy: the document's page spans must not be copied onto every segment.
        bare = Document(text=doc.text, id_=doc.doc_id)
        position = 0
        for seg in parser.get_nodes_from_documents([bare]):
            start = seg.start_char_idx if seg.start_char_idx is not None else doc.text.find(seg.text)
            parents = [p for p in (seg.metadata.get("header_path") or "").split("/") if p]
            path = [list(heading_from_text(p, i + 1)) for i, p in enumerate(parents)]
            first = markdown_heading(seg.text.lstrip().split("\n", 1)[0])
            if first:
                path.append(list(heading_from_text(first[1], len(path) + 1)))
            made = _chunk_into_nodes(doc, seg.text, max(start, 0), path, position, splitter, "markdown")
            position += len(made)
            nodes.extend(made)
    return nodes


def passage_segments(documents: Sequence[Document]) -> List[BaseNode]:
    """Multi-hop sets: each passage is one segment whose heading is its title."""
    splitter = SentenceSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    nodes: List[BaseNode] = []
    for doc in documents:
        title = doc.metadata.get(schema.DOCUMENT_TITLE, "")
        nodes.extend(_chunk_into_nodes(doc, doc.text, 0, [["", title, 1]], 0, splitter, "text"))
    return nodes


# --- scoring ---------------------------------------------------------------------------


def _available(name: str) -> bool:
    import llama_index_hiqa

    try:
        getattr(llama_index_hiqa, name)
        return True
    except (AttributeError, ImportError):
        return False


def _component(name: str) -> Any:
    import llama_index_hiqa

    return getattr(llama_index_hiqa, name)


def rrf_scores(*score_matrices: np.ndarray, k: float = fusion.RRF_K) -> np.ndarray:
    """Reciprocal rank fusion (:func:`~llama_index_hiqa.retrievers.fusion.reciprocal_rank_fusion`)
    of full rankings, one row per question: every unit gets ``Σ 1/(k + rank)``."""
    fused = np.zeros(score_matrices[0].shape, dtype=np.float64)
    units = range(fused.shape[1])
    for i in range(fused.shape[0]):
        ranks = {str(r): dict(zip(units, M.ranks_from_scores(m[i]).tolist())) for r, m in enumerate(score_matrices)}
        by_unit = fusion.reciprocal_rank_fusion({route: units for route in ranks}, k=k, ranks=ranks)
        fused[i] = [by_unit[j] for j in units]
    return fused


def list_first_scores(base: np.ndarray, ranked_ids: Sequence[str], node_ids: Sequence[str]) -> np.ndarray:
    """One question's scores where ``ranked_ids`` come first, in order, then the rest in the
    order of ``base`` (for retrievers that return a short list)."""
    index = {nid: i for i, nid in enumerate(node_ids)}
    ranks = M.ranks_from_scores(base).astype(np.float64)
    scores = -ranks  # the base order, all below 0
    listed = [index[n] for n in dict.fromkeys(ranked_ids) if n in index]
    for place, i in enumerate(listed):
        scores[i] = float(len(listed) - place)  # above every unlisted unit
    return scores


# --- results ---------------------------------------------------------------------------


@dataclass
class VariantResult:
    name: str
    label: str
    status: str
    n_units: int = 0
    metrics: Dict[str, float] = field(default_factory=dict)
    log_rank_stats: Dict[str, float] = field(default_factory=dict)  # Table 2: mean/max/min/std
    per_query: List[Dict[str, Any]] = field(default_factory=list)
    notes: str = ""
    seconds: float = 0.0


@dataclass
class AblationResult:
    dataset: str
    n_questions: int
    gamma: float
    ks: Tuple[int, ...]
    variants: List[VariantResult]

    def variant(self, name: str) -> VariantResult:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)

    def headline_metrics(self) -> List[str]:
        ks = self.ks
        picks = ["log_rank", "mrr"] + [f"hit@{k}" for k in ks[:3]] + [f"recall@{ks[-1]}", f"ndcg@{ks[min(2, len(ks) - 1)]}"]
        picks += [f"precision@{ks[0]}"]
        ok = [v for v in self.variants if v.status == STATUS_OK]
        if ok and f"doc_hit@{ks[0]}" in ok[0].metrics:
            picks += [f"doc_hit@{ks[0]}", f"doc_hit@{ks[1]}" if len(ks) > 1 else f"doc_hit@{ks[0]}"]
        if ok and self.dataset in ("musique", "hotpotqa"):
            picks += [f"all_gold@{k}" for k in ks[1:3]]
        return list(dict.fromkeys(picks))

    def to_markdown(self) -> str:
        cols = self.headline_metrics()
        head = ["variant", "units N"] + cols + ["LRI max", "LRI min", "LRI std"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for v in self.variants:
            if v.status != STATUS_OK:
                lines.append(f"| {v.label} | {v.status} |" + " |" * (len(head) - 2))
                continue
            cells = [v.label, f"{v.n_units:,}"] + [f"{v.metrics.get(c, float('nan')):.3f}" for c in cols]
            cells += [f"{v.log_rank_stats[s]:.3f}" for s in ("max", "min", "std")]
            lines.append("| " + " | ".join(cells) + " |")
        notes = [f"- `{v.name}`: {v.notes}" for v in self.variants if v.notes]
        return "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "")

    def to_json(self) -> Dict[str, Any]:
        return {
            "dataset": self.dataset,
            "n_questions": self.n_questions,
            "gamma": self.gamma,
            "ks": list(self.ks),
            "variants": [v.__dict__ for v in self.variants],
        }

    def save(self, out_dir: Path, plots: bool = True) -> List[Path]:
        """``ablation_<dataset>.json`` / ``.md`` and, with ``plots``, two PNGs."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        stem = out_dir / f"ablation_{self.dataset}"
        written = [stem.with_suffix(".json"), stem.with_suffix(".md")]
        written[0].write_text(json.dumps(self.to_json(), indent=1), encoding="utf-8")
        written[1].write_text(self.to_markdown() + "\n", encoding="utf-8")
        if plots and any(v.status == STATUS_OK for v in self.variants):
            try:
                import matplotlib  # noqa: F401 - a dev extra, not a dependency of the pack
            except ImportError:
                logger.warning(
                    "AblationRunner: no plots (matplotlib is not installed: pip install matplotlib); "
                    "the JSON and Markdown results are written"
                )
                return written
            written += self.plot(out_dir)
        return written

    def plot(self, out_dir: Path) -> List[Path]:
        """A bar chart per headline metric and the distribution of gold ranks per variant."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        ok = [v for v in self.variants if v.status == STATUS_OK]
        cols = self.headline_metrics()
        n_cols = 4
        n_rows = math.ceil(len(cols) / n_cols)
        fig, axes = plt.subplots(n_rows, n_cols, figsize=(4 * n_cols, 3.2 * n_rows), squeeze=False)
        colors = plt.cm.tab10(np.arange(len(ok)) % 10)
        for ax, metric in zip(axes.flat, cols):
            values = [v.metrics.get(metric, 0.0) for v in ok]
            ax.bar(range(len(ok)), values, color=colors)
            ax.set_title(metric)
            ax.set_xticks(range(len(ok)))
            ax.set_xticklabels([v.name for v in ok], rotation=45, ha="right", fontsize=7)
            ax.set_ylim(0, 1)
        for ax in list(axes.flat)[len(cols) :]:
            ax.axis("off")
        fig.suptitle(f"HiQA ablation on {self.dataset} ({self.n_questions} questions)")
        fig.tight_layout()
        bars = Path(out_dir) / f"ablation_{self.dataset}_metrics.png"
        fig.savefig(bars, dpi=110)
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(7, 4.2))
        for v, color in zip(ok, colors):
            ranks = np.sort([r for q in v.per_query for r in q["gold_ranks"]])
            if ranks.size:
                ax.step(ranks, np.arange(1, ranks.size + 1) / ranks.size, where="post", label=v.name, color=color)
        ax.set_xscale("log")
        ax.set_xlabel("r: rank of the gold evidence among all N units (log scale)")
        ax.set_ylabel("share of gold items ranked <= r")
        ax.set_title(f"Gold rank distribution, {self.dataset}")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        dist = Path(out_dir) / f"ablation_{self.dataset}_ranks.png"
        fig.savefig(dist, dpi=110)
        plt.close(fig)
        return [bars, dist]


# --- the runner ------------------------------------------------------------------------


@dataclass
class VariantSpec:
    name: str
    label: str
    requires: Tuple[str, ...]
    build: Callable[["AblationRunner", "_Workspace"], Tuple[List[BaseNode], np.ndarray, str]]


class _Workspace:
    """Per-run memo of unit sets, their vectors and score matrices (shared by variants)."""

    def __init__(self, runner: "AblationRunner", corpus: Corpus) -> None:
        self.runner, self.corpus = runner, corpus
        self.units: Dict[str, List[BaseNode]] = {}
        self.scores: Dict[Tuple[str, str], Any] = {}
        self.matrices: Dict[str, np.ndarray] = {}
        self.retrievers: Dict[str, Any] = {}
        self.notes: Dict[str, str] = {}
        self._queries: Optional[np.ndarray] = None

    @property
    def questions(self) -> List[str]:
        return [q.question for q in self.corpus.questions]

    def query_vectors(self) -> np.ndarray:
        if self._queries is None:
            model = self.runner.embed_model
            self._queries = _unit_rows([model.get_query_embedding(q) for q in self.questions])
        return self._queries

    def unit_set(self, key: str) -> List[BaseNode]:
        if key not in self.units:
            self.units[key] = self.runner._build_units(key, self)
        return self.units[key]

    def vector(self, key: str) -> np.ndarray:
        if (key, "vector") not in self.scores:
            nodes = self.unit_set(key)
            matrix = self.runner._embed(nodes, key)
            self.matrices[key] = matrix
            self.scores[(key, "vector")] = self.query_vectors() @ matrix.T
        return self.scores[(key, "vector")]

    def bm25(self, key: str) -> np.ndarray:
        if (key, "bm25") not in self.scores:
            self.scores[(key, "bm25")] = bm25_score_matrix(self.unit_set(key), self.questions)
        return self.scores[(key, "bm25")]


def _unit_rows(vectors) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float32)
    return matrix / (np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12)


class BudgetExceeded(Exception):
    """A variant would embed more new text than ``max_new_embeddings`` allows."""


class AblationRunner(BaseModel):
    """Build every ablation variant on a corpus and score it with every ranking metric.

    >>> from llama_index_hiqa import AblationRunner
    >>> from llama_index_hiqa.evaluation.runner import folder_corpus
    >>> result = AblationRunner().run(folder_corpus("docs/", "questions.jsonl"))
    >>> print(result.to_markdown()); result.save("eval_out/")
    """

    gamma: float = Field(default=M.DEFAULT_GAMMA, description="γ of the Log-Rank Index (HiQA formula 3).")
    ks: Tuple[int, ...] = Field(default=M.DEFAULT_KS, description="Cut-offs for Recall/Precision/nDCG/hit@k.")
    min_text_overlap: float = Field(
        default=M.DEFAULT_MIN_TEXT_OVERLAP, description="Evidence-text gold: share of evidence 5-grams a unit must hold."
    )
    max_new_embeddings: Optional[int] = Field(
        default=None, description="Skip (and report) a variant needing more uncached embeddings than this."
    )
    show_progress: bool = Field(default=True, description="Progress bars for variants and embedding.")
    embed_batch: int = Field(default=256, description="Texts per embedding call (each batch is cached).")

    _embed_model: Optional[BaseEmbedding] = PrivateAttr(default=None)
    _keyword_extractor: Any = PrivateAttr(default=None)

    def __init__(
        self,
        embed_model: Optional[BaseEmbedding] = None,
        keyword_extractor: Optional[Any] = None,
        **kwargs: Any,
    ) -> None:
        """``keyword_extractor``: the ``CriticalKeywordExtractor`` of the multi-route and
        chunk-graph variants (default: the retrievers' own, spaCy NER + rules). On a large
        corpus pass ``CriticalKeywordExtractor(use_ner=False, expert_keywords=[...])``:
        NER over tens of thousands of chunks takes hours on a laptop CPU."""
        super().__init__(**kwargs)
        self._embed_model = embed_model
        self._keyword_extractor = keyword_extractor

    @property
    def embed_model(self) -> BaseEmbedding:
        if self._embed_model is None:
            from llama_index_hiqa.embedding_cache import CachedEmbedding

            self._embed_model = CachedEmbedding.from_defaults()
        return self._embed_model

    # -- variants -----------------------------------------------------------------------

    @staticmethod
    def variant_specs() -> List[VariantSpec]:
        return list(VARIANTS)

    @classmethod
    def variant_names(cls) -> List[str]:
        return [v.name for v in VARIANTS]

    def run(self, corpus: Corpus, variants: Optional[Sequence[str]] = None) -> AblationResult:
        """Score ``variants`` (default: all) on ``corpus``; unavailable ones are reported."""
        import time

        wanted = list(variants) if variants else self.variant_names()
        unknown = [v for v in wanted if v not in self.variant_names()]
        if unknown:
            raise EvaluationInputError(f"unknown variants {unknown}; choose from {self.variant_names()}")
        specs = [s for s in VARIANTS if s.name in wanted]
        workspace = _Workspace(self, corpus)
        results: List[VariantResult] = []
        for spec in self._progress(specs, "variants"):
            missing = [r for r in spec.requires if not _available(r)]
            if missing:
                results.append(VariantResult(spec.name, spec.label, STATUS_MISSING, notes="needs " + ", ".join(missing)))
                continue
            started = time.perf_counter()
            try:
                nodes, scores, notes = spec.build(self, workspace)
            except BudgetExceeded as exc:
                results.append(VariantResult(spec.name, spec.label, "skipped (embedding budget)", notes=str(exc)))
                continue
            except Exception as exc:  # a component that landed with another API: say so, go on
                results.append(
                    VariantResult(spec.name, spec.label, f"failed: {type(exc).__name__}", notes=str(exc)[:300])
                )
                continue
            result = self._score(spec, corpus, nodes, scores, notes)
            result.seconds = time.perf_counter() - started
            results.append(result)
        return AblationResult(corpus.name, len(corpus.questions), self.gamma, tuple(self.ks), results)

    def _score(self, spec: VariantSpec, corpus: Corpus, nodes, scores: np.ndarray, notes: str) -> VariantResult:
        units = [M.UnitView.from_node(n) for n in nodes]
        unit_docs = [u.document_id for u in units]
        per_query: List[Dict[str, Any]] = []
        for q, row in zip(corpus.questions, scores):
            ranks = M.ranks_from_scores(row)
            rel = M.relevance_matrix(units, q.gold, self.min_text_overlap)
            gold_docs = [g.document_id for g in q.gold if M.gold_rule(g) != "id"]
            ranking = M.query_ranking(ranks, rel, unit_docs, gold_docs)
            values = M.query_metrics(ranking, self.ks, self.gamma)
            per_query.append(
                {"id": q.id, "gold_ranks": [r if r is not None else len(units) for r in ranking.gold_ranks], **values}
            )
        means = M.mean_metrics([{k: v for k, v in q.items() if k not in ("id", "gold_ranks")} for q in per_query])
        lri = np.asarray([q["log_rank"] for q in per_query])
        stats = {"mean": float(lri.mean()), "max": float(lri.max()), "min": float(lri.min()), "std": float(lri.std())}
        return VariantResult(spec.name, spec.label, STATUS_OK, len(nodes), means, stats, per_query, notes)

    # -- building blocks ------------------------------------------------------------------

    def _progress(self, items, desc: str):
        if not self.show_progress:
            return items
        from tqdm import tqdm

        return tqdm(items, desc=desc)

    def _build_units(self, key: str, ws: _Workspace) -> List[BaseNode]:
        corpus = ws.corpus
        if key == "fixed":
            return fixed_chunks(corpus)
        if key == "segments":
            nodes, how = self._segments(corpus)
            ws.notes["segments"] = how
            return nodes
        if key in ("no_hierarchy", "hca"):
            return self._cascade(ws.unit_set("segments"), own_heading_only=key == "no_hierarchy")
        raise KeyError(key)

    def _segments(self, corpus: Corpus) -> Tuple[List[BaseNode], str]:
        if corpus.passages:
            return passage_segments(corpus.documents), "passages are the segments (title as heading)"
        if _available("LayoutMarkdownParser"):
            parser = _component("LayoutMarkdownParser")()
            segments = parser.get_nodes_from_documents(corpus.documents)
            return _split_segments(segments, corpus.documents), "segments from LayoutMarkdownParser"
        return markdown_segments(corpus.documents), "segments from MarkdownNodeParser (LayoutMarkdownParser not yet available)"

    def _cascade(self, segments: List[BaseNode], own_heading_only: bool) -> List[BaseNode]:
        cls = _component("CascadingMetadataTransform")
        copies = [n.model_copy(deep=True) for n in segments]
        transform = _make_cascade(cls, own_heading_only)
        return list(transform(copies))

    def _embed(self, nodes: Sequence[BaseNode], key: str) -> np.ndarray:
        model = self.embed_model
        texts = [n.get_content(MetadataMode.EMBED) for n in nodes]
        if self.max_new_embeddings is not None:
            missing = _uncached_count(model, texts)
            if missing > self.max_new_embeddings:
                raise BudgetExceeded(
                    f"{missing:,} of {len(texts):,} unit texts are not in the embedding cache "
                    f"(budget {self.max_new_embeddings:,}); run with a larger budget"
                )
        vectors: List[List[float]] = []
        steps = range(0, len(texts), self.embed_batch)
        if self.show_progress:
            from tqdm import tqdm

            steps = tqdm(steps, desc=f"embedding {key} (cached)", unit="batch")
        for start in steps:
            vectors.extend(model.get_text_embedding_batch(texts[start : start + self.embed_batch]))
        return _unit_rows(vectors)


def _uncached_count(model: BaseEmbedding, texts: Sequence[str]) -> int:
    """How many texts the on-disk cache does not hold (0 check impossible: assume all)."""
    from llama_index_hiqa.embedding_cache import CachedEmbedding, content_hash

    if not isinstance(model, CachedEmbedding):
        return len(texts)
    keys = [content_hash(model.model_id, "text", t) for t in dict.fromkeys(texts)]
    return len(keys) - len(model._lookup(keys))  # noqa: SLF001 - same package


def _split_segments(segments: Sequence[BaseNode], documents: Sequence[Document]) -> List[BaseNode]:
    """Cut long text segments of a parser into 256-token chunks inside the segment, each with
    its own character span and pages; table and image segments stay whole (HCA embeds a
    table by its labels, so cutting it would lose them)."""
    splitter = SentenceSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    by_id = {d.metadata.get(schema.DOCUMENT_ID, d.doc_id): d for d in documents}
    out: List[BaseNode] = []
    position: Dict[str, int] = {}
    for seg in segments:
        doc_id = schema.get_document_id(seg) or ""
        doc = by_id.get(doc_id)
        at = position.get(doc_id, 0)
        if doc is None or schema.get_segment_kind(seg) != schema.KIND_TEXT:
            node = seg.model_copy(deep=True)
            node.metadata[schema.POSITION] = at
            made = [node]
        else:
            span = schema.get_char_span(seg)
            made = _chunk_into_nodes(
                doc,
                seg.get_content(MetadataMode.NONE),
                span[0] if span else 0,
                seg.metadata.get(schema.HEADING_PATH),
                at,
                splitter,
                seg.metadata.get(schema.PARSE_PATH) or "layout",
            )
        position[doc_id] = at + len(made)
        out.extend(made)
    return out


def _make_cascade(cls: Any, own_heading_only: bool) -> Any:
    # CascadingMetadataTransform's Table 2 switch: variant="cascade" (HCA) / "own_heading".
    return cls(variant="own_heading" if own_heading_only else "cascade")


class _MatrixRetriever(BaseRetriever):
    """Exact cosine over the variant's cached unit vectors, as a LlamaIndex retriever: the
    vector route handed to the pack's retrievers (no second embedding, no vector store)."""

    def __init__(self, nodes: Sequence[BaseNode], matrix: np.ndarray, embed_model: BaseEmbedding, similarity_top_k: int = 10):
        self._nodes, self._matrix, self._embed = list(nodes), matrix, embed_model
        self.similarity_top_k = similarity_top_k
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        q = _unit_rows([self._embed.get_query_embedding(query_bundle.query_str)])[0]
        sims = self._matrix @ q
        k = min(int(self.similarity_top_k), len(self._nodes))
        top = np.argpartition(-sims, k - 1)[:k] if k < len(sims) else np.arange(len(sims))
        top = top[np.argsort(-sims[top], kind="stable")]
        return [NodeWithScore(node=self._nodes[i], score=float(sims[i])) for i in top]


def _multi_route(ws: _Workspace, key: str) -> Any:
    """A ``MultiRouteRetriever`` over unit set ``key`` (memoised per run)."""
    if key not in ws.retrievers:
        nodes = ws.unit_set(key)
        ws.vector(key)
        vector = _MatrixRetriever(nodes, ws.matrices[key], ws.runner.embed_model)
        ws.retrievers[key] = _component("MultiRouteRetriever")(
            vector_retriever=vector, nodes=nodes, keyword_extractor=ws.runner._keyword_extractor
        )
    return ws.retrievers[key]


def _multi_route_scores(ws: _Workspace, key: str) -> np.ndarray:
    """Scores from ``MultiRouteRetriever.full_ranking`` (every unit, best first)."""
    if (key, "multi_route") in ws.scores:
        return ws.scores[(key, "multi_route")]
    retriever = _multi_route(ws, key)
    ids = [n.node_id for n in ws.unit_set(key)]
    index = {nid: i for i, nid in enumerate(ids)}
    out = np.full((len(ws.questions), len(ids)), -1.0)
    for qi, question in enumerate(ws.runner._progress(ws.questions, f"multi-route {key}")):
        ranked = retriever.full_ranking(question)
        for place, nid in enumerate(ranked):
            if nid in index:
                out[qi, index[nid]] = float(len(ranked) - place)
    ws.scores[(key, "multi_route")] = out
    return out


# --- the variants ---------------------------------------------------------------------


def _v_vector(runner, ws):
    return ws.unit_set("fixed"), ws.vector("fixed"), ""


def _v_bm25(runner, ws):
    return ws.unit_set("fixed"), ws.bm25("fixed"), ""


def _v_rrf(runner, ws):
    return ws.unit_set("fixed"), rrf_scores(ws.vector("fixed"), ws.bm25("fixed")), ""


def _v_fixed_mr(runner, ws):
    return ws.unit_set("fixed"), _multi_route_scores(ws, "fixed"), ""


def _v_original(runner, ws):
    nodes = ws.unit_set("segments")
    return nodes, ws.vector("segments"), ws.notes.get("segments", "")


def _v_no_hierarchy(runner, ws):
    return ws.unit_set("no_hierarchy"), ws.vector("no_hierarchy"), ws.notes.get("segments", "")


def _v_hca(runner, ws):
    return ws.unit_set("hca"), ws.vector("hca"), ws.notes.get("segments", "")


def _v_hca_mr(runner, ws):
    return ws.unit_set("hca"), _multi_route_scores(ws, "hca"), ws.notes.get("segments", "")


def _v_hca_graph(runner, ws):
    nodes = ws.unit_set("hca")
    base = _multi_route_scores(ws, "hca")
    # The units carry the multi-route's keywords by now; the query keywords come from the
    # same extractor when the runner was given one.
    extractor = runner._keyword_extractor
    retriever = _component("ChunkGraphRetriever").from_nodes(
        nodes,
        embed_model=runner.embed_model,
        keyword_fn=extractor.extract_query if extractor is not None else None,
        max_nodes=max(runner.ks),
    )
    ids = [n.node_id for n in nodes]
    rows = [
        list_first_scores(base[i], [r.node.node_id for r in retriever.retrieve(q)], ids)
        for i, q in enumerate(runner._progress(ws.questions, "chunk graph"))
    ]
    return nodes, np.stack(rows), "chain units first, in traversal order; then the multi-route order"


def _v_hca_si(runner, ws):
    from llama_index.core.storage.docstore import SimpleDocumentStore

    nodes = ws.unit_set("hca")
    base = _multi_route_scores(ws, "hca")
    docstore = SimpleDocumentStore()
    docstore.add_documents(list(nodes), allow_update=True)
    post = _component("SegmentIntegrationPostprocessor")(docstore=docstore, embed_model=runner.embed_model, relevance="embedding")
    ids = [n.node_id for n in nodes]
    rows = []
    for i, question in enumerate(runner._progress(ws.questions, "segment integration")):
        top = np.argsort(-base[i], kind="stable")[:SI_CANDIDATES]
        candidates = [NodeWithScore(node=nodes[j], score=float(base[i, j])) for j in top]
        merged = post.postprocess_nodes(candidates, query_bundle=QueryBundle(question))
        listed = [nid for seg in merged for nid in (seg.node.metadata.get(schema.SEGMENT_NODE_IDS) or [seg.node.node_id])]
        rows.append(list_first_scores(base[i], listed, ids))
    return nodes, np.stack(rows), (
        f"units of the integrated segments first (from the multi-route top {SI_CANDIDATES}, relevance = "
        "embedding cosine); then the multi-route order"
    )


VARIANTS: Tuple[VariantSpec, ...] = (
    VariantSpec("vector_only", "Fixed chunks + vector only (vanilla LlamaIndex)", (), _v_vector),
    VariantSpec("fixed_bm25", "Fixed chunks + BM25Retriever", (), _v_bm25),
    VariantSpec("fixed_rrf", "Fixed chunks + RRF(vector, BM25)", (), _v_rrf),
    VariantSpec("fixed_multi_route", "Fixed chunks + multi-route", ("MultiRouteRetriever",), _v_fixed_mr),
    VariantSpec("original", "Segments, no metadata (Original RAG)", (), _v_original),
    VariantSpec("no_hierarchy", "Segments + own heading (No Hierarchy)", ("CascadingMetadataTransform",), _v_no_hierarchy),
    VariantSpec("hca", "Segments + cascade (HCA), vector only", ("CascadingMetadataTransform",), _v_hca),
    VariantSpec(
        "hca_multi_route", "HCA + multi-route (HiQA)", ("CascadingMetadataTransform", "MultiRouteRetriever"), _v_hca_mr
    ),
    VariantSpec(
        "hca_chunk_graph",
        "HCA + multi-route + chunk graph",
        ("CascadingMetadataTransform", "MultiRouteRetriever", "ChunkGraphRetriever"),
        _v_hca_graph,
    ),
    VariantSpec(
        "hca_segment_integration",
        "HCA + multi-route + segment integration",
        ("CascadingMetadataTransform", "MultiRouteRetriever", "SegmentIntegrationPostprocessor"),
        _v_hca_si,
    ),
)
