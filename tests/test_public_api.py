import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import llama_index_hiqa


def test_every_public_name_imports_from_the_top_level():
    for name in llama_index_hiqa.__all__:
        assert getattr(llama_index_hiqa, name) is not None, name


def test_import_is_light():
    code = "import sys, llama_index_hiqa; print('torch' in sys.modules, 'fitz' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError):
        importlib.import_module("llama_index_hiqa").NoSuchThing


# -- what a type checker sees ------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]


def type_checking_imports() -> dict:
    """``{name: module}`` of the ``if TYPE_CHECKING:`` block of ``llama_index_hiqa/__init__.py``."""
    tree = ast.parse((ROOT / "llama_index_hiqa" / "__init__.py").read_text(encoding="utf-8"))
    blocks = [
        node for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1, "one `if TYPE_CHECKING:` block at the top level of __init__.py"
    imported: dict = {}
    for statement in blocks[0].body:
        assert isinstance(statement, ast.ImportFrom), ast.dump(statement)
        for alias in statement.names:
            assert alias.asname == alias.name, f"`{alias.name} as {alias.name}` re-exports it"
            assert alias.name not in imported, f"{alias.name} imported twice"
            imported[alias.name] = statement.module
    return imported


def type_checking_block(exports: dict) -> str:
    """The block for ``exports``, one ``from module import ...`` per module in first-use order."""
    by_module: dict = {}
    for name, module in exports.items():
        by_module.setdefault(module, []).append(name)
    lines = []
    for module, names in by_module.items():
        single = f"    from {module} import {names[0]} as {names[0]}"
        if len(names) == 1 and len(single) <= 100:
            lines.append(single)
            continue
        lines += [f"    from {module} import ("] + [f"        {n} as {n}," for n in names] + ["    )"]
    return "\n".join(lines)


def test_type_checking_imports_are_the_lazy_exports():
    """_EXPORTS is the one list; the TYPE_CHECKING block must name the same classes."""
    assert type_checking_imports() == llama_index_hiqa._EXPORTS, (
        "llama_index_hiqa/__init__.py: the TYPE_CHECKING block and _EXPORTS disagree; "
        "paste this block under `if TYPE_CHECKING:`\n" + type_checking_block(llama_index_hiqa._EXPORTS)
    )


# Third-party packages are skipped (their names are Any to the check) so that a cold run takes
# seconds, not the minutes llama_index.core and torch take; the package is followed like an
# installed one, its own errors silenced as mypy silences a library's.
MYPY_CONFIG = """\
[mypy]
follow_imports = skip
no_implicit_reexport = True
warn_unused_configs = False
[mypy-llama_index_hiqa.*]
follow_imports = silent
"""

USER_APP = """\
from llama_index_hiqa import ChunkGraphRetriever, HiQAPack, HiQAPackSettings, MultiRouteRetriever

pack: HiQAPack = HiQAPack.from_directory("manuals")
reveal_type(pack)
reveal_type(MultiRouteRetriever.from_index)
reveal_type(HiQAPackSettings().multi_route)
reveal_type(ChunkGraphRetriever)
"""


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory) -> Path:
    """One cache for the module's mypy runs: the second reuses the package's analysis."""
    return tmp_path_factory.mktemp("mypy_cache")


def run_mypy(tmp_path: Path, cache: Path, source: str) -> str:
    (tmp_path / "mypy.ini").write_text(MYPY_CONFIG, encoding="utf-8")
    (tmp_path / "user_app.py").write_text(source, encoding="utf-8")
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir",
         str(cache), "--no-error-summary", "user_app.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "MYPYPATH": str(ROOT)},
    )
    assert "mypy: can't" not in checked.stderr and "No module named mypy" not in checked.stderr, checked.stderr
    return checked.stdout


def test_a_users_type_error_is_reported(tmp_path, mypy_cache):
    out = run_mypy(
        tmp_path, mypy_cache,
        USER_APP + 'pack.run(3)\nfrom llama_index_hiqa import HiQAPak\n',
    )
    revealed = {line.split(":")[1]: line.split("Revealed type is ")[1] for line in out.splitlines()
                if "Revealed type is" in line}
    assert revealed["4"] == '"llama_index_hiqa.pack.hiqa_pack.HiQAPack"', out
    assert revealed["5"].endswith('-> llama_index_hiqa.retrievers.multi_route.MultiRouteRetriever"'), out
    assert revealed["6"] == '"llama_index_hiqa.pack.config.PackRouteSettings"', out
    assert revealed["7"].endswith('-> llama_index_hiqa.retrievers.chunk_graph.ChunkGraphRetriever"'), out
    assert 'user_app.py:8: error: Argument 1 to "run"' in out and 'expected "str"' in out, out
    assert 'user_app.py:9: error: Module "llama_index_hiqa" has no attribute "HiQAPak"' in out, out


def test_a_correct_user_script_passes(tmp_path, mypy_cache):
    out = run_mypy(tmp_path, mypy_cache, USER_APP.replace("reveal_type", "print") + 'print(pack.run("q"))\n')
    assert out.strip() == "", out
