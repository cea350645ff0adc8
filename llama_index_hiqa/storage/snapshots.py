"""Crash-safe store folders: a store is a series of complete snapshots and a pointer to one.

A store folder looks like this::

    S/
      CURRENT              -> "snapshot-000007" (the one snapshot readers load)
      snapshot-000006/     the previous snapshot, kept for a reader that read CURRENT just
                           before the switch and is still opening its files
      snapshot-000007/     hiqa_pack.json, docstore.json, vectors.npz, multi_route/, ...
      .lock                held while a writer stages a snapshot

A writer stages every file of the next snapshot in ``S/.staging-<n>-<pid>/``, flushes them to
disk, renames the folder to ``snapshot-<n>`` and only then replaces ``CURRENT`` with
``os.replace`` (atomic on POSIX and Windows). A process killed at any instant therefore leaves
``CURRENT`` naming a complete snapshot, the previous one or the new one; half-written staging
folders are removed by the next writer. Two writers are serialised by an advisory lock.

This is the same write-then-rename discipline SQLite's rollback journal and LevelDB's
``CURRENT``/``MANIFEST`` files use; it needs no database and works on any local file system.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

from llama_index_hiqa.errors import PackStoreError

CURRENT_FILE = "CURRENT"
LOCK_FILE = ".lock"
SNAPSHOT_PREFIX = "snapshot-"
STAGING_PREFIX = ".staging-"
_SNAPSHOT_NAME = re.compile(r"^snapshot-(\d{6,})$")


def is_snapshot_store(root: Path) -> bool:
    """Whether ``root`` is a store folder written by :class:`SnapshotFolder`."""
    return (root / CURRENT_FILE).is_file()


def current_snapshot(root: Path) -> Path:
    """The folder ``CURRENT`` points at; :class:`PackStoreError` naming what is wrong otherwise."""
    pointer = root / CURRENT_FILE
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise PackStoreError(pointer, f"cannot read the store pointer ({exc})") from exc
    if not _SNAPSHOT_NAME.match(name):
        raise PackStoreError(
            pointer, f"the store pointer is damaged (holds {name[:40]!r}); re-run `hiqa ingest` with --rebuild"
        )
    folder = root / name
    if not folder.is_dir():
        raise PackStoreError(pointer, f"names {name}, which is missing; re-run `hiqa ingest` with --rebuild")
    return folder


def _snapshot_numbers(root: Path) -> List[int]:
    numbers = []
    for child in root.iterdir() if root.is_dir() else []:
        match = _SNAPSHOT_NAME.match(child.name)
        if match:
            numbers.append(int(match.group(1)))
        elif child.name.startswith(STAGING_PREFIX):
            # a staging folder of a crashed writer still reserves its number
            parts = child.name[len(STAGING_PREFIX):].split("-")
            if parts and parts[0].isdigit():
                numbers.append(int(parts[0]))
    return sorted(numbers)


def fsync_tree(folder: Path) -> None:
    """Flush every file under ``folder`` and the folders themselves to stable storage, so a
    power cut after the pointer switch cannot leave the pointer naming unwritten data."""
    for dirpath, _dirnames, filenames in os.walk(folder):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(folder: Path) -> None:
    if os.name != "posix":  # directories cannot be opened for fsync on Windows
        return
    fd = os.open(str(folder), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _exclusive_lock(root: Path) -> Iterator[None]:
    lock_path = root / LOCK_FILE
    with open(lock_path, "a+") as handle:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no advisory lock, single writer assumed
            yield
            return
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def write_snapshot(
    root: Path, legacy_marker: Optional[str] = None, shared_dirs: Tuple[str, ...] = ()
) -> Iterator[Path]:
    """Stage a new snapshot of the store at ``root``; it becomes current when the block ends.

    The block writes every file of the snapshot into the folder it is given. On an exception
    the staging folder is removed and ``CURRENT`` is untouched. ``root`` is created when
    missing; a folder that holds other files and no ``CURRENT`` is refused, so a typo in
    ``--store`` never writes into (or later cleans up) a folder of the user's. A store written
    before snapshots existed (``legacy_marker`` directly in ``root``) is accepted; its old
    files stay in place and are no longer read once ``CURRENT`` exists. ``shared_dirs`` are
    folders beside the snapshots that every snapshot uses (content-addressed files).
    """
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise PackStoreError(root, "is a file, not a store folder")
    root.mkdir(parents=True, exist_ok=True)
    legacy = bool(legacy_marker) and (root / str(legacy_marker)).is_file()
    if not is_snapshot_store(root) and not legacy and any(
        not (
            c.name in (LOCK_FILE, *shared_dirs)
            or c.name.startswith(STAGING_PREFIX)
            or _SNAPSHOT_NAME.match(c.name)
        )
        for c in root.iterdir()
    ):
        raise PackStoreError(
            root, "is a folder with other files and not a HiQAPack store; choose an empty or new folder"
        )
    with _exclusive_lock(root):
        numbers = _snapshot_numbers(root)
        number = (numbers[-1] + 1) if numbers else 1
        staging = root / f"{STAGING_PREFIX}{number:06d}-{os.getpid()}"
        staging.mkdir()
        try:
            yield staging
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        fsync_tree(staging)
        previous = _pointer_target(root)
        name = f"{SNAPSHOT_PREFIX}{number:06d}"
        os.replace(staging, root / name)
        _fsync_dir(root)
        pointer_tmp = root / f"{CURRENT_FILE}.tmp-{os.getpid()}"
        with open(pointer_tmp, "w", encoding="utf-8") as handle:
            handle.write(name + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(pointer_tmp, root / CURRENT_FILE)
        _fsync_dir(root)
        _remove_stale(root, keep={name, previous})


def _pointer_target(root: Path) -> Optional[str]:
    try:
        name = (root / CURRENT_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return name if _SNAPSHOT_NAME.match(name) else None


def _remove_stale(root: Path, keep: set) -> None:
    """Every snapshot but the new one and the one it replaced (a reader may still be loading
    that one), and the staging folders and pointer temp files of crashed writers (called
    under the lock, after the switch)."""
    doomed = [c.name for c in root.iterdir() if _SNAPSHOT_NAME.match(c.name) and c.name not in keep]
    doomed += [c.name for c in root.iterdir() if c.name.startswith(STAGING_PREFIX)]
    doomed += [c.name for c in root.iterdir() if c.name.startswith(f"{CURRENT_FILE}.tmp-")]
    for name in doomed:
        target = root / name
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                target.unlink()


def snapshot_for_reading(root: Path, legacy_marker: Optional[str] = None) -> Path:
    """The folder to load: the current snapshot, or ``root`` itself for a store written
    before snapshots existed (it holds ``legacy_marker`` directly)."""
    root = Path(root)
    if is_snapshot_store(root):
        return current_snapshot(root)
    if legacy_marker and (root / legacy_marker).is_file():
        return root
    raise PackStoreError(
        root, f"not a HiQAPack store (no {CURRENT_FILE}); build one with `hiqa ingest DIR --store {root}`"
    )
