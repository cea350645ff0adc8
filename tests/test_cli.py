"""The ``hiqa`` command line through its entry point: ingest, ask (text and --json), and the
one-line errors (missing store, empty folder, missing key, bad --llm) with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llama_index_hiqa import cli
from llama_index_hiqa.pack import hiqa_pack as pack_module
from llama_index_hiqa.settings import updated
from llama_index_hiqa.demo import DEMO_DATA_DIR
from llama_index_hiqa.pack.answers import NO_LLM_NOTICE
from llama_index_hiqa.storage import pack_files
from llama_index_hiqa.storage.backends.folder import holds_folder_store
from llama_index_hiqa.storage.embedded import is_embedded_store
from llama_index_hiqa.storage.snapshots import current_snapshot
from tests.pack_helpers import HashEmbedding

ROOT = Path(__file__).resolve().parents[1]


_real_keyword_extractor = pack_module.keyword_extractor


def _rules_only(config):
    # rules-only critical keywords: no spaCy model in the fast CLI tests
    return _real_keyword_extractor(updated(config, keywords={"use_ner": False}))


@pytest.fixture(autouse=True)
def _cheap_embedding(monkeypatch):
    # The CLI uses the packaged MiniLM; the commands' behaviour does not depend on it.
    monkeypatch.setattr(pack_module, "default_embed_model", lambda m=None, backend=None: m or HashEmbedding())
    monkeypatch.setattr(pack_module, "keyword_extractor", _rules_only)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pack_module, "default_embed_model", lambda m=None, backend=None: m or HashEmbedding())
        mp.setattr(pack_module, "keyword_extractor", _rules_only)
        assert cli.main(["ingest", str(DEMO_DATA_DIR), "--store", str(path), "--quiet"]) == 0
    return path


def test_ingest_writes_an_embedded_store_by_default(store, capsys):
    assert is_embedded_store(store) and not holds_folder_store(store)
    assert any(p.name.startswith("bm25-") for p in store.iterdir())  # saved for the next process


def test_ingest_writes_a_folder_store_when_asked(tmp_path):
    store = tmp_path / "folder"
    assert cli.main(["ingest", str(DEMO_DATA_DIR), "--store", str(store), "--store-format", "folder", "--quiet"]) == 0
    snapshot = current_snapshot(store)
    assert (snapshot / pack_files.CONFIG_FILENAME).is_file()
    assert (snapshot / pack_files.MULTI_ROUTE_DIRNAME).is_dir()
    assert "docstore.json" in os.listdir(snapshot)


def test_migrate_converts_a_store_both_ways(store, tmp_path, capsys):
    question = "What is the maximum output current of the NX-2046?"
    assert cli.main(["migrate", str(store), str(tmp_path / "folder")]) == 0
    assert "migrated" in capsys.readouterr().out and holds_folder_store(tmp_path / "folder")
    assert cli.main(["migrate", str(tmp_path / "folder"), str(tmp_path / "embedded")]) == 0
    assert is_embedded_store(tmp_path / "embedded")
    answers = []
    for path in (store, tmp_path / "folder", tmp_path / "embedded"):
        capsys.readouterr()
        assert cli.main(["ask", question, "--store", str(path), "--json"]) == 0
        answers.append(json.loads(capsys.readouterr().out)["sources"])
    assert answers[0] == answers[1] == answers[2]
    assert cli.main(["migrate", str(store), str(tmp_path / "embedded")]) == 2  # a store is there already


def test_ingest_on_an_existing_store_needs_add_or_rebuild(tmp_path, capsys):
    store = tmp_path / "s"
    base = ["ingest", str(DEMO_DATA_DIR), "--store", str(store), "--quiet", "--store-format", "folder"]
    assert cli.main(base) == 0
    first = current_snapshot(store)
    capsys.readouterr()
    assert cli.main(base) == 2  # never a silent overwrite
    assert "--add" in capsys.readouterr().err and current_snapshot(store) == first
    assert cli.main(base + ["--add"]) == 0  # every file unchanged: nothing parsed or embedded
    out = capsys.readouterr().out
    assert "added to" in out and "0 added, 0 replaced, 10 unchanged" in out
    assert cli.main(base + ["--rebuild"]) == 0
    assert "rebuilt" in capsys.readouterr().out
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("my own file")
    assert cli.main(["ingest", str(DEMO_DATA_DIR), "--store", str(tmp_path / "mine"), "--quiet"]) == 2
    assert (tmp_path / "mine" / "notes.txt").read_text() == "my own file"


def test_ask_prints_cited_evidence(store, capsys):
    assert cli.main(["ask", "What is the maximum output current of the NX-2046?", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(NO_LLM_NOTICE)
    assert "[1] NX-2046 Precision Voltage Regulator" in out


def test_ask_json_for_scripts(store, capsys):
    code = cli.main(["ask", "NX-2046 maximum output current", "--store", str(store), "--json", "--top-k", "2"])
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["llm"] is None and payload["answer"].startswith(NO_LLM_NOTICE)
    assert len(payload["sources"]) == 2
    first = payload["sources"][0]
    assert first["document_id"] == "NX-2046"
    assert set(first) >= {"document_title", "section", "pages", "score", "text", "node_id"}
    assert first["pages"][0] >= 1


def test_missing_store_is_a_clear_message(tmp_path, capsys):
    assert cli.main(["ask", "x", "--store", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "no such store" in err and "hiqa ingest" in err


def test_folder_without_a_store_file_is_a_clear_message(tmp_path, capsys):
    assert cli.main(["ask", "x", "--store", str(tmp_path)]) == 2
    assert "not a HiQAPack store" in capsys.readouterr().err


def test_empty_folder_is_a_clear_message(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    assert cli.main(["ingest", str(tmp_path / "docs"), "--store", str(tmp_path / "s"), "--quiet"]) == 2
    assert "no readable" in capsys.readouterr().err
    assert cli.main(["ingest", str(tmp_path / "absent"), "--store", str(tmp_path / "s")]) == 2


def test_missing_api_key_and_bad_llm_spec(store, monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert cli.main(["ask", "x", "--store", str(store), "--llm", "openai:gpt-4o-mini"]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err
    assert cli.main(["ask", "x", "--store", str(store), "--llm", "gpt-4o-mini"]) == 2
    assert "PROVIDER:MODEL" in capsys.readouterr().err


def test_llm_spec_builds_openai_with_the_key_from_the_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    llm = cli.llm_from_spec("openai:gpt-4o-mini")
    assert llm.model == "gpt-4o-mini" and llm.api_key == "sk-test"
    assert cli.llm_from_spec(None) is None and cli.llm_from_spec("none") is None


def test_entry_point_in_a_new_process(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-m", "llama_index_hiqa.cli", "ask", "q", "--store", str(tmp_path / "none")],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    help_out = subprocess.run(
        [sys.executable, "-m", "llama_index_hiqa.cli", "--help"], capture_output=True, text=True, env=env
    )
    assert all(cmd in help_out.stdout for cmd in ("ingest", "ask", "eval", "demo", "migrate"))


def test_ask_with_an_llm_prints_the_answer_then_the_sources(store, monkeypatch, capsys):
    from llama_index_hiqa.testing import ScriptedLLM

    llm = ScriptedLLM(default_response="The NX-2046 delivers up to 1 A.")
    monkeypatch.setattr(cli, "llm_from_spec", lambda spec, **settings: llm if spec else None)
    assert cli.main(["ask", "NX-2046 maximum output current", "--store", str(store), "--llm", "openai:x"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("The NX-2046 delivers up to 1 A.")
    assert "Sources:" in out and "[1] NX-2046 Precision Voltage Regulator" in out
    assert NO_LLM_NOTICE not in out and llm.calls >= 1


def test_ingest_with_graph_and_segments_is_kept_by_the_store(tmp_path, capsys):
    store = tmp_path / "s"
    args = ["ingest", str(DEMO_DATA_DIR), "--store", str(store), "--graph", "--segments", "--quiet"]
    assert cli.main(args) == 0
    assert (current_snapshot(store) / pack_files.CHUNK_GRAPH_DIRNAME).is_dir()
    capsys.readouterr()
    assert cli.main(["ask", "NX-2041 maximum output current", "--store", str(store), "--json"]) == 0
    sources = json.loads(capsys.readouterr().out)["sources"]
    assert sources and sources[0]["document_id"] == "NX-2041"
    assert len(sources[0]["text"]) > 200  # a merged segment, not a single heading chunk


@pytest.mark.parametrize("value", ["0", "-1", "three"])
def test_top_k_must_be_a_positive_whole_number(store, value, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["ask", "anything", "--store", str(store), "--top-k", value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--top-k" in err and "Traceback" not in err
