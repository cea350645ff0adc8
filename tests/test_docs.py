"""The documentation site builds with ``mkdocs build --strict`` (a broken link, a page left out
of the navigation or a docstring griffe cannot read fails it), and every public name of the
package has its API entry on some page, so a user finds any component in one click."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import llama_index_hiqa
from tests.test_readme import documentation_pages

ROOT = Path(__file__).resolve().parents[1]
API_ENTRY = re.compile(r"^:::\s+(\S+)", re.M)


def docs_pages_in_nav() -> list:
    """The Markdown pages of mkdocs.yml's navigation, in reading order."""
    return documentation_pages()[1:]  # [0] is README.md


def test_site_builds_strictly(tmp_path):
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr[-4000:]
    reader_page = (tmp_path / "site" / "components" / "reader" / "index.html").read_text(encoding="utf-8")
    assert "load_data" in reader_page  # the API section was rendered from the docstrings


def test_every_public_name_has_an_api_entry():
    entries = set()
    for page in docs_pages_in_nav():
        entries.update(API_ENTRY.findall(page.read_text(encoding="utf-8")))
    missing = [
        name for name, module in llama_index_hiqa._EXPORTS.items()
        if f"{module}.{name}" not in entries and module not in entries
    ]
    assert not missing, f"public names without an API entry in docs/: {missing}"


def test_every_nav_page_exists():
    assert all(page.exists() for page in docs_pages_in_nav()), [p for p in docs_pages_in_nav() if not p.exists()]
