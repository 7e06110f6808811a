"""A column's word lattices: what a word's law is made of.

Word ``w``'s lattice has nodes ``0 .. n_w`` (0 its start, ``n_w`` its end, every edge from a lower node to a higher
one) and edges ``(begin, end, piece, score)``, stored word after word, sorted by end node, then begin node: the
pieces are row ``w`` of the forms split (ids of the samples' dictionary); begin, end (uint16) and score (float32)
are in the side file ``lattice.<column>.bin`` (:data:`LATTICE_FORMAT`). A path's weight is ``scale`` times the sum
of its edges' scores, and a word's segmentation is drawn with probability ``exp(weight) / Z``
(:mod:`arrowmt.segments._law`):

* a unigram model (``scale = alpha``, scores the pieces' log probabilities, every piece of the model found in the
  word): sentencepiece's own law for ``encode(enable_sampling=True, alpha=alpha, nbest_size=-1)``, which draws
  each word of a sentence independently when no piece crosses a word start;
* a BPE model's pool of drawn forms (``scale = 1``, ``log(count)`` on each form's first edge): the pool's law;
* a word left as the corpus has it (a special symbol, ``<unk>``): one path.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrowmt._errors import FormatError
from arrowmt.files import CheckedArray, SideFile, SideFormat, canonical_json, open_side_file
from arrowmt.reading import exclusive_cumsum
from arrowmt.splits import Split

LATTICE_NAME = "lattice.{column}.bin"  # in the forms folder
REBUILD = "rebuild them with arrowmt.add_sampled_segmentations(corpus, spm_model, overwrite=True)"
LATTICE_FORMAT = SideFormat(  # fields: words, edges, the SHA-256 of the segmentation record; body: score, begin, end
    "lattice", b"ARROWMT-LATTICE\x00", 1, "QQ32s", REBUILD, cache=False
)
ONE = np.uint64(1 << 32)  # a share of 1 in a draw's units (2**-32)


def record_digest(record: dict[str, object]) -> bytes:
    """What a lattice file records of the segmentation record (seed, alpha, model, ...) it was written with."""
    return hashlib.sha256(canonical_json(record)).digest()


@dataclass
class Lattice:
    """One column's lattices: the forms split's rows (edges' pieces) and the side file (scores and nodes)."""

    forms: Split
    column: str
    side: SideFile
    words: int

    @classmethod
    def opened(cls, forms: Split, column: str, words: int, record: dict[str, object]) -> Lattice:
        """The lattice file of ``column`` beside ``forms``, its header checked against the forms split and the
        segmentation ``record`` (FormatError naming the file)."""
        path = forms.path / LATTICE_NAME.format(column=column)
        edges = int(forms.lengths(column, np.arange(words, dtype=np.int64)).sum()) if words <= len(forms) else -1
        digest = record_digest(record)

        def check(side: SideFile) -> None:
            found = tuple(side.values)
            if found[:2] != (words, edges) or found[2] != digest:
                raise FormatError(
                    f"{path}: expected {words} words and {edges} edges (the forms split) written with the recorded "
                    f"segmentation, got {found[:2]} (segmentation record "
                    f"{'equal' if found[2] == digest else 'differs: edited or made apart'}); {REBUILD}"
                )

        side = open_side_file(path, LATTICE_FORMAT, lambda _, fields: 8 * int(fields[1]), check)
        return cls(forms, column, side, words)

    @property
    def edges(self) -> int:
        return int(self.side.values[1])

    def _array(self, dtype: str, offset: int) -> CheckedArray:
        return self.side.array(dtype, self.edges, offset)

    def tables(self) -> LatticeTables:
        """Every edge's piece, begin and end node (global ids) and score; each word's start and end node (read
        anew at each call: a process keeps only the law it draws from)."""
        spans = self.forms.column_spans(self.column, np.arange(self.words, dtype=np.int64)).compact()
        pieces = spans.words.astype(np.int32)
        first = np.append(spans.starts, pieces.shape[0]).astype(np.int64)
        n = self.edges
        score = self._array("<f4", 0).slice(0, n)
        begin = self._array("<u2", 4 * n).slice(0, n)
        end = self._array("<u2", 6 * n).slice(0, n)
        return LatticeTables.of(pieces, first, begin, end, score, self.side.path)

    def __getstate__(self) -> dict[str, object]:
        raise TypeError("Lattice is reopened by its SampledSplit, not pickled")


@dataclass(frozen=True)
class LatticeTables:
    piece: np.ndarray  # int32 per edge
    begin: np.ndarray  # global node of each edge's begin (int32, or int64 past 2**31 nodes)
    end: np.ndarray  # global node of each edge's end (non-decreasing)
    local_end: np.ndarray  # each edge's end node within its word (uint16)
    score: np.ndarray  # float32 per edge
    start: np.ndarray  # each word's start node
    final: np.ndarray  # each word's end node
    nodes: int

    @classmethod
    def of(cls, piece: np.ndarray, first: np.ndarray, begin: np.ndarray, end: np.ndarray, score: np.ndarray,
           path: Path) -> LatticeTables:  # fmt: skip
        per_word = np.diff(first)
        if (per_word < 1).any():
            raise FormatError(f"{path}: word {int(np.flatnonzero(per_word < 1)[0])} has no edge; {REBUILD}")
        word = np.repeat(np.arange(per_word.shape[0]), per_word)
        top = np.maximum.reduceat(end, first[:-1]).astype(np.int64)  # each word's end node
        sorted_within = np.ones(end.shape[0], dtype=bool)
        sorted_within[1:] = (end[1:] >= end[:-1]) | (word[1:] != word[:-1])
        if (begin >= end).any() or not sorted_within.all():
            raise FormatError(f"{path}: expected edges from a lower node to a higher one, by end node; {REBUILD}")
        infinite = np.flatnonzero(~np.isfinite(score))
        if infinite.size:
            raise FormatError(f"{path}: edge {int(infinite[0])}: expected a finite score, got "
                              f"{float(score[infinite[0]])}; {REBUILD}")  # fmt: skip
        offsets = exclusive_cumsum(top + 1)
        nodes = int(offsets[-1] + top[-1] + 1) if top.size else 0
        node = np.int32 if nodes < 2**31 else np.int64
        base = offsets.astype(node)[word]
        tables = cls(piece, base + begin.astype(node), base + end.astype(node), end, score,
                     offsets.astype(node), (offsets + top).astype(node), nodes)  # fmt: skip
        stranded = np.flatnonzero(tables.longest < 1)  # a draw walks back from the end node to the start
        if stranded.size:
            raise FormatError(f"{path}: word {int(stranded[0])}: no path of edges from its start to its end; {REBUILD}")
        return tables

    @functools.cached_property
    def by_end(self) -> list[np.ndarray]:
        """The edges ending at local node 1, 2, ... (each group increasing: their end nodes non-decreasing)."""
        order = np.argsort(self.local_end, kind="stable")
        ends = self.local_end[order]
        cuts = np.searchsorted(ends, np.arange(1, int(ends.max(initial=0)) + 2))
        return [order[cuts[t] : cuts[t + 1]] for t in range(cuts.shape[0] - 1) if cuts[t + 1] > cuts[t]]

    def fold(self, values: np.ndarray, combine: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
             ) -> np.ndarray:  # fmt: skip
        """``values`` (one per node, set at the words' start nodes) filled node by node in topological order: a
        node takes ``combine(at_begin, edges, heads)``, its incoming ``edges``' begin values reduced at ``heads``
        (where each end node's run of edges starts)."""
        for group in self.by_end:
            targets = self.end[group]
            heads = np.flatnonzero(np.r_[True, targets[1:] != targets[:-1]])
            values[targets[heads]] = combine(values[self.begin[group]], group, heads)
        return values

    def forward(self, weight: np.ndarray) -> np.ndarray:
        """log of the summed ``exp(path weight)`` of the paths from its word's start to each node."""

        def log_sum(at_begin: np.ndarray, group: np.ndarray, heads: np.ndarray) -> np.ndarray:
            incoming = at_begin + weight[group]
            top = np.maximum.reduceat(incoming, heads)
            shift = np.where(np.isfinite(top), top, 0.0)
            with np.errstate(divide="ignore"):
                total = np.log(np.add.reduceat(np.exp(incoming - np.repeat(shift, np.diff(np.r_[heads, len(group)]))),
                                               heads))  # fmt: skip
            return np.where(np.isfinite(top), shift + total, -np.inf)

        return self.fold(self._at_starts(-np.inf, 0.0), log_sum)

    @functools.cached_property
    def longest(self) -> np.ndarray:
        """The most edges on a path from each word's start to its end (int64 per word; -1: no path)."""

        def most(at_begin: np.ndarray, _: np.ndarray, heads: np.ndarray) -> np.ndarray:
            return np.maximum.reduceat(np.where(at_begin < 0, -1, at_begin + 1), heads)

        return self.fold(self._at_starts(-1, 0), most)[self.final]

    def _at_starts(self, fill: float, start: float) -> np.ndarray:
        values = np.full(self.nodes, fill, dtype=np.asarray(fill + start).dtype)
        values[self.start] = start
        return values


def running_thresholds(share: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """Each item's running total of ``share`` within its run (runs start at ``heads``), over the run's total, in
    units of ``2**-32`` (uint64); a run's last item is ``2**32`` exactly, so it takes whatever rounding left. Each
    run is summed on its own (a sum over every run before would lose the low bits of a late run's shares)."""
    if not share.size:
        return np.zeros(0, dtype=np.uint64)
    last = np.append(heads[1:], share.shape[0]) - 1  # each run's last item
    sizes = last - heads + 1
    running = share.astype(np.float64)
    for k in range(1, int(sizes.max())):  # the k-th item of every run that long, at once
        at = heads[sizes > k] + k
        running[at] += running[at - 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        fraction = running / np.repeat(running[last], sizes)
    threshold = np.minimum(np.round(np.nan_to_num(fraction, nan=0.0) * float(ONE)), float(ONE)).astype(np.uint64)
    threshold[last] = ONE
    return threshold
