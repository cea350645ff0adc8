"""The vector route on any LlamaIndex vector store: cosine scores, and scores of given nodes.

HiQA's fusion (``α·v + (1−α)·r + β·log(1+|C|)``, min-max normalised per route) and the
document focus read the vector route's scores as cosine similarities, as the pack's own
store and ``SimpleVectorStore`` return them. LlamaIndex's integrations do not agree on a
scale: Chroma returns ``exp(−distance)`` of its collection's space (squared L2 by default),
LanceDB ``exp(−_distance)``, FAISS and Milvus the raw inner product or squared L2 of their
index. Min-max normalisation is not invariant under ``exp``, so the same vectors would rank
differently per store. [`cosine_scale`][llama_index_hiqa.retrievers.store_vectors.cosine_scale] maps each store's score back to the cosine of
unit vectors (the pack's embeddings are normalised), so a node ranks the same whichever store
holds it, within the store's approximate-search error.

The second difference is restriction: the document focus asks for the vector scores of
exactly one document's nodes. ``VectorStoreQuery.node_ids`` is honoured by the pack's store,
``SimpleVectorStore``, Qdrant, Milvus and pgvector, and silently ignored by Chroma, LanceDB,
DuckDB and FAISS. `scores_of_nodes` checks what came back and, for a store that
ignored the ids, asks again with a metadata filter on the nodes' ``ref_doc_id`` (which every
integration stores flat), or, for a store without filters (FAISS), over the whole collection;
it returns the restriction that worked, so the caller asks that way from then on.
"""

from __future__ import annotations

import copy
import math
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import FilterCondition, MetadataFilter, MetadataFilters

Scale = Callable[[float], float]

# The smallest score exp(−d) can take before log(); a distance of 700 is no similarity at all.
_TINY = 1e-300


def identity(score: float) -> float:
    """A store's score that already is a cosine, as it is.

    Args:
        score: the cosine.

    Returns:
        ``score``.
    """
    return score


def from_exp_squared_l2(score: float) -> float:
    """``exp(−‖q−x‖²)`` of unit vectors -> cosine (‖q−x‖² = 2 − 2·cos).

    Args:
        score: the store's score.

    Returns:
        The cosine.
    """
    return 1.0 + math.log(max(score, _TINY)) / 2.0


def from_exp_cosine_distance(score: float) -> float:
    """``exp(−(1 − cos))`` -> cosine.

    Args:
        score: the store's score.

    Returns:
        The cosine.
    """
    return 1.0 + math.log(max(score, _TINY))


def from_squared_l2(distance: float) -> float:
    """``‖q−x‖²`` of unit vectors -> cosine.

    Args:
        distance: the squared distance.

    Returns:
        The cosine.
    """
    return 1.0 - distance / 2.0


def cosine_scale(vector_store: Optional[object]) -> Scale:
    """How to read ``vector_store``'s similarity scores as cosines (identity when they are).

    Args:
        vector_store: the LlamaIndex vector store.

    Returns:
        The function from its score to the cosine.
    """
    if vector_store is None:
        return identity
    name = type(vector_store).__name__
    if name == "ChromaVectorStore":
        return from_exp_squared_l2 if _chroma_space(vector_store) == "l2" else from_exp_cosine_distance
    if name == "LanceDBVectorStore":
        metric = str(getattr(vector_store, "_metric", None) or getattr(vector_store, "metric", None) or "l2").lower()
        return from_exp_cosine_distance if metric in ("cosine", "dot") else from_exp_squared_l2
    if name == "MilvusVectorStore":
        return from_squared_l2 if str(getattr(vector_store, "similarity_metric", "IP")).upper() == "L2" else identity
    if name in ("FaissVectorStore", "FaissMapVectorStore"):
        index = getattr(vector_store, "_faiss_index", None)
        return from_squared_l2 if getattr(index, "metric_type", 0) == 1 else identity  # faiss.METRIC_L2 == 1
    return identity


def _chroma_space(vector_store: object) -> str:
    collection = getattr(vector_store, "_collection", None)
    metadata = getattr(collection, "metadata", None) or {}
    space = metadata.get("hnsw:space")
    if space is None:  # chromadb 1.x keeps it in the collection's configuration
        configuration = getattr(collection, "configuration_json", None) or {}
        space = (configuration.get("hnsw") or {}).get("space") or (configuration.get("spann") or {}).get("space")
    return str(space or "l2")


def with_top_k(retriever: BaseRetriever, top_k: int) -> BaseRetriever:
    """A shallow copy of ``retriever`` asking for ``top_k`` results, when it has that knob.

    Args:
        retriever: the retriever.
        top_k: how many results.

    Returns:
            The copy, or ``retriever`` itself when it has no top-k setting.
    """
    for attribute in ("similarity_top_k", "_similarity_top_k", "top_k"):
        if hasattr(retriever, attribute):
            clone = copy.copy(retriever)
            try:
                setattr(clone, attribute, top_k)
                return clone
            except (AttributeError, TypeError, ValueError):
                continue
    return retriever


def collect(results: Sequence[NodeWithScore], scale: Scale = identity) -> Dict[str, float]:
    """``{node id: cosine}``; a node returned twice keeps its best score.

    Args:
        results: the retriever's results.
        scale: the store's score -> cosine.

    Returns:
        Node id -> cosine.
    """
    scores: Dict[str, float] = {}
    for result in results:
        score = scale(float(result.score if result.score is not None else 0.0))
        node_id = result.node.node_id
        if node_id not in scores or score > scores[node_id]:
            scores[node_id] = score
    return scores


# How a store is asked for the scores of given nodes, in the order they are tried: their ids
# (VectorStoreQuery.node_ids), a filter on their documents, the whole collection.
BY_NODE_IDS, BY_DOCUMENTS, WHOLE_COLLECTION = "node_ids", "ref_doc_id", "collection"
RESTRICTIONS: Tuple[str, ...] = (BY_NODE_IDS, BY_DOCUMENTS, WHOLE_COLLECTION)


def scores_of_nodes(
    retriever: BaseRetriever,
    query: QueryBundle,
    node_ids: Sequence[str],
    nodes: Mapping[str, BaseNode],
    scale: Scale = identity,
    collection_size: Optional[int] = None,
    restriction: Optional[str] = None,
) -> Tuple[Dict[str, float], Optional[str]]:
    """``({node id: cosine}, restriction)``: the cosine of ``query`` with each of ``node_ids``
    that the store returns, and the restriction that gave them (``nodes``: id -> node, for the
    nodes' ``ref_doc_id``). Pass the returned restriction back on the next call: a store that
    ignores node ids is then not asked by id again.

    Args:
        retriever: the vector retriever.
        query: the question.
        node_ids: the nodes to score.
        nodes: node id -> node.
        scale: the store's score -> cosine.
        collection_size: the number of nodes stored (the top k of a whole-collection query;
            ``None``: ``len(node_ids)``).
        restriction: the restriction returned by the previous call (``None``: try each).

    Returns:
        ``(node id -> cosine, restriction)``; ``({}, restriction)`` when no restriction answered.
    """
    wanted = set(node_ids)
    if not wanted:
        return {}, restriction
    modes = RESTRICTIONS[RESTRICTIONS.index(restriction):] if restriction else RESTRICTIONS
    for mode in modes:
        results = _ask(mode, retriever, query, node_ids, nodes, collection_size)
        if results is not None:
            found = collect(results, scale)
            return {i: s for i, s in found.items() if i in wanted}, mode
    return {}, restriction


def _ask(
    mode: str,
    retriever: BaseRetriever,
    query: QueryBundle,
    node_ids: Sequence[str],
    nodes: Mapping[str, BaseNode],
    collection_size: Optional[int],
) -> Optional[List[NodeWithScore]]:
    """The store's answer restricted by ``mode``; ``None`` when the store ignores or refuses it."""
    wanted = set(node_ids)
    if mode == BY_NODE_IDS:
        restricted = with_top_k(retriever, len(wanted))
        if not hasattr(restricted, "_node_ids"):
            return None
        restricted._node_ids = list(node_ids)  # VectorIndexRetriever's restriction
        results = restricted.retrieve(query)
        return results if all(r.node.node_id in wanted for r in results) else None
    if mode == BY_DOCUMENTS:
        documents = sorted({ref for ref in (_ref_doc_id(nodes, i) for i in wanted) if ref})
        if not documents or not hasattr(retriever, "_filters"):
            return None
        filtered = with_top_k(retriever, len(wanted))
        filtered._filters = MetadataFilters(  # type: ignore[attr-defined]
            filters=[MetadataFilter(key="ref_doc_id", value=ref) for ref in documents],
            # One filter alone: Chroma refuses an "or" of fewer than two conditions.
            condition=FilterCondition.OR if len(documents) > 1 else FilterCondition.AND,
        )
        try:
            return filtered.retrieve(query) or None
        except (NotImplementedError, ValueError):
            return None  # a store without metadata filters (FAISS)
    return with_top_k(retriever, collection_size or len(wanted)).retrieve(query)


def _ref_doc_id(nodes: Mapping[str, BaseNode], node_id: str) -> Optional[str]:
    try:
        node = nodes[node_id]
    except KeyError:
        return None
    return node.ref_doc_id


__all__: List[str] = ["cosine_scale", "scores_of_nodes", "collect", "with_top_k"]
