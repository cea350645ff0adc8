"""`hiqa demo` and the README from an installed wheel: the demo data ships as package data.

Builds the wheel of this checkout (no build isolation: offline), installs it without
dependencies into a fresh venv that sees the test environment's packages through a path
file (the dependencies, but not this checkout's editable install), and runs the installed
`hiqa`, the README's quickstart verbatim and every README snippet from outside the checkout.
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
def installed(tmp_path_factory):
    """A venv with this checkout's wheel installed (its python)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    built = _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                 "-w", str(tmp_path / "dist"), str(ROOT), cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("llama_index_hiqa-*.whl"))

    venv = tmp_path / "venv"
    made = _run(sys.executable, "-m", "venv", "--without-pip", str(venv), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    site = _run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path)
    # A plain path line: the test environment's packages are importable, but its .pth files
    # (this checkout's editable install) are not run, so the package comes from the wheel.
    Path(site.stdout.strip(), "test_env_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = _run(str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--force-reinstall",
                     str(wheel), cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-2000:]
    return venv


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
