"""The ablation variants (HiQA §Ablation, Table 2): how each one builds its units and a full
score vector per question.

The Log-Rank Index needs the rank of every gold unit among all N units, so every variant
yields a full score vector per question: exact cosine over all unit vectors, BM25 scores of
every unit (the multi-route retriever's BM25 route), reciprocal rank fusion over the two full
rankings; retrievers that return a short list (chunk graph, segment integration) rank their
units first, in their order, and the remaining units follow in the order of the variant they
extend. A [`_Workspace`][llama_index_hiqa.evaluation.variants._Workspace] memoises unit sets, vectors and score matrices across variants
of one run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from numpy.typing import ArrayLike
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.storage.docstore import SimpleDocumentStore

import llama_index_hiqa
from llama_index_hiqa import schema
from llama_index_hiqa.evaluation import metrics as M
from llama_index_hiqa.evaluation.corpus import Corpus
from llama_index_hiqa.retrievers import fusion
from llama_index_hiqa.retrievers.bm25_route import bm25_score_matrix

if TYPE_CHECKING:
    from llama_index_hiqa.evaluation.runner import AblationRunner

SI_CANDIDATES = 30  # retrieved chunks handed to segment integration (dsRAG uses ~top 30)


def _available(name: str) -> bool:
    try:
        getattr(llama_index_hiqa, name)
        return True
    except (AttributeError, ImportError):
        return False


def _component(name: str) -> Any:
    return getattr(llama_index_hiqa, name)


def rrf_scores(*score_matrices: np.ndarray, k: float = fusion.RRF_K) -> np.ndarray:
    """Reciprocal rank fusion of full rankings, one row per question.

    Every unit gets ``Σ 1/(k + rank)``
    ([`reciprocal_rank_fusion`][llama_index_hiqa.retrievers.fusion.reciprocal_rank_fusion]).

    Args:
        *score_matrices: one ``(questions, units)`` score matrix a route, same shape.
        k: the RRF constant.

    Returns:
        The fused ``(questions, units)`` scores.
    """
    fused = np.zeros(score_matrices[0].shape, dtype=np.float64)
    units = range(fused.shape[1])
    for i in range(fused.shape[0]):
        ranks = {str(r): dict(zip(units, M.ranks_from_scores(m[i]).tolist())) for r, m in enumerate(score_matrices)}
        by_unit = fusion.reciprocal_rank_fusion({route: units for route in ranks}, k=k, ranks=ranks)
        fused[i] = [by_unit[j] for j in units]
    return fused


def list_first_scores(base: np.ndarray, ranked_ids: Sequence[str], node_ids: Sequence[str]) -> np.ndarray:
    """One question's scores where ``ranked_ids`` come first, in order, then the rest.

    The rest keep the order of ``base`` (for retrievers that return a short list).

    Args:
        base: one score a unit, the order of the units not listed.
        ranked_ids: the retriever's node ids, best first (unknown ids skipped).
        node_ids: the units' node ids, in the order of ``base``.

    Returns:
        One score a unit: the listed ones above every other.
    """
    index = {nid: i for i, nid in enumerate(node_ids)}
    ranks = M.ranks_from_scores(base).astype(np.float64)
    scores = -ranks  # the base order, all below 0
    listed = [index[n] for n in dict.fromkeys(ranked_ids) if n in index]
    for place, i in enumerate(listed):
        scores[i] = float(len(listed) - place)  # above every unlisted unit
    return scores


# What a variant builds: its units, their (questions, units) scores and a note on the ranking.
VariantUnits = Tuple[List[BaseNode], np.ndarray, str]


@dataclass
class VariantSpec:
    name: str
    label: str
    requires: Tuple[str, ...]
    build: Callable[["AblationRunner", "_Workspace"], VariantUnits]


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
            self.units[key] = self.runner.build_units(key, self)
        return self.units[key]

    def vector(self, key: str) -> np.ndarray:
        if (key, "vector") not in self.scores:
            nodes = self.unit_set(key)
            matrix = self.runner.embed_units(nodes, key)
            self.matrices[key] = matrix
            self.scores[(key, "vector")] = self.query_vectors() @ matrix.T
        return self.scores[(key, "vector")]

    def bm25(self, key: str) -> np.ndarray:
        if (key, "bm25") not in self.scores:
            self.scores[(key, "bm25")] = bm25_score_matrix(self.unit_set(key), self.questions)
        return self.scores[(key, "bm25")]


def _unit_rows(vectors: ArrayLike) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float32)
    return matrix / (np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12)


class BudgetExceeded(Exception):
    """A variant would embed more new text than ``max_new_embeddings`` allows."""


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
            vector_retriever=vector, nodes=nodes, keyword_extractor=ws.runner.keyword_extractor
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
    for qi, question in enumerate(ws.runner.progress(ws.questions, f"multi-route {key}")):
        ranked = retriever.full_ranking(question)
        for place, nid in enumerate(ranked):
            if nid in index:
                out[qi, index[nid]] = float(len(ranked) - place)
    ws.scores[(key, "multi_route")] = out
    return out


# --- the variants ---------------------------------------------------------------------


def _v_vector(runner: "AblationRunner", ws: _Workspace) -> VariantUnits:
    return ws.unit_set("fixed"), ws.vector("fixed"), ""


def _v_bm25(runner: "AblationRunner", ws: _Workspace) -> VariantUnits:
    return ws.unit_set("fixed"), ws.bm25("fixed"), ""


def _v_rrf(runner: "AblationRunner", ws: _Workspace) -> VariantUnits:
    return ws.unit_set("fixed"), rrf_scores(ws.vector("fixed"), ws.bm25("fixed")), ""


def _v_fixed_mr(runner: "AblationRunner", ws: _Workspace) -> VariantUnits:
    return ws.unit_set("fixed"), _multi_route_scores(ws, "fixed"), ""


def _v_original(runner: "AblationRunner", ws: _Workspace) -> VariantUnits:
    nodes = ws.unit_set("segments")
    return nodes, ws.vector("segments"), ws.notes.get("segments", "")


def _v_no_hierarchy(runner: "AblationRunner", ws: _Workspace) -> VariantUnits:
    return ws.unit_set("no_hierarchy"), ws.vector("no_hierarchy"), ws.notes.get("segments", "")


def _v_hca(runner: "AblationRunner", ws: _Workspace) -> VariantUnits:
    return ws.unit_set("hca"), ws.vector("hca"), ws.notes.get("segments", "")


def _v_hca_mr(runner: "AblationRunner", ws: _Workspace) -> VariantUnits:
    return ws.unit_set("hca"), _multi_route_scores(ws, "hca"), ws.notes.get("segments", "")


def _v_hca_graph(runner: "AblationRunner", ws: _Workspace) -> VariantUnits:
    nodes = ws.unit_set("hca")
    base = _multi_route_scores(ws, "hca")
    # The units carry the multi-route's keywords by now; the query keywords come from the
    # same extractor when the runner was given one.
    extractor = runner.keyword_extractor
    retriever = _component("ChunkGraphRetriever").from_nodes(
        nodes,
        embed_model=runner.embed_model,
        keyword_fn=extractor.extract_query if extractor is not None else None,
        max_nodes=max(runner.ks),
    )
    ids = [n.node_id for n in nodes]
    rows = [
        list_first_scores(base[i], [r.node.node_id for r in retriever.retrieve(q)], ids)
        for i, q in enumerate(runner.progress(ws.questions, "chunk graph"))
    ]
    return nodes, np.stack(rows), "chain units first, in traversal order; then the multi-route order"


def _v_hca_si(runner: "AblationRunner", ws: _Workspace) -> VariantUnits:
    nodes = ws.unit_set("hca")
    base = _multi_route_scores(ws, "hca")
    docstore = SimpleDocumentStore()
    docstore.add_documents(list(nodes), allow_update=True)
    post = _component("SegmentIntegrationPostprocessor")(docstore=docstore, embed_model=runner.embed_model, relevance="embedding")
    ids = [n.node_id for n in nodes]
    rows = []
    for i, question in enumerate(runner.progress(ws.questions, "segment integration")):
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
