"""Ingestion on a Ray cluster (the ``[ray]`` extra), on a local cluster this module starts on
127.0.0.1 and stops: the pack's transformations inside LlamaIndex's ``RayIngestionPipeline``
give the nodes a plain ``IngestionPipeline`` gives; ``add_directory(..., executor=RayExecutor())``
ends in the store one process writes; a worker killed mid-run is restarted by Ray, and nothing
is lost or written twice; ``import llama_index_hiqa`` never imports Ray."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
ray_ingestion = pytest.importorskip("llama_index.ingestion.ray")

from llama_index.core.ingestion import IngestionPipeline  # noqa: E402

from llama_index_hiqa import (  # noqa: E402
    CascadingMetadataTransform, ContextHeaderTransform, CriticalKeywordExtractor, DocumentChain, HiQAPack,
    LayoutMarkdownParser, LineNumberSegmentParser, MarkdownFormatterParser, RayExecutor,
    UnserializableComponentError, schema,
)
from llama_index_hiqa.demo import DEMO_DATA_DIR  # noqa: E402
from llama_index_hiqa.models.embedding_cache import CachedEmbedding  # noqa: E402
from llama_index_hiqa.pack.config import default_embed_model  # noqa: E402
from llama_index_hiqa.readers.pdf import PDFLayoutReader  # noqa: E402
from llama_index_hiqa.testing import ScriptedLLM  # noqa: E402
from tests.pack_helpers import HashEmbedding  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = [json.loads(line)["question"] for line in (DEMO_DATA_DIR / "questions.jsonl").read_text().splitlines()[:6]]


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module (2 CPUs, loopback), stopped at its end. Workers
    import this checkout (and these tests, for the scripted LLM's functions)."""
    ray.init(
        num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", configure_logging=False,
        logging_level="WARNING", runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}},
    )
    from ray.data import DataContext

    DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


# -- the transformations inside RayIngestionPipeline -----------------------------------------
def node_id(index, document):
    """Node ids from the document and the parser's counter: the same in every process (the
    default, uuid4, differs per run). Figure nodes reuse a counter value, so the test compares
    nodes in order, not by id alone."""
    return f"{document.doc_id}-{index}"


def scripted_answer(prompt):
    """Titles, summaries and sections for every LLM prompt of the parsers and the header."""
    if "Please provide the title of the document" in prompt:
        return "Datasheet"
    if "summarize the content of the document" in prompt:
        return "A regulator datasheet."
    if "summarize the content of the following section" in prompt:
        return "A section of it."
    if "DOCUMENT EXCERPT" in prompt:
        numbers = [int(x) for x in re.findall(r"^\[(\d+)\]", prompt.split("DOCUMENT EXCERPT", 1)[1], re.M)]
        starts = range(numbers[0], numbers[-1] + 1, 12) if numbers else []
        return json.dumps({"sections": [{"title": f"Topic {s}", "start_index": s} for s in starts]})
    return "# Datasheet\n\nNot Markdown of the window."  # the formatter falls back to the layout parser


@pytest.fixture(scope="module")
def documents():
    return PDFLayoutReader().load_data(sorted(DEMO_DATA_DIR.glob("*.pdf"))[:1])


def _same_nodes(plain, on_ray, vector_tolerance=0.0):
    assert len(on_ray) == len(plain) > 0
    for mine, theirs in zip(plain, on_ray):
        assert type(theirs) is type(mine)
        assert (theirs.node_id, theirs.text, theirs.metadata) == (mine.node_id, mine.text, mine.metadata)
        assert theirs.excluded_embed_metadata_keys == mine.excluded_embed_metadata_keys
        assert theirs.excluded_llm_metadata_keys == mine.excluded_llm_metadata_keys
        assert theirs.relationships == mine.relationships
        if mine.embedding is None:
            assert theirs.embedding is None
        else:
            assert theirs.embedding == pytest.approx(mine.embedding, abs=vector_tolerance)


def _on_ray(documents, components):
    from llama_index.ingestion.ray import RayIngestionPipeline, RayTransformComponent

    # Half a CPU each: every stage's actor runs at once on the 2-CPU cluster.
    options = {"batch_size": 4, "concurrency": 1, "num_cpus": 0.5}
    ray_components = [RayTransformComponent(cls, map_batches_kwargs=options, **kwargs) for cls, kwargs in components]
    return RayIngestionPipeline(transformations=ray_components).run(documents=documents)


def _plain(documents, components):
    return IngestionPipeline(transformations=[cls(**kw) for cls, kw in components], disable_cache=True).run(
        documents=[d.model_copy(deep=True) for d in documents]
    )


def test_node_by_node_transformations_give_the_plain_pipeline_nodes(cluster, documents, tmp_path):
    """Each its own RayTransformComponent (Ray cuts the rows where it likes): the LLM Markdown
    formatter, the keyword extractor (spaCy loaded on the worker) and the packaged ONNX MiniLM
    behind the vector cache (its session rebuilt on the worker; each run its own cache file, so
    the Ray vectors are computed there, not read back)."""
    onnx = default_embed_model(None).inner
    components = [
        (MarkdownFormatterParser, {"llm": ScriptedLLM(scripted_answer), "id_func": node_id, "retry_backoff_seconds": 0.0}),
        (CriticalKeywordExtractor, {}),
        (CachedEmbedding, {"inner": onnx, "cache_path": str(tmp_path / "plain.sqlite")}),
    ]
    plain = _plain(documents, components)
    components[-1] = (CachedEmbedding, {"inner": onnx, "cache_path": str(tmp_path / "ray.sqlite")})
    on_ray = _on_ray(documents, components)
    _same_nodes(plain, on_ray, vector_tolerance=1e-6)
    assert any(schema.CRITICAL_KEYWORDS in n.metadata for n in plain)


def test_document_wide_transformations_run_in_a_document_chain(cluster, documents):
    """The cascade (an image node's view reads the text around it) and the context header (a
    document summary) read a document's other nodes: given documents, a DocumentChain keeps
    each document's nodes in one Ray batch."""
    llm = ScriptedLLM(scripted_answer)
    chains = [
        [LineNumberSegmentParser(llm=llm, id_func=node_id, retry_backoff_seconds=0.0),
         ContextHeaderTransform(llm=llm), CascadingMetadataTransform()],
        [LayoutMarkdownParser(id_func=node_id), CascadingMetadataTransform()],
    ]
    for chain in chains:
        components = [(DocumentChain, {"transformations": chain})]
        plain, on_ray = _plain(documents, components), _on_ray(documents, components)
        _same_nodes(plain, on_ray)
    assert any(schema.IMAGE_DESCRIPTION in n.metadata for n in on_ray)  # the views around figures


def test_a_component_that_does_not_survive_pickling_is_refused_by_name():
    from llama_index_hiqa.pack.ray_ingestion import checked_for_workers

    with pytest.raises(UnserializableComponentError, match=r"embed_model \(LockedEmbedding\)"):
        checked_for_workers("embed_model", LockedEmbedding())


class LockedEmbedding(HashEmbedding):
    """An embedding model that refuses to pickle (as a client holding a socket would)."""

    def __reduce__(self):
        raise TypeError("cannot pickle a socket")


# -- HiQAPack.add_directory(..., executor=RayExecutor()) ---------------------------------------
def _snapshot(pack, vector_of=None):
    """Each node's document, position, text and vector, in the store's order (node ids are
    uuid4 per build, so nodes are named by document and position)."""
    vector_of = vector_of or pack.index.vector_store.get
    return [
        (schema.get_document_id(n), schema.get_position(n), n.get_content(), tuple(vector_of(n.node_id)))
        for n in pack.nodes
    ]


def _pg_snapshot(pack):
    """``_snapshot`` of a PostgreSQL pack, whose vectors are read from pgvector's table."""
    stored = dict(pack.store.rows("SELECT node_id, embedding::real[] FROM data_hiqa_vectors"))
    return _snapshot(pack, stored.__getitem__)


def _top5(pack):
    return [[(schema.get_document_id(h.node), schema.get_position(h.node)) for h in pack.retrieve(q)[:5]] for q in QUESTIONS]


# Rules-only keywords: spaCy's NER model loads in ~5 s per worker, and the keyword extractor
# itself runs under Ray in the transformation tests above.
PACK = {"ingest_batch_size": 3, "keywords": {"use_ner": False}}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    target = tmp_path_factory.mktemp("ray") / "docs"
    shutil.copytree(DEMO_DATA_DIR, target, ignore=shutil.ignore_patterns("*.jsonl"))
    return target


@pytest.fixture(scope="module")
def one_process(folder):
    pack = HiQAPack.empty(embed_model=HashEmbedding(), **PACK)
    pack.add_directory(folder)
    return pack


class DyingOnceEmbedding(HashEmbedding):
    """Kills its own worker process the first time it embeds (the marker file says it did)."""

    marker: str = ""

    def _get_text_embeddings(self, texts):
        if self.marker and not os.path.exists(self.marker):
            Path(self.marker).write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return super()._get_text_embeddings(texts)


def test_ray_ingestion_writes_the_store_one_process_writes_though_a_worker_is_killed(
    cluster, folder, one_process, tmp_path
):
    """One worker kills itself mid-batch: Ray restarts it and runs the batch again, and the
    store still holds every node of one process once, in order, with the same vectors and
    rankings (the embedding is the pack tests' hashing one, in a subclass that dies once)."""
    marker = tmp_path / "killed"
    pack = HiQAPack.empty(embed_model=DyingOnceEmbedding(marker=str(marker)), **PACK)
    report = pack.add_directory(folder, executor=RayExecutor(workers=2))
    assert marker.exists()  # a worker did die mid-batch
    assert pack.document_ids == one_process.document_ids
    assert _snapshot(pack) == _snapshot(one_process)
    assert _top5(pack) == _top5(one_process)
    assert report.documents_added == 10 and report.nodes_added == pack.node_count == one_process.node_count
    assert len(set(report.node_ids)) == len(report.node_ids)  # nothing written twice
    assert report.seconds["read"] > 0 and report.seconds["embed"] > 0  # booked from the workers
    again = pack.add_directory(folder, executor=RayExecutor(workers=2))  # unchanged files never reach Ray
    assert (again.documents_added, again.nodes_added, again.documents_unchanged) == (0, 0, 10)
    # A touched file with the same text is read on a worker and left unchanged by its hash.
    touched = sorted(folder.glob("*.pdf"))[0]
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    third = pack.add_directory(folder, executor=RayExecutor(workers=2))
    assert (third.documents_added, third.documents_replaced, third.documents_unchanged) == (0, 0, 10)
    assert pack.file_stats[touched.stem][1] == touched.stat().st_mtime_ns


def test_without_the_extra_ray_ingestion_names_it(monkeypatch):
    from llama_index_hiqa import ExtraNotInstalledError
    from llama_index_hiqa.pack.ray_ingestion import import_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(ExtraNotInstalledError, match=r"llama-index-hiqa\[ray\]"):
        import_ray()


def test_importing_the_pack_does_not_import_ray():
    code = "import sys, llama_index_hiqa; from llama_index_hiqa import RayExecutor, DocumentChain; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60, check=True)
    assert out.stdout.strip() == "False"


def test_the_cli_ray_flag_names_the_cluster_and_its_workers(tmp_path):
    from llama_index_hiqa.cli import _ray_executor, build_parser

    def executor(*flags):
        return _ray_executor(build_parser().parse_args(["ingest", str(tmp_path), "--store", str(tmp_path / "s"), *flags]))

    assert executor() is None  # no --ray: this machine's processes
    assert executor("--ray") == RayExecutor()  # the cluster Ray finds, else one started here
    assert executor("--ray", "ray://head:10001", "--workers", "6") == RayExecutor(address="ray://head:10001", workers=6)


# -- hiqa ingest DIR --store postgresql://... --ray ------------------------------------------
def test_ray_ingestion_into_postgresql_gives_the_store_one_process_writes(cluster, server, folder, monkeypatch, capsys):
    """What a user runs against a database: ``hiqa ingest DIR --store postgresql://... --ray auto``
    (into a database holding an empty pack with these tests' settings) writes the nodes, vectors
    and rankings one process writes into another database; running it again, from a new handle
    on the database, sends nothing to Ray (a touched file is tested on the embedded store above)."""
    pytest.importorskip("llama_index.vector_stores.postgres")
    from llama_index_hiqa import cli
    from llama_index_hiqa.pack import hiqa_pack as pack_module
    from tests.test_postgres_store import _assert_same_ranking

    on_ray, in_process = server.database(), server.database()
    HiQAPack.empty(embed_model=HashEmbedding(), store=on_ray, **PACK).close()
    # The CLI opens the store with the packaged MiniLM; here it gets the embedding it was built with.
    monkeypatch.setattr(pack_module, "default_embed_model", lambda m=None, backend=None: m or HashEmbedding())
    assert cli.main(["ingest", str(folder), "--store", on_ray, "--add", "--ray", "auto", "--workers", "2", "--quiet"]) == 0
    assert "10 added, 0 replaced, 0 unchanged" in capsys.readouterr().out
    reference = HiQAPack.empty(embed_model=HashEmbedding(), store=in_process, **PACK)
    reference.add_directory(folder)
    pack = HiQAPack.load(on_ray, embed_model=HashEmbedding())
    try:
        assert pack.document_ids == reference.document_ids
        assert _pg_snapshot(pack) == _pg_snapshot(reference)
        for question in QUESTIONS:  # equal scores are ordered by node id, uuid4 per build
            _assert_same_ranking(reference.retrieve(question)[:5], pack.retrieve(question)[:5])
        again = pack.add_directory(folder, executor=RayExecutor(workers=2))
        assert (again.documents_added, again.nodes_added, again.documents_unchanged) == (0, 0, 10)
        assert again.seconds.get("read", 0.0) == 0.0  # no file was read: nothing went to Ray
    finally:
        pack.close()
        reference.close()


def test_the_commands_of_the_ray_page_run_as_written(tmp_path):
    """Every ``hiqa`` command of docs/ray.md parses, and its ``--ray`` names the cluster the
    page says (a renamed flag cannot leave the page wrong)."""
    import shlex

    from llama_index_hiqa.cli import _ray_executor, build_parser

    commands = re.findall(r"^\s*hiqa (.+?)\s*(?:#.*)?$", (ROOT / "docs" / "ray.md").read_text(encoding="utf-8"), re.M)
    assert len(commands) >= 1
    executors = [_ray_executor(build_parser().parse_args(shlex.split(command))) for command in commands]
    assert RayExecutor(address="auto") in executors  # the multi-machine run joins the head's cluster
