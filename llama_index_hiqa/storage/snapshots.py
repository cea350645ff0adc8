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
folders are removed by the next writer. Two writers are serialised by an advisory lock
([`writer_lock`][llama_index_hiqa.storage.snapshots.writer_lock]), held by the command line from loading the store to switching
``CURRENT``; a library caller that loads, changes and saves without it is stopped by an
optimistic check (``CURRENT`` must still name the snapshot it loaded), never silently
dropping the other writer's documents.

This is the same write-then-rename discipline SQLite's rollback journal and LevelDB's
``CURRENT``/``MANIFEST`` files use; it needs no database and works on any local file system.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

from llama_index_hiqa.errors import PackStoreError, StoreConflictError

CURRENT_FILE = "CURRENT"
LOCK_FILE = ".lock"
SNAPSHOT_PREFIX = "snapshot-"
STAGING_PREFIX = ".staging-"
_SNAPSHOT_NAME = re.compile(r"^snapshot-(\d{6,})$")


def is_snapshot_name(name: str) -> bool:
    """Whether ``name`` is the name of a snapshot folder (``snapshot-000007``).

    Args:
        name: a folder name.

    Returns:
        ``True`` for a snapshot folder's name.
    """
    return bool(_SNAPSHOT_NAME.match(name))


def snapshot_name(staging: Path) -> str:
    """The name the staging folder of [`write_snapshot`][llama_index_hiqa.storage.snapshots.write_snapshot] will have once current.

    Args:
        staging: the staging folder.

    Returns:
        ``snapshot-<number>``, the staging folder's number kept.
    """
    number = staging.name[len(STAGING_PREFIX):].split("-")[0]
    return f"{SNAPSHOT_PREFIX}{number}"


def is_snapshot_store(root: Path) -> bool:
    """Whether ``root`` is a store folder written by [`write_snapshot`][llama_index_hiqa.storage.snapshots.write_snapshot].

    Args:
        root: the store folder.

    Returns:
        ``True`` when it holds a ``CURRENT`` pointer.
    """
    return (root / CURRENT_FILE).is_file()


def current_snapshot(root: Path) -> Path:
    """The folder ``CURRENT`` points at.

    Args:
        root: the store folder.

    Returns:
        The current snapshot's folder.

    Raises:
        PackStoreError: the pointer cannot be read, is malformed, or names a missing folder
            (says what is wrong).
    """
    pointer = root / CURRENT_FILE
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError:
        raise PackStoreError(
            pointer, "the store pointer is damaged (not text); re-run `hiqa ingest` with --rebuild"
        ) from None
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
    """Flush every file under ``folder`` and the folders themselves to stable storage.

    So a power cut after the pointer switch cannot leave the pointer naming unwritten data.

    Args:
        folder: the folder to flush.
    """
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


# Locks this process holds, by (store folder, thread): a writer that holds the lock from
# load to save (``writer_lock``) calls ``write_snapshot``, which must not wait for itself.
# flock locks belong to an open file, so two threads of one process still exclude each other.
_HELD: Dict[Tuple[str, int], int] = {}


def _lock_key(root: Path) -> Tuple[str, int]:
    return (os.path.realpath(root), threading.get_ident())


@contextlib.contextmanager
def writer_lock(
    root: Path, on_wait: Optional[Callable[[str], Any]] = None, legacy_marker: Optional[str] = None,
    shared_dirs: Tuple[str, ...] = (),
) -> Iterator[None]:
    """Hold the store's writer lock (``S/.lock``) for the whole block.

    E.g. from loading the store to switching ``CURRENT`` to the new snapshot, so that two
    writers (two ``hiqa ingest --add`` runs) are serialised and the second one loads what the
    first saved. Re-entrant within a thread. ``root`` is created when missing (after the same
    check [`write_snapshot`][llama_index_hiqa.storage.snapshots.write_snapshot] makes that it is not a folder of the user's).

    Args:
        root: the store folder.
        on_wait: told once, with a message, when another process holds the lock and this one
            waits for it; ``None`` waits silently.
        legacy_marker: a file that marks a store written before snapshots existed (accepted
            directly in ``root``); ``None`` accepts none.
        shared_dirs: folders beside the snapshots that every snapshot uses (content-addressed
            files); they do not make ``root`` a folder of the user's.

    Yields:
        Nothing; the lock is held until the block ends.

    Raises:
        PackStoreError: ``root`` is a file or a folder of the user's.
    """
    root = Path(root)
    key = _lock_key(root) if root.exists() else None
    if key is not None and _HELD.get(key):
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    check_store_folder(root, legacy_marker, shared_dirs)
    root.mkdir(parents=True, exist_ok=True)
    key = _lock_key(root)
    with open(root / LOCK_FILE, "a+") as handle:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no advisory lock; the CURRENT check still applies
            fcntl = None  # type: ignore[assignment]
        if fcntl is not None:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_wait is not None:
                    on_wait(f"{root}: another process is writing this store; waiting for it to finish")
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        _HELD[key] = 1
        try:
            yield
        finally:
            _HELD.pop(key, None)
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def check_store_folder(root: Path, legacy_marker: Optional[str] = None, shared_dirs: Tuple[str, ...] = ()) -> None:
    """Refuse a ``root`` that is not missing, empty, or a store folder.

    A typo in ``--store`` must never write into (or later clean up) a folder of the user's.

    Args:
        root: the store folder.
        legacy_marker: a file that marks a store written before snapshots existed (accepted
            directly in ``root``); ``None`` accepts none.
        shared_dirs: folders beside the snapshots that every snapshot uses (content-addressed
            files); they do not make ``root`` a folder of the user's.

    Raises:
        PackStoreError: ``root`` is a file, cannot be listed, or holds files that are not
            the store's.
    """
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise PackStoreError(root, "is a file, not a store folder; choose a new or empty folder for the store")
    if not root.is_dir() or is_snapshot_store(root):
        return
    if legacy_marker and (root / legacy_marker).is_file():
        return
    allowed = (LOCK_FILE, *shared_dirs)
    try:
        children = list(root.iterdir())
    except OSError as exc:
        raise PackStoreError(root, f"cannot be listed ({exc.strerror or exc}); choose another folder for the store") from exc
    if any(
        not (c.name in allowed or c.name.startswith(STAGING_PREFIX) or _SNAPSHOT_NAME.match(c.name))
        for c in children
    ):
        raise PackStoreError(
            root, "is a folder with other files and not a HiQAPack store; choose an empty or new folder"
        )


@contextlib.contextmanager
def write_snapshot(
    root: Path, legacy_marker: Optional[str] = None, shared_dirs: Tuple[str, ...] = (),
    expected_current: Optional[str] = None,
) -> Iterator[Path]:
    """Stage a new snapshot of the store at ``root``; it becomes current when the block ends.

    The block writes every file of the snapshot into the folder it is given. On an exception
    the staging folder is removed and ``CURRENT`` is untouched. ``root`` is created when
    missing; a folder that holds other files and no ``CURRENT`` is refused, so a typo in
    ``--store`` never writes into (or later cleans up) a folder of the user's. A store written
    before snapshots existed is accepted; its old files stay in place and are no longer read
    once ``CURRENT`` exists.

    Args:
        root: the store folder.
        legacy_marker: a file that marks a store written before snapshots existed (accepted
            directly in ``root``); ``None`` accepts none.
        shared_dirs: folders beside the snapshots that every snapshot uses (content-addressed
            files); they do not make ``root`` a folder of the user's.
        expected_current: the snapshot the writer loaded. When ``CURRENT`` names another one by
            the time the lock is taken, another writer saved in between and saving now would
            drop its documents (an optimistic check, for library callers that load and save
            without holding [`writer_lock`][llama_index_hiqa.storage.snapshots.writer_lock] throughout); ``None`` skips the check.

    Yields:
        The staging folder to write the snapshot's files into.

    Raises:
        StoreConflictError: ``CURRENT`` no longer names ``expected_current``.
        PackStoreError: ``root`` is a file or a folder of the user's.
    """
    root = Path(root)
    check_store_folder(root, legacy_marker, shared_dirs)
    with writer_lock(root, legacy_marker=legacy_marker, shared_dirs=shared_dirs):
        current = _pointer_target(root)
        if expected_current is not None and current != expected_current:
            raise StoreConflictError(root, expected_current, current)
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
    except (OSError, UnicodeDecodeError):  # a damaged pointer is replaced by the next writer
        return None
    return name if _SNAPSHOT_NAME.match(name) else None


def _remove_stale(root: Path, keep: Set[str]) -> None:
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
    """The folder to load.

    Args:
        root: the store folder.
        legacy_marker: the file that marks a store written before snapshots existed;
            ``None`` accepts only snapshot stores.

    Returns:
        The current snapshot, or ``root`` itself for a store written before snapshots
            existed (it holds ``legacy_marker`` directly).

    Raises:
        PackStoreError: ``root`` is not a store, or its ``CURRENT`` pointer is broken.
    """
    root = Path(root)
    if is_snapshot_store(root):
        return current_snapshot(root)
    if legacy_marker and (root / legacy_marker).is_file():
        return root
    raise PackStoreError(
        root, f"not a HiQAPack store (no {CURRENT_FILE}); build one with `hiqa ingest DIR --store {root}`"
    )
