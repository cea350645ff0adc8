"""The README's and the documentation's Python snippets run, so a renamed setting cannot leave
them wrong.

Every ```python block of README.md and then of the docs pages (in the site's navigation
order) runs, in order, in one namespace (later blocks use what earlier ones built, as a
reader would), inside a folder that holds the paths the README names
(`examples/data`, `datasheets/`, `filings/`, `manuals/`: copies of the demo datasheets). The
embedding is the package's hashing embedding (the README's results do not depend on the
model) and `llm` a scripted offline LLM; the PostgreSQL URLs point at the tests' own
throw-away server, and a block with a top-level ``await`` runs as in a notebook. A block that needs what a test cannot have (a paid
LLM API, minutes of model building) is marked in its page by an HTML comment right before
it, `<!-- not-tested: why -->`; only those are skipped, and they must stay few.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import shutil
from pathlib import Path

import pytest
from llama_index.core import Document, Settings
from llama_index.core import settings as llama_settings
from llama_index.core.llms import MockLLM
from llama_index.core.llms.utils import resolve_llm as real_resolve

from llama_index_hiqa.pack import hiqa_pack as pack_module
from llama_index_hiqa.demo import DEMO_DATA_DIR
from llama_index_hiqa.testing import HashingEmbedding

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(r"(?:<!--\s*not-tested:\s*(?P<why>[^>]*?)\s*-->\s*\n)?```python\n(?P<code>.*?)```", re.S)
MAX_SKIPPED = 3


def documentation_pages():
    """README.md, then the Markdown pages of mkdocs.yml's navigation in reading order."""
    import yaml

    pages = [README]

    def walk(entry):
        if isinstance(entry, str):
            pages.append(ROOT / "docs" / entry)
        elif isinstance(entry, (list, tuple)):
            for item in entry:
                walk(item)
        elif isinstance(entry, dict):
            for value in entry.values():
                walk(value)

    walk(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    return pages


def readme_blocks():
    """``(where, code, why-skipped)`` of every ```python block, README first."""
    blocks = []
    for page in documentation_pages():
        text = page.read_text(encoding="utf-8")
        where = page.relative_to(ROOT).as_posix()
        blocks += [
            (f"{where}:{text.count(chr(10), 0, m.start('code')) + 1}", m.group("code"), m.group("why"))
            for m in BLOCK.finditer(text)
        ]
    return blocks


def test_readme_blocks_are_found_and_few_are_skipped():
    blocks = readme_blocks()
    skipped = [(line, why) for line, _code, why in blocks if why is not None]
    assert len(blocks) >= 10
    assert len(skipped) <= MAX_SKIPPED, skipped
    assert all(why.strip() for _line, why in skipped)  # each skip says why


# The README's database URLs name a server the reader has; here a throw-away PostgreSQL
# (the session's pgserver instance, or HIQA_TEST_POSTGRES_URL) stands in for it.
README_URLS = re.compile(r"postgresql://[^\s\"']+")


def test_the_package_under_test_is_the_expected_one():
    """When run from an installed wheel (tests/test_wheel.py), the snippets must import the
    wheel's package, not a checkout."""
    import os

    import llama_index_hiqa

    expected = os.environ.get("HIQA_EXPECT_PACKAGE_UNDER")
    if expected:
        assert Path(llama_index_hiqa.__file__).resolve().is_relative_to(Path(expected).resolve())


def test_readme_snippets_run(tmp_path, monkeypatch, server):
    for folder in ("examples/data", "datasheets", "filings", "manuals"):
        shutil.copytree(DEMO_DATA_DIR, tmp_path / folder, ignore=shutil.ignore_patterns("*.jsonl"))
    (tmp_path / "datasheets" / "NX-2040.md").write_text(
        "# NX-2040 Datasheet\n\n## 4 Specifications\n\nThe output current is 2 A.\n", encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(Settings, "_embed_model", HashingEmbedding())
    monkeypatch.setattr(pack_module, "default_embed_model", lambda m=None, backend=None: m or HashingEmbedding())
    # Where LlamaIndex would resolve its default LLM (OpenAI, a paid API), a reader has their
    # own; here LlamaIndex's offline MockLLM stands in.
    monkeypatch.setattr(llama_settings, "resolve_llm", lambda llm=None, **kw: MockLLM() if llm == "default" else real_resolve(llm))
    namespace = {
        "llm": None,  # no LLM: the components take their documented offline paths
        "embed_model": HashingEmbedding(),
        "new_docs": [Document(text="# NX-3000 Datasheet\n\nA new part.", id_="NX-3000",
                              metadata={"document_id": "NX-3000"})],
    }
    database = server.database()
    ran = 0
    for line, code, why in readme_blocks():
        if why is not None:
            continue
        code = README_URLS.sub(database, code)
        try:
            # Top-level ``await`` as in a notebook: the compiled block is then a coroutine.
            compiled = compile(code, line, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(compiled, namespace)
            if inspect.iscoroutine(result):
                asyncio.run(result)
        except Exception as exc:  # noqa: BLE001 - report which snippet broke, with its error
            pytest.fail(f"snippet at {line} failed: {type(exc).__name__}: {exc}")
        ran += 1
        # The MockLLM stands in only where a snippet asked LlamaIndex for its default; the
        # pack treats a Settings.llm as the user's choice, so it must not see that stand-in.
        monkeypatch.setattr(Settings, "_llm", None)
    assert ran >= 10


def test_readme_links_work_off_the_repository():
    """PyPI shows the README without the repository around it: every link is absolute, and a
    link into the repository (pyproject's ``Repository`` URL) names a file of this checkout."""
    import tomllib

    urls = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]
    files = urls["Repository"].rstrip("/") + "/blob/main/"
    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text(encoding="utf-8"))
    assert links
    relative = [link for link in links if not link.startswith(("https://", "http://"))]
    assert not relative, f"relative links break on PyPI: {relative}"
    missing = [
        link for link in links
        if link.startswith(files) and not (ROOT / link[len(files):].split("#")[0]).exists()
    ]
    assert not missing, missing
