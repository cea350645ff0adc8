"""Every notebook in examples/ runs top to bottom, offline, on the defaults.

Executed with nbclient in a kernel that runs this interpreter (a kernelspec written to a
temporary JUPYTER_PATH: the venv may not have a ``python3`` kernelspec). Cells that need an
API key check for it themselves and print that they skip.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
KERNEL = "hiqa-test-python"


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One embedding cache for all notebooks: they embed the same demo chunks."""
    return tmp_path_factory.mktemp("hiqa-cache")


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory):
    root = tmp_path_factory.mktemp("jupyter")
    spec_dir = root / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "hiqa test kernel",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(root) + (os.pathsep + old if old else "")
    # The kernel imports the package of this worktree, as pytest does.
    os.environ["PYTHONPATH"] = str(EXAMPLES.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")
    yield KERNEL
    if old is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = old


def test_there_are_five_notebooks():
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb",
        "02_add_to_existing_app.ipynb",
        "03_multi_hop_chunk_graph.ipynb",
        "04_segment_integration.ipynb",
        "05_evaluation_ablation.ipynb",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, kernel_name, shared_cache, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # API-key cells must skip, not fail
    monkeypatch.setenv("HIQA_CACHE_DIR", str(shared_cache))
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, kernel_name=kernel_name, timeout=300, resources={"metadata": {"path": str(EXAMPLES)}}
    )
    client.execute()  # raises CellExecutionError with the failing cell's traceback
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert text.strip()  # every notebook shows results
