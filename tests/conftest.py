"""Shared fixtures: everything offline."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """No test writes to the user's ~/.cache."""
    monkeypatch.setenv("HIQA_CACHE_DIR", str(tmp_path / "hiqa-cache"))
