"""Rows located in a flat token array (``Spans``) and the checked, vectorized gather of them.

No Python loop runs per row or per token: a gather is one numpy fancy index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arrowmt._errors import InvalidParameterError


def as_spans(words: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``starts``/``lengths`` as int64 1-D arrays, checked to be rows inside ``words``."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    if words.ndim != 1:
        raise InvalidParameterError(f"words: expected a 1-D array, got shape {words.shape}")
    if starts.ndim != 1 or starts.shape != lengths.shape:
        raise InvalidParameterError(
            f"starts, lengths: expected two 1-D arrays of the same length, "
            f"got shapes {starts.shape} and {lengths.shape}"
        )
    if starts.size:
        _check_bounds(words.shape[0], starts, lengths)
    return starts, lengths


def _check_bounds(size: int, starts: np.ndarray, lengths: np.ndarray) -> None:
    if lengths.min() < 0:
        k = int(np.argmin(lengths))
        raise InvalidParameterError(f"lengths[{k}]: expected >= 0, got {int(lengths[k])}")
    if starts.min() < 0:
        k = int(np.argmin(starts))
        raise InvalidParameterError(f"starts[{k}]: expected >= 0, got {int(starts[k])}")
    ends = starts + lengths
    if ends.max() > size:
        k = int(np.argmax(ends))
        raise InvalidParameterError(f"starts[{k}] + lengths[{k}]: expected <= len(words) = {size}, got {int(ends[k])}")


def flat_positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Positions of every token of every row, rows concatenated in order (int64)."""
    first = np.zeros(lengths.shape[0], dtype=np.int64)
    np.cumsum(lengths[:-1], out=first[1:])
    return np.repeat(starts - first, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)


def take_flat(words: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The rows ``words[starts[i] : starts[i] + lengths[i]]`` concatenated, in the dtype of ``words``."""
    starts, lengths = as_spans(words, starts, lengths)
    return words[flat_positions(starts, lengths)]


@dataclass(frozen=True, eq=False)
class Spans:
    """Rows of one column: row ``i`` is ``words[starts[i] : starts[i] + lengths[i]]``.

    ``words`` is either a shard's whole memory-mapped int32 view (nothing
    copied) or a compact array holding just these rows. Pickling compacts it,
    so a whole file never travels between processes.
    """

    words: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    def select(self, order: np.ndarray) -> Spans:
        """The rows in ``order`` (a permutation or subset), still viewing the same ``words``."""
        return Spans(self.words, self.starts[order], self.lengths[order])

    def row(self, i: int) -> np.ndarray:
        """Row ``i`` as a view of ``words``."""
        start = int(self.starts[i])
        return self.words[start : start + int(self.lengths[i])]

    def compact(self) -> Spans:
        """The same rows gathered into a fresh array of exactly their tokens."""
        flat = take_flat(self.words, self.starts, self.lengths)
        return Spans(flat, exclusive_cumsum(self.lengths), self.lengths.copy())

    def __reduce__(self) -> tuple:
        small = self.compact()
        return (Spans, (small.words, small.starts, small.lengths))

    @classmethod
    def concat_compact(cls, parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Spans:
        """Rows from several ``(words, starts, lengths)`` parts, gathered into one compact array.

        One vectorized gather per part; rows keep the order of the parts.
        """
        flats = [take_flat(w, s, n) for w, s, n in parts]
        lengths = np.concatenate([np.asarray(n, dtype=np.int64) for _, _, n in parts])
        return cls(np.concatenate(flats), exclusive_cumsum(lengths), lengths)

    @classmethod
    def empty(cls) -> Spans:
        none = np.zeros(0, dtype=np.int64)
        return cls(np.zeros(0, dtype=np.int32), none, none)


def exclusive_cumsum(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(lengths.shape[0], dtype=np.int64)
    np.cumsum(lengths[:-1], out=out[1:])
    return out
