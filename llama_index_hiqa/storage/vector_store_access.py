"""What the pack needs of a LlamaIndex vector store beyond ``VectorStoreIndex``'s interface:
the collection's nodes, a document's deletion, and a write the store can take.

**Nodes.** The BM25 and keyword routes of [`MultiRouteRetriever`][llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever], the
chunk graph of [`ChunkGraphRetriever`][llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever] and the gap filling of
[`SegmentIntegrationPostprocessor`][llama_index_hiqa.postprocessors.segment_integration.SegmentIntegrationPostprocessor] read every node of the collection,
not only the top k. A ``VectorStoreIndex`` keeps them in its docstore when the vector store
keeps no text (``SimpleVectorStore``, FAISS) or when built with ``store_nodes_override=True``;
over a store that keeps the text (Chroma, Qdrant, LanceDB, Milvus, DuckDB, pgvector, ...) the
docstore stays empty and the nodes are only in the vector store. [`index_nodes`][llama_index_hiqa.storage.vector_store_access.index_nodes] returns
them from wherever they are: ``nodes=`` or ``docstore=`` given by the caller, else the index's
docstore, else the vector store itself. Listing a store is not one call in LlamaIndex:
``get_nodes()`` with no argument is refused by Milvus and pgvector and capped by Qdrant (9,999
points), so each of those has its lister below. A store that cannot list its nodes raises
[`VectorStoreFeatureError`][llama_index_hiqa.errors.VectorStoreFeatureError] naming the store, the component and
the argument to pass: a route is never switched off silently.

**Deletion** ([`delete_ref_doc`][llama_index_hiqa.storage.vector_store_access.delete_ref_doc]) and **writes** ([`prepare_nodes_for_store`][llama_index_hiqa.storage.vector_store_access.prepare_nodes_for_store],
[`check_nodes_fit`][llama_index_hiqa.storage.vector_store_access.check_nodes_fit]) go around two integrations' limits: LanceDB's delete quotes the id as a
column name, and a LanceDB table keeps the metadata fields of its first write.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.storage.docstore import BaseDocumentStore, SimpleDocumentStore
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_hiqa import schema
from llama_index_hiqa.errors import InvalidSettingError, VectorStoreFeatureError

# Ids asked of a store per call when a store is listed by id (Milvus).
_ID_BATCH = 1000


def index_nodes(
    index: Any, component: str, docstore: Optional[BaseDocumentStore] = None
) -> Tuple[List[BaseNode], BaseDocumentStore]:
    """The nodes of ``index`` and the docstore to read them from.

    The docstore is the one given, else the index's when it holds the nodes, else an in-memory
    ``SimpleDocumentStore`` of the nodes listed from the vector store (result nodes and
    neighbouring chunks are read from it by id).

    Args:
        index: a LlamaIndex ``VectorStoreIndex``.
        component: the component asking, named in errors.
        docstore: a docstore holding the nodes; ``None`` finds one as above.

    Returns:
        ``(nodes, docstore)``.

    Raises:
        VectorStoreFeatureError: the nodes are only in a vector store that cannot list them
            (says what to pass instead).
    """
    if docstore is not None:
        return list(docstore.docs.values()), docstore
    stored = list(index.docstore.docs.values())
    vector_store = index.vector_store
    if stored or not getattr(vector_store, "stores_text", False):
        return stored, index.docstore
    listed = list_vector_store_nodes(vector_store, component)
    return listed, _memory_docstore(listed)


def one_node_source(component: str, index: Any, nodes: Any, docstore: Any) -> None:
    """Check that a ``from_defaults`` got exactly one of ``index``, ``nodes``, ``docstore``
    (LlamaIndex's ``BM25Retriever.from_defaults`` convention).

    Args:
        component: the constructor asking, named in the error.
        index: a ``VectorStoreIndex`` or ``None``.
        nodes: the nodes or ``None``.
        docstore: a docstore or ``None``.

    Raises:
        InvalidSettingError: none or more than one was given.
    """
    given = [name for name, value in (("index", index), ("nodes", nodes), ("docstore", docstore)) if value is not None]
    if len(given) != 1:
        raise InvalidSettingError(
            f"{component}(index=, nodes=, docstore=)",
            f"pass exactly one of index, nodes or docstore (got {', '.join(given) or 'none'})",
        )


def list_vector_store_nodes(vector_store: Any, component: str) -> List[BaseNode]:
    """Every node a text-keeping vector store holds (text and metadata; vectors where returned).

    Args:
        vector_store: the vector store.
        component: the component asking, named in the error.

    Returns:
        The nodes, in the store's order.

    Raises:
        VectorStoreFeatureError: the store refused to list its nodes (says what to pass
            instead).
    """
    name = type(vector_store).__name__
    lister = _LISTERS.get(name, _unfiltered_get_nodes)
    try:
        return list(lister(vector_store))
    # A store's own refusal (NotImplementedError, ValueError, an assertion, a client error):
    # turned into one error that says what to pass instead.
    except Exception as exc:  # noqa: BLE001
        raise VectorStoreFeatureError(
            store=name,
            feature=f"{component} reads every node of the collection, and listing this store's nodes failed "
            f"({type(exc).__name__}: {exc})",
            fix="pass nodes=[...] (the nodes you indexed) or docstore=..., or build the index with "
            "VectorStoreIndex(..., store_nodes_override=True) so that its docstore keeps them",
        ) from exc


def _memory_docstore(nodes: Sequence[BaseNode]) -> SimpleDocumentStore:
    docstore = SimpleDocumentStore()
    docstore.add_documents(list(nodes), allow_update=True)
    return docstore


def _unfiltered_get_nodes(vector_store: Any) -> List[BaseNode]:
    return vector_store.get_nodes()


def _chroma(vector_store: Any) -> List[BaseNode]:
    return vector_store.get_nodes(None)


def _qdrant(vector_store: Any) -> List[BaseNode]:
    # get_nodes() scrolls 9,999 points unless told how many there are.
    client, collection = vector_store.client, vector_store.collection_name
    if not client.collection_exists(collection):
        return []
    count = client.count(collection_name=collection, exact=True).count
    return vector_store.get_nodes(limit=max(1, count)) if count else []


def _milvus(vector_store: Any) -> List[BaseNode]:
    # Milvus answers get_nodes() only with ids or filters; the ids come from an iterator
    # (a plain query is capped at 16,384 rows).
    iterator = vector_store.client.query_iterator(
        collection_name=vector_store.collection_name, batch_size=_ID_BATCH, filter="", output_fields=["id"]
    )
    nodes: List[BaseNode] = []
    try:
        while True:
            batch = iterator.next()
            if not batch:
                return nodes
            nodes += vector_store.get_nodes(node_ids=[str(row["id"]) for row in batch])
    finally:
        iterator.close()


def _pgvector(vector_store: Any) -> List[BaseNode]:
    # PGVectorStore asserts ids or filters; an empty filter list selects every row.
    return vector_store.get_nodes(filters=MetadataFilters(filters=[]))


# Keys LlamaIndex's node_to_metadata_dict adds beside the node's own metadata.
_LLAMA_INDEX_ROW_KEYS = frozenset({"_node_content", "_node_type", "document_id", "doc_id", "ref_doc_id"})


# Every fact a node of the pack may carry whose absence has an empty form of the same type,
# for a LanceDB table to hold from its first write (pages and positions are never padded: 0
# would be a wrong page, not an empty one).
_EMPTY_FACTS: Dict[str, Any] = {
    **{key: "" for key in (schema.SECTION_TITLE, schema.TABLE_TITLE, schema.IMAGE_CAPTION, schema.IMAGE_FILE,
                           schema.IMAGE_SOURCE, schema.SOURCE_FORMAT, schema.PARSE_PATH, schema.PAGE_BOXES,
                           *schema.VIEW_KEYS)},
    **{key: schema.encode_json([]) for key in (schema.HEADING_PATH, schema.TABLE_COLUMNS, schema.TABLE_ROWS,
                                               schema.IMAGE_BBOX, schema.CRITICAL_KEYWORDS)},
    schema.IMAGE_XREF: 0,
}


def prepare_nodes_for_store(vector_store: Any, nodes: Sequence[BaseNode]) -> None:
    """Make ``nodes`` what the store can take, changing nothing a reader relies on.

    * pgvector: PostgreSQL's text and jsonb cannot hold NUL (PDF text sometimes does), so each
      is replaced by U+FFFD in the text and the string metadata, one character for one, so
      every character offset holds;
    * LanceDB: a table keeps the fields of its first write, so each node gets every fact of
      the pack's vocabulary, the missing ones empty (and hidden from both views).

    Other stores: nothing changes.

    Args:
        vector_store: the store the nodes are about to be written to.
        nodes: the nodes (changed in place).
    """
    name = type(vector_store).__name__
    if name == "PGVectorStore":
        for node in nodes:
            _replace_nul(node)
    if name != "LanceDBVectorStore":
        return
    for node in nodes:
        padded = [key for key in _EMPTY_FACTS if key not in node.metadata]
        for key in padded:
            node.metadata[key] = _EMPTY_FACTS[key]
        schema.hide_from_views(node, padded)


def _replace_nul(node: BaseNode) -> None:
    text = node.get_content(metadata_mode=MetadataMode.NONE)
    if "\x00" in text:
        node.set_content(text.replace("\x00", "\ufffd"))
    for key, value in list(node.metadata.items()):
        if isinstance(value, str) and "\x00" in value:
            node.metadata[key] = value.replace("\x00", "\ufffd")


def check_nodes_fit(vector_store: Any, nodes: Sequence[BaseNode]) -> None:
    """Refuse before a write the store would refuse half-way.

    A LanceDB table keeps the metadata fields of its first write and rejects a node carrying
    another (a table's labels, a figure's caption, a summary). Other stores pass.

    Args:
        vector_store: the store the nodes are about to be written to.
        nodes: the nodes.

    Raises:
        VectorStoreFeatureError: a node carries a metadata field the table does not have.
    """
    if type(vector_store).__name__ != "LanceDBVectorStore" or not nodes:
        return
    try:
        fields = {field.name for field in vector_store.table.schema.field("metadata").type}
    # No table yet (the first write makes it), or another layout: nothing to check against.
    except Exception:  # noqa: BLE001
        return
    keys = {key for node in nodes for key in node.metadata} | _LLAMA_INDEX_ROW_KEYS
    unknown = sorted(keys - fields)
    if unknown:
        raise VectorStoreFeatureError(
            store="LanceDBVectorStore",
            feature=f"its table keeps the metadata fields of its first write, and these nodes carry "
            f"{', '.join(map(repr, unknown[:5]))} which it lacks",
            fix="ingest the whole collection into a new table in one run (its first batch then holds every "
            "kind of node), or use a store without a fixed schema (the pack's default, Chroma, Qdrant, ...)",
        )


def delete_ref_doc(index: Any, ref_doc_id: str) -> None:
    """``index.delete_ref_doc(ref_doc_id, delete_from_docstore=True)``, past stores that cannot.

    LanceDB's integration quotes the id as a column name (``doc_id = "x"`` is a column ``x``
    in its SQL), so its rows are deleted with the value quoted. A store that refuses (FAISS:
    ``NotImplementedError``) refuses before anything was deleted.

    Args:
        index: the ``VectorStoreIndex``.
        ref_doc_id: the document whose nodes are deleted.
    """
    vector_store = index.vector_store
    if type(vector_store).__name__ == "LanceDBVectorStore":
        quoted = ref_doc_id.replace("'", "''")
        vector_store.table.delete(f"{vector_store.doc_id_key} = '{quoted}'")
        # The rest of VectorStoreIndex.delete_ref_doc, step for step.
        index._delete_from_index_struct(ref_doc_id)
        index._delete_from_docstore(ref_doc_id)
        index.storage_context.index_store.add_index_struct(index.index_struct)
        return
    index.delete_ref_doc(ref_doc_id, delete_from_docstore=True)


_LISTERS: Dict[str, Callable[[Any], List[BaseNode]]] = {
    "ChromaVectorStore": _chroma,
    "QdrantVectorStore": _qdrant,
    "MilvusVectorStore": _milvus,
    "PGVectorStore": _pgvector,
}
