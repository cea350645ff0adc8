"""The embedding cache is disposable: a damaged file is moved aside and rebuilt, a read-only
one is read without writing, one that cannot be opened is bypassed — each with a warning and
the same vectors, never an error."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from llama_index_hiqa.models.embedding_cache import CachedEmbedding
from tests.pack_helpers import HashEmbedding


def _cache(path: Path) -> CachedEmbedding:
    return CachedEmbedding(HashEmbedding(), cache_path=str(path))


def _filled(path: Path) -> None:
    cache = _cache(path)
    cache.get_text_embedding_batch(["alpha", "bravo"])
    cache._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    cache._conn.close()


@contextlib.contextmanager
def read_only_folder(folder: Path):
    """``folder`` read-only for this process: a read-only tmpfs mount when running as root (root
    ignores permission bits), else chmod 555. Skips when neither can be arranged."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    staged = folder.with_name(folder.name + ".staged")
    shutil.copytree(folder, staged)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True).returncode:
        shutil.rmtree(staged)
        pytest.skip("running as root without permission to mount a tmpfs: cannot make a folder read-only")
    try:
        for child in staged.iterdir():
            shutil.copy2(child, folder / child.name)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=False)
        shutil.rmtree(staged, ignore_errors=True)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty-header"])
def test_a_damaged_cache_is_moved_aside_and_rebuilt(tmp_path, damage, caplog):
    path = tmp_path / "embeddings.sqlite"
    _filled(path)
    data = path.read_bytes()
    path.write_bytes(
        {"garbage": os.urandom(4096), "truncated": data[: len(data) // 3], "empty-header": b"\0" * 100 + data[100:]}[damage]
    )
    with caplog.at_level(logging.WARNING, logger="llama_index_hiqa.models.embedding_cache"):
        cache = _cache(path)
        vectors = cache.get_text_embedding_batch(["alpha", "charlie"])
    assert vectors == HashEmbedding().get_text_embedding_batch(["alpha", "charlie"])
    if damage != "truncated" or "damaged" in caplog.text:  # a truncated file may still open (then it is simply read)
        assert "moved to" in caplog.text and (tmp_path / "embeddings.sqlite.damaged-1").is_file()
        assert cache.cached_count() == 2  # the new cache holds what was computed since


def test_a_read_only_cache_is_read_and_not_written(tmp_path, caplog):
    folder = tmp_path / "cache"
    folder.mkdir()
    path = folder / "embeddings.sqlite"
    _filled(path)
    with read_only_folder(folder), caplog.at_level(logging.WARNING, logger="llama_index_hiqa.models.embedding_cache"):
        cache = _cache(path)
        calls_before = cache.inner.calls
        vectors = cache.get_text_embedding_batch(["alpha", "delta"])
        computed = cache.inner.calls - calls_before
        if cache._conn is not None:
            cache._conn.close()  # (so the test's mount can be removed)
        assert computed == 1  # alpha was read from the cache, delta computed and not saved
    assert vectors == HashEmbedding().get_text_embedding_batch(["alpha", "delta"])
    assert "not writable" in caplog.text or "cannot be used" in caplog.text


def test_a_cache_that_cannot_be_created_is_bypassed(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    with caplog.at_level(logging.WARNING, logger="llama_index_hiqa.models.embedding_cache"):
        cache = _cache(blocker / "embeddings.sqlite")
        assert cache.get_text_embedding("alpha") == HashEmbedding().get_text_embedding("alpha")
    assert "cannot be used" in caplog.text and cache.cached_count() == 0


def test_a_cache_failing_in_use_is_bypassed(tmp_path, caplog):
    cache = _cache(tmp_path / "embeddings.sqlite")
    cache._conn.close()  # any sqlite error from now on
    with caplog.at_level(logging.WARNING, logger="llama_index_hiqa.models.embedding_cache"):
        assert cache.get_text_embedding("alpha") == HashEmbedding().get_text_embedding("alpha")
        assert cache.get_text_embedding("bravo") == HashEmbedding().get_text_embedding("bravo")
    assert caplog.text.count("bypassed") == 1
    with pytest.raises(sqlite3.Error):
        sqlite3.connect(":memory:").execute("not sql")  # (sanity: sqlite errors are what is caught)
