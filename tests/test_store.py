"""The folder store of HiQAPack: crash safety under kill -9 during persist, damage detection on
load (typed error naming the file, exit 2 on the CLI), re-ingestion as an upsert, and no
per-question rebuilds."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from llama_index.core.schema import Document

from llama_index_hiqa import cli, schema
from llama_index_hiqa.pack import hiqa_pack as pack_module
from llama_index_hiqa.demo import load_demo_documents
from llama_index_hiqa.errors import PackStoreError
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from llama_index_hiqa.storage import pack_files
from llama_index_hiqa.storage.snapshots import CURRENT_FILE, current_snapshot
from tests.pack_helpers import HashEmbedding

QUESTION = "What is the maximum output current of the NX-2043?"
FAST = {"keywords": {"use_ner": False}}
WRITE_EVENTS = {"open", "os.rename", "os.remove", "os.mkdir", "os.rmdir", "shutil.rmtree"}


class CountingEmbedding(HashEmbedding):
    """Counts the texts it embeds (re-ingesting unchanged documents must embed none)."""

    texts_embedded: int = 0

    def _get_text_embeddings(self, texts):
        self.texts_embedded += len(texts)
        return super()._get_text_embeddings(texts)

    def _get_text_embedding(self, text):
        self.texts_embedded += 1
        return super()._get_text_embedding(text)


@pytest.fixture(scope="module")
def documents():
    return load_demo_documents()


@pytest.fixture(scope="module")
def two_packs(documents):
    """Two different collections, so that after a kill the store must hold exactly one."""
    small = HiQAPack.from_documents(documents[:5], embed_model=HashEmbedding(), use_chunk_graph=True, **FAST)
    large = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), use_chunk_graph=True, **FAST)
    return small, large


def _is_store_event(event: str, args: tuple, store: str) -> bool:
    """A file-system step of persist: every open inside the store (writes, and the reads that
    flush files and folders to disk, some of them after the switch), and every rename,
    remove and mkdir."""
    if event != "open":
        return event in WRITE_EVENTS
    path = args[0]
    return isinstance(path, (str, bytes, os.PathLike)) and os.fsdecode(path).startswith(store)


def _persist_in_child(pack: HiQAPack, store: Path, kill_at_event: int = 0, kill_after: float = 0.0) -> tuple:
    """Fork; the child persists and is killed with SIGKILL at its ``kill_at_event``-th
    file-system step (or after ``kill_after`` seconds). Returns (killed, steps seen)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read_fd)
        # tqdm's default lock is a semaphore shared across fork: a child killed while holding
        # it would freeze the parent's next progress bar. The child gets a lock of its own.
        import threading

        from tqdm import tqdm

        classes = [tqdm]
        while classes:  # bm25s's tqdm subclass got a lock of its own in the parent
            cls = classes.pop()
            cls._lock = threading.RLock()
            classes += cls.__subclasses__()
        seen = [0]

        def hook(event, args):
            if event in WRITE_EVENTS and _is_store_event(event, args, str(store)):
                seen[0] += 1
                if seen[0] == kill_at_event:
                    os.kill(os.getpid(), signal.SIGKILL)

        sys.addaudithook(hook)
        if kill_after:
            threading.Timer(kill_after, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
        try:
            pack.persist(store)
            os.write(write_fd, str(seen[0]).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read_fd) as pipe:
        events = int(pipe.read() or 0)
    return os.WIFSIGNALED(status), events


def _state(store: Path):
    loaded = HiQAPack.load(store, embed_model=HashEmbedding())
    answer = [n.node.node_id for n in loaded.retrieve(QUESTION)]
    return tuple(loaded.document_ids), answer


@pytest.mark.skipif(not hasattr(os, "fork"), reason="kills a forked child")
def test_a_kill_at_any_point_of_persist_leaves_a_store_that_loads_and_answers(two_packs, tmp_path):
    small, large = two_packs
    expected = {tuple(p.document_ids): [n.node.node_id for n in p.retrieve(QUESTION)] for p in two_packs}
    store = tmp_path / "store"

    # A kill during the very first persist leaves no store, or the whole one: never a broken one.
    killed, _ = _persist_in_child(small, store, kill_at_event=3)
    assert killed
    with pytest.raises(PackStoreError):
        HiQAPack.load(store, embed_model=HashEmbedding())

    killed, events = _persist_in_child(small, store)
    assert not killed and events > 20  # every file, folder and rename of one persist
    state = _state(store)
    assert state[0] == tuple(small.document_ids)

    points = list(range(1, events + 1))
    # and kills by the clock, spread over a whole persist, which land inside file writes too
    start = time.perf_counter()
    _persist_in_child(large, store)
    took = time.perf_counter() - start
    durations = [took * (i + 0.5) / 25 for i in range(25)]
    outcomes = {"old": 0, "new": 0}
    clock_kills = 0
    state = _state(store)
    for i, point in enumerate(points + [None] * len(durations)):
        target = (small, large)[i % 2]
        previous = state
        if point is None:
            killed, _ = _persist_in_child(target, store, kill_after=durations[i - len(points)])
            clock_kills += killed
        else:
            killed, _ = _persist_in_child(target, store, kill_at_event=point)
            assert killed
        state = _state(store)  # loads, or this raises: a traceback fails the test
        assert state[0] in expected and state[1] == expected[state[0]]
        if state[0] == tuple(target.document_ids) and previous[0] != state[0]:
            outcomes["new"] += 1
        elif state == previous:
            outcomes["old"] += 1
    assert len(points) + clock_kills >= 50, (len(points), clock_kills)
    assert outcomes["old"] and outcomes["new"]  # kills landed on both sides of the switch
    large.persist(store)  # the next complete persist cleans up after the killed ones
    leftovers = sorted(p.name for p in store.iterdir() if p.name not in (CURRENT_FILE, ".lock", "images"))
    assert len(leftovers) == 2 and all(n.startswith("snapshot-") for n in leftovers), leftovers
    assert _state(store)[0] == tuple(large.document_ids)


# --------------------------------------------------------------------------- damage
@pytest.fixture()
def store(two_packs, tmp_path):
    path = tmp_path / "store"
    two_packs[0].persist(path)
    return path


def _snapshot_file(store: Path, relative: str) -> Path:
    return current_snapshot(store) / relative


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _rewrite_with_manifest(store: Path, relative: str, content: str) -> None:
    """Change a file *and* its manifest entry: the manifest passes, the contents disagree."""
    folder = current_snapshot(store)
    (folder / relative).write_text(content, encoding="utf-8")
    config = json.loads((folder / pack_files.CONFIG_FILENAME).read_text())
    config["files"] = pack_files.file_manifest(folder)
    config["files"].pop(pack_files.CONFIG_FILENAME, None)
    (folder / pack_files.CONFIG_FILENAME).write_text(json.dumps(config))


DAMAGE = {
    "config truncated": (lambda s: _truncate(_snapshot_file(s, "hiqa_pack.json")), "hiqa_pack.json"),
    "docstore truncated": (lambda s: _truncate(_snapshot_file(s, "docstore.json")), "docstore.json"),
    "vectors missing": (lambda s: _snapshot_file(s, "vectors.npz").unlink(), "vectors.npz"),
    "bm25 file missing": (
        lambda s: _snapshot_file(s, "multi_route/bm25/data.csc.index.npy").unlink(), "data.csc.index.npy"
    ),
    "keyword index edited": (
        lambda s: _snapshot_file(s, "multi_route/keyword_index.json").write_text('{"node_keywords": {}}'),
        "keyword_index.json",
    ),
    "pointer damaged": (lambda s: (s / CURRENT_FILE).write_text("../../etc"), CURRENT_FILE),
    "pointer to a missing snapshot": (lambda s: (s / CURRENT_FILE).write_text("snapshot-999999\n"), CURRENT_FILE),
    "bm25 ids not the docstore's": (
        lambda s: _rewrite_with_manifest(s, "multi_route/bm25/node_ids.json", json.dumps(["a", "b"])),
        "BM25 index",
    ),
    "graph ids not the docstore's": (
        lambda s: _rewrite_with_manifest(
            s, "chunk_graph/chunk_graph.json",
            _snapshot_file(s, "chunk_graph/chunk_graph.json").read_text().replace('"id": "', '"id": "x'),
        ),
        "chunk_graph",
    ),
    "not JSON": (lambda s: _rewrite_with_manifest(s, "docstore.json", "{not json"), "docstore.json"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_each_kind_of_damage_is_a_pack_store_error_naming_the_file(store, damage, capsys, monkeypatch):
    breaks, names = DAMAGE[damage]
    breaks(store)
    with pytest.raises(PackStoreError) as info:
        HiQAPack.load(store, embed_model=HashEmbedding())
    assert names in str(info.value)
    monkeypatch.setattr(pack_module, "default_embed_model", lambda m=None, backend=None: m or HashEmbedding())
    assert cli.main(["ask", QUESTION, "--store", str(store)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and names in err and "Traceback" not in err


def test_an_embedding_model_of_another_dimension_is_refused_at_load(store):
    class Wider(HashEmbedding):
        def _get_query_embedding(self, query):
            return super()._get_query_embedding(query) + [0.0]

    with pytest.raises(PackStoreError, match="dimension"):
        HiQAPack.load(store, embed_model=Wider())


def test_no_file_of_the_store_carries_document_layout_facts(store):
    for path in current_snapshot(store).rglob("*"):
        if path.suffix in (".json", ".jsonl"):
            text = path.read_text(encoding="utf-8")
            for key in schema.DOCUMENT_ONLY_KEYS:  # as a metadata entry (its name may be listed as hidden)
                assert f'"{key}": ' not in text, (path, key)


# --------------------------------------------------------------------------- re-ingestion
def test_reingesting_the_same_documents_costs_nothing_and_changes_nothing(documents):
    embed = CountingEmbedding()
    pack = HiQAPack.from_documents(documents, embed_model=embed, **FAST)
    nodes, ranking = len(pack.index.docstore.docs), [n.node.node_id for n in pack.retrieve(QUESTION)]
    embedded = embed.texts_embedded
    report = pack.ingest(load_demo_documents())  # read again: new objects, same content
    assert (report.documents_unchanged, report.documents_added, report.documents_replaced) == (len(documents), 0, 0)
    assert embed.texts_embedded == embedded
    assert len(pack.index.docstore.docs) == nodes
    assert [n.node.node_id for n in pack.retrieve(QUESTION)] == ranking


def test_a_changed_document_replaces_its_old_nodes(documents):
    pack = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), **FAST)
    target = next(d for d in documents if d.metadata[schema.DOCUMENT_ID] == "NX-2043")
    old_ids = set(pack.index.docstore.get_ref_doc_info(target.doc_id).node_ids)
    changed = Document(
        text=target.text + "\n\n## 9 Errata\n\nThe NX-2043 output current is now rated 7.5 A.",
        metadata=dict(target.metadata), id_=target.doc_id,
    )
    report = pack.ingest([changed])
    assert (report.documents_replaced, report.nodes_removed) == (1, len(old_ids))
    assert not old_ids & set(pack.index.docstore.docs)
    assert not old_ids & set(pack.index.vector_store.node_ids)
    assert not old_ids & set(pack.multi_route.keyword_index.node_ids)
    assert pack.document_ids.count("NX-2043") == 1
    texts = [n.node.get_content() for n in pack.retrieve("NX-2043 errata output current 7.5 A")]
    assert any("7.5 A" in t for t in texts)


def test_interrupted_ingestion_resumes_from_its_checkpoint(documents, tmp_path):
    store = tmp_path / "store"
    pack = HiQAPack.empty(embed_model=HashEmbedding(), ingest_batch_size=2, store_format="folder", **FAST)

    class Interrupt(Exception):
        pass

    def stop_after_two_batches(report):
        if report.documents_seen >= 4:
            raise Interrupt

    with pytest.raises(Interrupt):
        pack.ingest(documents, checkpoint=lambda: pack.persist(store), checkpoint_seconds=0,
                    progress=stop_after_two_batches)
    resumed = HiQAPack.load(store, embed_model=CountingEmbedding())
    assert len(resumed.document_ids) == 2  # the checkpoint after the first batch
    report = resumed.ingest(documents)
    assert (report.documents_unchanged, report.documents_added) == (2, len(documents) - 2)
    assert sorted(resumed.document_ids) == sorted(d.metadata[schema.DOCUMENT_ID] for d in documents)


# --------------------------------------------------------------------------- query path
def test_questions_rebuild_nothing(documents, monkeypatch):
    from llama_index_hiqa.postprocessors import segment_integration
    from llama_index_hiqa.retrievers.bm25_route import BM25Route

    pack = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), use_segment_integration=True, **FAST)
    pack.retrieve(QUESTION)  # first question builds the routes once
    builds = {"bm25": 0, "postprocessor": 0, "docs": 0}
    real_build = BM25Route.build
    real_post_init = segment_integration.SegmentIntegrationPostprocessor.__init__
    docstore_type = type(pack.index.docstore)
    real_docs = docstore_type.docs

    def count(name, func):
        def wrapper(*args, **kwargs):
            builds[name] += 1
            return func(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(BM25Route, "build", classmethod(lambda cls, *a, **k: count("bm25", real_build)(*a, **k)))
    monkeypatch.setattr(segment_integration.SegmentIntegrationPostprocessor, "__init__", count("postprocessor", real_post_init))
    monkeypatch.setattr(docstore_type, "docs", property(count("docs", real_docs.fget)))
    for _ in range(3):
        pack.run(QUESTION)
        pack.retrieve(QUESTION)
    wide = pack.as_retriever(similarity_top_k=10, mode="rrf")
    assert len(wide.retrieve(QUESTION)) == 10
    assert builds == {"bm25": 0, "postprocessor": 0, "docs": 0}


def test_memory_holds_no_document_layout_facts(documents):
    pack = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), **FAST)
    for node in pack.index.docstore.docs.values():
        assert not set(schema.DOCUMENT_ONLY_KEYS) & set(node.metadata)
        for rel in node.relationships.values():
            assert not set(schema.DOCUMENT_ONLY_KEYS) & set(getattr(rel, "metadata", {}) or {})


def test_a_store_written_by_v0_1_still_loads_and_takes_snapshots_from_then_on(two_packs, tmp_path):
    """Format 1: the files directly in the folder, SimpleVectorStore JSON, no manifest."""
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.vector_stores import SimpleVectorStore

    small = two_packs[0]
    nodes = list(small.index.docstore.docs.values())
    for node in nodes:
        node.embedding = small.index.vector_store.get(node.node_id)
    index = VectorStoreIndex(
        nodes, storage_context=StorageContext.from_defaults(vector_store=SimpleVectorStore()),
        embed_model=HashEmbedding(),
    )
    legacy = tmp_path / "legacy"
    index.storage_context.persist(persist_dir=str(legacy))
    small.multi_route.persist(legacy / "multi_route")
    (legacy / "hiqa_pack.json").write_text(json.dumps({
        "format_version": 1, "config": small.config.model_dump() | {"use_chunk_graph": False},
        "index_id": index.index_id, "embed_model": "HashEmbedding:hash-bow-256", "documents": small.document_ids,
    }))
    loaded = HiQAPack.load(legacy, embed_model=HashEmbedding())
    expected = [n.node.node_id for n in small.multi_route.retrieve(QUESTION)]
    assert [n.node.node_id for n in loaded.retrieve(QUESTION)] == expected
    loaded.persist(legacy)  # from now on a snapshot store; the old files stay, unread
    assert (legacy / CURRENT_FILE).is_file() and (legacy / "docstore.json").is_file()
    assert _state(legacy)[0] == tuple(small.document_ids)


def test_a_folder_reingestion_leaves_unchanged_files_unread(tmp_path, monkeypatch):
    import shutil

    from llama_index_hiqa.demo import DEMO_DATA_DIR
    from llama_index_hiqa.readers.pdf import PDFLayoutReader

    folder = tmp_path / "docs"
    shutil.copytree(DEMO_DATA_DIR, folder, ignore=shutil.ignore_patterns("*.jsonl"))
    pack = HiQAPack.empty(embed_model=HashEmbedding(), **FAST)
    first = pack.add_directory(folder)
    assert first.documents_added == 10
    pack.persist(tmp_path / "store")
    pack = HiQAPack.load(tmp_path / "store", embed_model=HashEmbedding())  # the facts survive a reload

    reads = []
    real_read = PDFLayoutReader.read_file
    monkeypatch.setattr(
        PDFLayoutReader, "read_file", lambda self, path, *a, **k: reads.append(Path(path).name) or real_read(self, path, *a, **k)
    )
    again = pack.add_directory(folder)
    assert reads == [] and again.documents_unchanged == 10 and again.documents_added == 0
    touched = folder / "NX-2043.pdf"
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    again = pack.add_directory(folder)  # read again (new mtime), same hash: nothing re-embedded
    assert reads == ["NX-2043.pdf"] and again.documents_unchanged == 10 and again.nodes_added == 0
    pack.delete_document("NX-2043")
    again = pack.add_directory(folder)  # a deleted document is read and indexed again
    assert again.documents_added == 1 and "NX-2043" in pack.document_ids
