"""The fault-injection cases of the reliability suite, shared by ``tests/test_faults.py`` (each
case a test) and ``benchmarks/bench_reliability.py`` (the counts by cause).

A case does what a user or the machine might do to the pack — damage a store file, fill the
disk, point the store at ``/proc``, hand it a file it may not read, kill a writer, give it a
bad setting or a stray byte — and says whether the outcome was *handled*: the work was done,
or the command printed one line naming what is wrong (exit code 2, no traceback) and the store
still loads. Cases that need a tmpfs mount run only as root and are skipped otherwise.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple

from llama_index_hiqa import cli
from llama_index_hiqa.pack import hiqa_pack as pack_module
from llama_index_hiqa.settings import updated
from llama_index_hiqa.demo import DEMO_DATA_DIR
from tests.pack_helpers import HashEmbedding

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "What is the maximum output current of the NX-2046?"


class Skip(Exception):
    """The case cannot be arranged on this machine (e.g. no tmpfs without root)."""


@dataclass
class Result:
    code: object  # exit code, or "traceback: <type>"
    out: str
    err: str

    def one_line(self, *needles: str) -> bool:
        """Exit 2 with one stderr line holding every needle, and no traceback."""
        lines = [line for line in self.err.strip().splitlines() if line.strip()]
        return self.code == 2 and len(lines) == 1 and all(n in lines[0] for n in needles)


@contextlib.contextmanager
def cheap_models() -> Iterator[None]:
    """The hashing embedding and rules-only keywords (no model loads), restored afterwards."""
    real_embed, real_keywords = pack_module.default_embed_model, pack_module.keyword_extractor
    pack_module.default_embed_model = lambda m=None, backend=None: m or HashEmbedding()
    pack_module.keyword_extractor = lambda c: real_keywords(updated(c, keywords={"use_ner": False}))
    try:
        yield
    finally:
        pack_module.default_embed_model, pack_module.keyword_extractor = real_embed, real_keywords


def hiqa(*argv: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), cheap_models():
        try:
            code: object = cli.main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:  # noqa: BLE001 - a traceback is the outcome being counted
            code = f"traceback: {type(exc).__name__}: {exc}"
    return Result(code, out.getvalue(), err.getvalue())


def hiqa_process(*argv: str) -> subprocess.Popen:
    """The command in a new process; ``HIQA_PACKAGE_ROOT`` names another checkout of the pack to
    run (the benchmark counts the cases against the main branch this way)."""
    package_root = os.environ.get("HIQA_PACKAGE_ROOT", str(ROOT))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([package_root, str(ROOT)])}
    return subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "cheap_cli.py"), *map(str, argv)], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def build_store(path: Path) -> Path:
    # The damage cases name the folder store's files (snapshots, CURRENT, the manifest).
    result = hiqa("ingest", DEMO_DATA_DIR, "--store", path, "--quiet", "--store-format", "folder")
    assert result.code == 0, result
    return path


def stored_documents(store: Path) -> set:
    from llama_index_hiqa.storage.embedded import EmbeddedStore, is_embedded_store
    from llama_index_hiqa.storage.snapshots import current_snapshot

    if is_embedded_store(store):  # a new store: the default format
        embedded = EmbeddedStore.open(store)
        try:
            return set(embedded.documents())
        finally:
            embedded.close()
    return set(json.loads((current_snapshot(store) / "hiqa_pack.json").read_text())["documents"])


@contextlib.contextmanager
def tmpfs(folder: Path, size: str, read_only: bool = False) -> Iterator[Path]:
    """A small tmpfs at ``folder`` (root only: :class:`Skip` otherwise)."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
    ).returncode:
        raise Skip("a tmpfs mount needs root")
    try:
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@dataclass
class Case:
    cause: str
    name: str
    run: Callable[[Path, Path], bool]  # (fresh temp dir, copy of a demo store) -> handled


CASES: List[Case] = []


def case(cause: str, name: str) -> Callable:
    def register(fn: Callable[[Path, Path], bool]) -> Callable:
        CASES.append(Case(cause, name, fn))
        return fn
    return register


# --- 1. damaged store files --------------------------------------------------------------------
STORE_FILES = [
    "hiqa_pack.json", "docstore.json", "index_store.json", "vectors.npz", "multi_route/keyword_index.json",
    "multi_route/multi_route.json", "multi_route/bm25/params.index.json", "multi_route/bm25/indptr.csc.index.npy",
    "multi_route/bm25/data.csc.index.npy", "multi_route/bm25/node_ids.json", "multi_route/bm25/vocab.index.json",
    "multi_route/bm25/indices.csc.index.npy",
]


def _damage(path: Path, how: str) -> None:
    if how == "deleted":
        path.unlink()
    elif how == "truncated":
        path.write_bytes(path.read_bytes()[: max(1, path.stat().st_size // 2)])
    else:
        path.write_bytes(b"\x00garbage\xff" * 64)


for _file in STORE_FILES:
    for _how in ("deleted", "truncated", "garbage"):
        def _store_file_case(tmp: Path, store: Path, _file: str = _file, _how: str = _how) -> bool:
            from llama_index_hiqa.storage.snapshots import current_snapshot

            _damage(current_snapshot(store) / _file, _how)
            return hiqa("ask", QUESTION, "--store", store).one_line(str(store))

        case("damaged store file", f"{_file} {_how}")(_store_file_case)


@case("damaged store file", "CURRENT not UTF-8, then --rebuild repairs")
def _current_bytes(tmp: Path, store: Path) -> bool:
    (store / "CURRENT").write_bytes(b"\xff\xfe snapshot")
    asked = hiqa("ask", QUESTION, "--store", store).one_line("CURRENT", "--rebuild")
    rebuilt = hiqa("ingest", DEMO_DATA_DIR, "--store", store, "--rebuild", "--quiet").code == 0
    return asked and rebuilt and hiqa("ask", QUESTION, "--store", store).code == 0


@case("damaged store file", "CURRENT names a missing snapshot")
def _current_missing(tmp: Path, store: Path) -> bool:
    (store / "CURRENT").write_text("snapshot-000099\n")
    return hiqa("ask", QUESTION, "--store", store).one_line("CURRENT", "missing")


@case("damaged store file", "CURRENT empty")
def _current_empty(tmp: Path, store: Path) -> bool:
    (store / "CURRENT").write_text("")
    return hiqa("ask", QUESTION, "--store", store).one_line("CURRENT")


# --- 2. paths the system refuses ---------------------------------------------------------------
@case("unusable path", "store under /proc")
def _proc_child(tmp: Path, store: Path) -> bool:
    return hiqa("ingest", DEMO_DATA_DIR, "--store", "/proc/hiqa-store", "--quiet").one_line("/proc")


@case("unusable path", "/proc as the store")
def _proc(tmp: Path, store: Path) -> bool:
    return hiqa("ingest", DEMO_DATA_DIR, "--store", "/proc", "--quiet").one_line("/proc")


@case("unusable path", "store inside a file")
def _store_in_file(tmp: Path, store: Path) -> bool:
    (tmp / "file").write_text("x")
    return hiqa("ingest", DEMO_DATA_DIR, "--store", tmp / "file" / "store", "--quiet").one_line(str(tmp / "file"))


@case("unusable path", "store is a file")
def _store_is_file(tmp: Path, store: Path) -> bool:
    (tmp / "file").write_text("x")
    return hiqa("ingest", DEMO_DATA_DIR, "--store", tmp / "file", "--quiet").one_line(str(tmp / "file"))


@case("unusable path", "folder is a file")
def _folder_is_file(tmp: Path, store: Path) -> bool:
    (tmp / "doc.txt").write_text("x")
    return hiqa("ingest", tmp / "doc.txt", "--store", tmp / "s", "--quiet").one_line("not a folder")


@case("unusable path", "read-only store (tmpfs)")
def _read_only_store(tmp: Path, store: Path) -> bool:
    with tmpfs(tmp / "ro", "4m", read_only=True) as ro:
        return hiqa("ingest", DEMO_DATA_DIR, "--store", ro / "store", "--quiet").one_line(str(ro), "read-only")


@case("unusable path", "read-only existing store, --add (tmpfs)")
def _read_only_existing(tmp: Path, store: Path) -> bool:
    mount = tmp / "ro"
    with tmpfs(mount, "8m") as folder:
        shutil.copytree(store, folder / "store")
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        added = hiqa("ingest", DEMO_DATA_DIR, "--store", folder / "store", "--add", "--quiet").one_line("read-only")
        return added and hiqa("ask", QUESTION, "--store", folder / "store").code == 0


@case("unusable path", "full disk before ingesting (tmpfs)")
def _full_disk(tmp: Path, store: Path) -> bool:
    with tmpfs(tmp / "small", "1m") as small:
        return hiqa("ingest", DEMO_DATA_DIR, "--store", small / "store", "--quiet").one_line(str(small), "free")


@case("unusable path", "disk fills during persist")
def _enospc_in_persist(tmp: Path, store: Path) -> bool:
    from llama_index_hiqa.storage import pack_files
    from llama_index_hiqa.storage.snapshots import current_snapshot

    before = current_snapshot(store)
    (tmp / "docs").mkdir()
    (tmp / "docs" / "extra.txt").write_text("# Extra\n\nA new document.\n")
    real = pack_files.write_index

    def full(index, folder):
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "docstore.json"))

    pack_files.write_index = full
    try:
        result = hiqa("ingest", tmp / "docs", "--store", store, "--add", "--quiet", "--checkpoint-minutes", "999")
    finally:
        pack_files.write_index = real
    staging_left = any(p.name.startswith(".staging-") for p in store.iterdir())
    return result.one_line("disk is full") and current_snapshot(store) == before and not staging_left


@case("unusable path", "one unreadable file in the folder")
def _unreadable_file(tmp: Path, store: Path) -> bool:
    from llama_index_hiqa.readers import pdf as pdf_module

    docs = tmp / "docs"
    shutil.copytree(DEMO_DATA_DIR, docs, ignore=shutil.ignore_patterns("*.jsonl"))
    real = pdf_module.lacks_eof_marker

    def refuse(path):
        if path.name == "NX-2043.pdf":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)

    pdf_module.lacks_eof_marker = refuse
    try:
        result = hiqa("ingest", docs, "--store", tmp / "s", "--quiet")
    finally:
        pdf_module.lacks_eof_marker = real
    return (
        result.code == 0 and "skipped" in result.err and "NX-2043.pdf" in result.err and "permission denied" in result.err
        and stored_documents(tmp / "s") == {f"NX-{n}" for n in range(2040, 2050)} - {"NX-2043"}
    )


# --- 3. writers and kills ----------------------------------------------------------------------
def _docs(folder: Path, names: List[str]) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        (folder / f"{name}.txt").write_text(f"# {name}\n\nThe {name} unit is documented here.\n")
    return folder


@case("concurrent writers", "two --add processes on one store")
def _two_writers(tmp: Path, store: Path) -> bool:
    writers = [
        hiqa_process("ingest", _docs(tmp / f"f{i}", [f"extra{i}a", f"extra{i}b"]), "--store", store, "--add", "--quiet")
        for i in (1, 2)
    ]
    codes = [w.wait(timeout=300) for w in writers]
    expected = {f"NX-{n}" for n in range(2040, 2050)} | {"extra1a", "extra1b", "extra2a", "extra2b"}
    return codes == [0, 0] and stored_documents(store) == expected


@case("concurrent writers", "writer killed mid-run, then --add again")
def _killed_writer(tmp: Path, store: Path) -> bool:
    docs = _docs(tmp / "many", [f"doc{i:03d}" for i in range(400)])
    before = stored_documents(store)
    writer = hiqa_process("ingest", docs, "--store", store, "--add", "--quiet")
    time.sleep(2.0)
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=60)
    loads = hiqa("ask", QUESTION, "--store", store).code == 0 and before <= stored_documents(store)
    again = hiqa("ingest", docs, "--store", store, "--add", "--quiet").code == 0
    return loads and again and stored_documents(store) == before | {f"doc{i:03d}" for i in range(400)}


# --- 4. the store follows the folder -----------------------------------------------------------
@case("removed files", "--sync removes a deleted file's document")
def _sync(tmp: Path, store: Path) -> bool:
    docs = tmp / "docs"
    shutil.copytree(DEMO_DATA_DIR, docs, ignore=shutil.ignore_patterns("*.jsonl"))
    (docs / "NX-2046.pdf").unlink()
    result = hiqa("ingest", docs, "--store", store, "--sync", "--quiet")
    answer = hiqa("ask", QUESTION, "--store", store, "--json")
    cited = {s["document_id"] for s in json.loads(answer.out)["sources"]} if answer.code == 0 else {"?"}
    return result.code == 0 and "removed NX-2046" in result.err and "1 removed" in result.out and "NX-2046" not in cited


@case("removed files", "--sync with a folder that cannot be listed removes nothing")
def _sync_unlistable(tmp: Path, store: Path) -> bool:
    from llama_index_hiqa.errors import SkippedDocumentError
    from llama_index_hiqa.pack import store_sync
    from llama_index_hiqa.readers import _collection

    docs = tmp / "docs"
    shutil.copytree(DEMO_DATA_DIR, docs, ignore=shutil.ignore_patterns("*.jsonl"))
    real = store_sync.plan_folder

    def unlistable(folder, *args):
        return _collection.LoadPlan([], [SkippedDocumentError(folder, "cannot list the folder (Permission denied)")])

    store_sync.plan_folder = unlistable  # what --sync lists; the reader keeps its own listing
    try:
        result = hiqa("ingest", docs, "--store", store, "--sync", "--quiet")
    finally:
        store_sync.plan_folder = real
    return result.one_line("cannot list", "nothing was removed") and len(stored_documents(store)) == 10


@case("removed files", "--sync with an empty folder removes nothing")
def _sync_empty(tmp: Path, store: Path) -> bool:
    (tmp / "empty").mkdir()
    result = hiqa("ingest", tmp / "empty", "--store", store, "--sync", "--quiet")
    return result.code == 2 and "Traceback" not in result.err and len(stored_documents(store)) == 10


@case("removed files", "hiqa delete DOC")
def _delete(tmp: Path, store: Path) -> bool:
    result = hiqa("delete", "NX-2046", "--store", store)
    return result.code == 0 and "NX-2046" not in stored_documents(store) and len(stored_documents(store)) == 9


@case("removed files", "hiqa delete of an unknown document")
def _delete_unknown(tmp: Path, store: Path) -> bool:
    return hiqa("delete", "NX-9999", "--store", store).one_line("NX-9999", "NX-2040") and len(stored_documents(store)) == 10


# --- 5. settings and inputs --------------------------------------------------------------------
def _setting_case(name: str, build: Callable[[], object], named: str) -> None:
    def run(tmp: Path, store: Path) -> bool:
        try:
            with cheap_models():
                build()
        except ValueError as exc:  # pydantic's ValidationError and InvalidSettingError both are
            return named in str(exc) and "hiqa_pack.json" not in str(exc)
        return False

    case("bad setting", name)(run)


def _bad_settings() -> None:
    from llama_index.core.schema import Document

    from llama_index_hiqa.pack.config import HiQAPackSettings
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack

    for key, value in [
        ("max_segment_chars", -10), ("max_segment_chars", 0), ("max_segment_tokens", 0), ("max_segment_tokens", -1),
        ("similarity_top_k", 0), ("ingest_batch_size", 0),
    ]:
        _setting_case(f"{key}={value}", lambda k=key, v=value: HiQAPackSettings(**{k: v}), key)
    _setting_case("keywords expert_keywords='NX'", lambda: HiQAPackSettings(keywords={"expert_keywords": "NX"}), "expert_keywords")
    _setting_case("chunk_graph keyword_threshold='sometimes'",
                  lambda: HiQAPackSettings(chunk_graph={"keyword_threshold": "sometimes"}), "keyword_threshold")
    for key, value in [("llm", "gpt-4"), ("vector_store", "x"), ("store", 123)]:
        _setting_case(f"{key}={value!r}", lambda k=key, v=value: HiQAPack.empty(**{k: v}), key)
    _setting_case("add_documents(['text'])", lambda: HiQAPack.empty().add_documents(["text"]), "documents[0]")


_bad_settings()


@case("bad setting", "load(similarity_top_k=0) blames the argument")
def _load_setting(tmp: Path, store: Path) -> bool:
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack

    try:
        with cheap_models():
            HiQAPack.load(store, similarity_top_k=0)
    except ValueError as exc:
        return "similarity_top_k" in str(exc) and "hiqa_pack.json" not in str(exc)
    return False


@case("odd question", "a non-UTF-8 byte in the question")
def _surrogate(tmp: Path, store: Path) -> bool:
    result = hiqa("ask", "NX-2046 \udcff current", "--store", store)
    return result.code == 0 and "NX-2046" in result.out


# --- 6. settings refused where they are written, whatever the entry point ---------------------
def _refused(name: str, build: Callable[[Path, Path], object], path: str, said: str) -> None:
    """A case: ``build`` raises one InvalidSettingError naming ``path`` and saying ``said``."""
    def run(tmp: Path, store: Path) -> bool:
        from llama_index_hiqa.errors import InvalidSettingError

        try:
            with cheap_models():
                build(tmp, store)
        except InvalidSettingError as exc:
            return exc.setting == path and said in exc.reason
        except Exception:  # noqa: BLE001 - any other error is the outcome being counted
            return False
        return False

    case("bad setting", name)(run)


def _from_directory(**settings: object) -> Callable[[Path, Path], object]:
    def build(tmp: Path, store: Path) -> object:
        from llama_index_hiqa.pack.hiqa_pack import HiQAPack

        return HiQAPack.from_directory(DEMO_DATA_DIR, store=tmp / "new", **settings).retrieve(QUESTION)
    return build


def _load(**settings: object) -> Callable[[Path, Path], object]:
    def build(tmp: Path, store: Path) -> object:
        from llama_index_hiqa.pack.hiqa_pack import HiQAPack

        return HiQAPack.load(store, **settings).retrieve(QUESTION)
    return build


def _demo_nodes() -> list:
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack

    return HiQAPack.from_documents([_document()], embed_model=HashEmbedding(), keywords={"use_ner": False}).nodes


def _document() -> object:
    from llama_index.core.schema import Document

    return Document(text="# NX-2046\n\n## Electrical\n\nMaximum output current 3 A.\n", id_="NX-2046")


def _setting_cases() -> None:
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack
    from llama_index_hiqa.retrievers.chunk_interaction_graph import ChunkInteractionGraph
    from llama_index_hiqa.retrievers.multi_route import MultiRouteRetriever

    for name, settings, path, said in [
        ("multi_route beta=-5", {"multi_route": {"beta": -5}}, "multi_route.beta", ">= 0"),
        ("multi_route bm25_language='klingon'", {"multi_route": {"bm25_language": "klingon"}},
         "multi_route.bm25_language", "german"),
        ("chunk_graph semantic_top_k=10**9", {"use_chunk_graph": True, "chunk_graph": {"semantic_top_k": 10**9}},
         "chunk_graph.graph.semantic_top_k", "<= 100"),
        ("multi_route route_weights={'vectr': 1}", {"multi_route": {"route_weights": {"vectr": 1.0}}},
         "multi_route.route_weights['vectr']", "'vector'"),
        ("multi_route alpha=nan", {"multi_route": {"alpha": float("nan")}}, "multi_route.alpha", "finite"),
        ("multi_route candidates_per_route=10**12", {"multi_route": {"candidates_per_route": 10**12}},
         "multi_route.candidates_per_route", "<= 100000"),
        ("keywords ner_labels=['ORGG']", {"keywords": {"ner_labels": ["ORGG"]}}, "keywords.ner_labels", "PRODUCT"),
        ("document_focus focus_documents=10**9", {"document_focus": {"focus_documents": 10**9}},
         "document_focus.focus_documents", "<= 1000"),
        ("chunk_graph max_hops=10**9", {"use_chunk_graph": True, "chunk_graph": {"max_hops": 10**9}},
         "chunk_graph.search.max_hops", "<= 1000"),
        ("ingest_batch_size=10**9", {"ingest_batch_size": 10**9}, "ingest_batch_size", "<= 10000"),
    ]:
        _refused(f"from_directory({name})", _from_directory(**settings), path, said)
    _refused("load(similarity_top_k=10**6)", _load(similarity_top_k=10**6), "similarity_top_k", "<= 1000")
    _refused("load(multi_route={'beta': 'high'})", _load(multi_route={"beta": "high"}), "multi_route.beta", "'auto'")
    _refused("MultiRouteRetriever(candidates_per_route=0)",
             lambda tmp, store: MultiRouteRetriever(nodes=_demo_nodes(), candidates_per_route=0),
             "candidates_per_route", ">= 1")
    _refused("from_directory(5)", lambda tmp, store: HiQAPack.from_directory(5), "path", "expected a folder path")
    _refused("from_directory(store=123)", lambda tmp, store: HiQAPack.from_directory(DEMO_DATA_DIR, store=123), "store",
             "expected a folder path")
    _refused("load(None)", lambda tmp, store: HiQAPack.load(None), "persist_dir", "expected a folder path")
    _refused("persist(123)", lambda tmp, store: _loaded(store).persist(123), "persist_dir", "expected a folder path")
    _refused("as_query_engine(llm='gpt-4')", lambda tmp, store: _loaded(store).as_query_engine(llm="gpt-4"), "llm",
             "llm_from_spec")
    _refused("as_chat_engine(llm=5)", lambda tmp, store: _loaded(store).as_chat_engine(llm=5), "llm", "LlamaIndex LLM")
    _refused("as_retriever(similarity_top_k=0)", lambda tmp, store: _loaded(store).as_retriever(similarity_top_k=0),
             "similarity_top_k", ">= 1")
    _refused("MultiRouteRetriever.with_settings(alpha=2)",
             lambda tmp, store: _loaded(store).multi_route.with_settings(alpha=2), "alpha", "<= 1")
    _refused("ChunkInteractionGraph.from_nodes(semantic_top_k=10**9)",
             lambda tmp, store: ChunkInteractionGraph.from_nodes(_demo_nodes(), embed_model=HashEmbedding(),
                                                                 semantic_top_k=10**9),
             "semantic_top_k", "<= 100")


_setting_cases()


@case("bad setting", "hiqa ask --top-k 5000")
def _cli_top_k(tmp: Path, store: Path) -> bool:
    return hiqa("ask", QUESTION, "--store", store, "--top-k", "5000").one_line("similarity_top_k", "<= 1000")


def _saved_setting(store: Path, part: str, settings: dict) -> None:
    from llama_index_hiqa.storage.snapshots import current_snapshot

    saved = current_snapshot(store) / "hiqa_pack.json"
    payload = json.loads(saved.read_text())
    payload["config"][part] = settings
    saved.write_text(json.dumps(payload))


@case("bad setting", "a saved beta=-5, then hiqa ask")
def _saved_beta(tmp: Path, store: Path) -> bool:
    _saved_setting(store, "multi_route", {"beta": -5})
    return hiqa("ask", QUESTION, "--store", store).one_line("hiqa_pack.json", "multi_route.beta", ">= 0")


@case("bad setting", "a saved bm25_language='klingon', then hiqa ask")
def _saved_language(tmp: Path, store: Path) -> bool:
    _saved_setting(store, "multi_route", {"bm25_language": "klingon"})
    return hiqa("ask", QUESTION, "--store", store).one_line("hiqa_pack.json", "multi_route.bm25_language")


# --- 7. questions through the Python API: answered, or one typed error --------------------------
@contextlib.contextmanager
def _log_records() -> Iterator[list]:
    """Every record the pack logs meanwhile (DEBUG and up)."""
    import logging

    records: list = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    root = logging.getLogger("llama_index_hiqa")
    level, root.level = root.level, logging.DEBUG
    root.addHandler(handler)
    try:
        yield records
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _loaded(store: Path) -> object:
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack

    return HiQAPack.load(store, embed_model=HashEmbedding())


def _answered(nodes: object) -> bool:
    """Nodes came back, none saying a route failed."""
    from llama_index_hiqa import schema

    return bool(nodes) and all(not n.node.metadata.get(schema.ROUTE_SCORES, {}).get("failed") for n in nodes)


def _question_case(name: str, ask: Callable[[object], object], refused: bool = False, ner: bool = False) -> None:
    """A question through an entry point of the pack: answered by every route with no warning,
    or (``refused``) one InvalidQuestionError. ``ner``: the question goes through the packaged
    spaCy NER model too (the store's own keyword settings), as it does by default."""
    def run(tmp: Path, store: Path) -> bool:
        import logging

        from llama_index_hiqa.errors import HiQAError

        with (contextlib.nullcontext() if ner else cheap_models()), _log_records() as records:
            pack = _loaded(store)
            try:
                result = ask(pack)
            except HiQAError as exc:
                return refused and type(exc).__name__ == "InvalidQuestionError"
            except Exception:  # noqa: BLE001 - a raw error is the outcome being counted
                return False
        quiet = not [r for r in records if r.levelno >= logging.WARNING]
        nodes = getattr(result, "source_nodes", result)
        return not refused and quiet and _answered(nodes)

    case("odd question", name)(run)


def _question_cases() -> None:
    import asyncio

    surrogate, control = "\ud83d NX-2046 maximum output current", "NX-2046\x00 maximum\x07 output\x1b current"
    _question_case("retrieve() with a lone surrogate", lambda p: p.retrieve(surrogate), ner=True)
    _question_case("retrieve() with NUL and control characters", lambda p: p.retrieve(control), ner=True)
    _question_case("run() with a lone surrogate and NUL", lambda p: p.run(surrogate + "\x00"), ner=True)
    _question_case("query engine with a lone surrogate", lambda p: p.as_query_engine().query(surrogate), ner=True)
    _question_case("chat engine with NUL", lambda p: p.as_chat_engine().chat(control), ner=True)
    _question_case("aretrieve() with control characters", lambda p: asyncio.run(p.as_retriever().aretrieve(control)),
                   ner=True)
    _question_case("MultiRouteRetriever.retrieve() with a lone surrogate", lambda p: p.multi_route.retrieve(surrogate),
                   ner=True)
    _question_case("retrieve() with a lone surrogate, rules-only keywords", lambda p: p.retrieve(surrogate))
    _question_case("retrieve(None)", lambda p: p.retrieve(None), refused=True)
    _question_case("full_ranking(None)", lambda p: p.multi_route.full_ranking(None), refused=True)
    _question_case("question_keywords(3.5)", lambda p: p.multi_route.question_keywords(3.5), refused=True)
    _question_case("retrieve(42)", lambda p: p.retrieve(42), refused=True)
    _question_case("as_retriever().retrieve(b'bytes')", lambda p: p.as_retriever().retrieve(b"NX-2046"), refused=True)
    _question_case("run() of 20,000 characters", lambda p: p.run("NX-2046 " * 2500), refused=True)
    _question_case("chat engine, a message of 20,000 characters", lambda p: p.as_chat_engine().chat("x" * 20_000),
                   refused=True)


_question_cases()


@case("odd question", "hiqa ask with 20,000 characters")
def _cli_long(tmp: Path, store: Path) -> bool:
    return hiqa("ask", "NX-2046 " * 2500, "--store", store).one_line("question", "10,000")


@case("odd question", "hiqa ask with NUL and control characters")
def _cli_control(tmp: Path, store: Path) -> bool:
    result = hiqa("ask", "NX-2046\x00 maximum\x07 output current", "--store", store)
    return result.code == 0 and "NX-2046" in result.out and "failed" not in result.err


# --- 8. a route that fails: one line, and the answer says so ------------------------------------
@case("degraded route", "keyword route raises: one WARNING line, stack at DEBUG, nodes name it")
def _degraded(tmp: Path, store: Path) -> bool:
    import logging

    from llama_index_hiqa import schema
    from llama_index_hiqa.retrievers.keyword_route import KeywordRoute

    real = KeywordRoute.scores, KeywordRoute.scores_within

    def broken(self: object, *args: object) -> dict:
        raise RuntimeError("keyword index unreadable\n(second line)")

    KeywordRoute.scores = KeywordRoute.scores_within = broken  # type: ignore[method-assign]
    try:
        with cheap_models(), _log_records() as records:
            nodes = _loaded(store).retrieve(QUESTION)
    finally:
        KeywordRoute.scores, KeywordRoute.scores_within = real  # type: ignore[method-assign]
    warned = [r for r in records if r.levelno >= logging.WARNING]
    stacks = [r for r in records if r.exc_info]
    return (
        len(warned) == 1 and "keywords route failed" in warned[0].getMessage()
        and "keyword index unreadable (second line)" in warned[0].getMessage() and not warned[0].exc_info
        and len(stacks) == 1 and stacks[0].levelno == logging.DEBUG
        and bool(nodes) and all(n.node.metadata[schema.ROUTE_SCORES].get("failed") == ["keywords"] for n in nodes)
    )


@case("degraded route", "every route raises: one typed error")
def _all_routes(tmp: Path, store: Path) -> bool:
    from llama_index_hiqa.errors import RetrievalRouteError
    from llama_index_hiqa.retrievers.bm25_route import BM25Route
    from llama_index_hiqa.retrievers.keyword_route import KeywordRoute
    from llama_index_hiqa.retrievers.routes import VectorRoute

    def broken(self: object, *args: object) -> dict:
        raise RuntimeError("down")

    classes = (KeywordRoute, BM25Route, VectorRoute)
    real = [c.scores for c in classes]
    for c in classes:
        c.scores = broken  # type: ignore[method-assign]
    try:
        with cheap_models():
            _loaded(store).retrieve(QUESTION)
    except RetrievalRouteError as exc:
        return set(exc.errors) == {"vector", "bm25", "keywords"}
    except Exception:  # noqa: BLE001
        return False
    finally:
        for c, method in zip(classes, real):
            c.scores = method  # type: ignore[method-assign]
    return False


@case("damaged cache", "garbage embedding cache file")
def _cache_garbage(tmp: Path, store: Path) -> bool:
    from llama_index_hiqa.models.embedding_cache import CachedEmbedding

    path = tmp / "embeddings.sqlite"
    path.write_bytes(os.urandom(8192))
    cache = CachedEmbedding(HashEmbedding(), cache_path=str(path))
    return cache.get_text_embedding("alpha") == HashEmbedding().get_text_embedding("alpha")


def run_case(item: Case, tmp: Path, base_store: Path) -> Tuple[Optional[bool], str]:
    """``(handled, note)``; handled is None when the case was skipped on this machine."""
    store = tmp / "store"
    shutil.copytree(base_store, store)
    try:
        return bool(item.run(tmp, store)), ""
    except Skip as exc:
        return None, str(exc)
