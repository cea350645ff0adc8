"""Ingestion with worker processes (``HiQAPackSettings.ingest_workers``): the store ends with the
same nodes, in the same order and with the same vectors as with one process; what cannot be
sent to a worker stays in the main process; a worker that dies is a typed error naming its
files, and the batches written before it are kept."""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import threading

import pytest
from llama_index.core.bridge.pydantic import PrivateAttr

from llama_index_hiqa import HiQAPack, IngestionWorkerError, InvalidSettingError, schema
from llama_index_hiqa.demo import DEMO_DATA_DIR
from llama_index_hiqa.pack.workers import picklable
from tests.pack_helpers import HashEmbedding


def _snapshot(pack: HiQAPack):
    """Each node's document, position, text and vector, in the store's order."""
    rows = []
    for node in pack.nodes:
        vector = pack.index.vector_store.get(node.node_id)
        rows.append((schema.get_document_id(node), schema.get_position(node), node.get_content(), tuple(round(v, 6) for v in vector)))
    return rows


def _build(folder, workers: int, embed_model=None, batch_size: int = 2) -> HiQAPack:
    pack = HiQAPack.empty(
        embed_model=embed_model or HashEmbedding(), ingest_workers=workers, ingest_batch_size=batch_size,
    )
    pack.add_directory(folder)
    return pack


@pytest.fixture(scope="module")
def one_process_pack():
    return _build(DEMO_DATA_DIR, workers=1)


def test_two_workers_give_the_store_one_process_gives(one_process_pack, tmp_path):
    folder = tmp_path / "docs"
    shutil.copytree(DEMO_DATA_DIR, folder, ignore=shutil.ignore_patterns("*.jsonl"))
    two = HiQAPack.empty(embed_model=HashEmbedding(), ingest_workers=2, ingest_batch_size=2)
    report = two.add_directory(folder)
    assert two.document_ids == one_process_pack.document_ids
    assert _snapshot(two) == _snapshot(one_process_pack)
    assert report.documents_added == 10 and report.nodes_added == two.node_count
    assert report.seconds["parse"] > 0 and report.seconds["embed"] > 0  # booked from the workers
    # the answers agree too (same nodes, same vectors, same routes)
    question = "What is the maximum output current of the NX-2043?"

    def ranked(pack):  # node ids are random per build: compare by document and position
        return [(schema.get_document_id(n.node), schema.get_position(n.node)) for n in pack.retrieve(question)]

    assert ranked(two) == ranked(one_process_pack)
    again = two.add_directory(folder)  # unchanged files: nothing reaches the workers
    assert again.documents_added == 0 and again.nodes_added == 0 and again.documents_unchanged == 10


class LockedEmbedding(HashEmbedding):
    """An embedding model holding a lock, so it cannot be pickled (like a client with a socket)."""

    _guard: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __getstate__(self):  # as a client library would: refuse, don't silently drop state
        raise TypeError("cannot pickle a lock")


def test_an_embedding_model_that_cannot_be_pickled_embeds_in_the_main_process(one_process_pack, caplog):
    locked = LockedEmbedding()
    assert picklable(locked) is None
    with caplog.at_level(logging.WARNING, logger="llama_index_hiqa.pack.workers"):
        pack = _build(DEMO_DATA_DIR, workers=2, embed_model=locked)
    assert "cannot be sent to worker processes" in caplog.text
    assert _snapshot(pack) == _snapshot(one_process_pack)


class DyingEmbedding(HashEmbedding):
    """Ends a worker process abruptly on the batch that holds ``NX-2045`` (as the kernel's
    out-of-memory killer would); in the main process it embeds as usual."""

    def _get_text_embeddings(self, texts):
        if multiprocessing.parent_process() is not None and any("NX-2045" in t for t in texts):
            os._exit(1)
        return super()._get_text_embeddings(texts)


def test_a_worker_that_dies_is_a_typed_error_and_earlier_batches_are_kept():
    pack = HiQAPack.empty(embed_model=DyingEmbedding(), ingest_workers=2, ingest_batch_size=1)
    with pytest.raises(IngestionWorkerError) as caught:
        pack.add_directory(DEMO_DATA_DIR)
    assert "nothing of that batch was written" in str(caught.value)
    assert caught.value.files  # names the batch's files
    kept = set(pack.document_ids)
    assert "NX-2045" not in kept and {"NX-2040", "NX-2041"} <= kept  # read and written before it


def test_worker_count_is_validated_when_the_pack_is_built():
    with pytest.raises((InvalidSettingError, ValueError), match="ingest_workers"):
        HiQAPack.empty(embed_model=HashEmbedding(), ingest_workers=0)


# -- shards: several machines, one folder ----------------------------------------------
from hypothesis import given, settings, strategies as st  # noqa: E402

from llama_index_hiqa import cli  # noqa: E402
from llama_index_hiqa.pack.ingestion import in_shard, parse_shard  # noqa: E402

paths = st.lists(st.text(alphabet="abcdefghij/._-0123456789", min_size=1, max_size=30), unique=True, max_size=40)


@settings(max_examples=60, deadline=None)
@given(paths, st.integers(min_value=1, max_value=7))
def test_every_file_is_in_exactly_one_shard_and_keeps_it(files, count):
    for name in files:
        owners = [i for i in range(1, count + 1) if in_shard(name, (i, count))]
        assert len(owners) == 1
        assert in_shard(name, (owners[0], count))  # the same answer every time, on every machine


@pytest.mark.parametrize("text", ["0/3", "4/3", "x/3", "2", "2/0", "-1/2"])
def test_a_bad_shard_is_refused_naming_it(text):
    with pytest.raises(InvalidSettingError, match="shard"):
        parse_shard(text)


def test_three_shards_ingested_one_after_another_hold_the_whole_folder(one_process_pack, tmp_path):
    pack = HiQAPack.empty(embed_model=HashEmbedding(), ingest_batch_size=2)
    seen = []
    for index in (1, 2, 3):
        report = pack.add_directory(DEMO_DATA_DIR, shard=(index, 3))
        seen.append(report.documents_added)
    assert sum(seen) == 10 and pack.document_ids == one_process_pack.document_ids
    assert sorted(_snapshot(pack)) == sorted(_snapshot(one_process_pack))


def test_cli_refuses_sync_with_a_shard_and_a_bad_shard(tmp_path, capsys):
    store = str(tmp_path / "s")
    assert cli.main(["ingest", str(DEMO_DATA_DIR), "--store", store, "--shard", "1/2", "--sync", "--quiet"]) == 2
    assert "--sync" in capsys.readouterr().err
    assert cli.main(["ingest", str(DEMO_DATA_DIR), "--store", store, "--shard", "3/2", "--quiet"]) == 2
    assert "shard" in capsys.readouterr().err
