"""LM blocks stored in plan order: where each block goes in the copy, and reading the copy's blocks.

``arrowmt order --tokens-per-sample`` stores the blocks of a monolingual split one after
another in the order a block batch plan reads them (the plan's blocks first, then those it
leaves out, by number). A block ``[start, end)`` of the original flat token sequence is
stored with the ``h`` tokens of its row before it (its row offset, at most ``HEADS``: what its
shifted source and past target read) as the pieces of the original rows that ``[start - h, end)``
covers: cut at every row start strictly inside (empty rows there are not stored: they start
no other place). So in the copy each block has the same tokens, the same tokens before it in
its row and the same row starts inside it, and the copy's block table (indexed by the
original block numbers, see :mod:`arrowmt.stored._block_order`) gives the same batches, ids
and samples. :class:`BlockRows` streams the copy's rows a chunk of blocks at a time (memory in
proportion to the blocks, not the rows); its arithmetic is pure numpy (:func:`cut_lengths`,
:func:`stored_starts`). :func:`arrowmt.blocks._block_plan.load_blocks` opens a copy's table for
the block options it was made for.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from arrowmt.blocks import BlockTable, TokenStream
from arrowmt.reading import Ragged, exclusive_cumsum


def cut_lengths(lengths: np.ndarray, cut_range: np.ndarray, cut_at: np.ndarray) -> np.ndarray:
    """The row lengths of ranges of ``lengths`` stored back to back, range ``cut_range[i]`` cut at ``cut_at[i]``
    (relative to its start, strictly inside it; pairs unique)."""
    base = exclusive_cumsum(lengths)
    bounds = np.sort(np.concatenate([base, base[cut_range] + cut_at]))
    return np.diff(np.append(bounds, int(lengths.sum())))


def stored_starts(starts: np.ndarray, ends: np.ndarray, heads: np.ndarray, before: int) -> np.ndarray:
    """Where blocks ``[starts, ends)`` start in the copy, stored in this order with their ``heads`` from ``before``."""
    return before + exclusive_cumsum(ends - starts + heads) + heads


class BlockRows:
    """The rows of a copy storing ``table``'s blocks in ``order`` (every block once), as a
    :class:`~arrowmt.format.RowSource` read ``chunk`` blocks at a time: each block's heads and tokens, cut at the
    row starts inside them. Counting its rows (one pass over the offsets the blocks cover) also gives the copy's
    block table: :attr:`starts`, :attr:`ends`, :attr:`offsets`, by block number."""

    def __init__(self, stream: TokenStream, table: BlockTable, order: np.ndarray, chunk: int) -> None:
        self.stream, self.table, self.order, self.chunk = stream, table, order, chunk
        count = order.shape[0]
        self.starts = np.empty(count, dtype=np.int64)
        self.ends = np.empty(count, dtype=np.int64)
        self.offsets = np.empty(count, dtype=np.uint8)
        self.tokens = self._rows = 0
        for part in self._parts():
            begin, ends, heads = self._ranges(part)
            self.starts[part] = stored_starts(begin + heads, ends, heads, self.tokens)
            self.ends[part] = self.starts[part] + (ends - begin - heads)
            self.offsets[part] = heads
            self._rows += part.shape[0] + self.stream.inner_row_starts(begin, ends)[0].shape[0]
            self.tokens += int((ends - begin).sum())

    def __len__(self) -> int:
        return self._rows

    def _parts(self) -> Iterator[np.ndarray]:
        for a in range(0, self.order.shape[0], self.chunk):
            yield self.order[a : a + self.chunk]

    def _ranges(self, part: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(first stored token, end, heads) of blocks ``part`` in the original's flat tokens."""
        starts, ends, heads = self.table.entries(part)  # heads at most HEADS: the table refuses more
        return starts - heads, ends, heads

    def _cut(self, begin: np.ndarray, ends: np.ndarray) -> np.ndarray:
        return cut_lengths(ends - begin, *self.stream.inner_row_starts(begin, ends))

    def lengths(self, block_rows: int) -> Iterator[np.ndarray]:
        for part in self._parts():
            begin, ends, _ = self._ranges(part)
            yield self._cut(begin, ends)

    def pieces(self, block_rows: int) -> Iterator[Ragged]:
        for part in self._parts():
            begin, ends, _ = self._ranges(part)
            yield Ragged.from_lengths(self._cut(begin, ends), self.stream.spans(begin, ends).compact().words)
