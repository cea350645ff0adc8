"""Which files a folder or list load reads, and the document id each one gets.

The rules, stated for users on [`PDFLayoutReader`][llama_index_hiqa.readers.pdf.PDFLayoutReader]:

* A folder is walked in sorted path order, its subfolders too when ``recursive``; only files
  with a supported suffix count.
* A symlink (to a file, or to a folder when ``recursive``) whose target lies outside the folder
  is not followed unless ``follow_symlinks``; it is reported as skipped, as is a broken symlink
  with a supported suffix.
* Symlinks inside the folder are followed. A file reachable by several paths (a symlink, a hard
  link, a linked subfolder) is read once, under a path without symlinks when there is one, else
  under the first in sorted order; its other paths are dropped without a report, so a file
  that fails is reported once however many paths lead to it.
* Document id: the file stem when no other file of the load has the same stem; else the path
  relative to the folder (for a list: to the deepest folder holding every file), with its
  suffix, ``/``-separated (``x.md``, ``a/x.pdf``). The ids depend on the files listed, not on
  which of them read successfully, so they do not change when a broken file is fixed.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, FrozenSet, Hashable, List, Sequence, Tuple, Union

from llama_index_hiqa.errors import DocumentReadError, SkippedDocumentError


@dataclass(frozen=True)
class PlannedFile:
    path: Path
    document_id: str


@dataclass
class LoadPlan:
    """The files to read, in order, and the paths skipped before reading anything."""

    files: List[PlannedFile] = field(default_factory=list)
    skipped: List[DocumentReadError] = field(default_factory=list)


def plan_folder(folder: Path, suffixes: Sequence[str], recursive: bool, follow_symlinks: bool) -> LoadPlan:
    """The files of a folder to read, in sorted path order, with their document ids.

    The rules (symlinks, files reachable by several paths, ids) are in the module docstring.

    Args:
        folder: the folder.
        suffixes: the supported suffixes, lower case with the dot (``".pdf"``).
        recursive: whether subfolders are walked.
        follow_symlinks: whether a symlink whose target lies outside the folder is followed.

    Returns:
        A [`LoadPlan`][llama_index_hiqa.readers._collection.LoadPlan]: the files with their ids, and the paths skipped (an unlistable
            folder, a broken or outside symlink) as ``SkippedDocumentError``.
    """
    root = folder.resolve()
    found: List[Tuple[Path, bool]] = []  # (path, reached through a symlink)
    skipped: List[DocumentReadError] = []

    def walk(directory: Path, via_link: bool, ancestors: FrozenSet[Hashable]) -> None:
        try:
            entries = sorted(directory.iterdir())
        except OSError as exc:
            skipped.append(SkippedDocumentError(directory, f"cannot list the folder ({exc.strerror or exc})"))
            return
        for entry in entries:
            supported = entry.suffix.lower() in suffixes
            link = entry.is_symlink()
            if link:
                try:
                    target = entry.resolve(strict=True)
                except (OSError, RuntimeError):  # a missing target, or a loop of symlinks
                    if supported:
                        skipped.append(SkippedDocumentError(entry, "broken symlink (its target does not exist)"))
                    continue
                if not follow_symlinks and not _is_within(target, root):
                    if (recursive and target.is_dir()) or (supported and target.is_file()):
                        skipped.append(
                            SkippedDocumentError(
                                entry,
                                f"symlink to {target}, outside the folder: not followed "
                                "(follow_symlinks=True reads it)",
                            )
                        )
                    continue
            if entry.is_dir():
                key = _file_key(entry)
                if recursive and key not in ancestors:  # a link up the tree would never end
                    walk(entry, via_link or link, ancestors | {key})
            elif supported and entry.is_file():
                found.append((entry, via_link or link))

    walk(folder, False, frozenset({_file_key(folder)}))
    return LoadPlan(_with_ids(_read_once(found), folder), skipped)


def plan_paths(paths: Sequence[Union[str, Path]]) -> LoadPlan:
    """A list of files: read as given (a path listed twice is read once), ids as for a folder.

    Args:
        paths: the files, in the caller's order.

    Returns:
        A [`LoadPlan`][llama_index_hiqa.readers._collection.LoadPlan] keeping the caller's order; ids relative to the deepest folder
            holding every file when stems collide.
    """
    unique = list(dict.fromkeys(Path(p) for p in paths))
    files = _read_once([(p, p.is_symlink()) for p in unique])
    if not files:
        return LoadPlan()
    try:
        base = Path(os.path.commonpath([str(p.absolute().parent) for p in files]))
    except ValueError:  # different drives
        base = Path()
    order = {p: i for i, p in enumerate(unique)}
    files.sort(key=order.__getitem__)  # a list keeps the caller's order
    return LoadPlan(_with_ids(files, base))


def _read_once(found: List[Tuple[Path, bool]]) -> List[Path]:
    """One path per file (device + inode), sorted: a path without symlinks when there is one."""
    groups: Dict[Hashable, List[Tuple[Path, bool]]] = {}
    for path, via_link in found:
        groups.setdefault(_file_key(path) or ("path", str(path)), []).append((path, via_link))
    return sorted(min(group, key=lambda item: (item[1], item[0]))[0] for group in groups.values())


def _with_ids(files: List[Path], base: Path) -> List[PlannedFile]:
    stems = Counter(p.stem for p in files)
    planned = []
    for path in files:
        document_id = path.stem
        if stems[path.stem] > 1:
            try:
                document_id = path.absolute().relative_to(base.absolute()).as_posix()
            except ValueError:
                document_id = path.absolute().as_posix()
        planned.append(PlannedFile(path, document_id))
    return planned


def _file_key(path: Path) -> Hashable:
    """What identifies the file a path leads to (symlinks followed), or None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if st.st_ino else ("path", str(path.resolve()))


def _is_within(target: Path, root: Path) -> bool:
    return target == root or root in target.parents
