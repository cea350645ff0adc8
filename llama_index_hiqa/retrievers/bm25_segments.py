"""BM25 over a base index and small segments added since, scored as one index over them all.

bm25s ("BM25S: Orders of magnitude faster lexical search via eager sparse scoring", Lù, §2)
stores every (term, node) score precomputed, so its index has no incremental update: each
score depends on the collection's node count N, average length and the term's document
frequency, which every added node changes. Here each part (the base and every segment) keeps
its term frequencies and node lengths as well ([`Postings`][llama_index_hiqa.retrievers.bm25_segments.Postings]), and a question is scored
with the statistics of every live node of every part, so the scores are those of one index
built over the live nodes in the same order (to float32 rounding): the score of a term in a
node is bm25s's Lucene variant (the default of LlamaIndex's ``BM25Retriever``),
``idf(t) * tf / (tf + k1 (1 - b + b |d| / avgdl))`` with ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))``.

While there are no segments and no removed nodes, the base's precomputed bm25s scores answer
(a gather over the question terms' postings); otherwise a term's scores are computed from the
term frequencies of its postings the first time a question holds it, and kept for the next
questions while they fit a budget. [`SegmentedBM25Route.merged`][llama_index_hiqa.retrievers.bm25_segments.SegmentedBM25Route.merged] folds the parts
into one base without tokenizing anything again.
"""

from __future__ import annotations

import json
from array import array
from collections import OrderedDict
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from llama_index_hiqa.retrievers.bm25_route import BM25Route, _IdCorpus

# bm25s's defaults, those of BM25Retriever's index.
K1, B = 1.5, 0.75
METHOD = "lucene"

_POSTINGS_FILES = ("tf.npy", "lengths.npy", "rows.npy")
# Postings whose scores a route keeps between questions (8 bytes each: about 64 MB).
TERM_CACHE_POSTINGS = 8_000_000


def idf(df: np.ndarray, n: int) -> np.ndarray:
    """bm25s's Lucene idf of document frequencies ``df`` among ``n`` nodes, in float32.

    Args:
        df: document frequencies.
        n: the number of nodes.

    Returns:
        ``ln(1 + (n - df + 0.5) / (df + 0.5))`` as float32.
    """
    df = np.asarray(df, dtype=np.float64)
    return np.log(1.0 + (n - df + 0.5) / (df + 0.5)).astype(np.float32)


def term_scores(term_idf: np.ndarray, tf: np.ndarray, lengths: np.ndarray, avgdl: float) -> np.ndarray:
    """bm25s's per-posting score, computed as bm25s computes it (float64, stored as float32).

    Args:
        term_idf: the float32 idf of each posting's term.
        tf: each posting's term frequency.
        lengths: each posting's node length (tokens).
        avgdl: the collection's average node length.

    Returns:
        float32 scores, one a posting.
    """
    tf = np.asarray(tf, dtype=np.float32)
    tfc = tf / (K1 * ((1 - B) + B * np.asarray(lengths, dtype=np.float64) / avgdl) + tf)
    return (term_idf * tfc).astype(np.float32)


class Postings:
    """One part's term frequencies, term-major: the postings of term ``t`` are positions
    ``indices[indptr[t]:indptr[t + 1]]`` (ascending) with counts ``tf[...]``; ``lengths``,
    ``rows`` (the store's row of each node, or its position) and ``node_ids`` by position."""

    def __init__(
        self, vocab: Dict[str, int], indptr: np.ndarray, indices: np.ndarray, tf: np.ndarray,
        lengths: np.ndarray, rows: np.ndarray, node_ids: List[str],
    ) -> None:
        self.vocab = vocab
        self.indptr = indptr
        self.indices = indices
        self.tf = tf
        self.lengths = lengths
        self.rows = rows
        self.node_ids = node_ids

    def __len__(self) -> int:
        return len(self.node_ids)

    @classmethod
    def from_tokens(
        cls, chunks: Iterable[Tuple[Sequence[str], Sequence[int], Sequence[Sequence[str]]]],
    ) -> "Postings":
        """The postings of tokenized nodes given a chunk at a time.

        Args:
            chunks: ``(node ids, rows, token lists)`` a chunk at a time, in position order.

        Returns:
            The postings (terms numbered in order of first appearance).
        """
        vocab: Dict[str, int] = {}
        terms, positions, counts, lengths = [], [], [], array("i")
        node_ids: List[str] = []
        rows = array("q")
        for ids, chunk_rows, tokens in chunks:
            offset = len(node_ids)
            node_ids += list(ids)
            rows.extend(int(r) for r in chunk_rows)
            encoded = [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in tokens]
            lengths.extend(len(doc) for doc in encoded)
            flat = np.fromiter((t for doc in encoded for t in doc), dtype=np.int64)
            if not len(flat):
                continue
            doc = np.repeat(np.arange(len(encoded), dtype=np.int64), [len(d) for d in encoded])
            keys, tf = np.unique(flat * len(encoded) + doc, return_counts=True)
            terms.append((keys // len(encoded)).astype(np.int32))
            positions.append((keys % len(encoded) + offset).astype(np.int32))
            counts.append(tf.astype(np.int32))
        return cls._sorted(
            vocab, _concat(terms, np.int32), _concat(positions, np.int32), _concat(counts, np.int32),
            np.frombuffer(lengths, dtype=np.int32).copy(), np.frombuffer(rows, dtype=np.int64).copy(), node_ids,
        )

    @classmethod
    def _sorted(
        cls, vocab: Dict[str, int], terms: np.ndarray, positions: np.ndarray, tf: np.ndarray,
        lengths: np.ndarray, rows: np.ndarray, node_ids: List[str],
    ) -> "Postings":
        """The postings from ``(term, position, tf)`` triples ordered by position within a term."""
        order = np.argsort(terms, kind="stable")
        indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(terms, minlength=len(vocab)), out=indptr[1:])
        return cls(vocab, indptr, positions[order], tf[order], lengths, rows, node_ids)

    def term_ids(self) -> np.ndarray:
        """The term of every posting."""
        return np.repeat(np.arange(len(self.indptr) - 1, dtype=np.int32), np.diff(self.indptr))

    def bm25s_scores(self, df: np.ndarray, n: int, avgdl: float) -> np.ndarray:
        """Every posting's score under the given statistics (bm25s's ``data`` array).

        Args:
            df: document frequency of each term.
            n: the number of nodes.
            avgdl: the average node length.

        Returns:
            float32 scores in posting order.
        """
        term_idf = idf(df, n)
        out = np.empty(len(self.tf), dtype=np.float32)
        step = 1 << 22  # a few million postings at a time: float64 temporaries stay small
        terms = self.term_ids()
        for start in range(0, len(out), step):
            end = start + step
            out[start:end] = term_scores(term_idf[terms[start:end]], self.tf[start:end], self.lengths[self.indices[start:end]], avgdl)
        return out

    # -- files ---------------------------------------------------------------------------
    def save(self, path: Path, with_csc: bool = True) -> None:
        """Write the postings to the folder ``path`` (``with_csc=False``: the vocabulary and
        the term-major arrays are bm25s's own files there already).

        Args:
            path: the folder (created when missing).
            with_csc: write the vocabulary, ``indptr`` and ``indices`` as well.
        """
        path.mkdir(parents=True, exist_ok=True)
        for name, values in zip(_POSTINGS_FILES, (narrow_counts(self.tf), self.lengths, self.rows)):
            np.save(path / name, np.asarray(values))
        (path / "node_ids.json").write_text(json.dumps(self.node_ids), encoding="utf-8")
        if with_csc:
            np.save(path / "indptr.npy", np.asarray(self.indptr))
            np.save(path / "indices.npy", np.asarray(self.indices))
            (path / "vocab.json").write_text(json.dumps(self.vocab, ensure_ascii=False), encoding="utf-8")

    @staticmethod
    def saved_in(path: Path) -> bool:
        """Whether ``path`` holds postings (an index written before they existed does not).

        Args:
            path: an index folder.

        Returns:
            ``True`` when the postings' files are there.
        """
        return all((path / name).is_file() for name in _POSTINGS_FILES)

    @classmethod
    def load(cls, path: Path, mmap: bool = False, csc: Optional[Tuple[Dict[str, int], np.ndarray, np.ndarray]] = None) -> "Postings":
        """What [`save`][llama_index_hiqa.retrievers.bm25_segments.Postings.save] wrote.

        Args:
            path: the folder.
            mmap: map the arrays from disk.
            csc: ``(vocab, indptr, indices)`` already read (bm25s's own), else read from ``path``.

        Returns:
            The postings.
        """
        mode = "r" if mmap else None
        tf, lengths, rows = (np.load(path / name, mmap_mode=mode) for name in _POSTINGS_FILES)
        if csc is None:
            vocab = json.loads((path / "vocab.json").read_text(encoding="utf-8"))
            csc = (vocab, np.load(path / "indptr.npy", mmap_mode=mode), np.load(path / "indices.npy", mmap_mode=mode))
        node_ids = json.loads((path / "node_ids.json").read_text(encoding="utf-8"))
        return cls(csc[0], csc[1], csc[2], tf, lengths, rows, node_ids)


def narrow_counts(tf: np.ndarray) -> np.ndarray:
    """Term frequencies as 16-bit counts when every one fits (a term seldom occurs 65,535
    times in one node), else as they are: half the bytes of the postings' largest file, and
    the same scores (``term_scores`` reads them as float32 either way).

    Args:
        tf: the postings' term frequencies.

    Returns:
        ``tf`` as ``uint16``, or unchanged.
    """
    tf = np.asarray(tf)
    if tf.dtype != np.uint16 and (not tf.size or (int(tf.min()) >= 0 and int(tf.max()) <= np.iinfo(np.uint16).max)):
        return tf.astype(np.uint16)
    return tf


def _concat(parts: List[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


class SegmentedBM25Route(BM25Route):
    """The BM25 route over a base (bm25s, precomputed scores) and segments added since, with
    nodes removed since masked (see the module docstring). ``node_ids`` lists the base's nodes,
    then each segment's; a removed node keeps its place and scores 0.

    Args:
        base: the base's bm25s route (its retriever tokenizes the questions).
        parts: the base's postings, then each segment's.
        dead: one flag a position of ``node_ids``: the node was removed (``None``: none was).
        node_ids: the parts' node ids in order, when the caller holds them already.
    """

    def __init__(
        self, base: BM25Route, parts: List[Postings], dead: Optional[np.ndarray] = None,
        node_ids: Optional[List[str]] = None,
    ) -> None:
        if node_ids is None:
            node_ids = parts[0].node_ids if len(parts) == 1 else [i for p in parts for i in p.node_ids]
        super().__init__(base.retriever, node_ids, base.tokenizer)
        self.base = base
        self.parts = parts
        self.dead = dead if dead is not None and dead.any() else None
        self.saved_in: Optional[Path] = None  # the folder the base is saved in, when known
        self._offsets = np.cumsum([0] + [len(p) for p in parts])
        self._stats: Optional[Tuple[int, np.ndarray]] = None
        self._term_cache: "OrderedDict[str, List[Tuple[np.ndarray, np.ndarray]]]" = OrderedDict()
        self._cached_postings = 0

    @property
    def exact_from_base(self) -> bool:
        """Whether the base's precomputed scores are the scores (no segment, nothing removed)."""
        return len(self.parts) == 1 and self.dead is None

    @property
    def segment_nodes(self) -> int:
        """Nodes held outside the base (in segments), removed ones included."""
        return int(self._offsets[-1] - self._offsets[1])

    @property
    def dead_count(self) -> int:
        """Removed nodes still held."""
        return 0 if self.dead is None else int(self.dead.sum())

    @classmethod
    def from_postings(cls, postings: Postings) -> "SegmentedBM25Route":
        """A base over ``postings``: bm25s's score arrays computed from them.

        Args:
            postings: the base's postings.

        Returns:
            The route, one part.
        """
        import bm25s
        from llama_index.retrievers.bm25 import BM25Retriever

        n = len(postings)
        avgdl = float(postings.lengths.sum(dtype=np.int64)) / n if n else 1.0
        bm25 = bm25s.BM25(k1=K1, b=B, method=METHOD)
        bm25.scores = {
            "data": postings.bm25s_scores(np.diff(postings.indptr), n, avgdl),
            "indices": postings.indices, "indptr": postings.indptr, "num_docs": n,
        }
        bm25.vocab_dict = postings.vocab
        bm25.nonoccurrence_array = None
        bm25.corpus = _IdCorpus(postings.node_ids)
        base = BM25Route(BM25Retriever(existing_bm25=bm25, similarity_top_k=1), postings.node_ids, None)
        return cls(base, [postings])

    def with_segments(self, segments: Sequence[Postings], dead_rows: Iterable[int] = ()) -> "SegmentedBM25Route":
        """This route plus ``segments``, with the nodes of ``dead_rows`` (store rows) masked.

        Args:
            segments: the postings of nodes added since (empty ones are left out).
            dead_rows: the rows of every node removed so far.

        Returns:
            The new route (this one is unchanged; ``self`` when nothing changes). Its node ids
                are this route's extended by the segments' (one copy, no pass over them).
        """
        added = [s for s in segments if len(s)]
        parts = self.parts + added
        dead = _dead_mask(parts, dead_rows)
        if not added and dead is None and self.dead is None:
            return self
        node_ids = self.node_ids + [i for s in added for i in s.node_ids] if added else self.node_ids
        route = SegmentedBM25Route(self.base, parts, dead, node_ids)
        route.saved_in = self.saved_in
        if self._rows is not None:  # the document focus's id -> position map, extended
            route._rows = dict(self._rows)
            route._rows.update((node_id, position) for position, node_id in enumerate(node_ids[len(self.node_ids):], len(self.node_ids)))
        return route

    # -- scores --------------------------------------------------------------------------
    def _live_stats(self) -> Tuple[int, np.ndarray]:
        """``(live node count, K of every position)``, K = ``k1 (1 - b + b |d| / avgdl)``."""
        if self._stats is None:
            lengths = np.concatenate([np.asarray(p.lengths, dtype=np.float64) for p in self.parts])
            live = lengths if self.dead is None else lengths[~self.dead]
            n = len(live)
            avgdl = float(live.sum()) / n if n else 1.0
            self._stats = (n, K1 * ((1 - B) + B * lengths / avgdl))
        return self._stats

    def _term_scores(self, token: str) -> List[Tuple[np.ndarray, np.ndarray]]:
        """``(positions, float32 scores)`` of ``token``'s live postings, a pair a part; kept
        while they fit `TERM_CACHE_POSTINGS` (the frequent terms, whose long postings
        cost the most, come back in most questions)."""
        cached = self._term_cache.get(token)
        if cached is not None:
            self._term_cache.move_to_end(token)
            return cached
        n, k = self._live_stats()
        spans = []
        for part, offset in zip(self.parts, self._offsets):
            t = part.vocab.get(token)
            if t is None:
                continue
            positions = np.asarray(part.indices[part.indptr[t]:part.indptr[t + 1]], dtype=np.int32) + np.int32(offset)
            tf = part.tf[part.indptr[t]:part.indptr[t + 1]]
            if self.dead is not None:
                keep = ~self.dead[positions]
                positions, tf = positions[keep], tf[keep]
            spans.append((positions, np.asarray(tf, dtype=np.float32)))
        df = sum(len(positions) for positions, _ in spans)
        out = []
        if df:
            term_idf = idf(np.array([df]), n)[0]
            # term_scores' arithmetic, with K of each position computed once for the route
            out = [(positions, (term_idf * (tf / (k[positions] + tf))).astype(np.float32)) for positions, tf in spans]
        self._term_cache[token] = out
        self._cached_postings += df
        while self._cached_postings > TERM_CACHE_POSTINGS and len(self._term_cache) > 1:
            _, dropped = self._term_cache.popitem(last=False)
            self._cached_postings -= sum(len(positions) for positions, _ in dropped)
        return out

    def all_scores(self, query: str) -> np.ndarray:
        """BM25 score of every node (in ``node_ids`` order) with every live node's statistics.

        Args:
            query: the question text.

        Returns:
            A read-only float32 array (0 for removed nodes).
        """
        if self.exact_from_base:
            return self.base.all_scores(query)
        last = self._last_scores
        if last is not None and last[0] == query:
            return last[1]
        scores = np.zeros(len(self.node_ids), dtype=np.float32)
        # bm25s's order: the question's tokens as given (repeats count), unknown ones left out.
        for token in self._query_tokens(query):
            for positions, term in self._term_scores(token):
                scores[positions] += term
        scores.setflags(write=False)
        self._last_scores = (query, scores)
        return scores

    def merged(self) -> "SegmentedBM25Route":
        """One base over the live nodes of every part, in ``node_ids`` order (nothing is
        tokenized again).

        Returns:
            The route, one part.
        """
        vocab: Dict[str, int] = {}
        terms, positions, counts, lengths, rows, node_ids = [], [], [], [], [], []
        new_position = np.arange(len(self.node_ids), dtype=np.int64)
        if self.dead is not None:
            new_position = np.cumsum(~self.dead) - 1
        for part, offset in zip(self.parts, self._offsets):
            part_terms = np.array([vocab.setdefault(t, len(vocab)) for t in _by_id(part.vocab)], dtype=np.int32)
            position = np.asarray(part.indices, dtype=np.int64) + offset
            keep = slice(None) if self.dead is None else ~self.dead[position]
            terms.append(part_terms[part.term_ids()][keep])
            positions.append(new_position[position[keep]].astype(np.int32))
            counts.append(np.asarray(part.tf)[keep])
            if self.dead is None:
                lengths.append(np.asarray(part.lengths))
                rows.append(np.asarray(part.rows))
                node_ids += part.node_ids
            else:
                live = ~self.dead[offset:offset + len(part)]
                lengths.append(np.asarray(part.lengths)[live])
                rows.append(np.asarray(part.rows)[live])
                node_ids += [i for i, alive in zip(part.node_ids, live) if alive]
        postings = Postings._sorted(
            vocab, _concat(terms, np.int32), _concat(positions, np.int32), _concat(counts, np.int32),
            _concat(lengths, np.int32), _concat(rows, np.int64), node_ids,
        )
        return SegmentedBM25Route.from_postings(postings)

    # -- files ---------------------------------------------------------------------------
    def persist(self, path: Path) -> None:
        """Write the base (bm25s's arrays and its postings) to the folder ``path``; the
        segments are written apart ([`Postings.save`][llama_index_hiqa.retrievers.bm25_segments.Postings.save]).

        Args:
            path: the folder (created when missing).
        """
        self.base.persist(path)
        self.parts[0].save(path, with_csc=False)

    @classmethod
    def load_base(cls, path: Path, mmap: bool = False) -> "SegmentedBM25Route":
        """The base [`persist`][llama_index_hiqa.retrievers.bm25_segments.SegmentedBM25Route.persist] wrote.

        Args:
            path: the folder.
            mmap: map the arrays from disk.

        Returns:
            The route, one part.
        """
        base = BM25Route.load(path, mmap=mmap)
        bm25 = base.retriever.bm25
        csc = (bm25.vocab_dict, bm25.scores["indptr"], bm25.scores["indices"])
        postings = Postings.load(path, mmap=mmap, csc=csc)
        postings.node_ids = base.node_ids  # one list, read once
        route = cls(base, [postings])
        route.saved_in = path
        return route


def _by_id(vocab: Dict[str, int]) -> List[str]:
    terms = [""] * len(vocab)
    for term, t in vocab.items():
        terms[t] = term
    return terms


def _dead_mask(parts: Sequence[Postings], dead_rows: Iterable[int]) -> Optional[np.ndarray]:
    dead_rows = np.fromiter(dead_rows, dtype=np.int64)
    if not len(dead_rows):
        return None
    rows = np.concatenate([np.asarray(p.rows, dtype=np.int64) for p in parts])
    return np.isin(rows, dead_rows)


__all__ = ["Postings", "SegmentedBM25Route", "idf", "term_scores"]
