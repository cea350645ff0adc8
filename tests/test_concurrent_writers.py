"""Writing a folder store. Two writers never lose an update: `hiqa ingest --add` runs in separate
processes are serialised by the store's lock (held from load to the switch of CURRENT), and a
library caller that saves over a store changed since it loaded it gets a StoreConflictError.
A store that cannot be written is refused before any document is read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llama_index_hiqa.pack import hiqa_pack as pack_module
from llama_index_hiqa.settings import updated
from llama_index_hiqa.errors import StoreConflictError
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from llama_index_hiqa.storage.snapshots import current_snapshot
from tests.pack_helpers import HashEmbedding

ROOT = Path(__file__).resolve().parents[1]


def _folder(path: Path, names) -> Path:
    path.mkdir(parents=True)
    for name in names:
        (path / f"{name}.txt").write_text(f"# {name} manual\n\nThe {name} unit runs at {len(name)} volts.\n")
    return path


def _cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.cheap_cli", *args], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _documents(store: Path) -> set:
    import json

    payload = json.loads((current_snapshot(store) / "hiqa_pack.json").read_text())
    return set(payload["documents"])


@pytest.mark.parametrize("run", range(3))
def test_two_concurrent_add_runs_keep_both_documents(tmp_path, run):
    base = _folder(tmp_path / "base", ["alpha"])
    first = _folder(tmp_path / "one", [f"bravo{run}", "charlie"])
    second = _folder(tmp_path / "two", [f"delta{run}", "echo"])
    store = tmp_path / "store"
    done = _cli("ingest", str(base), "--store", str(store), "--quiet", "--store-format", "folder")
    assert done.wait(timeout=300) == 0, done.stderr.read()
    writers = [_cli("ingest", str(f), "--store", str(store), "--add", "--quiet") for f in (first, second)]
    for writer in writers:
        assert writer.wait(timeout=300) == 0, writer.stderr.read()
        assert "added to" in writer.stdout.read()
    assert _documents(store) == {"alpha", f"bravo{run}", "charlie", f"delta{run}", "echo"}


@pytest.fixture
def cheap(monkeypatch):
    monkeypatch.setattr(pack_module, "default_embed_model", lambda m=None, backend=None: m or HashEmbedding())
    real = pack_module.keyword_extractor
    monkeypatch.setattr(
        pack_module, "keyword_extractor",
        lambda config: real(updated(config, keywords={"use_ner": False})),
    )


def test_saving_over_a_store_changed_since_loading_is_refused(tmp_path, cheap):
    store = tmp_path / "store"
    HiQAPack.from_directory(_folder(tmp_path / "base", ["alpha"]), store=store, store_format="folder")
    one, two = HiQAPack.load(store), HiQAPack.load(store)
    one.add_directory(_folder(tmp_path / "one", ["bravo"]))
    one.persist(store)
    two.add_directory(_folder(tmp_path / "two", ["charlie"]))
    with pytest.raises(StoreConflictError, match="load the store again") as caught:
        two.persist(store)
    assert caught.value.path == store
    assert _documents(store) == {"alpha", "bravo"}  # the first writer's document is kept
    again = HiQAPack.load(store)  # what the message says to do works
    again.add_directory(tmp_path / "two")
    again.persist(store)
    assert _documents(store) == {"alpha", "bravo", "charlie"}


def test_a_pack_saves_repeatedly_over_its_own_store(tmp_path, cheap):
    store = tmp_path / "store"
    pack = HiQAPack.from_directory(_folder(tmp_path / "base", ["alpha"]), store=store, store_format="folder")
    pack = HiQAPack.load(store)
    for name in ("bravo", "charlie"):
        pack.add_directory(_folder(tmp_path / name, [name]))
        pack.persist(store)  # its own previous save is not a conflict
    assert _documents(store) == {"alpha", "bravo", "charlie"}


def test_a_second_writer_says_it_waits_and_proceeds_when_the_first_is_done(tmp_path):
    from llama_index_hiqa.storage.snapshots import writer_lock

    store = tmp_path / "store"
    store.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, sys, time\n"
         f"h = open({str(store / '.lock')!r}, 'a+'); fcntl.flock(h, fcntl.LOCK_EX)\n"
         "print('held', flush=True); time.sleep(1.0)\n"],
        stdout=subprocess.PIPE, text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    told = []
    import time

    started = time.monotonic()
    with writer_lock(store, on_wait=told.append):
        waited = time.monotonic() - started
        with writer_lock(store, on_wait=told.append):  # re-entrant: no second wait
            pass
    holder.wait(timeout=30)
    assert len(told) == 1 and "waiting for it to finish" in told[0] and str(store) in told[0]
    assert waited >= 0.5


def test_from_directory_refuses_an_unwritable_store_before_reading(tmp_path, cheap, monkeypatch):
    from llama_index_hiqa.errors import PathAccessError

    (tmp_path / "file").write_text("x")
    read = []
    monkeypatch.setattr(HiQAPack, "add_directory", lambda self, *a, **k: read.append(a))
    with pytest.raises(PathAccessError, match="a part of the path is a file|is a file"):
        HiQAPack.from_directory(_folder(tmp_path / "docs", ["alpha"]), store=tmp_path / "file" / "store")
    assert read == []  # nothing was read before the refusal
