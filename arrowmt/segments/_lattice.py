"""A column's word lattices, and every occurrence's segmentation drawn afresh from its word's exact law.

Word ``w``'s lattice has nodes ``0 .. n_w`` (0 its start, ``n_w`` its end, every edge from a lower node to a higher
one) and edges ``(begin, end, piece, score)``, stored word after word, sorted by end node, then begin node: the
pieces are row ``w`` of the forms split (ids of the samples' dictionary); begin, end (uint16) and score (float32)
are in the side file ``lattice.<column>.bin`` (:data:`LATTICE_FORMAT`). A path's weight is ``scale`` times the sum
of its edges' scores, and a word's segmentation is drawn with probability ``exp(weight) / Z``:

* a unigram model (``scale = alpha``, scores the pieces' log probabilities, every piece of the model found in the
  word): sentencepiece's own law for ``encode(enable_sampling=True, alpha=alpha, nbest_size=-1)``, which draws
  each word of a sentence independently when no piece crosses a word start;
* a BPE model's pool of drawn forms (``scale = 1``, ``log(count)`` on each form's first edge): the pool's law;
* a word left as the corpus has it (a special symbol, ``<unk>``): one path.

Drawing is forward filtering, backward sampling, vectorized over the occurrences: from each word's end node, an
incoming edge is chosen in proportion to ``exp(forward(begin) + scale * score)``, then the same from its begin
node, until the start. The choice reads 32 random bits (:func:`arrowmt.segments._bits.step_bits`) against each
node's incoming edges' running shares (in units of ``2**-32``, the likeliest edge first): most steps read one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrowmt._errors import FormatError
from arrowmt.files import CheckedArray, SideFile, SideFormat, canonical_json, open_side_file
from arrowmt.reading import Ragged, exclusive_cumsum
from arrowmt.segments._bits import step_bits
from arrowmt.splits import Split

LATTICE_NAME = "lattice.{column}.bin"  # in the forms folder
REBUILD = "rebuild them with arrowmt.add_sampled_segmentations(corpus, spm_model, overwrite=True)"
LATTICE_FORMAT = SideFormat(  # fields: words, edges, the SHA-256 of the segmentation record; body: score, begin, end
    "lattice", b"ARROWMT-LATTICE\x00", 1, "QQ32s", REBUILD, cache=False
)
_ONE = np.uint64(1 << 32)


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
        offsets = exclusive_cumsum(top + 1)
        nodes = int(offsets[-1] + top[-1] + 1) if top.size else 0
        node = np.int32 if nodes < 2**31 else np.int64
        base = offsets.astype(node)[word]
        return cls(piece, base + begin.astype(node), base + end.astype(node), end, score,
                   offsets.astype(node), (offsets + top).astype(node), nodes)  # fmt: skip

    def by_end(self) -> list[np.ndarray]:
        """The edges ending at local node 1, 2, ... (each group increasing: their end nodes non-decreasing)."""
        order = np.argsort(self.local_end, kind="stable")
        ends = self.local_end[order]
        cuts = np.searchsorted(ends, np.arange(1, int(ends.max(initial=0)) + 2))
        return [order[cuts[t] : cuts[t + 1]] for t in range(cuts.shape[0] - 1) if cuts[t + 1] > cuts[t]]

    def forward(self, weight: np.ndarray) -> np.ndarray:
        """log of the summed ``exp(path weight)`` of the paths from its word's start to each node."""
        values = np.full(self.nodes, -np.inf)
        values[self.start] = 0.0
        for group in self.by_end():
            incoming = values[self.begin[group]] + weight[group]
            targets = self.end[group]
            heads = np.flatnonzero(np.r_[True, targets[1:] != targets[:-1]])
            top = np.maximum.reduceat(incoming, heads)
            shift = np.where(np.isfinite(top), top, 0.0)
            with np.errstate(divide="ignore"):
                total = np.log(np.add.reduceat(np.exp(incoming - np.repeat(shift, np.diff(np.r_[heads, len(group)]))),
                                               heads))  # fmt: skip
            values[targets[heads]] = np.where(np.isfinite(top), shift + total, -np.inf)
        return values

    def longest(self) -> np.ndarray:
        """The most edges on a path from each word's start to its end (int64 per word)."""
        values = np.full(self.nodes, -1, dtype=np.int64)
        values[self.start] = 0
        for group in self.by_end():
            incoming = values[self.begin[group]] + 1
            targets = self.end[group]
            heads = np.flatnonzero(np.r_[True, targets[1:] != targets[:-1]])
            values[targets[heads]] = np.maximum.reduceat(np.where(values[self.begin[group]] < 0, -1, incoming), heads)
        return values[self.final]


@dataclass(frozen=True)
class Law:
    """The lattices of one column under one scale, as a draw reads them: each node's incoming edges, the likeliest
    first, with the running total of their shares in units of ``2**-32`` (``threshold``: the last one of a node is
    ``2**32``); each edge's piece and begin node in that order; each node's first incoming edge."""

    threshold: np.ndarray  # uint64 per edge
    piece: np.ndarray  # int32 per edge
    begin: np.ndarray  # per edge (the node ids' type)
    first: np.ndarray  # per node (the node ids' type)
    start: np.ndarray  # each word's start node
    final: np.ndarray  # each word's end node

    @classmethod
    def of(cls, tables: LatticeTables, scale: float) -> Law:
        weight = scale * tables.score.astype(np.float64)
        forward = tables.forward(weight)
        with np.errstate(invalid="ignore", over="ignore"):
            share = np.exp(forward[tables.begin] + weight - forward[tables.end])
        share = np.nan_to_num(share, nan=0.0, posinf=0.0)
        order = np.lexsort((-share, tables.end))  # by end node, the likeliest incoming edge first
        share, end = share[order], tables.end[order]
        heads = np.flatnonzero(np.r_[True, end[1:] != end[:-1]]) if share.size else np.zeros(0, dtype=np.int64)
        sizes = np.diff(np.r_[heads, share.shape[0]])
        running = np.cumsum(share)
        before = np.repeat(np.r_[0.0, running][heads], sizes)
        total = np.repeat(np.r_[running[heads[1:] - 1], running[-1:]] - np.r_[0.0, running][heads], sizes)
        with np.errstate(invalid="ignore", divide="ignore"):
            fraction = np.nan_to_num((running - before) / total, nan=0.0)
        threshold = np.minimum(np.round(fraction * float(_ONE)), float(_ONE)).astype(np.uint64)
        threshold[np.r_[heads[1:], share.shape[0]] - 1] = _ONE  # a node's last edge takes whatever is left
        first = np.zeros(tables.nodes, dtype=np.int32 if share.shape[0] < 2**31 else np.int64)  # edge indices
        first[end[heads]] = heads
        return cls(threshold, tables.piece[order], tables.begin[order], first, tables.start, tables.final)

    def draw(self, words: np.ndarray, keys: np.ndarray) -> Ragged:
        """A segmentation of each occurrence of ``words`` (int64 word ids), drawn with the random bits of ``keys``
        (one uint64 per occurrence, :func:`arrowmt.segments._bits.occurrence_keys`): pieces, occurrence after
        occurrence. Each step walks the node's incoming edges, the likeliest first, until their running share
        passes the step's 32 random bits."""
        node, stop = self.final[words], self.start[words]
        active = np.flatnonzero(node != stop)
        chosen_of, pieces = [], []
        step = 0
        while active.size:
            bits = step_bits(keys[active], step)
            edge = self.first[node[active]]
            pending = np.flatnonzero(self.threshold[edge] <= bits)
            while pending.size:
                edge[pending] += 1
                pending = pending[self.threshold[edge[pending]] <= bits[pending]]
            chosen_of.append(active)
            pieces.append(self.piece[edge])
            node[active] = self.begin[edge]
            active = active[node[active] != stop[active]]
            step += 1
        lengths = np.zeros(words.shape[0], dtype=np.int64)
        for group in chosen_of:
            lengths[group] += 1
        offsets = np.zeros(words.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.empty(int(offsets[-1]), dtype=np.int32)
        for k, (group, piece) in enumerate(zip(chosen_of, pieces, strict=True)):
            values[offsets[group + 1] - 1 - k] = piece  # drawn from the end: step k is the k-th piece from the end
        return Ragged(offsets, values)
