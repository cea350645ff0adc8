"""Progress from the first second: `hiqa ingest` says what it does before its first slow
import, every model load and folder read is announced on stderr before it starts, and
``show_progress=True`` shows LlamaIndex's embedding bar and the pack's indexing bar."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llama_index_hiqa import HiQAPack, progress
from llama_index_hiqa.demo import DEMO_DATA_DIR
from tests.pack_helpers import HashEmbedding

ROOT = Path(__file__).resolve().parents[1]
FAST = {"keywords": {"use_ner": False}}


@pytest.fixture
def two_datasheets(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("NX-2042.pdf", "NX-2043.pdf"):
        shutil.copy(DEMO_DATA_DIR / name, folder / name)
    return folder


def test_hiqa_ingest_prints_its_first_line_before_importing_llamaindex_or_loading_a_model(tmp_path):
    """``-X importtime`` writes a line to stderr as each module is imported: the command's
    first line must come before LlamaIndex's, and before the embedding model is loaded. The
    process is stopped once the model load is announced (nothing waits for it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HIQA_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-X", "importtime", "-m", "llama_index_hiqa.cli", "ingest", str(DEMO_DATA_DIR),
               "--store", str(tmp_path / "store")]
    started = time.monotonic()
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
    lines, first_line_seconds = [], None
    try:
        for line in process.stderr:
            lines.append(line.rstrip("\n"))
            if first_line_seconds is None and line.startswith("hiqa ingest:"):
                first_line_seconds = time.monotonic() - started
            if "loading the embedding model" in line or time.monotonic() - started > 300:
                break
    finally:
        process.kill()
        process.wait()
    ours = [i for i, line in enumerate(lines) if not line.startswith("import time:")]
    assert lines[ours[0]] == f"hiqa ingest: {DEMO_DATA_DIR}: loading the pack and its models ..."
    first_llamaindex = next(i for i, line in enumerate(lines) if "llama_index.core" in line)
    assert ours[0] < first_llamaindex
    announced = next(i for i in ours if "loading the embedding model all-MiniLM-L6-v2" in lines[i])
    assert lines[announced].startswith(progress.STATUS_PREFIX)
    # Before any slow import, so seconds even on a loaded machine (the import of LlamaIndex alone takes ~4 s).
    assert first_line_seconds is not None and first_line_seconds < 30


def test_parsing_the_command_line_imports_no_llamaindex():
    code = (
        "import sys; from llama_index_hiqa import cli; "
        "cli.build_parser().parse_args(['ingest', 'docs', '--store', 's']); "
        "print(sorted(m for m in sys.modules if m.startswith('llama_index.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_show_progress_shows_the_embedding_and_indexing_bars(two_datasheets, capsys):
    pack = HiQAPack.from_directory(two_datasheets, embed_model=HashEmbedding(), show_progress=True, **FAST)
    err = capsys.readouterr().err
    assert f"{progress.STATUS_PREFIX}reading 2 file(s) from {two_datasheets}" in err
    assert "Generating embeddings: 100%" in err  # LlamaIndex's own bar, over the batch's nodes
    assert "indexing: 100%" in err and "2/2" in err  # one bar over the run, with its ETA
    assert pack.node_count > 0


def test_without_show_progress_only_the_status_lines_show(two_datasheets, capsys):
    HiQAPack.from_directory(two_datasheets, embed_model=HashEmbedding(), **FAST)
    err = capsys.readouterr().err
    assert "Generating embeddings" not in err and "indexing:" not in err
    assert f"{progress.STATUS_PREFIX}reading 2 file(s)" in err


def test_model_loads_are_announced_and_quiet_silences_them_inside_its_block(monkeypatch, capsys):
    from llama_index_hiqa.models import defaults

    monkeypatch.setattr(defaults, "build_packaged_embed_model", lambda backend, batch: HashEmbedding())
    line = f"{progress.STATUS_PREFIX}loading the embedding model all-MiniLM-L6-v2 (onnx) ...\n"
    monkeypatch.setattr(defaults, "_embed_models", {})
    defaults.packaged_embed_model(backend="onnx")
    assert capsys.readouterr().err == line

    with progress.quiet():  # what `hiqa ingest --quiet` runs in
        monkeypatch.setattr(defaults, "_embed_models", {})
        defaults.packaged_embed_model(backend="onnx")
    assert capsys.readouterr().err == ""

    monkeypatch.setattr(defaults, "_embed_models", {})  # and the lines are back after the block
    defaults.packaged_embed_model(backend="onnx")
    assert capsys.readouterr().err == line


def test_a_list_of_documents_gives_the_indexing_bar_its_total(capsys):
    from llama_index_hiqa.demo import load_demo_documents

    documents = load_demo_documents()[:3]
    capsys.readouterr()
    HiQAPack.from_documents(documents, embed_model=HashEmbedding(), show_progress=True, **FAST)
    err = capsys.readouterr().err
    assert "indexing: 100%" in err and "3/3" in err
