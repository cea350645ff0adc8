"""A store written by the previous release (v0.2, before structured facts became JSON strings)
loads, answers and takes updates: ``tests/data/store_v0_2`` was persisted by that release's
``HiQAPack.from_directory`` on two demo datasheets with the tests' hashing embedding."""

from __future__ import annotations

import shutil
from pathlib import Path

from llama_index_hiqa import HiQAPack, schema
from tests.pack_helpers import HashEmbedding

STORE = Path(__file__).parent / "data" / "store_v0_2"


def test_a_store_of_the_previous_release_loads_answers_and_takes_updates(tmp_path):
    store = tmp_path / "store"
    shutil.copytree(STORE, store)
    docstore = next(store.glob("snapshot-*/docstore.json")).read_text(encoding="utf-8")
    assert '"heading_path": [[' in docstore  # that release's lists, not JSON strings

    pack = HiQAPack.load(store, embed_model=HashEmbedding())
    hit = pack.retrieve("What is the maximum output current of the NX-2043?")[0].node
    assert schema.get_document_id(hit) == "NX-2043"
    assert [h.label() for h in schema.get_heading_path(hit)]
    assert "nx2043" in schema.get_critical_keywords(hit)

    # New nodes (JSON strings) beside the old ones (lists), saved and loaded again.
    folder = tmp_path / "new"
    folder.mkdir()
    (folder / "NX-3000.md").write_text("# NX-3000 Datasheet\n\n## 4 Specifications\n\nThe maximum output current is 3 A.\n")
    pack.add_directory(folder)
    pack.persist(store)
    again = HiQAPack.load(store, embed_model=HashEmbedding())
    assert schema.get_document_id(again.retrieve("NX-3000 maximum output current")[0].node) == "NX-3000"
    assert schema.get_document_id(again.retrieve("NX-2040 output current")[0].node) == "NX-2040"
