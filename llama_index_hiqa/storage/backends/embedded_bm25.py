"""The embedded store's BM25 route: a base and segments on disk, brought up to date when opened.

A write commits nodes, not BM25 statistics. When the route is opened, the nodes added since the
saved index (the store rows past the last one it holds: rows are never reused) are tokenized
into a new segment, saved beside the base, and the nodes removed since are masked; the scores
are those of one index over the live nodes
([`SegmentedBM25Route`][llama_index_hiqa.retrievers.bm25_segments.SegmentedBM25Route]). Opening therefore
costs time in proportion to what was added, not to the collection; a process that holds the route
it opened before a write extends that one (its node ids included) rather than reading the base again. [`merge_when_due`][llama_index_hiqa.storage.backends.embedded_bm25.merge_when_due]
folds the segments into a new base when they have grown (at ``persist()``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import List, Optional

import numpy as np

from llama_index_hiqa.retrievers.bm25_route import BM25Route, corpus_tokenizer
from llama_index_hiqa.retrievers.bm25_segments import Postings, SegmentedBM25Route
from llama_index_hiqa.storage.embedded import BM25_PREFIX, SEGMENT_PREFIX, EmbeddedStore

logger = logging.getLogger(__name__)

# When persist() merges: more segments than this, or more segment and removed nodes than this
# fraction of the base. Below both, a question pays one pass over a few small segments.
MAX_SEGMENTS = 16
MERGE_FRACTION = 0.1
_CHUNK = 2000  # nodes read from the docstore at a time


def open_bm25_route(store: EmbeddedStore, language: str = "en", held: Optional[BM25Route] = None) -> BM25Route:
    """The BM25 route over every live node of ``store``: the saved base and segments, plus a
    segment of the nodes added since (tokenized now and saved), with removed nodes masked. A
    store without a base (or with one written before term frequencies were kept, and stale)
    gets a full build, saved.

    Args:
        store: the embedded store.
        language: the stemmer's and stop words' language.
        held: the route this process opened last on ``store`` (or ``None``): while it is what
            the newest saved base and its segments hold, it is extended by the nodes added since,
            and nothing is read from disk again.

    Returns:
        The route.
    """
    base = store.bm25_base_folder()
    if base is not None and isinstance(held, SegmentedBM25Route) and _holds_saved(store, base, held):
        return _up_to_date(store, base, held, [], language)
    if base is not None and not Postings.saved_in(base):
        if base == store.bm25_folder():  # written by an earlier version, and current
            return BM25Route.load(base, mmap=True)
        base = None
    if base is None:
        return _build_base(store, language)
    route = SegmentedBM25Route.load_base(base, mmap=True)
    segments = [Postings.load(folder, mmap=True) for folder in store.bm25_segment_folders(base)]
    return _up_to_date(store, base, route, segments, language)


def _up_to_date(
    store: EmbeddedStore, base: Path, route: SegmentedBM25Route, segments: List[Postings], language: str,
) -> SegmentedBM25Route:
    """``route`` plus ``segments`` plus a segment of the nodes added since (saved beside
    ``base``), with every removed node masked."""
    rows_end = _rows_end([*route.parts, *segments])
    added = store.rows_since(rows_end)
    if added:
        segment = _postings(store, added, language)
        segments.append(segment)
        try:
            store.save_bm25_segment(segment, base, _rows_end([segment]))
        except OSError as exc:  # a read-only store still answers; the next writer saves it
            logger.warning("a BM25 segment of %s was not saved (%s); it is tokenized again at the next load", store.root, exc)
    extended = route.with_segments(segments, store.freed_rows(rows_end))
    extended.saved_in = base
    return extended


def _holds_saved(store: EmbeddedStore, base: Path, route: SegmentedBM25Route) -> bool:
    """Whether ``route`` is what ``base`` and the segments saved beside it hold (another
    process's merge makes a new base; its segment, a folder ``route`` does not hold)."""
    saved = [int(folder.name[len(SEGMENT_PREFIX):]) for folder in store.bm25_segment_folders(base)]
    return route.saved_in == base and saved == [_rows_end([part]) for part in route.parts[1:]]


def merge_when_due(store: EmbeddedStore, route: Optional[BM25Route]) -> Optional[BM25Route]:
    """Fold ``route``'s segments and removed nodes into a new saved base when they have grown
    past `MAX_SEGMENTS` segments or `MERGE_FRACTION` of the base.

    Args:
        store: the embedded store.
        route: the store's open BM25 route.

    Returns:
        The merged route, or ``None`` when no merge was due.
    """
    if not isinstance(route, SegmentedBM25Route) or route.exact_from_base:
        return None
    held = route.segment_nodes + route.dead_count
    if len(route.parts) - 1 <= MAX_SEGMENTS and held <= MERGE_FRACTION * len(route.parts[0]):
        return None
    merged, generation = route.merged(), store.generation
    store.save_bm25(merged, generation)
    merged.saved_in = store.root / f"{BM25_PREFIX}{generation}"
    return merged


def _rows_end(parts: List[Postings]) -> int:
    """One past the last store row the parts hold (rows grow with every added node)."""
    return max((int(p.rows[-1]) + 1 for p in parts if len(p)), default=0)


def _chunks(store: EmbeddedStore, added: List[tuple], language: str):
    tokenize = corpus_tokenizer(language)
    for start in range(0, len(added), _CHUNK):
        rows, ids = zip(*added[start:start + _CHUNK])
        nodes = store.docstore.get_nodes(list(ids))
        yield list(ids), np.asarray(rows, dtype=np.int64), tokenize(nodes)


def _postings(store: EmbeddedStore, added: List[tuple], language: str) -> Postings:
    return Postings.from_tokens(_chunks(store, added, language))


def _build_base(store: EmbeddedStore, language: str) -> SegmentedBM25Route:
    generation = store.generation
    route = SegmentedBM25Route.from_postings(_postings(store, store.rows_since(0), language))
    try:
        store.save_bm25(route, generation)
        route.saved_in = store.root / f"{BM25_PREFIX}{generation}"
    except OSError as exc:  # a read-only store still answers; the next writer saves it
        logger.warning("the BM25 index of %s was not saved (%s); it is rebuilt at the next load", store.root, exc)
    return route


__all__ = ["MAX_SEGMENTS", "MERGE_FRACTION", "merge_when_due", "open_bm25_route"]
