"""A monolingual split as one flat token sequence (its rows concatenated), read straight from the maps.

Each record batch of each shard file holds its rows' tokens contiguously in the
file, so the flat sequence is a chain of "pieces", one per record batch: flat
positions ``[flat_start[p], flat_start[p + 1])`` are the words
``base[p] + (position - flat_start[p])`` of shard ``shard[p]``'s map. A range of
the flat sequence inside one piece is a view of the map; a range across pieces
(or shards) is gathered in one vectorized step per shard. Nothing here copies
more than the pieces' table (a few numbers per record batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arrowmt._arrays import sorted_unique
from arrowmt._errors import InvalidParameterError
from arrowmt.format import TOKENS
from arrowmt.io import WordRanges
from arrowmt.reading import Spans, exclusive_cumsum, flat_positions
from arrowmt.splits import Split
from arrowmt.stored import BLOCKS, refuse_stored_order


@dataclass(frozen=True)
class Segments:
    """Block ranges cut at piece boundaries: segment ``k`` is part of block ``block[k]``, in block order."""

    block: np.ndarray
    piece: np.ndarray
    start: np.ndarray  # flat position of the segment's first token
    length: np.ndarray

    def words_start(self, stream: TokenStream) -> np.ndarray:
        return stream.base[self.piece] + (self.start - stream.flat_start[self.piece])


def check_monolingual(split: Split) -> None:
    """InvalidParameterError unless ``split`` has the one column ``tokens`` (what LM blocks are made of)."""
    if tuple(split.columns) != (TOKENS,):
        raise InvalidParameterError(
            f"split: expected a monolingual split with the one column {TOKENS!r}, "
            f"got {list(split.columns)} in {split.path} split {split.split!r}"
        )


class TokenStream:
    """The ``tokens`` column of a monolingual :class:`Split` as one flat token sequence."""

    def __init__(self, split: Split, column: str = TOKENS) -> None:
        if column not in split.columns:
            raise InvalidParameterError(
                f"column: expected one of {list(split.columns)} in {split.path} split {split.split!r}, got {column!r}"
            )
        refuse_stored_order(split.manifest, split.path, "LM blocks read", reads=(BLOCKS,))
        self.split = split
        self.column = column
        self.words = [shard.words for shard in split.shards]
        self.remote = any(shard.remote is not None for shard in split.shards)  # tokens copied, fetched first
        counts: list[int] = []
        bases: list[int] = []
        shards: list[int] = []
        self.offsets: list[np.ndarray] = []  # each piece's row offsets (a view of its map)
        for number, shard in enumerate(split.shards):
            for batch in shard.batch_offsets(column):
                first = int(batch.offsets[0])
                counts.append(int(batch.offsets[-1]) - first)
                bases.append(batch.values_pos + first)
                shards.append(number)
                self.offsets.append(batch.offsets)
        self.flat_start = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(np.array(counts, dtype=np.int64), out=self.flat_start[1:])
        self.base = np.array(bases, dtype=np.int64)
        self.shard = np.array(shards, dtype=np.int64)
        self.first_offset = np.array([int(o[0]) for o in self.offsets], dtype=np.int64)
        pieces_per_shard = np.bincount(self.shard, minlength=len(split.shards))
        self.shard_first_piece = exclusive_cumsum(pieces_per_shard)

    @property
    def total(self) -> int:
        """Tokens in the whole split."""
        return int(self.flat_start[-1])

    def piece_of(self, positions: np.ndarray) -> np.ndarray:
        """The piece holding each flat position (positions in ``[0, total)``)."""
        return np.searchsorted(self.flat_start, positions, side="right") - 1

    # ---------------------------------------------------------------- ranges

    def segments(self, starts: np.ndarray, ends: np.ndarray) -> Segments:
        """Cut each range ``[starts[i], ends[i])`` at piece boundaries (an empty range keeps one empty segment)."""
        first = self.piece_of(np.minimum(starts, max(self.total - 1, 0)))
        last = np.maximum(self.piece_of(np.maximum(ends - 1, 0)), first)
        if np.array_equal(first, last):  # no range crosses a piece: one segment each
            return Segments(np.arange(starts.shape[0], dtype=np.int64), first, starts, ends - starts)
        count = last - first + 1
        block = np.repeat(np.arange(starts.shape[0], dtype=np.int64), count)
        within = np.arange(block.shape[0], dtype=np.int64) - np.repeat(exclusive_cumsum(count), count)
        piece = np.repeat(first, count) + within
        seg_start = np.maximum(starts[block], self.flat_start[piece])
        seg_end = np.minimum(ends[block], self.flat_start[piece + 1])
        return Segments(block, piece, seg_start, np.maximum(seg_end - seg_start, 0))

    def spans(self, starts: np.ndarray, ends: np.ndarray) -> Spans:
        """The ranges as rows of a :class:`Spans`: views of one map when none crosses a piece, else gathered."""
        seg = self.segments(starts, ends)
        shards = self.shard[seg.piece]
        one_shard = len(self.words) == 1 or shards.size == 0 or bool((shards == shards[0]).all())
        if seg.block.shape[0] == starts.shape[0] and one_shard and not self.remote:
            words = self.words[int(shards[0])] if shards.size else np.zeros(0, dtype=np.int32)
            return Spans(words, seg.words_start(self), seg.length)
        return self._gathered(seg, shards, ends - starts)

    def _gathered(self, seg: Segments, shards: np.ndarray, lengths: np.ndarray) -> Spans:
        """The segments' tokens copied into one array in block order: one gather per shard."""
        out = np.empty(int(lengths.sum()), dtype=np.int32)
        into = exclusive_cumsum(seg.length)
        source = seg.words_start(self)
        for k in sorted_unique(shards).tolist():
            sel = np.flatnonzero(shards == k)
            n = seg.length[sel]
            out[flat_positions(into[sel], n)] = self.split.shards[k].copy_words(source[sel], n)
        return Spans(out, exclusive_cumsum(lengths), lengths)

    def word_ranges(self, starts: np.ndarray, ends: np.ndarray) -> list[WordRanges]:
        """Where the flat ranges ``[starts[i], ends[i])`` lie in the shard maps, for read-ahead."""
        seg = self.segments(starts, ends)
        where, shards = seg.words_start(self), self.shard[seg.piece]
        out = []
        for k in sorted_unique(shards).tolist():
            sel = shards == k
            out.append(self.split.shards[k].ranges(where[sel], seg.length[sel]))
        return out

    def tokens_at(self, positions: np.ndarray) -> np.ndarray:
        """The token at each flat position in ``[0, total)`` (int32), one gather per shard."""
        piece = self.piece_of(positions)
        where = self.base[piece] + (positions - self.flat_start[piece])
        shards = self.shard[piece]
        if len(self.words) == 1 and not self.remote:
            return self.words[0][where]
        out = np.empty(positions.shape, dtype=np.int32)
        for k in sorted_unique(shards).tolist():
            sel = shards == k
            out[sel] = self.split.shards[k].copy_words(where[sel], np.ones(int(sel.sum()), dtype=np.int64))
        return out

    # ---------------------------------------------------------------- rows

    def inner_row_starts(self, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Row starts strictly inside each range: (range index, position relative to its start), sorted, unique."""
        seg = self.segments(starts, ends)
        blocks = [seg.block[seg.start > starts[seg.block]]]  # a piece boundary inside a range starts a row
        positions = [seg.start[seg.start > starts[seg.block]]]
        seg_end = seg.start + seg.length
        for p in sorted_unique(seg.piece).tolist():
            sel = np.flatnonzero(seg.piece == p)
            shift = self.first_offset[p] - self.flat_start[p]
            offsets = self.checked_offsets(p)
            low = np.searchsorted(offsets, seg.start[sel] + shift, side="right")
            high = np.searchsorted(offsets, seg_end[sel] + shift, side="left")
            count = np.maximum(high - low, 0)
            blocks.append(np.repeat(seg.block[sel], count))
            positions.append(offsets[flat_positions(low, count)].astype(np.int64) - shift)
        block = np.concatenate(blocks)
        relative = np.concatenate(positions) - starts[block]
        order = np.lexsort((relative, block))
        block, relative = block[order], relative[order]
        keep = np.ones(block.shape[0], dtype=bool)
        keep[1:] = (block[1:] != block[:-1]) | (relative[1:] != relative[:-1])
        return block[keep], relative[keep]

    def checked_offsets(self, piece: int) -> np.ndarray:
        """The row offsets of ``piece`` (a record batch), its offsets checksum checked on first use."""
        shard = int(self.shard[piece])
        self.split.shards[shard].offset_checks.ensure_one(self.column, piece - int(self.shard_first_piece[shard]))
        return self.offsets[piece]

    def row_ranges(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flat (start, end) of each row (global row indices), bounds-checked."""
        shard, local = self.split.locate(np.asarray(rows, dtype=np.int64))
        starts = np.empty(shard.shape, dtype=np.int64)
        lengths = np.empty(shard.shape, dtype=np.int64)
        for k in sorted_unique(shard).tolist():
            sel = shard == k
            part = self.split.shards[k]
            where, n = part.spans(self.column, local[sel])
            piece = self.shard_first_piece[k] + local[sel] // part.rows_per_batch
            starts[sel] = self.flat_start[piece] + (where - self.base[piece])
            lengths[sel] = n
        return starts, starts + lengths

    def row_lengths(self) -> np.ndarray:
        """Every row's token count, from the offsets (int32)."""
        return self.split.lengths(self.column, dtype=np.int32)
