"""`hiqa demo` from an installed wheel: the demo data ships as package data.

Builds the wheel of this checkout (no build isolation: offline), installs it without
dependencies into a fresh venv that sees the test environment's packages through a path
file (the dependencies, but not this checkout's editable install), and runs the installed
`hiqa` from outside the checkout.
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


def test_hiqa_demo_runs_from_an_installed_wheel(tmp_path):
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
