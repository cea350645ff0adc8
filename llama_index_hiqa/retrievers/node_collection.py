"""The multi-route retriever's collection: its nodes by id, by document, and its shape.

What the document focus asks of the retriever besides scores ([`NodeCollection.nodes_by_id`][llama_index_hiqa.retrievers.node_collection.NodeCollection.nodes_by_id],
[`NodeCollection.document_node_ids`][llama_index_hiqa.retrievers.node_collection.NodeCollection.document_node_ids]) and what ``beta="auto"`` needs (the number of
documents and their average pages, HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for
Multi-Documents QA" (Chen et al.), §Multi-Route Retriever): more, shorter documents call for a
larger β). The embedded store and PostgreSQL read the same facts from their databases.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore

from llama_index_hiqa import schema


def collection_shape(nodes: Sequence[BaseNode]) -> Tuple[int, float]:
    """``(|D|, average pages per document)`` of ``nodes``: pages from ``schema.PAGE_END``; a
    document without page facts counts one page per node.

    Args:
        nodes: the indexed nodes.

    Returns:
        ``(number of documents, average pages)``; ``(0, 1.0)`` for no nodes.
    """
    pages: Dict[str, int] = {}
    counts: Dict[str, int] = {}
    for node in nodes:
        doc = schema.get_document_id(node) or node.node_id
        counts[doc] = counts.get(doc, 0) + 1
        page_range = schema.get_page_range(node)
        if page_range is not None:
            pages[doc] = max(pages.get(doc, 0), page_range[1] + 1)
    if not counts:
        return 0, 1.0
    per_doc = [pages.get(doc, counts[doc]) for doc in counts]
    return len(counts), sum(per_doc) / len(per_doc)


class DocstoreNodes(Mapping[str, BaseNode]):
    """The retriever's nodes, read from the docstore by id when a result needs one: the ids
    stay in memory, the nodes stay where LlamaIndex keeps them (no second copy of the
    collection in the retriever)."""

    def __init__(self, docstore: BaseDocumentStore, node_ids: Sequence[str]) -> None:
        self._docstore = docstore
        self._ids = dict.fromkeys(node_ids)

    def __getitem__(self, node_id: str) -> BaseNode:
        if node_id not in self._ids:
            raise KeyError(node_id)
        return self._docstore.get_node(node_id)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._ids

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


class NodeCollection:
    """The nodes a multi-route retriever ranks, held as a mapping (a dict, or the ids over a
    docstore).

    Args:
        nodes: node id -> node, in collection order.
        document_titles: document id -> title of every document.
        shape: ``(|D|, average pages)`` (`collection_shape`).
    """

    def __init__(
        self, nodes: Mapping[str, BaseNode], document_titles: Optional[Dict[str, str]] = None,
        shape: Tuple[int, float] = (0, 1.0),
    ) -> None:
        self.nodes = nodes
        self.document_titles: Dict[str, str] = document_titles or {}
        self._shape = shape
        self._document_nodes: Optional[Dict[str, List[str]]] = None  # built at first use

    @classmethod
    def from_nodes(cls, nodes: Sequence[BaseNode], docstore: Optional[BaseDocumentStore] = None) -> "NodeCollection":
        """The collection of ``nodes``; with ``docstore`` only their ids are kept.

        Args:
            nodes: the indexed nodes.
            docstore: the docstore holding them, or ``None`` to keep the nodes.

        Returns:
            The collection.
        """
        mapping: Mapping[str, BaseNode] = (
            DocstoreNodes(docstore, [n.node_id for n in nodes]) if docstore is not None else {n.node_id: n for n in nodes}
        )
        titles: Dict[str, str] = {}
        for node in nodes:
            document_id = schema.get_document_id(node)
            if document_id and document_id not in titles:
                titles[document_id] = schema.get_document_title(node)
        return cls(mapping, titles, collection_shape(nodes))

    def shape(self) -> Tuple[int, float]:
        """``(|D|, average pages per document)``."""
        return self._shape

    def nodes_by_id(self, node_ids: Sequence[str]) -> Dict[str, BaseNode]:
        """The nodes of ``node_ids`` (unknown ids left out).

        Args:
            node_ids: the ids.

        Returns:
            ``{node id: node}``.
        """
        out = {}
        for node_id in node_ids:
            node = self.nodes.get(node_id)
            if node is not None:
                out[node_id] = node
        return out

    def document_node_ids(self, document_id: str) -> List[str]:
        """The ids of every node of ``document_id`` (``schema.get_document_id``).

        Args:
            document_id: the document.

        Returns:
            Its node ids in collection order.
        """
        if self._document_nodes is None:
            by_document: Dict[str, List[str]] = {}
            for node_id in self.nodes:
                node = self.nodes[node_id]
                by_document.setdefault(schema.get_document_id(node) or "", []).append(node_id)
            self._document_nodes = by_document
        return list(self._document_nodes.get(document_id, []))
