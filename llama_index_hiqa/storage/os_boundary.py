"""Where the operating system's errors become the pack's: one line naming the path and the fix.

A read-only store, a full disk, a file where a folder is expected or a path under ``/proc``
raise ``OSError`` deep inside LlamaIndex, NumPy or SQLite, often after a whole folder was
ingested. [`os_errors`][llama_index_hiqa.storage.os_boundary.os_errors] turns such an error into a
[`PathAccessError`][llama_index_hiqa.errors.PathAccessError] that says what to do, and
[`check_store_writable`][llama_index_hiqa.storage.os_boundary.check_store_writable] finds the commonest cases before any document is read
(the same "check, then do the expensive work" order a database uses for its data directory).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterator, Optional

from llama_index_hiqa.errors import HiQAError, PathAccessError, describe_os_error

# Free space a new snapshot needs besides the size of the current one (the docstore, vectors
# and BM25 files of a few new documents); a margin, not an estimate of the final size.
MIN_FREE_BYTES = 16 * 1024 * 1024



def as_path_error(exc: OSError, path: Any = None) -> PathAccessError:
    """``exc`` as a [`PathAccessError`][llama_index_hiqa.errors.PathAccessError] naming the file the system named (else ``path``).

    Args:
        exc: the system's error.
        path: the path to name when the error names none; ``None`` names ``"?"``.

    Returns:
        The typed error (not raised).
    """
    target = exc.filename if exc.filename is not None else path
    return PathAccessError(target if target is not None else "?", describe_os_error(exc))


@contextlib.contextmanager
def os_errors(path: Any) -> Iterator[None]:
    """Run the block; an ``OSError`` leaves it as a [`PathAccessError`][llama_index_hiqa.errors.PathAccessError].

    The error names ``path`` (the store, what the user chose) and the file the system refused
    inside it. The pack's own errors pass unchanged.

    Args:
        path: the store, named in the error.

    Yields:
        Nothing.

    Raises:
        PathAccessError: the block raised an ``OSError``.
    """
    try:
        yield
    except HiQAError:  # PackStoreError is a FileNotFoundError too: already the pack's own
        raise
    except OSError as exc:
        inside = f"writing {exc.filename} failed: " if exc.filename is not None else ""
        raise PathAccessError(path, inside + describe_os_error(exc)) from exc


def _tree_bytes(folder: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(dirpath, name))
    return total


def check_store_writable(root: Path, current: Optional[Path] = None) -> None:
    """Fail now, before any document is read, when a folder store at ``root`` cannot be written.

    A file is created and removed in it (the only test that catches read-only mounts,
    ``/proc`` and missing rights alike, also for root), and the disk must have room for a copy
    of the ``current`` snapshot plus [`MIN_FREE_BYTES`][llama_index_hiqa.storage.os_boundary.MIN_FREE_BYTES].

    Args:
        root: the store folder (when missing, the nearest existing folder above it is tested).
        current: the current snapshot's folder; ``None`` when the store is new.

    Raises:
        PathAccessError: the folder is a file, cannot be written, or the disk lacks room
            (says how much).
    """
    root = Path(root)
    existing = root
    while not existing.exists():  # the nearest folder that exists: the store is created in it
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise PathAccessError(existing, "is a file, not a folder; choose another path for the store")
    probe = existing / f".hiqa-write-test-{uuid.uuid4().hex[:8]}"
    try:
        with open(probe, "wb") as handle:
            handle.write(b"x")
    except OSError as exc:
        reason = (
            "files cannot be created there (a virtual file system such as /proc?); choose another path"
            if exc.errno == errno.ENOENT else describe_os_error(exc)
        )
        raise PathAccessError(existing, f"cannot be written ({reason})") from exc
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    need = MIN_FREE_BYTES + (_tree_bytes(current) if current is not None and current.is_dir() else 0)
    try:
        free = shutil.disk_usage(existing).free
    except OSError:  # some pseudo file systems do not report their size: the write test decides
        return
    if free < need:
        raise PathAccessError(
            existing,
            f"only {free / 2**20:.1f} MB free, a new snapshot of the store needs about "
            f"{need / 2**20:.1f} MB; free some space or choose a path on another disk",
        )
