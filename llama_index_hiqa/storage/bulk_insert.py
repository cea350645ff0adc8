"""Index a batch of nodes in time linear in its size.

LlamaIndex's ``VectorStoreIndex.insert_nodes`` writes the docstore one node at a time
(``docstore.add_documents([node])``), and each call reads the node's document record, appends
the node id and serialises the whole record again: one document of n nodes costs O(n²)
(52 of 52.6 s in ``RefDocInfo.to_dict`` for a 4,196-node document). [`insert_nodes`][llama_index_hiqa.storage.bulk_insert.insert_nodes]
does the same three writes — vector store, index struct, docstore — once per batch, building
each document's record once, the way a database does a bulk load.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Set

from llama_index.core.schema import BaseNode, ImageNode, IndexNode
from llama_index.core.storage.docstore.types import RefDocInfo
from llama_index.core.storage.docstore.utils import doc_to_json


def insert_nodes(index: Any, nodes: Sequence[BaseNode], unit: bool = False) -> None:
    """What ``index.insert_nodes(nodes)`` does for nodes that already carry their embeddings.

    With one docstore write per batch.

    Args:
        index: the ``VectorStoreIndex``.
        nodes: the nodes, each with its embedding.
        unit: the embeddings are a store's unit vectors, copied (the pack's own vector stores
            keep them bit for bit).
    """
    if not nodes:
        return
    embedded = index._get_node_with_embedding(nodes)  # a no-op for nodes embedded by the pipeline
    new_ids = index._vector_store.add(embedded, unit=True) if unit else index._vector_store.add(embedded)
    # As LlamaIndex does: every node goes to the docstore when the vector store keeps no text
    # (or the pack asks for it), else only image and index nodes.
    keep_all = not index._vector_store.stores_text or index._store_nodes_override
    copies: List[BaseNode] = []
    for node, new_id in zip(embedded, new_ids):
        if not keep_all and not isinstance(node, (ImageNode, IndexNode)):
            continue
        copy = node.model_copy()
        copy.embedding = None  # the vector store holds it; the docstore need not
        index.index_struct.add_node(copy, text_id=new_id)
        copies.append(copy)
    if copies:
        add_to_docstore(index.docstore, copies)
    index.storage_context.index_store.add_index_struct(index.index_struct)


def add_to_docstore(docstore: Any, nodes: Sequence[BaseNode]) -> None:
    """``docstore.add_documents(nodes)`` with each document's record read and written once.

    The record lists a document's node ids. A docstore without LlamaIndex's key-value layout
    gets ``add_documents``.

    Args:
        docstore: the docstore.
        nodes: the nodes to add.
    """
    kvstore = getattr(docstore, "_kvstore", None)
    collections = [getattr(docstore, f"_{name}_collection", None) for name in ("node", "metadata", "ref_doc")]
    if kvstore is None or None in collections:
        docstore.add_documents(list(nodes), allow_update=True)
        return
    node_collection, metadata_collection, ref_doc_collection = collections
    records: Dict[str, RefDocInfo] = {}
    seen: Dict[str, Set[str]] = {}
    node_pairs, metadata_pairs = [], []
    for node in nodes:
        node_pairs.append((node.node_id, doc_to_json(node)))
        metadata: Dict[str, Any] = {"doc_hash": node.hash}
        ref_id = node.ref_doc_id if node.source_node is not None else None
        if ref_id:
            metadata["ref_doc_id"] = ref_id
            if ref_id not in records:
                records[ref_id] = docstore.get_ref_doc_info(ref_id) or RefDocInfo()
                seen[ref_id] = set(records[ref_id].node_ids)
            record = records[ref_id]
            if node.node_id not in seen[ref_id]:
                record.node_ids.append(node.node_id)
                seen[ref_id].add(node.node_id)
            if not record.metadata:
                record.metadata = node.metadata or {}
        metadata_pairs.append((node.node_id, metadata))
    batch = getattr(docstore, "_batch_size", 1)
    kvstore.put_all(node_pairs, collection=node_collection, batch_size=batch)
    kvstore.put_all(metadata_pairs, collection=metadata_collection, batch_size=batch)
    kvstore.put_all([(k, r.to_dict()) for k, r in records.items()], collection=ref_doc_collection, batch_size=batch)
