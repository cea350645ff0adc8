"""One conformance suite over the vector stores LlamaIndex apps use (tests/vector_stores.py):
the pack's MatrixVectorStore, SimpleVectorStore, Chroma, Qdrant local mode, LanceDB, Milvus
Lite, DuckDB, FAISS (a store without text) and pgvector (the tests' PostgreSQL server).

For every store, what README's "Drop one component into your app" table promises:
* the reader, each parser, the cascade and the keyword extractor ingest into it;
* each drop-in row runs on an index over it, with every route on;
* ``HiQAPack.from_directory(vector_store=...)`` ranks the demo questions as on the default
  store, persists, loads in a second process, replaces a changed file and deletes a document.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import MetadataMode, QueryBundle

from llama_index_hiqa import (
    CascadingMetadataTransform,
    ChunkGraphRetriever,
    ContextHeaderTransform,
    CriticalKeywordExtractor,
    HiQAPack,
    LayoutMarkdownParser,
    LineNumberSegmentParser,
    MarkdownFormatterParser,
    MultiRouteRetriever,
    PDFLayoutReader,
    SegmentIntegrationPostprocessor,
    VectorStoreFeatureError,
    demo_data_dir,
    schema,
)
from llama_index_hiqa.evaluation.datasets import load_questions_jsonl
from llama_index_hiqa.storage.vector_store_access import index_nodes
from llama_index_hiqa.testing import ScriptedLLM
from tests.pack_helpers import HashEmbedding
from tests.vector_stores import IN_MEMORY_KINDS, STORE_KINDS, available, close_store, open_store

DIM = 256  # HashEmbedding's
TOP_K = 5

pytestmark = pytest.mark.stores


def _kinds() -> List:
    return [
        pytest.param(kind, marks=pytest.mark.skipif(not available(kind), reason=f"{kind} integration not installed"))
        for kind in STORE_KINDS
    ]


# Module scope: the tests of one store run together, sharing its app index (built once).
@pytest.fixture(scope="module", params=_kinds())
def kind(request) -> str:
    return request.param


@pytest.fixture
def pg_url(kind, request):
    """A fresh database for pgvector (the session's server), ``None`` for the others."""
    if kind != "pgvector":
        return None
    return request.getfixturevalue("server").database()


@pytest.fixture(scope="module")
def module_pg_url(kind, request):
    if kind != "pgvector":
        return None
    return request.getfixturevalue("server").database()


@pytest.fixture(scope="module")
def documents():
    return PDFLayoutReader().load_data(demo_data_dir())


@pytest.fixture(scope="module")
def questions():
    return load_questions_jsonl(demo_data_dir() / "questions.jsonl")


@pytest.fixture(scope="module")
def default_pack(tmp_path_factory):
    """The pack on its own default store: the rankings every store must give."""
    folder = tmp_path_factory.mktemp("default-pack")
    for pdf in demo_data_dir().glob("*.pdf"):
        shutil.copy(pdf, folder / pdf.name)
    return HiQAPack.from_directory(folder, embed_model=HashEmbedding())


def _top_ids(retriever, questions) -> Dict[str, List[str]]:
    """Question -> its top k as ``document:position`` (node ids are drawn anew by each build)."""
    return {q.id: [_key(n.node) for n in retriever.retrieve(q.question)[:TOP_K]] for q in questions}


def _key(node) -> str:
    return f"{schema.get_document_id(node)}:{schema.get_position(node)}"


def _agreement(ours: Dict[str, List[str]], reference: Dict[str, List[str]]):
    """(share of questions with the same first node, mean top-k overlap)."""
    first = sum(ours[q][:1] == reference[q][:1] for q in reference) / len(reference)
    overlap = sum(len(set(ours[q]) & set(reference[q])) / max(1, len(reference[q])) for q in reference) / len(reference)
    return first, overlap


# --------------------------------------------------------------------------- components
def test_reader_and_splitter_nodes_go_into_the_store(kind, pg_url, tmp_path, documents):
    """PDFLayoutReader + LlamaIndex's SentenceSplitter: Chroma and the other flat-metadata
    stores rejected the reader's list-valued page spans."""
    store = open_store(kind, tmp_path, DIM, pg_url)
    index = VectorStoreIndex.from_documents(
        documents[:3], storage_context=StorageContext.from_defaults(vector_store=store),
        transformations=[SentenceSplitter(chunk_size=256, chunk_overlap=32)], embed_model=HashEmbedding(),
    )
    nodes, _ = index_nodes(index, "test")
    assert len(nodes) > 3
    # The structured facts come back decoded from whatever the store kept.
    assert all(schema.page_spans_of(n.metadata) for n in nodes)
    hits = index.as_retriever(similarity_top_k=3).retrieve("maximum output current of the NX-2041")
    assert hits and all(schema.page_spans_of(h.node.metadata) for h in hits)
    close_store(kind, store)


def test_parser_cascade_and_keywords_ingest_into_the_store(kind, pg_url, tmp_path, documents):
    store = open_store(kind, tmp_path, DIM, pg_url)
    index = VectorStoreIndex.from_documents(
        documents, storage_context=StorageContext.from_defaults(vector_store=store),
        transformations=[LayoutMarkdownParser(), CascadingMetadataTransform(), CriticalKeywordExtractor()],
        embed_model=HashEmbedding(),
    )
    nodes, _ = index_nodes(index, "test")
    assert len({schema.get_document_id(n) for n in nodes}) == 10
    tables = [n for n in nodes if schema.get_segment_kind(n) == schema.KIND_TABLE]
    assert tables and all(schema.get_table_labels(t)[0] for t in tables)
    assert all(schema.get_critical_keywords(n) for n in nodes)
    (hit,) = index.as_retriever(similarity_top_k=1).retrieve("NX-2043 electrical characteristics")
    path = [h.label() for h in schema.get_heading_path(hit.node)]
    assert path and hit.node.metadata[schema.HEADING_CASCADE].startswith("NX-2043")
    close_store(kind, store)


def test_llm_parsers_and_context_headers_ingest_into_the_store(kind, pg_url, tmp_path, documents):
    """The README rows that take an LLM (scripted here, as in their own tests)."""
    from tests.test_context_header import _llm as header_llm
    from tests.test_markdown_formatter import good as good_markdown

    pipelines = {
        "markdown formatter": [MarkdownFormatterParser(llm=ScriptedLLM(good_markdown)), CascadingMetadataTransform()],
        "line numbers": [LineNumberSegmentParser(llm=header_llm(), min_chars_for_llm=0),
                         ContextHeaderTransform(llm=header_llm())],
    }
    for name, transformations in pipelines.items():
        # One store (one collection) per index, as an app has: FAISS rows are numbered per index.
        # (pgvector: both share the database's table, as two apps on one database may.)
        store = open_store(kind, tmp_path / name.replace(" ", "-"), DIM, pg_url)
        index = VectorStoreIndex.from_documents(
            documents[:2], storage_context=StorageContext.from_defaults(vector_store=store),
            transformations=transformations, embed_model=HashEmbedding(),
        )
        hits = index.as_retriever(similarity_top_k=3).retrieve("NX-2040 output current")
        assert hits, name
        assert all(h.node.metadata.get(schema.PARSE_PATH) == "llm" for h in hits), name
        assert all(schema.get_heading_path(h.node) for h in hits), name
        close_store(kind, store)


# --------------------------------------------------------------------------- drop-in rows
@pytest.fixture(scope="module")
def app_index(kind, module_pg_url, tmp_path_factory, documents):
    """An existing app's index over the store, built as LlamaIndex builds it (no
    store_nodes_override): over a store that keeps the text, its docstore stays empty."""
    store = open_store(kind, tmp_path_factory.mktemp(f"app-{kind}"), DIM, module_pg_url)
    index = VectorStoreIndex.from_documents(
        documents, storage_context=StorageContext.from_defaults(vector_store=store),
        transformations=[LayoutMarkdownParser(), CascadingMetadataTransform()], embed_model=HashEmbedding(),
    )
    yield index
    close_store(kind, store)


def test_multi_route_from_index_has_every_route(kind, app_index, documents):
    assert bool(app_index.docstore.docs) == (not app_index.vector_store.stores_text)
    retriever = MultiRouteRetriever.from_index(app_index, similarity_top_k=TOP_K)
    hits = retriever.retrieve("What is the maximum output current of the NX-2043?")
    assert len(hits) == TOP_K
    scores = hits[0].node.metadata[schema.ROUTE_SCORES]
    assert scores["vector"] is not None and scores["bm25"] is not None and scores["keywords"] is not None
    assert schema.get_document_id(hits[0].node) == "NX-2043"


def test_chunk_graph_and_segments_from_index(kind, app_index):
    question = "What is the maximum output current of the NX-2043?"
    graph = ChunkGraphRetriever.from_index(app_index, embed_model=HashEmbedding())
    chains = graph.retrieve(question)
    assert chains and any(schema.get_document_id(n.node) == "NX-2043" for n in chains)
    rse = SegmentIntegrationPostprocessor.from_index(app_index)
    hits = MultiRouteRetriever.from_index(app_index, similarity_top_k=10).retrieve(question)
    segments = rse.postprocess_nodes(hits, query_bundle=QueryBundle(question))
    assert segments
    # Gaps between retrieved chunks are filled from the nodes of the store.
    assert all(s.node.metadata[schema.SEGMENT_FILL] == "docstore" for s in segments)


@pytest.fixture(scope="module")
def reference_rankings(documents, questions):
    """The multi-route top k over LlamaIndex's SimpleVectorStore, for every store to match."""
    index = VectorStoreIndex.from_documents(
        documents, transformations=[LayoutMarkdownParser(), CascadingMetadataTransform()], embed_model=HashEmbedding()
    )
    return _top_ids(MultiRouteRetriever.from_index(index, similarity_top_k=TOP_K), questions)


def test_multi_route_rankings_match_the_simple_store(kind, app_index, questions, reference_rankings):
    reference = reference_rankings
    ours = _top_ids(MultiRouteRetriever.from_index(app_index, similarity_top_k=TOP_K), questions)
    first, overlap = _agreement(ours, reference)
    assert first >= 0.96 and overlap >= 0.9, (first, overlap)


def test_a_store_that_cannot_list_its_nodes_fails_at_construction(tmp_path, documents):
    """A text-keeping store without get_nodes: a typed error naming the store and the fix,
    not a retriever that silently lost its BM25 and keyword routes."""
    from llama_index.core.vector_stores import SimpleVectorStore

    class TextKeepingStore(SimpleVectorStore):
        stores_text: bool = True

        def get_nodes(self, *args, **kwargs):
            raise NotImplementedError("get_nodes not implemented")

    index = VectorStoreIndex.from_documents(
        documents[:1], storage_context=StorageContext.from_defaults(vector_store=TextKeepingStore()),
        embed_model=HashEmbedding(),
    )
    assert not index.docstore.docs
    for build in (MultiRouteRetriever.from_index, SegmentIntegrationPostprocessor.from_index):
        with pytest.raises(VectorStoreFeatureError) as err:
            build(index)
        assert "TextKeepingStore" in str(err.value) and "nodes=" in str(err.value)


# --------------------------------------------------------------------------- the pack
_SECOND_PROCESS = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {repo!r})
    from llama_index_hiqa import HiQAPack
    from llama_index_hiqa.evaluation.datasets import load_questions_jsonl
    from tests.pack_helpers import HashEmbedding
    from tests.vector_stores import IN_MEMORY_KINDS, open_store, close_store
    store = None if {kind!r} in IN_MEMORY_KINDS else open_store({kind!r}, {folder!r}, {dim}, {pg_url!r})
    pack = HiQAPack.load({store_dir!r}, vector_store=store, embed_model=HashEmbedding())
    questions = load_questions_jsonl({questions!r})
    key = lambda n: f"{{n.metadata['document_id']}}:{{n.metadata['position']}}"
    out = {{q.id: [key(n.node) for n in pack.as_retriever().retrieve(q.question)[:{top_k}]] for q in questions}}
    if store is not None:
        close_store({kind!r}, store)
    print(json.dumps(out))
    """
)


def test_pack_on_the_store_ranks_persists_loads_updates_and_deletes(
    kind, pg_url, tmp_path, questions, default_pack
):
    source = tmp_path / "pdfs"
    source.mkdir()
    for pdf in demo_data_dir().glob("*.pdf"):
        shutil.copy(pdf, source / pdf.name)
    vectors = tmp_path / "vectors"
    store = open_store(kind, vectors, DIM, pg_url)
    pack = HiQAPack.from_directory(source, vector_store=store, embed_model=HashEmbedding())
    assert pack.node_count == default_pack.node_count

    # Same rankings as on the pack's own store.
    ours = _top_ids(pack.as_retriever(), questions)
    first, overlap = _agreement(ours, _top_ids(default_pack.as_retriever(), questions))
    assert first >= 0.96 and overlap >= 0.9, (first, overlap)
    assert all(n.node.metadata[schema.ROUTE_SCORES]["bm25"] is not None for n in pack.retrieve(questions[0].question))

    # Persist, then load in a second process with the store opened again.
    store_dir = tmp_path / "store"
    pack.persist(store_dir)
    close_store(kind, store)
    script = _SECOND_PROCESS.format(
        repo=str(Path(__file__).resolve().parents[1]), kind=kind, folder=str(vectors), dim=DIM, pg_url=pg_url,
        store_dir=str(store_dir), questions=str(demo_data_dir() / "questions.jsonl"), top_k=TOP_K,
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    loaded = json.loads(run.stdout.strip().splitlines()[-1])
    assert loaded == ours

    # Back in this process: a changed file replaces its document; a deletion removes one.
    store = None if kind in IN_MEMORY_KINDS else open_store(kind, vectors, DIM, pg_url)
    pack = HiQAPack.load(store_dir, vector_store=store, embed_model=HashEmbedding())
    store = pack.index.vector_store
    changed = source / "NX-2041.pdf"
    _append_page(changed, "Errata: the NX-2041 quiescent current is 41 uA.")
    if kind == "faiss":
        # LlamaIndex's FaissVectorStore cannot delete: said before anything changed.
        with pytest.raises(VectorStoreFeatureError, match="FaissVectorStore"):
            pack.add_directory(source)
        with pytest.raises(VectorStoreFeatureError, match="FaissVectorStore"):
            pack.delete_document("NX-2042")
        assert "NX-2042" in pack.document_ids
        close_store(kind, store)
        return
    report = pack.add_directory(source)
    assert report.documents_replaced == 1
    hits = pack.retrieve("NX-2041 errata quiescent current")
    assert any("Errata" in h.node.get_content() for h in hits)
    removed = pack.delete_document("NX-2042")
    assert removed > 0 and "NX-2042" not in pack.document_ids
    listed = [schema.get_document_id(n) for n in _store_nodes(pack)]
    assert "NX-2042" not in listed and "NX-2041" in listed
    assert all(schema.get_document_id(h.node) != "NX-2042" for h in pack.retrieve("NX-2042 output current"))
    close_store(kind, store)


def _store_nodes(pack):
    """The nodes the vector store itself holds (the docstore's for stores without text)."""
    from llama_index_hiqa.storage.vector_store_access import list_vector_store_nodes

    vector_store = pack.index.vector_store
    if vector_store.stores_text:
        return list_vector_store_nodes(vector_store, "test")
    return list(pack.index.docstore.docs.values())


def _append_page(path: Path, text: str) -> None:
    import pymupdf

    doc = pymupdf.open(path)
    page = doc.new_page()
    page.insert_text((72, 72), text, fontsize=11)
    data = doc.tobytes()
    doc.close()
    path.write_bytes(data)


@pytest.mark.skipif(not available("lancedb"), reason="lancedb integration not installed")
def test_a_write_lancedb_would_refuse_is_refused_before_anything_changes(tmp_path):
    """A LanceDB table keeps the metadata fields of its first write: a later node with another
    field is refused before the document it replaces is removed."""
    from llama_index.core.schema import TextNode

    from llama_index_hiqa.storage.vector_store_access import check_nodes_fit

    store = open_store("lancedb", tmp_path, DIM)
    check_nodes_fit(store, [TextNode(text="x", metadata={"a": "1"})])  # no table yet: any fields
    VectorStoreIndex([TextNode(text="first", metadata={"a": "1"})],
                     storage_context=StorageContext.from_defaults(vector_store=store), embed_model=HashEmbedding())
    check_nodes_fit(store, [TextNode(text="same fields", metadata={"a": "2"})])
    with pytest.raises(VectorStoreFeatureError, match="LanceDBVectorStore.*'b'"):
        check_nodes_fit(store, [TextNode(text="new field", metadata={"a": "2", "b": "3"})])


@pytest.mark.skipif(not available("lancedb"), reason="lancedb integration not installed")
def test_the_pack_writes_later_kinds_of_node_into_a_lancedb_table(tmp_path, documents):
    """A first batch with no table and no figure, a later one with both: the pack pads each
    node's facts, so LanceDB's table (fixed at its first write) takes the later nodes."""
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nThe NX-2040 ships in reels of 2,500.\n", encoding="utf-8")
    store = open_store("lancedb", tmp_path / "vectors", DIM)
    pack = HiQAPack.empty(vector_store=store, embed_model=HashEmbedding())
    pack.ingest(PDFLayoutReader().load_data(notes))
    pack.ingest(documents[:1])  # a datasheet: tables and a figure
    kinds = {schema.get_segment_kind(n) for n in pack.nodes}
    assert {schema.KIND_TABLE, schema.KIND_IMAGE} <= kinds
    hits = pack.retrieve("NX-2040 electrical characteristics table")
    assert any(schema.get_segment_kind(h.node) == schema.KIND_TABLE for h in hits)
    # Padding is hidden from what is embedded: a text node's embedding view is unchanged.
    note = next(n for n in pack.nodes if schema.get_document_id(n) == "notes")
    assert "[]" not in note.get_content(metadata_mode=MetadataMode.EMBED)


@pytest.mark.skipif(not available("pgvector"), reason="postgres integration not installed")
def test_pdf_text_with_nul_characters_goes_into_pgvector(server, tmp_path, documents):
    """PostgreSQL cannot hold NUL (PDF text sometimes does); the pack replaces it with U+FFFD,
    one character for one, instead of the write failing half-way through a collection."""
    doc = documents[0].model_copy()
    doc.set_content(doc.text.replace("Electrical characteristics", "Electrical\x00characteristics", 1))
    store = open_store("pgvector", tmp_path, DIM, server.database())
    pack = HiQAPack.from_documents([doc], vector_store=store, embed_model=HashEmbedding())
    node = next(n for n in pack.nodes if "\ufffd" in n.text)
    assert "Electrical\ufffdcharacteristics" in node.text
    assert pack.retrieve("NX-2040 electrical characteristics")
