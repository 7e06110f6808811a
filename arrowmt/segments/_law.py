"""A column's law as a draw reads it, and every occurrence's segmentation drawn afresh from its word's exact law.

The draw is forward filtering, backward sampling: from the word's end node, an incoming edge is chosen in
proportion to ``exp(forward(begin) + scale * score)``, then the same from its begin node, until the start. Each
choice reads 32 random bits (:func:`arrowmt.segments._bits.step_bits`) against the node's incoming edges' running
shares (in units of ``2**-32``, the likeliest edge first): most steps read one. A path is drawn with probability
``exp(weight) / Z`` up to the rounding of shares to ``2**-32``.

Blocks of at least :data:`KERNEL_OCCURRENCES` word occurrences are drawn by the compiled kernel where numba is
installed (:mod:`arrowmt.segments._kernel`), their rows cut among one thread per CPU (the kernel holds no GIL);
smaller ones, and all where numba is missing, by the same walk vectorized over the occurrences (:meth:`Law.walk`);
every way gives the same bytes.
"""

from __future__ import annotations

import functools
import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from arrowmt.reading import Ragged
from arrowmt.segments._bits import CONSTANTS, occurrence_keys, step_bits
from arrowmt.segments._lattice import LatticeTables, running_thresholds

ROWS_A_THREAD = 4096  # rows a drawing thread takes at once (one part: drawn in the caller's thread)
KERNEL_OCCURRENCES = 1 << 20  # fewer occurrences are drawn vectorized (faster than loading numba for them)


@dataclass(frozen=True)
class Law:
    """The lattices of one column under one scale, as a draw reads them: each node's incoming edges, the likeliest
    first, with the running total of their shares in units of ``2**-32`` (``threshold``: the last one of a node is
    ``2**32``); each edge's piece and begin node in that order; each node's first incoming edge; each word's start
    and end node, and the most pieces a draw of it can take."""

    threshold: np.ndarray  # uint64 per edge
    piece: np.ndarray  # int32 per edge
    begin: np.ndarray  # per edge (the node ids' type)
    first: np.ndarray  # per node (the node ids' type)
    start: np.ndarray  # each word's start node
    final: np.ndarray  # each word's end node
    longest: np.ndarray  # each word's most pieces (int64)

    @classmethod
    def of(cls, tables: LatticeTables, scale: float) -> Law:
        weight = scale * tables.score.astype(np.float64)
        forward = tables.forward(weight)
        with np.errstate(invalid="ignore", over="ignore"):
            share = np.exp(forward[tables.begin] + weight - forward[tables.end])
        share = np.nan_to_num(share, nan=0.0, posinf=0.0)
        order = np.argsort(tables.end + 0.5 * (1.0 - share), kind="stable")  # by end node, the likeliest first
        share, end = share[order], tables.end[order]
        heads = np.flatnonzero(np.r_[True, end[1:] != end[:-1]]) if share.size else np.zeros(0, dtype=np.int64)
        threshold = running_thresholds(share, heads)
        first = np.zeros(tables.nodes, dtype=np.int32 if share.shape[0] < 2**31 else np.int64)  # edge indices
        first[end[heads]] = heads
        return cls(threshold, tables.piece[order], tables.begin[order], first, tables.start, tables.final,
                   tables.longest)  # fmt: skip

    def draw_rows(self, rows: np.ndarray, counts: np.ndarray, words: np.ndarray, key: np.uint64, *,
                  pieces: bool = True) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Rows ``rows`` (``counts[i]`` words each, their ids ``words``, rows after rows) drawn under the epoch
        ``key``: their pieces (int32, empty when not ``pieces``) and each row's number of pieces (int64)."""
        kernel, key = compiled() if len(words) >= KERNEL_OCCURRENCES else None, np.uint64(key)
        if kernel is None:
            drawn = self.walk(words, occurrence_keys(key, rows, counts))
            return (drawn.values if pieces else drawn.values[:0]), row_sums(drawn.lengths(), counts)
        rows, counts = np.asarray(rows, dtype=np.int64), np.asarray(counts, dtype=np.int64)
        words = np.asarray(words, dtype=np.int64)
        first = np.zeros(rows.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=first[1:])

        def part(a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
            ids = words[first[a] : first[b]]
            out = np.empty(int(self.longest[ids].sum()) if pieces else 0, dtype=np.int32)
            args = (self.final, self.start, self.first, self.threshold, self.piece, self.begin, out, CONSTANTS)
            lengths = kernel.draw_rows(rows[a:b], counts[a:b], ids, key, *args)
            return out[: int(lengths.sum())], lengths

        cuts = np.append(np.arange(0, max(rows.shape[0], 1), ROWS_A_THREAD), rows.shape[0])  # each part's buffer small
        threads = min(cpus(), cuts.shape[0] - 1)
        if threads == 1:
            parts = [part(a, b) for a, b in itertools.pairwise(cuts)]
        else:
            with ThreadPoolExecutor(threads, "arrowmt-draw") as pool:  # its threads end with the call
                parts = list(pool.map(part, cuts[:-1], cuts[1:]))
        if len(parts) == 1:
            return parts[0][0].copy(), parts[0][1]  # not a view keeping the buffer sized for the longest draws
        return np.concatenate([v for v, _ in parts]), np.concatenate([n for _, n in parts])

    def walk(self, words: np.ndarray, keys: np.ndarray) -> Ragged:
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


def cpus() -> int:
    """The CPUs this process may run on (all of the machine's where the system does not say)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@functools.cache
def compiled() -> ModuleType | None:
    """The compiled draw (:mod:`arrowmt.segments._kernel`), or None where numba is not installed."""
    try:
        from arrowmt.segments import _kernel
    except ModuleNotFoundError as exc:
        if exc.name != "numba":
            raise
        return None
    return _kernel


def row_sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The sum of each row of ``values`` cut into consecutive rows of ``lengths`` (empty rows sum to 0; int64 for
    integers and booleans, float64 for floats)."""
    total = np.zeros(values.shape[0] + 1, dtype=np.result_type(values.dtype, np.int64))
    np.cumsum(values, out=total[1:])
    ends = np.cumsum(lengths, dtype=np.int64)
    return total[ends] - total[ends - lengths]
