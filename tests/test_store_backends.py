"""Every store backend is one object behind the store interface (``StoreBackend``), held by the
pack rather than subclassing it; the pack's settings are saved once with the store and read
back from there alone."""

from __future__ import annotations

import json

import pytest

from llama_index_hiqa import schema
from llama_index_hiqa.demo import load_demo_documents
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from llama_index_hiqa.storage.backends import StoreBackend
from llama_index_hiqa.storage.backends.embedded import EmbeddedBackend
from llama_index_hiqa.storage.backends.folder import FolderBackend
from llama_index_hiqa.storage.snapshots import current_snapshot
from tests.pack_helpers import HashEmbedding

FAST = {"keywords": {"use_ner": False}}
QUESTION = "What is the maximum output current of the NX-2043?"


def _top(pack: HiQAPack):
    """The top nodes by document, position and score (node ids differ between two ingestions)."""
    return [
        (schema.get_document_id(n.node), schema.get_position(n.node), round(n.score, 6))
        for n in pack.as_retriever().retrieve(QUESTION)
    ]


def test_folder_and_embedded_backends_satisfy_the_store_interface(tmp_path):
    documents = load_demo_documents()[:3]
    folder = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), **FAST)
    embedded = HiQAPack.empty(embed_model=HashEmbedding(), store=tmp_path / "e", store_format="embedded", **FAST)
    embedded.ingest(documents)
    for pack, kind in ((folder, FolderBackend), (embedded, EmbeddedBackend)):
        assert isinstance(pack.backend, StoreBackend) and isinstance(pack.backend, kind)
        assert type(pack) is HiQAPack  # composed, not subclassed
        assert pack.backend.node_count() == pack.node_count > 0
        refs = pack.backend.documents()
        assert pack.backend.document_hash(next(iter(refs.values())))
    assert isinstance(embedded.backend, EmbeddedBackend) and isinstance(folder.backend, FolderBackend)
    assert _top(folder) == _top(embedded)
    embedded.close()


def test_an_object_missing_a_member_is_not_a_store_backend():
    class Partial:
        index = config = embed_model = file_stats = location = None

        def documents(self):
            return {}

    assert not isinstance(Partial(), StoreBackend)


def test_route_settings_are_read_back_from_the_pack_settings_alone(tmp_path):
    store = tmp_path / "store"
    built = HiQAPack.from_documents(
        load_demo_documents()[:3], embed_model=HashEmbedding(), similarity_top_k=3, store_format="folder", **FAST
    )
    built.persist(store)
    # The copy the route indexes carry (older stores have it too) says otherwise: it is not read.
    routes_file = current_snapshot(store) / "multi_route" / "multi_route.json"
    payload = json.loads(routes_file.read_text())
    payload["config"]["similarity_top_k"] = 9
    payload["config"]["alpha"] = 0.123
    text = json.dumps(payload)
    routes_file.write_text(text)
    pack_file = current_snapshot(store) / "hiqa_pack.json"
    manifest = json.loads(pack_file.read_text())
    from llama_index_hiqa.storage.pack_files import file_manifest

    manifest["files"] = {k: v for k, v in file_manifest(current_snapshot(store)).items() if k != "hiqa_pack.json"}
    pack_file.write_text(json.dumps(manifest))
    loaded = HiQAPack.load(store, embed_model=HashEmbedding())
    assert loaded.multi_route.config == built.multi_route.config
    assert loaded.multi_route.config.similarity_top_k == 3 and loaded.multi_route.config.alpha != 0.123
    assert _top(loaded) == _top(built)


def test_a_pack_settings_change_saved_once_is_what_the_next_load_uses(tmp_path):
    store = tmp_path / "store"
    HiQAPack.from_documents(load_demo_documents()[:3], embed_model=HashEmbedding(), **FAST).persist(store)
    changed = HiQAPack.load(store, embed_model=HashEmbedding(), multi_route={"alpha": 0.7})
    changed.persist(store)
    again = HiQAPack.load(store, embed_model=HashEmbedding())
    assert again.config.multi_route.alpha == 0.7 and again.multi_route.config.alpha == 0.7


def test_the_postgres_backend_satisfies_the_store_interface(server):
    pytest.importorskip("llama_index.vector_stores.postgres")
    from llama_index_hiqa.storage.backends.postgres import PostgresBackend

    pack = HiQAPack.from_documents(
        load_demo_documents()[:2], embed_model=HashEmbedding(), store=server.database(), **FAST
    )
    assert isinstance(pack.backend, StoreBackend) and isinstance(pack.backend, PostgresBackend)
    assert type(pack) is HiQAPack
    assert pack.backend.node_count() == pack.node_count > 0 and pack.store_path is None
    pack.close()
