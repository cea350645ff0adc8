"""What a multi-route retriever is made of: a collection and three routes, per store.

[`RouteParts`][llama_index_hiqa.retrievers.route_parts.RouteParts] is the folder store's: the nodes in memory (or their ids over a docstore),
the vector route over any LlamaIndex retriever, bm25s, and a [`KeywordIndex`][llama_index_hiqa.indexes.keyword_index.KeywordIndex].
The embedded store (`embedded_routes`) and PostgreSQL
(`pg_routes`) subclass it with parts that read their database;
[`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever] composes whichever it is given. Also here: the
node results of a ranking ([`node_results`][llama_index_hiqa.retrievers.route_parts.node_results]) and the persisted indexes ([`persist_indexes`][llama_index_hiqa.retrievers.route_parts.persist_indexes],
[`load_arguments`][llama_index_hiqa.retrievers.route_parts.load_arguments]).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.indices.vector_store.base import VectorStoreIndex
from llama_index.core.schema import BaseNode, NodeWithScore
from llama_index.core.storage.docstore.types import BaseDocumentStore

from llama_index_hiqa import schema
from llama_index_hiqa.errors import UnknownNodeError
from llama_index_hiqa.indexes.keyword_index import KeywordIndex
from llama_index_hiqa.retrievers.bm25_route import BM25Route
from llama_index_hiqa.retrievers.keyword_route import KeywordRoute
from llama_index_hiqa.retrievers.node_collection import NodeCollection
from llama_index_hiqa.retrievers.routes import Route, RouteSet, VectorRoute
from llama_index_hiqa.retrievers.settings import MultiRouteSettings, RouteFusionSettings
from llama_index_hiqa.retrievers.store_vectors import cosine_scale
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

logger = logging.getLogger(__name__)

CONFIG_FILENAME = "multi_route.json"
BM25_DIRNAME = "bm25"


@dataclass
class RouteParts:
    """A retriever's collection and routes (the folder store's: built from the nodes).

    Args:
        collection: the nodes, by id and by document, and the collection's shape.
        vector: the vector route, or ``None``.
        bm25: the BM25 route, or ``None`` (not built).
        keywords: the critical-keyword route (asked when ``use_keywords``).
        bm25_tokenizer: the custom BM25 tokenizer, if any (code: passed again at load).
    """

    collection: NodeCollection
    vector: Optional[VectorRoute]
    bm25: Optional[Route]
    keywords: KeywordRoute
    bm25_tokenizer: Optional[Callable[[str], List[str]]] = None

    # What a retriever can do on these parts besides retrieval: rank every node of the
    # collection (``full_ranking``) and write its indexes to a folder (``persist``). A database
    # whose routes are queries (PostgreSQL) does neither.
    ranks_every_node: ClassVar[bool] = True
    persists_to_folder: ClassVar[bool] = True

    @classmethod
    def from_nodes(
        cls,
        config: RouteFusionSettings,
        extractor: CriticalKeywordExtractor,
        vector_retriever: Optional[BaseRetriever] = None,
        nodes: Optional[Sequence[BaseNode]] = None,
        docstore: Optional[BaseDocumentStore] = None,
        keyword_index: Optional[KeywordIndex] = None,
        bm25_route: Optional[BM25Route] = None,
        bm25_tokenizer: Optional[Callable[[str], List[str]]] = None,
    ) -> "RouteParts":
        """The folder store's parts: every route built from the nodes (or given, prebuilt).

        Args:
            config: the retriever's [`MultiRouteSettings`][llama_index_hiqa.retrievers.settings.MultiRouteSettings].
            extractor: the keyword extractor (fills nodes without critical keywords).
            vector_retriever: the vector retriever, or ``None``.
            nodes: the indexed nodes (default: every node of ``docstore``).
            docstore: the docstore holding the nodes (then only their ids are kept).
            keyword_index: a prebuilt keyword index of the nodes.
            bm25_route: a prebuilt BM25 route of the nodes.
            bm25_tokenizer: a custom BM25 tokenizer.

        Returns:
            The parts.

        Raises:
            ValueError: neither a vector retriever nor nodes.
            UnknownNodeError: a prebuilt index names nodes the collection does not hold.
        """
        if nodes is None and docstore is not None:
            nodes = list(docstore.docs.values())
        nodes_list = list(nodes or [])
        collection = NodeCollection.from_nodes(nodes_list, docstore)
        if vector_retriever is None and not collection.nodes:
            raise ValueError("MultiRouteRetriever needs a vector retriever, or nodes, or both")
        vector = None
        if vector_retriever is not None:
            # Every store's similarity read as a cosine, as the fusion expects (store_vectors.py).
            vector = VectorRoute(vector_retriever, collection.nodes, cosine_scale(getattr(vector_retriever, "_vector_store", None)))
        if not nodes_list and (config.use_bm25 or config.use_keywords):
            logger.warning(
                "MultiRouteRetriever got no nodes: the BM25 and keyword routes are off "
                "(pass nodes=, docstore= or use from_index)"
            )
        if config.use_keywords:
            if keyword_index is None:
                missing = [n for n in nodes_list if schema.CRITICAL_KEYWORDS not in n.metadata]
                if missing:
                    extractor(missing)
                keyword_index = KeywordIndex.from_nodes(nodes_list)
            check_known(collection, keyword_index.node_ids, "keyword index")
        keywords = KeywordRoute.from_nodes(nodes_list, extractor, keyword_index or KeywordIndex(), config)
        if bm25_route is None and config.use_bm25 and nodes_list:
            bm25_route = BM25Route.build(nodes_list, bm25_tokenizer, config.bm25_language)
        if bm25_route is not None:
            check_known(collection, bm25_route.node_ids, "BM25 index")
        return cls(collection, vector, bm25_route, keywords, bm25_tokenizer)

    def route_set(self, config: RouteFusionSettings) -> RouteSet:
        """The routes asked under ``config`` (a route that is off is ``None``).

        Args:
            config: the retriever's settings.

        Returns:
            The route set.
        """
        return RouteSet(self.vector, self.bm25 if config.use_bm25 else None, self.keywords if config.use_keywords else None)

    def with_config(self, old: RouteFusionSettings, new: RouteFusionSettings) -> "RouteParts":
        """These parts under other settings: a route switched on is built from the nodes, the
        title facts are read again when the keyword route or the title weight changes.

        Args:
            old: the settings these parts were made for.
            new: the new settings.

        Returns:
            New parts sharing this one's indexes.
        """
        nodes: List[BaseNode] = []
        bm25 = self.bm25
        index = None
        if (new.use_bm25 and bm25 is None) or (new.use_keywords and not old.use_keywords):
            nodes = list(self.collection.nodes.values())
            if new.use_bm25 and bm25 is None and nodes:
                bm25 = BM25Route.build(nodes, self.bm25_tokenizer, new.bm25_language)
            if new.use_keywords and not old.use_keywords:
                index = KeywordIndex.from_nodes(nodes)
        titles_change = (new.use_keywords, new.document_keyword_weight == 1.0) != (
            old.use_keywords, old.document_keyword_weight == 1.0
        )
        if titles_change and not nodes:
            nodes = list(self.collection.nodes.values())
        return dataclasses.replace(self, bm25=bm25, keywords=self.keywords.with_config(new, nodes, index))


def check_known(collection: NodeCollection, node_ids: Sequence[str], what: str) -> None:
    """Raise [`UnknownNodeError`][llama_index_hiqa.errors.UnknownNodeError] when an index names node ids
    the collection does not hold (a stale index); nothing to check without nodes.

    Args:
        collection: the retriever's collection.
        node_ids: the ids the index names.
        what: the index, for the message.

    Raises:
        UnknownNodeError: an id is not in the collection.
    """
    if not collection.nodes:
        return
    unknown = [i for i in node_ids if i not in collection.nodes]
    if unknown:
        raise UnknownNodeError(
            f"{len(unknown)} node id(s) of the {what} are not among the retriever's nodes "
            f"(first: {unknown[:3]}); rebuild the index or pass the matching docstore"
        )


def node_results(
    ranked: Sequence[Tuple[str, float]],
    route_scores: Mapping[str, Mapping[str, Any]],
    found: Mapping[str, BaseNode],
) -> List[NodeWithScore]:
    """``(node_id, score)`` pairs as results: copies of the nodes of ``found`` with their
    ``route_scores`` (and the score as ``"fused"``) in ``metadata["route_scores"]``, hidden
    from the embedding and LLM views; an id without a node is logged and skipped.

    Args:
        ranked: ``[(node id, score), ...]`` in result order.
        route_scores: node id -> its route scores.
        found: node id -> node.

    Returns:
        The results.
    """
    out = []
    for node_id, score in ranked:
        node = found.get(node_id)
        if node is None:  # an id no route can turn into a node: report, don't invent text
            logger.warning("MultiRouteRetriever: node %s is unknown; skipped", node_id)
            continue
        # A copy, so per-query provenance never leaks into the shared node objects.
        node = node.model_copy()
        node.metadata = dict(node.metadata)
        node.excluded_embed_metadata_keys = list(node.excluded_embed_metadata_keys)
        node.excluded_llm_metadata_keys = list(node.excluded_llm_metadata_keys)
        node.metadata[schema.ROUTE_SCORES] = {**route_scores.get(node_id, {}), "fused": score}
        schema.hide_from_views(node, (schema.ROUTE_SCORES,))
        out.append(NodeWithScore(node=node, score=score))
    return out


def persist_indexes(
    persist_dir: Union[str, Path], bm25_route: Optional[BM25Route], keyword_index: KeywordIndex,
    config: MultiRouteSettings, keyword_extractor: CriticalKeywordExtractor, custom_tokenizer: bool = False,
) -> None:
    """Write a BM25 index, a keyword index and the settings in the layout
    ``MultiRouteRetriever.from_persist_dir`` reads, without building a retriever on them.

    Args:
        persist_dir: the folder (created when missing).
        bm25_route: the BM25 route (``None``: the route is off).
        keyword_index: the keyword postings.
        config: the retriever's ``MultiRouteSettings``.
        keyword_extractor: the critical-keyword extractor (its settings are saved).
        custom_tokenizer: the BM25 index was built with a custom tokenizer.
    """
    path = Path(persist_dir)
    path.mkdir(parents=True, exist_ok=True)
    if bm25_route is not None:
        bm25_route.persist(path / BM25_DIRNAME)
    keyword_index.persist(path)
    payload = {
        "config": config.model_dump(),
        "keyword_extractor": keyword_extractor.model_dump(exclude={"llm"}),
        "custom_tokenizer": custom_tokenizer,
    }
    (path / CONFIG_FILENAME).write_text(json.dumps(payload, indent=2), encoding="utf-8")


def load_arguments(
    config_type: Type[MultiRouteSettings],
    persist_dir: Union[str, Path],
    vector_retriever: Optional[BaseRetriever],
    nodes: Optional[Sequence[BaseNode]],
    docstore: Optional[BaseDocumentStore],
    index: Optional[VectorStoreIndex],
    bm25_tokenizer: Optional[Callable[[str], List[str]]],
    kwargs: Dict[str, Any],
) -> Dict[str, Any]:
    """The constructor arguments of the retriever [`persist_indexes`][llama_index_hiqa.retrievers.route_parts.persist_indexes] wrote (see
    ``MultiRouteRetriever.from_persist_dir``).

    Args:
        config_type: the settings class (``MultiRouteSettings``).
        persist_dir: the folder [`persist_indexes`][llama_index_hiqa.retrievers.route_parts.persist_indexes] wrote.
        vector_retriever: the vector route's retriever.
        nodes: the indexed nodes.
        docstore: the docstore holding them.
        index: the vector index.
        bm25_tokenizer: the custom BM25 tokenizer, if any.
        kwargs: settings overriding the saved ones, and constructor arguments.

    Returns:
        The constructor's keyword arguments.

    Raises:
        ValueError: the index was built with a custom tokenizer and none is given.
    """
    path = Path(persist_dir)
    payload = json.loads((path / CONFIG_FILENAME).read_text(encoding="utf-8"))
    if payload.get("custom_tokenizer") and bm25_tokenizer is None:
        raise ValueError("this retriever was built with a custom BM25 tokenizer: pass bm25_tokenizer")
    updates = {k: kwargs.pop(k) for k in list(kwargs) if k in config_type.model_fields}
    config = config_type(**{**payload["config"], **updates})
    if index is not None:
        vector_retriever = vector_retriever or index.as_retriever(similarity_top_k=config.candidates_per_route)
        docstore = docstore or index.docstore
    if nodes is None and docstore is not None:
        nodes = list(docstore.docs.values())
    extractor = kwargs.pop("keyword_extractor", None) or CriticalKeywordExtractor(**payload["keyword_extractor"])
    bm25_path = path / BM25_DIRNAME
    bm25_route = BM25Route.load(bm25_path, bm25_tokenizer) if bm25_path.is_dir() else None
    keyword_index = KeywordIndex.from_persist_dir(path) if (path / KeywordIndex.FILENAME).exists() else None
    return dict(
        vector_retriever=vector_retriever, nodes=nodes, keyword_extractor=extractor, keyword_index=keyword_index,
        bm25_tokenizer=bm25_tokenizer, config=config, bm25_route=bm25_route, **kwargs,
    )
